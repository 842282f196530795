//! VMs that joined once are never taken for VMs that never joined: an API server that lists
//! no nodes, or a `kubectl delete node`, costs no VM; VMs that really never joined go a few
//! at a time.

use super::*;
use crate::plan::steps::MAX_NOT_JOINED_PER_ACTION;

fn marked(name: &str, age: u64) -> Server {
    let mut s = mk_server(name, ago(age));
    s.joined = Some(ago(age - 60));
    s
}

fn deleted(d: &Decision) -> Vec<String> {
    match &d.action {
        Action::DeleteServers { servers, .. } => servers.iter().map(|s| s.name.clone()).collect(),
        _ => Vec::new(),
    }
}

fn startup_taint() -> Taint {
    Taint {
        key: STARTUP_TAINT_KEY.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
    }
}

/// Regression: restarted behind an API server that listed no nodes, nodewright deleted
/// every VM as "never joined" while pods ran on them.
#[test]
fn api_server_listing_no_nodes_deletes_no_vm() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    for i in 0..4 {
        s.servers.push(marked(&format!("dev-workers-{i}"), 7200));
    }
    // One made before marks existed (or never marked): kept too while the view is blind.
    s.servers.push(mk_server("dev-workers-old", ago(7200)));
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    let why = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::ClusterViewSuspect)
        .unwrap_or_else(|| panic!("the plan says why: {d:#?}"));
    assert!(
        why.message
            .contains("the cluster view looks wrong: 4 joined VM(s) have no Node"),
        "{why}"
    );
}

#[test]
fn a_vm_whose_node_vanished_is_waited_on_and_reported_not_deleted() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    s.servers.push(marked("dev-workers-gone", 7200));
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    let note = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::NodeVanished)
        .unwrap_or_else(|| panic!("reported: {d:#?}"));
    assert!(note.message.contains("dev-workers-gone"), "{note}");
    // It counts against maxSize and toward minSize, never as capacity.
    let v = view::View::new(&s, &c, now());
    assert_eq!(v.group_size("workers"), 2);
    assert_eq!(v.active_size("workers"), 2);
    assert_eq!(v.capacity_nodes().count(), 1);
}

fn restarted(d: &Decision) -> Vec<String> {
    match &d.action {
        Action::RestartVanished { servers, .. } => servers.iter().map(|s| s.name.clone()).collect(),
        _ => Vec::new(),
    }
}

/// A kubelet registers its Node only when it starts: a VM that joined and whose Node is
/// gone is restarted once (the restart recorded on it), waited on for
/// `provisionTimeout` (10m here), then reported, never deleted nor restarted again.
#[test]
fn a_vm_whose_node_is_gone_is_restarted_once_then_reported() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    s.servers.push(marked("dev-workers-gone", 7200));
    let d = plan_it(&s, &c);
    assert_eq!(restarted(&d), ["dev-workers-gone"], "{d:#?}");
    let Action::RestartVanished { at, .. } = d.action else {
        unreachable!()
    };
    assert_eq!(at, crate::model::unix_secs(now()));
    // Restarted 5 minutes ago: waited on, not restarted again.
    s.servers[1].restarted = Some(ago(300));
    let d = plan_it(&s, &c);
    assert!(restarted(&d).is_empty() && deleted(&d).is_empty(), "{d:#?}");
    assert!(
        d.notes.iter().any(|n| n.code == ReasonCode::NodeVanished
            && n.message.contains("dev-workers-gone")
            && n.message.contains("was restarted 5m ago")),
        "{d:#?}"
    );
    // Restarted past provisionTimeout and still no Node: reported, left alone.
    s.servers[1].restarted = Some(ago(601));
    let d = plan_it(&s, &c);
    assert!(restarted(&d).is_empty() && deleted(&d).is_empty(), "{d:#?}");
    let lost = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::NodeLostAfterRestart)
        .unwrap_or_else(|| panic!("reported: {d:#?}"));
    assert!(lost.message.contains("dev-workers-gone"), "{lost}");
    assert!(
        lost.message.contains("never deleted nor restarted again"),
        "{lost}"
    );
}

/// The Node back after the restart: the restart mark is taken off with the joined mark,
/// so a later loss of the Node is answered by a restart again.
#[test]
fn a_node_back_after_its_restart_has_the_restart_mark_taken_off() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    s.servers[0].joined = Some(ago(7000));
    s.servers[0].restarted = Some(ago(120));
    let v = view::View::new(&s, &c, now());
    let due = crate::plan::steps::mark_joined(&v, &mut Vec::new());
    assert!(
        matches!(&due, Some((Action::MarkJoined { servers, .. }, _)) if servers[0].name == "dev-workers-a"),
        "{:#?}",
        due.map(|(a, _)| a)
    );
    // Without the restart mark, nothing is due: its joined mark is there.
    s.servers[0].restarted = None;
    let v = view::View::new(&s, &c, now());
    assert!(crate::plan::steps::mark_joined(&v, &mut Vec::new()).is_none());
}

/// No restart while the cluster lists no node of ours at all (the view looks wrong), nor
/// of a VM that does not run (a person stopped it: starting it is theirs).
#[test]
fn no_restart_behind_a_blind_view_or_of_a_stopped_vm() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    s.servers.push(marked("dev-workers-a", 7200));
    s.servers.push(marked("dev-workers-b", 7200));
    let d = plan_it(&s, &c);
    assert!(restarted(&d).is_empty() && deleted(&d).is_empty(), "{d:#?}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    s.servers.push(marked("dev-workers-off", 7200));
    s.servers[1].status = ServerStatus::Stopped;
    let d = plan_it(&s, &c);
    assert!(restarted(&d).is_empty() && deleted(&d).is_empty(), "{d:#?}");
}

/// Regression: `kubectl delete node` on a running node had its VM destroyed a second
/// later; its kubelet registers the Node again (startup taint, NotReady at first), and
/// the VM, joined once, is waited for and let in again.
#[test]
fn deleted_node_object_gets_its_vm_a_grace_and_comes_back() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    s.servers.push(marked("dev-workers-b", 7200));
    // Registered again, not Ready yet.
    let mut back = mk_node("dev-workers-b", ago(2));
    back.ready = false;
    back.taints.push(startup_taint());
    s.nodes.push(back);
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    // Ready: the startup taint goes, and it is a node like the others again.
    s.nodes[1].ready = true;
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::RemoveStartupTaint {
            nodes: vec!["dev-workers-b".into()]
        },
        "{d:#?}"
    );
}

/// One member and four VMs past provisionTimeout that never joined, n2 the oldest.
fn four_never_joined() -> Snapshot {
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    for (i, age) in [(1, 900), (2, 3000), (3, 2000), (4, 1000)] {
        s.servers
            .push(mk_server(&format!("dev-workers-n{i}"), ago(age)));
    }
    s
}

#[test]
fn vms_that_never_joined_go_at_most_a_few_at_a_time_oldest_first() {
    let c = mk_config("");
    let s = four_never_joined();
    let d = plan_it(&s, &c);
    assert_eq!(MAX_NOT_JOINED_PER_ACTION, 2);
    assert_eq!(deleted(&d), ["dev-workers-n2", "dev-workers-n3"], "{d:#?}");
    assert!(
        d.notes
            .iter()
            .any(|n| n.code == ReasonCode::ProvisionTimeout
                && n.message.contains("2 more VM(s)")
                && n.message.contains("dev-workers-n4")),
        "{d:#?}"
    );
}

/// Regression: when the deletes of the two oldest VMs that never joined kept failing,
/// both were held back, so the whole action was, and every other VM that never joined
/// waited behind them (each still billed) for as long as those deletes failed.
#[test]
fn vms_whose_delete_keeps_failing_do_not_keep_the_others_waiting() {
    let c = mk_config("");
    let mut s = four_never_joined();
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-n2", "dev-workers-n3"], "{d:#?}");
    // Their deletes failed past the retries: held back for a while.
    for key in crate::plan::backoff::keys(&d.action) {
        s.action_backoff
            .insert(key, now() + Duration::from_secs(60));
    }
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-n4", "dev-workers-n1"], "{d:#?}");
    // Once their wait is over they are the oldest again.
    let later = now() + Duration::from_secs(61);
    let d = plan(&s, &c, later);
    assert_eq!(deleted(&d), ["dev-workers-n2", "dev-workers-n3"], "{d:#?}");
}

/// Issue 29, item 3: with no managed node in view, VMs past provisionTimeout that booted
/// make the view blind whatever their marks (they went two per action before, every
/// cycle, so all of them within seconds); one the cloud still builds never booted, is no
/// node, and still goes.
#[test]
fn unmarked_vms_without_nodes_are_kept_while_no_node_of_ours_is_in_view() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    for i in 0..5 {
        s.servers
            .push(mk_server(&format!("dev-workers-n{i}"), ago(3600 + i)));
    }
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    assert!(
        d.notes.iter().any(|n| n.code == ReasonCode::ClusterViewSuspect
            && n.message.contains("the cluster lists no node of ours while 5 VM(s) run without one, 5 of them for over twice provisionTimeout")),
        "{d:#?}"
    );
    let mut stuck = mk_server("dev-workers-stuck", ago(3000));
    stuck.status = ServerStatus::Building;
    s.servers.push(stuck);
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-stuck"], "{d:#?}");
    // VMs that failed to join within the last two provisionTimeouts are no sign of a
    // blind view: a fresh group whose first VMs fail still has them removed.
    let mut c = mk_config("");
    c.provision_timeout = Duration::from_secs(40 * 60);
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d).len(), MAX_NOT_JOINED_PER_ACTION, "{d:#?}");
}

/// Issue 29, item 3: removals for not joining are a rate per provisionTimeout, counted
/// from the recorded times, not per action.
#[test]
fn vms_that_never_joined_go_at_most_two_per_provision_timeout() {
    let c = mk_config("");
    let mut s = four_never_joined();
    s.not_joined_removed = vec![ago(60)];
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-n2"], "{d:#?}");
    s.not_joined_removed = vec![ago(60), ago(30)];
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    assert!(
        d.notes
            .iter()
            .any(|n| n.message.contains("2 were in the last one")),
        "{d:#?}"
    );
    // One provisionTimeout on, two more.
    s.not_joined_removed = vec![ago(700), ago(650)];
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-n2", "dev-workers-n3"], "{d:#?}");
}

/// Issue 29, item 3: after an upgrade, nodes in view whose VMs carry no joined mark get
/// it before any VM is removed for not joining.
#[test]
fn joined_marks_are_written_before_vms_that_never_joined_are_removed() {
    let c = mk_config("");
    let mut s = four_never_joined();
    s.servers[0].joined = None;
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::MarkJoined { servers, .. } if servers[0].name == "dev-workers-a"),
        "{d:#?}"
    );
}

/// A mark older than the VM's provisioning clock is from before it was parked in a warm
/// pool: the VM started again must join again.
#[test]
fn a_joined_mark_from_before_a_warm_start_does_not_count() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    let mut restarted = mk_server("dev-workers-w", ago(1200));
    restarted.joined = Some(ago(5000));
    s.servers.push(restarted);
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-w"], "{d:#?}");
}

#[test]
fn a_vm_in_error_that_joined_is_not_deleted_without_its_node() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    let mut broken = marked("dev-workers-e", 7200);
    broken.status = ServerStatus::Error;
    s.servers.push(broken);
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
}

#[test]
fn ready_nodes_get_their_vm_marked_joined_once() {
    // Nothing more pressing to do: the mark is low in priority.
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    s.servers.push(mk_server("dev-workers-b", ago(3600)));
    s.nodes.push(mk_node("dev-workers-b", ago(3500)));
    // Still booting: registered, not Ready yet.
    let mut not_ready = mk_node("dev-workers-c", ago(30));
    not_ready.ready = false;
    not_ready.taints.push(startup_taint());
    s.servers.push(mk_server("dev-workers-c", ago(60)));
    s.nodes.push(not_ready);
    let d = plan_it(&s, &c);
    let Action::MarkJoined { servers, at } = &d.action else {
        panic!("expected MarkJoined: {d:#?}");
    };
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["dev-workers-b"]);
    assert_eq!(*at, crate::model::unix_secs(now()));
    // Marked: nothing more to do.
    s.servers[1].joined = Some(now());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::MarkJoined { .. }), "{d:#?}");
}

/// Issue 20: a process killed between a VM's start and its guest-agent join left the VM to
/// wait out `provisionTimeout`. The next plan runs the join script again; a VM whose node
/// registered meanwhile is only recorded as joined; one past `provisionTimeout` is removed
/// as any VM that did not join.
#[test]
fn a_vm_whose_join_script_a_process_gone_never_ran_has_it_run_again() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    let mut pending = mk_server("dev-workers-pending", ago(30));
    pending.status = ServerStatus::JoinPending;
    s.servers.push(pending.clone());
    let mut registered = mk_server("dev-workers-registered", ago(60));
    registered.status = ServerStatus::JoinPending;
    s.servers.push(registered);
    let mut node = mk_node("dev-workers-registered", ago(10));
    node.ready = false;
    node.taints.push(startup_taint());
    s.nodes.push(node);
    let d = plan_it(&s, &c);
    let Action::FinishJoin {
        servers,
        registered,
    } = &d.action
    else {
        panic!("expected FinishJoin: {d:#?}");
    };
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["dev-workers-pending", "dev-workers-registered"]);
    assert_eq!(registered, &["dev-workers-registered".to_string()]);
    assert!(
        d.reasons
            .iter()
            .all(|r| r.code == ReasonCode::JoinUnfinished),
        "{d:#?}"
    );
    assert!(
        d.action
            .to_string()
            .contains("run the join script of VMs dev-workers-pending"),
        "{}",
        d.action
    );

    // Past provisionTimeout it is a VM that did not join: removed, not joined again
    // (within twice provisionTimeout: with no node of ours in view, one running longer
    // makes the view look blind).
    let mut s = Snapshot::default();
    pending.created = ago(900);
    s.servers.push(pending);
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-pending"], "{d:#?}");
}

/// Issue 29, item 6: a VM still marked as being removed whose node is in service again
/// (Ready, untainted, not cordoned) is marked joined, which takes the removing mark off;
/// while its node is cordoned (nodewright's removal under way) it is left as it is.
#[test]
fn a_vm_marked_removing_whose_node_is_in_service_again_is_marked_joined() {
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    s.servers[0].status = ServerStatus::Removing;
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::MarkJoined { servers, .. } if servers[0].name == "dev-workers-a"),
        "{d:#?}"
    );
    s.nodes[0].unschedulable = true;
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::MarkJoined { .. }), "{d:#?}");
}

/// Issue 29, item 6: a removal in flight (its mark within `provisionTimeout`) is finished
/// at once; VMs whose mark is older, or carries no time (an older release's), go only at
/// the rate of VMs that never joined, and none while no node of ours is in view.
#[test]
fn only_a_fresh_removing_mark_has_its_vm_deleted_at_once() {
    let c = mk_config("scaleDown: {enabled: false}");
    let removing = |name: &str, since: Option<u64>| {
        let mut s = marked(name, 7200);
        s.status = ServerStatus::Removing;
        s.removing_since = since.map(ago);
        s
    };
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    s.servers.push(removing("dev-workers-fresh", Some(60)));
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-fresh"], "{d:#?}");
    assert!(d.has_reason(ReasonCode::RemovalUnfinished), "{d:#?}");

    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 7200);
    for (i, since) in [Some(3600), None, Some(7000)].into_iter().enumerate() {
        s.servers
            .push(removing(&format!("dev-workers-old{i}"), since));
    }
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d).len(), MAX_NOT_JOINED_PER_ACTION, "{d:#?}");
    assert!(d.has_reason(ReasonCode::RemovalStale), "{d:#?}");
    assert!(!d.has_reason(ReasonCode::RemovalUnfinished), "{d:#?}");
    assert!(d.removes_not_joined(), "counted in the rate: {d:#?}");
    // Two removed in the last provisionTimeout: none more.
    s.not_joined_removed = vec![ago(60), ago(30)];
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    // No node of ours in view: a blind view, none goes.
    s.not_joined_removed.clear();
    s.nodes.clear();
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
}
