//! Warm pools in the planner: starting warm VMs instead of creating, refilling within
//! `maxSize`, dropping stale warm VMs, and parking removed nodes' VMs.

use super::*;
use crate::config::ScaleDownMode;
use crate::model::ServerRef;

fn pool_config(extra: &str, size: u32, max: u32) -> Config {
    let dir = std::env::temp_dir();
    std::fs::write(dir.join("nodewright-pool-test.j2"), "#cloud-config\n")
        .expect("temp dir is writable");
    let text = format!(
        r#"
clusterName: dev
provisionTimeout: 10m
oldNodeAgeLimit: 72h
templatesDir: {dir}
{extra}
nodeGroups:
- name: workers
  provider: proxmox
  minSize: 0
  maxSize: {max}
  nodeMemory: 8 GiB
  proxmox: {{template: k3s}}
  warmPool: {{size: {size}}}
  userData: {{template: nodewright-pool-test.j2}}
"#,
        dir = dir.display()
    );
    Config::parse(&text, Path::new("/")).expect("test config is valid")
}

fn hash(c: &Config) -> String {
    c.group("workers").expect("group").settings_hash.clone()
}

/// A warm VM of `workers`, parked `age` seconds ago, made from `settings_hash`.
fn warm(name: &str, age: u64, settings_hash: &str) -> Server {
    let mut s = mk_server(name, ago(age));
    s.provider = "proxmox".into();
    s.status = ServerStatus::Stopped;
    s.warm = true;
    s.settings_hash = Some(settings_hash.into());
    s
}

fn names(servers: &[ServerRef]) -> Vec<&str> {
    servers.iter().map(|s| s.name.as_str()).collect()
}

#[test]
fn a_scale_up_starts_warm_vms_oldest_first_instead_of_creating() {
    let c = pool_config("freeMemoryTarget: 20 GiB", 2, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    s.servers.push(warm("dev-workers-young", 60, &h));
    s.servers.push(warm("dev-workers-old", 3600, &h));
    let d = plan_it(&s, &c);
    match &d.action {
        // Three nodes wanted, two warm: both started now, the third created later.
        Action::StartWarm { group, servers } => {
            assert_eq!(group, "workers");
            assert_eq!(names(servers), ["dev-workers-old", "dev-workers-young"]);
        }
        other => panic!("expected StartWarm, got {other:?}"),
    }
    assert!(d.has_reason(ReasonCode::WarmPoolStart));
}

#[test]
fn warm_vms_are_no_capacity() {
    // Two warm VMs of 8 GiB do not meet a 4 GiB free-memory target: one is started.
    let c = pool_config("freeMemoryTarget: 4 GiB", 2, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    s.servers.push(warm("dev-workers-w1", 60, &h));
    s.servers.push(warm("dev-workers-w2", 120, &h));
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::StartWarm { servers, .. } if names(servers) == ["dev-workers-w2"]),
        "{:?}",
        d.action
    );
}

#[test]
fn a_short_pool_is_refilled_within_max_size() {
    let c = pool_config("freeMemoryTarget: 0 B\nscaleDown: {enabled: false}", 3, 4);
    let h = hash(&c);
    let mut s = Snapshot::default();
    // Two nodes run; one warm VM: the pool wants two more, maxSize leaves room for one.
    for name in ["dev-workers-a", "dev-workers-b"] {
        mk_member(&mut s, name, 3600);
    }
    s.servers.push(warm("dev-workers-w1", 60, &h));
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::FillWarmPool {
            group: "workers".into(),
            count: 1
        }
    );
    assert!(d.has_reason(ReasonCode::WarmPoolShort));
    // At maxSize with the warm VM counted: nothing more is made.
    mk_member(&mut s, "dev-workers-c", 3600);
    let d = plan_it(&s, &c);
    assert!(
        !matches!(d.action, Action::FillWarmPool { .. }),
        "{:?}",
        d.action
    );
}

#[test]
fn a_backed_off_group_does_not_refill_its_pool() {
    let c = pool_config("freeMemoryTarget: 0 B", 2, 4);
    let mut s = Snapshot::default();
    s.group_backoff
        .insert("workers".into(), now() + Duration::from_secs(60));
    let d = plan_it(&s, &c);
    assert!(
        !matches!(d.action, Action::FillWarmPool { .. }),
        "{:?}",
        d.action
    );
}

#[test]
fn a_drifted_or_too_old_warm_vm_is_deleted_instead_of_reused() {
    let c = pool_config("freeMemoryTarget: 20 GiB", 3, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    s.servers
        .push(warm("dev-workers-drifted", 60, "000000000000"));
    s.servers.push(warm("dev-workers-ancient", 73 * 3600, &h));
    s.servers.push(warm("dev-workers-good", 60, &h));
    let d = plan_it(&s, &c);
    match &d.action {
        Action::DeleteServers { servers, nodes } => {
            assert_eq!(
                names(servers),
                ["dev-workers-drifted", "dev-workers-ancient"]
            );
            assert!(nodes.is_empty());
        }
        other => panic!("expected the stale warm VMs deleted, got {other:?}"),
    }
    assert!(d.reasons.iter().all(|r| r.code == ReasonCode::WarmVmStale));
    assert!(d.reasons[0].message.contains("other settings"));
    assert!(d.reasons[1].message.contains("older than oldNodeAgeLimit"));
    // Once they are gone, the current one is started.
    s.servers.retain(|v| v.name == "dev-workers-good");
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::StartWarm { servers, .. } if names(servers) == ["dev-workers-good"]),
        "{:?}",
        d.action
    );
}

#[test]
fn a_warm_vm_locked_for_a_moment_is_kept_but_not_started() {
    // A backup locks stopped VMs too: that is no reason to delete a warm one.
    let c = pool_config("freeMemoryTarget: 20 GiB", 2, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    let mut locked = warm("dev-workers-locked", 60, &h);
    locked.status = ServerStatus::Building;
    s.servers.push(locked);
    s.servers.push(warm("dev-workers-free", 60, &h));
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::StartWarm { servers, .. } if names(servers) == ["dev-workers-free"]),
        "{:?}",
        d.action
    );
    // Running behind our back, it is stale.
    s.servers[0].status = ServerStatus::Active;
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::DeleteServers { servers, .. } if names(servers) == ["dev-workers-locked"]),
        "{:?}",
        d.action
    );
}

/// An empty node cordoned by nodewright, its VM made from `settings_hash`.
fn emptied(s: &mut Snapshot, name: &str, settings_hash: Option<&str>) {
    mk_member(s, name, 3600);
    let vm = s.servers.last_mut().expect("server");
    vm.settings_hash = settings_hash.map(str::to_string);
    let node = s.nodes.last_mut().expect("node");
    cordon_by_us(node, "empty", 60);
}

fn parked(d: &Decision) -> Vec<(&str, bool)> {
    match &d.action {
        Action::DeleteNodes { nodes } => nodes.iter().map(|t| (t.node.as_str(), t.park)).collect(),
        other => panic!("expected DeleteNodes, got {other:?}"),
    }
}

#[test]
fn scale_down_mode_stop_parks_current_vms_while_the_pool_has_room() {
    let c = pool_config("freeMemoryTarget: 0 B\nscaleDown: {mode: stop}", 2, 5);
    assert_eq!(c.scale_down.mode, ScaleDownMode::Stop);
    let h = hash(&c);
    let mut s = Snapshot::default();
    s.servers.push(warm("dev-workers-w1", 60, &h));
    emptied(&mut s, "dev-workers-a", Some(&h));
    emptied(&mut s, "dev-workers-b", Some(&h));
    emptied(&mut s, "dev-workers-drifted", Some("000000000000"));
    let d = plan_it(&s, &c);
    // One slot left in the pool: the first current VM parks, the second is deleted, the
    // drifted one is deleted whatever the room.
    assert_eq!(
        parked(&d),
        [
            ("dev-workers-a", true),
            ("dev-workers-b", false),
            ("dev-workers-drifted", false)
        ]
    );
    assert!(
        d.action.to_string().contains("park their VMs")
            || d.action.to_string().contains("parking their VMs")
    );
}

#[test]
fn scale_down_mode_delete_never_parks() {
    let c = pool_config("freeMemoryTarget: 0 B", 2, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    emptied(&mut s, "dev-workers-a", Some(&h));
    let d = plan_it(&s, &c);
    assert_eq!(parked(&d), [("dev-workers-a", false)]);
}

/// A warm VM on its one boot to join (OpenStack), made `age` seconds ago.
fn filling(name: &str, age: u64, settings_hash: &str) -> Server {
    let mut s = warm(name, age, settings_hash);
    s.provider = "openstack".into();
    s.status = ServerStatus::Active;
    s.filling = true;
    s
}

/// The Node a warm VM's kubelet registered, under the startup taint.
fn warm_node(name: &str, ready: bool) -> NodeInfo {
    let mut n = mk_node(name, ago(30));
    n.ready = ready;
    n.taints.push(crate::model::Taint {
        key: crate::model::STARTUP_TAINT_KEY.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
    });
    n
}

#[test]
fn a_filling_warm_vm_is_parked_once_its_node_is_ready_and_never_started_before() {
    let c = pool_config("freeMemoryTarget: 20 GiB", 1, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    s.servers.push(filling("dev-workers-fill", 120, &h));
    // Booting, no Node yet: kept, not started, not counted as capacity (a create).
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{:?}", d.action);
    // Registered but not Ready: still waiting.
    s.nodes.push(warm_node("dev-workers-fill", false));
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{:?}", d.action);
    // Ready: stopped into the pool, its Node deleted, before anything else.
    s.nodes[0].ready = true;
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::ParkWarm { servers } if names(servers) == ["dev-workers-fill"]),
        "{:?}",
        d.action
    );
    assert!(d.reasons.iter().all(|r| r.code == ReasonCode::WarmPoolPark));
}

#[test]
fn a_stopped_warm_vm_whose_node_outlived_the_stop_has_its_node_deleted() {
    let c = pool_config("freeMemoryTarget: 0 B", 1, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    s.servers.push(warm("dev-workers-parked", 60, &h));
    s.nodes.push(warm_node("dev-workers-parked", false));
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::ParkWarm { servers } if names(servers) == ["dev-workers-parked"]),
        "{:?}",
        d.action
    );
}

#[test]
fn a_filling_warm_vm_that_never_joins_is_deleted_with_its_node_after_provision_timeout() {
    let c = pool_config("freeMemoryTarget: 0 B", 1, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    s.servers.push(filling("dev-workers-late", 599, &h));
    s.nodes.push(warm_node("dev-workers-late", false));
    let d = plan_it(&s, &c);
    assert!(
        !matches!(d.action, Action::DeleteServers { .. }),
        "{:?}",
        d.action
    );
    s.servers[0].created = ago(601);
    let d = plan_it(&s, &c);
    match &d.action {
        Action::DeleteServers { servers, nodes } => {
            assert_eq!(names(servers), ["dev-workers-late"]);
            assert_eq!(nodes, &["dev-workers-late".to_string()]);
        }
        other => panic!("expected the late fill deleted, got {other:?}"),
    }
}

#[test]
fn a_warm_vms_node_is_never_room_for_pods() {
    // Even Ready (its VM about to be stopped), the Node of a fill is no slot for pods.
    let c = pool_config("freeMemoryTarget: 0 B", 1, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    s.servers.push(filling("dev-workers-fill", 60, &h));
    s.nodes.push(warm_node("dev-workers-fill", true));
    let v = crate::plan::view::View::new(&s, &c, now());
    let m = v.model();
    let i = m
        .slot_index("dev-workers-fill")
        .expect("the node is in the model");
    assert!(!m.slots[i].usable);
    assert_eq!(v.free_total(), (0, 0));
}

/// Regression (issue 19, D): a warm VM did not count against `maxSize`, so with `maxSize: 1`
/// and a pool of 1 a scale-up created a second server next to the warm one.
#[test]
fn warm_vms_count_against_max_size() {
    let c = pool_config("freeMemoryTarget: 0 B", 1, 1);
    let h = hash(&c);
    let mut s = Snapshot::default();
    // A pool VM on its one boot (OpenStack, Kamatera): warm, not startable yet.
    let mut filling = warm("dev-workers-fill", 60, &h);
    filling.filling = true;
    filling.status = ServerStatus::Active;
    s.servers.push(filling);
    s.pods.push(mk_pod("pending", None, GI).into());
    let d = plan_it(&s, &c);
    assert!(
        !matches!(
            d.action,
            Action::ScaleUp { .. } | Action::StartWarm { .. } | Action::FillWarmPool { .. }
        ),
        "{d:#?}"
    );
    assert!(d.has_reason(ReasonCode::GroupAtMaxSize), "{d:#?}");
    // Parked, it is started instead: still one VM.
    s.servers[0].filling = false;
    s.servers[0].status = ServerStatus::Stopped;
    let d = plan_it(&s, &c);
    match &d.action {
        Action::StartWarm { servers, .. } => assert_eq!(names(servers), ["dev-workers-fill"]),
        other => panic!("expected StartWarm, got {other:?}"),
    }
}

#[test]
fn warm_vms_count_against_cluster_limits() {
    let c = pool_config("freeMemoryTarget: 0 B\nlimits: {nodes: 2}", 1, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    s.servers[0].provider = "proxmox".into();
    s.pods
        .push(mk_pod("full", Some("dev-workers-a"), 7 * GI).into());
    s.servers.push(warm("dev-workers-w", 60, &h));
    for i in 0..3 {
        s.pods.push(mk_pod(&format!("p{i}"), None, 6 * GI).into());
    }
    // Three nodes wanted; the running and the warm VM already make limits.nodes 2: the
    // warm one is started, nothing is created.
    let d = plan_it(&s, &c);
    match &d.action {
        Action::StartWarm { servers, .. } => assert_eq!(names(servers), ["dev-workers-w"]),
        other => panic!("expected StartWarm, got {other:?}"),
    }
    // Without the warm VM's start, no create either: a filling one takes its place.
    s.servers[1].filling = true;
    s.servers[1].status = ServerStatus::Active;
    let d = plan_it(&s, &c);
    assert!(
        !matches!(d.action, Action::ScaleUp { .. } | Action::StartWarm { .. }),
        "{d:#?}"
    );
}

/// Regression (issue 19 H): with `scaleDown.mode: stop` the VM of an unhealthy node was
/// parked into the warm pool, and the next scale-up started the broken VM. Only the VMs
/// of healthy nodes are parked; the others are deleted.
#[test]
fn an_unhealthy_nodes_vm_is_deleted_not_parked_into_the_warm_pool() {
    let c = pool_config("freeMemoryTarget: 0 B\nscaleDown: {mode: stop}", 3, 5);
    let h = hash(&c);
    let mut s = Snapshot::default();
    emptied(&mut s, "dev-workers-broken", Some(&h));
    emptied(&mut s, "dev-workers-healthy", Some(&h));
    emptied(&mut s, "dev-workers-notready", Some(&h));
    // Cordoned for being broken (NotReady past unhealthyAfter), and still NotReady.
    let broken = &mut s.nodes[0];
    cordon_by_us(broken, "unhealthy", 60);
    broken.ready = false;
    broken.ready_changed = Some(ago(900));
    // Cordoned as empty, but NotReady since.
    s.nodes[2].ready = false;
    s.nodes[2].ready_changed = Some(ago(30));
    let d = plan_it(&s, &c);
    assert_eq!(
        parked(&d),
        [
            ("dev-workers-broken", false),
            ("dev-workers-healthy", true),
            ("dev-workers-notready", false)
        ],
        "{d:#?}"
    );
}
