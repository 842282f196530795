//! Issue 19: removal decisions that lost pods or left nodes behind.

use super::*;
use crate::ANNOTATION_UNNEEDED_SINCE;

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
