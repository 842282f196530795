//! The cloud's own words on a failed VM reach the planner's reason (and from there the
//! Event, the status ConfigMap and `plan`).

use super::*;

#[test]
fn a_vm_in_error_is_deleted_with_the_clouds_fault_message_in_the_reason() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    let mut vm = mk_server("dev-workers-nvh", ago(30));
    vm.status = ServerStatus::Error;
    vm.fault = Some("No valid host was found. There are not enough hosts available.".into());
    s.servers.push(vm);
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::DeleteServers { servers, .. } if servers[0].name == "dev-workers-nvh"),
        "{:?}",
        d.action
    );
    let reason = d
        .reasons
        .iter()
        .find(|r| r.code == ReasonCode::ServerError)
        .expect("a ServerError reason");
    assert_eq!(
        reason.message,
        "VM dev-workers-nvh reports an error state: No valid host was found. There are not enough hosts available."
    );
}

#[test]
fn a_vm_in_error_without_a_fault_says_only_that() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    let mut vm = mk_server("dev-workers-err", ago(30));
    vm.status = ServerStatus::Error;
    s.servers.push(vm);
    let d = plan_it(&s, &c);
    assert!(d
        .reasons
        .iter()
        .any(|r| r.message == "VM dev-workers-err reports an error state"));
}
