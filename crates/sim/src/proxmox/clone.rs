//! `POST /nodes/{node}/qemu/{vmid}/clone`: checks as Proxmox makes them, then the new VM
//! as it shows while its disks are copied (see [`while_copying`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::reply::{data, fail};
use super::tasks::new_task;
use super::{now_secs, Shared, SimVm};

pub(super) fn clone(
    shared: &Arc<Shared>,
    node: &str,
    vmid: u32,
    get: &dyn Fn(&str) -> Option<String>,
    user: &str,
) -> Response {
    let o = &shared.opts;
    let newid: u32 = get("newid").and_then(|v| v.parse().ok()).unwrap_or(0);
    let target = get("target").unwrap_or_else(|| node.to_string());
    let full = get("full").is_some_and(|f| f == "1" || f == "true");
    {
        let mut st = shared.lock();
        let Some(tpl) = st.vms.get(&vmid).cloned() else {
            return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
        };
        if st.vmid_races > 0 {
            st.vmid_races -= 1;
            // Someone else grabbed the id between our nextid and this clone.
            let racer = SimVm {
                vmid: newid,
                node: node.to_string(),
                name: format!("someone-else-{newid}"),
                template: false,
                config: BTreeMap::from([("name".to_string(), format!("someone-else-{newid}"))]),
                status: "stopped".into(),
                lock: None,
                cloud_init_join: false,
                booted: false,
                joined: false,
                files: BTreeMap::new(),
                installed: None,
                cloud_init_note: None,
            };
            st.vms.entry(newid).or_insert(racer);
        }
        if st.vms.contains_key(&newid) {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("unable to create VM {newid}: config file already exists"),
            );
        }
        if !o.hosts.iter().any(|h| h.name == target && h.online) {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("target node '{target}' is not online"),
            );
        }
        let storages: Vec<String> = tpl
            .config
            .iter()
            .filter(|(k, _)| k.starts_with("scsi") && *k != "scsihw" || k.starts_with("ide"))
            .filter_map(|(_, v)| v.split(':').next().map(str::to_string))
            .collect();
        let shared_storage = storages
            .iter()
            .all(|s| o.storages.iter().any(|x| &x.name == s && x.shared));
        if target != node && !shared_storage {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("can't clone VM to node '{target}' (VM uses local storage)"),
            );
        }
        if !full && get("storage").is_some() {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage migration is only possible with a full clone",
            );
        }
        if !full && !tpl.template {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "linked clone feature is not supported for a VM that is not a template",
            );
        }
        if let Some(s) = get("storage") {
            if !o.storages.iter().any(|x| x.name == s) {
                return fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("storage '{s}' does not exist"),
                );
            }
        }
        let mut config = tpl.config.clone();
        config.remove("template");
        let name = get("name").unwrap_or_else(|| format!("Copy-of-VM-{}", tpl.name));
        config.insert("name".into(), name.clone());
        // Proxmox copies every option but disks, snapshots and the template flag into
        // the clone, the description and the tags with them; a non-empty `description`
        // replaces the copied one.
        if let Some(d) = get("description").filter(|d| !d.is_empty()) {
            config.insert("description".into(), d);
        }
        config.insert(
            "meta".into(),
            format!("creation-qemu=9.2.0,ctime={}", now_secs()),
        );
        st.mac_counter += 1;
        let mac = format!(
            "BC:24:11:{:02X}:{:02X}:{:02X}",
            (st.mac_counter >> 16) & 0xff,
            (st.mac_counter >> 8) & 0xff,
            st.mac_counter & 0xff
        );
        if let Some(net0) = config.get("net0").cloned() {
            let rest: Vec<&str> = net0.split(',').skip(1).collect();
            let mut n = format!("virtio={mac}");
            for r in rest {
                n.push(',');
                n.push_str(r);
            }
            config.insert("net0".into(), n);
        }
        let done = SimVm {
            vmid: newid,
            node: target,
            name,
            template: false,
            config,
            status: "stopped".into(),
            lock: None,
            cloud_init_join: tpl.cloud_init_join,
            booted: false,
            joined: false,
            files: BTreeMap::new(),
            installed: None,
            cloud_init_note: None,
        };
        st.vms
            .insert(newid, while_copying(&done, &tpl.config, node));
        st.clones.insert(newid, done);
    }
    data(json!(new_task(
        shared,
        node,
        "qmclone",
        vmid,
        newid,
        user,
        o.clone_delay
    )))
}

/// The new VM as Proxmox shows it while its disks are copied: locked (`clone`) on `node`,
/// the host the call was made to, whatever the target. Its config file holds only
/// `# qmclone temporary file` (read back as the description) and the lock until the first
/// drive, in name order, is copied; then the whole config (name, description, the
/// template's tags...) is written, still locked. A cloud-init drive is made at once, so a
/// template whose cloud-init drive sorts before its disk (`ide2` before `scsi0`) shows the
/// name almost from the start; one whose disk sorts first (`scsi0`, then `scsi1` for
/// cloud-init) shows no name until that disk is copied. The lock goes, and the file moves
/// to the target host, when the last drive is done (see `finish_task`).
fn while_copying(done: &SimVm, template: &BTreeMap<String, String>, node: &str) -> SimVm {
    let mut vm = done.clone();
    vm.node = node.to_string();
    vm.lock = Some("clone".into());
    if !cloud_init_drive_first(template) {
        vm.name = String::new();
        vm.config = BTreeMap::from([(
            "description".to_string(),
            " qmclone temporary file\n".to_string(),
        )]);
    }
    vm
}

/// Whether the first drive a clone copies (drives go in name order; a CD-ROM that is not
/// cloud-init is not copied) is a cloud-init drive, which takes no time.
fn cloud_init_drive_first(config: &BTreeMap<String, String>) -> bool {
    let is_drive = |k: &str| {
        ["ide", "sata", "scsi", "virtio"].iter().any(|p| {
            k.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        }) || k == "efidisk0"
            || k == "tpmstate0"
    };
    config
        .iter()
        .find(|(k, v)| is_drive(k) && (v.contains("cloudinit") || !v.contains("media=cdrom")))
        .is_some_and(|(_, v)| v.contains("cloudinit"))
}
