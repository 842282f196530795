//! The simulation of a removal: a node's pods moved off it in the scheduling model and
//! the move undone, for both replacement and the screening of unneeded nodes.

use crate::model::PodInfo;
use crate::plan::sched::{self, Model, SlotKind};
use crate::plan::view::View;

/// Moves `pods` off `node` in the model, onto nodes that exist (pods evicted onto a VM
/// still booting would wait), and undoes it. Returns the pods that fit nowhere, and
/// whether some other node still has `minimumFreeNodeMemory` / `minimumFreeNodeCpu`
/// free afterwards.
pub(super) fn evict_in_model<'m>(
    v: &View<'_>,
    m: &mut Model<'m>,
    node: &str,
    pods: &[&'m PodInfo],
) -> (Vec<&'m PodInfo>, bool) {
    let Some(i) = m.slot_index(node) else {
        return (pods.to_vec(), false);
    };
    let mut sorted = pods.to_vec();
    sched::sort_for_packing(&mut sorted, &v.reference_node());
    m.trial_without(i, |m| {
        let (_, left) = sched::first_fit(m, &sorted, |s| s.kind == SlotKind::Node);
        let min_mem = v.config.minimum_free_node_memory.as_u64();
        let min_cpu = v
            .config
            .minimum_free_node_cpu
            .as_ref()
            .map_or(0, |q| q.milli());
        let keeps_minimum = (min_mem == 0 && min_cpu == 0)
            || v.schedulable().filter_map(|mem| mem.node).any(|n| {
                n.name != node
                    && m.slot_index(&n.name).is_some_and(|j| {
                        let f = m.slots[j].free();
                        f.memory >= min_mem && f.cpu >= min_cpu
                    })
            });
        (left, keeps_minimum)
    })
}
