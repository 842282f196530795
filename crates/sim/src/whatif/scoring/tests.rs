use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::model::{NodeInfo, Resources, Taint, Toleration};

const GI: u64 = 1 << 30;

fn node(name: &str, taints: Vec<Taint>) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        created: std::time::UNIX_EPOCH,
        unschedulable: false,
        ready: true,
        taints,
        allocatable: Resources::cpu_mem(4000, 8 * GI),
        images: BTreeSet::new(),
        image_listing: Default::default(),
        deleting: false,
        ready_changed: None,
        kubelet_version: None,
    }
}

fn pod(name: &str, cpu: u64, mem: u64) -> PodInfo {
    let mut p = PodInfo::new("default", name);
    p.requests = Resources::cpu_mem(cpu, mem);
    p
}

fn soft(key: &str) -> Taint {
    Taint {
        key: key.into(),
        value: None,
        effect: "PreferNoSchedule".into(),
    }
}

/// `full` (3 CPU / 6 GiB of 4 / 8 requested) and `empty` (1 CPU / 2 GiB), both
/// passing every filter; `taint_on_empty` puts a soft taint on `empty`.
fn two_nodes<'a>(nodes: &'a [NodeInfo], used: &'a [PodInfo]) -> Model<'a> {
    let mut m = Model::new();
    for n in nodes {
        m.add_slot(Slot::for_node(n));
    }
    m.place(&used[0], 0);
    m.place(&used[1], 1);
    m
}

#[test]
fn a_pod_goes_to_the_least_allocated_node() {
    let nodes = [node("full", vec![]), node("empty", vec![])];
    let used = [pod("u1", 3000, 6 * GI), pod("u2", 1000, 2 * GI)];
    let m = two_nodes(&nodes, &used);
    let p = pod("p", 500, GI);
    // By hand, with the pod: full has 3.5 of 4 CPU → (500·100/4000) = 12, 7 of 8 GiB → 12;
    // empty 1.5 of 4 → 2500·100/4000 = 62 (62.5 cut), 3 of 8 → 62. Both balanced (equal
    // shares) → 100.
    assert_eq!(fit_score(&m.slots[0], &p, Scoring::LeastAllocated), 12);
    assert_eq!(fit_score(&m.slots[1], &p, Scoring::LeastAllocated), 62);
    assert_eq!(balanced_score(&m.slots[0], &p), 100);
    assert_eq!(pick(&m, &p, &[0, 1], Scoring::LeastAllocated), Some(1));
    // MostAllocated: full 3500·100/4000 = 87, empty 1500·100/4000 = 37: the full one.
    assert_eq!(fit_score(&m.slots[0], &p, Scoring::MostAllocated), 87);
    assert_eq!(fit_score(&m.slots[1], &p, Scoring::MostAllocated), 37);
    assert_eq!(pick(&m, &p, &[0, 1], Scoring::MostAllocated), Some(0));
    // Only nodes that passed the filters are candidates.
    assert_eq!(pick(&m, &p, &[0], Scoring::LeastAllocated), Some(0));
    assert_eq!(pick(&m, &p, &[], Scoring::LeastAllocated), None);
}

#[test]
fn a_prefer_no_schedule_taint_sends_the_pod_to_the_untainted_node() {
    let nodes = [
        node("full", vec![]),
        node("empty", vec![soft("nodewright.io/candidate")]),
    ];
    let used = [pod("u1", 3000, 6 * GI), pod("u2", 1000, 2 * GI)];
    let m = two_nodes(&nodes, &used);
    let p = pod("p", 500, GI);
    // full: 12 + 100 + 3·100 = 412; empty: 62 + 100 + 3·(100 − 1·100/1) = 162.
    assert_eq!(intolerable_soft_taints(&m.slots[1], &p), 1);
    assert_eq!(pick(&m, &p, &[0, 1], Scoring::LeastAllocated), Some(0));
    // A pod that tolerates it (key, any effect) sees no taint anywhere: least allocated.
    let mut tolerant = pod("t", 500, GI);
    tolerant.tolerations.push(Toleration {
        key: Some("nodewright.io/candidate".into()),
        operator: Some("Exists".into()),
        value: None,
        effect: None,
    });
    assert_eq!(intolerable_soft_taints(&m.slots[1], &tolerant), 0);
    assert_eq!(
        pick(&m, &tolerant, &[0, 1], Scoring::LeastAllocated),
        Some(1)
    );
    // A toleration for NoSchedule only does not tolerate a PreferNoSchedule taint.
    let mut wrong = pod("w", 500, GI);
    wrong.tolerations.push(Toleration {
        key: Some("nodewright.io/candidate".into()),
        operator: Some("Exists".into()),
        value: None,
        effect: Some("NoSchedule".into()),
    });
    assert_eq!(pick(&m, &wrong, &[0, 1], Scoring::LeastAllocated), Some(0));
    // When the only feasible node is tainted, it still takes the pod (a preference).
    assert_eq!(pick(&m, &p, &[1], Scoring::LeastAllocated), Some(1));
}

#[test]
fn balanced_allocation_prefers_even_cpu_and_memory_shares() {
    // Two empty-ish nodes: one already CPU-heavy (2 CPU, 0 GiB), one even (1 CPU, 2 GiB).
    let nodes = [node("cpu-heavy", vec![]), node("even", vec![])];
    let used = [pod("u1", 2000, 0), pod("u2", 1000, 2 * GI)];
    let m = two_nodes(&nodes, &used);
    let p = pod("p", 1000, 2 * GI);
    // cpu-heavy with the pod: CPU 3/4 = 0.75, memory 2/8 = 0.25: σ = 0.25 → 75;
    // fit (1000·100/4000 = 25, 6/8 → 75) → 50. even: 2/4 = 0.5, 4/8 = 0.5 → σ 0 → 100;
    // fit (50 + 50) / 2 = 50. Totals 50+75+300 = 425 against 50+100+300 = 450.
    assert_eq!(balanced_score(&m.slots[0], &p), 75);
    assert_eq!(balanced_score(&m.slots[1], &p), 100);
    assert_eq!(fit_score(&m.slots[0], &p, Scoring::LeastAllocated), 50);
    assert_eq!(fit_score(&m.slots[1], &p, Scoring::LeastAllocated), 50);
    assert_eq!(pick(&m, &p, &[0, 1], Scoring::LeastAllocated), Some(1));
}

#[test]
fn scoring_names_on_the_command_line() {
    assert_eq!(
        Scoring::parse("least-allocated"),
        Some(Scoring::LeastAllocated)
    );
    assert_eq!(
        Scoring::parse("MostAllocated"),
        Some(Scoring::MostAllocated)
    );
    assert_eq!(Scoring::parse("binpack"), None);
    assert_eq!(Scoring::default(), Scoring::LeastAllocated);
}
