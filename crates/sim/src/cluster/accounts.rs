//! The kinds of identity and access a deployment brings along (ServiceAccount, Secret,
//! Service, Role, ClusterRole and their bindings), so `kubectl apply` of the project's
//! Helm and kustomize output works on the simulated cluster, and the RBAC objects there
//! decide what a ServiceAccount's token may do (see `rbac`).

use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::Value;

use super::resources::{roundtrip, ResourceDef};

const NO_NAMES: &[&str] = &[];

/// The real server refuses a binding without a roleRef name or kind it knows.
fn normalize_binding<T>(v: Value) -> Result<Value, String>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let v = roundtrip::<T>(v)?;
    match v.pointer("/roleRef/kind").and_then(Value::as_str) {
        Some("Role" | "ClusterRole") => {}
        other => {
            return Err(format!(
            "roleRef.kind: Unsupported value: {:?}: supported values: \"Role\", \"ClusterRole\"",
            other.unwrap_or_default()
        ))
        }
    }
    if v.pointer("/roleRef/name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("roleRef.name: Required value".into());
    }
    Ok(v)
}

/// A rule without verbs, or without resources and nonResourceURLs, grants nothing: the
/// real server refuses it.
fn normalize_role<T>(v: Value) -> Result<Value, String>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let v = roundtrip::<T>(v)?;
    for (i, rule) in v
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let empty = |k: &str| {
            rule.get(k)
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
        };
        if empty("verbs") {
            return Err(format!(
                "rules[{i}].verbs: Required value: verbs must contain at least one value"
            ));
        }
        if empty("resources") && empty("nonResourceURLs") {
            return Err(format!(
                "rules[{i}].resources: Required value: resource rules must supply at least one resource"
            ));
        }
    }
    Ok(v)
}

pub static SERVICEACCOUNTS: ResourceDef = ResourceDef {
    id: "serviceaccounts",
    group: "",
    version: "v1",
    plural: "serviceaccounts",
    singular: "serviceaccount",
    kind: "ServiceAccount",
    namespaced: true,
    short_names: &["sa"],
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<ServiceAccount>,
};

pub static SECRETS: ResourceDef = ResourceDef {
    id: "secrets",
    group: "",
    version: "v1",
    plural: "secrets",
    singular: "secret",
    kind: "Secret",
    namespaced: true,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<Secret>,
};

pub static SERVICES: ResourceDef = ResourceDef {
    id: "services",
    group: "",
    version: "v1",
    plural: "services",
    singular: "service",
    kind: "Service",
    namespaced: true,
    short_names: &["svc"],
    categories: &["all"],
    status_subresource: true,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<Service>,
};

pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

pub static ROLES: ResourceDef = ResourceDef {
    id: "roles.rbac.authorization.k8s.io",
    group: RBAC_GROUP,
    version: "v1",
    plural: "roles",
    singular: "role",
    kind: "Role",
    namespaced: true,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_role::<Role>,
};

pub static CLUSTERROLES: ResourceDef = ResourceDef {
    id: "clusterroles.rbac.authorization.k8s.io",
    group: RBAC_GROUP,
    version: "v1",
    plural: "clusterroles",
    singular: "clusterrole",
    kind: "ClusterRole",
    namespaced: false,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_role::<ClusterRole>,
};

pub static ROLEBINDINGS: ResourceDef = ResourceDef {
    id: "rolebindings.rbac.authorization.k8s.io",
    group: RBAC_GROUP,
    version: "v1",
    plural: "rolebindings",
    singular: "rolebinding",
    kind: "RoleBinding",
    namespaced: true,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_binding::<RoleBinding>,
};

pub static CLUSTERROLEBINDINGS: ResourceDef = ResourceDef {
    id: "clusterrolebindings.rbac.authorization.k8s.io",
    group: RBAC_GROUP,
    version: "v1",
    plural: "clusterrolebindings",
    singular: "clusterrolebinding",
    kind: "ClusterRoleBinding",
    namespaced: false,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_binding::<ClusterRoleBinding>,
};
