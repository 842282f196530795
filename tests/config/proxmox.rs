//! Proxmox host settings (overcommit, reserve, maxPerHost) parse, and bad ones name the field.

use super::*;

/// The Proxmox host settings: (case, the group's `proxmox:` block, expected path, fragments).
const BAD_PROXMOX: &[(&str, &str, &str, &[&str])] = &[
    (
        "cpu overcommit of zero",
        "{template: 9000, overcommit: {cpu: 0}}",
        "nodeGroups[0].proxmox.overcommit.cpu",
        &["got 0", "above 0"],
    ),
    (
        "negative memory overcommit",
        "{template: 9000, overcommit: {memory: -1.5}}",
        "nodeGroups[0].proxmox.overcommit.memory",
        &["got -1.5"],
    ),
    (
        "maxPerHost zero",
        "{template: 9000, maxPerHost: 0}",
        "nodeGroups[0].proxmox.maxPerHost",
        &["got 0", "at least 1"],
    ),
    (
        "template tag outside Proxmox's alphabet",
        "{template: {tag: \"k8s 1.30\"}}",
        "nodeGroups[0].proxmox.template.tag",
        &["`k8s 1.30`", "not a Proxmox tag"],
    ),
    (
        "typo in overcommit",
        "{template: 9000, overcommit: {cpus: 2}}",
        "nodeGroups[0].proxmox",
        &["cpus"],
    ),
    (
        "reserve memory that is not a size",
        "{template: 9000, reserve: {memory: lots}}",
        "nodeGroups[0].proxmox",
        &["lots"],
    ),
];

fn proxmox_config(block: &str) -> String {
    GOOD.replacen("provider: openstack", "provider: proxmox", 1)
        .replacen(
            "openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}",
            &format!("proxmox: {block}"),
            1,
        )
}

#[test]
fn proxmox_host_settings_parse_and_bad_ones_name_the_field() {
    let c = parse(&proxmox_config(
        "{template: {tag: k8s-1-30}, overcommit: {cpu: 3.0}, reserve: {cpu: 2, memory: 8 GiB}, maxPerHost: 2}",
    ))
    .expect("good Proxmox settings load");
    let px = c.node_groups[0]
        .settings
        .of::<nodewright::cloud::proxmox::ProxmoxSettings>()
        .expect("proxmox block");
    assert_eq!((px.overcommit.cpu, px.overcommit.memory), (3.0, 1.0));
    assert_eq!(px.reserve.memory.map(|m| m.as_u64()), Some(8 << 30));
    assert_eq!(px.max_per_host, Some(2));
    let mut failures = Vec::new();
    for (case, block, path, fragments) in BAD_PROXMOX {
        failures.extend(common::config_case_failures(
            case,
            parse(&proxmox_config(block)),
            path,
            false,
            fragments,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
