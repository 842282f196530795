//! The RBAC in deploy/kustomize/base is exactly what the binary needs: the ServiceAccount
//! and RBAC manifests are applied with `kubectl apply` to the simulated cluster, whose API
//! server enforces them, and the real `nodewright run`, started as the Deployment starts
//! it (leader election, status ConfigMap, events) with a token of that ServiceAccount,
//! goes through a representative scenario (scale up, image pulls, an old node replaced:
//! cordon, drain through the Eviction API, node and VM deleted). Every API request the
//! simulated API server recorded must be allowed by the roles bound to the ServiceAccount
//! (a), while every verb those roles grant must have been used by some request (b),
//! except the ones listed in [`NOT_EXERCISED`] with the reason. With one rule taken out,
//! nodewright reports the 403 naming what it may not do.
//!
//! Evaluation is the simulated API server's own (`nodewright::sim::cluster::rbac`).
//! Discovery requests (non-resource URLs, allowed to every authenticated user by default)
//! are not checked by (a).

use nodewright_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, repo, Killed};
use k8s_openapi::api::apps::v1::Deployment;
use nodewright::sim::cluster::rbac::{call_resource, grant_allows, Grant, Policy, UserInfo};
use nodewright::sim::cluster::{ApiCall, PdbBudget, SimPodTemplate};
use nodewright::sim::env::{SimEnv, SimTimings};
use serde::Deserialize;
use serde_json::Value;

const GI: u64 = 1 << 30;

/// Granted verbs the representative run does not use, each with the reason it is granted
/// anyway: (role, apiGroup, resource, verb, reason). A verb listed here that the run does
/// use fails the test too, so this list stays true.
const NOT_EXERCISED: &[(&str, &str, &str, &str, &str)] = &[];

fn base_docs(file: &str) -> Vec<Value> {
    let path = repo().join("deploy/kustomize/base").join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|de| Value::deserialize(de).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The rules bound to ServiceAccount `namespace/name` by the base's bindings.
fn grants_for(sa_namespace: &str, sa_name: &str) -> Vec<Grant> {
    let docs = base_docs("rbac.yaml");
    Policy::from_objects(&docs).grants(&UserInfo::service_account(sa_namespace, sa_name))
}

/// Non-resource discovery URLs: /version, /api, /api/v1, /apis, /apis/G, /apis/G/V,
/// /openapi/...
fn is_discovery(call: &ApiCall) -> bool {
    if !call.resource.is_empty() {
        return false;
    }
    let segs: Vec<&str> = call.path.trim_matches('/').split('/').collect();
    matches!(
        segs.as_slice(),
        ["version"] | ["api"] | ["api", _] | ["apis"] | ["apis", _] | ["apis", _, _]
    ) || segs.first() == Some(&"openapi")
}

fn describe(call: &ApiCall) -> String {
    format!(
        "{} {} (group `{}`, namespace {:?}, name {:?}) {}",
        call.verb,
        call_resource(call),
        call.group,
        call.namespace,
        call.name,
        call.path
    )
}

/// (a): requests no grant allows, and requests for resources the simulated cluster does
/// not serve (recorded as non-resource URLs, so they cannot be judged).
fn disallowed(grants: &[Grant], calls: &[ApiCall]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for c in calls {
        if is_discovery(c) {
            continue;
        }
        if c.resource.is_empty() {
            out.insert(format!(
                "{} is not served by the simulated cluster (add it there so it can be checked)",
                c.path
            ));
        } else if !grants.iter().any(|g| grant_allows(g, c)) {
            out.insert(describe(c));
        }
    }
    out.into_iter().collect()
}

/// One granted (role, group, resource, verb).
type Unit = (String, String, String, String);

/// (b): every granted unit, with whether some request used it.
fn exercised(grants: &[Grant], calls: &[ApiCall]) -> BTreeMap<Unit, bool> {
    let mut out = BTreeMap::new();
    for g in grants {
        for group in g.rule.api_groups.iter().flatten() {
            for resource in g.rule.resources.iter().flatten() {
                for verb in &g.rule.verbs {
                    let used = calls.iter().any(|c| {
                        &c.group == group
                            && &call_resource(c) == resource
                            && &c.verb == verb
                            && grant_allows(g, c)
                    });
                    let e = out
                        .entry((
                            g.role.clone(),
                            group.clone(),
                            resource.clone(),
                            verb.clone(),
                        ))
                        .or_insert(false);
                    *e |= used;
                }
            }
        }
    }
    out
}

/// Both checks; returns the problems, empty when the RBAC is exactly right.
fn rbac_problems(grants: &[Grant], calls: &[ApiCall]) -> Vec<String> {
    let mut problems: Vec<String> = disallowed(grants, calls)
        .into_iter()
        .map(|c| format!("(a) not allowed by deploy/kustomize/base/rbac.yaml: {c}"))
        .collect();
    let units = exercised(grants, calls);
    for ((role, group, resource, verb), used) in &units {
        let exempt = NOT_EXERCISED
            .iter()
            .find(|(r, g, res, v, _)| r == role && g == group && res == resource && v == verb);
        match (used, exempt) {
            (false, None) => problems.push(format!(
                "(b) granted but never used: {role} {verb} {resource} (group `{group}`); drop it or list it in NOT_EXERCISED with the reason"
            )),
            (true, Some(_)) => problems.push(format!(
                "(b) {role} {verb} {resource} (group `{group}`) is used now: remove it from NOT_EXERCISED"
            )),
            _ => {}
        }
    }
    for (role, group, resource, verb, _) in NOT_EXERCISED {
        let key = (
            role.to_string(),
            group.to_string(),
            resource.to_string(),
            verb.to_string(),
        );
        if !units.contains_key(&key) {
            problems.push(format!(
                "NOT_EXERCISED lists {role} {verb} {resource}, which the RBAC does not grant"
            ));
        }
    }
    problems
}

fn call(verb: &str, group: &str, resource: &str, ns: Option<&str>, name: Option<&str>) -> ApiCall {
    let (resource, sub) = match resource.split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (resource.to_string(), None),
    };
    ApiCall {
        verb: verb.into(),
        group: group.into(),
        version: "v1".into(),
        resource,
        subresource: sub,
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
        path: "/synthetic".into(),
    }
}

/// The evaluator on hand-made requests, independent of the binary.
#[test]
fn rbac_evaluation_honours_namespaces_subresources_and_resource_names() {
    let grants = grants_for("nodewright", "nodewright");
    let ok = |c: &ApiCall| grants.iter().any(|g| grant_allows(g, c));
    // Cluster-wide reads and node writes.
    assert!(ok(&call("list", "", "nodes", None, None)));
    assert!(ok(&call("patch", "", "nodes", None, Some("n1"))));
    assert!(ok(&call("delete", "", "nodes", None, Some("n1"))));
    assert!(!ok(&call("update", "", "nodes", None, Some("n1"))));
    assert!(ok(&call("list", "", "pods", None, None)));
    // Eviction is a subresource; it does not grant deleting pods.
    assert!(ok(&call(
        "create",
        "",
        "pods/eviction",
        Some("default"),
        Some("p")
    )));
    assert!(!ok(&call("delete", "", "pods", Some("default"), Some("p"))));
    assert!(!ok(&call("create", "", "pods", Some("default"), None)));
    // Image pullers only in nodewright's own namespace.
    assert!(ok(&call("create", "", "pods", Some("nodewright"), None)));
    assert!(ok(&call(
        "delete",
        "",
        "pods",
        Some("nodewright"),
        Some("x")
    )));
    // Leases and the status ConfigMap: create anywhere in the namespace, the rest by name.
    assert!(ok(&call(
        "create",
        "coordination.k8s.io",
        "leases",
        Some("nodewright"),
        None
    )));
    assert!(ok(&call(
        "get",
        "coordination.k8s.io",
        "leases",
        Some("nodewright"),
        Some("nodewright")
    )));
    assert!(ok(&call(
        "update",
        "coordination.k8s.io",
        "leases",
        Some("nodewright"),
        Some("nodewright")
    )));
    assert!(!ok(&call(
        "update",
        "coordination.k8s.io",
        "leases",
        Some("nodewright"),
        Some("other")
    )));
    assert!(!ok(&call(
        "get",
        "coordination.k8s.io",
        "leases",
        Some("kube-system"),
        Some("nodewright")
    )));
    assert!(!ok(&call(
        "list",
        "coordination.k8s.io",
        "leases",
        Some("nodewright"),
        None
    )));
    assert!(ok(&call(
        "patch",
        "",
        "configmaps",
        Some("nodewright"),
        Some("nodewright-status")
    )));
    assert!(!ok(&call(
        "patch",
        "",
        "configmaps",
        Some("nodewright"),
        Some("nodewright-config")
    )));
    // Read back every cycle for the disruption records; no other ConfigMap.
    assert!(ok(&call(
        "get",
        "",
        "configmaps",
        Some("nodewright"),
        Some("nodewright-status")
    )));
    assert!(!ok(&call(
        "get",
        "",
        "configmaps",
        Some("nodewright"),
        Some("nodewright-config")
    )));
    assert!(!ok(&call("list", "", "secrets", Some("nodewright"), None)));
    // Another ServiceAccount gets nothing.
    assert!(grants_for("nodewright", "someone-else").is_empty());

    // (a) and (b) on a synthetic run.
    let calls = vec![
        call("list", "", "nodes", None, None),
        call("list", "", "secrets", Some("nodewright"), None),
    ];
    let problems = rbac_problems(&grants, &calls);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("(a)") && p.contains("secrets")),
        "{problems:#?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("never used") && p.contains("patch nodes")),
        "{problems:#?}"
    );
    assert!(
        !problems.iter().any(|p| p.contains("list nodes")),
        "{problems:#?}"
    );
    let unserved = ApiCall {
        path: "/apis/storage.k8s.io/v1/volumeattachments".into(),
        ..call("get", "", "", None, None)
    };
    assert!(!is_discovery(&unserved));
    assert_eq!(disallowed(&grants, &[unserved]).len(), 1);
    let discovery = ApiCall {
        path: "/apis/coordination.k8s.io/v1".into(),
        ..call("get", "", "", None, None)
    };
    assert!(disallowed(&grants, &[discovery]).is_empty());
}

/// The image puller could create pods in `kube-system`, which amounts to cluster-admin
/// (a pod there may run as any of its ServiceAccounts). The shipped RBAC lets it create
/// and delete pods in nodewright's own namespace only, and grants nothing in kube-system.
#[test]
fn image_puller_rbac_is_confined_to_its_own_namespace_and_grants_nothing_in_kube_system() {
    let grants = grants_for("nodewright", "nodewright");
    let ok = |c: &ApiCall| grants.iter().any(|g| grant_allows(g, c));
    let in_kube_system: Vec<&Grant> = grants
        .iter()
        .filter(|g| g.namespace.as_deref() == Some("kube-system"))
        .collect();
    assert!(in_kube_system.is_empty(), "{in_kube_system:#?}");
    for verb in ["create", "delete", "get", "update", "patch"] {
        for resource in ["pods", "serviceaccounts", "secrets", "pods/exec"] {
            for ns in ["kube-system", "default"] {
                let name = (verb != "create").then_some("x");
                assert!(
                    !ok(&call(verb, "", resource, Some(ns), name)),
                    "{verb} {resource} in {ns} is granted"
                );
            }
        }
    }
    assert!(ok(&call("create", "", "pods", Some("nodewright"), None)));
    assert!(ok(&call(
        "delete",
        "",
        "pods",
        Some("nodewright"),
        Some("p")
    )));
    // Nothing else on pods there (the cluster-wide list and watch aside): no get, exec or
    // changing someone else's pod.
    for verb in ["get", "update", "patch"] {
        assert!(
            !ok(&call(verb, "", "pods", Some("nodewright"), Some("p"))),
            "{verb} pods in nodewright is granted"
        );
    }
    assert!(!ok(&call(
        "create",
        "",
        "pods/exec",
        Some("nodewright"),
        Some("p")
    )));
    // The config's default follows the Deployment's namespace (POD_NAMESPACE).
    let shipped = nodewright::config::Config::load(
        &repo().join("deploy/kustomize/base/files/config/autoscaler.yaml"),
    )
    .expect("shipped config loads");
    let expected = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "nodewright".into());
    assert_eq!(shipped.image_puller.namespace, expected);
}

// ---------------------------------------------------------------------------------
// The representative run

fn config() -> String {
    r#"clusterName: rbac
freeMemoryTarget: 1 GiB
provisionTimeout: 30s
scanInterval: 200ms
oldNodeAgeLimit: 10s
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 2
    maxSize: 5
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "rbac-token"}
"#
    .to_string()
}

/// The Deployment's own `run` flags for the Lease and the status ConfigMap, so the run
/// uses the names the Role grants.
fn deployment_flag(flag: &str) -> String {
    let doc = base_docs("deployment.yaml").remove(0);
    let d: Deployment = serde_json::from_value(doc).expect("Deployment");
    let args = d.spec.template.spec.expect("pod").containers[0]
        .args
        .clone()
        .unwrap_or_default();
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("deployment.yaml has no {flag}=..."))
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// `kubectl apply -f` of each file to the simulated cluster, as the admin.
fn kubectl_apply(env: &SimEnv, files: &[&Path]) {
    let mut cmd = Command::new(common::kubectl_binary());
    cmd.arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .arg("--cache-dir")
        .arg(env.dir.join("kubectl-cache"))
        .args(["apply", "--request-timeout=20s"])
        .env("HOME", &env.dir)
        .env_remove("KUBECONFIG");
    for f in files {
        cmd.arg("-f").arg(f);
    }
    let out = cmd.output().expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl apply failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn shipped_rbac() -> String {
    std::fs::read_to_string(repo().join("deploy/kustomize/base/rbac.yaml")).expect("rbac.yaml")
}

/// Applies the base's ServiceAccount and `rbac_yaml` to the simulated cluster, clears
/// its request record, and starts `nodewright run` as the Deployment starts it,
/// authenticated with a token of the ServiceAccount. Returns the process and its log.
fn start_with_rbac(env: &SimEnv, rbac_yaml: &str) -> (Killed, PathBuf) {
    let namespace = "nodewright";
    // SimEnv made the namespace, as the shipped manifests do.
    let (config_path, _) = env.write_config(&config()).expect("config");
    let rbac_file = env.dir.join("rbac.yaml");
    std::fs::write(&rbac_file, rbac_yaml).expect("write rbac.yaml");
    kubectl_apply(
        env,
        &[
            &repo().join("deploy/kustomize/base/serviceaccount.yaml"),
            &rbac_file,
        ],
    );
    let token = env
        .cluster
        .service_account_token(namespace, "nodewright")
        .expect("ServiceAccount token");
    let sa_kubeconfig = env.dir.join("kubeconfig-nodewright");
    std::fs::write(
        &sa_kubeconfig,
        env.cluster.kubeconfig_yaml_with_token(&token),
    )
    .expect("write kubeconfig");
    env.cluster.clear_calls();

    let log = env.dir.join("nodewright.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodewright"));
    cmd.args([
        "run",
        "--leader-elect",
        "--lease-name",
        &deployment_flag("--lease-name"),
        "--lease-namespace",
        namespace,
        "--lease-duration",
        "3s",
        "--renew-deadline",
        "2s",
        "--retry-period",
        "500ms",
        "--status-configmap",
        &deployment_flag("--status-configmap"),
        "--metrics-addr",
        &format!("127.0.0.1:{}", free_port()),
        // Short, so repeated events take the already-exists path (get + patch).
        "--event-window",
        "1s",
    ])
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log file"))
    .env("POD_NAMESPACE", namespace)
    .env("POD_NAME", "nodewright-rbac-0")
    .env_remove("KUBECONFIG");
    for (k, v) in env.env_vars(&config_path) {
        let v = if v == env.kubeconfig {
            sa_kubeconfig.clone()
        } else {
            v
        };
        cmd.env(k, v);
    }
    (Killed(cmd.spawn().expect("start nodewright run")), log)
}

/// Starts the binary as the Deployment does and drives the scenario until it scaled up,
/// pulled images, and replaced an old node (cordon, evictions, Node deleted, VM deleted).
/// Returns every request the API server saw from it.
async fn representative_run() -> Vec<ApiCall> {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    env.cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 2 * GI),
        )
        .expect("rs");
    env.cluster
        .add_replicaset(
            "default",
            "tool",
            1,
            SimPodTemplate::new("busybox:1.36", GI),
        )
        .expect("rs");
    env.cluster
        .add_pdb(
            "default",
            "web",
            BTreeMap::from([("app".to_string(), "web".to_string())]),
            PdbBudget::MinAvailable(
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1),
            ),
        )
        .expect("pdb");
    // A pod no group can host (its nodeSelector matches no group's labels): reported
    // with a NotTriggerScaleUp event every cycle, so with a short --event-window the
    // event is posted again, meets 409 AlreadyExists and is read and patched.
    env.cluster
        .add_replicaset(
            "default",
            "nowhere",
            1,
            SimPodTemplate::new("nginx:1.25", 64 << 20).node_selector("disktype", "nvme"),
        )
        .expect("rs");
    let (mut child, log) = start_with_rbac(&env, &shipped_rbac());

    let started = Instant::now();
    let mut originals: Vec<String> = Vec::new();
    loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            panic!(
                "nodewright run exited early ({status}); its log:\n{}",
                tail(&log)
            );
        }
        if originals.len() < 2 {
            originals = env.cloud.servers().into_iter().map(|s| s.name).collect();
        }
        let calls = env.cluster.calls();
        let seen = |verb: &str, resource: &str, sub: Option<&str>| {
            calls.iter().any(|c| {
                c.verb == verb && c.resource == resource && c.subresource.as_deref() == sub
            })
        };
        let servers: BTreeSet<String> = env.cloud.servers().into_iter().map(|s| s.name).collect();
        let replaced = originals.len() >= 2
            && originals
                .iter()
                .any(|n| !servers.contains(n) && env.cluster.node(n).is_none());
        let running = env
            .cluster
            .pods()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some("default"))
            .filter(|p| {
                !p.metadata
                    .name
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with("nowhere")
            })
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        let steps = [
            ("an original node replaced (Node and VM gone)", replaced),
            ("the 3 schedulable app pods running", running == 3),
            ("a pod evicted", seen("create", "pods", Some("eviction"))),
            ("an image-puller pod created", seen("create", "pods", None)),
            ("an image-puller pod deleted", seen("delete", "pods", None)),
            ("a Node deleted", seen("delete", "nodes", None)),
            ("a Node patched", seen("patch", "nodes", None)),
            ("a repeated Event patched", seen("patch", "events", None)),
            (
                "the disruption records read back",
                seen("get", "configmaps", None),
            ),
            (
                "5 s elapsed (Lease renewals)",
                started.elapsed() > Duration::from_secs(5),
            ),
        ];
        let missing: Vec<&str> = steps
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(s, _)| *s)
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "scenario incomplete after 120s, still missing: {missing:?} (originals \
             {originals:?}, servers {servers:?}); nodewright's log:\n{}",
            tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A graceful stop (SIGTERM, as the kubelet sends) so that shutdown's requests (e.g.
    // releasing the Lease) are checked too.
    let pid = child.0.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.0.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(child);
    env.cluster.calls()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_allows_every_call_of_a_representative_run_and_grants_nothing_unused() {
    let calls = representative_run().await;
    let grants = grants_for("nodewright", "nodewright");
    assert!(
        !grants.is_empty(),
        "no roles bound to nodewright/nodewright"
    );
    let problems = rbac_problems(&grants, &calls);
    // The image pullers were made in nodewright's own namespace (POD_NAMESPACE).
    let puller_namespaces: BTreeSet<Option<&str>> = calls
        .iter()
        .filter(|c| c.resource == "pods" && c.subresource.is_none())
        .filter(|c| c.verb == "create" || c.verb == "delete")
        .map(|c| c.namespace.as_deref())
        .collect();
    assert_eq!(
        puller_namespaces,
        BTreeSet::from([Some("nodewright")]),
        "image puller pods outside nodewright's namespace"
    );
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for c in calls.iter().filter(|c| !is_discovery(c)) {
        let key = format!(
            "{} {} {} ns={} name={}",
            c.verb,
            if c.group.is_empty() { "core" } else { &c.group },
            call_resource(c),
            c.namespace.as_deref().unwrap_or("-"),
            if c.name.is_some() { "set" } else { "-" }
        );
        *seen.entry(key).or_default() += 1;
    }
    assert!(
        problems.is_empty(),
        "{}\n\nrequests made (verb group resource namespace name: count):\n{}",
        problems.join("\n"),
        seen.iter()
            .map(|(k, n)| format!("  {k}: {n}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Starts nodewright with `rule` taken out of the shipped RBAC and waits until its log
/// has `wanted` (the API server's 403 message naming the permission); fails after 30 s.
async fn missing_rule_is_named(rule: &str, wanted: &str) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let shipped = shipped_rbac();
    assert!(
        shipped.contains(rule),
        "the rule moved in rbac.yaml: {rule}"
    );
    let (mut child, log) = start_with_rbac(&env, &shipped.replacen(rule, "", 1));
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(wanted) {
            break;
        }
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            panic!(
                "nodewright exited ({status}) without naming the missing permission; its log:\n{}",
                tail(&log)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "after 30 s nodewright's log does not name the missing permission ({wanted}); its log:\n{}",
            tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const SA: &str = "User \"system:serviceaccount:nodewright:nodewright\"";

/// With the rule that lets nodewright watch VolumeAttachments taken out of the shipped
/// RBAC, the API server answers its list with 403, and nodewright's log says which
/// permission it lacks (resource, verb, API group and the ServiceAccount) within seconds,
/// rather than waiting silently for a cache that never fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_rbac_rule_is_reported_by_nodewright_with_the_permission_it_lacks() {
    missing_rule_is_named(
        "  - apiGroups: [\"storage.k8s.io\"]\n    resources: [\"volumeattachments\"]\n    verbs: [\"list\", \"watch\"]\n",
        &format!("volumeattachments.storage.k8s.io is forbidden: {SA} cannot list resource \"volumeattachments\" in API group \"storage.k8s.io\" at the cluster scope"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_nodes_rule_nodewright_names_the_nodes_it_cannot_list() {
    missing_rule_is_named(
        "  - apiGroups: [\"\"]\n    resources: [\"nodes\"]\n    verbs: [\"get\", \"list\", \"watch\", \"patch\", \"delete\"]\n",
        &format!("nodes is forbidden: {SA} cannot list resource \"nodes\" in API group \"\" at the cluster scope"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_pod_disruption_budget_rule_nodewright_names_it() {
    missing_rule_is_named(
        "  - apiGroups: [\"policy\"]\n    resources: [\"poddisruptionbudgets\"]\n    verbs: [\"list\", \"watch\"]\n",
        &format!("poddisruptionbudgets.policy is forbidden: {SA} cannot list resource \"poddisruptionbudgets\" in API group \"policy\" at the cluster scope"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lease_rule_the_leader_election_names_it() {
    missing_rule_is_named(
        "  - apiGroups: [\"coordination.k8s.io\"]\n    resources: [\"leases\"]\n    resourceNames: [\"nodewright\"]\n    verbs: [\"get\", \"update\"]\n",
        &format!("{SA} cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"nodewright\""),
    )
    .await;
}
