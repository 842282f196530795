//! Derived facts the steps share: which nodes and VMs are ours, what state each VM is
//! in, what a new node of each group looks like, the scheduling model of the cluster
//! and where the pending pods could go. Computed once per plan.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::sched::index::{FxHashMap, FxHashSet};
use super::sched::{
    self, daemonset_overhead, group_template, well_known_labels, Model, Slot, SlotKind, Unfit,
};
use super::snapshot::Snapshot;
use crate::config::{Config, NodeGroupConfig};
use crate::model::{
    NodeInfo, PodInfo, Resources, Server, ServerRef, ServerStatus, VmSize, LABEL_CLUSTER,
    LABEL_GROUP, STARTUP_TAINT_KEY,
};

mod pending;

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
    /// nodewright began removing it ([`ServerStatus::Removing`]) and its Node is gone, but
    /// the VM is not (a failed delete, a process killed in between). Never capacity and
    /// never a failed create; counts against `maxSize` (it still runs); its delete is
    /// retried, held back per object when it keeps failing.
    Removing,
    /// A node of its name exists but no longer carries our labels, or the cloud shows the
    /// VM half-made although a node of its name registered (its tags were taken away):
    /// someone took it over. Never deleted, only reported.
    Disowned,
    /// It joined once (the cloud carries its joined mark, [`Server::ever_joined`]) but
    /// has no Ready, untainted Node of ours now: deleted with `kubectl delete node` (its
    /// kubelet registers it again), or out of sight of an API server that lists no nodes.
    /// Never removed for not joining; waited on and reported. Counts against `maxSize` and
    /// toward `minSize`, never as capacity.
    Vanished,
}

/// A VM of ours with the node it became, if any.
pub struct Member<'a> {
    pub server: &'a Server,
    pub group: &'a NodeGroupConfig,
    /// The node with the same name, only when its labels also say it is ours.
    pub node: Option<&'a NodeInfo>,
    pub state: ServerState,
    /// The cloud reports the VM in error while its node still runs: replaced through
    /// cordon and drain, never deleted under its pods.
    pub vm_error: bool,
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

/// What one new node of a group offers, as the scheduler will see it.
pub struct GroupInfo {
    /// Labels but the hostname.
    pub labels: BTreeMap<String, String>,
    /// Allocatable: learned from the group's live nodes, else flavor minus reservation.
    pub allocatable: Resources,
    /// Whether `allocatable` comes from a live node (true) or from the flavor (false).
    pub learned: bool,
    /// Requests of the DaemonSet pods that will land on it.
    pub overhead: Resources,
    /// An empty new node (hostname `<group>-new-0`).
    pub template: Slot<'static>,
    /// The group's hypervisor hosts (Proxmox), where the provider reports them.
    pub hosts: Option<HostRoom>,
}

impl GroupInfo {
    /// The hypervisor hosts the group's next new nodes go to, in order (empty without
    /// hosts): the zone of each.
    pub fn zones(&self) -> &[String] {
        self.hosts.as_ref().map_or(&[][..], |h| &h.zones[..])
    }
}

/// What the hosts of a group allow now (see [`crate::model::hosts`]).
#[derive(Debug, Clone)]
pub struct HostRoom {
    /// The hosts the next VMs go to, in order (as many as fit, up to `maxSize`): the
    /// zone of each new node.
    pub zones: Vec<String>,
    /// Why no more fit, once they are full.
    pub full: Option<String>,
}

impl GroupInfo {
    /// CPU and memory left for pods on an empty new node.
    pub fn usable(&self) -> Resources {
        let mut r = self.allocatable.clone();
        r.sub(&self.overhead);
        r
    }
}

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

pub struct View<'a> {
    pub config: &'a Config,
    pub now: SystemTime,
    pub members: Vec<Member<'a>>,
    /// VMs of ours parked in a warm pool: never members, never capacity.
    pub warm: Vec<&'a Server>,
    pub pods_by_node: BTreeMap<&'a str, Vec<&'a PodInfo>>,
    /// Pods the scheduler could not place that some node or group could host.
    pub unschedulable: Vec<&'a PodInfo>,
    pub pods: &'a [Arc<PodInfo>],
    pub nodes: &'a [NodeInfo],
    /// Every VM the providers listed, ours or not, of known groups or not.
    pub servers: &'a [Server],
    pub pdbs: &'a [crate::model::PdbInfo],
    pub volume_attachments: &'a [(String, String)],
    pub group_backoff: &'a BTreeMap<String, SystemTime>,
    /// Groups whose provider could not be listed this cycle, with the error.
    pub frozen: BTreeMap<&'a str, &'a str>,
    /// VMs per frozen group as their provider's last good listing showed them.
    pub frozen_sizes: &'a BTreeMap<String, u32>,
    /// Nodes of ours (by their labels) in a frozen group: their VMs are not in the
    /// snapshot, so they are no members, but the cluster shows they are there. Their
    /// room counts as capacity, so an outage of one provider does not make the others
    /// scale up for the free-capacity targets.
    pub frozen_nodes: Vec<&'a NodeInfo>,
    pub groups: BTreeMap<&'a str, GroupInfo>,
    pub pending: Pending<'a>,
    pub last_node_deleted: Option<SystemTime>,
    pub last_disruption_failure: Option<SystemTime>,
    /// [`Self::model`], built once per plan and cloned for each step that needs it.
    base_model: Model<'a>,
    /// [`Self::requested_on`] of every node with pods.
    requested: BTreeMap<&'a str, Resources>,
    /// [`Self::active_size`] of every group, counted on first use.
    active_sizes: OnceCell<BTreeMap<String, u32>>,
    /// [`Self::free_total`], summed on first use (steps ask it once per candidate node).
    free_totals: OnceCell<(i64, i64)>,
    /// Scale-down's screening, once per plan: the disrupt and mark-unneeded steps and
    /// the report of kept nodes read it.
    pub(in crate::plan) unneeded: OnceCell<crate::plan::unremovable::Screened>,
}

impl<'a> View<'a> {
    pub fn new(s: &'a Snapshot, config: &'a Config, now: SystemTime) -> View<'a> {
        let nodes: BTreeMap<&str, &NodeInfo> =
            s.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut members = Vec::new();
        let mut warm = Vec::new();
        for server in &s.servers {
            // Ownership, cloud side: our cluster tag and a group we know.
            if server.cluster.as_deref() != Some(config.cluster_name.as_str()) {
                continue;
            }
            let Some(group) = server.group.as_deref().and_then(|g| config.group(g)) else {
                continue;
            };
            if server.warm {
                warm.push(server);
                continue;
            }
            // Ownership, cluster side: the node's labels must agree.
            let same_name = nodes.get(server.name.as_str()).copied();
            let node = same_name.filter(|n| {
                n.labels.get(LABEL_CLUSTER) == Some(&config.cluster_name)
                    && n.labels.get(LABEL_GROUP) == Some(&group.name)
            });
            let mut state = server_state(server, node, config.provision_timeout, now);
            if same_name.is_some() && node.is_none() {
                state = ServerState::Disowned;
            }
            // A half-made VM never booted, so never registered a Node: one whose name a
            // Node carries ran as a node, and only looks half-made because a person took
            // its cloud marks away. Never removed as half-made with its node and pods.
            if server.status == ServerStatus::Incomplete && same_name.is_some() {
                state = ServerState::Disowned;
            }
            let vm_error = server.status == ServerStatus::Error;
            // A VM in error whose node joined may still run pods: it is replaced through
            // cordon and drain (ready or not), never deleted under them.
            if vm_error && node.is_some_and(|n| !n.has_taint(STARTUP_TAINT_KEY) && !n.deleting) {
                state = ServerState::Joined;
            }
            members.push(Member {
                server,
                group,
                node,
                state,
                vm_error,
            });
        }
        members.sort_by(|a, b| a.server.name.cmp(&b.server.name));

        let mut frozen = BTreeMap::new();
        for g in &config.node_groups {
            if let Some(err) = s.unavailable_providers.get(g.provider.as_str()) {
                frozen.insert(g.name.as_str(), err.as_str());
            }
        }

        let frozen_nodes: Vec<&NodeInfo> = s
            .nodes
            .iter()
            .filter(|n| n.labels.get(LABEL_CLUSTER) == Some(&config.cluster_name))
            .filter(|n| {
                n.labels
                    .get(LABEL_GROUP)
                    .is_some_and(|g| frozen.contains_key(g.as_str()))
            })
            .collect();

        // Hashed first, sorted once: far cheaper than a tree insert per pod.
        let mut by_node: FxHashMap<&str, Vec<&PodInfo>> = FxHashMap::default();
        let mut unschedulable = Vec::new();
        for pod in s.pods.iter().map(Arc::as_ref) {
            if pod.is_terminal() {
                continue;
            }
            match &pod.node_name {
                Some(node) => by_node.entry(node.as_str()).or_default().push(pod),
                // DaemonSet pods wait for their own node, never for a new one.
                None if pod.unschedulable && !pod.deleting && !pod.is_daemonset() => {
                    unschedulable.push(pod)
                }
                None => {}
            }
        }

        let pods_by_node: BTreeMap<&str, Vec<&PodInfo>> = by_node.into_iter().collect();
        let requested = pods_by_node
            .iter()
            .map(|(&node, pods)| {
                let mut r = Resources::default();
                for p in pods {
                    r.add(&p.requests);
                }
                (node, r)
            })
            .collect();

        // One pass for every group's DaemonSet overhead.
        let daemonset_pods: Vec<&PodInfo> = s
            .pods
            .iter()
            .map(Arc::as_ref)
            .filter(|p| p.is_daemonset() && !p.is_terminal())
            .collect();
        let mut groups = BTreeMap::new();
        for g in &config.node_groups {
            let shape = s.group_shapes.get(&g.name);
            let labels = well_known_labels(g, &config.cluster_name, shape);
            let mut live: Vec<&NodeInfo> = members
                .iter()
                .filter(|m| m.group.name == g.name && m.state == ServerState::Joined)
                .filter_map(|m| m.node)
                .collect();
            // A frozen group has no members: its Nodes still tell what a node offers.
            live.extend(
                frozen_nodes
                    .iter()
                    .filter(|n| n.labels.get(LABEL_GROUP) == Some(&g.name) && n.ready),
            );
            let (allocatable, learned) = if live.is_empty() {
                match s
                    .learned_allocatable
                    .get(&format!("{}/{}", g.name, g.settings_hash))
                {
                    Some(a) => (a.clone(), true),
                    None => (sched::template::allocatable_from_shape(g, shape), false),
                }
            } else {
                let mut a = Resources::default();
                for n in &live {
                    a.max_with(&n.allocatable);
                }
                (a, true)
            };
            let template = group_template(
                g,
                &labels,
                allocatable.clone(),
                SlotKind::New(g.name.clone()),
                0,
            );
            let overhead = daemonset_overhead(daemonset_pods.iter().copied(), &template);
            let hosts = shape.and_then(|sh| {
                let h = sh.hosts.as_ref()?;
                let vm = VmSize {
                    cpu_milli: sh.cpu_milli.unwrap_or(0),
                    memory: sh.memory.unwrap_or(0),
                };
                let size = members
                    .iter()
                    .filter(|m| m.group.name == g.name && m.state != ServerState::Deleting)
                    .count() as u32;
                let zones = h.plan(vm, g.max_size.saturating_sub(size));
                let mut after = h.clone();
                for z in &zones {
                    if let Some(i) = after.index(z) {
                        after.place(i, vm);
                    }
                }
                let full = after.choose(vm).is_none().then(|| after.full_reason(vm));
                Some(HostRoom { zones, full })
            });
            groups.insert(
                g.name.as_str(),
                GroupInfo {
                    labels,
                    allocatable,
                    learned,
                    overhead,
                    template,
                    hosts,
                },
            );
        }

        let mut view = View {
            config,
            now,
            members,
            warm,
            pods_by_node,
            unschedulable: Vec::new(),
            pods: &s.pods,
            nodes: &s.nodes,
            servers: &s.servers,
            pdbs: &s.pdbs,
            volume_attachments: &s.volume_attachments,
            group_backoff: &s.group_backoff,
            frozen,
            frozen_sizes: &s.frozen_sizes,
            frozen_nodes,
            groups,
            pending: Pending::default(),
            last_node_deleted: s.last_node_deleted,
            last_disruption_failure: s.last_disruption_failure,
            base_model: Model::new(),
            requested,
            active_sizes: OnceCell::new(),
            free_totals: OnceCell::new(),
            unneeded: OnceCell::new(),
        };
        view.base_model = view.build_model(&unschedulable);
        view.pending = view.place_pending(unschedulable.clone());
        let unhostable: FxHashSet<*const PodInfo> = view
            .pending
            .unhostable
            .iter()
            .map(|(u, _)| *u as *const PodInfo)
            .collect();
        view.unschedulable = unschedulable
            .into_iter()
            .filter(|p| !unhostable.contains(&(*p as *const PodInfo)))
            .collect();
        view
    }

    /// The model of the cluster as it is, plus a slot per VM still provisioning: a copy
    /// of the one built with the view (far cheaper than rebuilding it from the pods).
    pub fn model(&self) -> Model<'a> {
        self.base_model.clone()
    }

    /// The model [`Self::model`] copies, with the affinity and spread rules of `pending`
    /// and of the running pods (scale-down moves those in the model) resolved in it
    /// once rather than in every copy.
    fn build_model(&self, pending: &[&'a PodInfo]) -> Model<'a> {
        let mut m = Model::of_grouped_pods(self.nodes, |n| self.pods_on(n));
        for member in self.provisioning() {
            let Some(info) = self.groups.get(member.group.name.as_str()) else {
                continue;
            };
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
        }
        if r.cpu == 0 || r.memory == 0 {
            for n in self.nodes {
                r.max_with(&n.allocatable);
            }
        }
        r
    }

    /// A PodDisruptionBudget that allows no disruption of `pod` right now, if any.
    pub fn blocking_pdb(&self, pod: &PodInfo) -> Option<&'a crate::model::PdbInfo> {
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

    pub fn group(&self, group: &str) -> Option<&GroupInfo> {
        self.groups.get(group)
    }

    pub fn pods_on(&self, node: &str) -> &[&'a PodInfo] {
        self.pods_by_node
            .get(node)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Sum of requests of the (non-terminal) pods on `node`.
    pub fn requested_on(&self, node: &str) -> Resources {
        self.requested.get(node).cloned().unwrap_or_default()
    }

    pub fn free_on(&self, node: &NodeInfo) -> Resources {
        let mut f = node.allocatable.clone();
        f.sub(&self.requested_on(&node.name));
        f
    }

    pub fn schedulable(&self) -> impl Iterator<Item = &Member<'a>> {
        self.members.iter().filter(|m| m.schedulable())
    }

    pub fn provisioning(&self) -> impl Iterator<Item = &Member<'a>> {
        self.members
            .iter()
            .filter(|m| m.state == ServerState::Provisioning)
    }

    /// Managed nodes that count as capacity: schedulable ones, those NotReady for less
    /// than `health.notReadyGrace` (a blip does not call for a new node), and the Ready,
    /// schedulable Nodes of a frozen group (its provider's outage takes no room away).
    pub fn capacity_nodes(&self) -> impl Iterator<Item = &'a NodeInfo> + '_ {
        let grace = self.config.health.not_ready_grace;
        self.members
            .iter()
            .filter(move |m| {
                m.schedulable()
                    || (m.state == ServerState::Joined
                        && m.node.is_some_and(|n| {
                            !n.ready
                                && !n.unschedulable
                                && !n.deleting
                                && n.ready_changed.is_some_and(|t| self.age(t) < grace)
                        }))
            })
            .filter_map(|m| m.node)
            .chain(
                self.frozen_nodes
                    .iter()
                    .copied()
                    .filter(|n| n.ready && !n.unschedulable && !n.deleting),
            )
    }

    /// Free (memory, CPU milli) on managed nodes that count as capacity minus what the
    /// pending pods that will land there or on VMs on their way ask for; signed, so a
    /// shortfall shows. Pods that need new nodes (or fit nowhere) are not taken off:
    /// they will not use this room, and the room they need is not counted either.
    pub fn free_total(&self) -> (i64, i64) {
        // Not asked before `pending` is final (the end of `View::new`).
        *self.free_totals.get_or_init(|| {
            let mut mem = 0i64;
            let mut cpu = 0i64;
            for n in self.capacity_nodes() {
                let used = self.requested_on(&n.name);
                mem += n.allocatable.memory as i64 - used.memory as i64;
                cpu += n.allocatable.cpu as i64 - used.cpu as i64;
            }
            for (p, _) in self
                .pending
                .on_nodes
                .iter()
                .chain(&self.pending.on_provisioning)
            {
                mem -= p.requests.memory as i64;
                cpu -= p.requests.cpu as i64;
            }
            (mem, cpu)
        })
    }

    /// (memory, CPU milli) that VMs still provisioning will bring.
    pub fn provisioning_capacity(&self) -> (i64, i64) {
        let mut mem = 0i64;
        let mut cpu = 0i64;
        for m in self.provisioning() {
            if let Some(g) = self.group(&m.group.name) {
                let u = g.usable();
                mem += u.memory as i64;
                cpu += u.cpu as i64;
            }
        }
        (mem, cpu)
    }

    /// All VMs of a group that count against `maxSize`: running, provisioning and warm
    /// (parked or filling) alike; only those the cloud is already deleting are left out.
    pub fn group_size(&self, group: &str) -> u32 {
        let members = self
            .members
            .iter()
            .filter(|m| m.group.name == group && m.state != ServerState::Deleting)
            .count();
        let warm = self
            .warm_in(group)
            .filter(|s| s.status != ServerStatus::Deleting)
            .count();
        (members + warm) as u32
    }

    /// The warm VMs of `group` (parked or filling).
    pub fn warm_in<'s>(&'s self, group: &'s str) -> impl Iterator<Item = &'a Server> + 's {
        self.warm
            .iter()
            .copied()
            .filter(move |s| s.group.as_deref() == Some(group))
    }

    /// VMs of a group that count toward `minSize`: not failed and not cordoned for removal.
    pub fn active_size(&self, group: &str) -> u32 {
        let sizes = self.active_sizes.get_or_init(|| {
            let mut sizes = BTreeMap::new();
            for m in self
                .members
                .iter()
                .filter(|m| {
                    matches!(
                        m.state,
                        ServerState::Provisioning | ServerState::Joined | ServerState::Vanished
                    )
                })
                .filter(|m| !m.cordoned())
            {
                *sizes.entry(m.group.name.clone()).or_insert(0) += 1;
            }
            sizes
        });
        sizes.get(group).copied().unwrap_or(0)
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
    if server.status == ServerStatus::Deleting {
        return ServerState::Deleting;
    }
    let joined = node.is_some_and(|n| !n.has_taint(STARTUP_TAINT_KEY) && !n.deleting);
    // Marked before its Node is deleted: while the Node is there, the removal that
    // marked it (cordoned, drained) is still the one to finish it.
    if server.status == ServerStatus::Removing && !joined {
        return ServerState::Removing;
    }
    if joined
        && !matches!(
            server.status,
            ServerStatus::Error | ServerStatus::Incomplete
        )
    {
        return ServerState::Joined;
    }
    // A VM that ran as a node is never taken for one that failed to join, whatever the
    // cluster shows now (its Node deleted, re-registering, or not listed at all).
    if server.ever_joined() && !joined {
        return ServerState::Vanished;
    }
    if matches!(
        server.status,
        ServerStatus::Error | ServerStatus::Incomplete
    ) {
        return ServerState::Failed;
    }
    let age = now.duration_since(server.created).unwrap_or_default();
    if age > timeout {
        ServerState::Failed
    } else {
        ServerState::Provisioning
    }
}
