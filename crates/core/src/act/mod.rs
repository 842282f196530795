//! Carries out the planner's one action through the cluster and cloud adapters.
//! Every step is safe to repeat: if the process dies half-way, the next cycle observes
//! what happened and the planner picks up from there.

pub mod events;
pub mod guard;

pub use crate::cloud::in_use::{Clouds, NoProvider, DEFAULT_OBSERVE_DEADLINE};
pub use crate::model::rfc3339;

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};

use crate::cloud::{CloudError, CreateRequest};
use crate::cluster::{ClusterApi, ClusterError, Eviction};
use crate::config::{Config, NodeGroupConfig};
use crate::model::{
    GroupShape, PodRef, ServerRef, ANNOTATION_CORDONED, ANNOTATION_CORDONED_AT,
    ANNOTATION_DISRUPTION, ANNOTATION_UNNEEDED_SINCE, ANNOTATION_UNPULLABLE_IMAGES,
    DELETION_CANDIDATE_TAINT_KEY, STARTUP_TAINT_KEY,
};
use crate::plan::sched::template::provider_labels;
use crate::plan::{backoff, Action, Target};
use crate::userdata::{self, RenderContext, UserDataError};

#[derive(Debug, thiserror::Error)]
pub enum ActError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Cloud(#[from] CloudError),
    #[error("user data for group {group}: {source}")]
    UserData {
        group: String,
        #[source]
        source: UserDataError,
    },
    #[error("no cloud provider configured for {0}")]
    NoProvider(String),
    /// Checks just before a destructive call failed: those objects were left alone.
    #[error("refused to delete {}{}", join_refusals(.refusals), deleted_meanwhile(.done))]
    Refused {
        refusals: Vec<guard::Refusal>,
        /// What the same action did delete, its other objects having passed the checks.
        done: Vec<String>,
    },
}

impl From<NoProvider> for ActError {
    fn from(e: NoProvider) -> Self {
        ActError::NoProvider(e.0)
    }
}

fn join_refusals(r: &[guard::Refusal]) -> String {
    r.iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

fn deleted_meanwhile(done: &[String]) -> String {
    if done.is_empty() {
        String::new()
    } else {
        format!(" (done meanwhile: {})", done.join(", "))
    }
}

/// Renders the user data for a node of `group`.
pub fn render_user_data(
    config: &Config,
    group: &NodeGroupConfig,
    node_name: &str,
) -> Result<userdata::RenderedUserData, ActError> {
    render_user_data_for(config, group, node_name, None)
}

/// Renders the user data for a node of `group` whose provider describes it as
/// `shape`: its labels carry the instance type, zone and region the shape knows
/// (kubelet accepts these in `--node-labels`), so the node gets the labels the planner
/// assumed for it ([`crate::plan::sched::well_known_labels`]). Group labels win over
/// them, nodewright's ownership labels over everything.
pub fn render_user_data_for(
    config: &Config,
    group: &NodeGroupConfig,
    node_name: &str,
    shape: Option<&GroupShape>,
) -> Result<userdata::RenderedUserData, ActError> {
    let preview = group.user_data.bootstrap_token.then(minted_later);
    render_sized(
        config,
        group,
        node_name,
        shape,
        None,
        preview.as_ref(),
        None,
    )
}

/// Stand-ins for the join credentials of a group that mints them, for a render outside a
/// create (`nodewright render`, `check`): each VM gets its own at its create.
fn minted_later() -> crate::model::JoinCredentials {
    crate::model::JoinCredentials {
        token: "xxxxxx.xxxxxxxxxxxxxxxx".into(),
        api_server_endpoint: "minted-at-create.invalid:6443".into(),
        ca_cert_hash: "sha256:from-kube-public-cluster-info".into(),
    }
}

/// [`render_user_data_for`] a VM of `size` (in a group of several sizes): `shape` is
/// that size's, and the node is labelled with the size's settings hash. With the API
/// server's version known (its `gitVersion`), a group that pins a newer one is refused:
/// no node is made newer than its control plane.
fn render_sized(
    config: &Config,
    group: &NodeGroupConfig,
    node_name: &str,
    shape: Option<&GroupShape>,
    size: Option<&str>,
    join: Option<&crate::model::JoinCredentials>,
    server_version: Option<&str>,
) -> Result<userdata::RenderedUserData, ActError> {
    let user_data_error = |source| ActError::UserData {
        group: group.name.clone(),
        source,
    };
    if let Some(skew) = newer_than_server(group, server_version) {
        return Err(user_data_error(skew));
    }
    let taints = group.taints.iter().map(|t| t.to_flag()).collect();
    let mut labels = provider_labels(shape);
    labels.extend(group.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.insert(
        crate::model::LABEL_SETTINGS_HASH.to_string(),
        group.hash_of_size(size).to_string(),
    );
    let ctx = RenderContext::new(
        &config.cluster_name,
        &group.name,
        node_name,
        &labels,
        taints,
    )
    .with_join(join.cloned())
    .with_server_version(server_version);
    userdata::render(&config.templates_dir, &group.user_data, &ctx).map_err(user_data_error)
}

/// The group's pinned version when it is newer than the API server's (both readable).
pub fn newer_than_server(
    group: &NodeGroupConfig,
    server_version: Option<&str>,
) -> Option<UserDataError> {
    let server = crate::model::KubeVersion::parse(server_version?)?;
    let (variable, pinned) = group.pinned_version()?;
    let pin = crate::model::KubeVersion::parse(pinned)?;
    server
        .older_than(&pin)
        .then(|| UserDataError::NewerThanServer {
            variable: variable.to_string(),
            pinned: pinned.to_string(),
            server: server.to_string(),
        })
}

/// What the cycle observed that a render needs: each group's shape, the API server's
/// version.
#[derive(Clone, Copy)]
struct Observed<'a> {
    shapes: &'a BTreeMap<String, GroupShape>,
    server_version: Option<&'a str>,
}

/// What a VM of group `g` named `name` is made (or started, or joined) with; `zone`: the
/// hypervisor host it is (to be) on, if the group has hosts.
fn request_for(
    config: &Config,
    seen: Observed<'_>,
    g: &NodeGroupConfig,
    name: &str,
    zone: Option<String>,
    size: Option<&str>,
    join: Option<&crate::model::JoinCredentials>,
) -> Result<CreateRequest, ActError> {
    let placed = seen.shapes.get(&g.name).map(|s| {
        let sized = size.map_or_else(|| s.clone(), |n| s.of_size(n));
        GroupShape {
            zone: zone.clone().or(s.zone.clone()),
            ..sized
        }
    });
    let rendered = render_sized(
        config,
        g,
        name,
        placed.as_ref(),
        size,
        join,
        seen.server_version,
    )?;
    Ok(CreateRequest {
        name: name.to_string(),
        cluster: config.cluster_name.clone(),
        group: g.name.clone(),
        user_data: rendered.content,
        settings_hash: g.hash_of_size(size).to_string(),
        size: size.map(str::to_string),
        zone,
    })
}

/// The render callback of VM `name` of group `g` ([`crate::cloud::RenderJoin`]): what a
/// create of it in a given zone would have been given, for the provider that knows where
/// the VM is (a warm start, a join finished again).
fn renderer<'r>(
    config: &'r Config,
    seen: Observed<'r>,
    g: &'r NodeGroupConfig,
    name: &'r str,
    join: Option<&'r crate::model::JoinCredentials>,
) -> impl Fn(Option<&str>) -> Result<CreateRequest, String> + Send + Sync + 'r {
    move |zone| {
        request_for(config, seen, g, name, zone.map(str::to_string), None, join)
            .map_err(|e| e.to_string())
    }
}

/// `n` random base-36 characters (lowercase letters and digits). Randomly keyed
/// hashes of a counter: no clock is read, so the loop stays on its injected clock.
pub fn random_suffix(n: usize) -> String {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut out = String::new();
    while out.len() < n {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut v = h.finish();
        for _ in 0..(n - out.len()).min(12) {
            out.push(char::from_digit((v % 36) as u32, 36).unwrap_or('x'));
            v /= 36;
        }
    }
    out
}

/// `<cluster>-<group>-<5 random base-36 chars>`, unique among `taken`.
pub fn new_node_name(cluster: &str, group: &str, taken: &BTreeSet<String>) -> String {
    loop {
        let name = format!("{cluster}-{group}-{}", random_suffix(5));
        if !taken.contains(&name) {
            return name;
        }
    }
}

/// What an action did, line by line, for logs and the simulate timeline.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    pub done: Vec<String>,
    /// Parts that could not be done now and will be retried (e.g. PDB-blocked evictions).
    pub deferred: Vec<String>,
    /// VMs created, by group.
    pub created: BTreeMap<String, u32>,
    /// VMs deleted, by group.
    pub deleted: BTreeMap<String, u32>,
    /// Eviction results: `evicted`, `refused`, `gone`.
    pub evictions: BTreeMap<&'static str, u32>,
}

pub struct Actuator<'a> {
    pub config: &'a Config,
    pub cluster: &'a dyn ClusterApi,
    pub clouds: &'a Clouds,
    /// Names already in use (nodes and servers), so new VM names never collide.
    pub taken_names: BTreeSet<String>,
    /// What each group's provider knows of a new VM (instance type, zone, region).
    pub group_shapes: &'a BTreeMap<String, GroupShape>,
    /// The API server's `gitVersion` as the cycle read it, for the templates.
    pub server_version: Option<&'a str>,
    pub dry_run: bool,
    /// The objects the action failed on, by their backoff key ([`backoff::key`]): an
    /// action over several objects applies to each on its own, and only these are held
    /// back. Empty after a failure not tied to one object (then all of them are).
    pub failed: Vec<String>,
    /// The loop's clock at the decision (virtual in a replay): minted join tokens are
    /// good for `provisionTimeout` from it.
    pub now: std::time::SystemTime,
}

impl<'a> Actuator<'a> {
    /// What a render needs of what the cycle observed (as long-lived as the cycle's view,
    /// not this borrow of the actuator).
    fn observed(&self) -> Observed<'a> {
        Observed {
            shapes: self.group_shapes,
            server_version: self.server_version,
        }
    }
}

/// The first failure of an action over several objects, which goes on past it.
#[derive(Default)]
struct FirstFailure(Option<ActError>);

impl FirstFailure {
    /// Keeps `e` if it is the first; whether the action goes on with its other objects:
    /// not when the API did not answer at all (see [`unanswered`]).
    fn keep(&mut self, e: impl Into<ActError>) -> bool {
        let e = e.into();
        let go_on = !unanswered(&e);
        self.0.get_or_insert(e);
        go_on
    }

    fn result(self) -> Result<(), ActError> {
        self.0.map_or(Ok(()), Err)
    }
}

impl Actuator<'_> {
    pub async fn execute(&mut self, action: &Action) -> Result<Outcome, ActError> {
        let mut out = Outcome::default();
        if self.dry_run {
            out.done.push(format!("dry run: would {action}"));
            return Ok(out);
        }
        match action {
            Action::None => {}
            Action::RemoveStartupTaint { nodes } => {
                // Before the taint: a crash in between leaves the taint, so this runs again.
                for provider in self.clouds.distinct() {
                    if let Err(e) = provider
                        .nodes_joined(&self.config.cluster_name, nodes)
                        .await
                    {
                        tracing::warn!(provider = provider.name(), error = %e, "could not clean up after the nodes joined");
                    }
                }
                // Each node on its own: one that cannot be patched must not keep the
                // nodes after it out of service.
                let mut first = FirstFailure::default();
                for node in nodes {
                    match self.cluster.remove_taint(node, STARTUP_TAINT_KEY).await {
                        Ok(()) => {
                            // Joined: its bootstrap token has done its work.
                            self.drop_join_tokens(std::slice::from_ref(node)).await;
                            out.done.push(format!("removed startup taint from {node}"))
                        }
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::DeleteServers { servers, nodes } => {
                let (targets, refusals) = guard::by_name(servers, nodes);
                let mut each = Refusals::new(refusals);
                for t in &targets {
                    let r = self
                        .remove_checked(std::slice::from_ref(t), Vec::new(), None, &[], &mut out)
                        .await;
                    if !self.each_result(action, Target::Server(t.0), r, &mut each, &mut out) {
                        break;
                    }
                }
                let names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
                self.drop_join_tokens(&names).await;
                each.result(&mut out)?;
            }
            Action::ScaleUp { group, count, size } => {
                self.create_in(group, *count, false, size.as_deref(), &mut out)
                    .await?;
            }
            Action::FillWarmPool { group, count } => {
                self.create_in(group, *count, true, None, &mut out).await?;
            }
            Action::ParkWarm { servers } => {
                let mut each = Refusals::new(Vec::new());
                for s in servers {
                    let r = self.park_warm(std::slice::from_ref(s), &mut out).await;
                    if !self.each_result(action, Target::Server(s), r, &mut each, &mut out) {
                        break;
                    }
                }
                each.result(&mut out)?;
            }
            Action::StartWarm { group, servers } => {
                let g = self
                    .config
                    .group(group)
                    .ok_or_else(|| ActError::NoProvider(format!("group {group}")))?;
                let provider = self.clouds.for_group(group)?.clone();
                // Each VM on its own; a failure backs the group off (its own backoff).
                let mut first = FirstFailure::default();
                for s in servers {
                    // Rendered by the provider's call for the zone the VM is in (on
                    // Proxmox its host), as a create there would have been.
                    let join = match self.join_credentials(g, &s.name).await {
                        Ok(j) => j,
                        Err(e) => {
                            if !first.keep(e) {
                                break;
                            }
                            continue;
                        }
                    };
                    let render = renderer(self.config, self.observed(), g, &s.name, join.as_ref());
                    match provider
                        .start_warm(&self.config.cluster_name, &s.id, &render)
                        .await
                    {
                        Ok(()) => out.done.push(format!(
                            "started warm VM {} ({}) in group {group}",
                            s.name, s.id
                        )),
                        Err(e) => {
                            if !first.keep(e) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::Cordon {
                nodes,
                reason,
                disruption,
                at,
            } => {
                let at = rfc3339(*at);
                let annotations = BTreeMap::from([
                    (ANNOTATION_CORDONED.to_string(), reason.clone()),
                    (ANNOTATION_CORDONED_AT.to_string(), at),
                    (
                        ANNOTATION_DISRUPTION.to_string(),
                        disruption.as_str().to_string(),
                    ),
                ]);
                let mut first = FirstFailure::default();
                for node in nodes {
                    match self.cluster.cordon(node, &annotations).await {
                        Ok(()) => out.done.push(format!("cordoned {node}")),
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::ForgetCordon { nodes } => {
                let forget: BTreeMap<String, Option<String>> = [
                    ANNOTATION_CORDONED,
                    ANNOTATION_CORDONED_AT,
                    ANNOTATION_DISRUPTION,
                ]
                .into_iter()
                .map(|k| (k.to_string(), None))
                .collect();
                let mut first = FirstFailure::default();
                for node in nodes {
                    match self.cluster.annotate(node, &forget).await {
                        Ok(()) => out.done.push(format!("forgot the cordon record of {node}")),
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::Uncordon { nodes, .. } => {
                let mut first = FirstFailure::default();
                for node in nodes {
                    match self.cluster.uncordon(node).await {
                        Ok(()) => out.done.push(format!("uncordoned {node}")),
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::ReuseCordoned { nodes } => {
                for node in nodes {
                    // A node a person cordoned since the plan is theirs: left cordoned.
                    let fresh = self.cluster.node(node).await?;
                    if !fresh
                        .as_ref()
                        .is_some_and(crate::plan::policy::cordoned_by_us)
                    {
                        out.deferred.push(format!(
                            "{node}: no longer cordoned by nodewright; left as it is"
                        ));
                        continue;
                    }
                    self.cluster.uncordon(node).await?;
                    out.done
                        .push(format!("uncordoned {node} for pending pods (no new VM)"));
                }
            }
            Action::SoftTaint { add, remove } => {
                let taint = crate::model::Taint {
                    key: DELETION_CANDIDATE_TAINT_KEY.into(),
                    value: None,
                    effect: "PreferNoSchedule".into(),
                };
                // Each node on its own: one that cannot be patched is held back alone.
                let mut first = FirstFailure::default();
                for node in add {
                    match self.cluster.add_taint(node, &taint).await {
                        Ok(()) => out
                            .done
                            .push(format!("soft-tainted {node} as a deletion candidate")),
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                return first.result().map(|()| out);
                            }
                        }
                    }
                }
                for node in remove {
                    match self
                        .cluster
                        .remove_taint(node, DELETION_CANDIDATE_TAINT_KEY)
                        .await
                    {
                        Ok(()) => out.done.push(format!(
                            "removed the deletion-candidate soft taint from {node}"
                        )),
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::MarkJoined { servers, at } => {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(*at);
                // Each VM on its own: one the cloud refuses does not keep the others
                // unmarked; the first error is reported, and the next plan retries.
                let mut first = FirstFailure::default();
                for s in servers {
                    let marked = match self.clouds.for_group(&s.group) {
                        Ok(p) => p
                            .mark_joined(&self.config.cluster_name, &s.id, Some(at))
                            .await
                            .map_err(ActError::from),
                        Err(e) => Err(ActError::from(e)),
                    };
                    match marked {
                        Ok(()) => out
                            .done
                            .push(format!("recorded that VM {} ({}) joined", s.name, s.id)),
                        Err(e) => {
                            if !self.failed_on(action, Target::Server(s), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::RestartVanished { servers, at } => {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(*at);
                // Each VM on its own, on a fresh look: a Node that is back since the plan
                // (its kubelet did register) leaves its VM alone; the provider reads the
                // VM back and refuses one not ours or not running.
                let mut first = FirstFailure::default();
                for s in servers {
                    match self.cluster.node(&s.name).await {
                        Ok(Some(_)) => {
                            out.deferred.push(format!(
                                "{}: its Node is back; VM {} not restarted",
                                s.name, s.id
                            ));
                            continue;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            if !self.failed_on(action, Target::Server(s), e, &mut first) {
                                break;
                            }
                            continue;
                        }
                    }
                    let restarted = match self.clouds.for_group(&s.group) {
                        Ok(p) => p
                            .restart(&self.config.cluster_name, &s.id, at)
                            .await
                            .map_err(ActError::from),
                        Err(e) => Err(ActError::from(e)),
                    };
                    match restarted {
                        Ok(()) => out.done.push(format!(
                            "restarted VM {} ({}) so its kubelet registers its Node again",
                            s.name, s.id
                        )),
                        Err(e) => {
                            if !self.failed_on(action, Target::Server(s), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::StopUnreachable { servers, at } => {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(*at);
                // Each VM on its own, on a fresh look: a node Ready again since the plan
                // (back from maintenance) keeps its VM running; the provider reads the VM
                // back and refuses one not ours or not running.
                let mut first = FirstFailure::default();
                for s in servers {
                    match self.cluster.node(&s.name).await {
                        Ok(Some(n)) if n.ready => {
                            out.deferred
                                .push(format!("{}: Ready again; VM {} not stopped", s.name, s.id));
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            if !self.failed_on(action, Target::Server(s), e, &mut first) {
                                break;
                            }
                            continue;
                        }
                    }
                    let stopped = match self.clouds.for_group(&s.group) {
                        Ok(p) => p
                            .fence(&self.config.cluster_name, &s.id, at)
                            .await
                            .map_err(ActError::from),
                        Err(e) => Err(ActError::from(e)),
                    };
                    match stopped {
                        Ok(()) => out.done.push(format!(
                            "stopped VM {} ({}): its node is NotReady holding data only it can reach; kept for a person",
                            s.name, s.id
                        )),
                        Err(e) => {
                            if !self.failed_on(action, Target::Server(s), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::RelabelHash { nodes } => {
                let mut first = FirstFailure::default();
                for (node, hash) in nodes {
                    let set = BTreeMap::from([(
                        crate::model::LABEL_SETTINGS_HASH.to_string(),
                        Some(hash.clone()),
                    )]);
                    match self.cluster.label(node, &set).await {
                        Ok(()) => out
                            .done
                            .push(format!("relabelled {node} with settings hash {hash}")),
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::MarkUnneeded { mark, clear, at } => {
                let since = rfc3339(*at);
                let mut first = FirstFailure::default();
                for node in mark {
                    let set = BTreeMap::from([(
                        ANNOTATION_UNNEEDED_SINCE.to_string(),
                        Some(since.clone()),
                    )]);
                    match self.cluster.annotate(node, &set).await {
                        Ok(()) => out.done.push(format!("{node} unneeded since {since}")),
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                for node in clear {
                    let set = BTreeMap::from([(ANNOTATION_UNNEEDED_SINCE.to_string(), None)]);
                    match self.cluster.annotate(node, &set).await {
                        Ok(()) => out.done.push(format!("{node} needed again")),
                        Err(e) => {
                            if !self.failed_on(action, Target::Node(node), e, &mut first) {
                                break;
                            }
                        }
                    }
                }
                first.result()?;
            }
            Action::Drain { nodes, pods } => {
                // Each pod on its own: one eviction that fails leaves the others going,
                // and holds back the drain of its own node alone.
                let mut first = FirstFailure::default();
                for pod in pods {
                    let result = match self.cluster.evict(pod).await {
                        Ok(r) => r,
                        Err(e) => {
                            let node = self.node_of(nodes, pod).await;
                            let go_on = match &node {
                                Some(n) => self.failed_on(action, Target::Node(n), e, &mut first),
                                None => first.keep(e),
                            };
                            if go_on {
                                continue;
                            }
                            break;
                        }
                    };
                    let key = match &result {
                        Eviction::Evicted => "evicted",
                        Eviction::Gone => "gone",
                        Eviction::Blocked(_) => "refused",
                    };
                    *out.evictions.entry(key).or_default() += 1;
                    match result {
                        Eviction::Evicted => out.done.push(format!("evicted {pod}")),
                        Eviction::Gone => {}
                        Eviction::Blocked(why) => out
                            .deferred
                            .push(format!("eviction of {pod} refused: {why}")),
                    }
                }
                first.result()?;
            }
            Action::DeleteNodes { nodes } => {
                // Node first: once it is gone nothing schedules there, then the VM can go.
                // Each node must still be cordoned by nodewright: one a person gave back
                // since the plan stays.
                let targets: Vec<_> = nodes
                    .iter()
                    .map(|t| (&t.server, Some(t.node.as_str())))
                    .collect();
                let park: Vec<&str> = nodes
                    .iter()
                    .filter(|t| t.park)
                    .map(|t| t.server.id.as_str())
                    .collect();
                let mut each = Refusals::new(Vec::new());
                for (t, target) in targets.iter().zip(nodes) {
                    let r = self
                        .remove_checked(
                            std::slice::from_ref(t),
                            Vec::new(),
                            Some(nodes),
                            &park,
                            &mut out,
                        )
                        .await;
                    if !self.each_result(action, Target::Node(&target.node), r, &mut each, &mut out)
                    {
                        break;
                    }
                }
                each.result(&mut out)?;
            }
            Action::DeletePodsPastLimit { nodes, pods } => {
                // Each pod on its own; one that fails holds back its own node alone.
                let mut each = Refusals::new(Vec::new());
                for pod in pods {
                    let r = self
                        .delete_pods_past_limit(nodes, std::slice::from_ref(pod), &mut out)
                        .await;
                    let node = match r {
                        Err(_) => self.node_of(nodes, pod).await,
                        Ok(()) => None,
                    };
                    let go_on = match node {
                        Some(n) => {
                            self.each_result(action, Target::Node(&n), r, &mut each, &mut out)
                        }
                        None => each.add(r, &mut out),
                    };
                    if !go_on {
                        break;
                    }
                }
                each.result(&mut out)?;
            }
            Action::DeleteNodesWithoutVm { nodes } => {
                let mut each = Refusals::new(Vec::new());
                for node in nodes {
                    let r = self
                        .delete_nodes_without_vm(std::slice::from_ref(node), &mut out)
                        .await;
                    if !self.each_result(action, Target::Node(node), r, &mut each, &mut out) {
                        break;
                    }
                }
                each.result(&mut out)?;
            }
            Action::FinishJoin {
                servers,
                registered,
            } => {
                self.finish_joins(action, servers, registered, &mut out)
                    .await?
            }
            Action::PullImages {
                node,
                images,
                pull_secrets,
            } => {
                let ns = &self.config.image_puller.namespace;
                let pod = self
                    .cluster
                    .create_image_puller(&self.config.cluster_name, ns, node, images, pull_secrets)
                    .await?;
                out.done.push(format!(
                    "started {ns}/{pod} to pull {} on {node}",
                    images.join(", ")
                ));
            }
            Action::GiveUpPulls {
                node,
                unpullable,
                pods,
            } => {
                // The record first: a puller deleted without it would be made again.
                let record = serde_json::to_string(unpullable).unwrap_or_default();
                let set =
                    BTreeMap::from([(ANNOTATION_UNPULLABLE_IMAGES.to_string(), Some(record))]);
                self.cluster.annotate(node, &set).await?;
                let names: Vec<&str> = unpullable.keys().map(String::as_str).collect();
                out.done.push(format!(
                    "recorded on {node} the images no puller tries for now: {}",
                    names.join(", ")
                ));
                self.delete_pullers(pods, &mut out).await?;
            }
            Action::DeletePods { pods } => {
                let mut each = Refusals::new(Vec::new());
                for pod in pods {
                    let r = self
                        .delete_pullers(std::slice::from_ref(pod), &mut out)
                        .await;
                    if !self.each_result(action, Target::Pod(pod), r, &mut each, &mut out) {
                        break;
                    }
                }
                each.result(&mut out)?;
            }
        }
        Ok(out)
    }

    /// What a VM of group `g` named `name` is made with.
    /// `zone`: the hypervisor host the plan counted on for this VM, if the group has hosts.
    fn request(
        &self,
        g: &NodeGroupConfig,
        name: &str,
        zone: Option<String>,
        size: Option<&str>,
        join: Option<&crate::model::JoinCredentials>,
    ) -> Result<CreateRequest, ActError> {
        request_for(self.config, self.observed(), g, name, zone, size, join)
    }

    /// The kubeadm join credentials of VM `name` of `g`, minted now, good for
    /// `provisionTimeout` (`userData.bootstrapToken`); `None` for other groups. A dry run
    /// writes nothing: the template gets stand-ins.
    async fn join_credentials(
        &self,
        g: &NodeGroupConfig,
        name: &str,
    ) -> Result<Option<crate::model::JoinCredentials>, ActError> {
        if !g.user_data.bootstrap_token {
            return Ok(None);
        }
        if self.dry_run {
            return Ok(Some(minted_later()));
        }
        let expires = self.now + self.config.provision_timeout;
        let creds = self
            .cluster
            .mint_bootstrap_token(&self.config.cluster_name, name, expires)
            .await?;
        Ok(Some(creds))
    }

    /// Deletes the bootstrap tokens of `names` in groups that mint them: their node
    /// joined, or their VM is gone. A failure is logged; the token expires anyway.
    async fn drop_join_tokens(&self, names: &[String]) {
        let minting = self
            .config
            .node_groups
            .iter()
            .any(|g| g.user_data.bootstrap_token);
        if !minting || self.dry_run {
            return;
        }
        for name in names {
            if let Err(e) = self
                .cluster
                .delete_bootstrap_token(&self.config.cluster_name, name)
                .await
            {
                tracing::warn!(node = name, error = %e, "bootstrap token not deleted; it expires at provisionTimeout");
            }
        }
    }

    /// Runs the join scripts a process gone left unrun, or records the joins of those
    /// whose node registered, each VM on its own; the first error is reported.
    async fn finish_joins(
        &mut self,
        action: &Action,
        servers: &[ServerRef],
        registered: &[String],
        out: &mut Outcome,
    ) -> Result<(), ActError> {
        let (config, seen) = (self.config, self.observed());
        let mut first = FirstFailure::default();
        for s in servers {
            let done = registered.contains(&s.name);
            let result = async {
                let provider = self.clouds.for_group(&s.group)?;
                let g = config
                    .group(&s.group)
                    .ok_or_else(|| ActError::NoProvider(format!("group {}", s.group)))?;
                let join = if done {
                    None
                } else {
                    self.join_credentials(g, &s.name).await?
                };
                let render = renderer(config, seen, g, &s.name, join.as_ref());
                let render: Option<&crate::cloud::RenderJoin<'_>> =
                    if done { None } else { Some(&render) };
                provider
                    .finish_join(&config.cluster_name, &s.id, render)
                    .await?;
                Ok::<(), ActError>(())
            }
            .await;
            match result {
                Ok(()) if done => out
                    .done
                    .push(format!("recorded that VM {} ({}) joined", s.name, s.id)),
                Ok(()) => out.done.push(format!(
                    "running the join script of VM {} ({}) again",
                    s.name, s.id
                )),
                Err(e) => {
                    if !self.failed_on(action, Target::Server(s), e, &mut first) {
                        break;
                    }
                }
            }
        }
        first.result()
    }

    /// Notes that `action` failed on `target` with `e`: that object alone is held back
    /// (see [`backoff`]), and its first failure is its error. Whether the action goes on
    /// with the others (see [`FirstFailure::keep`]).
    fn failed_on(
        &mut self,
        action: &Action,
        target: Target<'_>,
        e: impl Into<ActError>,
        first: &mut FirstFailure,
    ) -> bool {
        let e = e.into();
        let key = backoff::key(action.kind(), target);
        tracing::warn!(object = %key, error = %e, "failed on this object; the action goes on with the others");
        self.failed.push(key);
        first.keep(e)
    }

    /// Which of `nodes` pod `pod` is on, as the API server lists it now (asked only
    /// after an action failed on the pod, so that node alone is held back); `None` when
    /// it cannot be told.
    async fn node_of(&self, nodes: &[String], pod: &PodRef) -> Option<String> {
        for n in nodes {
            let on = self.cluster.pods_on_node(n).await.ok()?;
            if on
                .iter()
                .any(|p| p.namespace == pod.namespace && p.name == pod.name)
            {
                return Some(n.clone());
            }
        }
        None
    }

    /// Takes the result of a guarded step run for one object of `action`: its refusals
    /// and its error are kept for the action's, and the object is held back alone.
    fn each_result(
        &mut self,
        action: &Action,
        target: Target<'_>,
        r: Result<(), ActError>,
        each: &mut Refusals,
        out: &mut Outcome,
    ) -> bool {
        if r.is_err() {
            self.failed.push(backoff::key(action.kind(), target));
        }
        each.add(r, out)
    }

    /// Creates `count` VMs in `group`: started, or (`warm`) left stopped in its pool.
    async fn create_in(
        &mut self,
        group: &str,
        count: u32,
        warm: bool,
        size: Option<&str>,
        out: &mut Outcome,
    ) -> Result<(), ActError> {
        let g = self
            .config
            .group(group)
            .ok_or_else(|| ActError::NoProvider(format!("group {group}")))?;
        let provider = self.clouds.for_group(group)?.clone();
        // The hosts the plan counted on, in order: each VM's zone.
        let zones = self
            .group_shapes
            .get(&g.name)
            .map(|s| placement_zones(s, count))
            .unwrap_or_default();
        for k in 0..count as usize {
            let name = new_node_name(&self.config.cluster_name, &g.name, &self.taken_names);
            self.taken_names.insert(name.clone());
            let join = self.join_credentials(g, &name).await?;
            let req = self.request(g, &name, zones.get(k).cloned(), size, join.as_ref())?;
            let server = if warm {
                provider.create_warm(&req).await?
            } else {
                provider.create_server(&req).await?
            };
            *out.created.entry(group.to_string()).or_default() += 1;
            out.done.push(format!(
                "created VM {name} ({}) in group {group}{}",
                server.id,
                if warm {
                    ", stopped, for its warm pool"
                } else {
                    ""
                }
            ));
        }
        Ok(())
    }

    /// The provider reads the VM's tags back too, and refuses one not of this cluster.
    /// Deletes the VM whose Node was just deleted, trying twice more at once on a failure:
    /// a VM left running has its kubelet register the Node again (kubelets since 1.30
    /// do), and the node would be back in service until the next removal.
    async fn delete_server_after_node(&self, s: &ServerRef) -> Result<(), ActError> {
        let mut result = self.delete_server(s).await;
        for pause in [100, 500] {
            if result.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
            result = self.delete_server(s).await;
        }
        result
    }

    async fn delete_server(&self, s: &ServerRef) -> Result<(), ActError> {
        self.clouds
            .for_group(&s.group)?
            .delete_server(&self.config.cluster_name, &s.id)
            .await?;
        Ok(())
    }
}

/// The refusals and errors of a guarded step run for each object of an action on its
/// own: all refusals are the action's one [`ActError::Refused`], unless another error
/// came first, which is then the action's error.
struct Refusals {
    refusals: Vec<guard::Refusal>,
    first: FirstFailure,
}

impl Refusals {
    fn new(earlier: Vec<guard::Refusal>) -> Self {
        Refusals {
            refusals: earlier,
            first: FirstFailure::default(),
        }
    }

    /// Keeps the refusals and error of one object's step; whether the action goes on.
    fn add(&mut self, r: Result<(), ActError>, out: &mut Outcome) -> bool {
        match r {
            Ok(()) => true,
            Err(ActError::Refused { refusals, done }) => {
                self.refusals.extend(refusals);
                out.done.extend(done);
                true
            }
            Err(e) => self.first.keep(e),
        }
    }

    fn result(self, out: &mut Outcome) -> Result<(), ActError> {
        self.first.result()?;
        if self.refusals.is_empty() {
            return Ok(());
        }
        Err(ActError::Refused {
            refusals: self.refusals,
            done: std::mem::take(&mut out.done),
        })
    }
}

/// Whether `e` says the API did not answer at all (a dropped connection, a call deadline):
/// every other object of the action would wait out the same deadline.
fn unanswered(e: &ActError) -> bool {
    match e {
        ActError::Cluster(c) => c.unanswered(),
        ActError::Cloud(CloudError::Transport { .. }) => true,
        _ => false,
    }
}

/// The hosts the next `count` VMs of a group with hypervisor hosts go to (empty without
/// hosts), as the planner counted them.
fn placement_zones(shape: &GroupShape, count: u32) -> Vec<String> {
    let Some(h) = &shape.hosts else {
        return Vec::new();
    };
    let vm = crate::model::VmSize {
        cpu_milli: shape.cpu_milli.unwrap_or(0),
        memory: shape.memory.unwrap_or(0),
    };
    h.plan(vm, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_labels_carry_the_shape_and_group_labels_win_over_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("args.sh.j2"),
            "#!/bin/sh\n{% for a in k3s_node_args %}{{ a }}\n{% endfor %}",
        )
        .expect("template");
        let yaml = format!(
            "clusterName: c\nfreeMemoryTarget: 1 GiB\ntemplatesDir: {}\nnodeGroups:\n- name: g\n  provider: openstack\n  maxSize: 1\n  openstack: {{flavor: m1.large, image: i, network: n}}\n  userData: {{template: args.sh.j2}}\n  labels: {{topology.kubernetes.io/zone: mine}}\n",
            dir.path().display()
        );
        let c = Config::parse(&yaml, dir.path()).expect("config");
        let g = &c.node_groups[0];
        let shape = GroupShape {
            instance_type: Some("m1.large".into()),
            zone: Some("az-1".into()),
            region: Some("r1".into()),
            ..GroupShape::default()
        };
        let out = render_user_data_for(&c, g, "c-g-x", Some(&shape))
            .expect("renders")
            .content;
        for label in [
            "node.kubernetes.io/instance-type=m1.large",
            "topology.kubernetes.io/region=r1",
            "topology.kubernetes.io/zone=mine",
            "nodewright.io/cluster=c",
            "nodewright.io/group=g",
        ] {
            assert!(out.contains(&format!("--node-label={label}\n")), "{out}");
        }
        assert!(!out.contains("az-1"), "{out}");
        // The kubelet sets os and arch itself.
        assert!(!out.contains("kubernetes.io/os"), "{out}");
        let plain = render_user_data(&c, g, "c-g-x").expect("renders").content;
        assert!(!plain.contains("instance-type"), "{plain}");
    }
}
