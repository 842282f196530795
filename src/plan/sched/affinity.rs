//! Inter-pod affinity, anti-affinity and topology spread (the InterPodAffinity and
//! PodTopologySpread filters). Both need "how many matching pods are in this node's
//! zone (or on this host)?"; those counts are built once per rule and kept current as
//! the model places pods and rolls them back, so a packing of thousands of pods never
//! rescans the cluster.
//!
//! What keeps a check cheap on a large cluster:
//! - every topology key's domains are interned once, so a slot's domain is an index;
//! - the required anti-affinity terms of placed pods are grouped by term, with the
//!   number of owners per domain: a check looks at the groups whose term selects the
//!   incoming pod (found once per pod), never at every pod with anti-affinity;
//! - placed pods are grouped by (namespace, labels), so building a rule's counts tests
//!   its selector once per group of alike pods rather than once per pod;
//! - the rules of a pod are resolved to count indexes once per pod, not per check;
//! - a spread rule keeps a histogram of its domains' counts, for the minimum.

use std::collections::BTreeMap;

use super::index::FxHashMap;
use super::spec::{LabelSelector, Namespaces, NodeSelectorTerm, PodAffinityTerm};
use super::{Slot, Unfit};
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

impl CountKey {
    fn for_term(t: &PodAffinityTerm) -> CountKey {
        CountKey {
            namespaces: t.namespaces.clone(),
            selector: t.selector.clone(),
            topology_key: t.topology_key.clone(),
            spread: None,
        }
    }

    fn selects(&self, c: &Class<'_>) -> bool {
        !c.deleting && self.namespaces.contains(c.namespace) && self.selector.matches(c.labels)
    }
}

/// The domains of one topology key: each slot's value of that label, interned.
struct Topology {
    key: String,
    ids: FxHashMap<String, u32>,
    /// Per slot.
    slot_domain: Vec<Option<u32>>,
}

impl Topology {
    fn new(key: &str, slots: &[Slot<'_>]) -> Topology {
        let mut t = Topology {
            key: key.to_string(),
            ids: FxHashMap::default(),
            slot_domain: Vec::with_capacity(slots.len()),
        };
        for s in slots {
            t.push(s);
        }
        t
    }

    fn push(&mut self, slot: &Slot<'_>) {
        let d = slot.labels.get(&self.key).map(|v| match self.ids.get(v) {
            Some(&d) => d,
            None => {
                let d = self.ids.len() as u32;
                self.ids.insert(v.clone(), d);
                d
            }
        });
        self.slot_domain.push(d);
    }
}

/// The domains a spread rule counts over: those of eligible slots.
#[derive(Default)]
struct SpreadDomains {
    /// Per slot.
    eligible: Vec<bool>,
    /// Per domain: how many eligible slots carry it (a domain is present when > 0).
    slots: Vec<u32>,
    present: u32,
    /// Pod count -> number of present domains with that count.
    histogram: BTreeMap<u32, u32>,
}

impl SpreadDomains {
    fn min(&self) -> u32 {
        self.histogram.keys().next().copied().unwrap_or(0)
    }

    fn hist_move(&mut self, from: Option<u32>, to: Option<u32>) {
        if let Some(f) = from {
            if let Some(n) = self.histogram.get_mut(&f) {
                *n -= 1;
                if *n == 0 {
                    self.histogram.remove(&f);
                }
            }
        }
        if let Some(t) = to {
            *self.histogram.entry(t).or_insert(0) += 1;
        }
    }

    /// An eligible slot of domain `d` (whose count is `count`) comes or goes.
    fn slot(&mut self, d: u32, count: u32, up: bool) {
        let d = d as usize;
        if self.slots.len() <= d {
            self.slots.resize(d + 1, 0);
        }
        if up {
            self.slots[d] += 1;
            if self.slots[d] == 1 {
                self.present += 1;
                self.hist_move(None, Some(count));
            }
        } else {
            self.slots[d] = self.slots[d].saturating_sub(1);
            if self.slots[d] == 0 {
                self.present = self.present.saturating_sub(1);
                self.hist_move(Some(count), None);
            }
        }
    }

    fn is_present(&self, d: u32) -> bool {
        self.slots.get(d as usize).is_some_and(|&n| n > 0)
    }
}

struct Counts {
    key: CountKey,
    topo: usize,
    by_domain: Vec<u32>,
    total: u32,
    spread: Option<SpreadDomains>,
}

impl Counts {
    fn get(&self, d: u32) -> u32 {
        self.by_domain.get(d as usize).copied().unwrap_or(0)
    }

    /// A selected pod is placed on (or taken off) slot `i`.
    fn placed(&mut self, topos: &[Topology], i: usize, up: bool) {
        if let Some(sp) = &self.spread {
            if !sp.eligible.get(i).copied().unwrap_or(false) {
                return;
            }
        }
        let Some(d) = topos[self.topo].slot_domain.get(i).copied().flatten() else {
            return;
        };
        let old = self.get(d);
        let new = if up { old + 1 } else { old.saturating_sub(1) };
        let di = d as usize;
        if self.by_domain.len() <= di {
            self.by_domain.resize(di + 1, 0);
        }
        self.by_domain[di] = new;
        if up {
            self.total += 1;
        } else {
            self.total = self.total.saturating_sub(1);
        }
        if let Some(sp) = &mut self.spread {
            if sp.is_present(d) {
                sp.hist_move(Some(old), Some(new));
            }
        }
    }
}

/// Required anti-affinity terms of placed pods, one group per distinct term, with how
/// many of their owners are in each domain.
struct AntiGroup<'a> {
    term: &'a PodAffinityTerm,
    topo: usize,
    by_domain: Vec<u32>,
}

/// Placed pods alike for every selector: same namespace, labels and deletion state.
struct Class<'a> {
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    deleting: bool,
    /// The slot of each pod of the class (a multiset).
    slots: Vec<u32>,
    /// The counts whose selector takes this class, among the first `keys_seen` counts.
    keys: Vec<u32>,
    keys_seen: usize,
}

#[derive(PartialEq, Eq, Hash)]
struct ClassKey<'a> {
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    deleting: bool,
}

/// A pod's rules resolved to counts, and the anti-affinity groups that reject it.
struct PodRules {
    anti: Vec<u32>,
    affinity: Vec<u32>,
    /// Whether every affinity term selects the pod itself.
    self_affine: bool,
    spread: Vec<u32>,
    /// Per spread constraint: 1 when its selector selects the pod itself.
    spread_own: Vec<u32>,
    groups: Vec<u32>,
    groups_seen: usize,
}

/// Everything the inter-pod and spread filters count, kept current by the model.
#[derive(Default)]
pub struct Index<'a> {
    topos: Vec<Topology>,
    topo_ids: FxHashMap<String, usize>,
    groups: Vec<AntiGroup<'a>>,
    group_ids: FxHashMap<&'a PodAffinityTerm, u32>,
    counts: Vec<Counts>,
    count_ids: FxHashMap<CountKey, u32>,
    classes: Vec<Class<'a>>,
    class_ids: FxHashMap<ClassKey<'a>, u32>,
    classes_built: bool,
    rules: Vec<PodRules>,
    /// Pod address -> index in `rules`.
    rule_ids: FxHashMap<usize, u32>,
}

impl<'a> Index<'a> {
    fn topo(&mut self, key: &str, slots: &[Slot<'_>]) -> usize {
        if let Some(&t) = self.topo_ids.get(key) {
            return t;
        }
        let t = self.topos.len();
        self.topos.push(Topology::new(key, slots));
        self.topo_ids.insert(key.to_string(), t);
        t
    }

    fn class(&mut self, pod: &'a PodInfo) -> u32 {
        let key = ClassKey {
            namespace: &pod.namespace,
            labels: &pod.labels,
            deleting: pod.deleting,
        };
        if let Some(&c) = self.class_ids.get(&key) {
            return c;
        }
        let c = self.classes.len() as u32;
        self.classes.push(Class {
            namespace: &pod.namespace,
            labels: &pod.labels,
            deleting: pod.deleting,
            slots: Vec::new(),
            keys: Vec::new(),
            keys_seen: 0,
        });
        self.class_ids.insert(key, c);
        c
    }

    fn ensure_classes(&mut self, pods_on: &[Vec<&'a PodInfo>]) {
        if self.classes_built {
            return;
        }
        self.classes_built = true;
        for (i, pods) in pods_on.iter().enumerate() {
            for &p in pods {
                let c = self.class(p) as usize;
                self.classes[c].slots.push(i as u32);
            }
        }
    }

    /// Slot `slots.len() - 1` was just added.
    pub fn slot_added(&mut self, slots: &[Slot<'_>]) {
        let Some(slot) = slots.last() else {
            return;
        };
        let i = slots.len() - 1;
        for t in &mut self.topos {
            t.push(slot);
        }
        for c in &mut self.counts {
            let Some(sp) = &mut c.spread else {
                continue;
            };
            let Some(e) = &c.key.spread else {
                continue;
            };
            let ok = e.admits(slot);
            sp.eligible.push(ok);
            if ok {
                if let Some(d) = self.topos[c.topo].slot_domain[i] {
                    let count = c.by_domain.get(d as usize).copied().unwrap_or(0);
                    sp.slot(d, count, true);
                }
            }
        }
    }

    /// Slot `i`, the last one, is about to be removed (nothing is placed on it).
    pub fn slot_removing(&mut self, i: usize) {
        for c in &mut self.counts {
            let Some(sp) = &mut c.spread else {
                continue;
            };
            if sp.eligible.get(i).copied().unwrap_or(false) {
                if let Some(d) = self.topos[c.topo].slot_domain.get(i).copied().flatten() {
                    let count = c.by_domain.get(d as usize).copied().unwrap_or(0);
                    sp.slot(d, count, false);
                }
            }
            sp.eligible.truncate(i);
        }
        for t in &mut self.topos {
            t.slot_domain.truncate(i);
        }
    }

    /// `pod` is placed on slot `i` (`up`) or taken off it again.
    pub fn placed(&mut self, slots: &[Slot<'_>], i: usize, pod: &'a PodInfo, up: bool) {
        for term in &pod.pod_anti_affinity {
            let g = match self.group_ids.get(term) {
                Some(&g) => g as usize,
                None => {
                    let topo = self.topo(&term.topology_key, slots);
                    let g = self.groups.len();
                    self.groups.push(AntiGroup {
                        term,
                        topo,
                        by_domain: Vec::new(),
                    });
                    self.group_ids.insert(term, g as u32);
                    g
                }
            };
            let group = &mut self.groups[g];
            if let Some(d) = self.topos[group.topo].slot_domain.get(i).copied().flatten() {
                let d = d as usize;
                if group.by_domain.len() <= d {
                    group.by_domain.resize(d + 1, 0);
                }
                if up {
                    group.by_domain[d] += 1;
                } else {
                    group.by_domain[d] = group.by_domain[d].saturating_sub(1);
                }
            }
        }
        if !self.classes_built {
            return;
        }
        let c = self.class(pod) as usize;
        self.refresh_keys(c);
        let class = &mut self.classes[c];
        if up {
            class.slots.push(i as u32);
        } else if let Some(pos) = class.slots.iter().rposition(|&s| s as usize == i) {
            class.slots.swap_remove(pos);
        }
        for &k in &class.keys {
            self.counts[k as usize].placed(&self.topos, i, up);
        }
    }

    fn refresh_keys(&mut self, c: usize) {
        let class = &mut self.classes[c];
        while class.keys_seen < self.counts.len() {
            if self.counts[class.keys_seen].key.selects(class) {
                class.keys.push(class.keys_seen as u32);
            }
            class.keys_seen += 1;
        }
    }

    fn count(&mut self, key: CountKey, slots: &[Slot<'_>], pods_on: &[Vec<&'a PodInfo>]) -> u32 {
        if let Some(&k) = self.count_ids.get(&key) {
            return k;
        }
        let topo = self.topo(&key.topology_key, slots);
        self.ensure_classes(pods_on);
        let spread = key.spread.as_ref().map(|e| {
            let mut sp = SpreadDomains::default();
            for (i, s) in slots.iter().enumerate() {
                let ok = e.admits(s);
                sp.eligible.push(ok);
                if ok {
                    if let Some(d) = self.topos[topo].slot_domain[i] {
                        sp.slot(d, 0, true);
                    }
                }
            }
            sp
        });
        let mut c = Counts {
            key,
            topo,
            by_domain: Vec::new(),
            total: 0,
            spread,
        };
        for class in &self.classes {
            if c.key.selects(class) {
                for &s in &class.slots {
                    c.placed(&self.topos, s as usize, true);
                }
            }
        }
        let k = self.counts.len() as u32;
        self.count_ids.insert(c.key.clone(), k);
        self.counts.push(c);
        k
    }

    fn rules(
        &mut self,
        pod: &'a PodInfo,
        slots: &[Slot<'_>],
        pods_on: &[Vec<&'a PodInfo>],
    ) -> usize {
        let addr = pod as *const PodInfo as usize;
        let r = match self.rule_ids.get(&addr) {
            Some(&r) => r as usize,
            None => {
                let anti = pod
                    .pod_anti_affinity
                    .iter()
                    .map(|t| self.count(CountKey::for_term(t), slots, pods_on))
                    .collect();
                let affinity = pod
                    .pod_affinity
                    .iter()
                    .map(|t| self.count(CountKey::for_term(t), slots, pods_on))
                    .collect();
                let spread = pod
                    .spread
                    .iter()
                    .map(|c| {
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
                        self.count(key, slots, pods_on)
                    })
                    .collect();
                let r = self.rules.len();
                self.rules.push(PodRules {
                    anti,
                    affinity,
                    self_affine: pod
                        .pod_affinity
                        .iter()
                        .all(|t| t.selects(&pod.namespace, &pod.labels)),
                    spread,
                    spread_own: pod
                        .spread
                        .iter()
                        .map(|c| u32::from(c.selector.matches(&pod.labels)))
                        .collect(),
                    groups: Vec::new(),
                    groups_seen: 0,
                });
                self.rule_ids.insert(addr, r as u32);
                r
            }
        };
        let rules = &mut self.rules[r];
        while rules.groups_seen < self.groups.len() {
            let g = rules.groups_seen;
            if !pod.deleting && self.groups[g].term.selects(&pod.namespace, &pod.labels) {
                rules.groups.push(g as u32);
            }
            rules.groups_seen += 1;
        }
        r
    }

    /// The inter-pod and spread filters for `pod` on slot `i`.
    pub fn check(
        &mut self,
        slots: &[Slot<'_>],
        pods_on: &[Vec<&'a PodInfo>],
        pod: &'a PodInfo,
        i: usize,
    ) -> Result<(), Unfit> {
        if self.groups.is_empty()
            && pod.pod_anti_affinity.is_empty()
            && pod.pod_affinity.is_empty()
            && pod.spread.is_empty()
        {
            return Ok(());
        }
        let r = self.rules(pod, slots, pods_on);
        let rules = &self.rules[r];
        let domain = |topo: usize| self.topos[topo].slot_domain.get(i).copied().flatten();
        // Pods already there whose anti-affinity rejects this one.
        for &g in &rules.groups {
            let g = &self.groups[g as usize];
            if let Some(d) = domain(g.topo) {
                if g.by_domain.get(d as usize).copied().unwrap_or(0) > 0 {
                    return Err(Unfit::ExistingAntiAffinity);
                }
            }
        }
        for &k in &rules.anti {
            let c = &self.counts[k as usize];
            let Some(d) = domain(c.topo) else {
                continue;
            };
            if c.get(d) > 0 {
                return Err(Unfit::PodAntiAffinity);
            }
        }
        if !rules.affinity.is_empty() {
            let mut all_present = true;
            let mut any_anywhere = false;
            for (term, &k) in pod.pod_affinity.iter().zip(&rules.affinity) {
                let c = &self.counts[k as usize];
                let Some(d) = domain(c.topo) else {
                    return Err(Unfit::MissingTopologyLabel(term.topology_key.clone()));
                };
                any_anywhere |= c.total > 0;
                if c.get(d) == 0 {
                    all_present = false;
                }
            }
            // The first pod of a group with affinity to itself may go anywhere, or it
            // would wait forever (the scheduler's own exception).
            let first_of_its_kind = !any_anywhere && rules.self_affine;
            if !all_present && !first_of_its_kind {
                return Err(Unfit::PodAffinity);
            }
        }
        for ((spec, &k), &own) in pod.spread.iter().zip(&rules.spread).zip(&rules.spread_own) {
            let c = &self.counts[k as usize];
            let Some(d) = domain(c.topo) else {
                return Err(Unfit::MissingTopologyLabel(spec.topology_key.clone()));
            };
            let (domains, lowest) = c.spread.as_ref().map_or((0, 0), |s| (s.present, s.min()));
            let min = if spec.min_domains.is_some_and(|n| domains < n) {
                0
            } else {
                lowest
            };
            if (c.get(d) + own).saturating_sub(min) > spec.max_skew {
                return Err(Unfit::TopologySpread);
            }
        }
        Ok(())
    }
}
