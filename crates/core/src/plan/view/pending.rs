//! Where the pending pods could go: on a node that exists, on capacity on its way, on a
//! new node of some group, or nowhere (with each group's reason).

use super::{GroupInfo, View};
use crate::config::NodeGroupConfig;
use crate::model::PodInfo;
use crate::plan::sched::{self, SlotKind, Unfit};

/// Where the model puts the pods the scheduler could not place.
#[derive(Default)]
pub struct Pending<'a> {
    /// Fit a node that exists now: the scheduler should place them.
    pub on_nodes: Vec<(&'a PodInfo, String)>,
    /// Would fit an existing node, but the scheduler has refused them past
    /// `modelMismatchGrace`: they are treated as needing a node.
    pub mismatched: Vec<(&'a PodInfo, String)>,
    /// Fit a VM still provisioning.
    pub on_provisioning: Vec<(&'a PodInfo, String)>,
    /// Need new nodes; some group can host each of them.
    pub needing_nodes: Vec<&'a PodInfo>,
    /// No group can host these at all, with each group's reason.
    pub unhostable: Vec<(&'a PodInfo, Vec<(String, String)>)>,
}

impl<'a> View<'a> {
    /// Sorts the unschedulable pods into the buckets of [`Pending`].
    pub(super) fn place_pending(&self, pods: Vec<&'a PodInfo>) -> Pending<'a> {
        let mut out = Pending::default();
        if pods.is_empty() {
            return out;
        }
        let mut pods = pods;
        sched::sort_for_packing(&mut pods, &self.reference_node());
        let mut m = self.model();
        let (placed, left) = sched::first_fit(&mut m, &pods, |_| true);
        let grace = self.config.model_mismatch_grace;
        let mut need = left;
        let mut refused_again = Vec::new();
        let newest_server = self.members.iter().map(|m| m.server.created).max();
        for (pod, i) in placed {
            let slot = &m.slots[i];
            let name = slot.name.to_string();
            match slot.kind {
                SlotKind::Node => {
                    let since = pod.unschedulable_since.unwrap_or(pod.created);
                    if self.age(since) <= grace {
                        out.on_nodes.push((pod, name));
                    } else if newest_server.is_some_and(|t| t > since + grace) {
                        // One node per mismatch, never a node per cycle: once a VM was
                        // created after the grace ran out, the pod waits for a person.
                        refused_again.push((pod, name));
                    } else {
                        out.mismatched.push((pod, name));
                        need.push(pod);
                    }
                }
                _ => out.on_provisioning.push((pod, name)),
            }
        }
        for (pod, node) in refused_again {
            out.unhostable.push((
                pod,
                vec![(
                    String::new(),
                    format!(
                        "the scheduler refuses it though nodewright's model places it on {node}, and a node was already added for it; something the model does not see (a volume provisioner's own topology, a namespaceSelector) keeps it out: check `kubectl describe pod`"
                    ),
                )],
            ));
        }
        for pod in need {
            // No new node can help a pod whose volume is on a node that is gone, or whose
            // claims let it run nowhere: said once, not once per group.
            if let Some(why) = self.volume_dead_end(pod) {
                out.unhostable.push((pod, vec![(String::new(), why)]));
                continue;
            }
            let mut why = Vec::new();
            let mut hostable = false;
            for g in &self.config.node_groups {
                let info = &self.groups[g.name.as_str()];
                // Its provider could not be read: its shape is unknown, not too small.
                if self.frozen.contains_key(g.name.as_str())
                    && !info.learned
                    && info.allocatable.memory == 0
                {
                    hostable = true;
                    break;
                }
                // A group of several sizes hosts what any of its sizes does.
                let fits_a_size = info
                    .sizes
                    .iter()
                    .any(|(_, i)| sched::why_not(pod, &i.template, &i.overhead).is_none());
                let info = info
                    .sizes
                    .iter()
                    .map(|(_, i)| i)
                    .max_by_key(|i| (i.allocatable.cpu, i.allocatable.memory))
                    .unwrap_or(info);
                match sched::why_not(pod, &info.template, &info.overhead).filter(|_| !fits_a_size) {
                    None => {
                        hostable = true;
                        break;
                    }
                    Some(reason) => why.push((g.name.clone(), self.explain(pod, g, info, reason))),
                }
            }
            if hostable {
                out.needing_nodes.push(pod);
            } else {
                out.unhostable.push((pod, why));
            }
        }
        out
    }

    /// Why `pod` can run nowhere because of its volumes, if so: a volume of it lives on
    /// a node that no longer exists, or its claims cannot be bound.
    fn volume_dead_end(&self, pod: &PodInfo) -> Option<String> {
        if let Some(problem) = &pod.volume_problem {
            return Some(format!("its volumes let it run nowhere: {problem}"));
        }
        let l = pod
            .local_volumes
            .iter()
            .find(|l| !self.nodes.iter().any(|n| n.name == l.node))?;
        Some(format!(
            "its data is on node {} (volume {}, PersistentVolumeClaim {}, PersistentVolume {}), which is gone: no new node can reach it; restore that node, or delete the claim to start over with an empty volume",
            l.node, l.volume, l.claim, l.pv
        ))
    }

    /// "group web: needs cpu 12, a node has 8" and the like.
    fn explain(&self, pod: &PodInfo, g: &NodeGroupConfig, info: &GroupInfo, why: Unfit) -> String {
        match why {
            Unfit::Insufficient(names) => {
                let usable = info.usable();
                let parts: Vec<String> = names
                    .iter()
                    .map(|n| match *n {
                        "cpu" => format!(
                            "needs cpu {}, a node has {}",
                            crate::model::fmt_cpu(pod.requests.cpu),
                            crate::model::fmt_cpu(usable.cpu)
                        ),
                        "memory" => format!(
                            "needs memory {}, a node has {}",
                            super::super::units::fmt_u(pod.requests.memory),
                            super::super::units::fmt_u(usable.memory)
                        ),
                        "extended" => {
                            let missing: Vec<String> = pod
                                .requests
                                .scalar
                                .iter()
                                .filter(|(k, v)| usable.get(k) < **v)
                                .map(|(k, v)| format!("{k} {v} (a node has {})", usable.get(k)))
                                .collect();
                            format!("needs {}", missing.join(", "))
                        }
                        other => format!("needs more {other} than a node has"),
                    })
                    .collect();
                format!("group {}: {}", g.name, parts.join("; "))
            }
            other => format!("group {}: {other}", g.name),
        }
    }
}
