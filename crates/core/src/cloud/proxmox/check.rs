//! `nodewright check` for Proxmox VE: the credentials work, the server's version and the
//! privileges the role needs there, and each group's template, hosts, pool, target storage
//! and bridge exist where its VMs may be placed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::allocate::{all_shared, template_storages, vm_config};
use super::client::{params, Api};
use super::hosts::{hidden_storage, list_all, template_copies};
use super::provider::seeding::{delivery, seed_storage, Delivery};
use super::{seg, ProxmoxSettings, PROVIDER};
use crate::cloud::CloudError;

fn not_found(what: &str, name: &str, detail: String) -> CloudError {
    CloudError::NotFound {
        provider: PROVIDER.into(),
        what: what.into(),
        name: name.into(),
        detail,
    }
}

/// The privileges of nodewright's role on Proxmox VE `major` (docs/proxmox.md, step 1).
/// PVE 9 replaced `VM.Monitor`, which the guest-agent calls needed, with the
/// `VM.GuestAgent.*` privileges; `pveum role add` refuses a name its version lacks.
pub fn role_privileges(major: u32) -> Vec<&'static str> {
    let guest_agent = if major >= 9 {
        "VM.GuestAgent.Unrestricted"
    } else {
        "VM.Monitor"
    };
    vec![
        "VM.Audit",
        "VM.Clone",
        "VM.Allocate",
        "VM.PowerMgmt",
        "VM.Config.CPU",
        "VM.Config.Memory",
        "VM.Config.Cloudinit",
        "VM.Config.Network",
        "VM.Config.Options",
        "VM.Config.CDROM",
        guest_agent,
        "Datastore.Audit",
        "Datastore.AllocateSpace",
        "Datastore.AllocateTemplate",
        "Datastore.Allocate",
        "Sys.Audit",
        "SDN.Use",
    ]
}

/// The line naming the server's version and what the role needs there.
fn version_line(version: &Value) -> String {
    let full = version["version"].as_str().unwrap_or_default();
    let release = version["release"].as_str().unwrap_or(full);
    let major: Option<u32> = release.split('.').next().and_then(|m| m.parse().ok());
    match major {
        Some(major) => format!(
            "Proxmox VE {full} (release {release}): the role needs {} (docs/proxmox.md, the role for PVE {})",
            role_privileges(major).join(" "),
            if major >= 9 { 9 } else { 8 }
        ),
        None => format!(
            "Proxmox VE version unknown (GET /version answered {version}): the role of docs/proxmox.md for PVE 9 names VM.GuestAgent.Unrestricted, the one for PVE 8 VM.Monitor"
        ),
    }
}

/// Names in `field` of each item of a list answer.
fn names(list: &Value, field: &str) -> Vec<String> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i[field].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// One line per group saying what was found; the error names the first thing missing.
pub async fn check(
    api: &Api,
    groups: &BTreeMap<String, ProxmoxSettings>,
) -> Result<Vec<String>, CloudError> {
    let version = api.get("/version", &[]).await?;
    // Hosts listed without their figures (no Sys.Audit) fail here, as in the loop.
    let listing = list_all(api).await?;
    let (vms, nodes) = (&listing.vms, &listing.nodes);
    let mut lines = vec!["credentials ok".to_string(), version_line(&version)];
    let mut pools: Option<Vec<String>> = None;
    for (group, s) in groups {
        let copies = template_copies(vms, &s.template)?;
        for n in &s.nodes {
            if !nodes.iter().any(|x| &x.node == n) {
                let have: Vec<&str> = nodes.iter().map(|x| x.node.as_str()).collect();
                return Err(not_found(
                    "host",
                    n,
                    format!("group {group}; the cluster's hosts are {}", have.join(", ")),
                ));
            }
        }
        // Where its VMs may go, as placement decides it: the host of each copy on local
        // storage, every allowed online host when a copy is on shared storage.
        let mut hosts: Vec<String> = Vec::new();
        let mut local: Vec<String> = Vec::new();
        let mut template_config = BTreeMap::new();
        for copy in &copies {
            let config = vm_config(api, &copy.node, copy.vmid).await?;
            let storages = template_storages(&config);
            hidden_storage(&listing, &copy.node, &storages)?;
            template_config = config;
            let here: Vec<String> = if !all_shared(api, &copy.node, &storages).await? {
                let on: Vec<&str> = storages.iter().map(String::as_str).collect();
                local.push(format!("{} of host {}", on.join(", "), copy.node));
                vec![copy.node.clone()]
            } else if s.nodes.is_empty() {
                nodes
                    .iter()
                    .filter(|n| n.status == "online")
                    .map(|n| n.node.clone())
                    .collect()
            } else {
                s.nodes.clone()
            };
            for h in here {
                if !hosts.contains(&h) {
                    hosts.push(h);
                }
            }
        }
        // Hosts the group allows that no copy of a local-storage template can reach get
        // none of its VMs: say so rather than leave them out quietly.
        let allowed: Vec<String> = if s.nodes.is_empty() {
            nodes
                .iter()
                .filter(|n| n.status == "online")
                .map(|n| n.node.clone())
                .collect()
        } else {
            s.nodes.clone()
        };
        let unreached: Vec<&str> = allowed
            .iter()
            .filter(|h| !hosts.contains(h))
            .map(String::as_str)
            .collect();
        if !unreached.is_empty() {
            lines.push(format!(
                "group {group}: hosts {} get none of its VMs: the template's disks are on local storage ({}), which a clone cannot leave; put a copy of the template (same name) on each of them, or its disks on shared storage{}",
                unreached.join(", "),
                local.join("; "),
                if s.nodes.is_empty() { "" } else { ", or drop them from `nodes:`" }
            ));
        }
        if let Some(pool) = &s.pool {
            if pools.is_none() {
                pools = Some(names(&api.get("/pools", &[]).await?, "poolid"));
            }
            let have = pools.as_deref().unwrap_or_default();
            if !have.iter().any(|p| p == pool) {
                return Err(not_found(
                    "pool",
                    pool,
                    format!(
                        "group {group}; the token sees {}; Proxmox lists only the pools it holds Pool.Audit on: create it (`pveum pool add {pool}`) or, if it exists, grant Pool.Audit on /pool/{pool}",
                        if have.is_empty() { "no pool".to_string() } else { format!("pools {}", have.join(", ")) }
                    ),
                ));
            }
        }
        let where_: Vec<String> = copies
            .iter()
            .map(|c| format!("VM {} on {}", c.vmid, c.node))
            .collect();
        let mut found = format!(
            "group {group}: template {} ({}), hosts {}",
            s.template,
            where_.join(", "),
            hosts.join(", ")
        );
        if let Some(pool) = &s.pool {
            found.push_str(&format!(", pool {pool}"));
        }
        if let Some(storage) = &s.storage {
            for h in &hosts {
                let list = api.get(&format!("/nodes/{}/storage", seg(h)), &[]).await?;
                let have = names(&list, "storage");
                if !have.contains(storage) {
                    return Err(not_found(
                        "storage",
                        storage,
                        format!(
                            "group {group}, on host {h}; it has {}; the list shows only the storages the token holds Datastore.Audit or Datastore.AllocateSpace on, so the token may lack Datastore.Audit on /storage/{storage}",
                            if have.is_empty() { "none visible".to_string() } else { have.join(", ") }
                        ),
                    ));
                }
            }
            found.push_str(&format!(", storage {storage}"));
        }
        if let Some(bridge) = &s.bridge {
            for h in &hosts {
                let list = api
                    .get(
                        &format!("/nodes/{}/network", seg(h)),
                        &params([("type", "any_bridge".into())]),
                    )
                    .await?;
                let have = names(&list, "iface");
                if !have.contains(bridge) {
                    return Err(not_found(
                        "bridge",
                        bridge,
                        format!(
                            "group {group}, on host {h}; its Linux and OVS bridges are {}",
                            have.join(", ")
                        ),
                    ));
                }
            }
            found.push_str(&format!(", bridge {bridge}"));
        }
        lines.push(format!("{found} exist"));
        lines.push(format!(
            "group {group}: {}",
            delivery_line(api, s, &template_config, &hosts).await?
        ));
    }
    Ok(lines)
}

/// How the group's user data reaches its VMs; for a seed, the storage on every host its
/// VMs may go to (an error names a host with none).
async fn delivery_line(
    api: &Api,
    s: &ProxmoxSettings,
    template_config: &BTreeMap<String, String>,
    hosts: &[String],
) -> Result<String, CloudError> {
    Ok(match delivery(s, template_config) {
        Delivery::GuestAgent => {
            "user data: run as a script through the QEMU guest agent (join: guestAgent)".into()
        }
        Delivery::Cicustom(c) => format!(
            "user data: NOT the rendered template; the VMs read your cicustom snippets `{c}` ({}), which must exist on every host",
            if s.cicustom.is_some() { "the group's cicustom" } else { "set on the template" }
        ),
        Delivery::Seed => {
            let mut on: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for h in hosts {
                let storage = seed_storage(api, h, s).await?;
                on.entry(storage).or_default().push(h.clone());
            }
            let places: Vec<String> = on
                .iter()
                .map(|(st, hs)| format!("storage {st} (hosts {})", hs.join(", ")))
                .collect();
            let mut line = format!(
                "user data: rendered template as a NoCloud seed ISO (cidata) uploaded to {}, attached as a CD-ROM until the node joins; readable meanwhile by anyone with Datastore.Audit there",
                places.join(", ")
            );
            if let Some(u) = &s.ciuser {
                line.push_str(&format!("; ciuser `{u}` is NOT applied (the seed replaces Proxmox's cloud-init drive): create users in the user data"));
            }
            line
        }
    })
}
