//! Hypervisor hosts in the plan: a Proxmox group never gets more VMs than its hosts hold
//! under the group's overcommit, reserve and `maxPerHost`; when they are full the plan
//! says so and a hybrid burst moves on to the next group; new nodes know their zone.

use super::scale_up::{group, mk_config_groups};
use super::*;
use crate::model::{
    GroupHosts, GroupShape, Host, HostState, LabelSelector, Namespaces, Overcommit, PodAffinityTerm,
};

const ZONE: &str = "topology.kubernetes.io/zone";

/// A Proxmox group of VMs with 4 vCPUs and 8 GiB.
fn pve_group(max: u32) -> String {
    format!(
        r#"- name: pve
  provider: proxmox
  maxSize: {max}
  reserved: {{memory: 0}}
  proxmox: {{template: 9000}}
  userData: {{template: nodewright-plan-test.j2}}
"#
    )
}

fn host(name: &str, cpus: u64, mem_gib: u64, cpu_taken: u64, mem_taken_gib: u64) -> Host {
    Host {
        name: name.into(),
        state: HostState::Online,
        cpu_milli: cpus * 1000,
        memory: mem_gib * GI,
        cpu_taken_milli: cpu_taken * 1000,
        memory_taken: mem_taken_gib * GI,
        reserved_cpu_milli: 0,
        reserved_memory: 0,
        group_vms: 0,
        template: true,
    }
}

/// The snapshot's shape of the `pve` group: 4 vCPUs, 8 GiB, on `hosts`, overcommit 1:1.
fn with_hosts(s: &mut Snapshot, hosts: Vec<Host>) {
    s.group_shapes.insert(
        "pve".into(),
        GroupShape {
            cpu_milli: Some(4000),
            memory: Some(8 * GI),
            region: Some("lab".into()),
            hosts: Some(GroupHosts {
                hosts,
                overcommit: Overcommit {
                    cpu: 1.0,
                    memory: 1.0,
                },
                max_per_host: None,
                region: Some("lab".into()),
            }),
            ..Default::default()
        },
    );
}

fn pending(name: &str, cpu: u64, mem: u64) -> PodInfo {
    let mut p = mk_pod(name, None, mem);
    p.requests.cpu = cpu;
    p.labels.insert("app".into(), "web".into());
    p
}

fn scale_up_of(d: &Decision) -> Option<(&str, u32)> {
    match &d.action {
        Action::ScaleUp { group, count, .. } => Some((group.as_str(), *count)),
        _ => None,
    }
}

#[test]
fn proxmox_full_says_so_and_the_burst_moves_on_to_the_next_group() {
    let groups = pve_group(10) + &group("os", 5, "4", "8Gi", "");
    let c = mk_config_groups("expander: {type: priority, priorities: [pve, os]}", &groups);
    let mut s = Snapshot::default();
    // 8 CPUs, all taken by configured VMs: no room for 4 more at 1:1.
    with_hosts(&mut s, vec![host("h1", 8, 64, 8, 16)]);
    s.pods.push(pending("web", 1000, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("os", 1)), "{d:#?}");
    assert!(d.has_reason(ReasonCode::HostsFull), "{d:#?}");
    let said = d
        .notes
        .iter()
        .chain(&d.reasons)
        .find(|r| r.code == ReasonCode::HostsFull)
        .map(|r| r.message.clone())
        .unwrap_or_default();
    assert!(said.contains("h1 CPU full"), "{said}");
}

#[test]
fn proxmox_with_room_for_two_plans_two_and_says_the_rest_wait() {
    let c = mk_config_groups("", &pve_group(10));
    let mut s = Snapshot::default();
    // Two hosts with room for one VM each (memory binds: 8 GiB free on each).
    with_hosts(
        &mut s,
        vec![host("h1", 16, 32, 0, 24), host("h2", 16, 32, 4, 24)],
    );
    for i in 0..5 {
        s.pods.push(pending(&format!("web-{i}"), 3000, GI).into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("pve", 2)), "{d:#?}");
    assert!(d.has_reason(ReasonCode::HostsFull), "{d:#?}");
}

#[test]
fn offline_and_maintenance_hosts_give_no_room_and_are_named() {
    let c = mk_config_groups("", &pve_group(10));
    let mut s = Snapshot::default();
    let mut down = host("down", 64, 256, 0, 0);
    down.state = HostState::Offline;
    let mut maint = host("maint", 64, 256, 0, 0);
    maint.state = HostState::Maintenance;
    with_hosts(&mut s, vec![down, maint]);
    s.pods.push(pending("web", 1000, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), None, "{d:#?}");
    let said: Vec<&str> = d
        .notes
        .iter()
        .filter(|r| r.code == ReasonCode::HostsFull)
        .map(|r| r.message.as_str())
        .collect();
    assert!(
        said.iter()
            .any(|m| m.contains("down is offline") && m.contains("maint is in maintenance")),
        "{said:?}"
    );
}

#[test]
fn min_size_stops_at_what_the_hosts_hold() {
    let c = mk_config_groups(
        "",
        &pve_group(10).replace("maxSize: 10", "minSize: 6\n  maxSize: 10"),
    );
    let mut s = Snapshot::default();
    // 12 CPUs at 1:1: three VMs of 4 vCPUs.
    with_hosts(&mut s, vec![host("h1", 12, 256, 0, 0)]);
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("pve", 3)), "{d:#?}");
}

/// Zone anti-affinity: each new node is modelled in the zone (host) it will get, so three
/// replicas that must not share a hypervisor get three nodes on three hosts in one go.
#[test]
fn new_nodes_carry_the_zone_of_their_host_in_the_model() {
    let c = mk_config_groups("", &pve_group(10));
    let mut s = Snapshot::default();
    with_hosts(
        &mut s,
        vec![
            host("h1", 32, 128, 0, 0),
            host("h2", 32, 128, 0, 0),
            host("h3", 32, 128, 0, 0),
        ],
    );
    for i in 0..3 {
        let mut p = pending(&format!("zk-{i}"), 100, GI);
        p.pod_anti_affinity.push(PodAffinityTerm {
            selector: LabelSelector {
                match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                ..Default::default()
            },
            namespaces: Namespaces::Listed(vec!["default".into()]),
            topology_key: ZONE.into(),
        });
        s.pods.push(p.into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("pve", 3)), "{d:#?}");
    assert!(!d.has_reason(ReasonCode::NoGroupFits), "{d:#?}");
}
