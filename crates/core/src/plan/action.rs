//! The one thing a cycle does, and what it names: its kind (logs, metrics, backoff
//! keys), the objects it acts on (Events, backoff), and how it reads in a sentence. The
//! planner, the actuator, Events, metrics and the loop's memory read these instead of
//! taking the action apart each on its own.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::config::DisruptionReason;
use crate::model::{ObjectRef, PodRef, ServerRef};

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
    /// Create `count` VMs in `group`, of `size` when the group lists several sizes.
    ScaleUp {
        group: String,
        count: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<String>,
    },
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
    /// Give back nodes nodewright cordoned for scale-down (`empty`, `underutilized`)
    /// whose room pending pods need, before any VM is created: the cordon and its record
    /// go, the node takes pods again. Not a failed removal (no scale-down delay follows).
    ReuseCordoned { nodes: Vec<String> },
    /// Add (`add`) or remove (`remove`) nodewright's `PreferNoSchedule` soft taint
    /// ([`crate::model::DELETION_CANDIDATE_TAINT_KEY`]) on nodes that became or stopped
    /// being candidates for scale-down, so the scheduler fills other nodes first.
    SoftTaint {
        add: Vec<String>,
        remove: Vec<String>,
    },
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
    /// Restart VMs whose node joined and whose Node is gone, so each VM's kubelet starts
    /// and registers it again (a kubelet registers only when it starts; the disks stay).
    /// Each VM records the restart (at `at`, Unix seconds) before it is restarted, and is
    /// never restarted a second time for it (see [`crate::cloud::RESTARTED_TAG`]).
    RestartVanished { servers: Vec<ServerRef>, at: u64 },
    /// Stop VMs whose node is NotReady past `health.unhealthyAfter` holding data only it
    /// can reach, in groups with `unreachableWithLocalData: stop`, so they cannot go on
    /// writing out of sight. Each VM records the stop (at `at`, Unix seconds) before it is
    /// stopped, once per NotReady spell (see [`crate::cloud::FENCED_TAG`]); nothing is
    /// deleted, the Node stays.
    StopUnreachable { servers: Vec<ServerRef>, at: u64 },
    /// Finish the joins a process gone left ([`crate::model::ServerStatus::JoinPending`]):
    /// run each VM's join script again, or, for those in `registered` (names) whose node
    /// registered, only record that the join is done.
    FinishJoin {
        servers: Vec<ServerRef>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        registered: Vec<String>,
    },
    /// Relabel nodes whose settings-hash label an earlier release stamped for the
    /// settings the group has now (a format-only change of the hash): each node (key)
    /// gets the group's hash of today (value). A label patch, never a replacement.
    RelabelHash { nodes: BTreeMap<String, String> },
    /// Pull images onto a node with a short-lived pod, which names `pull_secrets` (the
    /// `imagePullSecrets` of the pods that use them) as its own.
    PullImages {
        node: String,
        images: Vec<String>,
        pull_secrets: Vec<String>,
    },
    /// Give up pulling images a puller on `node` could not pull: record them on the node
    /// (`unpullable`: each image with when it was given up, Unix seconds; the whole
    /// annotation, see [`crate::model::ANNOTATION_UNPULLABLE_IMAGES`]), then delete the
    /// puller `pods`.
    GiveUpPulls {
        node: String,
        unpullable: BTreeMap<String, u64>,
        pods: Vec<PodRef>,
    },
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
            Action::ReuseCordoned { .. } => "reuse-cordoned",
            Action::SoftTaint { .. } => "soft-taint",
            Action::ForgetCordon { .. } => "forget-cordon",
            Action::Drain { .. } => "drain",
            Action::DeletePodsPastLimit { .. } => "delete-pods-past-limit",
            Action::DeleteNodes { .. } => "delete-node",
            Action::DeleteNodesWithoutVm { .. } => "delete-node-without-vm",
            Action::MarkUnneeded { .. } => "mark-unneeded",
            Action::MarkJoined { .. } => "mark-joined",
            Action::RestartVanished { .. } => "restart-vanished",
            Action::StopUnreachable { .. } => "stop-unreachable",
            Action::FinishJoin { .. } => "finish-join",
            Action::RelabelHash { .. } => "relabel-hash",
            Action::PullImages { .. } => "pull-images",
            Action::GiveUpPulls { .. } => "give-up-pulls",
            Action::DeletePods { .. } => "delete-pods",
        }
    }

    /// The group and node count of an action that adds nodes (created or started).
    pub fn scale_up(&self) -> Option<(&str, u32)> {
        match self {
            Action::ScaleUp { group, count, .. } => Some((group, *count)),
            Action::StartWarm { group, servers } => {
                Some((group, u32::try_from(servers.len()).unwrap_or(u32::MAX)))
            }
            _ => None,
        }
    }

    /// The group of an action that makes or starts VMs of one group as a whole (a
    /// create, a warm start, a warm-pool fill): a failure backs that group off.
    pub fn group(&self) -> Option<&str> {
        match self {
            Action::ScaleUp { group, .. }
            | Action::StartWarm { group, .. }
            | Action::FillWarmPool { group, .. } => Some(group),
            _ => None,
        }
    }

    /// The group and count of an action that creates VMs to run now (not a warm start).
    pub fn creates(&self) -> Option<(&str, u32)> {
        match self {
            Action::ScaleUp { group, count, .. } => Some((group, *count)),
            _ => None,
        }
    }

    /// The nodes this action cordons.
    pub fn cordons(&self) -> &[String] {
        match self {
            Action::Cordon { nodes, .. } => nodes,
            _ => &[],
        }
    }

    /// The nodes a `RemoveStartupTaint` lets in.
    pub fn lets_in(&self) -> &[String] {
        match self {
            Action::RemoveStartupTaint { nodes } => nodes,
            _ => &[],
        }
    }

    /// The Kubernetes objects this action touches, for Events on them (a VM's node
    /// is named like the VM). Empty for actions on a whole group and for pod deletes.
    pub fn objects(&self) -> Vec<ObjectRef> {
        match self {
            Action::PullImages { node, .. } | Action::GiveUpPulls { node, .. } => {
                vec![ObjectRef::node(node)]
            }
            Action::DeleteNodes { nodes } => {
                nodes.iter().map(|t| ObjectRef::node(&t.node)).collect()
            }
            Action::Cordon { nodes, .. }
            | Action::Uncordon { nodes, .. }
            | Action::ReuseCordoned { nodes }
            | Action::ForgetCordon { nodes }
            | Action::DeleteNodesWithoutVm { nodes }
            | Action::Drain { nodes, .. }
            | Action::DeletePodsPastLimit { nodes, .. }
            | Action::DeleteServers { nodes, .. }
            | Action::RemoveStartupTaint { nodes } => {
                nodes.iter().map(|n| ObjectRef::node(n)).collect()
            }
            Action::MarkUnneeded { mark, clear, .. } => mark
                .iter()
                .chain(clear)
                .map(|n| ObjectRef::node(n))
                .collect(),
            Action::RelabelHash { nodes } => nodes.keys().map(|n| ObjectRef::node(n)).collect(),
            Action::SoftTaint { add, remove } => add
                .iter()
                .chain(remove)
                .map(|n| ObjectRef::node(n))
                .collect(),
            Action::ParkWarm { servers }
            | Action::MarkJoined { servers, .. }
            | Action::RestartVanished { servers, .. }
            | Action::StopUnreachable { servers, .. }
            | Action::FinishJoin { servers, .. } => {
                servers.iter().map(|s| ObjectRef::node(&s.name)).collect()
            }
            Action::ScaleUp { .. }
            | Action::StartWarm { .. }
            | Action::FillWarmPool { .. }
            | Action::None
            | Action::DeletePods { .. } => Vec::new(),
        }
    }

    /// What this action acts on, one by one, so a failure can hold back just these
    /// (see [`super::backoff`]). Empty for actions on a whole group (see [`Self::group`])
    /// and for `None`.
    pub fn targets(&self) -> Vec<Target<'_>> {
        match self {
            Action::None
            | Action::ScaleUp { .. }
            | Action::StartWarm { .. }
            | Action::FillWarmPool { .. } => Vec::new(),
            Action::RemoveStartupTaint { nodes: ns }
            | Action::Cordon { nodes: ns, .. }
            | Action::Uncordon { nodes: ns, .. }
            | Action::ReuseCordoned { nodes: ns }
            | Action::ForgetCordon { nodes: ns }
            | Action::DeleteNodesWithoutVm { nodes: ns }
            | Action::Drain { nodes: ns, .. }
            | Action::DeletePodsPastLimit { nodes: ns, .. } => {
                ns.iter().map(|n| Target::Node(n)).collect()
            }
            Action::MarkUnneeded { mark, clear, .. } => {
                mark.iter().chain(clear).map(|n| Target::Node(n)).collect()
            }
            Action::RelabelHash { nodes } => nodes.keys().map(|n| Target::Node(n)).collect(),
            Action::SoftTaint { add, remove } => {
                add.iter().chain(remove).map(|n| Target::Node(n)).collect()
            }
            Action::DeleteNodes { nodes: ts } => ts.iter().map(|t| Target::Node(&t.node)).collect(),
            Action::PullImages { node, .. } | Action::GiveUpPulls { node, .. } => {
                vec![Target::Node(node)]
            }
            Action::DeleteServers { servers, .. }
            | Action::ParkWarm { servers }
            | Action::MarkJoined { servers, .. }
            | Action::RestartVanished { servers, .. }
            | Action::StopUnreachable { servers, .. }
            | Action::FinishJoin { servers, .. } => servers.iter().map(Target::Server).collect(),
            Action::DeletePods { pods } => pods.iter().map(Target::Pod).collect(),
        }
    }
}

/// One object an action acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    Node(&'a str),
    Server(&'a ServerRef),
    Pod(&'a PodRef),
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
            Action::ScaleUp {
                group,
                count,
                size: None,
            } => write!(f, "add {count} node(s) to group {group}"),
            Action::ScaleUp {
                group,
                count,
                size: Some(size),
            } => write!(f, "add {count} node(s) of size {size} to group {group}"),
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
            Action::ReuseCordoned { nodes } => write!(
                f,
                "uncordon {} for pending pods instead of adding nodes",
                nodes.join(", ")
            ),
            Action::SoftTaint { add, remove } => {
                let key = crate::model::DELETION_CANDIDATE_TAINT_KEY;
                match (add.is_empty(), remove.is_empty()) {
                    (false, true) => write!(
                        f,
                        "add the soft taint {key}:PreferNoSchedule to {}",
                        add.join(", ")
                    ),
                    (true, _) => write!(f, "remove the soft taint {key} from {}", remove.join(", ")),
                    (false, false) => write!(
                        f,
                        "add the soft taint {key}:PreferNoSchedule to {}; remove it from {}",
                        add.join(", "),
                        remove.join(", ")
                    ),
                }
            }
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
            Action::RestartVanished { servers, .. } => {
                let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
                write!(
                    f,
                    "restart VMs {} so their kubelet registers their lost Node again",
                    names.join(", ")
                )
            }
            Action::StopUnreachable { servers, .. } => {
                let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
                write!(
                    f,
                    "stop VMs {}: NotReady, holding data only they can reach",
                    names.join(", ")
                )
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
            Action::RelabelHash { nodes } => {
                let names: Vec<&str> = nodes.keys().map(String::as_str).collect();
                write!(
                    f,
                    "relabel node(s) {} with their group's settings hash of today",
                    names.join(", ")
                )
            }
            Action::PullImages { node, images, .. } => {
                write!(f, "pull {} on {node}", images.join(", "))
            }
            Action::GiveUpPulls { node, pods, .. } => {
                let names: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
                write!(
                    f,
                    "record the images {node} could not pull, delete image puller pods {}",
                    names.join(", ")
                )
            }
            Action::DeletePods { pods } => {
                let names: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
                write!(f, "delete finished image puller pods {}", names.join(", "))
            }
        }
    }
}
