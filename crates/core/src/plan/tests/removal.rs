//! Issue 19: removal decisions that lost pods or left nodes behind.

use super::*;
use crate::model::ANNOTATION_UNNEEDED_SINCE;

/// Low: a hand-edited `unneeded-since` that is no time was neither a panic nor "long
/// ago", but a clock that never ran (the node never went). It is read as "now": written
/// anew, and the plan says so.
#[test]
fn a_garbage_unneeded_since_annotation_restarts_the_clock_and_is_reported() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m, unneededTime: 10m}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    s.pods.push(mk_pod("p", Some("dev-workers-a"), GI).into());
    for n in &mut s.nodes {
        n.annotations
            .insert(ANNOTATION_UNNEEDED_SINCE.into(), "last tuesday".into());
    }
    let d = plan_it(&s, &c);
    match &d.action {
        Action::MarkUnneeded { mark, at, .. } => {
            assert_eq!(mark.len(), 2, "{d:#?}");
            assert_eq!(
                *at,
                now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs()
            );
        }
        other => panic!("expected the clock to be written anew, got {other:?}"),
    }
    let note = d
        .notes
        .iter()
        .find(|n| {
            n.message
                .contains("\"last tuesday\" is not an RFC 3339 time")
        })
        .unwrap_or_else(|| panic!("no note on the bad annotation: {d:#?}"));
    assert!(note.message.contains("restarts now"), "{note:?}");
    // Never read as long ago: nothing is cordoned on it.
    assert!(!matches!(d.action, Action::Cordon { .. }), "{d:#?}");
}

/// Low: scaling from zero modelled a new node as its flavor minus `reserved`; a real
/// kubelet reserving more left a pod that fit only the model pending on the new node,
/// which went again as unneeded, and the next cycle made another: a flap. A group at zero
/// is modelled with what its last Ready node of the same settings offered.
#[test]
fn scale_from_zero_uses_what_the_last_real_node_offered_and_does_not_flap() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    s.group_shapes.insert(
        "workers".into(),
        crate::model::GroupShape {
            cpu_milli: Some(4000),
            memory: Some(8 * GI),
            ..Default::default()
        },
    );
    // 7.5 GiB: fits 8 GiB minus the model's reservation, not the 7 GiB real nodes offered.
    let mut p = mk_pod("big", None, 7 * GI + GI / 2);
    p.requests.cpu = 100;
    s.pods.push(p.into());
    let d = plan_it(&s, &c);
    assert!(
        matches!(d.action, Action::ScaleUp { .. }),
        "from the flavor the pod fits a new node: {d:#?}"
    );
    let hash = c.node_groups[0].settings_hash.clone();
    s.learned_allocatable
        .insert(format!("workers/{hash}"), mk_alloc(4000, 7 * GI));
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert!(d.has_reason(ReasonCode::NoGroupFits), "{d:#?}");
    // A node of other settings (another flavor) teaches nothing about the next one.
    s.learned_allocatable.clear();
    s.learned_allocatable
        .insert("workers/other-hash".into(), mk_alloc(4000, 7 * GI));
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
}
