//! Groups of several sizes (issue 28, "the right node size"): a scale-up takes the size
//! that wastes least for its pods, a booting VM counts as the size written on it, and a
//! node of any listed size is not drifted.

use super::scale_up::mk_config_groups;
use super::*;
use crate::model::{GroupShape, SizeShape, LABEL_SETTINGS_HASH};

/// Group `web` of two flavors, `small` (2 CPU, 4 GiB) and `big` (8 CPU, 16 GiB), nothing
/// reserved, so each size's allocatable is its flavor.
fn two_sizes() -> (Config, Snapshot) {
    let c = mk_config_groups(
        "",
        r#"- name: web
  provider: openstack
  maxSize: 10
  reserved: {memory: 0}
  openstack: {flavor: [small, big], image: i}
  userData: {template: nodewright-plan-test.j2}
"#,
    );
    let size = |name: &str, cpu: u64, gib: u64| SizeShape {
        name: name.into(),
        cpu_milli: Some(cpu * 1000),
        memory: Some(gib * GI),
    };
    let mut s = Snapshot::default();
    s.group_shapes.insert(
        "web".into(),
        GroupShape {
            cpu_milli: Some(2000),
            memory: Some(4 * GI),
            instance_type: Some("small".into()),
            sizes: vec![size("small", 2, 4), size("big", 8, 16)],
            ..GroupShape::default()
        },
    );
    (c, s)
}

fn pending(name: &str, cpu: u64, mem: u64) -> PodInfo {
    let mut p = mk_pod(name, None, mem);
    p.requests.cpu = cpu;
    p
}

fn scale_up(d: &Decision) -> Option<(&str, u32, Option<&str>)> {
    match &d.action {
        Action::ScaleUp { group, count, size } => Some((group.as_str(), *count, size.as_deref())),
        _ => None,
    }
}

#[test]
fn a_small_pod_gets_the_small_flavor_and_a_large_pod_the_large_one() {
    let (c, mut s) = two_sizes();
    s.pods.push(pending("little", 500, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up(&d), Some(("web", 1, Some("small"))), "{d:#?}");

    let (c, mut s) = two_sizes();
    s.pods.push(pending("large", 6000, 8 * GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up(&d), Some(("web", 1, Some("big"))), "{d:#?}");
    assert!(
        d.reasons[0].message.contains("size big"),
        "the reason says the size: {d:#?}"
    );
}

#[test]
fn many_pods_take_the_size_of_the_least_node_cost() {
    // Five pods of 1.5 CPU: one per small node (5 nodes, each a quarter of the big one:
    // 2.5 big ones) or all five on one big node.
    let (c, mut s) = two_sizes();
    for i in 0..5 {
        s.pods.push(pending(&format!("p{i}"), 1500, GI).into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up(&d), Some(("web", 1, Some("big"))), "{d:#?}");
}

#[test]
fn an_equal_node_cost_takes_the_smaller_size() {
    // Eight pods of 1 CPU and 2 GiB: four small nodes or one big one cost the same.
    let (c, mut s) = two_sizes();
    for i in 0..8 {
        s.pods.push(pending(&format!("p{i}"), 1000, 2 * GI).into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up(&d), Some(("web", 4, Some("small"))), "{d:#?}");
}

#[test]
fn the_size_that_places_more_pods_wins_over_a_cheaper_one() {
    // A large pod only the big size takes and a little one: one big node takes both.
    let (c, mut s) = two_sizes();
    s.pods.push(pending("large", 6000, 8 * GI).into());
    s.pods.push(pending("little", 500, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up(&d), Some(("web", 1, Some("big"))), "{d:#?}");
}

/// A booting VM written `big` brings a big node: a pod that fits it waits for it, as a
/// fresh process reading the VM back sees (nothing kept between cycles).
#[test]
fn a_booting_vm_counts_as_the_size_written_on_it() {
    let (c, mut s) = two_sizes();
    let mut vm = mk_server("dev-web-boot", ago(30));
    vm.group = Some("web".into());
    vm.status = ServerStatus::Building;
    vm.size = Some("big".into());
    s.servers.push(vm);
    s.pods.push(pending("large", 6000, 8 * GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up(&d), None, "the booting big VM takes it: {d:#?}");

    // The same VM without its size mark is the default (small) size: too small.
    s.servers[0].size = None;
    let d = plan_it(&s, &c);
    assert_eq!(scale_up(&d), Some(("web", 1, Some("big"))), "{d:#?}");
}

#[test]
fn a_node_of_any_listed_size_is_not_drifted_and_one_of_an_unlisted_size_is() {
    let (c, _) = two_sizes();
    let g = &c.node_groups[0];
    assert_eq!(g.size_hashes.len(), 2);
    let (small, big) = (&g.size_hashes[0].1, &g.size_hashes[1].1);
    assert_ne!(small, big, "each size has its own hash");
    assert_eq!(
        &g.settings_hash, small,
        "the first size is the group's default"
    );
    for hash in [small, big] {
        assert!(g.hash_is_current(hash));
    }

    let member = |s: &mut Snapshot, name: &str, hash: &str| {
        mk_member(s, name, 3600);
        let vm = s.servers.last_mut().expect("vm");
        vm.group = Some("web".into());
        let node = s.nodes.last_mut().expect("node");
        node.labels.insert(LABEL_GROUP.into(), "web".into());
        node.labels.insert(LABEL_SETTINGS_HASH.into(), hash.into());
    };
    let (_, mut s) = two_sizes();
    member(&mut s, "dev-web-a", small);
    member(&mut s, "dev-web-b", big);
    s.pods.push(mk_pod("p", Some("dev-web-a"), GI).into());
    s.pods.push(mk_pod("q", Some("dev-web-b"), GI).into());
    let d = plan_it(&s, &c);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");

    // Only `small` is left on the list: the big node is drifted.
    let only_small = mk_config_groups(
        "",
        r#"- name: web
  provider: openstack
  maxSize: 10
  reserved: {memory: 0}
  openstack: {flavor: small, image: i}
  userData: {template: nodewright-plan-test.j2}
"#,
    );
    // A node made while the group had one of its sizes alone is of that size's hash.
    assert_eq!(&only_small.node_groups[0].settings_hash, small);
    let d = plan_it(&s, &only_small);
    assert!(d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
}
