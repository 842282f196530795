//! The status ConfigMap (like Cluster Autoscaler's `cluster-autoscaler-status`): what
//! nodewright sees and did last, readable with `kubectl get cm -o yaml`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

/// Writes `data` into the ConfigMap, creating it on first use.
pub async fn write_status(
    client: &Client,
    namespace: &str,
    name: &str,
    data: BTreeMap<String, String>,
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let patch = json!({"data": data});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"app.kubernetes.io/name": "nodewright"}
                },
                "data": data,
            }))
            .map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &cm).await.map(|_| ())
        }
        Err(e) => Err(e),
    }
}
