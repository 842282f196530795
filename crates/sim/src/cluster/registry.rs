//! The registries the simulated kubelets pull from, and the node image lists they keep.
//!
//! As a real kubelet with containerd: an image the node has is not pulled again (unless
//! its `imagePullPolicy` is `Always`); an image no registry has fails with
//! `ErrImagePull`, then `ImagePullBackOff` between tries (10 s doubling to 5 min); an
//! image of a private registry pulls only with credentials for that registry from one of
//! the pod's `imagePullSecrets` (Secrets of type `kubernetes.io/dockerconfigjson` in the
//! pod's namespace; a Secret that does not exist is skipped, as the kubelet does after
//! its `FailedToRetrieveImagePullSecret` warning). A node's `status.images` lists its
//! images largest first and only the first 50 (`--node-status-max-images`), while the
//! node keeps them all.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine as _;
use nodewright_core::model::normalize_image;
use serde_json::Value;

use super::meta;
use super::objects;
use super::resources::SECRETS;
use super::store::Txn;
use super::SimCluster;

/// The kubelet's default `--node-status-max-images`.
pub const LISTED_IMAGES: usize = 50;

/// First wait after a failed pull; it doubles per failure up to [`MAX_PULL_BACKOFF`].
pub const PULL_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_PULL_BACKOFF: Duration = Duration::from_secs(300);

#[derive(Debug, Default, Clone)]
pub struct Registries {
    /// Private registry hosts, each with the `auth` (base64 of `user:password`) it takes.
    private: BTreeMap<String, String>,
    /// Images (normalized) that no registry has.
    missing: BTreeSet<String>,
}

/// The containers of a pull that failed: `(container, image, message)`.
pub type Failed = Vec<(String, String, String)>;

fn host(normalized: &str) -> &str {
    normalized.split('/').next().unwrap_or_default()
}

impl Registries {
    /// Why `image` cannot be pulled by a pod in namespace `ns` naming `secrets`, if it
    /// cannot.
    fn refuses(&self, txn: &Txn<'_>, image: &str, ns: &str, secrets: &[String]) -> Option<String> {
        let n = normalize_image(image);
        if self.missing.contains(&n) {
            return Some(format!(
                "failed to pull and unpack image \"{n}\": failed to resolve reference \"{n}\": {n}: not found"
            ));
        }
        let want = self.private.get(host(&n))?;
        let granted = secrets
            .iter()
            .any(|s| secret_auth(txn, ns, s, host(&n)).as_ref() == Some(want));
        (!granted).then(|| {
            format!(
                "failed to pull and unpack image \"{n}\": failed to authorize: failed to fetch anonymous token: unexpected status from GET request: 401 Unauthorized"
            )
        })
    }

    /// Pulls what `pod` needs onto a node that has `have`: the images pulled, and the
    /// containers whose image could not be.
    pub fn pull(
        &self,
        txn: &Txn<'_>,
        have: &BTreeSet<String>,
        pod: &Value,
    ) -> (Vec<String>, Failed) {
        let ns = meta::namespace(pod);
        let secrets: Vec<String> = meta::path(pod, &["spec", "imagePullSecrets"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        let have: BTreeSet<String> = have.iter().map(|i| normalize_image(i)).collect();
        let mut pulled = Vec::new();
        let mut failed = Vec::new();
        for c in ["initContainers", "containers"]
            .iter()
            .filter_map(|f| meta::path(pod, &["spec", f]).and_then(Value::as_array))
            .flatten()
        {
            let Some(image) = c.get("image").and_then(Value::as_str) else {
                continue;
            };
            let always = c.get("imagePullPolicy").and_then(Value::as_str) == Some("Always");
            if have.contains(&normalize_image(image)) && !always {
                continue;
            }
            match self.refuses(txn, image, ns, &secrets) {
                None => pulled.push(image.to_string()),
                Some(why) => {
                    let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
                    failed.push((name.to_string(), image.to_string(), why));
                }
            }
        }
        (pulled, failed)
    }
}

/// The `auth` a dockerconfigjson Secret `ns`/`name` holds for registry `host`.
fn secret_auth(txn: &Txn<'_>, ns: &str, name: &str, host: &str) -> Option<String> {
    let secret = txn.get(&SECRETS, ns, name)?;
    if secret.get("type").and_then(Value::as_str) != Some("kubernetes.io/dockerconfigjson") {
        return None;
    }
    let encoded = meta::path_str(secret, &["data", ".dockerconfigjson"])?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let config: Value = serde_json::from_slice(&raw).ok()?;
    let entry = config.get("auths")?.get(host)?;
    if let Some(auth) = entry.get("auth").and_then(Value::as_str) {
        return Some(auth.to_string());
    }
    let user = entry.get("username").and_then(Value::as_str)?;
    let password = entry.get("password").and_then(Value::as_str)?;
    Some(base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

/// `status.images` for a node holding `images`: largest first, the first
/// [`LISTED_IMAGES`] only, as the kubelet reports them.
pub fn listing<'a>(images: impl IntoIterator<Item = &'a String>) -> Vec<Value> {
    let mut entries: Vec<Value> = images
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|i| objects::image_entry(i))
        .collect();
    entries.sort_by_key(|e| std::cmp::Reverse(e.get("sizeBytes").and_then(Value::as_u64)));
    entries.truncate(LISTED_IMAGES);
    entries
}

impl SimCluster {
    /// Makes registry `host` private: pulls from it need a pull secret whose
    /// `.dockerconfigjson` grants `user`:`password` for it.
    pub fn private_registry(&self, host: &str, user: &str, password: &str) {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        super::kubelet::lock(&self.inner.kubelet)
            .registries
            .private
            .insert(host.to_string(), auth);
    }

    /// Makes `image` one that no registry has: pulling it fails.
    pub fn missing_image(&self, image: &str) {
        super::kubelet::lock(&self.inner.kubelet)
            .registries
            .missing
            .insert(normalize_image(image));
    }

    /// Every image node `name` holds, listed or not.
    pub fn node_images(&self, name: &str) -> BTreeSet<String> {
        let k = super::kubelet::lock(&self.inner.kubelet);
        k.node_images.get(name).cloned().unwrap_or_default()
    }
}
