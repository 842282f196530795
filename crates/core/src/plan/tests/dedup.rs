//! Notes repeated by several steps: kept once, in order, their objects merged.

use super::*;

#[test]
fn repeated_notes_are_kept_once_in_order_with_their_objects_merged() {
    let at_max = || Reason::new(ReasonCode::GroupAtMaxSize, "group web is at maxSize 3");
    let pod = |n: &str| ObjectRef {
        kind: "Pod".into(),
        namespace: Some("default".into()),
        name: n.into(),
    };
    let notes = vec![
        at_max(),
        Reason::new(ReasonCode::NoGroupFits, "no node group can host default/a").about([pod("a")]),
        at_max(),
        Reason::new(ReasonCode::NoGroupFits, "no node group can host default/a")
            .about([pod("a"), pod("b")]),
    ];
    let out = dedup_notes(notes);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0].code, ReasonCode::GroupAtMaxSize);
    assert_eq!(out[1].objects, vec![pod("a"), pod("b")]);
}
