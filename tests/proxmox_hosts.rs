//! Proxmox host capacity, placement and per-host templates against the simulated Proxmox
//! VE over loopback HTTP (every request checked against the official API schema).

use nodewright_testkit as common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::pve::{self as e2e, provider_with, sim_with, token_creds};
use nodewright::cloud::proxmox::ProxmoxProvider;
use nodewright::cloud::{CloudProvider, CreateRequest};
use nodewright::plan::ReasonCode;
use nodewright::sim::proxmox::{SimHost, SimProxmox, SimProxmoxOptions, SimTemplate};

const GIB: u64 = 1 << 30;

fn template(vmid: u32, name: &str, node: &str, storage: &str) -> SimTemplate {
    SimTemplate {
        vmid,
        name: name.into(),
        node: node.into(),
        storage: storage.into(),
        memory_mib: 4096,
        cores: 2,
        cloud_init_join: false,
    }
}

async fn sim(hosts: Vec<SimHost>, templates: Vec<SimTemplate>) -> SimProxmox {
    sim_with(SimProxmoxOptions {
        hosts,
        templates,
        ..SimProxmoxOptions::default()
    })
    .await
}

fn provider(s: &SimProxmox, groups: &[(&str, &str)]) -> ProxmoxProvider {
    provider_with(token_creds(s), groups)
}

fn req(n: usize, group: &str) -> CreateRequest {
    CreateRequest {
        name: format!("prod-{group}-{n:05}"),
        cluster: "prod".into(),
        group: group.into(),
        user_data: String::new(),
        size: None,
        settings_hash: String::new(),
        zone: None,
    }
}

/// Creates `n` VMs of `group` one after another: the hosts they landed on, and the errors.
async fn create_many(
    s: &SimProxmox,
    p: &ProxmoxProvider,
    group: &str,
    n: usize,
) -> (Vec<String>, Vec<String>) {
    let (mut hosts, mut errors) = (Vec::new(), Vec::new());
    for i in 0..n {
        match p.create_server(&req(i, group)).await {
            Ok(v) => hosts.push(
                s.vms()
                    .into_iter()
                    .find(|x| x.vmid.to_string() == v.id)
                    .map(|x| x.node)
                    .unwrap_or_default(),
            ),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (hosts, errors)
}

fn count(hosts: &[String], h: &str) -> usize {
    hosts.iter().filter(|x| *x == h).count()
}

fn assert_clean(s: &SimProxmox) {
    let v = s.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

/// Configured vCPUs and MiB of the guests on each host.
fn configured(s: &SimProxmox) -> BTreeMap<String, (u64, u64)> {
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for v in s.guests() {
        let get = |k: &str| v.config.get(k).and_then(|x| x.parse::<u64>().ok());
        let e = out.entry(v.node.clone()).or_default();
        e.0 += get("cores").unwrap_or(1);
        e.1 += get("memory").unwrap_or(512);
    }
    out
}

#[tokio::test]
async fn hosts_of_different_sizes_are_never_filled_beyond_the_ratios() {
    let s = sim(
        vec![
            SimHost::new("big", 16, 64 * GIB),
            SimHost::new("small", 4, 16 * GIB),
        ],
        vec![template(9001, "k3s-shared", "big", "ceph")],
    )
    .await;
    // Someone else's VM (2 vCPUs, 4 GiB) already on big.
    s.insert_vm("big", "database", "", None);
    let group = "template: k3s-shared\ncores: 4\nmemory: 8 GiB\novercommit: {cpu: 2.0, memory: 1.0}\nreserve: {memory: 4 GiB}\n";
    let p = provider(&s, &[("g", group)]);
    // big: (16 × 2 − 2) / 4 = 7 by CPU, (64 − 4 − 4) / 8 = 7 by memory; small: 8 / 4 = 2
    // by CPU, (16 − 4) / 8 = 1 by memory. Eight in all, however many are asked for.
    let (hosts, errors) = create_many(&s, &p, "g", 12).await;
    assert_eq!(hosts.len(), 8, "{hosts:?} {errors:?}");
    assert_eq!((count(&hosts, "big"), count(&hosts, "small")), (7, 1));
    assert!(
        errors.iter().all(|e| e.contains("full")),
        "each refusal says why: {errors:?}"
    );
    for (host, cpus, mem_gib) in [("big", 16u64, 64u64), ("small", 4, 16)] {
        let (vcpus, mib) = configured(&s).get(host).copied().unwrap_or_default();
        assert!(vcpus <= cpus * 2, "{host}: {vcpus} vCPUs");
        assert!(mib <= (mem_gib - 4) * 1024, "{host}: {mib} MiB");
    }
    // The planner's picture agrees: no room left for the group.
    let seen = p.observe("prod", &["g".into()]).await.expect("observe");
    let shape = &seen.shapes["g"];
    let hosts = shape.hosts.as_ref().expect("hosts in the shape");
    let vm = nodewright::model::VmSize {
        cpu_milli: shape.cpu_milli.unwrap_or(0),
        memory: shape.memory.unwrap_or(0),
    };
    assert!(hosts.plan(vm, 10).is_empty(), "{hosts:#?}");
    assert_eq!(shape.region.as_deref(), Some("pve-sim"));
    assert_clean(&s);
}

#[tokio::test]
async fn max_per_host_holds_over_many_scale_ups() {
    let s = sim(
        SimProxmoxOptions::default().hosts,
        SimProxmoxOptions::default().templates,
    )
    .await;
    let p = provider(&s, &[("g", "template: k3s-shared\nmaxPerHost: 2\n")]);
    let (first, _) = create_many(&s, &p, "g", 3).await;
    for h in ["pve1", "pve2", "pve3"] {
        assert_eq!(count(&first, h), 1, "balanced first: {first:?}");
    }
    let (more, errors) = create_many(&s, &p, "g", 6).await;
    assert_eq!(more.len(), 3, "{more:?}");
    assert_eq!(errors.len(), 3);
    assert!(
        errors.iter().all(|e| e.contains("maxPerHost 2")),
        "{errors:?}"
    );
    let all: Vec<String> = first.into_iter().chain(more).collect();
    for h in ["pve1", "pve2", "pve3"] {
        assert_eq!(count(&all, h), 2, "{all:?}");
    }
    assert_clean(&s);
}

#[tokio::test]
async fn offline_and_maintenance_hosts_are_skipped() {
    let mut down = SimHost::new("down", 64, 256 * GIB);
    down.online = false;
    let mut maint = SimHost::new("maint", 64, 256 * GIB);
    maint.maintenance = true;
    let s = sim(
        vec![down, maint, SimHost::new("up", 8, 32 * GIB)],
        vec![template(9001, "k3s-shared", "up", "ceph")],
    )
    .await;
    let p = provider(
        &s,
        &[
            ("g", "template: k3s-shared\n"),
            ("elsewhere", "template: k3s-shared\nnodes: [down, maint]\n"),
        ],
    );
    let (hosts, errors) = create_many(&s, &p, "g", 4).await;
    assert_eq!(hosts, vec!["up"; 4], "{errors:?}");
    let e = p
        .create_server(&req(9, "elsewhere"))
        .await
        .expect_err("no host");
    let e = e.to_string();
    assert!(
        e.contains("down is offline") && e.contains("maint is in maintenance"),
        "{e}"
    );
    assert_clean(&s);
}

/// The `POST .../clone` calls: (host in the path, template VM id, `target` if any).
fn clones(s: &SimProxmox) -> Vec<(String, String, Option<String>)> {
    s.calls()
        .into_iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/clone"))
        .map(|c| {
            let parts: Vec<&str> = c.path.split('/').collect();
            let target = c
                .params
                .iter()
                .find(|(k, _)| k == "target")
                .map(|(_, v)| v.clone());
            (parts[2].to_string(), parts[4].to_string(), target)
        })
        .collect()
}

#[tokio::test]
async fn a_template_on_local_storage_is_cloned_on_the_host_that_has_it() {
    // One copy of k3s-local on pve1's and one on pve2's local storage; none on pve3.
    let s = sim(
        SimProxmoxOptions::default().hosts,
        vec![
            template(9000, "k3s-local", "pve1", "local-lvm"),
            template(9010, "k3s-local", "pve2", "local-lvm"),
        ],
    )
    .await;
    let p = provider(&s, &[("g", "template: k3s-local\n")]);
    let (hosts, errors) = create_many(&s, &p, "g", 4).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!((count(&hosts, "pve1"), count(&hosts, "pve2")), (2, 2));
    for (host, vmid, target) in clones(&s) {
        let expected = if host == "pve1" { "9000" } else { "9010" };
        assert_eq!(vmid, expected, "each host clones its own copy");
        assert_eq!(target, None, "a local copy is cloned where it is");
    }
    assert_clean(&s);
}

#[tokio::test]
async fn a_template_by_tag_is_found_per_host() {
    let s = sim(
        SimProxmoxOptions::default().hosts,
        vec![
            template(9020, "ubuntu-a", "pve1", "local-lvm"),
            template(9021, "ubuntu-b", "pve3", "local-lvm"),
            template(9022, "untagged", "pve2", "local-lvm"),
            template(9023, "ubuntu-c", "pve1", "local-lvm"),
        ],
    )
    .await;
    s.set_config(9020, "tags", "k8s-1-30");
    s.set_config(9021, "tags", "golden;k8s-1-30");
    let p = provider(&s, &[("g", "template: {tag: k8s-1-30}\n")]);
    let (hosts, errors) = create_many(&s, &p, "g", 4).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!((count(&hosts, "pve1"), count(&hosts, "pve3")), (2, 2));
    for (host, vmid, target) in clones(&s) {
        assert_eq!(vmid, if host == "pve1" { "9020" } else { "9021" });
        assert_eq!(target, None);
    }
    // Two tagged templates on one host cannot be told apart: refused, naming both.
    s.set_config(9023, "tags", "k8s-1-30");
    let e = p.create_server(&req(7, "g")).await.expect_err("ambiguous");
    assert!(
        e.to_string().contains("ambiguous") && e.to_string().contains("9023"),
        "{e}"
    );
    assert_clean(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_zone_and_region_labels_land_on_the_new_nodes() {
    let env = e2e::env().await;
    let groups = e2e::group("ga", 2, "{template: agent-shared, join: guestAgent}");
    let rec = e2e::reconciler(&env, &groups).await;
    let joined = || {
        env.cluster
            .nodes()
            .into_iter()
            .filter(e2e::ready_joined)
            .filter(|n| {
                n.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("e2e-"))
            })
            .collect::<Vec<_>>()
    };
    e2e::drive(&rec, Duration::from_secs(30), || joined().len() == 2).await;
    let mut zones = Vec::new();
    for n in joined() {
        let name = n.metadata.name.clone().unwrap_or_default();
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let host = env
            .pve
            .guests()
            .into_iter()
            .find(|v| v.name == name)
            .map(|v| v.node)
            .expect("its VM");
        assert_eq!(
            labels.get("topology.kubernetes.io/zone"),
            Some(&host),
            "{name}: {labels:?}"
        );
        assert_eq!(
            labels
                .get("topology.kubernetes.io/region")
                .map(String::as_str),
            Some("pve-sim")
        );
        zones.push(host);
    }
    zones.sort();
    zones.dedup();
    assert_eq!(zones.len(), 2, "spread over two hypervisors: {zones:?}");
    assert_clean(&env.pve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_the_plan_stops_at_what_the_hosts_hold_and_says_so() {
    let env = e2e::env_with(SimProxmoxOptions {
        hosts: vec![SimHost::new("solo", 4, 16 * GIB)],
        templates: vec![template(9002, "agent-shared", "solo", "ceph")],
        ..SimProxmoxOptions::default()
    })
    .await;
    // minSize 3, but 4 CPUs at 1:1 hold two VMs of 2 vCPUs.
    let groups = e2e::group(
        "ga",
        3,
        "{template: agent-shared, join: guestAgent, cores: 2, memory: 4 GiB, overcommit: {cpu: 1.0, memory: 1.0}}",
    );
    let rec = e2e::reconciler(&env, &groups).await;
    e2e::drive(&rec, Duration::from_secs(30), || {
        env.pve.guests().len() == 2
    })
    .await;
    let mut said = false;
    for _ in 0..3 {
        let r = rec
            .cycle(std::time::SystemTime::now())
            .await
            .expect("cycle");
        said |= r.decision.has_reason(ReasonCode::HostsFull);
        assert!(
            !matches!(r.decision.action, nodewright::plan::Action::ScaleUp { .. }),
            "{:?}",
            r.decision
        );
    }
    assert!(said, "the plan says the hosts are full");
    assert_eq!(env.pve.guests().len(), 2);
    assert_clean(&env.pve);
}
