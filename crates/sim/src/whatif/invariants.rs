//! The invariants a crash-and-fault run ([`super::crash`]) checks after every cycle,
//! reading the world directly (not through the faulty APIs): what must hold whatever
//! the loop was doing when it died.

use std::collections::{BTreeMap, BTreeSet};

use super::figures::RunFigures;
use super::state::State;
use super::world::{Ms, World};
use crate::config::Config;
use crate::model::{NodeInfo, Server};
use nodewright_core::model::{LABEL_CLUSTER, STARTUP_TAINT_KEY};

/// A VM may go without a node this long beyond `provisionTimeout` (the planner deletes
/// it then, and a delete may fail, be lost or be cut short by a crash a few times).
pub const NODELESS_BOUND: Ms = 15 * 60_000;

/// Objects that are not this cluster's, as seeded: they must stay as they were.
#[derive(Debug, Clone, Default)]
pub struct Foreign {
    pub nodes: BTreeMap<String, NodeInfo>,
    pub vms: BTreeMap<String, Server>,
}

/// The invariants' memory across cycles.
pub struct Checker {
    cluster: String,
    provision_timeout: Ms,
    sizes: BTreeMap<String, (u32, u32)>,
    limit_nodes: Option<u32>,
    /// Groups that have reached `minSize`: from then on removing a node that joined
    /// must not take them below it.
    reached_min: BTreeSet<String>,
    foreign: Foreign,
    lost_seen: u32,
    killed_seen: u32,
    /// Since when each VM of ours has been without a node: its creation if it never
    /// had one, else the first check that found its node gone.
    nodeless_since: BTreeMap<String, Ms>,
    had_node: BTreeSet<String>,
    /// The group of every VM of ours that has had a node, as of the last check.
    joined_groups: BTreeMap<String, String>,
    /// One line per distinct violation.
    seen: BTreeSet<String>,
}

fn same_node(a: &NodeInfo, b: &NodeInfo) -> bool {
    a.labels == b.labels
        && a.annotations == b.annotations
        && a.unschedulable == b.unschedulable
        && a.taints == b.taints
}

/// The VMs of `cluster` in the world, leaving out the seeded ones.
fn ours<'a>(
    s: &'a State,
    cluster: &'a str,
    foreign: &'a Foreign,
) -> impl Iterator<Item = &'a super::state::Vm> + 'a {
    s.vms.values().filter(move |v| {
        v.server.cluster.as_deref() == Some(cluster) && !foreign.vms.contains_key(&v.server.id)
    })
}

impl Checker {
    pub fn new(config: &Config, foreign: Foreign) -> Checker {
        Checker {
            cluster: config.cluster_name.clone(),
            provision_timeout: u64::try_from(config.provision_timeout.as_millis())
                .unwrap_or(u64::MAX),
            sizes: config
                .node_groups
                .iter()
                .map(|g| (g.name.clone(), (g.min_size, g.max_size)))
                .collect(),
            limit_nodes: config.limits.nodes,
            reached_min: BTreeSet::new(),
            foreign,
            lost_seen: 0,
            killed_seen: 0,
            nodeless_since: BTreeMap::new(),
            had_node: BTreeSet::new(),
            joined_groups: BTreeMap::new(),
            seen: BTreeSet::new(),
        }
    }

    fn ours<'a>(&'a self, s: &'a State) -> impl Iterator<Item = &'a super::state::Vm> + 'a {
        ours(s, &self.cluster, &self.foreign)
    }

    fn report(&mut self, figures: &mut RunFigures, key: String, t: Ms) {
        if self.seen.insert(key.clone()) {
            figures.violations.push(format!("t={}s: {key}", t / 1000));
        }
    }

    /// Checks every invariant at virtual time `t`.
    pub fn check(&mut self, world: &World, t: Ms, figures: &mut RunFigures) {
        let s = world.lock();
        let mut found = Vec::new();
        // Never above maxSize or the cluster's node limit, never below minSize once
        // reached.
        let mut by_group: BTreeMap<String, u32> = BTreeMap::new();
        for v in self.ours(&s) {
            *by_group
                .entry(v.server.group.clone().unwrap_or_default())
                .or_default() += 1;
        }
        let total: u32 = by_group.values().sum();
        figures.peak_vms = figures.peak_vms.max(total);
        // `limits` bound managed nodes: warm VMs count toward `maxSize` only.
        let running = self.ours(&s).filter(|v| !v.server.warm).count();
        let running = u32::try_from(running).unwrap_or(u32::MAX);
        if let Some(limit) = self.limit_nodes.filter(|l| running > *l) {
            found.push(format!("{running} running VMs, above limits.nodes {limit}"));
        }
        // Removing a VM that never got a node (provisioning failed) may leave a group
        // short; removing one that had joined may not.
        let now_ids: BTreeSet<&str> = ours(&s, &self.cluster, &self.foreign)
            .map(|v| v.server.id.as_str())
            .collect();
        let removed_joined: BTreeSet<String> = self
            .joined_groups
            .iter()
            .filter(|(id, _)| !now_ids.contains(id.as_str()))
            .map(|(_, g)| g.clone())
            .collect();
        for (g, (min, max)) in &self.sizes {
            let n = by_group.get(g).copied().unwrap_or(0);
            if n > *max {
                found.push(format!("group {g} has {n} VMs, above maxSize {max}"));
            }
            if n >= *min {
                self.reached_min.insert(g.clone());
            } else if self.reached_min.contains(g) && removed_joined.contains(g) {
                found.push(format!(
                    "group {g} has {n} VMs, below minSize {min}, after a node of it was removed"
                ));
            }
        }

        // No VM without a node for longer than provisionTimeout (plus the bound).
        let mut nodeless = BTreeMap::new();
        for v in ours(&s, &self.cluster, &self.foreign) {
            let id = &v.server.id;
            // Parked in a warm pool: stopped on purpose, with no node; its clock starts
            // again when a scale-up starts it (counted as one that had a node).
            if v.server.warm {
                self.nodeless_since.remove(id);
                self.had_node.insert(id.clone());
                continue;
            }
            if s.nodes.contains_key(&v.server.name) {
                self.had_node.insert(id.clone());
                continue;
            }
            let since = match self.nodeless_since.get(id) {
                Some(since) => *since,
                None if self.had_node.contains(id) => t,
                None => s.vm_stats.get(v.stat).map_or(t, |st| st.created),
            };
            nodeless.insert(id.clone(), since);
            let beyond = t
                .saturating_sub(since)
                .saturating_sub(self.provision_timeout);
            figures.max_nodeless_beyond_timeout_s =
                figures.max_nodeless_beyond_timeout_s.max(beyond / 1000);
            if beyond > NODELESS_BOUND {
                found.push(format!(
                    "VM {} has had no node for longer than provisionTimeout + {} min",
                    v.server.name,
                    NODELESS_BOUND / 60_000
                ));
            }
        }
        self.nodeless_since = nodeless;
        self.joined_groups = ours(&s, &self.cluster, &self.foreign)
            .filter(|v| self.had_node.contains(&v.server.id))
            .map(|v| {
                (
                    v.server.id.clone(),
                    v.server.group.clone().unwrap_or_default(),
                )
            })
            .collect();
        // No pod lost, none killed with its node (every pod that moved was evicted).
        if s.counters.pods_lost > self.lost_seen {
            self.lost_seen = s.counters.pods_lost;
            found.push(format!("{} bare pod(s) lost", s.counters.pods_lost));
        }
        if s.counters.pods_killed > self.killed_seen {
            self.killed_seen = s.counters.pods_killed;
            found.push(format!(
                "{} pod(s) killed with their node instead of evicted",
                s.counters.pods_killed
            ));
        }
        // Nothing that is not ours changed.
        for (name, before) in &self.foreign.nodes {
            match s.nodes.get(name) {
                Some(now) if same_node(before, &now.info) => {}
                Some(_) => found.push(format!("node {name}, not ours, was changed")),
                None => found.push(format!("node {name}, not ours, was deleted")),
            }
        }
        for (id, before) in &self.foreign.vms {
            match s.vms.get(id) {
                Some(now) if now.server == *before => {}
                Some(_) => found.push(format!("VM {id}, not ours, was changed")),
                None => found.push(format!("VM {id}, not ours, was deleted")),
            }
        }
        drop(s);
        figures.checks += 6;
        for f in found {
            self.report(figures, f, t);
        }
    }

    /// Whether the world is whole again: every VM of ours has a Ready node that pods
    /// may use, every node labelled ours has its VM, no pod waits.
    pub fn consistent(&self, world: &World) -> bool {
        let s = world.lock();
        // Warm VMs are stopped on purpose: no node is owed them (and a Node of one is not
        // whole).
        let vm_names: BTreeSet<&str> = self
            .ours(&s)
            .filter(|v| !v.server.warm)
            .map(|v| v.server.name.as_str())
            .collect();
        let vms_whole = vm_names.iter().all(|name| {
            s.nodes
                .get(*name)
                .is_some_and(|n| n.info.ready && !n.info.has_taint(STARTUP_TAINT_KEY))
        });
        let nodes_whole = s
            .nodes
            .values()
            .filter(|n| !self.foreign.nodes.contains_key(&n.info.name))
            .filter(|n| n.info.labels.get(LABEL_CLUSTER) == Some(&self.cluster))
            .all(|n| vm_names.contains(n.info.name.as_str()));
        let none_pending = s.pods.values().all(|p| p.started.is_some());
        vms_whole && nodes_whole && none_pending
    }

    /// The end of a run: every pod finished and none lost, each group back at
    /// `minSize` running VMs, the world whole.
    pub fn finish(&mut self, world: &World, figures: &mut RunFigures) {
        let t = world.now();
        let consistent = self.consistent(world);
        let s = world.lock();
        figures.pods = u32::try_from(s.rows.len()).unwrap_or(u32::MAX);
        figures.pods_finished = s.row_stats.iter().filter(|r| r.finished.is_some()).count() as u32;
        figures.pods_lost = s.row_stats.iter().filter(|r| r.lost).count() as u32;
        let mut found = Vec::new();
        if figures.pods_finished + figures.pods_lost < figures.pods {
            found.push(format!(
                "{} of {} pods never finished",
                figures.pods - figures.pods_finished - figures.pods_lost,
                figures.pods
            ));
        }
        let mut final_vms: BTreeMap<String, u32> =
            self.sizes.keys().map(|g| (g.clone(), 0)).collect();
        // The running ones: a warm pool stays on top of `minSize`.
        for v in self.ours(&s).filter(|v| !v.server.warm) {
            *final_vms
                .entry(v.server.group.clone().unwrap_or_default())
                .or_default() += 1;
        }
        for (g, (min, _)) in &self.sizes {
            let n = final_vms.get(g).copied().unwrap_or(0);
            if n != *min {
                found.push(format!(
                    "group {g} ended with {n} VMs, not its minSize {min}"
                ));
            }
        }
        drop(s);
        figures.final_vms = final_vms;
        if !consistent || figures.cycles_to_converge.is_none() {
            found.push("the world never became consistent after the faults stopped".into());
        }
        figures.checks += 3;
        for f in found {
            self.report(figures, f, t);
        }
    }
}
