//! Kubernetes RBAC evaluation: which rules of the Roles and ClusterRoles bound to a user
//! allow a request, and the real server's 403 when none does.
//!
//! As in Kubernetes: a ClusterRole bound by a ClusterRoleBinding applies everywhere, a
//! Role (or a ClusterRole bound by a RoleBinding) only in the binding's namespace;
//! subresources are `resource/subresource` (`*/scale` matches any resource's scale); a
//! rule with resourceNames matches only requests naming one of them (so never a create or
//! a list); non-resource URLs (`/version`, `/apis/...`) match `nonResourceURLs`, exactly or
//! by a trailing `*`, and only from cluster-wide bindings. Members of `system:masters`
//! are allowed everything without a look at the rules. An aggregated ClusterRole
//! (`aggregationRule`) grants the rules of the ClusterRoles its selectors match, as the
//! aggregation controller would write them into it (expanded when a request is judged,
//! one level deep; its stored `rules` are not rewritten).
//!
//! The same evaluator serves the simulated API server and `tests/rbac.rs` (which builds a
//! [`Policy`] from the shipped manifests).

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use serde_json::{json, Value};

use super::request::ApiCall;
use super::resources::{CLUSTERROLEBINDINGS, CLUSTERROLES, ROLEBINDINGS, ROLES};
use super::status::ApiError;
use super::store::Txn;

/// The group whose members the authorizer lets do anything.
pub const MASTERS: &str = "system:masters";

/// Who made a request, as the authenticator names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The user of the admin kubeconfig (`kubernetes-admin`, in `system:masters`).
    pub fn admin() -> Self {
        UserInfo {
            name: "kubernetes-admin".into(),
            groups: vec![MASTERS.into(), "system:authenticated".into()],
        }
    }

    /// The user of a request without credentials on the insecure port.
    pub fn unsecured() -> Self {
        UserInfo {
            name: "system:unsecured".into(),
            groups: vec![MASTERS.into(), "system:authenticated".into()],
        }
    }

    /// The user a ServiceAccount's token authenticates as.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    /// `(namespace, name)` when this is a ServiceAccount.
    fn service_account_id(&self) -> Option<(&str, &str)> {
        self.name
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
    }

    fn is(&self, s: &Subject) -> bool {
        match s.kind.as_str() {
            "User" => s.name == self.name,
            "Group" => self.groups.contains(&s.name),
            "ServiceAccount" => {
                self.service_account_id() == Some((s.namespace.as_deref().unwrap_or(""), &s.name))
            }
            _ => false,
        }
    }
}

/// One rule as it applies to one user: where (`None`: cluster-wide) and from which role
/// (`ClusterRole/NAME` or `Role/NS/NAME`).
#[derive(Debug, Clone)]
pub struct Grant {
    pub role: String,
    pub namespace: Option<String>,
    pub rule: PolicyRule,
}

/// The RBAC objects of a cluster (or of a set of manifests).
#[derive(Debug, Default, Clone)]
pub struct Policy {
    cluster_roles: BTreeMap<String, ClusterRole>,
    roles: BTreeMap<(String, String), Role>,
    cluster_bindings: Vec<ClusterRoleBinding>,
    bindings: Vec<RoleBinding>,
}

fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    serde_json::from_value(v.clone()).ok()
}

impl Policy {
    /// From objects of any kind; Roles, ClusterRoles and bindings are kept, other kinds
    /// and undecodable objects ignored.
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut p = Policy::default();
        for o in objects {
            match o.get("kind").and_then(Value::as_str) {
                Some("ClusterRole") => {
                    if let Some(r) = decode::<ClusterRole>(o) {
                        p.cluster_roles
                            .insert(r.metadata.name.clone().unwrap_or_default(), r);
                    }
                }
                Some("Role") => {
                    if let Some(r) = decode::<Role>(o) {
                        let key = (
                            r.metadata.namespace.clone().unwrap_or_default(),
                            r.metadata.name.clone().unwrap_or_default(),
                        );
                        p.roles.insert(key, r);
                    }
                }
                Some("ClusterRoleBinding") => p.cluster_bindings.extend(decode(o)),
                Some("RoleBinding") => p.bindings.extend(decode(o)),
                _ => {}
            }
        }
        p.aggregate();
        p
    }

    /// Each aggregated ClusterRole's rules become those of the other ClusterRoles whose
    /// labels one of its `clusterRoleSelectors` matches.
    fn aggregate(&mut self) {
        let aggregated: Vec<(String, Vec<super::selectors::LabelSelector>)> = self
            .cluster_roles
            .iter()
            .filter_map(|(name, r)| {
                let sels = r
                    .aggregation_rule
                    .as_ref()?
                    .cluster_role_selectors
                    .as_ref()?;
                let parsed = sels
                    .iter()
                    .filter_map(|s| {
                        let v = serde_json::to_value(s).ok()?;
                        super::selectors::LabelSelector::from_object(Some(&v))
                    })
                    .collect();
                Some((name.clone(), parsed))
            })
            .collect();
        for (name, selectors) in aggregated {
            let mut rules: Vec<PolicyRule> = Vec::new();
            for (other, r) in &self.cluster_roles {
                let labels = r.metadata.labels.clone().unwrap_or_default();
                if *other != name && selectors.iter().any(|s| s.matches(&labels)) {
                    for rule in r.rules.iter().flatten() {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
            }
            if let Some(r) = self.cluster_roles.get_mut(&name) {
                r.rules = Some(rules);
            }
        }
    }

    /// The policy stored in the simulated cluster. RoleBindings are read only from
    /// `namespace` (the request's), since no other applies to it.
    fn from_store(txn: &Txn<'_>, namespace: Option<&str>) -> Self {
        let mut objects: Vec<&Value> = Vec::new();
        objects.extend(txn.list(&CLUSTERROLES, None));
        objects.extend(txn.list(&CLUSTERROLEBINDINGS, None));
        if let Some(ns) = namespace {
            objects.extend(txn.list(&ROLES, Some(ns)));
            objects.extend(txn.list(&ROLEBINDINGS, Some(ns)));
        }
        Policy::from_objects(objects)
    }

    /// Every rule bound to `user`. A binding to a missing role grants nothing.
    pub fn grants(&self, user: &UserInfo) -> Vec<Grant> {
        let mut out = Vec::new();
        let binds = |subjects: &Option<Vec<Subject>>| subjects.iter().flatten().any(|s| user.is(s));
        for b in &self.cluster_bindings {
            if b.role_ref.kind != "ClusterRole" || !binds(&b.subjects) {
                continue;
            }
            if let Some(role) = self.cluster_roles.get(&b.role_ref.name) {
                for rule in role.rules.iter().flatten() {
                    out.push(Grant {
                        role: format!("ClusterRole/{}", b.role_ref.name),
                        namespace: None,
                        rule: rule.clone(),
                    });
                }
            }
        }
        for b in &self.bindings {
            if !binds(&b.subjects) {
                continue;
            }
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            let (role, rules) = match b.role_ref.kind.as_str() {
                "Role" => (
                    format!("Role/{ns}/{}", b.role_ref.name),
                    self.roles
                        .get(&(ns.clone(), b.role_ref.name.clone()))
                        .and_then(|r| r.rules.clone()),
                ),
                "ClusterRole" => (
                    format!("ClusterRole/{}", b.role_ref.name),
                    self.cluster_roles
                        .get(&b.role_ref.name)
                        .and_then(|r| r.rules.clone()),
                ),
                _ => continue,
            };
            for rule in rules.into_iter().flatten() {
                out.push(Grant {
                    role: role.clone(),
                    namespace: Some(ns.clone()),
                    rule,
                });
            }
        }
        out
    }

    /// Whether some rule bound to `user` allows `call`.
    pub fn allows(&self, user: &UserInfo, call: &ApiCall) -> bool {
        user.groups.iter().any(|g| g == MASTERS)
            || self.grants(user).iter().any(|g| grant_allows(g, call))
    }
}

fn any_or(list: &[String], item: &str) -> bool {
    list.iter().any(|x| x == "*" || x == item)
}

/// `resource` or `resource/subresource`, as rules name it.
pub fn call_resource(call: &ApiCall) -> String {
    match &call.subresource {
        Some(sub) => format!("{}/{sub}", call.resource),
        None => call.resource.clone(),
    }
}

fn resource_matches(rule: &[String], call: &ApiCall) -> bool {
    let full = call_resource(call);
    rule.iter().any(|r| {
        r == "*"
            || *r == full
            || call
                .subresource
                .as_ref()
                .is_some_and(|sub| *r == format!("*/{sub}"))
    })
}

fn url_matches(rule: &[String], path: &str) -> bool {
    rule.iter().any(|u| match u.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => u == path,
    })
}

/// Whether one rule, in the namespace it applies to, allows `call`.
pub fn grant_allows(g: &Grant, call: &ApiCall) -> bool {
    let r = &g.rule;
    if !any_or(&r.verbs, &call.verb) {
        return false;
    }
    if call.resource.is_empty() {
        return g.namespace.is_none()
            && url_matches(
                r.non_resource_urls.as_deref().unwrap_or_default(),
                &call.path,
            );
    }
    if let Some(ns) = &g.namespace {
        if call.namespace.as_deref() != Some(ns.as_str()) {
            return false;
        }
    }
    any_or(r.api_groups.as_deref().unwrap_or_default(), &call.group)
        && resource_matches(r.resources.as_deref().unwrap_or_default(), call)
        && match r.resource_names.as_deref() {
            None | Some([]) => true,
            Some(names) => call.name.as_ref().is_some_and(|n| names.contains(n)),
        }
}

/// The request as the authorizer sees it: a request on a namespace object is in that
/// namespace.
fn attributes(call: &ApiCall) -> ApiCall {
    let mut c = call.clone();
    if c.group.is_empty() && c.resource == "namespaces" && c.name.is_some() {
        c.namespace = c.name.clone();
    }
    c
}

/// Allows `call` by `user` under the RBAC objects in the store, or answers the real 403.
pub fn authorize(txn: &Txn<'_>, user: &UserInfo, call: &ApiCall) -> Result<(), ApiError> {
    if user.groups.iter().any(|g| g == MASTERS) {
        return Ok(());
    }
    let call = attributes(call);
    let policy = Policy::from_store(txn, call.namespace.as_deref());
    if policy.allows(user, &call) {
        Ok(())
    } else {
        Err(forbidden(user, &call))
    }
}

/// The real server's 403: `pods "p" is forbidden: User "..." cannot create resource
/// "pods/eviction" in API group "" in the namespace "default"`.
pub fn forbidden(user: &UserInfo, call: &ApiCall) -> ApiError {
    let who = &user.name;
    if call.resource.is_empty() {
        return ApiError {
            details: Some(json!({})),
            ..ApiError::new(
                403,
                "Forbidden",
                format!(
                    "forbidden: User {who:?} cannot {} path {:?}",
                    call.verb, call.path
                ),
            )
        };
    }
    let resource = call_resource(call);
    let scope = match &call.namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_string(),
    };
    let why = format!(
        "User {who:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        call.verb, call.group
    );
    let qualified = if call.group.is_empty() {
        call.resource.clone()
    } else {
        format!("{}.{}", call.resource, call.group)
    };
    let message = match &call.name {
        Some(name) => format!("{qualified} {name:?} is forbidden: {why}"),
        None => format!("{qualified} is forbidden: {why}"),
    };
    let mut details = json!({"kind": call.resource});
    if let Some(name) = &call.name {
        details["name"] = json!(name);
    }
    if !call.group.is_empty() {
        details["group"] = json!(call.group);
    }
    ApiError {
        details: Some(details),
        ..ApiError::new(403, "Forbidden", message)
    }
}

/// The bootstrap policy every cluster starts with: `cluster-admin` for `system:masters`,
/// and discovery, `/version` and health checks for every authenticated user.
pub fn bootstrap_objects() -> Vec<(&'static super::resources::ResourceDef, Value)> {
    let discovery_urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/openapi",
        "/openapi/*",
        "/version",
        "/version/",
        "/healthz",
        "/livez",
        "/readyz",
    ];
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "rules": rules})
    };
    let binding = |name: &str, group: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]})
    };
    vec![
        (
            &CLUSTERROLES,
            role(
                "cluster-admin",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                       {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
            ),
        ),
        (&CLUSTERROLEBINDINGS, binding("cluster-admin", MASTERS)),
        (
            &CLUSTERROLES,
            role(
                "system:discovery",
                json!([{"nonResourceURLs": discovery_urls, "verbs": ["get"]}]),
            ),
        ),
        (
            &CLUSTERROLEBINDINGS,
            binding("system:discovery", "system:authenticated"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(
        verb: &str,
        group: &str,
        resource: &str,
        ns: Option<&str>,
        name: Option<&str>,
    ) -> ApiCall {
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
            path: "/x".into(),
        }
    }

    #[test]
    fn forbidden_messages_are_worded_as_the_real_server_words_them() {
        let sa = UserInfo::service_account("nw", "bot");
        let e = forbidden(&sa, &call("list", "", "pods", Some("default"), None));
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods is forbidden: User \"system:serviceaccount:nw:bot\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let e = forbidden(
            &sa,
            &call(
                "update",
                "coordination.k8s.io",
                "leases",
                Some("nw"),
                Some("l"),
            ),
        );
        assert_eq!(
            e.message,
            "leases.coordination.k8s.io \"l\" is forbidden: User \"system:serviceaccount:nw:bot\" cannot update resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"nw\""
        );
        let e = forbidden(&sa, &call("patch", "", "nodes", None, Some("n1")));
        assert!(e.message.ends_with("at the cluster scope"), "{}", e.message);
        let e = forbidden(
            &sa,
            &call("create", "", "pods/eviction", Some("d"), Some("p")),
        );
        assert!(
            e.message.contains("resource \"pods/eviction\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn subresource_wildcards_and_non_resource_urls() {
        let g = |rule: Value, ns: Option<&str>| Grant {
            role: "r".into(),
            namespace: ns.map(str::to_string),
            rule: serde_json::from_value(rule).expect("rule"),
        };
        let scale = g(
            json!({"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["patch"]}),
            None,
        );
        assert!(grant_allows(
            &scale,
            &call("patch", "apps", "deployments/scale", Some("d"), Some("w"))
        ));
        assert!(!grant_allows(
            &scale,
            &call("patch", "apps", "deployments", Some("d"), Some("w"))
        ));
        let urls = g(
            json!({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}),
            None,
        );
        let mut c = call("get", "", "", None, None);
        c.resource.clear();
        c.path = "/apis/apps/v1".into();
        assert!(grant_allows(&urls, &c));
        c.path = "/version".into();
        assert!(!grant_allows(&urls, &c));
        // A namespaced binding never grants non-resource URLs.
        let ns_urls = g(json!({"nonResourceURLs": ["*"], "verbs": ["*"]}), Some("d"));
        assert!(!grant_allows(&ns_urls, &c));
    }
}
