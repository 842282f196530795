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

use nodewright_testkit as common;

mod helm;
use helm::chart_values;
mod image;

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
        "Role/nodewright/nodewright-image-puller",
        "RoleBinding/nodewright/nodewright-image-puller",
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
    assert!(
        node_aff.contains(nodewright::model::LABEL_CLUSTER) && node_aff.contains("DoesNotExist")
    );
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
