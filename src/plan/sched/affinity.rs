//! Inter-pod affinity, anti-affinity and topology spread (the InterPodAffinity and
//! PodTopologySpread filters). Both need "how many matching pods are in this node's
//! zone (or on this host)?"; those counts are built once per rule and kept current as
//! the model places pods, so a packing of thousands of pods never rescans the cluster.

use std::collections::{BTreeMap, HashMap};

use super::spec::{LabelSelector, Namespaces, NodeSelectorTerm, PodAffinityTerm};
use super::{Model, Slot, Unfit};
use crate::plan::model::{PodInfo, Toleration};

/// Which nodes count as domains of a spread constraint (its node affinity and taint
/// policies applied to the incoming pod).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Eligibility {
    node_selector: BTreeMap<String, String>,
    node_affinity: Option<Vec<NodeSelectorTerm>>,
    tolerations: Option<Vec<Toleration>>,
}

impl Eligibility {
    fn admits(&self, slot: &Slot<'_>) -> bool {
        let selector = self
            .node_selector
            .iter()
            .all(|(k, v)| slot.labels.get(k) == Some(v));
        let affinity = self
            .node_affinity
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| t.matches(&slot.name, &slot.labels)));
        let taints = self.tolerations.as_ref().is_none_or(|tols| {
            slot.taints
                .iter()
                .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                .all(|t| tols.iter().any(|tol| tol.tolerates(t)))
        });
        selector && affinity && taints
    }
}

/// One counted rule: pods selected by `selector` in `namespaces`, per value of
/// `topology_key`; for spread, only over eligible nodes, and every eligible domain is
/// present (with zero when empty) because the minimum over domains matters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CountKey {
    namespaces: Namespaces,
    selector: LabelSelector,
    topology_key: String,
    spread: Option<Eligibility>,
}

#[derive(Debug, Clone, Default)]
pub struct Counts {
    by_domain: HashMap<String, u32>,
    total: u32,
}

impl CountKey {
    fn for_term(t: &PodAffinityTerm) -> CountKey {
        CountKey {
            namespaces: t.namespaces.clone(),
            selector: t.selector.clone(),
            topology_key: t.topology_key.clone(),
            spread: None,
        }
    }

    fn selects(&self, pod: &PodInfo) -> bool {
        !pod.deleting
            && self.namespaces.contains(&pod.namespace)
            && self.selector.matches(&pod.labels)
    }
}

fn build(m: &Model<'_>, key: &CountKey) -> Counts {
    let mut c = Counts::default();
    for (i, slot) in m.slots.iter().enumerate() {
        add_domain(key, &mut c, slot);
        if key.spread.as_ref().is_some_and(|e| !e.admits(slot)) {
            continue;
        }
        let Some(domain) = slot.labels.get(&key.topology_key) else {
            continue;
        };
        let n = m.pods_on(i).iter().filter(|p| key.selects(p)).count() as u32;
        if n > 0 {
            *c.by_domain.entry(domain.clone()).or_insert(0) += n;
            c.total += n;
        }
    }
    c
}

/// Registers the domain of a new slot for a spread count.
pub fn add_domain(key: &CountKey, c: &mut Counts, slot: &Slot<'_>) {
    if let Some(e) = &key.spread {
        if e.admits(slot) {
            if let Some(d) = slot.labels.get(&key.topology_key) {
                c.by_domain.entry(d.clone()).or_insert(0);
            }
        }
    }
}

/// Keeps a count current when `pod` is placed on `slot`.
pub fn count_placed(key: &CountKey, c: &mut Counts, slot: &Slot<'_>, pod: &PodInfo) {
    if key.spread.as_ref().is_some_and(|e| !e.admits(slot)) || !key.selects(pod) {
        return;
    }
    if let Some(d) = slot.labels.get(&key.topology_key) {
        *c.by_domain.entry(d.clone()).or_insert(0) += 1;
        c.total += 1;
    }
}

fn counts<'m>(m: &'m mut Model<'_>, key: CountKey) -> &'m Counts {
    if !m.counts.contains_key(&key) {
        let c = build(m, &key);
        m.counts.insert(key.clone(), c);
    }
    &m.counts[&key]
}

/// The inter-pod and spread filters for `pod` on slot `i`.
pub fn check<'a>(m: &mut Model<'a>, pod: &'a PodInfo, i: usize) -> Result<(), Unfit> {
    // Pods already there whose anti-affinity rejects this one.
    {
        let slot = &m.slots[i];
        for &(owner, t, at) in &m.anti {
            let term = &owner.pod_anti_affinity[t];
            if !term.selects(&pod.namespace, &pod.labels) || pod.deleting {
                continue;
            }
            let key = &term.topology_key;
            if let (Some(a), Some(b)) = (slot.labels.get(key), m.slots[at].labels.get(key)) {
                if a == b {
                    return Err(Unfit::ExistingAntiAffinity);
                }
            }
        }
    }
    for term in &pod.pod_anti_affinity {
        let Some(d) = m.slots[i].labels.get(&term.topology_key).cloned() else {
            continue;
        };
        let c = counts(m, CountKey::for_term(term));
        if c.by_domain.get(&d).copied().unwrap_or(0) > 0 {
            return Err(Unfit::PodAntiAffinity);
        }
    }
    if !pod.pod_affinity.is_empty() {
        let mut all_present = true;
        let mut any_anywhere = false;
        for term in &pod.pod_affinity {
            let Some(d) = m.slots[i].labels.get(&term.topology_key).cloned() else {
                return Err(Unfit::MissingTopologyLabel(term.topology_key.clone()));
            };
            let c = counts(m, CountKey::for_term(term));
            any_anywhere |= c.total > 0;
            if c.by_domain.get(&d).copied().unwrap_or(0) == 0 {
                all_present = false;
            }
        }
        // The first pod of a group with affinity to itself may go anywhere, or it
        // would wait forever (the scheduler's own exception).
        let first_of_its_kind = !any_anywhere
            && pod
                .pod_affinity
                .iter()
                .all(|t| t.selects(&pod.namespace, &pod.labels));
        if !all_present && !first_of_its_kind {
            return Err(Unfit::PodAffinity);
        }
    }
    for c in &pod.spread {
        let Some(d) = m.slots[i].labels.get(&c.topology_key).cloned() else {
            return Err(Unfit::MissingTopologyLabel(c.topology_key.clone()));
        };
        let key = CountKey {
            namespaces: Namespaces::Listed(vec![pod.namespace.clone()]),
            selector: c.selector.clone(),
            topology_key: c.topology_key.clone(),
            spread: Some(Eligibility {
                node_selector: if c.honor_node_affinity {
                    pod.node_selector.clone()
                } else {
                    BTreeMap::new()
                },
                node_affinity: if c.honor_node_affinity {
                    pod.node_affinity.clone()
                } else {
                    None
                },
                tolerations: c.honor_taints.then(|| pod.tolerations.clone()),
            }),
        };
        let counts = counts(m, key);
        let domains = counts.by_domain.len() as u32;
        let min = if c.min_domains.is_some_and(|n| domains < n) {
            0
        } else {
            counts.by_domain.values().copied().min().unwrap_or(0)
        };
        let here = counts.by_domain.get(&d).copied().unwrap_or(0);
        let own = u32::from(c.selector.matches(&pod.labels));
        if (here + own).saturating_sub(min) > c.max_skew {
            return Err(Unfit::TopologySpread);
        }
    }
    Ok(())
}
