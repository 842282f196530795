//! The scheduling model of the cluster the steps try placements in: built once with the
//! view (nodes, their pods, a slot per VM still provisioning) and copied per step, plus
//! the spread domains new nodes could offer and the node shape packing order compares
//! pods with. Apart from the facts it is built from (members, groups).

use super::View;
use crate::model::{PodInfo, Resources};
use crate::plan::sched::{self, Model, SlotKind};

impl<'a> View<'a> {
    /// The model of the cluster as it is, plus a slot per VM still provisioning: a copy
    /// of the one built with the view (far cheaper than rebuilding it from the pods).
    pub fn model(&self) -> Model<'a> {
        self.base_model.clone()
    }

    /// The model [`Self::model`] copies, with the affinity and spread rules of `pending`
    /// and of the running pods (scale-down moves those in the model) resolved in it
    /// once rather than in every copy.
    pub(super) fn build_model(&self, pending: &[&'a PodInfo]) -> Model<'a> {
        let mut m = Model::of_grouped_pods(self.nodes, |n| self.pods_on(n));
        for member in self.provisioning() {
            let Some(info) = self.groups.get(member.group.name.as_str()) else {
                continue;
            };
            // A VM of a size chosen among several brings that size.
            let info = info.of_size(member.size());
            let mut slot = info.template.clone();
            slot.name = member.server.name.clone().into();
            slot.labels.to_mut().insert(
                sched::template::LABEL_HOSTNAME.to_string(),
                member.server.name.clone(),
            );
            slot.kind = SlotKind::Provisioning(member.group.name.clone());
            slot.used = info.overhead.clone();
            if let Some(i) = m.slot_index(&member.server.name) {
                // Its node registered with the startup taint: count the VM once.
                m.slots[i].usable = false;
            }
            m.add_slot(slot);
        }
        // A warm VM's Node (a fill on its one boot) is never room for pods.
        for s in &self.warm {
            if let Some(i) = m.slot_index(&s.name) {
                m.slots[i].usable = false;
            }
        }
        m.prepare(pending);
        let with_rules: Vec<&'a PodInfo> = self
            .pods_by_node
            .values()
            .flatten()
            .copied()
            .filter(|p| {
                !p.pod_anti_affinity.is_empty()
                    || !p.pod_affinity.is_empty()
                    || !p.spread.is_empty()
            })
            .collect();
        m.prepare(&with_rules);
        m
    }

    /// [`Self::model`] plus each group's zone (and other topology values) as a spread
    /// domain, as Karpenter counts the domains a node pool could offer: a zone with no
    /// node yet is the emptiest one, so new nodes go there first. Hostnames are left
    /// out: every new node is a new host anyway.
    pub fn model_for_new_nodes(&self) -> Model<'a> {
        let mut m = self.model();
        for (name, info) in &self.groups {
            let mut slot = info.template.clone();
            slot.name = format!("{name}-domains").into();
            slot.labels.to_mut().remove(sched::template::LABEL_HOSTNAME);
            slot.usable = false;
            // Each hypervisor host the group's next VMs go to is a zone of its own.
            let zones: std::collections::BTreeSet<&String> =
                info.hosts.iter().flat_map(|h| &h.zones).collect();
            for z in zones {
                let mut d = slot.clone();
                d.name = format!("{name}-domain-{z}").into();
                d.labels
                    .to_mut()
                    .insert(sched::template::LABEL_ZONE.to_string(), z.clone());
                m.add_slot(d);
            }
            m.add_slot(slot);
        }
        m
    }

    /// The node shape pod sizes are compared with for packing order: the largest group.
    pub fn reference_node(&self) -> Resources {
        let mut r = Resources::default();
        for info in self.groups.values() {
            r.max_with(&info.allocatable);
            for (_, size) in &info.sizes {
                r.max_with(&size.allocatable);
            }
        }
        if r.cpu == 0 || r.memory == 0 {
            for n in self.nodes {
                r.max_with(&n.allocatable);
            }
        }
        r
    }
}
