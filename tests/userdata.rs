//! Renders every shipped template and checks the output with the real validators:
//! `cloud-init schema` (Debian package `cloud-init`) and `ignition-validate` (Debian
//! package `ignition`). A missing validator fails the test; it is never skipped.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use nodewright::userdata::{
    self, butane, RenderContext, RenderedUserData, UserDataConfig, UserDataError, UserDataFormat,
};
use serde_json::json;

const STARTUP_TAINT: &str = "nodewright.io/startup=true:NoSchedule";
const TOKEN: &str = "K10abc::server:s3cr3t'\"<&>";

fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("templates")
}

fn broken_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/templates")
}

fn ctx() -> RenderContext {
    RenderContext::new(
        "prod",
        "gpu-workers",
        "prod-gpu-workers-7f3k2",
        &BTreeMap::from([
            ("node.kubernetes.io/pool".to_string(), "gpu".to_string()),
            ("tier".to_string(), "batch".to_string()),
        ]),
        vec![
            "nvidia.com/gpu=present:NoSchedule".to_string(),
            "dedicated:NoExecute".to_string(),
        ],
    )
}

const JOIN_COMMAND: &str = "kubeadm join 10.0.0.10:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Only the required variables (of every shipped template).
fn minimal_vars() -> serde_json::Value {
    json!({
        "k3s_url": "https://10.0.0.10:6443",
        "k3s_token": TOKEN,
        "join_command": JOIN_COMMAND,
    })
}

/// Every documented variable.
fn full_vars() -> serde_json::Value {
    json!({
        "k3s_url": "https://10.0.0.10:6443",
        "k3s_token": TOKEN,
        "k3s_version": "v1.31.4+k3s1",
        "ssh_authorized_keys": [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleExampleExampleExampleExample ops@example",
            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQExample admin@example"
        ],
        "k3s_extra_config": {"kubelet-arg": ["max-pods=50"], "node-ip": "10.0.0.21"},
        "join_command": JOIN_COMMAND,
    })
}

fn config(template: &str, vars: serde_json::Value) -> UserDataConfig {
    UserDataConfig {
        template: template.to_string(),
        format: None,
        variables: serde_json::from_value(vars).unwrap_or_else(|e| panic!("vars: {e}")),
        variable_files: Default::default(),
        bootstrap_token: false,
    }
}

fn render_ok(dir: &Path, template: &str, vars: serde_json::Value) -> RenderedUserData {
    // The cloud-init kubeadm template joins only with a token nodewright minted.
    let ctx = if template.starts_with("kubeadm-join.cloud-init") {
        minted_ctx()
    } else {
        ctx()
    };
    userdata::render(dir, &config(template, vars), &ctx)
        .unwrap_or_else(|e| panic!("rendering {template} failed: {e}"))
}

/// [`ctx`] with the join credentials nodewright mints for `userData.bootstrapToken`.
fn minted_ctx() -> RenderContext {
    ctx().with_join(Some(nodewright::model::JoinCredentials {
        token: "k7x2pq.0123456789abcdef".into(),
        api_server_endpoint: "10.0.0.10:6443".into(),
        ca_cert_hash: "sha256:00ff".into(),
    }))
}

fn render_err(template: &str, vars: serde_json::Value) -> UserDataError {
    match userdata::render(&broken_dir(), &config(template, vars), &ctx()) {
        Ok(out) => panic!("{template} rendered but should fail:\n{}", out.content),
        Err(e) => e,
    }
}

/// Runs a validator; panics with the Debian package to install if it is missing.
fn run_validator(program: &str, args: &[&str], package: &str) -> (bool, String) {
    match Command::new(program).args(args).output() {
        Ok(out) => (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "validator `{program}` is not installed: install the Debian package `{package}` \
             (apt-get install {package}); these tests never skip validation"
        ),
        Err(e) => panic!("cannot run `{program}`: {e}"),
    }
}

fn temp_file(name: &str, content: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .prefix("nodewright-userdata-")
        .suffix(name)
        .tempfile()
        .unwrap_or_else(|e| panic!("temp file: {e}"));
    f.write_all(content.as_bytes())
        .unwrap_or_else(|e| panic!("write temp file: {e}"));
    f
}

fn validate(template: &str, out: &RenderedUserData) {
    match out.format {
        UserDataFormat::CloudInit => {
            let f = temp_file(".yaml", &out.content);
            let path = f.path().to_string_lossy().into_owned();
            let (ok, text) = run_validator(
                "cloud-init",
                &["schema", "--config-file", &path],
                "cloud-init",
            );
            assert!(
                ok && text.contains("Valid cloud-config"),
                "cloud-init schema rejected {template}:\n{text}\n--- output ---\n{}",
                out.content
            );
        }
        UserDataFormat::Butane => {
            let f = temp_file(".ign", &out.content);
            let path = f.path().to_string_lossy().into_owned();
            let (ok, text) = run_validator("ignition-validate", &[&path], "ignition");
            // Warnings (e.g. unused keys) count as failures too.
            assert!(
                ok && text.trim().is_empty(),
                "ignition-validate rejected {template}:\n{text}\n--- output ---\n{}",
                out.content
            );
        }
        UserDataFormat::Script => {
            let f = temp_file(".sh", &out.content);
            let path = f.path().to_string_lossy().into_owned();
            let (ok, text) = run_validator("sh", &["-n", &path], "dash");
            assert!(ok, "sh -n rejected {template}:\n{text}");
            let (ok, text) = run_validator("shellcheck", &["-s", "sh", &path], "shellcheck");
            assert!(ok, "shellcheck rejected {template}:\n{text}");
        }
    }
}

/// The text the node will see: cloud-init/script as is, Ignition with every file's
/// inline contents decoded.
fn node_visible_text(out: &RenderedUserData) -> String {
    if out.format != UserDataFormat::Butane {
        return out.content.clone();
    }
    let ign: serde_json::Value = serde_json::from_str(&out.content)
        .unwrap_or_else(|e| panic!("Ignition output is not JSON: {e}"));
    let mut text = String::new();
    for file in ign["storage"]["files"].as_array().into_iter().flatten() {
        let path = file["path"].as_str().unwrap_or_default();
        let source = file["contents"]["source"].as_str().unwrap_or_default();
        let data = butane::decode_data_url(source)
            .unwrap_or_else(|| panic!("{path}: not a data URL: {source}"));
        text.push_str(&format!("=== {path}\n{}\n", String::from_utf8_lossy(&data)));
    }
    text
}

fn shipped_templates() -> Vec<String> {
    let names = userdata::template_names(&shipped_dir())
        .unwrap_or_else(|e| panic!("listing templates: {e}"));
    assert!(
        names.contains(&"k3s-agent.cloud-init.yaml.j2".to_string())
            && names.contains(&"k3s-agent.butane.yaml.j2".to_string()),
        "shipped templates missing: {names:?}"
    );
    names
}

#[test]
fn every_shipped_template_passes_the_real_validator() {
    for template in shipped_templates() {
        for (label, vars) in [("minimal", minimal_vars()), ("full", full_vars())] {
            let out = render_ok(&shipped_dir(), &template, vars);
            eprintln!(
                "{template} ({label}): {} bytes, {}",
                out.content.len(),
                out.format
            );
            validate(&format!("{template} ({label} variables)"), &out);
        }
    }
}

#[test]
fn shipped_templates_carry_startup_taint_ownership_labels_and_node_name() {
    for template in shipped_templates()
        .into_iter()
        .filter(|t| t.starts_with("k3s-"))
    {
        let out = render_ok(&shipped_dir(), &template, full_vars());
        let text = node_visible_text(&out);
        for needle in [
            format!("\"{STARTUP_TAINT}\""),
            "\"nodewright.io/cluster=prod\"".to_string(),
            "\"nodewright.io/group=gpu-workers\"".to_string(),
            "\"tier=batch\"".to_string(),
            "\"nvidia.com/gpu=present:NoSchedule\"".to_string(),
            "\"dedicated:NoExecute\"".to_string(),
            "node-name: \"prod-gpu-workers-7f3k2\"".to_string(),
            "server: \"https://10.0.0.10:6443\"".to_string(),
            // A shell word (`shell_quote`): plain characters stay bare. The group's
            // k3s_version wins over the server's version.
            "INSTALL_K3S_VERSION=v1.31.4+k3s1\n".to_string(),
            "\"max-pods=50\"".to_string(),
        ] {
            assert!(
                text.contains(&needle),
                "{template}: missing {needle}\n{text}"
            );
        }
        // The token is quoted for YAML, whatever characters it has.
        assert!(
            text.contains("token: \"K10abc::server:s3cr3t"),
            "{template}\n{text}"
        );
    }
}

#[test]
fn cloud_init_template_sets_hostname_and_keys() {
    let out = render_ok(&shipped_dir(), "k3s-agent.cloud-init.yaml.j2", full_vars());
    assert_eq!(out.format, UserDataFormat::CloudInit);
    assert!(
        out.content.starts_with("#cloud-config\n"),
        "{}",
        out.content
    );
    assert!(out
        .content
        .contains("hostname: \"prod-gpu-workers-7f3k2\"\n"));
    assert!(out.content.contains("ops@example"));
    let minimal = render_ok(
        &shipped_dir(),
        "k3s-agent.cloud-init.yaml.j2",
        minimal_vars(),
    );
    assert!(!minimal.content.contains("ssh_authorized_keys"));
}

#[test]
fn butane_template_is_ignition_3_3_with_hostname_units_and_core_keys() {
    let out = render_ok(&shipped_dir(), "k3s-agent.butane.yaml.j2", full_vars());
    assert_eq!(out.format, UserDataFormat::Butane);
    let ign: serde_json::Value =
        serde_json::from_str(&out.content).unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(ign["ignition"]["version"], "3.3.0");
    let files = ign["storage"]["files"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let hostname = files
        .iter()
        .find(|f| f["path"] == "/etc/hostname")
        .unwrap_or_else(|| panic!("no /etc/hostname in {ign}"));
    assert_eq!(hostname["mode"], 420);
    let data = butane::decode_data_url(hostname["contents"]["source"].as_str().unwrap_or(""));
    assert_eq!(data.as_deref(), Some(&b"prod-gpu-workers-7f3k2\n"[..]));
    let config = files
        .iter()
        .find(|f| f["path"] == "/etc/rancher/k3s/config.yaml")
        .unwrap_or_else(|| panic!("no k3s config in {ign}"));
    assert_eq!(config["mode"], 384, "token file must be 0600");
    let units: Vec<&str> = ign["systemd"]["units"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|u| u["enabled"] == true)
        .filter_map(|u| u["name"].as_str())
        .collect();
    assert_eq!(
        units,
        ["nodewright-install-k3s.service", "k3s-agent.service"]
    );
    assert_eq!(ign["passwd"]["users"][0]["name"], "core");
    assert_eq!(
        ign["passwd"]["users"][0]["sshAuthorizedKeys"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    let minimal = render_ok(&shipped_dir(), "k3s-agent.butane.yaml.j2", minimal_vars());
    assert!(!minimal.content.contains("passwd"), "{}", minimal.content);
}

#[test]
fn check_all_accepts_shipped_and_reports_broken_templates() {
    let checked = userdata::check_all(&shipped_dir())
        .unwrap_or_else(|errs| panic!("shipped templates have syntax errors: {errs:?}"));
    assert_eq!(checked, shipped_templates());
    let errs = match userdata::check_all(&broken_dir()) {
        Ok(names) => panic!("broken templates passed check_all: {names:?}"),
        Err(errs) => errs,
    };
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].template(), Some("syntax-error.cloud-init.yaml.j2"));
}

#[test]
fn syntax_error_names_template_and_line() {
    let e = render_err("syntax-error.cloud-init.yaml.j2", minimal_vars());
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(matches!(e, UserDataError::Syntax { .. }), "{msg}");
    assert_eq!(e.line(), Some(3), "{msg}");
    assert!(
        msg.contains("template `syntax-error.cloud-init.yaml.j2`, line 3: syntax error"),
        "{msg}"
    );
}

#[test]
fn undefined_variable_names_variable_template_and_line() {
    let e = render_err("undefined-variable.cloud-init.yaml.j2", minimal_vars());
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(
        matches!(e, UserDataError::UndefinedVariable { .. }),
        "{msg}"
    );
    assert!(
        msg.contains(
            "template `undefined-variable.cloud-init.yaml.j2`, line 5: undefined variable \
             `k3s_tokn`"
        ),
        "{msg}"
    );
    assert!(
        msg.contains("userData.variables"),
        "should explain the fix: {msg}"
    );
}

#[test]
fn missing_required_variable_in_shipped_template_is_named() {
    let e = userdata::render(
        &shipped_dir(),
        &config(
            "k3s-agent.cloud-init.yaml.j2",
            json!({"k3s_url": "https://10.0.0.10:6443"}),
        ),
        &ctx(),
    );
    let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("`k3s-agent.cloud-init.yaml.j2`, line") && msg.contains("`k3s_token`"),
        "{msg}"
    );
}

#[test]
fn unsupported_butane_variant_is_explained() {
    let e = render_err("unsupported-variant.butane.yaml.j2", json!({}));
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(
        matches!(
            &e,
            UserDataError::Butane { source, .. }
                if matches!(**source, butane::ButaneError::UnsupportedVariant(_))
        ),
        "{msg}"
    );
    assert!(msg.contains("unsupported-variant.butane.yaml.j2"), "{msg}");
    assert!(
        msg.contains("`flatcar`") && msg.contains("variant: fcos"),
        "{msg}"
    );
}

#[test]
fn unsupported_butane_version_is_explained() {
    let e = render_err("unsupported-version.butane.yaml.j2", json!({}));
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(msg.contains("unsupported-version.butane.yaml.j2"), "{msg}");
    assert!(
        msg.contains("unsupported Butane version `2.0.0`") && msg.contains("1.5.0"),
        "{msg}"
    );
}

#[test]
fn unknown_butane_field_names_field_template_and_line() {
    let e = render_err("unknown-field.butane.yaml.j2", json!({}));
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(msg.contains("`unknown-field.butane.yaml.j2`"), "{msg}");
    assert!(msg.contains("unknown field `content`"), "{msg}");
    assert!(
        msg.contains("contents"),
        "should list the valid fields: {msg}"
    );
    assert_eq!(e.line(), Some(7), "{msg}");
    assert!(msg.contains("the line reads: `content:`"), "{msg}");
}

#[test]
fn kubeadm_join_script_registers_with_labels_and_startup_taint() {
    let out = render_ok(&shipped_dir(), "kubeadm-join.sh.j2", full_vars());
    assert_eq!(out.format, UserDataFormat::Script);
    let text = &out.content;
    assert!(text.starts_with("#!/bin/sh"), "{text}");
    assert!(text.contains(&format!("--register-with-taints=nvidia.com/gpu=present:NoSchedule,dedicated:NoExecute,{STARTUP_TAINT}")), "{text}");
    assert!(text.contains("--node-labels="), "{text}");
    assert!(text.contains("nodewright.io/cluster=prod"), "{text}");
    assert!(text.contains("nodewright.io/group=gpu-workers"), "{text}");
    assert!(text.contains(JOIN_COMMAND), "{text}");
    assert!(
        text.contains("--node-name prod-gpu-workers-7f3k2"),
        "{text}"
    );
}

fn render_at(template: &str, vars: serde_json::Value, server: Option<&str>) -> String {
    let ctx = ctx().with_server_version(server);
    let out = userdata::render(&shipped_dir(), &config(template, vars), &ctx)
        .unwrap_or_else(|e| panic!("rendering {template} failed: {e}"));
    if server.is_some() {
        validate(&format!("{template} (server {server:?})"), &out);
    }
    node_visible_text(&out)
}

/// Issue 30: without a pinned version, every shipped k3s template installs exactly the
/// API server's k3s release (k3s's `INSTALL_K3S_VERSION`); a server that is not k3s gives
/// its Kubernetes release as the k3s1 build; unknown, the "stable" channel as before.
#[test]
fn shipped_k3s_templates_install_the_api_servers_version_by_default() {
    for template in shipped_templates()
        .into_iter()
        .filter(|t| t.starts_with("k3s-"))
    {
        let text = render_at(&template, minimal_vars(), Some("v1.32.1+k3s1"));
        assert!(
            text.contains("INSTALL_K3S_VERSION=v1.32.1+k3s1\n"),
            "{template}: the server's version is not installed\n{text}"
        );
        let text = render_at(&template, minimal_vars(), Some("v1.32.1"));
        assert!(
            text.contains("INSTALL_K3S_VERSION=v1.32.1+k3s1\n"),
            "{template}: {text}"
        );
        // A pin wins (older than the server: allowed).
        let text = render_at(&template, full_vars(), Some("v1.32.1+k3s1"));
        assert!(
            text.contains("INSTALL_K3S_VERSION=v1.31.4+k3s1\n"),
            "{template}: {text}"
        );
        let text = render_at(&template, minimal_vars(), None);
        assert!(
            text.contains("INSTALL_K3S_VERSION=''\n"),
            "{template}: {text}"
        );
        assert!(text.contains("channels/stable"), "{template}: {text}");
    }
}

/// Issue 30: the kubeadm template installs the API server's Kubernetes release (the
/// kubelet and kubeadm packages of pkgs.k8s.io) unless the group pins one.
#[test]
fn kubeadm_template_installs_the_api_servers_release_by_default() {
    let text = render_at("kubeadm-join.sh.j2", minimal_vars(), Some("v1.32.1"));
    assert!(text.contains("KUBERNETES_VERSION=v1.32.1\n"), "{text}");
    assert!(
        text.contains("https://pkgs.k8s.io/core:/stable:/v"),
        "{text}"
    );
    // The k3s build of a server is no package version: its release is.
    let text = render_at("kubeadm-join.sh.j2", minimal_vars(), Some("v1.32.1+k3s1"));
    assert!(text.contains("KUBERNETES_VERSION=v1.32.1\n"), "{text}");
    let mut vars = minimal_vars();
    vars["kubernetes_version"] = json!("v1.31.9");
    let text = render_at("kubeadm-join.sh.j2", vars, Some("v1.32.1"));
    assert!(text.contains("KUBERNETES_VERSION=v1.31.9\n"), "{text}");
    // The cloud-init one (minted token), the same way.
    let ctx = minted_ctx().with_server_version(Some("v1.32.1+k3s1"));
    let out = userdata::render(
        &shipped_dir(),
        &config("kubeadm-join.cloud-init.yaml.j2", json!({})),
        &ctx,
    )
    .unwrap_or_else(|e| panic!("rendering failed: {e}"));
    validate(
        "kubeadm-join.cloud-init.yaml.j2 (server v1.32.1+k3s1)",
        &out,
    );
    assert!(
        out.content.contains("KUBERNETES_VERSION=v1.32.1\n"),
        "{}",
        out.content
    );
}

#[test]
fn kubeadm_templates_with_a_minted_token_write_a_root_only_join_configuration() {
    for template in ["kubeadm-join.sh.j2", "kubeadm-join.cloud-init.yaml.j2"] {
        for (api, vars) in [
            ("v1beta4", json!({})),
            ("v1beta3", json!({"kubeadm_api_version": "v1beta3"})),
        ] {
            let out = userdata::render(&shipped_dir(), &config(template, vars), &minted_ctx())
                .unwrap_or_else(|e| panic!("{template}: {e}"));
            validate(&format!("{template} ({api})"), &out);
            let text = &out.content;
            for needle in [
                format!("apiVersion: kubeadm.k8s.io/{api}"),
                "kind: JoinConfiguration".to_string(),
                "token: \"k7x2pq.0123456789abcdef\"".to_string(),
                "apiServerEndpoint: \"10.0.0.10:6443\"".to_string(),
                "- \"sha256:00ff\"".to_string(),
                "name: \"prod-gpu-workers-7f3k2\"".to_string(),
                "kubeadm join --config /etc/kubernetes/nodewright-join.yaml".to_string(),
                STARTUP_TAINT.to_string(),
                "nodewright.io/group=gpu-workers".to_string(),
            ] {
                assert!(
                    text.contains(&needle),
                    "{template} {api}: no {needle}\n{text}"
                );
            }
            assert!(
                !text.contains("--token"),
                "{template}: token on a command line"
            );
            assert!(
                text.contains("0600") || text.contains("umask 077"),
                "{template}: the file is root-only"
            );
            let v4 = text.contains("- name: register-with-taints");
            assert_eq!(v4, api == "v1beta4", "{template} {api}\n{text}");
        }
    }
}
