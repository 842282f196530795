//! `nodewright check` for Proxmox VE: the credentials work, and each group's template,
//! hosts, target storage and bridge exist where its VMs may be placed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::allocate::{all_shared, template_storages, vm_config};
use super::client::{params, Api};
use super::hosts::{hidden_storage, list_all, template_copies};
use super::provider::seeding::{delivery, seed_storage, Delivery};
use super::{seg, ProxmoxSettings, PROVIDER};
use crate::cloud::CloudError;

fn not_found(what: &str, name: String) -> CloudError {
    CloudError::NotFound {
        provider: PROVIDER.into(),
        what: what.into(),
        name,
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
    api.get("/version", &[]).await?;
    // Hosts listed without their figures (no Sys.Audit) fail here, as in the loop.
    let listing = list_all(api).await?;
    let (vms, nodes) = (&listing.vms, &listing.nodes);
    let mut lines = vec!["credentials ok".to_string()];
    for (group, s) in groups {
        let copies = template_copies(vms, &s.template)?;
        for n in &s.nodes {
            if !nodes.iter().any(|x| &x.node == n) {
                return Err(not_found("host", format!("{n} (group {group})")));
            }
        }
        // Where its VMs may go, as placement decides it: the host of each copy on local
        // storage, every allowed online host when a copy is on shared storage.
        let mut hosts: Vec<String> = Vec::new();
        let mut template_config = BTreeMap::new();
        for copy in &copies {
            let config = vm_config(api, &copy.node, copy.vmid).await?;
            let storages = template_storages(&config);
            hidden_storage(&listing, &copy.node, &storages)?;
            template_config = config;
            let here: Vec<String> = if !all_shared(api, &copy.node, &storages).await? {
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
        if let Some(storage) = &s.storage {
            for h in &hosts {
                let list = api.get(&format!("/nodes/{}/storage", seg(h)), &[]).await?;
                let have = names(&list, "storage");
                if !have.contains(storage) {
                    return Err(not_found(
                        "storage",
                        format!(
                            "{storage} (group {group}, on host {h}; it has {}; the list shows only the storages the token holds Datastore.Audit or Datastore.AllocateSpace on, so the token may lack Datastore.Audit on /storage/{storage})",
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
                        format!(
                            "{bridge} (group {group}, on host {h}; its Linux and OVS bridges are {})",
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
