//! What a booting VM's kubelet registers with, read from its user data the way the
//! real agents would get it: `--node-label(s)`, `--node-taint`, `--register-with-taints`
//! flags and k3s-style config lists, in the raw text, in Ignition JSON (file data URLs,
//! systemd units and drop-ins) and in cloud-config `write_files` (base64 too).
//! A template that forgets the startup taint therefore registers without it.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{json, Value};

use super::meta::percent_decode;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registration {
    pub labels: BTreeMap<String, String>,
    /// Taints as JSON (`{key, value?, effect}`), unique by key and effect.
    pub taints: Vec<Value>,
    pub provider_id: Option<String>,
    /// Extended resources the node advertises (`nvidia.com/gpu` → `1`), as a device
    /// plugin would: from `sim.nodewright.io/extended-resource=<name>=<quantity>` in
    /// the user data (a flag, a comment or a k3s config key). Simulator only.
    pub extended: BTreeMap<String, String>,
    /// The kubelet's version (`status.nodeInfo.kubeletVersion`): the release the user
    /// data installs, from `INSTALL_K3S_VERSION=` (k3s's install variable: the k3s
    /// release, reported as is, `v1.31.4+k3s1`) or `KUBERNETES_VERSION=` (kubelet and
    /// kubeadm packages: `v1.31.4`). `None` when neither is set to a version.
    pub kubelet_version: Option<String>,
}

/// The user-data option the simulated kubelet reads extended resources from.
pub const EXTENDED_RESOURCE_OPTION: &str = "sim.nodewright.io/extended-resource";

/// Decodes an RFC 2397 data URL (`data:[type][;base64],payload`).
pub fn decode_data_url(url: &str) -> Option<String> {
    let rest = url.strip_prefix("data:")?;
    let (header, payload) = rest.split_once(',')?;
    if header.split(';').any(|p| p == "base64") {
        let cleaned: String = percent_decode(payload, false)
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(cleaned)
            .ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    } else {
        Some(percent_decode(payload, false))
    }
}

/// Every string inside a JSON/YAML document, data URLs and base64 file contents decoded.
fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.starts_with("data:") => out.extend(decode_data_url(s)),
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        Value::Object(m) => {
            let encoding = m
                .get("encoding")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if matches!(encoding, "b64" | "base64") {
                if let Some(content) = m.get("content").and_then(Value::as_str) {
                    let cleaned: String = content.chars().filter(|c| !c.is_whitespace()).collect();
                    if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(cleaned) {
                        out.push(String::from_utf8_lossy(&bytes).into_owned());
                    }
                }
            }
            m.values().for_each(|x| collect_strings(x, out));
        }
        _ => {}
    }
}

/// The texts worth scanning: JSON (Ignition) is searched through its decoded strings
/// only, so escaped quotes do not leak into values; anything else as is, plus
/// cloud-config's decoded files.
pub(super) fn texts(user_data: &str) -> Vec<String> {
    let trimmed = user_data.trim_start();
    if trimmed.starts_with('{') {
        if let Ok(doc) = serde_json::from_str::<Value>(trimmed) {
            let mut out = Vec::new();
            collect_strings(&doc, &mut out);
            return out;
        }
    }
    let mut out = vec![user_data.to_string()];
    if trimmed.starts_with("#cloud-config") {
        if let Ok(doc) = serde_yaml::from_str::<Value>(trimmed) {
            let mut strings = Vec::new();
            collect_strings(&doc, &mut strings);
            // Plain strings are already in the raw text; keep only decoded payloads.
            out.extend(
                strings
                    .into_iter()
                    .filter(|s| !user_data.contains(s.as_str())),
            );
        }
    }
    out
}

fn is_value_end(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | '\\' | ';' | '&' | '|' | '`' | ')' | ']' | '}'
        )
}

/// A flag value starting at `s` (after `=` or blanks), unquoted.
fn flag_value(s: &str) -> &str {
    let s = s.trim_start_matches([' ', '\t']);
    let s = s.strip_prefix(['"', '\'']).unwrap_or(s);
    let end = s.find(is_value_end).unwrap_or(s.len());
    &s[..end]
}

fn unquote(s: &str) -> &str {
    s.trim().trim_matches(|c| c == '"' || c == '\'').trim()
}

/// Values following `key:` in YAML: inline (`a`, `"a"`, `[a, b]`) or a block list.
fn yaml_values(after_colon: &str) -> Vec<String> {
    let mut lines = after_colon.lines();
    let inline = lines.next().unwrap_or_default().trim();
    if !inline.is_empty() && !inline.starts_with('#') {
        let inner = inline.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        return match inner {
            Some(list) => list.split(',').map(|v| unquote(v).to_string()).collect(),
            None => vec![unquote(inline).to_string()],
        };
    }
    lines
        .map(str::trim)
        .take_while(|l| l.starts_with('-') || l.is_empty())
        .filter_map(|l| l.strip_prefix('-'))
        .map(|v| unquote(v).to_string())
        .collect()
}

/// Every value given for option `name` in `text`, as a flag or a YAML key.
fn option_values(text: &str, name: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (pos, _) in text.match_indices(name) {
        let before = text[..pos].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '/') {
            continue;
        }
        let mut rest = &text[pos + name.len()..];
        // A quoted YAML key: `"name": value`.
        if matches!(before, Some('"' | '\'')) {
            rest = rest
                .strip_prefix(['"', '\''])
                .filter(|r| r.starts_with(':'))
                .unwrap_or(rest);
        }
        if name.ends_with("label") {
            rest = rest.strip_prefix('s').unwrap_or(rest);
        }
        // kubeadm v1beta4's `kubeletExtraArgs`: `- name: <flag>` with `value:` on the
        // next line.
        let line_start = text[..pos].rsplit('\n').next().unwrap_or_default();
        if matches!(
            line_start.trim().trim_end_matches(['"', '\'']).trim_end(),
            "name:" | "- name:"
        ) {
            let (tail, next) = rest.split_once('\n').unwrap_or((rest, ""));
            let value = next
                .lines()
                .next()
                .map(str::trim)
                .and_then(|l| l.strip_prefix("value:"));
            if let (true, Some(v)) = (tail.trim().trim_matches(['"', '\'']).is_empty(), value) {
                for v in yaml_values(v) {
                    found.extend(
                        v.split(',')
                            .map(str::trim)
                            .filter(|x| !x.is_empty())
                            .map(str::to_string),
                    );
                }
            }
            continue;
        }
        let values = if let Some(v) = rest.strip_prefix('=') {
            vec![flag_value(v).to_string()]
        } else if let Some(v) = rest.strip_prefix(':').filter(|_| {
            // A YAML key sits at the start of its line (possibly quoted).
            text[..pos]
                .rsplit('\n')
                .next()
                .is_some_and(|l| l.trim().trim_matches(['"', '\'']).is_empty())
        }) {
            yaml_values(v)
        } else if rest.starts_with([' ', '\t']) {
            vec![flag_value(rest).to_string()]
        } else {
            continue;
        };
        for v in values {
            found.extend(
                v.split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(str::to_string),
            );
        }
    }
    found
}

/// `key[=value]:Effect` into a taint, if well formed.
pub fn parse_taint(s: &str) -> Option<Value> {
    let (kv, effect) = s.rsplit_once(':')?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return None;
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (kv, None),
    };
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    let mut t = json!({"key": key, "effect": effect});
    if let Some(v) = value.filter(|v| !v.is_empty()) {
        t["value"] = json!(v);
    }
    Some(t)
}

/// The error a kubelet exits with at start when `--node-labels` holds keys in the
/// `kubernetes.io`/`k8s.io` namespaces it may not set on itself (NodeRestriction);
/// k3s agents refuse the same labels.
pub fn flag_error(reg: &Registration) -> Option<String> {
    use nodewright_core::config::labels::{
        kubelet_refuses, KUBELET_LABELS, KUBELET_LABEL_NAMESPACES,
    };
    let refused: Vec<&str> = reg
        .labels
        .keys()
        .map(String::as_str)
        .filter(|k| kubelet_refuses(k))
        .collect();
    if refused.is_empty() {
        return None;
    }
    Some(format!(
        "failed to validate kubelet flags: unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]; --node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix ({}) or be in the specifically allowed set ({})",
        refused.join(" "),
        KUBELET_LABEL_NAMESPACES.join(", "),
        KUBELET_LABELS.join(", ")
    ))
}

/// Commands that start a kubelet which registers with the cluster, as a join's user
/// data runs them (a k3s agent, kubeadm join, an RKE2 agent, a kubelet itself).
const KUBELET_STARTS: &[&str] = &[
    "k3s agent",
    "k3s-agent",
    "agent --",
    "K3S_URL",
    "kubeadm join",
    "rke2-agent",
    "rke2 agent",
    "kubelet ",
    "kubelet.service",
];

/// Why a VM booted with `user_data` starts no kubelet, so registers no Node: user data
/// that is empty or runs nothing that joins (no k3s agent, `kubeadm join`, RKE2 agent or
/// kubelet in it, raw or inside Ignition or cloud-config files) leaves a bare VM, as on
/// a real cloud. The rule of every simulated cloud.
pub fn start_error(user_data: &str) -> Option<String> {
    if user_data.trim().is_empty() {
        return Some("no user data: nothing in the guest starts a kubelet".into());
    }
    let joins = texts(user_data)
        .iter()
        .any(|t| KUBELET_STARTS.iter().any(|k| t.contains(k)));
    (!joins).then(|| {
        "the user data starts no kubelet (no k3s agent, kubeadm join, RKE2 agent or kubelet in it): the VM never joins".into()
    })
}

pub fn scan(user_data: &str) -> Registration {
    let mut reg = Registration::default();
    for text in texts(user_data) {
        for label in option_values(&text, "node-label") {
            if let Some((k, v)) = label.split_once('=') {
                if !k.is_empty() && !k.contains(char::is_whitespace) {
                    reg.labels.insert(k.to_string(), v.to_string());
                }
            }
        }
        let taints = option_values(&text, "node-taint")
            .into_iter()
            .chain(option_values(&text, "register-with-taints"));
        for taint in taints.filter_map(|t| parse_taint(&t)) {
            reg.taints
                .retain(|x| !(x["key"] == taint["key"] && x["effect"] == taint["effect"]));
            reg.taints.push(taint);
        }
        for res in option_values(&text, EXTENDED_RESOURCE_OPTION) {
            if let Some((k, v)) = res.split_once('=') {
                if !k.is_empty() && nodewright_core::model::quantity_value(v).is_some() {
                    reg.extended.insert(k.to_string(), v.to_string());
                }
            }
        }
        if let Some(id) = option_values(&text, "provider-id").into_iter().next() {
            reg.provider_id = Some(id);
        }
        if let Some(v) = installed_version(&text) {
            reg.kubelet_version = Some(v);
        }
    }
    reg
}

/// The version `text` installs: the first `INSTALL_K3S_VERSION=` or `KUBERNETES_VERSION=`
/// assignment holding one (`v` added when missing, as the kubelet reports it).
fn installed_version(text: &str) -> Option<String> {
    ["INSTALL_K3S_VERSION", "KUBERNETES_VERSION"]
        .iter()
        .flat_map(|name| option_values(text, name))
        .map(|v| v.trim().to_string())
        .find(|v| {
            let bare = v.strip_prefix('v').unwrap_or(v);
            bare.split(['+', '-']).next().is_some_and(|core| {
                core.split('.').count() == 3
                    && core
                        .split('.')
                        .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
            })
        })
        .map(|v| {
            if v.starts_with('v') {
                v
            } else {
                format!("v{v}")
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(r: &Registration) -> Vec<String> {
        r.taints
            .iter()
            .map(|t| {
                format!(
                    "{}:{}",
                    t["key"].as_str().unwrap_or_default(),
                    t["effect"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    #[test]
    fn shell_flags() {
        let ud = "#!/bin/sh\ncurl -sfL https://get.k3s.io | INSTALL_K3S_EXEC=\"agent --node-label nodewright.io/group=small --node-taint nodewright.io/startup=true:NoExecute\" sh -\n\
                  kubelet --node-labels=a=1,b=2 --register-with-taints=x=y:NoSchedule,z:PreferNoSchedule\n# mention node-label here\n";
        let r = scan(ud);
        assert_eq!(
            r.labels.get("nodewright.io/group").map(String::as_str),
            Some("small")
        );
        assert_eq!(r.labels.get("a").map(String::as_str), Some("1"));
        assert_eq!(r.labels.get("b").map(String::as_str), Some("2"));
        assert_eq!(
            keys(&r),
            vec![
                "nodewright.io/startup:NoExecute",
                "x:NoSchedule",
                "z:PreferNoSchedule"
            ]
        );
        assert_eq!(r.taints[0]["value"], "true");
    }

    #[test]
    fn ignition_files_and_units() {
        let config = "node-label:\n  - \"nodewright.io/group=big\"\nnode-taint:\n  - \"nodewright.io/startup=true:NoExecute\"\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(config);
        let ign = json!({"ignition": {"version": "3.4.0"},
            "storage": {"files": [
                {"path": "/etc/rancher/k3s/config.yaml", "contents": {"source": format!("data:;base64,{b64}")}},
                {"path": "/etc/x", "contents": {"source": "data:,--node-label%3Dpct%3Dyes"}}]},
            "systemd": {"units": [{"name": "k.service", "contents": "ExecStart=/bin/k3s agent --node-label=\"unit=1\"",
                "dropins": [{"name": "d.conf", "contents": "Environment=X=\"--register-with-taints=d=1:NoSchedule\""}]}]}});
        let r = scan(&ign.to_string());
        assert_eq!(
            r.labels.get("nodewright.io/group").map(String::as_str),
            Some("big")
        );
        assert_eq!(r.labels.get("pct").map(String::as_str), Some("yes"));
        assert_eq!(r.labels.get("unit").map(String::as_str), Some("1"));
        assert_eq!(
            keys(&r),
            vec!["nodewright.io/startup:NoExecute", "d:NoSchedule"]
        );
    }

    #[test]
    fn extended_resources_from_a_flag_or_a_quoted_k3s_config_key() {
        let r = scan("#!/bin/sh\n# --sim.nodewright.io/extended-resource=nvidia.com/gpu=2\n");
        assert_eq!(
            r.extended.get("nvidia.com/gpu").map(String::as_str),
            Some("2")
        );
        let ud = "#cloud-config\nwrite_files:\n  - content: |\n      node-label:\n        - \"a=b\"\n      \"sim.nodewright.io/extended-resource\": [\"example.com/fpga=1\", \"bad=x\"]\n";
        let r = scan(ud);
        assert_eq!(
            r.extended.get("example.com/fpga").map(String::as_str),
            Some("1")
        );
        assert!(!r.extended.contains_key("bad"));
        assert_eq!(r.labels.get("a").map(String::as_str), Some("b"));
    }

    #[test]
    fn kubeadm_v1beta4_kubelet_extra_args_are_read() {
        let cfg = "nodeRegistration:\n  kubeletExtraArgs:\n  - name: node-labels\n    value: \"a=b,c=d\"\n  - name: \"register-with-taints\"\n    value: \"nodewright.io/startup=true:NoSchedule\"\n";
        let r = scan(cfg);
        assert_eq!(r.labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(r.labels.get("c").map(String::as_str), Some("d"));
        assert_eq!(
            keys(&r),
            vec!["nodewright.io/startup:NoSchedule".to_string()]
        );
    }

    #[test]
    fn a_kubelet_label_in_the_kubernetes_namespace_is_a_start_error() {
        let ok = scan("#!/bin/sh\nk3s agent --node-label=topology.kubernetes.io/zone=a --node-label=example.com/role=worker\n");
        assert_eq!(flag_error(&ok), None);
        let bad = scan("#!/bin/sh\nk3s agent --node-label=node-role.kubernetes.io/worker=true\n");
        let why = flag_error(&bad).unwrap_or_default();
        assert!(why.contains("[node-role.kubernetes.io/worker]"), "{why}");
    }

    #[test]
    fn only_user_data_that_starts_a_kubelet_joins() {
        assert!(start_error("").is_some());
        assert!(start_error("#!/bin/sh\ntrue\n").is_some());
        assert!(start_error("#cloud-config\nhostname: x\n").is_some());
        assert_eq!(start_error("#!/bin/sh\nk3s agent --node-name=a\n"), None);
        let b64 = base64::engine::general_purpose::STANDARD.encode("kubeadm join 10.0.0.1:6443\n");
        let ud = format!(
            "#cloud-config\nwrite_files:\n  - path: /j.sh\n    encoding: b64\n    content: {b64}\n"
        );
        assert_eq!(start_error(&ud), None);
    }

    #[test]
    fn the_kubelet_version_is_the_release_the_user_data_installs() {
        let k3s = scan("#!/bin/sh\nINSTALL_K3S_VERSION=v1.32.1+k3s1\nversion=$INSTALL_K3S_VERSION\nk3s agent\n");
        assert_eq!(k3s.kubelet_version.as_deref(), Some("v1.32.1+k3s1"));
        let quoted = scan("#!/bin/sh\nINSTALL_K3S_VERSION='v1.31.4+k3s1'\nk3s agent\n");
        assert_eq!(quoted.kubelet_version.as_deref(), Some("v1.31.4+k3s1"));
        let kubeadm = scan(
            "#!/bin/sh\nKUBERNETES_VERSION=v1.31.4\nwant=${KUBERNETES_VERSION#v}\nkubeadm join x\n",
        );
        assert_eq!(kubeadm.kubelet_version.as_deref(), Some("v1.31.4"));
        // Empty (the stable channel) or no version at all: not known from the user data.
        assert_eq!(
            scan("#!/bin/sh\nINSTALL_K3S_VERSION=\nk3s agent\n").kubelet_version,
            None
        );
        assert_eq!(
            scan("#!/bin/sh\nINSTALL_K3S_VERSION=stable\nk3s agent\n").kubelet_version,
            None
        );
    }

    #[test]
    fn cloud_config_and_absence() {
        let b64 =
            base64::engine::general_purpose::STANDARD.encode("node-taint: [\"t=1:NoSchedule\"]\n");
        let ud = format!("#cloud-config\nwrite_files:\n  - path: /etc/rancher/k3s/config.yaml\n    encoding: b64\n    content: {b64}\n");
        assert_eq!(keys(&scan(&ud)), vec!["t:NoSchedule"]);
        assert_eq!(scan("#!/bin/sh\nk3s agent\n"), Registration::default());
    }
}
