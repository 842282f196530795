//! What the controllers must look at after a batch of writes, so a pass costs what
//! changed rather than the size of the cluster: the pods-by-owner index is kept current
//! from the store's change history, and a batch marks the owners, namespaces and
//! DaemonSets it touched. When the history since the last pass is gone (or on the first
//! pass) everything is dirty and the index is rebuilt.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::meta;
use super::owners::{controller_uid, ByOwner};
use super::resources::{DAEMONSETS, DEPLOYMENTS, JOBS, NODES, PDBS, PODS, REPLICASETS};
use super::store::{Change, ChangeKind, Stored, Txn};

/// (namespace, name)
type PodKey = (String, String);

/// The controllers' memory between passes.
#[derive(Debug, Default)]
pub struct ControllerState {
    /// Pods by controller uid, as of the last pass.
    pods_by_owner: HashMap<String, BTreeSet<PodKey>>,
}

/// What a pass reconciles.
#[derive(Debug, Default)]
pub struct Dirty {
    pub all: bool,
    /// Owners (ReplicaSets, DaemonSets, Jobs, Deployments) whose object or pods changed.
    pub owners: HashSet<String>,
    /// Namespaces where pods or budgets changed (PodDisruptionBudget status).
    pub namespaces: HashSet<String>,
    /// Nodes came or went (DaemonSets).
    pub nodes: bool,
    /// Owners deleted: their dependents are collected.
    pub deleted_owners: HashSet<String>,
    /// Pods created or re-owned, whose owner may not exist.
    pub new_pods: Vec<Arc<Stored>>,
}

impl Dirty {
    pub fn owner(&self, uid: &str) -> bool {
        self.all || self.owners.contains(uid)
    }

    pub fn namespace(&self, ns: &str) -> bool {
        self.all || self.namespaces.contains(ns)
    }

    pub fn nothing(&self) -> bool {
        !self.all
            && self.owners.is_empty()
            && self.namespaces.is_empty()
            && !self.nodes
            && self.deleted_owners.is_empty()
    }
}

fn owner_uid(o: &Value) -> Option<String> {
    controller_uid(o).map(|(_, uid)| uid.to_string())
}

fn key_of(o: &Value) -> PodKey {
    (meta::namespace(o).to_string(), meta::name(o).to_string())
}

impl ControllerState {
    /// Takes in the writes since the last pass (None: unknown, start over).
    pub fn absorb(&mut self, txn: &Txn<'_>, changes: Option<&[Arc<Change>]>) -> Dirty {
        let Some(changes) = changes else {
            self.pods_by_owner.clear();
            for p in txn.list_stored(&PODS, None) {
                if let Some(uid) = owner_uid(&p) {
                    self.pods_by_owner
                        .entry(uid)
                        .or_default()
                        .insert(key_of(&p));
                }
            }
            return Dirty {
                all: true,
                ..Dirty::default()
            };
        };
        let mut d = Dirty::default();
        for c in changes {
            let before = c.previous.as_deref().and_then(|p| owner_uid(p));
            let after = owner_uid(&c.object);
            if c.res == PODS.id {
                let key = (c.ns.clone(), c.name.clone());
                if let Some(uid) = &before {
                    if let Some(set) = self.pods_by_owner.get_mut(uid) {
                        set.remove(&key);
                        if set.is_empty() {
                            self.pods_by_owner.remove(uid);
                        }
                    }
                }
                if c.kind != ChangeKind::Deleted {
                    if let Some(uid) = &after {
                        self.pods_by_owner
                            .entry(uid.clone())
                            .or_default()
                            .insert(key);
                        if before.as_ref() != Some(uid) {
                            d.new_pods.push(c.object.clone());
                        }
                    }
                }
                d.owners.extend(before.into_iter().chain(after));
                d.namespaces.insert(c.ns.clone());
            } else if [REPLICASETS.id, DAEMONSETS.id, JOBS.id, DEPLOYMENTS.id].contains(&c.res) {
                let uid = meta::uid(&c.object).to_string();
                if c.kind == ChangeKind::Deleted {
                    d.deleted_owners.insert(uid.clone());
                }
                d.owners.insert(uid);
                // A ReplicaSet's Deployment follows its status.
                d.owners.extend(before.into_iter().chain(after));
            } else if c.res == NODES.id && c.kind != ChangeKind::Modified {
                d.nodes = true;
            } else if c.res == PDBS.id {
                d.namespaces.insert(c.ns.clone());
            }
        }
        d
    }

    /// The current pods of each dirty owner (every owner when all is dirty).
    pub fn pods_of_dirty(&self, txn: &Txn<'_>, dirty: &Dirty) -> ByOwner {
        let mut out = ByOwner::new();
        for (uid, keys) in &self.pods_by_owner {
            if !dirty.owner(uid) && !dirty.deleted_owners.contains(uid) {
                continue;
            }
            let pods = keys
                .iter()
                .filter_map(|(ns, name)| txn.get_stored(&PODS, ns, name).cloned())
                .collect();
            out.insert(uid.clone(), pods);
        }
        out
    }
}
