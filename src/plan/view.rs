//! Derived facts the steps share: which nodes and VMs are ours, what state each VM is
//! in, and how much memory is free. Computed once per plan.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::capacity::Bin;
use super::model::{NodeInfo, PodInfo, Snapshot};
use super::ServerRef;
use crate::cloud::{Server, ServerStatus};
use crate::config::{Config, NodeGroupConfig};
use crate::{LABEL_CLUSTER, LABEL_GROUP, STARTUP_TAINT_KEY};

/// Where a VM of ours is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    /// Booting, or its node has not become Ready and untainted yet.
    Provisioning,
    /// Its node is Ready and took the startup taint off.
    Joined,
    /// The cloud reports an error, or it did not join within `provisionTimeout`.
    Failed,
    /// The cloud is already deleting it.
    Deleting,
}

/// A VM of ours with the node it became, if any.
pub struct Member<'a> {
    pub server: &'a Server,
    pub group: &'a NodeGroupConfig,
    /// The node with the same name, only when its labels also say it is ours.
    pub node: Option<&'a NodeInfo>,
    pub state: ServerState,
}

impl Member<'_> {
    pub fn server_ref(&self) -> ServerRef {
        ServerRef {
            provider: self.server.provider.clone(),
            id: self.server.id.clone(),
            name: self.server.name.clone(),
            group: self.group.name.clone(),
        }
    }

    pub fn cordoned(&self) -> bool {
        self.node.is_some_and(|n| n.unschedulable)
    }

    /// Joined, schedulable, not going away: counts as capacity.
    pub fn schedulable(&self) -> bool {
        self.state == ServerState::Joined
            && self
                .node
                .is_some_and(|n| n.ready && !n.unschedulable && !n.deleting)
    }
}

pub struct View<'a> {
    pub config: &'a Config,
    pub now: SystemTime,
    pub members: Vec<Member<'a>>,
    pub pods_by_node: BTreeMap<&'a str, Vec<&'a PodInfo>>,
    /// Pods the scheduler could not place that a managed node or a node group could host.
    pub unschedulable: Vec<&'a PodInfo>,
    /// Unschedulable pods nothing of ours could ever host (selector, taints, size).
    pub unhostable: Vec<&'a PodInfo>,
    pub pods: &'a [PodInfo],
    pub pdbs: &'a [super::model::PdbInfo],
    pub volume_attachments: &'a [(String, String)],
    pub group_backoff: &'a BTreeMap<String, SystemTime>,
    group_memory: BTreeMap<&'a str, u64>,
}

impl<'a> View<'a> {
    pub fn new(s: &'a Snapshot, config: &'a Config, now: SystemTime) -> View<'a> {
        let nodes: BTreeMap<&str, &NodeInfo> =
            s.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut members = Vec::new();
        for server in &s.servers {
            // Ownership, cloud side: our cluster tag and a group we know.
            if server.cluster.as_deref() != Some(config.cluster_name.as_str()) {
                continue;
            }
            let Some(group) = server.group.as_deref().and_then(|g| config.group(g)) else {
                continue;
            };
            // Ownership, cluster side: the node's labels must agree.
            let node = nodes.get(server.name.as_str()).copied().filter(|n| {
                n.labels.get(LABEL_CLUSTER) == Some(&config.cluster_name)
                    && n.labels.get(LABEL_GROUP) == Some(&group.name)
            });
            let state = server_state(server, node, config.provision_timeout, now);
            members.push(Member {
                server,
                group,
                node,
                state,
            });
        }
        members.sort_by(|a, b| a.server.name.cmp(&b.server.name));

        let mut pods_by_node: BTreeMap<&str, Vec<&PodInfo>> = BTreeMap::new();
        let mut unschedulable = Vec::new();
        for pod in &s.pods {
            if pod.is_terminal() {
                continue;
            }
            match &pod.node_name {
                Some(node) => pods_by_node.entry(node.as_str()).or_default().push(pod),
                None if pod.unschedulable && !pod.deleting => unschedulable.push(pod),
                None => {}
            }
        }

        let mut group_memory = BTreeMap::new();
        for g in &config.node_groups {
            let observed = members
                .iter()
                .filter(|m| m.group.name == g.name)
                .filter_map(|m| m.node)
                .map(|n| n.allocatable_memory)
                .max();
            let memory = observed
                .or(g.node_memory.map(|b| b.as_u64()))
                .or(s.group_memory.get(&g.name).copied())
                .or(members
                    .iter()
                    .filter(|m| m.group.name == g.name)
                    .filter_map(|m| m.server.memory_bytes)
                    .max());
            if let Some(m) = memory {
                group_memory.insert(g.name.as_str(), m);
            }
        }

        let mut view = View {
            config,
            now,
            members,
            pods_by_node,
            unschedulable: Vec::new(),
            unhostable: Vec::new(),
            pods: &s.pods,
            pdbs: &s.pdbs,
            volume_attachments: &s.volume_attachments,
            group_backoff: &s.group_backoff,
            group_memory,
        };
        let (hostable, unhostable) = unschedulable.into_iter().partition(|p| view.hostable(p));
        view.unschedulable = hostable;
        view.unhostable = unhostable;
        view
    }

    /// Whether some managed node or a new node of some group could take `pod` at all.
    fn hostable(&self, pod: &PodInfo) -> bool {
        let on_node = self.schedulable().filter_map(|m| m.node).any(|n| {
            Bin::for_node(n, 0).accepts(pod) && n.allocatable_memory >= pod.memory_request
        });
        on_node
            || self.config.node_groups.iter().any(|g| {
                let memory = self.group_memory(&g.name);
                Bin::for_group(g, &self.config.cluster_name, 0).accepts(pod)
                    && memory.is_none_or(|m| pod.memory_request <= m)
            })
    }

    /// A PodDisruptionBudget that allows no disruption of `pod` right now, if any.
    pub fn blocking_pdb(&self, pod: &PodInfo) -> Option<&'a super::model::PdbInfo> {
        self.pdbs
            .iter()
            .find(|b| b.disruptions_allowed <= 0 && b.selects(pod))
    }

    /// Until when `group` is left alone after failures, if it is now.
    pub fn backed_off_until(&self, group: &str) -> Option<SystemTime> {
        self.group_backoff
            .get(group)
            .copied()
            .filter(|until| *until > self.now)
    }

    /// Memory one new node of `group` is expected to offer, if known.
    pub fn group_memory(&self, group: &str) -> Option<u64> {
        self.group_memory.get(group).copied()
    }

    pub fn pods_on(&self, node: &str) -> &[&'a PodInfo] {
        self.pods_by_node
            .get(node)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Sum of memory requests of the (non-terminal) pods on `node`.
    pub fn requested_on(&self, node: &str) -> u64 {
        self.pods_on(node).iter().map(|p| p.memory_request).sum()
    }

    pub fn free_on(&self, node: &NodeInfo) -> i64 {
        node.allocatable_memory as i64 - self.requested_on(&node.name) as i64
    }

    pub fn schedulable(&self) -> impl Iterator<Item = &Member<'a>> {
        self.members.iter().filter(|m| m.schedulable())
    }

    pub fn provisioning(&self) -> impl Iterator<Item = &Member<'a>> {
        self.members
            .iter()
            .filter(|m| m.state == ServerState::Provisioning)
    }

    /// Free memory on schedulable managed nodes minus what unschedulable pods ask for.
    pub fn free_total(&self) -> i64 {
        let free: i64 = self
            .schedulable()
            .filter_map(|m| m.node)
            .map(|n| self.free_on(n))
            .sum();
        let pending: i64 = self
            .unschedulable
            .iter()
            .map(|p| p.memory_request as i64)
            .sum();
        free - pending
    }

    /// Memory that VMs still provisioning will bring.
    pub fn provisioning_memory(&self) -> u64 {
        self.provisioning()
            .map(|m| self.group_memory(&m.group.name).unwrap_or(0))
            .sum()
    }

    /// All VMs of a group that count against `maxSize`.
    pub fn group_size(&self, group: &str) -> u32 {
        self.members
            .iter()
            .filter(|m| m.group.name == group && m.state != ServerState::Deleting)
            .count() as u32
    }

    /// VMs of a group that count toward `minSize`: not failed and not cordoned for removal.
    pub fn active_size(&self, group: &str) -> u32 {
        self.members
            .iter()
            .filter(|m| m.group.name == group)
            .filter(|m| matches!(m.state, ServerState::Provisioning | ServerState::Joined))
            .filter(|m| !m.cordoned())
            .count() as u32
    }

    /// Bins for the capacity simulation: the free memory of each schedulable node (but
    /// `exclude`), as it is now.
    pub fn node_bins(&self, exclude: Option<&str>) -> Vec<Bin<'a>> {
        self.schedulable()
            .filter_map(|m| m.node)
            .filter(|n| Some(n.name.as_str()) != exclude)
            .map(|n| Bin::for_node(n, self.free_on(n)))
            .collect()
    }

    /// [`Self::node_bins`] plus the full memory of each node still provisioning.
    pub fn bins(&self) -> Vec<Bin<'a>> {
        let mut bins = self.node_bins(None);
        for m in self.provisioning() {
            if let Some(mem) = self.group_memory(&m.group.name) {
                bins.push(Bin::for_group(
                    m.group,
                    &self.config.cluster_name,
                    mem as i64,
                ));
            }
        }
        bins
    }

    pub fn age(&self, t: SystemTime) -> Duration {
        self.now.duration_since(t).unwrap_or_default()
    }
}

fn server_state(
    server: &Server,
    node: Option<&NodeInfo>,
    timeout: Duration,
    now: SystemTime,
) -> ServerState {
    match server.status {
        ServerStatus::Deleting => return ServerState::Deleting,
        ServerStatus::Error => return ServerState::Failed,
        _ => {}
    }
    let joined = node.is_some_and(|n| !n.has_taint(STARTUP_TAINT_KEY) && !n.deleting);
    if joined {
        return ServerState::Joined;
    }
    let age = now.duration_since(server.created).unwrap_or_default();
    if age > timeout {
        ServerState::Failed
    } else {
        ServerState::Provisioning
    }
}
