//! References to the objects actions and reasons name: a VM across providers, a pod, any
//! Kubernetes object (for Events on it).

use std::fmt;

use serde::Serialize;

use super::objects::PodInfo;

/// Identifies a VM across providers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerRef {
    pub provider: String,
    pub id: String,
    pub name: String,
    pub group: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Kubernetes object a reason is about (for Events on it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectRef {
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn node(name: &str) -> ObjectRef {
        ObjectRef {
            kind: "Node".into(),
            namespace: None,
            name: name.to_string(),
        }
    }

    pub fn pod(p: &PodInfo) -> ObjectRef {
        ObjectRef {
            kind: "Pod".into(),
            namespace: Some(p.namespace.clone()),
            name: p.name.clone(),
        }
    }
}
