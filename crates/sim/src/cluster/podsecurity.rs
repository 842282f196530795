//! Pod Security admission, as the real API server enforces it on pod create: a namespace
//! labelled `pod-security.kubernetes.io/enforce: baseline|restricted` refuses pods that
//! break that Pod Security Standard with `403 Forbidden` and the same wording
//! (`violates PodSecurity "restricted:latest": ...`). Only pods created through the API
//! are checked (the simulated controllers create theirs directly).

use serde_json::Value;

use super::resources::PODS;
use super::status::ApiError;

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";
const ENFORCE_VERSION: &str = "pod-security.kubernetes.io/enforce-version";

/// Volume types the restricted profile allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Capabilities the baseline profile lets a container add.
const BASELINE_CAPS: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Refuses `pod` when the namespace (`ns`, its object) enforces a level it breaks.
pub fn admit(ns: &Value, pod: &Value) -> Result<(), ApiError> {
    let labels = &ns["metadata"]["labels"];
    let level = labels[ENFORCE].as_str().unwrap_or("privileged");
    let restricted = match level {
        "restricted" => true,
        "baseline" => false,
        _ => return Ok(()),
    };
    let version = labels[ENFORCE_VERSION].as_str().unwrap_or("latest");
    let violations = violations(pod, restricted);
    if violations.is_empty() {
        return Ok(());
    }
    let name = pod["metadata"]["name"]
        .as_str()
        .or_else(|| pod["metadata"]["generateName"].as_str())
        .unwrap_or("");
    Err(ApiError::new(
        403,
        "Forbidden",
        format!(
            "{} \"{name}\" is forbidden: violates PodSecurity \"{level}:{version}\": {}",
            PODS.id,
            violations.join(", ")
        ),
    ))
}

fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect()
}

fn cname(c: &Value) -> &str {
    c["name"].as_str().unwrap_or("")
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each broken check in the real server's words (a subset of the standard: host
/// namespaces, privileged, capabilities, host paths and ports, volume types, privilege
/// escalation, non-root, seccomp).
fn violations(pod: &Value, restricted: bool) -> Vec<String> {
    let spec = &pod["spec"];
    let cs = containers(spec);
    let psc = &spec["securityContext"];
    let mut out = Vec::new();
    for (field, what) in [
        ("hostNetwork", "hostNetwork=true"),
        ("hostPID", "hostPID=true"),
        ("hostIPC", "hostIPC=true"),
    ] {
        if spec[field] == Value::Bool(true) {
            out.push(format!("host namespaces ({what})"));
        }
    }
    let privileged: Vec<&str> = cs
        .iter()
        .filter(|c| c["securityContext"]["privileged"] == Value::Bool(true))
        .map(|c| cname(c))
        .collect();
    if !privileged.is_empty() {
        out.push(format!("privileged (container {})", quoted(&privileged)));
    }
    let added: Vec<&str> = cs
        .iter()
        .flat_map(|c| {
            c["securityContext"]["capabilities"]["add"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
        })
        .filter(|cap| {
            if restricted {
                *cap != "NET_BIND_SERVICE"
            } else {
                !BASELINE_CAPS.contains(cap)
            }
        })
        .collect();
    if !added.is_empty() {
        out.push(format!("non-default capabilities ({})", quoted(&added)));
    }
    let volumes: Vec<&Value> = spec["volumes"].as_array().into_iter().flatten().collect();
    let host_paths: Vec<&str> = volumes
        .iter()
        .filter(|v| v.get("hostPath").is_some())
        .filter_map(|v| v["name"].as_str())
        .collect();
    if !host_paths.is_empty() {
        out.push(format!("hostPath volumes ({})", quoted(&host_paths)));
    }
    let host_ports: Vec<String> = cs
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .filter_map(|p| p["hostPort"].as_i64().filter(|n| *n != 0))
        .map(|n| n.to_string())
        .collect();
    if !host_ports.is_empty() {
        out.push(format!("hostPort ({})", host_ports.join(", ")));
    }
    if !restricted {
        return out;
    }
    let odd_volumes: Vec<&str> = volumes
        .iter()
        .filter(|v| {
            v.as_object().is_some_and(|m| {
                !m.keys()
                    .any(|k| k == "name" || RESTRICTED_VOLUMES.contains(&k.as_str()))
            })
        })
        .filter_map(|v| v["name"].as_str())
        .collect();
    if !odd_volumes.is_empty() && host_paths.is_empty() {
        out.push(format!(
            "restricted volume types ({})",
            quoted(&odd_volumes)
        ));
    }
    let escalating: Vec<&str> = cs
        .iter()
        .filter(|c| c["securityContext"]["allowPrivilegeEscalation"] != Value::Bool(false))
        .map(|c| cname(c))
        .collect();
    if !escalating.is_empty() {
        out.push(format!(
            "allowPrivilegeEscalation != false (container {} must set securityContext.allowPrivilegeEscalation=false)",
            quoted(&escalating)
        ));
    }
    let keeps_caps: Vec<&str> = cs
        .iter()
        .filter(|c| {
            !c["securityContext"]["capabilities"]["drop"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == "ALL"))
        })
        .map(|c| cname(c))
        .collect();
    if !keeps_caps.is_empty() {
        out.push(format!(
            "unrestricted capabilities (container {} must set securityContext.capabilities.drop=[\"ALL\"])",
            quoted(&keeps_caps)
        ));
    }
    let pod_non_root = psc["runAsNonRoot"] == Value::Bool(true);
    let may_be_root: Vec<&str> = cs
        .iter()
        .filter(|c| match &c["securityContext"]["runAsNonRoot"] {
            Value::Bool(b) => !b,
            _ => !pod_non_root,
        })
        .map(|c| cname(c))
        .collect();
    if psc["runAsNonRoot"] == Value::Bool(false) || !may_be_root.is_empty() {
        out.push(format!(
            "runAsNonRoot != true (pod or container {} must set securityContext.runAsNonRoot=true)",
            quoted(&may_be_root)
        ));
    }
    let root_uid = psc["runAsUser"].as_i64() == Some(0)
        || cs
            .iter()
            .any(|c| c["securityContext"]["runAsUser"].as_i64() == Some(0));
    if root_uid {
        out.push("runAsUser=0 (pod and containers must not set runAsUser=0)".into());
    }
    let good = |sc: &Value| {
        matches!(
            sc["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault" | "Localhost")
        )
    };
    let pod_seccomp = good(psc);
    let unconfined: Vec<&str> = cs
        .iter()
        .filter(
            |c| match c["securityContext"]["seccompProfile"]["type"].as_str() {
                Some(_) => !good(&c["securityContext"]),
                None => !pod_seccomp,
            },
        )
        .map(|c| cname(c))
        .collect();
    if !unconfined.is_empty() {
        out.push(format!(
            "seccompProfile (pod or container {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            quoted(&unconfined)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ns(level: &str) -> Value {
        json!({"metadata": {"name": "nw", "labels": {ENFORCE: level}}})
    }

    fn restricted_pod() -> Value {
        json!({"metadata": {"name": "p"}, "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "x", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}})
    }

    #[test]
    fn restricted_refuses_what_the_real_admission_refuses_and_names_each_check() {
        assert!(admit(&ns("restricted"), &restricted_pod()).is_ok());
        let plain = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}});
        let e = admit(&ns("restricted"), &plain).expect_err("refused");
        assert_eq!(e.code, 403);
        assert!(
            e.message.starts_with(
                "pods \"p\" is forbidden: violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"
            ),
            "{e}"
        );
        for check in [
            "unrestricted capabilities",
            "runAsNonRoot != true",
            "seccompProfile",
        ] {
            assert!(e.message.contains(check), "{check}: {e}");
        }
        // Baseline and privileged namespaces take it; an unlabelled one too.
        assert!(admit(&ns("baseline"), &plain).is_ok());
        assert!(admit(&ns("privileged"), &plain).is_ok());
        assert!(admit(&json!({"metadata": {"name": "x"}}), &plain).is_ok());
        // Host access is refused from baseline up.
        let mut host = restricted_pod();
        host["spec"]["hostNetwork"] = json!(true);
        host["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
        let e = admit(&ns("baseline"), &host).expect_err("refused");
        assert!(
            e.message.contains("host namespaces (hostNetwork=true)"),
            "{e}"
        );
        assert!(e.message.contains("hostPath volumes (\"root\")"), "{e}");
        // Root by uid, even with runAsNonRoot.
        let mut root = restricted_pod();
        root["spec"]["securityContext"]["runAsUser"] = json!(0);
        assert!(admit(&ns("restricted"), &root).is_err());
    }
}
