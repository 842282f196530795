//! The example configs in `config/` each pass `nodewright check --offline`, and the warm
//! pool and task-deadline settings are validated with clear errors.

use nodewright_testkit as common;

use std::process::Command;
use std::time::Duration;

use common::repo;
use nodewright::config::{Config, ScaleDownMode};

#[test]
fn every_file_in_config_passes_check_offline() {
    let dir = repo().join("config");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("config/ exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
        .collect();
    for want in [
        "proxmox.yaml",
        "openstack.yaml",
        "kamatera.yaml",
        "hybrid.yaml",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "config/{want} missing: {names:?}"
        );
    }
    for file in &files {
        let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
            .arg("--config")
            .arg(file)
            .args(["check", "--offline"])
            .output()
            .expect("run nodewright");
        assert!(
            out.status.success(),
            "{}: {}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_proxmox_and_hybrid_examples_show_warm_pools() {
    let c = Config::load(&repo().join("config/proxmox.yaml")).expect("loads");
    assert_eq!(c.node_groups[0].warm_pool_size(), 2);
    assert_eq!(c.scale_down.mode, ScaleDownMode::Stop);
    assert_eq!(c.provision_deadline_max(), Duration::from_secs(40 * 60));
    let c = Config::load(&repo().join("config/hybrid.yaml")).expect("loads");
    let providers: Vec<&str> = c.node_groups.iter().map(|g| g.provider.as_str()).collect();
    assert_eq!(providers, ["proxmox", "openstack", "kamatera"]);
    assert_eq!(c.node_groups[0].warm_pool_size(), 2);
    // Unset, provisionTimeoutMax is three times provisionTimeout.
    let c = Config::load(&repo().join("config/openstack.yaml")).expect("loads");
    assert_eq!(c.provision_timeout_max, None);
    assert_eq!(c.provision_deadline_max(), 3 * c.provision_timeout);
}

const POOL: &str = r#"
clusterName: dev
freeMemoryTarget: 1 GiB
provisionTimeout: 15m
templatesDir: templates
scaleDown: {mode: stop}
nodeGroups:
- name: pve
  provider: proxmox
  maxSize: 4
  warmPool: {size: 2}
  proxmox: {template: k3s}
  userData:
    template: k3s-agent.cloud-init.yaml.j2
    variables: {k3s_url: "https://10.0.0.1:6443", k3s_token: "t"}
"#;

#[test]
fn every_bad_warm_pool_setting_gets_its_own_clear_error() {
    Config::parse(POOL, &repo()).expect("the base config is valid");
    // (case, replace this, with this, expected path, fragments of the message)
    let cases: &[(&str, &str, &str, &str, &[&str])] = &[
        (
            "pool larger than maxSize",
            "warmPool: {size: 2}",
            "warmPool: {size: 5}",
            "nodeGroups[0].warmPool.size",
            &["got 5", "more than maxSize 4", "count toward maxSize"],
        ),
        (
            "unknown pool key",
            "warmPool: {size: 2}",
            "warmPool: {size: 2, min: 1}",
            "nodeGroups[0].warmPool",
            &["min"],
        ),
        (
            "mode stop without any pool",
            "warmPool: {size: 2}",
            "warmPool: {size: 0}",
            "scaleDown.mode",
            &["got stop", "no group has a warmPool"],
        ),
        (
            "unknown mode",
            "scaleDown: {mode: stop}",
            "scaleDown: {mode: hibernate}",
            "scaleDown.mode",
            &["hibernate"],
        ),
    ];
    let mut failures = Vec::new();
    for (case, from, to, path, fragments) in cases {
        assert!(POOL.contains(from), "case {case}: base lacks {from:?}");
        failures.extend(common::config_case_failures(
            case,
            Config::parse(&POOL.replacen(from, to, 1), &repo()),
            path,
            false,
            fragments,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // OpenStack and Kamatera have warm pools (and so `scaleDown.mode: stop`) too.
    for group in [
        "provider: openstack\n  maxSize: 4\n  warmPool: {size: 2}\n  openstack: {flavor: m1, image: i}",
        "provider: kamatera\n  maxSize: 4\n  warmPool: {size: 2}\n  kamatera: {datacenter: EU, image: ubuntu, cpu: 2B, ram: 4 GiB}",
    ] {
        let text = POOL.replacen(
            "provider: proxmox\n  maxSize: 4\n  warmPool: {size: 2}\n  proxmox: {template: k3s}",
            group,
            1,
        );
        let c = Config::parse(&text, &repo())
            .unwrap_or_else(|e| panic!("a warm pool is accepted ({group}): {e}"));
        assert_eq!(c.node_groups[0].warm_pool_size(), 2);
    }
}

/// Every text shipped for users to copy: example configs, the Kustomize base and the
/// chart values (the Helm templates are Go templates, not YAML), the fuzz corpus, and
/// each fenced YAML block of the docs and README, as (where, text).
fn shipped_yaml() -> Vec<(String, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && !p.ends_with("helm/nodewright/templates") {
                walk(&p, out);
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    let root = repo();
    let mut files = Vec::new();
    for dir in ["config", "examples", "deploy", "fuzz/corpus/config", "docs"] {
        walk(&root.join(dir), &mut files);
    }
    files.push(root.join("README.md"));
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let name = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            out.push((name, text));
        } else if name.ends_with(".md") {
            let mut block: Option<(usize, String)> = None;
            for (i, line) in text.lines().enumerate() {
                match &mut block {
                    None if line.trim_start().starts_with("```yaml")
                        || line.trim_start().starts_with("```yml") =>
                    {
                        block = Some((i + 1, String::new()))
                    }
                    Some((start, body)) if line.trim_start().starts_with("```") => {
                        out.push((format!("{name}:{start}"), std::mem::take(body)));
                        block = None;
                    }
                    Some((_, body)) => {
                        body.push_str(line);
                        body.push('\n');
                    }
                    None => {}
                }
            }
        }
    }
    out
}

/// Collects the label keys of every node group in `v` (any `nodeGroups` list, also in
/// a string holding a config, as a ConfigMap's data does).
fn group_label_keys(v: &serde_yaml::Value, out: &mut Vec<String>) {
    use serde_yaml::Value;
    match v {
        Value::Mapping(m) => {
            for (k, child) in m {
                if k.as_str() == Some("nodeGroups") {
                    for g in child.as_sequence().into_iter().flatten() {
                        if let Some(labels) = g.get("labels").and_then(Value::as_mapping) {
                            out.extend(labels.keys().filter_map(Value::as_str).map(str::to_string));
                        }
                    }
                }
                group_label_keys(child, out);
            }
        }
        Value::Sequence(s) => s.iter().for_each(|x| group_label_keys(x, out)),
        Value::String(s) if s.contains("nodeGroups:") => {
            if let Ok(inner) = serde_yaml::from_str::<Value>(s) {
                group_label_keys(&inner, out);
            }
        }
        _ => {}
    }
}

#[test]
fn shipped_examples_set_no_label_a_kubelet_refuses() {
    use nodewright::config::labels::kubelet_refuses;
    use serde::Deserialize;
    let mut refused = Vec::new();
    let mut groups_seen = 0;
    for (place, text) in shipped_yaml() {
        let mut keys = Vec::new();
        let mut parsed = true;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            match serde_yaml::Value::deserialize(doc) {
                Ok(v) => group_label_keys(&v, &mut keys),
                Err(_) => parsed = false,
            }
        }
        if !parsed {
            // A doc fragment with `...` placeholders: read keys from the text itself,
            // any `prefix/name:` in key position.
            for line in text.lines() {
                for piece in line.split(['{', ',']) {
                    let piece = piece.trim().trim_start_matches("- ").trim_matches('"');
                    if let Some((key, _)) = piece.split_once(':') {
                        let key = key.trim().trim_matches(['"', '\'']);
                        if key.contains('/') && !key.contains(' ') {
                            keys.push(key.to_string());
                        }
                    }
                }
            }
        }
        groups_seen += usize::from(!keys.is_empty());
        refused.extend(
            keys.into_iter()
                .filter(|k| kubelet_refuses(k))
                .map(|k| format!("{place}: {k}")),
        );
    }
    // The scan reaches the configs, the chart values and the Kustomize copy at least.
    assert!(
        groups_seen >= 5,
        "only {groups_seen} places with group labels found"
    );
    assert!(
        refused.is_empty(),
        "labels a kubelet refuses (NodeRestriction), so the node would never join:\n{}",
        refused.join("\n")
    );
}

/// A group whose template asks the kubelet for `node-role.kubernetes.io/worker` (past
/// config validation, which checks `labels` only): the simulated kubelet refuses to
/// start as a real one does, so the VM never joins and is deleted at provisionTimeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_asking_for_a_label_a_kubelet_refuses_never_joins() {
    use nodewright::sim::env::{SimEnv, SimTimings};
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    std::fs::write(
        env.templates.join("role.cloud-init.yaml.j2"),
        "#cloud-config\nruncmd:\n  - k3s agent{% for a in k3s_node_args %} {{ a }}{% endfor %} --node-label=node-role.kubernetes.io/worker=true\n",
    )
    .expect("template");
    let rec = common::reconciler_for(
        &env,
        r#"clusterName: dev
freeMemoryTarget: 0 B
provisionTimeout: 3s
nodeGroups:
  - name: os
    provider: openstack
    maxSize: 1
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData: {template: role.cloud-init.yaml.j2}
"#,
    )
    .await;
    env.cluster
        .add_pod(
            "default",
            "waits",
            nodewright::sim::cluster::SimPodTemplate::new("nginx:1.25", 1 << 30),
        )
        .expect("pod");
    let mut registered = Vec::new();
    let deleted = |env: &SimEnv| {
        let refused = env.cluster.kubelet_refusals();
        let log = env.vm_log.lock().unwrap_or_else(|p| p.into_inner());
        refused
            .keys()
            .any(|vm| log.iter().any(|e| !e.booted && &e.name == vm))
    };
    common::drive(
        &env,
        &rec,
        Duration::from_secs(60),
        |env| {
            registered.extend(
                env.cluster
                    .nodes()
                    .into_iter()
                    .filter_map(|n| n.metadata.name)
                    .filter(|n| n.starts_with("dev-os-")),
            )
        },
        deleted,
        |env| format!("refusals: {:?}", env.cluster.kubelet_refusals()),
    )
    .await;
    assert!(registered.is_empty(), "registered: {registered:?}");
    let refusals = env.cluster.kubelet_refusals();
    let why = refusals.values().next().cloned().unwrap_or_default();
    assert!(
        why.contains("node-role.kubernetes.io/worker") && why.contains("--node-labels"),
        "{why}"
    );
}
