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
//! - placed pods are indexed by the value of the label keys selectors match on (`app`
//!   and the like), so building a rule's counts looks only at the pods carrying its
//!   first `matchLabels` pair, and a placement updates only the rules watching its
//!   value (selectors without `matchLabels` are checked against every pod);
//! - the rules of a pod are resolved to count indexes once per pod, not per check;
//! - a spread rule keeps a histogram of its domains' counts, for the minimum.

use std::collections::BTreeMap;

use super::index::FxHashMap;
use super::{Slot, Unfit};
use crate::model::{
    LabelSelector, Namespaces, NodeSelectorTerm, PodAffinityTerm, PodInfo, SpreadConstraint,
    Toleration,
};

mod check;

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

    fn selects(&self, p: &PodInfo) -> bool {
        !p.deleting && self.namespaces.contains(&p.namespace) && self.selector.matches(&p.labels)
    }
}

/// The domains of one topology key: each slot's value of that label, interned.
#[derive(Clone)]
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

/// The domains spread rules count over: those of the slots their eligibility admits.
/// Shared by every spread rule with the same eligibility and topology key (most spread
/// rules differ only in their selector).
#[derive(Clone)]
struct Domains {
    eligibility: Eligibility,
    topo: usize,
    /// Per slot.
    eligible: Vec<bool>,
    /// Per domain: how many eligible slots carry it (a domain is present when > 0).
    slots: Vec<u32>,
    present: u32,
    /// The spread counts over these domains.
    watchers: Vec<u32>,
}

impl Domains {
    fn is_present(&self, d: u32) -> bool {
        self.slots.get(d as usize).is_some_and(|&n| n > 0)
    }

    /// An eligible slot of domain `d` comes (`up`) or goes: whether `d` became present
    /// or absent.
    fn slot(&mut self, d: u32, up: bool) -> bool {
        let d = d as usize;
        if self.slots.len() <= d {
            self.slots.resize(d + 1, 0);
        }
        if up {
            self.slots[d] += 1;
            if self.slots[d] == 1 {
                self.present += 1;
                return true;
            }
        } else if self.slots[d] > 0 {
            self.slots[d] -= 1;
            if self.slots[d] == 0 {
                self.present = self.present.saturating_sub(1);
                return true;
            }
        }
        false
    }
}

/// A spread rule's view of its domains: which [`Domains`], and its pod count ->
/// number of present domains with that count, for the minimum.
#[derive(Clone)]
struct Spread {
    domains: usize,
    histogram: BTreeMap<u32, u32>,
}

impl Spread {
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
}

#[derive(Clone)]
struct Counts {
    key: CountKey,
    topo: usize,
    by_domain: Vec<u32>,
    total: u32,
    spread: Option<Spread>,
}

impl Counts {
    fn get(&self, d: u32) -> u32 {
        self.by_domain.get(d as usize).copied().unwrap_or(0)
    }

    /// A selected pod is placed on (or taken off) slot `i`.
    fn placed(&mut self, topos: &[Topology], domains: &[Domains], i: usize, up: bool) {
        if let Some(sp) = &self.spread {
            if !domains[sp.domains]
                .eligible
                .get(i)
                .copied()
                .unwrap_or(false)
            {
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
            if domains[sp.domains].is_present(d) {
                sp.hist_move(Some(old), Some(new));
            }
        }
    }
}

/// Required anti-affinity terms of placed pods, one group per distinct term, with how
/// many of their owners are in each domain.
#[derive(Clone)]
struct AntiGroup<'a> {
    term: &'a PodAffinityTerm,
    topo: usize,
    by_domain: Vec<u32>,
}

/// Placed pods by their value of one label key, and the counts whose selector's first
/// `matchLabels` pair is on that key, by value.
#[derive(Clone)]
struct Postings<'a> {
    key: String,
    /// Value -> (slot, pod) of every placed pod with that value (a multiset).
    pods: FxHashMap<&'a str, Vec<(u32, &'a PodInfo)>>,
    /// Value -> counts to update when such a pod is placed or taken off.
    watchers: FxHashMap<String, Vec<u32>>,
}

/// Everything [`PodRules`] are derived from, borrowed: pods equal in all of it (the
/// replicas of one workload) share their resolved rules.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct RuleSig<'a> {
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    deleting: bool,
    anti: &'a [PodAffinityTerm],
    affinity: &'a [PodAffinityTerm],
    spread: &'a [SpreadConstraint],
    node_selector: &'a BTreeMap<String, String>,
    node_affinity: &'a Option<Vec<NodeSelectorTerm>>,
    tolerations: &'a [Toleration],
}

impl<'a> RuleSig<'a> {
    fn of(p: &'a PodInfo) -> RuleSig<'a> {
        RuleSig {
            namespace: &p.namespace,
            labels: &p.labels,
            deleting: p.deleting,
            anti: &p.pod_anti_affinity,
            affinity: &p.pod_affinity,
            spread: &p.spread,
            node_selector: &p.node_selector,
            node_affinity: &p.node_affinity,
            tolerations: &p.tolerations,
        }
    }
}

/// A pod's rules resolved to counts, and the anti-affinity groups that reject it.
#[derive(Clone)]
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
#[derive(Default, Clone)]
pub struct Index<'a> {
    topos: Vec<Topology>,
    topo_ids: FxHashMap<String, usize>,
    groups: Vec<AntiGroup<'a>>,
    group_ids: FxHashMap<&'a PodAffinityTerm, u32>,
    /// Groups by the first `matchLabels` pair of their term (label key -> value ->
    /// groups), and those whose term has none: a pod is tested against the groups
    /// filed under its own label values only.
    group_index: FxHashMap<String, FxHashMap<String, Vec<u32>>>,
    unindexed_groups: Vec<u32>,
    counts: Vec<Counts>,
    count_ids: FxHashMap<CountKey, u32>,
    domains: Vec<Domains>,
    domain_ids: FxHashMap<(Eligibility, usize), usize>,
    postings: Vec<Postings<'a>>,
    postings_ids: FxHashMap<String, usize>,
    /// Counts whose selector has no `matchLabels`: every placement is checked against them.
    unindexed: Vec<u32>,
    rules: Vec<PodRules>,
    /// Pod address -> index in `rules`.
    rule_ids: FxHashMap<usize, u32>,
    /// Pods alike in their rules -> index in `rules`.
    rule_sigs: FxHashMap<RuleSig<'a>, u32>,
    /// The last pod looked up in `rule_ids` (a scan checks one pod against many slots).
    last_rules: Option<(usize, u32)>,
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

    /// The postings of label `key`, built from every placed pod on first use.
    fn postings(&mut self, key: &str, pods_on: &[Vec<&'a PodInfo>]) -> usize {
        if let Some(&p) = self.postings_ids.get(key) {
            return p;
        }
        let mut pods: FxHashMap<&'a str, Vec<(u32, &'a PodInfo)>> = FxHashMap::default();
        for (i, on) in pods_on.iter().enumerate() {
            for &p in on {
                if let Some(v) = p.labels.get(key) {
                    pods.entry(v.as_str()).or_default().push((i as u32, p));
                }
            }
        }
        let p = self.postings.len();
        self.postings.push(Postings {
            key: key.to_string(),
            pods,
            watchers: FxHashMap::default(),
        });
        self.postings_ids.insert(key.to_string(), p);
        p
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
        for e in &mut self.domains {
            let ok = e.eligibility.admits(slot);
            e.eligible.push(ok);
            let d = self.topos[e.topo].slot_domain[i];
            if let (true, Some(d)) = (ok, d) {
                if e.slot(d, true) {
                    for &k in &e.watchers {
                        let c = &mut self.counts[k as usize];
                        let count = c.get(d);
                        if let Some(sp) = &mut c.spread {
                            sp.hist_move(None, Some(count));
                        }
                    }
                }
            }
        }
    }

    /// Slot `i`, the last one, is about to be removed (nothing is placed on it).
    pub fn slot_removing(&mut self, i: usize) {
        for e in &mut self.domains {
            let d = self.topos[e.topo].slot_domain.get(i).copied().flatten();
            if let (true, Some(d)) = (e.eligible.get(i).copied().unwrap_or(false), d) {
                if e.slot(d, false) {
                    for &k in &e.watchers {
                        let c = &mut self.counts[k as usize];
                        let count = c.get(d);
                        if let Some(sp) = &mut c.spread {
                            sp.hist_move(Some(count), None);
                        }
                    }
                }
            }
            e.eligible.truncate(i);
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
                    match term.selector.match_labels.iter().next() {
                        Some((k, v)) => self
                            .group_index
                            .entry(k.clone())
                            .or_default()
                            .entry(v.clone())
                            .or_default()
                            .push(g as u32),
                        None => self.unindexed_groups.push(g as u32),
                    }
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
        for post in &mut self.postings {
            let Some(v) = pod.labels.get(&post.key) else {
                continue;
            };
            let list = post.pods.entry(v.as_str()).or_default();
            if up {
                list.push((i as u32, pod));
            } else if let Some(pos) = list
                .iter()
                .rposition(|&(s, p)| s as usize == i && std::ptr::eq(p, pod))
            {
                list.swap_remove(pos);
            }
            if let Some(watchers) = post.watchers.get(v.as_str()) {
                for &k in watchers {
                    let c = &mut self.counts[k as usize];
                    if c.key.selects(pod) {
                        c.placed(&self.topos, &self.domains, i, up);
                    }
                }
            }
        }
        for &k in &self.unindexed {
            let c = &mut self.counts[k as usize];
            if c.key.selects(pod) {
                c.placed(&self.topos, &self.domains, i, up);
            }
        }
    }

    fn domains(&mut self, e: &Eligibility, topo: usize, slots: &[Slot<'_>]) -> usize {
        if let Some(&d) = self.domain_ids.get(&(e.clone(), topo)) {
            return d;
        }
        let mut domains = Domains {
            eligibility: e.clone(),
            topo,
            eligible: Vec::with_capacity(slots.len()),
            slots: Vec::new(),
            present: 0,
            watchers: Vec::new(),
        };
        for (i, s) in slots.iter().enumerate() {
            let ok = e.admits(s);
            domains.eligible.push(ok);
            if let (true, Some(d)) = (ok, self.topos[topo].slot_domain[i]) {
                domains.slot(d, true);
            }
        }
        let d = self.domains.len();
        self.domains.push(domains);
        self.domain_ids.insert((e.clone(), topo), d);
        d
    }

    fn count(&mut self, key: CountKey, slots: &[Slot<'_>], pods_on: &[Vec<&'a PodInfo>]) -> u32 {
        if let Some(&k) = self.count_ids.get(&key) {
            return k;
        }
        let topo = self.topo(&key.topology_key, slots);
        let k = self.counts.len() as u32;
        let spread = key.spread.as_ref().map(|e| {
            let domains = self.domains(e, topo, slots);
            self.domains[domains].watchers.push(k);
            let present = self.domains[domains].present;
            Spread {
                domains,
                // Every present domain starts at zero pods.
                histogram: if present > 0 {
                    BTreeMap::from([(0, present)])
                } else {
                    BTreeMap::new()
                },
            }
        });
        let mut c = Counts {
            key,
            topo,
            by_domain: Vec::new(),
            total: 0,
            spread,
        };
        // Pods selected must carry the first `matchLabels` pair: only those are looked
        // at, now and as pods are placed.
        let first = c
            .key
            .selector
            .match_labels
            .iter()
            .next()
            .map(|(l, v)| (l.clone(), v.clone()));
        match first {
            Some((label, value)) => {
                let post = self.postings(&label, pods_on);
                let post = &mut self.postings[post];
                for &(s, p) in post.pods.get(value.as_str()).into_iter().flatten() {
                    if c.key.selects(p) {
                        c.placed(&self.topos, &self.domains, s as usize, true);
                    }
                }
                post.watchers.entry(value).or_default().push(k);
            }
            None => {
                for (s, on) in pods_on.iter().enumerate() {
                    for &p in on {
                        if c.key.selects(p) {
                            c.placed(&self.topos, &self.domains, s, true);
                        }
                    }
                }
                self.unindexed.push(k);
            }
        }
        self.count_ids.insert(c.key.clone(), k);
        self.counts.push(c);
        k
    }
}
