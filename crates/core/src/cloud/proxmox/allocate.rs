//! Listings, template disks, VM id allocation and the clone (placement: [`super::hosts`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::client::{params, Api, Params};
use super::tags::{split, CLUSTER_PREFIX};
use super::tasks::{follow_task, upid_of, Following, TaskDeadline};
use super::{other, seg, CloneMode, ProxmoxSettings};
use crate::cloud::CloudError;

fn de_flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Bool(b) => b,
        Value::Number(n) => n.as_i64().unwrap_or(0) != 0,
        Value::String(s) => s == "1",
        _ => false,
    })
}

/// A VM from `GET /cluster/resources?type=vm`.
#[derive(Debug, Clone, Deserialize)]
pub struct VmResource {
    #[serde(rename = "type", default)]
    pub kind: String,
    pub vmid: u32,
    pub node: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub status: String,
    #[serde(default, deserialize_with = "de_flag")]
    pub template: bool,
    #[serde(default)]
    pub tags: Option<String>,
    #[serde(default)]
    pub maxmem: Option<u64>,
    #[serde(default)]
    pub maxcpu: Option<f64>,
    #[serde(default)]
    pub lock: Option<String>,
}

impl VmResource {
    pub fn tags(&self) -> &str {
        self.tags.as_deref().unwrap_or("")
    }
    /// Carries a nodewright cluster tag (of any cluster).
    pub fn is_nodewright(&self) -> bool {
        split(self.tags())
            .iter()
            .any(|t| t.to_ascii_lowercase().starts_with(CLUSTER_PREFIX))
    }
}

/// A host from `GET /cluster/resources?type=node`.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeResource {
    pub node: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub maxmem: u64,
    #[serde(default)]
    pub mem: u64,
    /// Logical CPUs of the host.
    #[serde(default)]
    pub maxcpu: f64,
}

fn parse_list<T: serde::de::DeserializeOwned>(call: &str, v: Value) -> Result<Vec<T>, CloudError> {
    let items = match v {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        other_v => return Err(other(format!("{call}: expected a list, got {other_v}"))),
    };
    // One malformed entry must not hide the others: skip it with a warning.
    Ok(items
        .into_iter()
        .filter_map(|i| match serde_json::from_value::<T>(i) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(call, error = %e, "skipping an unexpected Proxmox resource entry");
                None
            }
        })
        .collect())
}

/// All QEMU VMs of the cluster (templates included).
pub async fn list_vms(api: &Api) -> Result<Vec<VmResource>, CloudError> {
    let data = api
        .get("/cluster/resources", &params([("type", "vm".into())]))
        .await?;
    let all: Vec<VmResource> = parse_list("GET /cluster/resources?type=vm", data)?;
    Ok(all.into_iter().filter(|v| v.kind == "qemu").collect())
}

pub fn vm_path(node: &str, vmid: u32) -> String {
    format!("/nodes/{}/qemu/{vmid}", seg(node))
}

/// The VM configuration (`GET .../config`) as a map of strings.
pub async fn vm_config(
    api: &Api,
    node: &str,
    vmid: u32,
) -> Result<BTreeMap<String, String>, CloudError> {
    let data = api
        .get(&format!("{}/config", vm_path(node, vmid)), &[])
        .await?;
    let mut out = BTreeMap::new();
    if let Value::Object(m) = data {
        for (k, v) in m {
            let s = match v {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => u8::from(b).to_string(),
                _ => continue,
            };
            out.insert(k, s);
        }
    }
    Ok(out)
}

/// Is `key` a disk (or cloud-init drive) entry of a VM configuration?
fn is_disk_key(key: &str) -> bool {
    let base = key.trim_end_matches(|c: char| c.is_ascii_digit());
    matches!(
        base,
        "scsi" | "virtio" | "sata" | "ide" | "efidisk" | "tpmstate"
    ) && base.len() < key.len()
}

/// Storages the template's disks live on.
pub fn template_storages(config: &BTreeMap<String, String>) -> BTreeSet<String> {
    config
        .iter()
        // ISO images and empty drives do not move with a clone; cloud-init drives do.
        .filter(|(k, v)| is_disk_key(k) && !v.contains(":iso/") && !v.starts_with("none"))
        .filter_map(|(_, v)| {
            let vol = v.split(',').next()?;
            let (storage, _) = vol.split_once(':')?;
            Some(storage.to_string())
        })
        .collect()
}

/// Whether every storage in `storages` is shared, per `GET /nodes/{node}/storage`.
pub async fn all_shared(
    api: &Api,
    node: &str,
    storages: &BTreeSet<String>,
) -> Result<bool, CloudError> {
    if storages.is_empty() {
        return Ok(true);
    }
    let data = api
        .get(&format!("/nodes/{}/storage", seg(node)), &[])
        .await?;
    let list = data.as_array().cloned().unwrap_or_default();
    // The template's disks are on these storages, so each exists on its host; Proxmox
    // leaves out of the list the storages the token may not see.
    let listed = |name: &str| list.iter().any(|s| s["storage"].as_str() == Some(name));
    if let Some(hidden) = storages.iter().find(|s| !listed(s)) {
        return Err(other(format!(
            "storage {hidden} of the template is not visible on host {node}: the token may lack Datastore.Audit on /storage/{hidden}"
        )));
    }
    let shared: BTreeSet<String> = list
        .iter()
        .filter(|s| s["shared"].as_i64() == Some(1) || s["shared"].as_bool() == Some(true))
        .filter_map(|s| s["storage"].as_str().map(str::to_string))
        .collect();
    Ok(storages.iter().all(|s| shared.contains(s)))
}

/// The clone's check is `VM.Clone` on the template and `VM.Allocate` on the new id or
/// the pool; when the second fails Proxmox answers a bare `Permission check failed`
/// (a failed `or` names nothing), so the error says what is missing.
fn name_clone_privilege(e: CloudError, newid: u32, pool: Option<&str>) -> CloudError {
    match e {
        CloudError::Api {
            provider,
            call,
            status: 403,
            message,
        } if !message.contains('(') => {
            let on = match pool {
                Some(p) => format!("/vms/{newid} or /pool/{p}"),
                None => format!("/vms/{newid}"),
            };
            CloudError::Api {
                provider,
                call,
                status: 403,
                message: format!(
                    "{}: the token lacks VM.Allocate on {on} (the new VM's id; grant it on / as docs/proxmox.md shows)",
                    message.trim_end()
                ),
            }
        }
        e => e,
    }
}

fn already_exists(e: &CloudError) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("already exists")
}

/// `GET /cluster/nextid`, optionally asking whether `from` is free; a taken id is
/// skipped upwards.
async fn next_free_id(api: &Api, from: Option<u32>) -> Result<u32, CloudError> {
    let mut candidate = from;
    for _ in 0..1000 {
        let p: Params = match candidate {
            Some(c) => params([("vmid", c.to_string())]),
            None => Vec::new(),
        };
        match api.get("/cluster/nextid", &p).await {
            Ok(v) => {
                let id = match &v {
                    Value::String(s) => s.parse::<u32>().ok(),
                    Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
                    _ => None,
                };
                return id
                    .ok_or_else(|| other(format!("GET /cluster/nextid: unexpected answer {v}")));
            }
            Err(e) if candidate.is_some() && already_exists(&e) => {
                candidate = candidate.map(|c| c + 1);
            }
            Err(e) => return Err(e),
        }
    }
    Err(other("no free VM id found"))
}

/// What to clone and how.
pub struct CloneSpec<'a> {
    pub template: &'a VmResource,
    pub target: &'a str,
    pub name: &'a str,
    /// Set in the clone call itself, for the VM id tried: ownership marks for the time
    /// before the tags exist, and the id that tells the VM from a person's copy of it.
    pub description: &'a (dyn Fn(u32) -> String + Sync),
    pub settings: &'a ProxmoxSettings,
    pub attempts: u32,
    /// Deadline of the clone task, following its log (see [`TaskDeadline`]).
    pub deadline: TaskDeadline,
    pub poll: Duration,
    /// Where the clone's UPID is marked as followed while this call follows it.
    pub following: &'a Following,
    /// Where the new VM id goes when its clone task fails or is given up: whatever such
    /// a clone leaves is never finished, only removed as half-made.
    pub failed: &'a StdMutex<HashSet<u32>>,
}

/// Allocates a VM id and clones the template into it. `/cluster/nextid` reserves
/// nothing, so an id taken meanwhile ("already exists") moves on to the next one.
pub async fn clone_vm(api: &Api, spec: &CloneSpec<'_>) -> Result<u32, CloudError> {
    let mut floor: Option<u32> = None;
    let mut last_err = None;
    for _ in 0..spec.attempts.max(1) {
        let mut id = next_free_id(api, floor).await?;
        if let Some(f) = floor {
            // nextid without a hint may hand out the id that just collided again.
            if id < f {
                id = next_free_id(api, Some(f)).await?;
            }
        }
        let mut p = params([
            ("newid", id.to_string()),
            ("name", spec.name.to_string()),
            ("description", (spec.description)(id)),
            (
                "full",
                if spec.settings.clone == CloneMode::Full {
                    "1"
                } else {
                    "0"
                }
                .to_string(),
            ),
        ]);
        if spec.target != spec.template.node {
            p.push(("target".into(), spec.target.to_string()));
        }
        if spec.settings.clone == CloneMode::Full {
            if let Some(s) = &spec.settings.storage {
                p.push(("storage".into(), s.clone()));
            }
        }
        if let Some(pool) = &spec.settings.pool {
            p.push(("pool".into(), pool.clone()));
        }
        let path = format!("{}/clone", vm_path(&spec.template.node, spec.template.vmid));
        let result = match api.post(&path, &p).await {
            Ok(data) => {
                let upid = upid_of(&format!("POST {path}"), &data)?;
                let _followed = spec.following.hold(&upid);
                let done = follow_task(api, &upid, spec.deadline, spec.poll).await;
                if done.as_ref().is_err_and(|e| !already_exists(e)) {
                    spec.failed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id);
                }
                done
            }
            Err(e) => Err(name_clone_privilege(e, id, spec.settings.pool.as_deref())),
        };
        match result {
            Ok(()) => return Ok(id),
            Err(e) if already_exists(&e) => {
                tracing::info!(vmid = id, error = %e, "VM id taken meanwhile; trying the next one");
                floor = Some(id + 1);
                last_err = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| other("cloning failed")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disks_and_storages() {
        let cfg: BTreeMap<String, String> = [
            ("scsi0", "local-lvm:base-9000-disk-0,size=8G"),
            ("ide2", "local-lvm:vm-9000-cloudinit,media=cdrom"),
            ("ide0", "ceph:vm-9000-cloudinit"),
            ("net0", "virtio=AA:BB:CC:DD:EE:FF,bridge=vmbr0"),
            ("scsihw", "virtio-scsi-pci"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let s = template_storages(&cfg);
        assert_eq!(
            s,
            ["ceph", "local-lvm"]
                .into_iter()
                .map(String::from)
                .collect()
        );
    }
}
