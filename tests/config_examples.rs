//! The example configs in `config/` each pass `nodewright check --offline`, and the warm
//! pool and task-deadline settings are validated with clear errors.

mod common;

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
