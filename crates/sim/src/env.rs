//! A complete simulated environment: cluster + OpenStack wired together (the cloud's VM
//! events drive the cluster's kubelet), with the kubeconfig, credentials, templates and
//! an `autoscaler.yaml` written to a directory, exactly as a user would have them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use super::cluster::{SimCluster, SimClusterOptions, SimNodeSpec};
use super::faults::{FaultCounts, FaultSpec, Faults};
use super::kamatera::{SimKamatera, SimKamateraOptions};
use super::openstack::{SimOpenStack, SimOpenStackOptions};
use super::proxmox::{SchemaCheck, SimProxmox, SimProxmoxOptions, SimTls};
use super::{VmEvent, VmHook};
use crate::config::{Config, ProviderKind};
use crate::run::clouds::build_clouds_with;
use crate::run::Reconciler;
use nodewright_core::cluster::{kubeconfig_from_file, KubeCluster};

/// The shipped templates, embedded so `simulate` works from any directory.
pub const SHIPPED_TEMPLATES: &[(&str, &str)] = &[
    (
        "k3s-agent.cloud-init.yaml.j2",
        include_str!("../../../templates/k3s-agent.cloud-init.yaml.j2"),
    ),
    (
        "k3s-agent.butane.yaml.j2",
        include_str!("../../../templates/k3s-agent.butane.yaml.j2"),
    ),
    (
        "k3s-agent.join.sh.j2",
        include_str!("../../../templates/k3s-agent.join.sh.j2"),
    ),
    (
        "kubeadm-join.sh.j2",
        include_str!("../../../templates/kubeadm-join.sh.j2"),
    ),
    (
        "kubeadm-join.cloud-init.yaml.j2",
        include_str!("../../../templates/kubeadm-join.cloud-init.yaml.j2"),
    ),
];

/// Timings for the simulated pieces.
#[derive(Debug, Clone)]
pub struct SimTimings {
    pub boot_delay: Duration,
    pub node_ready_delay: Duration,
    pub pod_start_delay: Duration,
    /// See [`SimClusterOptions::pod_stop_delay`].
    pub pod_stop_delay: Duration,
    /// See [`SimClusterOptions::node_monitor_grace_period`].
    pub node_monitor_grace_period: Duration,
}

impl Default for SimTimings {
    fn default() -> Self {
        SimTimings {
            boot_delay: Duration::from_millis(500),
            node_ready_delay: Duration::from_millis(300),
            pod_start_delay: Duration::from_millis(200),
            pod_stop_delay: Duration::from_secs(2),
            node_monitor_grace_period: Duration::from_secs(50),
        }
    }
}

/// A VM event as the cloud sent it, with what the cluster looked like at that moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmLogEntry {
    pub booted: bool,
    pub name: String,
    /// Whether a Node of that name existed when the event arrived.
    pub node_existed: bool,
}

/// The fault injectors of an environment's four servers.
#[derive(Clone, Debug, Default)]
pub struct SimFaults {
    pub cluster: Faults,
    pub openstack: Faults,
    pub proxmox: Faults,
    pub kamatera: Faults,
}

impl SimFaults {
    /// One injector per server from one spec (each its own random stream).
    pub fn new(spec: &FaultSpec) -> SimFaults {
        SimFaults {
            cluster: Faults::new(spec, "kubernetes"),
            openstack: Faults::new(spec, "openstack"),
            proxmox: Faults::new(spec, "proxmox"),
            kamatera: Faults::new(spec, "kamatera"),
        }
    }

    pub fn all(&self) -> [(&'static str, &Faults); 4] {
        [
            ("kubernetes", &self.cluster),
            ("openstack", &self.openstack),
            ("proxmox", &self.proxmox),
            ("kamatera", &self.kamatera),
        ]
    }

    /// Random injection on or off on every server.
    pub fn set_enabled(&self, on: bool) {
        for (_, f) in self.all() {
            f.set_enabled(on);
        }
    }

    /// A new client process: the Retry-Afters sent to the old one no longer bind.
    pub fn forget_retry_afters(&self) {
        for (_, f) in self.all() {
            f.forget_retry_afters();
        }
    }

    /// The counts of every server added up.
    pub fn total(&self) -> FaultCounts {
        let mut t = FaultCounts::default();
        for (_, f) in self.all() {
            t.add(&f.counts());
        }
        t
    }

    /// Every request that came before its endpoint's Retry-After ran out, by server.
    pub fn early_retries(&self) -> Vec<String> {
        self.all()
            .iter()
            .flat_map(|(name, f)| {
                f.early_retries()
                    .into_iter()
                    .map(move |e| format!("{name}: {e}"))
            })
            .collect()
    }

    /// One line per server with its counts.
    pub fn report(&self) -> String {
        self.all()
            .iter()
            .map(|(name, f)| format!("{name}: {}", f.counts()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

pub struct SimEnv {
    /// Fault injection of every server (off unless started with a spec).
    pub faults: SimFaults,
    pub cluster: SimCluster,
    pub proxmox: SimProxmox,
    pub kamatera: SimKamatera,
    pub proxmox_credentials: PathBuf,
    pub kamatera_credentials: PathBuf,
    /// Every VM boot and deletion, in order (e.g. to check a Node went before its VM).
    pub vm_log: Arc<Mutex<Vec<VmLogEntry>>>,
    pub cloud: SimOpenStack,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub credentials: PathBuf,
    pub templates: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl SimEnv {
    /// Starts cluster and cloud on loopback and writes their access files into `dir`
    /// (a fresh temporary directory when `None`). The cluster starts with one unmanaged,
    /// tainted control-plane node.
    pub async fn start(dir: Option<PathBuf>, timings: SimTimings) -> anyhow::Result<SimEnv> {
        Self::start_with_faults(dir, timings, None).await
    }

    /// As [`SimEnv::start`], with `faults` injected into every server (see
    /// [`crate::faults`]).
    pub async fn start_with_faults(
        dir: Option<PathBuf>,
        timings: SimTimings,
        faults: Option<&FaultSpec>,
    ) -> anyhow::Result<SimEnv> {
        Self::start_with(dir, timings, faults, SchemaCheck::Required).await
    }

    /// As [`SimEnv::start_with_faults`]; `schema` says whether the simulated Proxmox VE
    /// may run without its API schema file (`simulate` may; tests may not).
    pub async fn start_with(
        dir: Option<PathBuf>,
        timings: SimTimings,
        faults: Option<&FaultSpec>,
        schema: SchemaCheck,
    ) -> anyhow::Result<SimEnv> {
        let faults = faults.map(SimFaults::new).unwrap_or_default();
        let (dir, tmp) = match dir {
            Some(d) => {
                std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
                // Absolute, so the files written here name each other from any directory
                // (the config's `templatesDir` is read relative to the config file).
                let d = std::path::absolute(&d)
                    .with_context(|| format!("resolving {}", d.display()))?;
                (d, None)
            }
            None => {
                let t = tempfile::tempdir().context("creating a temporary directory")?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let cluster = SimCluster::start(SimClusterOptions {
            node_ready_delay: timings.node_ready_delay,
            pod_start_delay: timings.pod_start_delay,
            pod_stop_delay: timings.pod_stop_delay,
            node_monitor_grace_period: timings.node_monitor_grace_period,
            faults: faults.cluster.clone(),
            // HTTPS, so kubectl sends the admin token of the kubeconfig written below.
            tls: true,
            ..SimClusterOptions::default()
        })
        .await
        .context("starting the simulated cluster")?;
        cluster
            .add_node(
                SimNodeSpec::new("control-plane", 4 << 30)
                    .label("node-role.kubernetes.io/control-plane", "true")
                    .taint("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
            )
            .map_err(|e| anyhow::anyhow!("adding the control-plane node: {e:?}"))?;
        // nodewright's own namespace, as the shipped manifests create it (enforcing the
        // restricted Pod Security Standard): the lease, the status ConfigMap and the
        // image-puller pods live there.
        cluster
            .add_namespace_labelled(
                crate::config::DEFAULT_NAMESPACE,
                &[
                    ("pod-security.kubernetes.io/enforce", "restricted"),
                    ("pod-security.kubernetes.io/enforce-version", "latest"),
                ],
            )
            .map_err(|e| anyhow::anyhow!("adding the nodewright namespace: {e:?}"))?;
        let vm_log: Arc<Mutex<Vec<VmLogEntry>>> = Arc::default();
        let hook: VmHook = {
            let (cluster, log, kubelet) = (cluster.clone(), vm_log.clone(), cluster.vm_hook());
            Arc::new(move |event: VmEvent| {
                let (booted, name) = match &event {
                    VmEvent::Booted { name, .. } => (true, name.clone()),
                    VmEvent::Deleted { name } | VmEvent::Stopped { name } => (false, name.clone()),
                };
                let node_existed = cluster.node(&name).is_some();
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(VmLogEntry {
                        booted,
                        name,
                        node_existed,
                    });
                kubelet(event)
            })
        };
        let cloud = SimOpenStack::start(SimOpenStackOptions {
            boot_delay: timings.boot_delay,
            hook: Some(hook.clone()),
            faults: faults.openstack.clone(),
            ..SimOpenStackOptions::default()
        })
        .await
        .context("starting the simulated OpenStack")?;
        // HTTPS with a self-signed certificate, as a real host serves (the credentials
        // file pins it; `proxmox-ca.pem` is for other clients).
        let tls = SimTls::self_signed().context("making the Proxmox VE certificate")?;
        std::fs::write(dir.join("proxmox-ca.pem"), &tls.cert_chain_pem)?;
        let proxmox = SimProxmox::start(SimProxmoxOptions {
            schema,
            tls: Some(tls),
            boot_delay: timings.boot_delay,
            hook: Some(hook.clone()),
            faults: faults.proxmox.clone(),
            ..SimProxmoxOptions::default()
        })
        .await
        .context("starting the simulated Proxmox VE")?;
        let kamatera = SimKamatera::start(SimKamateraOptions {
            hook: Some(hook),
            faults: faults.kamatera.clone(),
            ..SimKamateraOptions::default()
        })
        .await
        .context("starting the simulated Kamatera API")?;

        let kubeconfig = dir.join("kubeconfig");
        cluster.write_kubeconfig(&kubeconfig)?;
        let credentials = dir.join("openstack.yaml");
        cloud.write_credentials_file(&credentials)?;
        let proxmox_credentials = dir.join("proxmox.yaml");
        proxmox.write_credentials_file(&proxmox_credentials)?;
        let kamatera_credentials = dir.join("kamatera.yaml");
        kamatera.write_credentials_file(&kamatera_credentials)?;
        let templates = dir.join("templates");
        std::fs::create_dir_all(&templates)?;
        for (name, text) in SHIPPED_TEMPLATES {
            std::fs::write(templates.join(name), text)?;
        }
        Ok(SimEnv {
            faults,
            cluster,
            proxmox,
            kamatera,
            proxmox_credentials,
            kamatera_credentials,
            vm_log,
            cloud,
            dir,
            kubeconfig,
            credentials,
            templates,
            _tmp: tmp,
        })
    }

    /// Writes `autoscaler.yaml` with `body` (everything but `templatesDir`) and loads it.
    pub fn write_config(&self, body: &str) -> anyhow::Result<(PathBuf, Config)> {
        let path = self.dir.join("autoscaler.yaml");
        let text = format!("templatesDir: {}\n{body}", self.templates.display());
        std::fs::write(&path, text)?;
        let config = Config::load(&path)?;
        Ok((path, config))
    }

    /// Moves the clocks of the simulated API server and OpenStack `by` ahead of the wall
    /// clock, for a test that lives a day in a minute: a loop cycling at `now + by` then
    /// agrees with them on VM ages and token expirations. Proxmox and Kamatera keep the
    /// wall clock.
    pub fn advance_clock(&self, by: Duration) {
        self.cluster.advance_clock(by);
        self.cloud.advance_clock(by);
    }

    /// A reconciler talking to this environment over HTTP, built the way `run` builds it
    /// but without reading the process environment.
    pub async fn reconciler(&self, config: Config) -> anyhow::Result<Reconciler> {
        let kube = kubeconfig_from_file(&self.kubeconfig).await?;
        let client = nodewright_core::cluster::client_from_config(kube)?;
        let clouds = build_clouds_with(&config, |kind| Some(self.credentials_for(kind)))?;
        Ok(Reconciler {
            config: Arc::new(config),
            cluster: Arc::new(KubeCluster::new(client)),
            clouds,
            memory: Default::default(),
            dry_run: false,
        })
    }

    /// The credentials file of a provider's simulator.
    pub fn credentials_for(&self, kind: ProviderKind) -> PathBuf {
        match kind {
            ProviderKind::Openstack => self.credentials.clone(),
            ProviderKind::Proxmox => self.proxmox_credentials.clone(),
            ProviderKind::Kamatera => self.kamatera_credentials.clone(),
        }
    }

    /// Environment variables for a separately started `nodewright` process.
    pub fn env_vars(&self, config: &Path) -> Vec<(&'static str, PathBuf)> {
        let mut vars = vec![
            (crate::config::ENV_CONFIG_FILE, config.to_path_buf()),
            (crate::config::ENV_KUBECONFIG_FILE, self.kubeconfig.clone()),
        ];
        for &kind in ProviderKind::ALL {
            vars.push((kind.credentials_env(), self.credentials_for(kind)));
        }
        vars
    }
}

impl Drop for SimEnv {
    /// The cloud's hook holds a cluster handle, so stop the cluster explicitly.
    fn drop(&mut self) {
        self.cluster.shutdown();
    }
}
