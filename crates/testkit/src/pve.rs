//! The simulated Proxmox VE and a reconciler over it, for the Proxmox integration tests.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nodewright_core::act::Clouds;
use nodewright_core::cloud::proxmox::{
    ProviderOptions, ProxmoxCredentials, ProxmoxProvider, ProxmoxSettings,
};
use nodewright_core::cluster::{kubeconfig_from_file, KubeCluster};
use nodewright_core::config::Config;
use nodewright_core::run::Reconciler;
use nodewright_sim::cluster::{SimCluster, SimClusterOptions, SimNodeSpec};
use nodewright_sim::proxmox::{SimProxmox, SimProxmoxOptions};

use super::{has_startup_taint, ready};

pub async fn sim_with(opts: SimProxmoxOptions) -> SimProxmox {
    SimProxmox::start(opts)
        .await
        .expect("simulator starts (needs ../shared/proxmox/pve-api-schema.json or PVE_API_SCHEMA)")
}

/// The cluster identity of a provider built outside a reconciler (which reads it from
/// its cluster): a kube-system namespace UID as a real cluster has one.
pub const TEST_IDENTITY: &str = "2f7c9d1e-4b6a-4c3d-9e8f-0a1b2c3d4e5f";

/// The identity a reconciler reads from `cluster`: its kube-system namespace's UID, which
/// the simulated API server gives it from its start, as a real one does.
pub async fn identity_of(cluster: &SimCluster) -> String {
    let client = cluster.kube_client().await.expect("client");
    let uid = Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .get("kube-system")
        .await
        .expect("kube-system")
        .metadata
        .uid
        .expect("kube-system has a uid");
    assert!(!uid.is_empty());
    uid
}

pub fn fast() -> ProviderOptions {
    ProviderOptions {
        poll_interval: Duration::from_millis(50),
        task_timeout: Duration::from_secs(10),
        agent_timeout: Duration::from_secs(5),
        exec_timeout: Duration::from_secs(5),
        identity: nodewright_core::cloud::ClusterIdentity::known(TEST_IDENTITY),
        ..ProviderOptions::default()
    }
}

pub fn settings(yaml: &str) -> ProxmoxSettings {
    nodewright_core::yaml::from_str(yaml).expect("settings parse")
}

pub fn token_creds(s: &SimProxmox) -> ProxmoxCredentials {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("pve.yaml");
    s.write_credentials_file(&p).expect("write");
    ProxmoxCredentials::from_file(&p).expect("credentials load")
}

pub fn provider_with(creds: ProxmoxCredentials, groups: &[(&str, &str)]) -> ProxmoxProvider {
    let groups: BTreeMap<String, ProxmoxSettings> = groups
        .iter()
        .map(|(n, y)| (n.to_string(), settings(y)))
        .collect();
    ProxmoxProvider::with_options(creds, groups, fast()).expect("provider builds")
}

pub struct Env {
    pub cluster: SimCluster,
    pub pve: SimProxmox,
    pub dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.cluster.shutdown();
    }
}

pub async fn env() -> Env {
    env_with(SimProxmoxOptions::default()).await
}

/// A simulated cluster (with a control plane) and a simulated Proxmox VE from `opts`,
/// whose booted VMs join the cluster.
pub async fn env_with(opts: SimProxmoxOptions) -> Env {
    env_with_cluster(opts, cluster_options()).await
}

/// As [`env_with`], the cluster started with `cluster_opts`.
pub async fn env_with_cluster(opts: SimProxmoxOptions, cluster_opts: SimClusterOptions) -> Env {
    let cluster = sim_cluster_with(cluster_opts).await;
    let hook = Some(cluster.vm_hook());
    env_for(cluster, SimProxmoxOptions { hook, ..opts }).await
}

/// The simulated cluster's options [`env_with`] starts it with: nodes Ready and pods
/// started quickly.
fn cluster_options() -> SimClusterOptions {
    SimClusterOptions {
        node_ready_delay: Duration::from_millis(200),
        pod_start_delay: Duration::from_millis(100),
        ..SimClusterOptions::default()
    }
}

/// A simulated cluster with a control plane, as [`env_with`] starts it.
pub async fn sim_cluster() -> SimCluster {
    sim_cluster_with(cluster_options()).await
}

/// A simulated cluster started with `opts`, with a control plane.
async fn sim_cluster_with(opts: SimClusterOptions) -> SimCluster {
    let cluster = SimCluster::start(opts).await.expect("cluster");
    cluster
        .add_node(
            SimNodeSpec::new("control-plane", 4 << 30)
                .label("node-role.kubernetes.io/control-plane", "true")
                .taint("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
        )
        .expect("control plane");
    cluster
}

/// [`env_with`] for `cluster`, started already, and a simulated Proxmox VE from `opts` as
/// given: its booted VMs go to `opts.hook` (e.g. one that sends each to the cluster its
/// user data joins, when several clusters share the Proxmox VE's storage).
pub async fn env_for(cluster: SimCluster, opts: SimProxmoxOptions) -> Env {
    let pve = sim_with(opts).await;
    let dir = tempfile::tempdir().expect("tmp");
    cluster
        .write_kubeconfig(&dir.path().join("kubeconfig"))
        .expect("kubeconfig");
    std::fs::create_dir_all(dir.path().join("templates")).expect("dir");
    std::fs::write(
        dir.path().join("templates/join.sh.j2"),
        "#!/bin/sh\nexec k3s agent --server {{ k3s_url }} {{ k3s_node_args | join(\" \") }}\n",
    )
    .expect("template");
    Env { cluster, pve, dir }
}

pub async fn reconciler(env: &Env, groups: &str) -> Reconciler {
    reconciler_with(env, groups, fast()).await
}

/// [`reconciler`] with the provider built from `options` (its identity is always the
/// cluster's, read by the loop).
pub async fn reconciler_with(env: &Env, groups: &str, options: ProviderOptions) -> Reconciler {
    let path = env.dir.path().join("autoscaler.yaml");
    std::fs::write(
        &path,
        format!(
            "clusterName: e2e\nfreeMemoryTarget: 0 B\nprovisionTimeout: 4s\nscanInterval: 200ms\nscaleUpBackoff: {{initial: 500ms, max: 1s}}\ntemplatesDir: {}\nnodeGroups:\n{groups}",
            env.dir.path().join("templates").display()
        ),
    )
    .expect("config");
    let config = Config::load(&path).expect("config loads");
    let clouds = clouds_with(&config, &env.pve, options);
    let kube = kubeconfig_from_file(&env.dir.path().join("kubeconfig"))
        .await
        .expect("kubeconfig");
    let client = kube::Client::try_from(kube).expect("client");
    Reconciler {
        config: Arc::new(config),
        cluster: Arc::new(KubeCluster::new(client)),
        clouds,
        memory: Default::default(),
        dry_run: false,
    }
}

/// One Proxmox provider with test timings ([`fast`]) for `config`'s groups, on `pve`.
pub fn clouds(config: &Config, pve: &SimProxmox) -> Clouds {
    clouds_with(config, pve, fast())
}

/// [`clouds`] with the provider built from `options`; its identity is the one the loop
/// learns from the cluster (the `Clouds`' own cell), as `run` builds it.
pub fn clouds_with(config: &Config, pve: &SimProxmox, options: ProviderOptions) -> Clouds {
    let settings: BTreeMap<String, ProxmoxSettings> = config
        .node_groups
        .iter()
        .filter_map(|g| {
            g.settings
                .of::<ProxmoxSettings>()
                .cloned()
                .map(|s| (g.name.clone(), s))
        })
        .collect();
    let mut clouds = Clouds::new();
    let options = ProviderOptions {
        identity: clouds.identity().clone(),
        ..options
    };
    let provider = Arc::new(
        ProxmoxProvider::with_options(token_creds(pve), settings, options).expect("provider"),
    );
    for g in &config.node_groups {
        clouds.add_group(&g.name, provider.clone());
    }
    clouds
}

pub fn group(name: &str, min: u32, proxmox: &str) -> String {
    format!(
        "  - name: {name}\n    provider: proxmox\n    minSize: {min}\n    maxSize: 3\n    proxmox: {proxmox}\n    userData:\n      template: join.sh.j2\n      variables: {{k3s_url: \"https://192.0.2.1:6443\"}}\n"
    )
}

pub fn ready_joined(n: &Node) -> bool {
    ready(n) && !has_startup_taint(n)
}

/// Runs cycles (errors tolerated: a failing delete is retried next cycle) until `done`.
pub async fn drive(rec: &Reconciler, timeout: Duration, done: impl Fn() -> bool) -> Vec<String> {
    let start = Instant::now();
    let mut errors = Vec::new();
    loop {
        match rec.cycle(SystemTime::now()).await {
            Err(e) => errors.push(e.to_string()),
            Ok(r) => {
                if std::env::var_os("NW_DEBUG").is_some() {
                    eprintln!("{:?} {:?}", r.decision.action, r.decision.reasons);
                    if let Ok(snap) = rec.observe().await {
                        eprintln!("servers: {:?}", snap.servers);
                    }
                }
            }
        }
        if done() {
            return errors;
        }
        assert!(
            start.elapsed() < timeout,
            "did not converge in {timeout:?}; errors: {errors:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn cordon(env: &Env, name: &str) {
    let client = env.cluster.kube_client().await.expect("client");
    let nodes: Api<Node> = Api::all(client);
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(super::cordon_patch(true)),
        )
        .await
        .expect("cordon");
}

/// One Proxmox group `pve` (maxSize 3, template `k3s-shared`) for tests through the loop;
/// `provisionTimeout: 2m`, `provisionTimeoutMax: 10m`, for tests to replace.
pub const LOOP_CONFIG: &str = r#"clusterName: prod
freeMemoryTarget: 0 B
provisionTimeout: 2m
provisionTimeoutMax: 10m
nodeGroups:
  - name: pve
    provider: proxmox
    maxSize: 3
    proxmox: {template: k3s-shared, memory: 4 GiB, cores: 2}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "task-secret-token"}
"#;
