//! `nodewright simulate` with no workload: the scripted demo (a burst of pods, batch
//! jobs for the Proxmox group, a cache for the Kamatera group, nodes ageing out, a
//! scale-down) replayed through the real loop against the in-memory world, in virtual
//! time: two minutes of story in well under a second, printed as a timeline of what
//! happened and why. `simulate --real-time` runs the same story over HTTP against the
//! simulated API server and clouds.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use super::replay::{replay_with, Step};
use super::report::render_table;
use super::workload::{PodKind, WorkloadRow};
use super::world::{Census, Ms, World, WorldOptions};
use crate::config::Config;
use crate::plan::Action;

const GI_MIB: u64 = 1024;

/// The demo's config: short durations so the story fits in two minutes; three groups
/// on three providers. The real-time demo (`simulate --real-time`) runs it too.
pub(crate) const DEMO_CONFIG: &str = r#"clusterName: demo
freeMemoryTarget: 2 GiB
minimumFreeNodeMemory: 1 GiB
oldNodeAgeLimit: 90s
provisionTimeout: 60s
scanInterval: 1s
scaleDown: {delayAfterAdd: 15s, unneededTime: 10s}
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 1
    maxSize: 6
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables:
        k3s_url: https://192.0.2.10:6443
        k3s_token: demo-join-token
  # Batch jobs go to Proxmox VE: cloned from a template, joined through the guest agent.
  - name: batch
    provider: proxmox
    maxSize: 3
    proxmox: {template: agent-shared, memory: 8 GiB, cores: 4, join: guestAgent}
    userData:
      template: k3s-agent.join.sh.j2
      variables: {k3s_url: "https://192.0.2.10:6443", k3s_token: demo-join-token}
    labels: {workload: batch}
    taints: [{key: dedicated, value: batch, effect: NoSchedule}]
  # The cache runs on Kamatera.
  - name: cache
    provider: kamatera
    maxSize: 2
    kamatera: {datacenter: EU, image: ubuntu_server_24.04_64-bit, cpu: 2B, ram: 8 GiB}
    userData:
      template: k3s-agent.join.sh.j2
      variables: {k3s_url: "https://192.0.2.10:6443", k3s_token: demo-join-token}
    labels: {workload: cache}
"#;

/// The story ends here.
const END_S: u64 = 120;
/// VMs boot this fast in the demo (the config's durations are compressed too).
const BOOT: Duration = Duration::from_secs(3);

fn row(at: u64, name: &str, mem_mib: u64, until: u64, kind: PodKind) -> WorkloadRow {
    let image = match name {
        "web" => Some("nginx:1.25".to_string()),
        "cache" => Some("redis:7".to_string()),
        _ => None,
    };
    WorkloadRow {
        line: 0,
        arrival_ms: at * 1000,
        name: name.to_string(),
        cpu_m: 100,
        mem_mib,
        duration_s: until.saturating_sub(at),
        kind,
        node_selector: BTreeMap::new(),
        gpu: 0,
        priority: 0,
        image,
        local_volume: false,
    }
}

fn selecting(mut r: WorkloadRow, group: &str) -> WorkloadRow {
    r.node_selector.insert("workload".into(), group.into());
    r
}

/// The pods of the story, and what the scenario says when.
fn script() -> (Vec<WorkloadRow>, Vec<(u64, String)>) {
    let mut rows = Vec::new();
    let mut say = vec![(
        0,
        "an empty cluster; group workers has minSize 1".to_string(),
    )];
    // 8 web pods at 6 s; scaled down to 3 at 70 s (5 go then).
    for i in 0..8 {
        let until = if i < 3 { 10 * END_S } else { 70 };
        rows.push(row(6, "web", 3 * GI_MIB / 2, until, PodKind::Deployment));
    }
    say.push((6, "8 pods of web (1.5 GiB each) arrive".into()));
    for _ in 0..4 {
        rows.push(selecting(
            row(14, "batch", GI_MIB, 34, PodKind::Job),
            "batch",
        ));
    }
    say.push((
        14,
        "4 batch pods (1 GiB each, nodeSelector workload=batch: the Proxmox group) that finish after 20s"
            .into(),
    ));
    for _ in 0..2 {
        rows.push(selecting(
            row(28, "cache", GI_MIB, 10 * END_S, PodKind::Deployment),
            "cache",
        ));
    }
    say.push((
        28,
        "2 pods of cache (1 GiB each, nodeSelector workload=cache: the Kamatera group) arrive"
            .into(),
    ));
    say.push((70, "web scaled down to 3 pods".into()));
    (rows, say)
}

fn stamp(t: Ms) -> String {
    format!("[{:>6.1}s]", t as f64 / 1000.0)
}

fn describe(c: &Census) -> String {
    format!(
        "{} node(s): {} ready, {} cordoned | pods: {} running, {} pending, {} finished",
        c.nodes, c.ready, c.cordoned, c.running, c.pending, c.finished
    )
}

/// `created VM <asked> (<id>) ...` with the name the world gave the VM.
fn created_as(line: &str, world: &World) -> String {
    let named = line.strip_prefix("created VM ").and_then(|rest| {
        let (asked, rest) = rest.split_once(" (")?;
        let (id, _) = rest.split_once(')')?;
        let name = world.vm_name(id)?;
        Some(line.replacen(asked, &name, 1))
    });
    named.unwrap_or_else(|| line.to_string())
}

/// Runs the demo; returns the timeline and the summary to print.
pub async fn run() -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    for (name, text) in crate::env::SHIPPED_TEMPLATES {
        std::fs::write(dir.path().join(name), text)?;
    }
    let yaml = format!("templatesDir: {}\n{DEMO_CONFIG}", dir.path().display());
    let config = Arc::new(Config::parse(&yaml, dir.path())?);
    let (rows, mut say) = script();
    say.reverse();
    let options = WorldOptions {
        boot_delay: BOOT,
        ..WorldOptions::default()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "nodewright simulate: the real loop against an in-memory cluster and clouds, in virtual time"
    );
    let _ = writeln!(out, "  node groups: workers on OpenStack (m1.large, 8 GiB, minSize 1), batch on Proxmox VE, cache on Kamatera");
    let _ = writeln!(out, "  freeMemoryTarget 2 GiB, minimumFreeNodeMemory 1 GiB, oldNodeAgeLimit 90s, scale-down 15s after the last add; VMs boot in {}s", BOOT.as_secs());
    let _ = writeln!(
        out,
        "  (`simulate --real-time`: the same story over HTTP against the simulated API server and clouds)\n"
    );
    let mut last_state = String::new();
    let mut observe = |step: Step<'_>| {
        while say.last().is_some_and(|(at, _)| *at * 1000 <= step.t) {
            if let Some((at, text)) = say.pop() {
                let _ = writeln!(out, "{} {:<22} {text}", stamp(at * 1000), "scenario");
            }
        }
        match step.cycle {
            Ok(c) if c.decision.action != Action::None => {
                let d = &c.decision;
                let _ = writeln!(
                    out,
                    "{} {:<22} {}",
                    stamp(step.t),
                    d.action.kind(),
                    d.action
                );
                for r in &d.reasons {
                    let _ = writeln!(out, "{:>30} {}", "because", r.message);
                }
                match &c.result {
                    Ok(o) => {
                        for line in o.done.iter().chain(&o.deferred) {
                            let line = created_as(line, step.world);
                            let _ = writeln!(out, "{:>30} {line}", "->");
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(out, "{:>30} failed (retried next cycle): {e}", "->");
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                let _ = writeln!(
                    out,
                    "{} cycle failed (retried next cycle): {e}",
                    stamp(step.t)
                );
            }
        }
        let state = describe(&step.world.census());
        if state != last_state {
            let _ = writeln!(out, "{} {:<22} {state}", stamp(step.t), "cluster");
            last_state = state;
        }
    };
    let r = replay_with(
        config,
        "demo",
        rows,
        &options,
        Some(END_S * 1000),
        &mut observe,
    )
    .await?;
    let census = r.census;
    let _ = writeln!(out, "\nend of scenario after {END_S}s (virtual)");
    let _ = writeln!(out, "  {}", describe(&census));
    let parts: Vec<String> = census
        .by_name
        .iter()
        .map(|(name, c)| {
            format!(
                "{name} {} running, {} pending, {} finished",
                c.running, c.pending, c.finished
            )
        })
        .collect();
    let _ = writeln!(out, "  workloads: {}", parts.join("; "));
    let _ = writeln!(
        out,
        "\nthe what-if figures of this run (`simulate --workload` gives them for any workload):"
    );
    out.push_str(&render_table(&[&r.report]));
    Ok(out)
}
