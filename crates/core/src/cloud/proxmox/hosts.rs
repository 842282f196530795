//! The Proxmox side of host capacity: one `/cluster/resources` listing answers the guests,
//! the hosts and the storages; HA status says which hosts are in maintenance;
//! `/cluster/status` names the cluster; and a group's template may have one copy per host.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;

use super::allocate::{NodeResource, VmResource};
use super::client::Api;
use super::tags::{ownership, split};
use super::{other, ProxmoxSettings, TemplateRef, PROVIDER};
use crate::cloud::{CloudError, CreateRequest};
use crate::model::{GroupHosts, GroupShape, Host, HostState, VmSize};

/// What one untyped `GET /cluster/resources` says.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// QEMU VMs, templates included.
    pub vms: Vec<VmResource>,
    pub nodes: Vec<NodeResource>,
    /// Configured vCPUs × 1000 and memory of the guests (VMs and containers, not
    /// templates) on each host.
    pub taken: BTreeMap<String, (u64, u64)>,
    /// Shared storages, per host that sees them.
    pub shared: BTreeMap<String, BTreeSet<String>>,
    /// Every storage listed, per host: Proxmox lists one only to a token holding
    /// `Datastore.Audit` on it (see [`hidden_storage`]).
    pub storages: BTreeMap<String, BTreeSet<String>>,
}

#[derive(Deserialize)]
struct Guest {
    node: String,
    #[serde(default)]
    maxcpu: Option<f64>,
    #[serde(default)]
    maxmem: Option<u64>,
    #[serde(default)]
    template: Option<Value>,
}

#[derive(Deserialize)]
struct Storage {
    node: String,
    storage: String,
    #[serde(default)]
    shared: Option<Value>,
}

fn flag(v: &Option<Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0) != 0,
        Some(Value::String(s)) => s == "1",
        _ => false,
    }
}

/// One malformed entry must not hide the others: it is skipped with a warning.
fn parse<T: serde::de::DeserializeOwned>(kind: &str, item: &Value) -> Option<T> {
    match serde_json::from_value::<T>(item.clone()) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(kind, error = %e, "skipping an unexpected Proxmox resource entry");
            None
        }
    }
}

/// Guests, hosts and storages in one call (`GET /cluster/resources` without `type`).
pub async fn list_all(api: &Api) -> Result<Listing, CloudError> {
    let data = api.get("/cluster/resources", &[]).await?;
    let items = match data {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        v => {
            return Err(other(format!(
                "GET /cluster/resources: expected a list, got {v}"
            )))
        }
    };
    let mut out = Listing::default();
    for item in &items {
        let kind = item["type"].as_str().unwrap_or_default();
        match kind {
            "qemu" | "lxc" => {
                if kind == "qemu" {
                    if let Some(vm) = parse::<VmResource>(kind, item) {
                        out.vms.push(vm);
                    }
                }
                if let Some(g) = parse::<Guest>(kind, item) {
                    if !flag(&g.template) {
                        let t = out.taken.entry(g.node).or_default();
                        let cpu = g.maxcpu.unwrap_or(0.0).max(0.0) * 1000.0;
                        t.0 = t.0.saturating_add(cpu.ceil() as u64);
                        t.1 = t.1.saturating_add(g.maxmem.unwrap_or(0));
                    }
                }
            }
            "node" => {
                if let Some(n) = parse::<NodeResource>(kind, item) {
                    out.nodes.push(n);
                }
            }
            "storage" => {
                if let Some(s) = parse::<Storage>(kind, item) {
                    out.storages
                        .entry(s.node.clone())
                        .or_default()
                        .insert(s.storage.clone());
                    if flag(&s.shared) {
                        out.shared.entry(s.node).or_default().insert(s.storage);
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(host) = host_without_figures(&items) {
        return Err(sys_audit_missing(&host));
    }
    Ok(out)
}

/// The first online host listed without its CPU and memory. Proxmox lists every host to
/// every token, but its figures only to one holding `Sys.Audit` on `/nodes/{node}`:
/// without them a host would look as if it had no room, and the groups would stall
/// with no error.
pub fn host_without_figures(items: &[Value]) -> Option<String> {
    items
        .iter()
        .filter(|i| i["type"].as_str() == Some("node"))
        .filter(|i| i["status"].as_str() == Some("online"))
        .find(|i| i.get("maxmem").is_none() && i.get("maxcpu").is_none())
        .and_then(|i| i["node"].as_str().map(str::to_string))
}

/// The error for a host listed without its figures.
pub fn sys_audit_missing(host: &str) -> CloudError {
    other(format!(
        "Proxmox lists host {host} without its CPU and memory: the token lacks Sys.Audit on /nodes/{host} (grant it on / as docs/proxmox.md shows)"
    ))
}

/// A storage of `storages` (a template copy's disks, on `host`) that the listing does
/// not show there: Proxmox lists a storage in `/cluster/resources` only to a token
/// holding `Datastore.Audit` on it, so without it a shared template would look local.
pub fn hidden_storage(
    listing: &Listing,
    host: &str,
    storages: &BTreeSet<String>,
) -> Result<(), CloudError> {
    let seen = listing.storages.get(host);
    match storages
        .iter()
        .find(|s| !seen.is_some_and(|h| h.contains(*s)))
    {
        None => Ok(()),
        Some(hidden) => Err(other(format!(
            "GET /cluster/resources does not list storage {hidden} (the template's disks, on host {host}): the token lacks Datastore.Audit on /storage/{hidden} (grant it on / as docs/proxmox.md shows), or the storage is disabled on {host}"
        ))),
    }
}

/// Hosts in HA maintenance (`ha-manager crm-command node-maintenance enable`), from the
/// LRM entries of `GET /cluster/ha/status/current`. Unreadable (no `Sys.Audit`, no HA):
/// none, with a warning, so a token without that right still scales.
pub async fn maintenance(api: &Api) -> BTreeSet<String> {
    match api.get("/cluster/ha/status/current", &[]).await {
        Ok(Value::Array(items)) => items
            .iter()
            .filter(|i| i["type"].as_str() == Some("lrm"))
            .filter(|i| {
                i["status"]
                    .as_str()
                    .is_some_and(|s| s.to_ascii_lowercase().contains("maintenance"))
            })
            .filter_map(|i| i["node"].as_str().map(str::to_string))
            .collect(),
        Ok(_) => BTreeSet::new(),
        Err(e) => {
            tracing::warn!(error = %e, "reading the HA status failed; no host is taken to be in maintenance (grant Sys.Audit on / to see maintenance)");
            BTreeSet::new()
        }
    }
}

/// The cluster's name from `GET /cluster/status`; `None` for a single host without a
/// cluster, or when it cannot be read.
pub async fn cluster_name(api: &Api) -> Option<String> {
    match api.get("/cluster/status", &[]).await {
        Ok(Value::Array(items)) => items
            .iter()
            .find(|i| i["type"].as_str() == Some("cluster"))
            .and_then(|i| i["name"].as_str().map(str::to_string)),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, "reading the Proxmox cluster name failed; new nodes get no region label");
            None
        }
    }
}

/// Every copy of the template `t`: one VM for an id; for a name or tag, every template
/// carrying it, at most one per host (two on one host are ambiguous).
pub fn template_copies<'a>(
    vms: &'a [VmResource],
    t: &TemplateRef,
) -> Result<Vec<&'a VmResource>, CloudError> {
    // Proxmox lists only the guests the token may audit: none at all, templates
    // included, is a token without VM.Audit rather than a missing template.
    if vms.is_empty() {
        return Err(other(format!(
            "template {t}: GET /cluster/resources lists no VM at all; Proxmox lists only the VMs the token holds VM.Audit on, so it lacks VM.Audit on /vms (grant it on / as docs/proxmox.md shows)"
        )));
    }
    let not_found = || CloudError::NotFound {
        provider: PROVIDER.into(),
        what: "template".into(),
        name: t.to_string(),
        detail: String::new(),
    };
    let found: Vec<&VmResource> = match t {
        TemplateRef::Id(id) => {
            let vm = vms.iter().find(|v| v.vmid == *id).ok_or_else(not_found)?;
            if !vm.template {
                return Err(other(format!(
                    "VM {id} is not a template (convert it with `qm template {id}`)"
                )));
            }
            return Ok(vec![vm]);
        }
        TemplateRef::Name(name) => vms
            .iter()
            .filter(|v| v.template && v.name.as_deref() == Some(name.as_str()))
            .collect(),
        TemplateRef::Tag { tag } => vms
            .iter()
            .filter(|v| v.template && split(v.tags()).iter().any(|x| x == tag))
            .collect(),
    };
    if found.is_empty() {
        return Err(not_found());
    }
    let mut per_host: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for v in &found {
        per_host.entry(v.node.as_str()).or_default().push(v.vmid);
    }
    if let Some((host, ids)) = per_host.iter().find(|(_, ids)| ids.len() > 1) {
        return Err(other(format!(
            "template {t} is ambiguous: host {host} has {} templates matching it ({}); keep one per host, or name it by VM id",
            ids.len(),
            ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        )));
    }
    let mut found = found;
    found.sort_by_key(|v| v.vmid);
    Ok(found)
}

/// A template copy and whether all its disks are on shared storage.
#[derive(Debug, Clone)]
pub struct Copy {
    pub vm: VmResource,
    pub shared: bool,
}

/// The copy to clone onto `host`: the one on it, else one on shared storage.
pub fn copy_for<'a>(copies: &'a [Copy], host: &str) -> Option<&'a Copy> {
    copies
        .iter()
        .find(|c| c.vm.node == host)
        .or_else(|| copies.iter().find(|c| c.shared))
}

/// Size of one new VM of the group: its `cores`/`memory`, else the template's.
pub fn vm_size(settings: &ProxmoxSettings, template: &VmResource) -> VmSize {
    let cpus = settings
        .cores
        .map(u64::from)
        .or(template.maxcpu.map(|c| c.max(0.0).ceil() as u64))
        .unwrap_or(0);
    VmSize {
        cpu_milli: cpus.saturating_mul(1000),
        memory: settings
            .memory
            .map(|m| m.as_u64())
            .or(template.maxmem)
            .unwrap_or(0),
    }
}

/// The hosts group `group` of `cluster` may use, as [`GroupHosts`].
pub fn group_hosts(
    listing: &Listing,
    maintenance: &BTreeSet<String>,
    settings: &ProxmoxSettings,
    copies: &[Copy],
    cluster: &str,
    group: &str,
    region: Option<String>,
) -> GroupHosts {
    let mut per_host: BTreeMap<&str, u32> = BTreeMap::new();
    for v in listing.vms.iter().filter(|v| !v.template) {
        let o = ownership(v.tags());
        if o.cluster.as_deref() == Some(cluster) && o.group.as_deref() == Some(group) {
            *per_host.entry(v.node.as_str()).or_default() += 1;
        }
    }
    let reserved_cpu = settings.reserve.cpu.as_ref().map_or(0, |q| q.milli());
    let reserved_memory = settings.reserve.memory.map_or(0, |m| m.as_u64());
    let hosts = listing
        .nodes
        .iter()
        .filter(|n| settings.nodes.is_empty() || settings.nodes.contains(&n.node))
        .map(|n| {
            let (cpu_taken, mem_taken) = listing.taken.get(&n.node).copied().unwrap_or_default();
            Host {
                name: n.node.clone(),
                state: if n.status != "online" {
                    HostState::Offline
                } else if maintenance.contains(&n.node) {
                    HostState::Maintenance
                } else {
                    HostState::Online
                },
                cpu_milli: (n.maxcpu.max(0.0) * 1000.0) as u64,
                memory: n.maxmem,
                cpu_taken_milli: cpu_taken,
                memory_taken: mem_taken,
                reserved_cpu_milli: reserved_cpu,
                reserved_memory,
                group_vms: per_host.get(n.node.as_str()).copied().unwrap_or(0),
                template: copies.iter().any(|c| c.shared || c.vm.node == n.node),
            }
        })
        .collect();
    GroupHosts {
        hosts,
        overcommit: settings.overcommit,
        max_per_host: settings.max_per_host,
        region,
    }
}

/// What a provider remembers between cycles: each template copy's disk storages (a
/// template's disks do not move without a new VM id or host) and the cluster's name.
#[derive(Debug, Default)]
pub struct HostCache {
    disks: std::sync::Mutex<BTreeMap<u32, (String, BTreeSet<String>)>>,
    region: std::sync::Mutex<Option<String>>,
}

impl HostCache {
    /// The copies of the group's template, each with whether its disks are all shared.
    pub async fn copies(
        &self,
        api: &Api,
        listing: &Listing,
        settings: &ProxmoxSettings,
    ) -> Result<Vec<Copy>, CloudError> {
        let mut out = Vec::new();
        for vm in template_copies(&listing.vms, &settings.template)? {
            let cached = self
                .disks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&vm.vmid)
                .filter(|(node, _)| *node == vm.node)
                .map(|(_, s)| s.clone());
            let storages = match cached {
                Some(s) => s,
                None => {
                    let config = super::allocate::vm_config(api, &vm.node, vm.vmid).await?;
                    let s = super::allocate::template_storages(&config);
                    self.disks
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(vm.vmid, (vm.node.clone(), s.clone()));
                    s
                }
            };
            hidden_storage(listing, &vm.node, &storages)?;
            let shared_here = listing.shared.get(&vm.node);
            let shared = storages
                .iter()
                .all(|s| shared_here.is_some_and(|h| h.contains(s)));
            out.push(Copy {
                vm: vm.clone(),
                shared,
            });
        }
        Ok(out)
    }

    /// The cluster's name, read once it is known.
    pub async fn region(&self, api: &Api) -> Option<String> {
        if let Some(r) = self
            .region
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Some(r);
        }
        let r = cluster_name(api).await?;
        *self.region.lock().unwrap_or_else(|e| e.into_inner()) = Some(r.clone());
        Some(r)
    }
}

/// The shape of a new VM of `group`, from its template, with the hosts it may go to.
#[allow(clippy::too_many_arguments)]
pub async fn shape(
    api: &Api,
    cache: &HostCache,
    listing: &Listing,
    maint: &BTreeSet<String>,
    region: Option<String>,
    settings: &ProxmoxSettings,
    cluster: &str,
    group: &str,
) -> Result<GroupShape, CloudError> {
    let copies = cache.copies(api, listing, settings).await?;
    let Some(first) = copies.first() else {
        return Err(other(format!("no copy of template {}", settings.template)));
    };
    let size = vm_size(settings, &first.vm);
    // A VM placed on one named host is in that host's zone.
    let zone = match settings.nodes.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    };
    let hosts = group_hosts(
        listing,
        maint,
        settings,
        &copies,
        cluster,
        group,
        region.clone(),
    );
    Ok(GroupShape {
        cpu_milli: Some(size.cpu_milli).filter(|c| *c > 0),
        memory: Some(size.memory).filter(|m| *m > 0),
        instance_type: first.vm.name.clone(),
        zone,
        region,
        hosts: Some(hosts),
        sizes: Vec::new(),
    })
}

/// The host for `req` and the template copy to clone there: the host the plan chose
/// (`req.zone`) when it still takes the VM, else an error; without a plan, the host
/// [`crate::model::GroupHosts::choose`] picks.
pub async fn place(
    api: &Api,
    cache: &HostCache,
    listing: &Listing,
    settings: &ProxmoxSettings,
    req: &CreateRequest,
) -> Result<(String, VmResource), CloudError> {
    let copies = cache.copies(api, listing, settings).await?;
    let Some(first) = copies.first() else {
        return Err(other(format!("no copy of template {}", settings.template)));
    };
    let size = vm_size(settings, &first.vm);
    let maint = maintenance(api).await;
    let hosts = group_hosts(
        listing,
        &maint,
        settings,
        &copies,
        &req.cluster,
        &req.group,
        None,
    );
    let target = match &req.zone {
        Some(z) => {
            let i = hosts.index(z).ok_or_else(|| {
                other(format!(
                    "host {z}, where the plan put {}, is not one of group {}'s hosts",
                    req.name, req.group
                ))
            })?;
            if let Some(why) = hosts.why_not(i, size) {
                return Err(other(format!(
                    "host {z}, where the plan put {}, cannot take it now: {why}",
                    req.name
                )));
            }
            z.clone()
        }
        None => {
            let i = hosts.choose(size).ok_or_else(|| {
                other(format!(
                    "no Proxmox host can take a VM of group {}: {}",
                    req.group,
                    hosts.full_reason(size)
                ))
            })?;
            hosts.hosts[i].name.clone()
        }
    };
    let copy = copy_for(&copies, &target).ok_or_else(|| {
        other(format!(
            "no copy of template {} can be cloned onto {target}",
            settings.template
        ))
    })?;
    Ok((target, copy.vm.clone()))
}
