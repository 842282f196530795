//! The pure planner: a [`Snapshot`] of cluster and cloud plus the [`Config`] and `now`
//! in, exactly one [`Action`] with its reasons out. No I/O, no clock, no randomness, so
//! every decision can be replayed in a test or explained by `nodewright plan`.
//!
//! Steps run in priority order and the first that wants to act wins (see [`STEPS`]).

pub mod backoff;
pub mod buffers;
pub mod policy;
pub mod sched;
mod snapshot;
mod steps;
pub mod summary;
mod units;
pub mod unremovable;
mod view;
pub mod volumes;

#[cfg(test)]
mod tests;

use std::fmt;
use std::time::SystemTime;

use serde::Serialize;

use crate::config::{Config, DisruptionReason};
use crate::model::{ObjectRef, PodInfo, PodRef, ServerRef};

pub use snapshot::{shared, Snapshot};
pub use steps::{unknown_group_vms, MAX_NOT_JOINED_PER_ACTION};
pub use unremovable::{KeptReason, Unremovable};
pub use view::ServerState;

/// A node to delete with its VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeTarget {
    pub node: String,
    pub server: ServerRef,
    /// `scaleDown.mode: stop`: the VM is stopped into its group's warm pool, not deleted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub park: bool,
    /// The pods the plan knowingly deletes the node with (a forced removal); empty for a
    /// node removed as empty. Just before the delete the node's pods are read from the
    /// API server, and any other pod there stops it (the watch cache may be stale).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaving: Vec<PodRef>,
}

/// The one thing a cycle does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Action {
    /// Nothing needs doing.
    None,
    /// New nodes are Ready: let pods in (all of them at once).
    RemoveStartupTaint { nodes: Vec<String> },
    /// VMs that failed to provision (or lost their node): delete them and any node they left.
    DeleteServers {
        servers: Vec<ServerRef>,
        nodes: Vec<String>,
    },
    /// Create `count` VMs in `group`.
    ScaleUp { group: String, count: u32 },
    /// Scale `group` up by starting VMs of its warm pool instead of creating them.
    StartWarm {
        group: String,
        servers: Vec<ServerRef>,
    },
    /// Create `count` stopped VMs for the warm pool of `group`.
    FillWarmPool { group: String, count: u32 },
    /// Stop warm VMs that have a Node of ours (a fill that joined on its one boot, or a
    /// stop that left its Node), then delete each Node (named like its VM).
    ParkWarm { servers: Vec<ServerRef> },
    /// Mark nodes unschedulable so they can be drained and removed; the annotations
    /// record why (`disruption`) and when (`at`, Unix seconds), for the drain deadline.
    Cordon {
        nodes: Vec<String>,
        reason: String,
        disruption: DisruptionReason,
        at: u64,
    },
    /// Give cordoned nodes back: their drain did not finish by its deadline.
    Uncordon { nodes: Vec<String>, reason: String },
    /// Drop nodewright's cordon record from nodes someone else uncordoned, so a later
    /// cordon by a person never passes for nodewright's.
    ForgetCordon { nodes: Vec<String> },
    /// Evict pods from the nodes nodewright cordoned.
    Drain {
        nodes: Vec<String>,
        pods: Vec<PodRef>,
    },
    /// Delete (gracefully, each with its own grace period, not through the Eviction API)
    /// the pods PodDisruptionBudgets hold on expired nodes past
    /// `drain.terminationGracePeriod`, as Karpenter does, so they stop before their node
    /// and VM go.
    DeletePodsPastLimit {
        nodes: Vec<String>,
        pods: Vec<PodRef>,
    },
    /// Delete empty cordoned nodes: each Node object first, then its VM.
    DeleteNodes { nodes: Vec<NodeTarget> },
    /// Delete Node objects of ours NotReady past `health.unhealthyAfter` whose VM the
    /// cloud no longer has (its provider is listed again just before, a second look),
    /// so their pods are recreated elsewhere.
    DeleteNodesWithoutVm { nodes: Vec<String> },
    /// Start (`mark`, at `at` Unix seconds) or stop (`clear`) the unneeded clock of
    /// nodes, kept in a node annotation so a restart keeps it.
    MarkUnneeded {
        mark: Vec<String>,
        clear: Vec<String>,
        at: u64,
    },
    /// Record on each VM that its node was Ready (at `at`, Unix seconds), so no later
    /// process takes it for a VM that never joined (see [`crate::cloud::JOINED_TAG`]).
    MarkJoined { servers: Vec<ServerRef>, at: u64 },
    /// Finish the joins a process gone left ([`crate::model::ServerStatus::JoinPending`]):
    /// run each VM's join script again, or, for those in `registered` (names) whose node
    /// registered, only record that the join is done.
    FinishJoin {
        servers: Vec<ServerRef>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        registered: Vec<String>,
    },
    /// Pull images onto a node with a short-lived pod.
    PullImages { node: String, images: Vec<String> },
    /// Remove image puller pods that finished or got stuck.
    DeletePods { pods: Vec<PodRef> },
}

impl Action {
    /// Stable short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::None => "none",
            Action::RemoveStartupTaint { .. } => "remove-startup-taint",
            Action::DeleteServers { .. } => "delete-failed-servers",
            Action::ScaleUp { .. } => "scale-up",
            Action::StartWarm { .. } => "start-warm",
            Action::FillWarmPool { .. } => "fill-warm-pool",
            Action::ParkWarm { .. } => "park-warm",
            Action::Cordon { .. } => "cordon",
            Action::Uncordon { .. } => "uncordon",
            Action::ForgetCordon { .. } => "forget-cordon",
            Action::Drain { .. } => "drain",
            Action::DeletePodsPastLimit { .. } => "delete-pods-past-limit",
            Action::DeleteNodes { .. } => "delete-node",
            Action::DeleteNodesWithoutVm { .. } => "delete-node-without-vm",
            Action::MarkUnneeded { .. } => "mark-unneeded",
            Action::MarkJoined { .. } => "mark-joined",
            Action::FinishJoin { .. } => "finish-join",
            Action::PullImages { .. } => "pull-images",
            Action::DeletePods { .. } => "delete-pods",
        }
    }

    /// The group and node count of an action that adds nodes (created or started).
    pub fn scale_up(&self) -> Option<(&str, u32)> {
        match self {
            Action::ScaleUp { group, count } => Some((group, *count)),
            Action::StartWarm { group, servers } => {
                Some((group, u32::try_from(servers.len()).unwrap_or(u32::MAX)))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::None => write!(f, "nothing to do"),
            Action::RemoveStartupTaint { nodes } => {
                write!(f, "remove startup taint from {}", nodes.join(", "))
            }
            Action::DeleteServers { servers, .. } => {
                let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
                write!(f, "delete failed VMs {}", names.join(", "))
            }
            Action::ScaleUp { group, count } => write!(f, "add {count} node(s) to group {group}"),
            Action::StartWarm { group, servers } => {
                let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
                write!(
                    f,
                    "add {} node(s) to group {group} by starting warm VMs {}",
                    servers.len(),
                    names.join(", ")
                )
            }
            Action::FillWarmPool { group, count } => {
                write!(
                    f,
                    "make {count} stopped VM(s) for the warm pool of group {group}"
                )
            }
            Action::ParkWarm { servers } => {
                let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
                write!(
                    f,
                    "stop warm VM(s) {} into their pool and delete their node(s)",
                    names.join(", ")
                )
            }
            Action::Cordon {
                nodes, disruption, ..
            } => write!(f, "cordon {} ({})", nodes.join(", "), disruption.as_str()),
            Action::Uncordon { nodes, .. } => write!(f, "uncordon {}", nodes.join(", ")),
            Action::ForgetCordon { nodes } => {
                write!(f, "forget the old cordon record of {}", nodes.join(", "))
            }
            Action::Drain { nodes, pods } => {
                write!(f, "evict {} pod(s) from {}", pods.len(), nodes.join(", "))
            }
            Action::DeletePodsPastLimit { nodes, pods } => write!(
                f,
                "delete {} pod(s) a PodDisruptionBudget holds on {}, past drain.terminationGracePeriod",
                pods.len(),
                nodes.join(", ")
            ),
            Action::DeleteNodes { nodes } => {
                let (park, delete): (Vec<&NodeTarget>, Vec<&NodeTarget>) =
                    nodes.iter().partition(|t| t.park);
                let names = |v: &[&NodeTarget]| -> String {
                    v.iter()
                        .map(|t| t.node.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                match (park.is_empty(), delete.is_empty()) {
                    (true, _) => write!(f, "delete node(s) {} and their VMs", names(&delete)),
                    (false, true) => write!(
                        f,
                        "delete node(s) {} and park their VMs in the warm pool",
                        names(&park)
                    ),
                    (false, false) => write!(
                        f,
                        "delete node(s) {} and their VMs, and node(s) {} parking their VMs in the warm pool",
                        names(&delete),
                        names(&park)
                    ),
                }
            }
            Action::DeleteNodesWithoutVm { nodes } => write!(
                f,
                "delete node(s) {} whose VM is gone",
                nodes.join(", ")
            ),
            Action::MarkUnneeded { mark, clear, .. } => write!(
                f,
                "mark {} node(s) unneeded, clear {}",
                mark.len(),
                clear.len()
            ),
            Action::MarkJoined { servers, .. } => {
                let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
                write!(f, "record that VMs {} joined", names.join(", "))
            }
            Action::FinishJoin {
                servers,
                registered,
            } => {
                let run: Vec<&str> = servers
                    .iter()
                    .map(|s| s.name.as_str())
                    .filter(|n| !registered.iter().any(|r| r == n))
                    .collect();
                match (run.is_empty(), registered.is_empty()) {
                    (false, true) => write!(f, "run the join script of VMs {}", run.join(", ")),
                    (true, _) => write!(f, "record that VMs {} joined", registered.join(", ")),
                    (false, false) => write!(
                        f,
                        "run the join script of VMs {}; record that VMs {} joined",
                        run.join(", "),
                        registered.join(", ")
                    ),
                }
            }
            Action::PullImages { node, images } => {
                write!(f, "pull {} on {node}", images.join(", "))
            }
            Action::DeletePods { pods } => {
                let names: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
                write!(f, "delete finished image puller pods {}", names.join(", "))
            }
        }
    }
}

/// Why something was (or was not) done, as data for logs, events and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub enum ReasonCode {
    NodeReady,
    ServerError,
    ProvisionTimeout,
    /// A node of ours NotReady past `health.unhealthyAfter` whose VM the cloud does not
    /// have: its Node is deleted.
    NodeWithoutServer,
    /// VMs tagged with this cluster name a group the config does not have (removed or
    /// renamed): reported every cycle, never touched.
    UnknownGroupVms,
    GroupBelowMinSize,
    UnschedulablePods,
    FreeMemoryBelowTarget,
    NodeFreeMemoryBelowMinimum,
    FreeCpuBelowTarget,
    /// Pods of an active capacity buffer fit on no node.
    BufferShort,
    GroupAtMaxSize,
    GroupBackedOff,
    ClusterLimitReached,
    /// The group's hypervisor hosts take no more VMs (overcommit, reserve, maxPerHost,
    /// offline or in maintenance).
    HostsFull,
    ProviderUnavailable,
    NoGroupFits,
    ModelMismatch,
    NodeTooOld,
    NodeUnneeded,
    ReplacementNeedsCapacity,
    WaitingForProvisioning,
    DrainInProgress,
    DrainBlocked,
    DrainTimedOut,
    NodeUnhealthy,
    NodeDrifted,
    NodeDisowned,
    /// A VM nodewright made lost its cluster tag: left alone with its node, reported.
    VmDisowned,
    /// A person's copy of a VM of ours carries its marks: left alone, reported.
    VmCopied,
    /// A VM that joined has no Node of ours now: waited on and reported, never removed
    /// for it.
    NodeVanished,
    /// Every managed node is missing while VMs that joined exist: the cluster view looks
    /// wrong, so nothing is removed for not joining.
    ClusterViewSuspect,
    DisruptionBudgetExhausted,
    TooManyUnready,
    NodeEmpty,
    VolumesAttached,
    ImageMissing,
    PullerFinished,
    CapacitySufficient,
    /// A scale-up starts warm VMs instead of creating.
    WarmPoolStart,
    /// The warm pool of a group is below its size.
    WarmPoolShort,
    /// A warm VM was made from other settings, or is older than `oldNodeAgeLimit`.
    WarmVmStale,
    /// A VM whose removal began (its removing mark is on) and did not finish: deleted
    /// again, never counted as a failed create.
    RemovalUnfinished,
    /// A warm VM with a Node of ours is stopped and its Node deleted.
    WarmPoolPark,
    /// A VM was started and the process that started it stopped before its join script
    /// ran: the script is run again (or, its node registered, the join recorded done).
    JoinUnfinished,
    /// An action that failed on its objects is held back for a while; the next step's
    /// action runs meanwhile.
    ActionBackedOff,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    pub code: ReasonCode,
    pub message: String,
    /// The nodes or pods this reason is about.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectRef>,
}

impl Reason {
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Self {
        Reason {
            code,
            message: message.into(),
            objects: Vec::new(),
        }
    }

    /// The same reason, about these objects.
    pub fn about(mut self, objects: impl IntoIterator<Item = ObjectRef>) -> Self {
        self.objects.extend(objects);
        self
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

/// Where a pod the scheduler could not place stands after this cycle: every such pod
/// is in exactly one bucket, so none starves unreported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bucket {
    /// It fits a node that exists: the scheduler will place it.
    WillSchedule,
    /// It fits a VM still provisioning.
    CapacityComing,
    /// This cycle's scale-up is for it.
    ScalingUp,
    /// Nothing can host it now: no group fits it, or those that do have no room.
    NoCapacity,
}

impl Bucket {
    pub const ALL: [Bucket; 4] = [
        Bucket::WillSchedule,
        Bucket::CapacityComing,
        Bucket::ScalingUp,
        Bucket::NoCapacity,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::WillSchedule => "will-schedule",
            Bucket::CapacityComing => "capacity-coming",
            Bucket::ScalingUp => "scaling-up",
            Bucket::NoCapacity => "no-capacity",
        }
    }
}

/// One pending pod and its bucket, with where it goes or why it cannot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingPod {
    pub pod: PodRef,
    pub bucket: Bucket,
    pub detail: String,
}

/// The planner's answer: one action, why, and what else it noticed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub action: Action,
    /// Why this action (empty only for `Action::None` when all is well).
    pub reasons: Vec<Reason>,
    /// Things noticed that did not lead to the action (limits hit, pods nothing can host).
    pub notes: Vec<Reason>,
    /// Every pod the scheduler could not place, in its bucket.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingPod>,
    /// Every node in service that scale-down keeps, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unremovable: Vec<Unremovable>,
}

impl Decision {
    pub fn has_reason(&self, code: ReasonCode) -> bool {
        self.reasons
            .iter()
            .chain(&self.notes)
            .any(|r| r.code == code)
    }

    /// The bucket of one pending pod, if it is pending.
    pub fn bucket_of(&self, namespace: &str, name: &str) -> Option<Bucket> {
        self.pending
            .iter()
            .find(|p| p.pod.namespace == namespace && p.pod.name == name)
            .map(|p| p.bucket)
    }

    /// How many pending pods are in each bucket.
    pub fn bucket_counts(&self) -> std::collections::BTreeMap<Bucket, usize> {
        let mut out = std::collections::BTreeMap::new();
        for p in &self.pending {
            *out.entry(p.bucket).or_insert(0) += 1;
        }
        out
    }
}

/// Sorts the pending pods of `view` into buckets, given the action chosen.
fn buckets(
    view: &view::View<'_>,
    action: &Action,
    reasons: &[Reason],
    notes: &[Reason],
) -> Vec<PendingPod> {
    let mk = |p: &PodInfo, bucket, detail: String| PendingPod {
        pod: PodRef {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        },
        bucket,
        detail,
    };
    let scaling: std::collections::BTreeSet<(&str, &str)> = match action {
        Action::ScaleUp { .. } | Action::StartWarm { .. } => reasons
            .iter()
            .filter(|r| r.code == ReasonCode::UnschedulablePods)
            .flat_map(|r| &r.objects)
            .filter_map(|o| Some((o.namespace.as_deref()?, o.name.as_str())))
            .collect(),
        _ => Default::default(),
    };
    let blocked: Vec<&str> = notes
        .iter()
        .filter(|n| {
            matches!(
                n.code,
                ReasonCode::GroupAtMaxSize
                    | ReasonCode::GroupBackedOff
                    | ReasonCode::ClusterLimitReached
                    | ReasonCode::HostsFull
                    | ReasonCode::ProviderUnavailable
            )
        })
        .map(|n| n.message.as_str())
        .collect();
    // Pods a scale-up leaves over because its group or a limit is full.
    let over_room: std::collections::BTreeMap<(&str, &str), &str> = reasons
        .iter()
        .filter(|r| {
            matches!(
                r.code,
                ReasonCode::GroupAtMaxSize
                    | ReasonCode::ClusterLimitReached
                    | ReasonCode::HostsFull
            )
        })
        .flat_map(|r| {
            r.objects.iter().filter_map(move |o| {
                Some((
                    (o.namespace.as_deref()?, o.name.as_str()),
                    r.message.as_str(),
                ))
            })
        })
        .collect();
    // Pods whose placement rules no group's new node satisfies.
    let unplaceable: std::collections::BTreeMap<(&str, &str), &str> = notes
        .iter()
        .filter(|r| r.code == ReasonCode::NoGroupFits)
        .flat_map(|r| {
            r.objects.iter().filter_map(move |o| {
                Some((
                    (o.namespace.as_deref()?, o.name.as_str()),
                    r.message.as_str(),
                ))
            })
        })
        .collect();
    let p = &view.pending;
    let mut out = Vec::new();
    for (pod, node) in &p.on_nodes {
        out.push(mk(pod, Bucket::WillSchedule, format!("fits {node}")));
    }
    for (pod, node) in &p.on_provisioning {
        out.push(mk(
            pod,
            Bucket::CapacityComing,
            format!("fits {node}, still provisioning"),
        ));
    }
    for pod in &p.needing_nodes {
        if scaling.contains(&(pod.namespace.as_str(), pod.name.as_str())) {
            if let Some((group, _)) = action.scale_up() {
                out.push(mk(
                    pod,
                    Bucket::ScalingUp,
                    format!("new node of group {group}"),
                ));
            }
        } else if let Some(why) = over_room.get(&(pod.namespace.as_str(), pod.name.as_str())) {
            out.push(mk(pod, Bucket::NoCapacity, why.to_string()));
        } else if let Some(why) = unplaceable.get(&(pod.namespace.as_str(), pod.name.as_str())) {
            out.push(mk(pod, Bucket::NoCapacity, why.to_string()));
        } else if action.scale_up().is_some() {
            out.push(mk(
                pod,
                Bucket::CapacityComing,
                "the next scale-up, after this one".into(),
            ));
        } else if blocked.is_empty() {
            out.push(mk(
                pod,
                Bucket::CapacityComing,
                format!("scale-up in a later cycle; this one does: {action}"),
            ));
        } else {
            out.push(mk(pod, Bucket::NoCapacity, blocked.join("; ")));
        }
    }
    for (pod, why) in &p.unhostable {
        let why: Vec<&str> = why.iter().map(|(_, w)| w.as_str()).collect();
        out.push(mk(pod, Bucket::NoCapacity, why.join("; ")));
    }
    out
}

/// Each note once, in first-seen order: steps that pass on the cycle may notice the same
/// thing (a group at maxSize is noted for pending pods and again for headroom), and a
/// repeated note would be logged and printed twice. Objects of repeats are merged.
fn dedup_notes(notes: Vec<Reason>) -> Vec<Reason> {
    let mut out: Vec<Reason> = Vec::with_capacity(notes.len());
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for note in notes {
        match seen.entry(note.to_string()) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let kept = &mut out[*e.get()];
                for o in note.objects {
                    if !kept.objects.contains(&o) {
                        kept.objects.push(o);
                    }
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(note);
            }
        }
    }
    out
}

/// A planning step: returns the action it wants, or nothing and lets the next one try.
type Step = fn(&view::View<'_>, &mut Vec<Reason>) -> Option<(Action, Vec<Reason>)>;

/// Priority order: finish what is in flight, then capacity, then replacement and removal,
/// then cache warming.
pub const STEPS: &[(&str, Step)] = &[
    ("finish-provisioning", steps::finish_provisioning),
    ("clean-up-failed", steps::clean_up_failed),
    ("finish-joins", steps::finish_joins),
    ("finish-removal", steps::finish_removal),
    ("delete-nodes-without-vm", steps::delete_nodes_without_vm),
    ("park-warm", steps::park_warm),
    ("drop-stale-warm", steps::drop_stale_warm),
    ("forget-stale-cordons", steps::forget_stale_cordons),
    ("scale-up", steps::scale_up),
    ("remove-empty", steps::remove_empty),
    ("drain", steps::drain),
    ("disrupt", steps::disrupt),
    ("mark-unneeded", steps::mark_unneeded),
    ("mark-joined", steps::mark_joined),
    ("fill-warm-pools", steps::fill_warm_pools),
    ("warm-images", steps::warm_images),
];

/// Decides the one action for this cycle.
pub fn plan(snapshot: &Snapshot, config: &Config, now: SystemTime) -> Decision {
    let view = view::View::new(snapshot, config, now);
    let mut notes = Vec::new();
    for (provider, err) in &snapshot.unavailable_providers {
        notes.push(Reason::new(
            ReasonCode::ProviderUnavailable,
            format!(
                "provider {provider} could not be listed, its groups are frozen this cycle: {err}"
            ),
        ));
    }
    steps::note_unknown_groups(&view, &mut notes);
    for (provider, said) in &snapshot.cloud_failures {
        notes.push(Reason::new(
            ReasonCode::ServerError,
            format!("provider {provider}: {said}"),
        ));
    }
    for stray in &snapshot.strays {
        let code = match stray.kind {
            crate::model::StrayKind::Disowned => ReasonCode::VmDisowned,
            crate::model::StrayKind::Copied { .. } => ReasonCode::VmCopied,
        };
        let mut note = Reason::new(code, stray.to_string());
        if snapshot.nodes.iter().any(|n| n.name == stray.name) {
            note = note.about([ObjectRef::node(&stray.name)]);
        }
        notes.push(note);
    }
    for (_, step) in STEPS {
        if let Some((action, reasons)) = step(&view, &mut notes) {
            // Whatever asked for nodes, a group's warm VMs are started before any create.
            let (action, reasons) = steps::from_warm_pool(&view, action, reasons);
            if let Some(until) = backoff::held_back_until(&action, &snapshot.action_backoff, now) {
                let wait = until.duration_since(now).unwrap_or_default().as_secs();
                notes.push(Reason::new(
                    ReasonCode::ActionBackedOff,
                    format!("{action} failed; tried again in {wait}s, the next step's action runs meanwhile"),
                ));
                continue;
            }
            let notes = dedup_notes(notes);
            let pending = buckets(&view, &action, &reasons, &notes);
            let unremovable = steps::unremovable(&view, &action);
            return Decision {
                action,
                reasons,
                notes,
                pending,
                unremovable,
            };
        }
    }
    let unremovable = steps::unremovable(&view, &Action::None);
    let kept = match unremovable.len() {
        0 => String::new(),
        n => format!(" ({n} node(s) kept, each with its reason under unremovable)"),
    };
    let reasons = vec![Reason::new(
        ReasonCode::CapacitySufficient,
        format!(
            "free memory {} meets target {}; nothing to replace, remove or warm{kept}",
            units::fmt_bytes(view.free_total().0),
            bytesize::ByteSize(config.free_memory_target.as_u64())
                .display()
                .iec()
        ),
    )];
    let notes = dedup_notes(notes);
    let pending = buckets(&view, &Action::None, &reasons, &notes);
    Decision {
        action: Action::None,
        reasons,
        notes,
        pending,
        unremovable,
    }
}

#[cfg(test)]
mod dedup_tests {
    use super::*;

    #[test]
    fn repeated_notes_are_kept_once_in_order_with_their_objects_merged() {
        let at_max = || Reason::new(ReasonCode::GroupAtMaxSize, "group web is at maxSize 3");
        let pod = |n: &str| ObjectRef {
            kind: "Pod".into(),
            namespace: Some("default".into()),
            name: n.into(),
        };
        let notes = vec![
            at_max(),
            Reason::new(ReasonCode::NoGroupFits, "no node group can host default/a")
                .about([pod("a")]),
            at_max(),
            Reason::new(ReasonCode::NoGroupFits, "no node group can host default/a")
                .about([pod("a"), pod("b")]),
        ];
        let out = dedup_notes(notes);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].code, ReasonCode::GroupAtMaxSize);
        assert_eq!(out[1].objects, vec![pod("a"), pod("b")]);
    }
}
