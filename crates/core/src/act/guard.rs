//! Defence in depth: just before a VM or a Node is deleted, both are read back (the VM
//! from its provider, the Node from the API server) and must still be what the plan
//! was made on: the VM tagged for this cluster and the planned group, under the planned
//! name; the Node labelled for the same cluster and group. The planner checked this on
//! the cycle's snapshot; this catches what changed since (a person re-tagging a VM or
//! removing a label), and any planner bug that would hand over something not ours.
//! A node removed as empty or drained must also still be cordoned by nodewright: a
//! person who uncordoned it meanwhile (or cordoned it anew) gets to keep it.

use std::collections::BTreeMap;
use std::fmt;

use super::{ActError, Actuator, Outcome};
use crate::cloud::{not_owned_by, GROUP_TAG};
use crate::model::{
    NodeInfo, PodInfo, PodRef, Server, ServerRef, ANNOTATION_CORDONED, LABEL_CLUSTER, LABEL_GROUP,
};
use crate::plan::NodeTarget;

/// A deletion refused because a check just before it failed: what was not deleted, and
/// which check failed on which object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What was left alone, e.g. `VM c-g-x (id) and its node c-g-x`.
    pub object: String,
    /// The check that failed, naming the object it failed on.
    pub check: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.check)
    }
}

/// Why VM `server` and its Node must not be deleted, if they must not, given the VM as
/// its provider (`provider`) shows it now (`None`: gone) and the labels of the Node named
/// `node`, or like the VM when `node` is `None`, as the API server has them now (`None`:
/// no such Node).
///
/// `node` is the Node the plan deletes with the VM. When it is `None`, a Node named like
/// the VM must not exist: the plan saw none of ours, so one there now is either not ours
/// (its labels were removed: its pods still run) or registered since the plan.
pub fn check_removal(
    cluster_name: &str,
    provider: &str,
    server: &ServerRef,
    vm_now: Option<&Server>,
    node: Option<&str>,
    node_labels: Option<&BTreeMap<String, String>>,
) -> Option<Refusal> {
    let vm = format!("VM {} ({})", server.name, server.id);
    let object = match node {
        Some(n) => format!("{vm} and its node {n}"),
        None => vm.clone(),
    };
    let check = check_vm(cluster_name, provider, server, &vm, vm_now)
        .or_else(|| check_node(cluster_name, server, &vm, node, node_labels))?;
    let r = Refusal { object, check };
    tracing::warn!(refusal = %r, "not deleting: a check just before the delete failed");
    Some(r)
}

fn check_vm(
    cluster_name: &str,
    provider: &str,
    server: &ServerRef,
    vm: &str,
    now: Option<&Server>,
) -> Option<String> {
    let Some(now) = now else {
        return Some(format!("{vm} is gone from {provider}"));
    };
    if let Some(why) = not_owned_by(now, cluster_name) {
        return Some(format!("{vm}: {why}"));
    }
    if now.group.as_deref() != Some(server.group.as_str()) {
        return Some(format!(
            "{vm}: its {GROUP_TAG} tag is {}, the plan says '{}'",
            quoted(now.group.as_deref()),
            server.group
        ));
    }
    if now.name != server.name {
        return Some(format!(
            "{vm} is now named '{}'; its node is found by its name",
            now.name
        ));
    }
    None
}

fn check_node(
    cluster_name: &str,
    server: &ServerRef,
    vm: &str,
    node: Option<&str>,
    labels: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    match (node, labels) {
        (None, None) => None,
        (Some(n), None) => Some(format!("node {n} is gone")),
        (None, Some(labels)) => {
            let why = match label_mismatch(labels, cluster_name, &server.group) {
                Some(m) => format!("it is not ours: {m}"),
                None => "it registered after the plan was made".into(),
            };
            Some(format!(
                "node {} of {vm} exists but the plan does not delete it ({why}); \
                 the VM is left alone while the node is there",
                server.name
            ))
        }
        (Some(n), Some(labels)) => {
            label_mismatch(labels, cluster_name, &server.group).map(|m| format!("node {n}: {m}"))
        }
    }
}

/// Why node `name`, as the API server has it now, is no longer one nodewright cordoned
/// to remove: it must still be unschedulable and carry [`ANNOTATION_CORDONED`] (its
/// ownership labels are checked by [`check_removal`]).
pub fn check_cordon(name: &str, now: &NodeInfo) -> Option<String> {
    if !now.unschedulable {
        return Some(format!(
            "node {name} is schedulable again (uncordoned since the plan); nodewright deletes only nodes it cordoned"
        ));
    }
    if !now.annotations.contains_key(ANNOTATION_CORDONED) {
        return Some(format!(
            "node {name} is cordoned but no longer carries nodewright's annotation {ANNOTATION_CORDONED} (cordoned by someone else since the plan)"
        ));
    }
    None
}

/// Why node `name` must not be deleted given its pods as the API server lists them now
/// (`pods_now`): one that a drain does not leave alone (not a DaemonSet, mirror or
/// finished pod, nor one of this cluster's image pullers in `puller_ns`) and that the
/// plan did not know it deletes the node with (`leaving`). The plan judged the node on
/// the watch cache; a pods watch that keeps failing leaves that cache stale, and a node
/// running pods would be deleted as empty.
pub fn check_pods(
    name: &str,
    pods_now: &[std::sync::Arc<PodInfo>],
    leaving: &[PodRef],
    puller_ns: &str,
    cluster: &str,
) -> Option<String> {
    let unexpected: Vec<String> = pods_now
        .iter()
        .filter(|p| !p.ignored_by_drain())
        .filter(|p| {
            !(p.namespace == puller_ns
                && p.labels
                    .get(crate::model::LABEL_IMAGE_PULLER)
                    .map(String::as_str)
                    == Some("true")
                && p.labels.get(LABEL_CLUSTER).map(String::as_str) == Some(cluster))
        })
        .filter(|p| {
            !leaving
                .iter()
                .any(|l| l.namespace == p.namespace && l.name == p.name)
        })
        .map(|p| p.key())
        .collect();
    if unexpected.is_empty() {
        return None;
    }
    Some(format!(
        "node {name} runs {} pod(s) the plan did not see ({}), read from the API server just now; the plan's view of the pods is stale (a failing pods watch?), the node stays",
        unexpected.len(),
        unexpected.join(", ")
    ))
}

/// Pairs each VM of a `DeleteServers` action with its node (named like it); a node no
/// VM is named like is refused.
pub fn by_name<'a>(
    servers: &'a [ServerRef],
    nodes: &'a [String],
) -> (Vec<(&'a ServerRef, Option<&'a str>)>, Vec<Refusal>) {
    let refusals = nodes
        .iter()
        .filter(|n| !servers.iter().any(|s| s.name == **n))
        .map(|n| Refusal {
            object: format!("node {n}"),
            check: format!("no VM of this action is named {n}"),
        })
        .collect();
    let targets = servers
        .iter()
        .map(|s| (s, nodes.iter().find(|n| **n == s.name).map(String::as_str)))
        .collect();
    (targets, refusals)
}

impl Actuator<'_> {
    /// Deletes each VM with its node (the Node first), each pair only once both, read
    /// back just before, pass [`check_removal`] (and, with `cordoned`, the nodes of a
    /// `DeleteNodes`, the node [`check_cordon`] and its pods, listed from the API server,
    /// [`check_pods`]). Pairs that fail a check are left alone and the others still go;
    /// then the refusals (with `earlier` ones) are the error, naming each object and the
    /// check that failed.
    pub(super) async fn remove_checked(
        &self,
        targets: &[(&ServerRef, Option<&str>)],
        earlier: Vec<Refusal>,
        cordoned: Option<&[NodeTarget]>,
        park: &[&str],
        out: &mut Outcome,
    ) -> Result<(), ActError> {
        let mut refusals = earlier;
        let cluster_name = &self.config.cluster_name;
        for (server, node) in targets {
            let provider = self.clouds.for_group(&server.group)?;
            let vm_now = provider.get_server(cluster_name, &server.id).await?;
            let node_now = self.cluster.node(node.unwrap_or(&server.name)).await?;
            let target = node.and_then(|n| cordoned?.iter().find(|t| t.node == n));
            let pods_now = match target {
                Some(t) => Some(self.cluster.pods_on_node(&t.node).await?),
                None => None,
            };
            let refusal = check_removal(
                cluster_name,
                provider.name(),
                server,
                vm_now.as_ref(),
                *node,
                node_now.as_ref().map(|n| &n.labels),
            )
            .or_else(|| {
                let (t, now) = (target?, node_now.as_ref()?);
                let name = t.node.as_str();
                let check = check_cordon(name, now).or_else(|| {
                    check_pods(
                        name,
                        pods_now.as_deref().unwrap_or_default(),
                        &t.leaving,
                        &self.config.image_puller.namespace,
                        cluster_name,
                    )
                })?;
                let r = Refusal {
                    object: format!("VM {} ({}) and its node {name}", server.name, server.id),
                    check,
                };
                tracing::warn!(refusal = %r, "not deleting: a check just before the delete failed");
                Some(r)
            });
            if let Some(r) = refusal {
                refusals.push(r);
                continue;
            }
            if park.contains(&server.id.as_str()) {
                // The VM first, its Node after: see [`Actuator::park_warm`].
                provider.park(cluster_name, &server.id).await?;
                out.done.push(format!(
                    "stopped VM {} ({}) into the warm pool of group {}",
                    server.name, server.id, server.group
                ));
                if let Some(node) = node {
                    self.cluster.delete_node(node).await?;
                    out.done.push(format!("deleted node {node}"));
                }
                continue;
            }
            if let Some(node) = node {
                // Marked as being removed before its Node goes: should its delete not
                // follow (a crash, a failed call), this process or the next deletes it
                // again, and never takes it for capacity on its way in, nor for a VM
                // that failed to join.
                // A mark left from a removal long ago is renewed: this one is in flight.
                let fresh = self.config.provision_timeout;
                if vm_now.as_ref().is_some_and(|v| {
                    v.status != crate::model::ServerStatus::Removing
                        || v.removal_is_stale(fresh, std::time::SystemTime::now())
                }) {
                    provider.mark_removing(cluster_name, &server.id).await?;
                }
                self.cluster.delete_node(node).await?;
                out.done.push(format!("deleted node {node}"));
                self.delete_server_after_node(server).await?;
            } else {
                self.delete_server(server).await?;
            }
            *out.deleted.entry(server.group.clone()).or_default() += 1;
            out.done
                .push(format!("deleted VM {} ({})", server.name, server.id));
        }
        refused_if_any(refusals, out)
    }

    /// Deletes (gracefully: the pod's own grace period, no Eviction API) each pod of
    /// `pods` that the API server lists, just before, on one of `nodes`, still nodewright's
    /// cordoned nodes; any other is refused.
    pub(super) async fn delete_pods_past_limit(
        &self,
        nodes: &[String],
        pods: &[PodRef],
        out: &mut Outcome,
    ) -> Result<(), ActError> {
        let mut on_nodes: Vec<std::sync::Arc<PodInfo>> = Vec::new();
        let mut refusals = Vec::new();
        for name in nodes {
            if let Some(n) = self.cluster.node(name).await? {
                match check_cordon(name, &n) {
                    None => on_nodes.extend(self.cluster.pods_on_node(name).await?),
                    Some(check) => refusals.push(Refusal {
                        object: format!("the pods on node {name}"),
                        check,
                    }),
                }
            }
        }
        for pod in pods {
            if on_nodes
                .iter()
                .any(|p| p.namespace == pod.namespace && p.name == pod.name)
            {
                self.cluster.delete_pod(pod).await?;
                out.done
                    .push(format!("deleted pod {pod} (its grace period applies)"));
            } else if refusals.is_empty() {
                // Gone, or moved off these nodes, since the plan: nothing to do.
                out.deferred
                    .push(format!("pod {pod} is no longer on {}", nodes.join(", ")));
            }
        }
        refused_if_any(refusals, out)
    }

    /// Deletes each Node of `nodes`, NotReady with no VM in the plan's listing, once a
    /// second look agrees: the Node, read back, is still ours and NotReady, and its
    /// group's provider, listed again now, has no VM of its name.
    pub(super) async fn delete_nodes_without_vm(
        &self,
        nodes: &[String],
        out: &mut Outcome,
    ) -> Result<(), ActError> {
        let mut refusals = Vec::new();
        let cluster_name = &self.config.cluster_name;
        for name in nodes {
            let Some(now) = self.cluster.node(name).await? else {
                continue;
            };
            let group = now.labels.get(LABEL_GROUP).cloned().unwrap_or_default();
            let check = if let Some(m) = label_mismatch(&now.labels, cluster_name, &group) {
                Some(format!("node {name}: {m}"))
            } else if now.ready {
                Some(format!("node {name} is Ready again"))
            } else {
                let provider = self.clouds.for_group(&group)?;
                let listed = provider.list_servers(cluster_name).await?;
                listed.iter().find(|s| s.name == *name).map(|s| {
                    format!(
                        "{} lists VM {} ({}) now; the node is judged with it next cycle",
                        provider.name(),
                        s.name,
                        s.id
                    )
                })
            };
            if let Some(check) = check {
                let r = Refusal {
                    object: format!("node {name}"),
                    check,
                };
                tracing::warn!(refusal = %r, "not deleting: a check just before the delete failed");
                refusals.push(r);
                continue;
            }
            self.cluster.delete_node(name).await?;
            out.done
                .push(format!("deleted node {name}, whose VM is gone"));
        }
        refused_if_any(refusals, out)
    }

    /// Stops each warm VM, then deletes its Node (named like it), each pair only once
    /// both, read back just before, pass [`check_removal`] and the VM is still warm.
    /// The VM goes first: a kubelet whose Node is deleted under it may register it again
    /// (kubelets since 1.30 re-create it; older ones only on their next start), which
    /// would leave a Node of a stopped VM; once the VM is stopped nothing can register it
    /// until a scale-up starts it, when its kubelet registers it with its configured
    /// labels and `registerWithTaints`, the startup taint among them.
    pub(super) async fn park_warm(
        &self,
        servers: &[ServerRef],
        out: &mut Outcome,
    ) -> Result<(), ActError> {
        let mut refusals = Vec::new();
        let cluster_name = &self.config.cluster_name;
        for server in servers {
            let provider = self.clouds.for_group(&server.group)?;
            let vm_now = provider.get_server(cluster_name, &server.id).await?;
            let node_now = self.cluster.node(&server.name).await?;
            let refusal = check_removal(
                cluster_name,
                provider.name(),
                server,
                vm_now.as_ref(),
                Some(&server.name),
                node_now.as_ref().map(|n| &n.labels),
            )
            .or_else(|| {
                let warm = vm_now.as_ref().is_some_and(|v| v.warm);
                (!warm).then(|| Refusal {
                    object: format!("VM {} ({})", server.name, server.id),
                    check: format!(
                        "VM {} ({}) is no longer in the warm pool (started since the plan)",
                        server.name, server.id
                    ),
                })
            });
            if let Some(r) = refusal {
                refusals.push(r);
                continue;
            }
            provider.park(cluster_name, &server.id).await?;
            self.cluster.delete_node(&server.name).await?;
            out.done.push(format!(
                "stopped warm VM {} ({}) and deleted its node",
                server.name, server.id
            ));
        }
        refused_if_any(refusals, out)
    }

    /// Deletes image puller pods, only ever in `imagePuller.namespace` (the planner picks
    /// only pods labelled as this cluster's pullers there).
    pub(super) async fn delete_pullers(
        &self,
        pods: &[PodRef],
        out: &mut Outcome,
    ) -> Result<(), ActError> {
        let (pods, refusals) = pullers_only(&self.config.image_puller.namespace, pods);
        for pod in pods {
            self.cluster.delete_pod(pod).await?;
            out.done.push(format!("deleted pod {pod}"));
        }
        refused_if_any(refusals, out)
    }
}

/// The pods in the image puller namespace `ns`, and a refusal for each other one.
pub fn pullers_only<'a>(ns: &str, pods: &'a [PodRef]) -> (Vec<&'a PodRef>, Vec<Refusal>) {
    let (ours, others): (Vec<&PodRef>, Vec<&PodRef>) = pods.iter().partition(|p| p.namespace == ns);
    let refusals = others
        .into_iter()
        .map(|pod| Refusal {
            object: format!("pod {pod}"),
            check: format!(
                "it is not in the image puller namespace {ns}, the only one whose pods nodewright deletes"
            ),
        })
        .collect();
    (ours, refusals)
}

fn refused_if_any(refusals: Vec<Refusal>, out: &mut Outcome) -> Result<(), ActError> {
    if refusals.is_empty() {
        return Ok(());
    }
    Err(ActError::Refused {
        refusals,
        done: std::mem::take(&mut out.done),
    })
}

/// Which ownership label of a Node disagrees with `cluster` and `group`, if one does.
pub fn label_mismatch(
    labels: &BTreeMap<String, String>,
    cluster: &str,
    group: &str,
) -> Option<String> {
    [(LABEL_CLUSTER, cluster), (LABEL_GROUP, group)]
        .into_iter()
        .find(|(key, want)| labels.get(*key).map(String::as_str) != Some(*want))
        .map(|(key, want)| {
            format!(
                "its label {key} is {}, expected '{want}'",
                quoted(labels.get(key).map(String::as_str))
            )
        })
}

fn quoted(v: Option<&str>) -> String {
    match v {
        Some(v) => format!("'{v}'"),
        None => "missing".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::cloud::CLUSTER_TAG;
    use crate::model::{ServerStatus, LABEL_CLUSTER, LABEL_GROUP};

    fn planned(name: &str) -> ServerRef {
        ServerRef {
            provider: "fake".into(),
            id: format!("id-{name}"),
            name: name.into(),
            group: "g".into(),
        }
    }

    fn vm(name: &str, cluster: Option<&str>, group: Option<&str>) -> Server {
        Server {
            id: format!("id-{name}"),
            name: name.into(),
            cluster: cluster.map(str::to_string),
            group: group.map(str::to_string),
            status: ServerStatus::Active,
            created: SystemTime::UNIX_EPOCH,
            memory_bytes: None,
            provider: "fake".into(),
            size: None,
            settings_hash: None,
            fault: None,
            warm: false,
            filling: false,
            joined: None,
            restarted: None,
            fenced: None,
            removing_since: None,
        }
    }

    fn labels(cluster: Option<&str>, group: &str) -> BTreeMap<String, String> {
        let mut l = BTreeMap::from([(LABEL_GROUP.to_string(), group.to_string())]);
        if let Some(c) = cluster {
            l.insert(LABEL_CLUSTER.to_string(), c.to_string());
        }
        l
    }

    /// Issue 8, every check the actuator makes on what it read back just before a delete:
    /// each failing one refuses, naming the object and the check.
    #[test]
    fn every_check_before_a_delete_refuses_and_names_what_failed() {
        let s = planned("c-g-a");
        let ours = labels(Some("c"), "g");
        let check =
            |now: Option<&Server>, node: Option<&str>, l: Option<&BTreeMap<String, String>>| {
                check_removal("c", "fake", &s, now, node, l).map(|r| r.to_string())
            };
        let good = vm("c-g-a", Some("c"), Some("g"));
        // All agree, with the node or without one (none there).
        assert_eq!(check(Some(&good), Some("c-g-a"), Some(&ours)), None);
        assert_eq!(check(Some(&good), None, None), None);

        let refused = |r: Option<String>, want: &str| {
            let r = r.unwrap_or_else(|| panic!("expected a refusal naming {want:?}"));
            assert!(r.contains(want), "{r}");
            assert!(r.starts_with("VM c-g-a (id-c-g-a)"), "{r}");
        };
        refused(
            check(None, Some("c-g-a"), Some(&ours)),
            "VM c-g-a (id-c-g-a) is gone from fake",
        );
        refused(
            check(
                Some(&vm("c-g-a", Some("other"), Some("g"))),
                Some("c-g-a"),
                Some(&ours),
            ),
            &format!("{CLUSTER_TAG} tag names cluster 'other', not 'c'"),
        );
        refused(
            check(Some(&vm("c-g-a", None, Some("g"))), None, None),
            &format!("carries no {CLUSTER_TAG} tag"),
        );
        refused(
            check(Some(&vm("c-g-a", Some("c"), Some("h"))), None, None),
            "nodewright-group tag is 'h', the plan says 'g'",
        );
        refused(
            check(Some(&vm("c-g-a", Some("c"), None)), None, None),
            "nodewright-group tag is missing",
        );
        refused(
            check(Some(&vm("renamed", Some("c"), Some("g"))), None, None),
            "is now named 'renamed'",
        );
        refused(
            check(Some(&good), Some("c-g-a"), None),
            "node c-g-a is gone",
        );
        refused(
            check(Some(&good), Some("c-g-a"), Some(&labels(None, "g"))),
            "node c-g-a: its label nodewright.io/cluster is missing, expected 'c'",
        );
        refused(
            check(Some(&good), Some("c-g-a"), Some(&labels(Some("c"), "h"))),
            "node c-g-a: its label nodewright.io/group is 'h', expected 'g'",
        );
        // A VM planned without a node, whose node is there: not ours any more (a label
        // removed, its pods still run), or registered since the plan.
        refused(
            check(Some(&good), None, Some(&labels(None, "g"))),
            "node c-g-a of VM c-g-a (id-c-g-a) exists but the plan does not delete it (it is not ours: its label nodewright.io/cluster is missing",
        );
        refused(
            check(Some(&good), None, Some(&ours)),
            "(it registered after the plan was made)",
        );
    }

    /// Issue 8: a node is deleted as emptied only while nodewright's cordon is on it.
    #[test]
    fn a_node_uncordoned_or_recordoned_by_a_person_fails_the_cordon_check() {
        let mut n = NodeInfo {
            name: "c-g-a".into(),
            labels: labels(Some("c"), "g"),
            annotations: BTreeMap::from([(ANNOTATION_CORDONED.to_string(), "empty".into())]),
            created: SystemTime::UNIX_EPOCH,
            unschedulable: true,
            ready: true,
            taints: Vec::new(),
            allocatable: Default::default(),
            images: Default::default(),
            image_listing: Default::default(),
            deleting: false,
            ready_changed: None,
            kubelet_version: None,
        };
        assert_eq!(check_cordon("c-g-a", &n), None);
        n.unschedulable = false;
        let why = check_cordon("c-g-a", &n).expect("uncordoned: refused");
        assert!(why.contains("schedulable again"), "{why}");
        n.unschedulable = true;
        n.annotations.clear();
        let why = check_cordon("c-g-a", &n).expect("a person's cordon: refused");
        assert!(why.contains(ANNOTATION_CORDONED), "{why}");
    }

    #[test]
    fn nodes_pair_with_the_vm_named_like_them_and_pullers_stay_in_their_namespace() {
        let servers = [planned("c-g-a"), planned("c-g-b")];
        let nodes = ["c-g-b".to_string(), "stray".to_string()];
        let (targets, refusals) = by_name(&servers, &nodes);
        let pairs: Vec<(&str, Option<&str>)> =
            targets.iter().map(|(s, n)| (s.name.as_str(), *n)).collect();
        assert_eq!(pairs, [("c-g-a", None), ("c-g-b", Some("c-g-b"))]);
        assert_eq!(refusals.len(), 1);
        assert_eq!(
            refusals[0].to_string(),
            "node stray: no VM of this action is named stray"
        );

        let pod = |ns: &str, name: &str| PodRef {
            namespace: ns.into(),
            name: name.into(),
        };
        let pods = [pod("kube-system", "puller-a"), pod("apps", "theirs")];
        let (ok, refused) = pullers_only("kube-system", &pods);
        assert_eq!(ok, [&pods[0]]);
        assert_eq!(refused.len(), 1);
        assert!(refused[0]
            .to_string()
            .starts_with("pod apps/theirs: it is not in the image puller namespace kube-system"));
    }

    #[test]
    fn labels_are_checked_key_by_key() {
        let l = labels(Some("c"), "g");
        assert_eq!(label_mismatch(&l, "c", "g"), None);
        assert_eq!(
            label_mismatch(&l, "d", "g").as_deref(),
            Some("its label nodewright.io/cluster is 'c', expected 'd'")
        );
        assert_eq!(
            label_mismatch(&BTreeMap::new(), "c", "g").as_deref(),
            Some("its label nodewright.io/cluster is missing, expected 'c'")
        );
    }

    #[test]
    fn a_refusal_error_names_what_was_left_and_what_was_done() {
        let e = ActError::Refused {
            refusals: vec![Refusal {
                object: "VM x (1)".into(),
                check: "VM x (1) is gone from fake".into(),
            }],
            done: vec!["deleted VM y (2)".into()],
        };
        assert_eq!(
            e.to_string(),
            "refused to delete VM x (1): VM x (1) is gone from fake (done meanwhile: deleted VM y (2))"
        );
    }
}
