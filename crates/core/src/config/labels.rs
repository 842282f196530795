//! Which node labels a kubelet may set on its own Node. A group's labels reach the
//! kubelet as `--node-labels` (k3s `node-label`); a kubelet given one it may not set
//! refuses to start (the NodeRestriction rules), so the VM never joins. Mirrors the
//! kubelet's own check: a key whose prefix is `kubernetes.io` or `k8s.io` (or a
//! subdomain of either) must be in [`KUBELET_LABELS`] or under a prefix of
//! [`KUBELET_LABEL_NAMESPACES`].

/// Keys in the Kubernetes namespaces a kubelet may set on itself.
pub const KUBELET_LABELS: &[&str] = &[
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// Prefixes (and their subdomains) under which a kubelet may set any key.
pub const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn prefix(key: &str) -> Option<&str> {
    key.split_once('/').map(|(p, _)| p)
}

fn in_domain(prefix: &str, domain: &str) -> bool {
    prefix == domain
        || prefix
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Whether a kubelet refuses to start with `key` in `--node-labels`.
pub fn kubelet_refuses(key: &str) -> bool {
    let Some(prefix) = prefix(key) else {
        return false;
    };
    let kubernetes = in_domain(prefix, "kubernetes.io") || in_domain(prefix, "k8s.io");
    kubernetes
        && !KUBELET_LABELS.contains(&key)
        && !KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|ns| in_domain(prefix, ns))
}

/// Why `key` cannot be a group label, and what to do instead.
pub fn refusal(group: &str, key: &str, value: &str) -> String {
    let name = key.rsplit('/').next().unwrap_or(key);
    let suggestion = if key.starts_with("node-role.kubernetes.io/") {
        format!("`example.com/role: {name}`")
    } else {
        let value = if value.is_empty() { "\"\"" } else { value };
        format!("`example.com/{name}: {value}`")
    };
    format!(
        "group `{group}`: `{key}` cannot be set by a kubelet (NodeRestriction: in the kubernetes.io and k8s.io namespaces a kubelet may only set keys under {} and {}), so the node would never join; use a label in your own namespace such as {suggestion}, or apply this label by another means once the node has joined (e.g. `kubectl label node`)",
        KUBELET_LABEL_NAMESPACES
            .iter()
            .map(|ns| format!("`{ns}/`"))
            .collect::<Vec<_>>()
            .join(", "),
        KUBELET_LABELS
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_namespaces_outside_the_kubelet_set_are_refused() {
        for key in [
            "node-role.kubernetes.io/worker",
            "kubernetes.io/role",
            "app.kubernetes.io/name",
            "k8s.io/x",
            "foo.k8s.io/x",
            "node-restriction.kubernetes.io/x",
            "failure-domain.kubernetes.io/zone",
        ] {
            assert!(kubelet_refuses(key), "{key}");
        }
        for key in [
            "role",
            "example.com/role",
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/anything",
            "a.node.kubernetes.io/x",
            "kubelet.kubernetes.io/x",
            "beta.kubernetes.io/arch",
            "notkubernetes.io/x",
            "xk8s.io/x",
        ] {
            assert!(!kubelet_refuses(key), "{key}");
        }
    }

    #[test]
    fn refusal_names_group_key_and_a_fix() {
        let m = refusal("workers", "node-role.kubernetes.io/worker", "true");
        assert!(m.contains("group `workers`"), "{m}");
        assert!(
            m.contains(
                "`node-role.kubernetes.io/worker` cannot be set by a kubelet (NodeRestriction"
            ),
            "{m}"
        );
        assert!(m.contains("`example.com/role: worker`"), "{m}");
        assert!(m.contains("by another means"), "{m}");
    }
}
