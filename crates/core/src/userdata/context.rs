//! What a template sees of the node being created: [`RenderContext`] and the built-in
//! variables made from it (ownership labels, the startup taint, `k3s_node_args`). Apart
//! from rendering, which merges them with the group's own variables.

use std::collections::BTreeMap;

use crate::model::{KubeVersion, LABEL_CLUSTER, LABEL_GROUP, STARTUP_TAINT_KEY};

/// What nodewright knows about the node being created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderContext {
    pub cluster_name: String,
    pub group: String,
    pub node_name: String,
    /// Group labels plus [`LABEL_CLUSTER`] and [`LABEL_GROUP`].
    pub labels: BTreeMap<String, String>,
    /// Group taints, each `key=value:Effect` (or `key:Effect`).
    pub taints: Vec<String>,
    /// `nodewright.io/startup=true:NoSchedule`.
    pub startup_taint: String,
    /// The API server's `gitVersion` (`v1.31.4+k3s1`), when known: the version a new
    /// node installs unless the group pins one.
    pub server_version: Option<KubeVersion>,
    /// The kubeadm join credentials nodewright minted for this node
    /// (`userData.bootstrapToken`), if any.
    pub join: Option<crate::model::JoinCredentials>,
}

/// The names a template gets from nodewright; `variables` may not reuse them.
pub const BUILTIN_VARIABLES: &[&str] = &[
    "cluster_name",
    "group",
    "node_name",
    "labels",
    "taints",
    "startup_taint",
    "all_taints",
    "k3s_node_args",
    "server_version",
    "kube_version",
    "bootstrap_token",
    "api_server_endpoint",
    "ca_cert_hash",
];

/// The startup taint every new node registers with, `key=true:NoSchedule`.
pub fn startup_taint() -> String {
    format!("{STARTUP_TAINT_KEY}=true:NoSchedule")
}

impl RenderContext {
    /// Builds the context for one node: adds nodewright's ownership labels (which win
    /// over group labels of the same key) and the startup taint.
    pub fn new(
        cluster_name: impl Into<String>,
        group: impl Into<String>,
        node_name: impl Into<String>,
        group_labels: &BTreeMap<String, String>,
        group_taints: Vec<String>,
    ) -> Self {
        let cluster_name = cluster_name.into();
        let group = group.into();
        let mut labels = group_labels.clone();
        labels.insert(LABEL_CLUSTER.to_string(), cluster_name.clone());
        labels.insert(LABEL_GROUP.to_string(), group.clone());
        RenderContext {
            cluster_name,
            group,
            node_name: node_name.into(),
            labels,
            taints: group_taints,
            startup_taint: startup_taint(),
            server_version: None,
            join: None,
        }
    }

    /// The context with the API server's version (its `/version` `gitVersion`); an
    /// unparsable one is left out, as an unknown one is.
    pub fn with_server_version(mut self, git_version: Option<&str>) -> Self {
        self.server_version = git_version.and_then(KubeVersion::parse);
        self
    }

    /// This context with the kubeadm join credentials minted for the node.
    pub fn with_join(mut self, join: Option<crate::model::JoinCredentials>) -> Self {
        self.join = join;
        self
    }

    /// Group taints followed by the startup taint.
    pub fn all_taints(&self) -> Vec<String> {
        let mut all = self.taints.clone();
        all.push(self.startup_taint.clone());
        all
    }

    /// `k3s agent` flags for this node: node name, labels, taints (incl. startup).
    pub fn k3s_node_args(&self) -> Vec<String> {
        let mut args = vec![format!("--node-name={}", self.node_name)];
        args.extend(
            self.labels
                .iter()
                .map(|(k, v)| format!("--node-label={k}={v}")),
        );
        args.extend(
            self.all_taints()
                .into_iter()
                .map(|t| format!("--node-taint={t}")),
        );
        args
    }

    pub(super) fn builtins(&self) -> BTreeMap<&'static str, serde_json::Value> {
        use serde_json::Value;
        let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
        let mut out = BTreeMap::from([
            ("cluster_name", Value::String(self.cluster_name.clone())),
            ("group", Value::String(self.group.clone())),
            ("node_name", Value::String(self.node_name.clone())),
            (
                "labels",
                Value::Object(
                    self.labels
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect(),
                ),
            ),
            ("taints", strings(self.taints.clone())),
            ("startup_taint", Value::String(self.startup_taint.clone())),
            ("all_taints", strings(self.all_taints())),
            ("k3s_node_args", strings(self.k3s_node_args())),
        ]);
        // Left undefined when unknown (templates guard with `is defined`).
        if let Some(v) = &self.server_version {
            out.insert("server_version", Value::String(v.to_string()));
            out.insert("kube_version", Value::String(v.release()));
        }
        if let Some(j) = &self.join {
            out.insert("bootstrap_token", Value::String(j.token.clone()));
            out.insert(
                "api_server_endpoint",
                Value::String(j.api_server_endpoint.clone()),
            );
            out.insert("ca_cert_hash", Value::String(j.ca_cert_hash.clone()));
        }
        out
    }
}
