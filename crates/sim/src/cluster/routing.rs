//! Where a resource request points (resource, namespace, name, subresource) and which
//! verb it is, as RBAC would name it.

use axum::http::Method;
use serde_json::Value;

use super::discovery;
use super::resources::SERVICEACCOUNTS;
use super::resources::{self, ResourceDef, PODS};
use super::status::ApiError;

/// Where a resource request points.
#[derive(Debug)]
pub struct Target {
    pub res: &'static ResourceDef,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

pub enum Routed {
    Discovery(Value),
    Resource(Target),
}

pub fn route(path: &str) -> Result<Routed, ApiError> {
    let missing = || ApiError::page_not_found(path);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g] => {
            return discovery::group(g)
                .map(Routed::Discovery)
                .ok_or_else(missing)
        }
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(missing()),
    };
    if rest.is_empty() {
        return discovery::resource_list(group, version)
            .map(Routed::Discovery)
            .ok_or_else(missing);
    }
    let namespaced = match rest {
        ["namespaces", ns, plural, tail @ ..] if tail.len() <= 2 => {
            resources::find(group, version, plural)
                .filter(|r| r.namespaced)
                .map(|r| (r, Some(*ns), tail))
        }
        _ => None,
    };
    let (res, ns, tail) = match namespaced {
        Some(t) => t,
        None => {
            let res = resources::find(group, version, rest[0]).ok_or_else(missing)?;
            (res, None, &rest[1..])
        }
    };
    if tail.len() > 2 || (res.namespaced && ns.is_none() && !tail.is_empty()) {
        return Err(missing());
    }
    let sub = tail.get(1).map(|s| s.to_string());
    match sub.as_deref() {
        None => {}
        Some("status") if res.status_subresource => {}
        Some("eviction") if std::ptr::eq(res, &PODS) => {}
        Some("scale") if res.scale_subresource => {}
        Some("token") if std::ptr::eq(res, &SERVICEACCOUNTS) => {}
        Some(_) => return Err(missing()),
    }
    Ok(Routed::Resource(Target {
        res,
        ns: ns.map(str::to_string),
        name: tail.first().map(|s| s.to_string()),
        sub,
    }))
}

pub fn verb_of(method: &Method, t: &Target, watch: bool) -> Result<&'static str, ApiError> {
    Ok(
        match (method.as_str(), t.name.is_some(), t.sub.as_deref()) {
            ("GET", true, Some("eviction")) => {
                return Err(ApiError::method_not_allowed("eviction"))
            }
            ("GET", true, Some("token")) => return Err(ApiError::method_not_allowed("token")),
            ("GET", true, _) => "get",
            ("GET", false, _) if watch => "watch",
            ("GET", false, _) => "list",
            ("POST", true, Some("eviction" | "token")) => "create",
            ("POST", false, _) => "create",
            ("PUT", true, _) => "update",
            ("PATCH", true, _) => "patch",
            ("DELETE", true, None) => "delete",
            ("DELETE", false, _) => "deletecollection",
            _ => return Err(ApiError::method_not_allowed(method.as_str())),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parts = (String, Option<String>, Option<String>, Option<String>);

    fn target(path: &str) -> Option<Parts> {
        match route(path) {
            Ok(Routed::Resource(t)) => Some((t.res.id.to_string(), t.ns, t.name, t.sub)),
            _ => None,
        }
    }

    #[test]
    fn routing() {
        assert_eq!(
            target("/api/v1/nodes"),
            Some(("nodes".into(), None, None, None))
        );
        assert_eq!(
            target("/api/v1/nodes/n1/status"),
            Some((
                "nodes".into(),
                None,
                Some("n1".into()),
                Some("status".into())
            ))
        );
        assert_eq!(
            target("/api/v1/namespaces/default"),
            Some(("namespaces".into(), None, Some("default".into()), None))
        );
        assert_eq!(
            target("/api/v1/namespaces/d/pods/p/eviction"),
            Some((
                "pods".into(),
                Some("d".into()),
                Some("p".into()),
                Some("eviction".into())
            ))
        );
        assert_eq!(
            target("/apis/policy/v1/poddisruptionbudgets").map(|t| t.0),
            Some("poddisruptionbudgets.policy".into())
        );
        assert!(target("/api/v1/pods/p").is_none());
        assert!(target("/api/v1/namespaces/d/pods/p/log").is_none());
        assert!(target("/api/v1/nodes/n/eviction").is_none());
        assert_eq!(
            target("/apis/apps/v1/namespaces/d/deployments/web/scale").and_then(|t| t.3),
            Some("scale".into())
        );
        assert!(target("/api/v1/namespaces/d/pods/p/scale").is_none());
        assert!(matches!(route("/api/v1"), Ok(Routed::Discovery(_))));
        assert!(matches!(route("/apis/apps"), Ok(Routed::Discovery(_))));
        assert!(route("/apis/nope/v1").is_err());
    }
}
