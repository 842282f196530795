//! A simulated Kubernetes cluster: an in-process API server on 127.0.0.1 speaking the
//! real wire format (JSON only), with a scheduler, kubelets driven by simulated VMs,
//! and the few controllers e2e tests and `nodewright simulate` need.
//!
//! Lifetime: [`SimCluster`] is a cheap handle. The server and the background loops run
//! until [`SimCluster::shutdown`] is called or the last handle is dropped, whichever
//! comes first; open watches end then too.
//!
//! Layout: `server` (routes), `request` (what a request is, as handlers see it),
//! `routing` (URL to resource and verb), `query` (query parameters as the real server
//! reads them), `verbs` (reads and writes), `list` and `watches` (resourceVersion
//! semantics, paging, bookmarks), `render` (JSON, Table and metadata output),
//! `validation` (fieldValidation), `openapi` (the documents kubectl fetches), `scale`
//! (the scale subresource), `store` (objects, resourceVersion, watch history),
//! `resources`/`discovery` (what is served), `patch`, `selectors`, `table` (kubectl's
//! Table output), `eviction` (PDBs), `graceful` (graceful deletion, Terminating pods
//! and finalizers), `scheduler`, `kubelet` and `userdata` (node
//! registration from VM user data), `controllers` (ReplicaSet, DaemonSet, GC,
//! disruption), `workloads` (Deployment, Job), `owners` and `dirty` (what the
//! controllers share), `control` (the in-process API for tests), `bulk` (seeding large
//! clusters).

mod admission;
mod authn;
mod bootstrap;
mod bulk;
mod control;
mod controllers;
mod dirty;
mod discovery;
mod eviction;
mod graceful;
mod kubelet;
mod list;
mod media;
mod meta;
mod nodelifecycle;
mod objects;
mod openapi;
mod owners;
mod patch;
mod podsecurity;
mod query;
pub mod rbac;
pub mod registry;
mod render;
mod request;
mod resources;
mod routing;
mod scale;
mod scheduler;
mod selectors;
mod server;
mod ssa;
mod status;
mod storage;
mod store;
mod sysevents;
mod table;
mod tainteviction;
mod tls;
mod userdata;
mod validation;
mod verbs;
mod watches;
mod workloads;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

pub use bulk::SyntheticCluster;
pub use control::PdbBudget;
pub use kubelet::{ANNOTATION_RUN_FOR, ANNOTATION_STOP_AFTER};
pub use objects::{SimNodeSpec, SimPodTemplate};
pub use request::ApiCall;
pub use status::ApiError;

use resources::NAMESPACES;
use store::Store;

/// Timings and identity of the simulated cluster.
#[derive(Debug, Clone)]
pub struct SimClusterOptions {
    /// How often the scheduler looks at pending pods.
    pub scheduler_interval: Duration,
    /// How often kubelets and controllers run.
    pub controller_interval: Duration,
    /// From a VM's `Booted` event to its Node object appearing.
    pub node_register_delay: Duration,
    /// From registration to the Node's Ready condition turning True.
    pub node_ready_delay: Duration,
    /// From a node's kubelet going silent (its VM stopped or deleted) to the node
    /// lifecycle controller setting the Node's conditions Unknown and its pods not Ready:
    /// kube-controller-manager's `--node-monitor-grace-period` (50 s since Kubernetes
    /// 1.32, 40 s before).
    pub node_monitor_grace_period: Duration,
    /// From a pod being bound to a Ready node to it Running (image pull + start).
    pub pod_start_delay: Duration,
    /// From a running pod's deletion to its containers having stopped, unless its grace
    /// period is shorter (then it is killed at its end); a pod's own
    /// [`ANNOTATION_STOP_AFTER`] overrides it. The pod is Terminating meanwhile.
    pub pod_stop_delay: Duration,
    /// Memory held back from allocatable on VM-booted nodes (bytes).
    pub memory_reserve: u64,
    /// Reported by `/version` at start (see [`SimCluster::upgrade_control_plane`]), and
    /// as kubeletVersion by nodes whose user data names no version.
    pub server_version: String,
    /// `status.images` of every node at registration.
    pub base_images: Vec<String>,
    /// Changes kept for watches to resume from; older ones answer 410 Expired.
    pub watch_history: usize,
    /// Idle time between BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// The admin's bearer token, written into kubeconfigs (user `kubernetes-admin` in
    /// `system:masters`). Other tokens are those the TokenRequest API issued; any other
    /// token is refused with 401.
    pub token: String,
    /// Refuse requests without a bearer token with 401, as a real API server with
    /// `--anonymous-auth=false` does (on by default). Off, such a request is served as
    /// the old insecure port served it (as `system:masters`).
    pub require_token: bool,
    /// Serve HTTPS with a fresh cluster CA, which the kubeconfigs carry. kubectl sends
    /// its bearer token only over HTTPS, so a kubectl test needs it; `SimEnv` (and so
    /// `simulate --serve`) turns it on. Off by default (plain HTTP is cheaper in tests).
    pub tls: bool,
    /// Injected faults (none by default), and 409 Conflicts on node patches.
    pub faults: crate::faults::Faults,
    /// API requests kept for [`SimCluster::calls`]; older ones are forgotten, so a
    /// long-running `simulate --serve` holds bounded memory.
    pub calls_kept: usize,
}

impl Default for SimClusterOptions {
    fn default() -> Self {
        SimClusterOptions {
            scheduler_interval: Duration::from_millis(50),
            controller_interval: Duration::from_millis(50),
            node_register_delay: Duration::ZERO,
            node_ready_delay: Duration::from_millis(200),
            node_monitor_grace_period: Duration::from_secs(50),
            pod_start_delay: Duration::from_millis(100),
            pod_stop_delay: Duration::from_secs(2),
            memory_reserve: 256 << 20,
            server_version: "v1.35.0".into(),
            base_images: Vec::new(),
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(5),
            token: "nodewright-sim-token".into(),
            require_token: true,
            tls: false,
            faults: crate::faults::Faults::default(),
            calls_kept: 50_000,
        }
    }
}

/// Shared state behind every handle, the server and the background loops.
pub(crate) struct Inner {
    opts: SimClusterOptions,
    store: Store,
    calls: Mutex<VecDeque<ApiCall>>,
    tokens: authn::Tokens,
    kubelet: Mutex<kubelet::KubeletState>,
    taint_eviction: Mutex<tainteviction::TaintEvictionState>,
    controllers: Mutex<dirty::ControllerState>,
    /// The scheduler's last round left pods it could not place.
    pods_waiting: AtomicBool,
    shutdown: watch::Receiver<bool>,
    addr: SocketAddr,
    /// The CA and serving certificate when serving HTTPS.
    tls: Option<tls::ClusterTls>,
    runtime: tokio::runtime::Handle,
    /// The control plane's `gitVersion` now: `opts.server_version` until an upgrade.
    server_version: Mutex<String>,
    /// How far the server's clock is ahead of the wall clock ([`SimCluster::advance_clock`]).
    clock_ahead: Mutex<std::time::Duration>,
}

impl Inner {
    /// The server's clock: the wall clock, moved ahead by [`SimCluster::advance_clock`].
    fn now(&self) -> k8s_openapi::jiff::Timestamp {
        let ahead = *self.clock_ahead.lock().unwrap_or_else(|p| p.into_inner());
        let at = std::time::SystemTime::now() + ahead;
        k8s_openapi::jiff::Timestamp::try_from(at)
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
    }

    fn record(&self, call: ApiCall) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        while calls.len() >= self.opts.calls_kept.max(1) {
            calls.pop_front();
        }
        calls.push_back(call);
    }

    fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// What `/version` reports now.
    fn server_version(&self) -> String {
        self.server_version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Stops everything when the last [`SimCluster`] handle goes away.
struct StopOnDrop(watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// Handle to a running simulated cluster. Clone freely.
#[derive(Clone)]
pub struct SimCluster {
    inner: Arc<Inner>,
    stop: Arc<StopOnDrop>,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("url", &self.url())
            .finish()
    }
}

impl SimCluster {
    /// Binds 127.0.0.1 on a free port and starts the server, scheduler, kubelets and
    /// controllers on the current tokio runtime. Namespaces default, kube-system,
    /// kube-public and kube-node-lease exist from the start.
    pub async fn start(opts: SimClusterOptions) -> std::io::Result<SimCluster> {
        let (listener, addr) = crate::serve::bind_local().await?;
        let tls = if opts.tls {
            Some(tls::ClusterTls::generate()?)
        } else {
            None
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let inner = Arc::new(Inner {
            tls,
            server_version: Mutex::new(opts.server_version.clone()),
            store: Store::new(opts.watch_history),
            opts,
            calls: Mutex::new(VecDeque::new()),
            tokens: authn::Tokens::default(),
            kubelet: Mutex::new(kubelet::KubeletState::default()),
            taint_eviction: Mutex::new(tainteviction::TaintEvictionState::default()),
            controllers: Mutex::new(dirty::ControllerState::default()),
            pods_waiting: AtomicBool::new(false),
            shutdown: stop_rx,
            addr,
            runtime: tokio::runtime::Handle::current(),
            clock_ahead: Mutex::new(std::time::Duration::ZERO),
        });
        {
            let mut txn = inner.store.lock();
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
                    "labels": {"kubernetes.io/metadata.name": ns}},
                    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
                txn.create(&NAMESPACES, obj)
                    .map_err(std::io::Error::other)?;
            }
            for (res, obj) in rbac::bootstrap_objects() {
                txn.create(res, obj).map_err(std::io::Error::other)?;
            }
            // kubeadm's cluster-info, with the address and CA clients verify it by.
            if let Some(t) = &inner.tls {
                let url = format!("https://{addr}");
                txn.create(
                    &resources::CONFIGMAPS,
                    bootstrap::cluster_info(&url, &t.ca_pem),
                )
                .map_err(std::io::Error::other)?;
            }
            // k3s's default StorageClass, as a fresh k3s cluster has it.
            let class = resources::normalize::normalize_class(storage::local_path_class())
                .map_err(std::io::Error::other)?;
            txn.create(&resources::STORAGECLASSES, class)
                .map_err(std::io::Error::other)?;
        }
        let app = server::router(inner.clone())
            .layer(axum::middleware::from_fn_with_state(
                inner.clone(),
                authn::layer,
            ))
            .layer(axum::middleware::from_fn_with_state(
                (
                    inner.opts.faults.clone(),
                    crate::faults::Dialect::Kubernetes,
                ),
                crate::faults::inject,
            ))
            .into_make_service_with_connect_info::<crate::faults::ConnKill>();
        let stop = inner.shutdown.clone();
        match &inner.tls {
            None => serve(listener, app, stop),
            Some(t) => {
                let listener = crate::proxmox::tls::TlsListener {
                    tcp: listener,
                    acceptor: crate::proxmox::tls::acceptor(&t.server)?,
                };
                serve(listener, app, stop)
            }
        }
        spawn_loop(&inner, inner.opts.scheduler_interval, |i, changes| {
            scheduler::pass(i, changes);
            None
        });
        spawn_loop(&inner, inner.opts.controller_interval, |i, changes| {
            controllers::pass(i, changes);
            let eviction = nodelifecycle::pass(i, changes);
            let kubelet = kubelet::pass(i, changes);
            match (eviction, kubelet) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        });
        Ok(SimCluster {
            inner,
            stop: Arc::new(StopOnDrop(stop_tx)),
        })
    }

    /// Moves the server's clock `by` ahead of the wall clock, for what it checks against
    /// time itself (a bootstrap token's expiration); pods, nodes and leases keep the
    /// wall clock.
    pub fn advance_clock(&self, by: std::time::Duration) {
        *self
            .inner
            .clock_ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner()) += by;
    }

    /// Stops the server (open watches end) and the background loops.
    pub fn shutdown(&self) {
        self.stop.0.send_replace(true);
    }

    /// `http://127.0.0.1:PORT`, or `https://` when serving HTTPS.
    pub fn url(&self) -> String {
        let scheme = if self.inner.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.inner.addr)
    }

    /// The cluster CA's certificate (PEM) when serving HTTPS, for clients to trust.
    pub fn ca_pem(&self) -> Option<&str> {
        self.inner.tls.as_ref().map(|t| t.ca_pem.as_str())
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    pub fn options(&self) -> &SimClusterOptions {
        &self.inner.opts
    }

    /// The control plane's version now (`/version`'s `gitVersion`).
    pub fn server_version(&self) -> String {
        self.inner.server_version()
    }

    /// Upgrades the control plane to `git_version` (e.g. `v1.32.1+k3s1`), as an admin
    /// upgrading the servers does: `/version` reports it from now on, nodes already
    /// registered keep the kubelet they run, and a new node runs the version its user
    /// data installs.
    pub fn upgrade_control_plane(&self, git_version: &str) {
        *self
            .inner
            .server_version
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = git_version.to_string();
    }

    /// A kubeconfig (cluster `nodewright-sim`, the admin's bearer token, the cluster CA
    /// when serving HTTPS, current context set) accepted by kube-rs and kubectl.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: nodewright-sim\n  cluster:\n    server: {url}\n{ca}\
             users:\n- name: nodewright-sim\n  user:\n    token: {token}\n\
             contexts:\n- name: nodewright-sim\n  context:\n    cluster: nodewright-sim\n    user: nodewright-sim\n    namespace: default\n\
             current-context: nodewright-sim\npreferences: {{}}\n",
            url = self.url(),
            ca = self
                .ca_pem()
                .map(|pem| format!(
                    "    certificate-authority-data: {}\n",
                    base64::engine::general_purpose::STANDARD.encode(pem)
                ))
                .unwrap_or_default(),
            token = self.inner.opts.token,
        )
    }

    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// A kubeconfig like [`Self::kubeconfig_yaml`] that authenticates with `token`
    /// instead of the admin's (e.g. one from [`Self::service_account_token`]).
    pub fn kubeconfig_yaml_with_token(&self, token: &str) -> String {
        self.kubeconfig_yaml().replace(
            &format!("token: {}\n", self.inner.opts.token),
            &format!("token: {token}\n"),
        )
    }

    /// A one-hour token for ServiceAccount `namespace/name`, as `kubectl create token`
    /// gets one; requests with it are authorized by the RBAC objects in the cluster.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> Result<String, ApiError> {
        authn::issue(&self.inner, namespace, name, 3600).map(|(t, _)| t)
    }

    /// The kube-rs configuration the generated kubeconfig yields.
    ///
    /// Note kube's `default_retry` (on by default) retries 429 answers, including
    /// evictions refused by a PodDisruptionBudget, with exponential backoff for
    /// minutes; tests that expect such refusals should turn it off.
    pub async fn kube_config(&self) -> anyhow::Result<kube::Config> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())?;
        let options = kube::config::KubeConfigOptions::default();
        Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?)
    }

    /// A kube-rs client for this cluster, built from [`Self::kube_config`].
    pub async fn kube_client(&self) -> anyhow::Result<kube::Client> {
        Ok(kube::Client::try_from(self.kube_config().await?)?)
    }

    /// The hook a simulated cloud calls as its VMs boot and go away.
    pub fn vm_hook(&self) -> crate::VmHook {
        let weak = Arc::downgrade(&self.inner);
        Arc::new(move |event| {
            if let Some(inner) = weak.upgrade().filter(|i| !i.is_shut_down()) {
                kubelet::on_vm_event(&inner, event);
            }
        })
    }

    /// VMs whose simulated kubelet refused to start (a label it may not set, as a
    /// real kubelet refuses under NodeRestriction), with the kubelet's error: their
    /// node never registers.
    pub fn kubelet_refusals(&self) -> std::collections::BTreeMap<String, String> {
        kubelet::lock(&self.inner.kubelet).refused()
    }

    /// The API requests so far, in order: the last [`SimClusterOptions::calls_kept`].
    pub fn calls(&self) -> Vec<ApiCall> {
        self.inner
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    pub fn clear_calls(&self) {
        self.inner
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Serves `app` on `listener` (each connection killable by injected faults) until `stop`.
fn serve<L>(
    listener: L,
    app: axum::extract::connect_info::IntoMakeServiceWithConnectInfo<
        axum::Router,
        crate::faults::ConnKill,
    >,
    mut stop: watch::Receiver<bool>,
) where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    tokio::spawn(async move {
        let signal = async move { stopped(&mut stop).await };
        let listener = crate::faults::KillableListener(listener);
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(signal)
            .await
        {
            tracing::warn!(error = %e, "simulated API server stopped");
        }
    });
}

/// Resolves once shutdown was requested (or every handle is gone).
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// What a background loop runs: given the writes since its last run (None when they
/// are unknown: the first run, or the history was cut), it returns when it must run
/// again even if nothing is written.
type Pass = fn(&Inner, Option<&[Arc<store::Change>]>) -> Option<Instant>;

/// Runs `pass` every `every` until shutdown, but only when something was written since
/// its last run or when the time it returned has come: an idle large cluster costs
/// nothing, and a pass sees what changed.
fn spawn_loop(inner: &Arc<Inner>, every: Duration, pass: Pass) {
    let inner = inner.clone();
    tokio::spawn(async move {
        let mut stop = inner.shutdown.clone();
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen_rv = None;
        let mut wake: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = stopped(&mut stop) => return,
                _ = tick.tick() => {
                    let (rv, changes) = {
                        let txn = inner.store.lock();
                        let changes = seen_rv.and_then(|s| txn.changes_after(s).ok());
                        (txn.current_rv(), changes)
                    };
                    if seen_rv == Some(rv) && wake.is_none_or(|w| Instant::now() < w) {
                        continue;
                    }
                    // Read before the pass: its own writes come in the next one.
                    seen_rv = Some(rv);
                    wake = pass(&inner, changes.as_deref());
                }
            }
        }
    });
}
