//! Privileges: what a token or user may do, checked as Proxmox VE checks them.
//!
//! [`CHECKS`] holds each endpoint's `permissions.check` from the official schema (a test
//! compares them with the schema file, which the simulator may run without); `check`
//! evaluates one as `PVE::RPCEnvironment` does and answers 403 `Permission check failed
//! (<path>, <privilege>)`. What the API code checks beyond the schema — the clone's
//! `Datastore.AllocateSpace` on its storage, each config key's own `VM.Config.*`
//! privilege, `SDN.Use` on a bridge, `Datastore.Allocate` to delete a volume — is in
//! `clone_extra`, `config_privileges` and `volume_delete`. Listings the schema marks
//! `user: all` show only what the privileges let one see ([`can_see`]).
//!
//! The privileges of the simulated token and user are one set granted on `/` (as the
//! docs' `pveum acl modify /`); `None` grants everything, as to `root@pam`.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::reply::fail;

/// `(method, schema path, permissions.check)` of the endpoints the simulator serves whose
/// schema entry has a `check`; the others are `user: all`.
pub const CHECKS: &[(&str, &str, &str)] = &[
    (
        "GET",
        "/cluster/ha/status/current",
        r#"["perm","/",["Sys.Audit"]]"#,
    ),
    ("GET", "/cluster/status", r#"["perm","/",["Sys.Audit"]]"#),
    (
        "DELETE",
        "/nodes/{node}/qemu/{vmid}",
        r#"["perm","/vms/{vmid}",["VM.Allocate"]]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/ping",
        r#"["perm","/vms/{vmid}",["VM.GuestAgent.Audit","VM.GuestAgent.Unrestricted"],"any",1]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/exec",
        r#"["perm","/vms/{vmid}",["VM.GuestAgent.Unrestricted"]]"#,
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/exec-status",
        r#"["perm","/vms/{vmid}",["VM.GuestAgent.Unrestricted"]]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/file-write",
        r#"["perm","/vms/{vmid}",["VM.GuestAgent.FileWrite","VM.GuestAgent.Unrestricted"],"any",1]"#,
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/config",
        r#"["perm","/vms/{vmid}",["VM.Audit"]]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/config",
        r#"["perm","/vms/{vmid}",["VM.Config.Disk","VM.Config.CDROM","VM.Config.CPU","VM.Config.Memory","VM.Config.Network","VM.Config.HWType","VM.Config.Options","VM.Config.Cloudinit"],"any",1]"#,
    ),
    (
        "PUT",
        "/nodes/{node}/qemu/{vmid}/config",
        r#"["perm","/vms/{vmid}",["VM.Config.Disk","VM.Config.CDROM","VM.Config.CPU","VM.Config.Memory","VM.Config.Network","VM.Config.HWType","VM.Config.Options","VM.Config.Cloudinit"],"any",1]"#,
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/status/current",
        r#"["perm","/vms/{vmid}",["VM.Audit"]]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/start",
        r#"["perm","/vms/{vmid}",["VM.PowerMgmt"]]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/stop",
        r#"["perm","/vms/{vmid}",["VM.PowerMgmt"]]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/shutdown",
        r#"["perm","/vms/{vmid}",["VM.PowerMgmt"]]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/reboot",
        r#"["perm","/vms/{vmid}",["VM.PowerMgmt"]]"#,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/clone",
        r#"["and",["perm","/vms/{vmid}",["VM.Clone"]],["or",["perm","/vms/{newid}",["VM.Allocate"]],["perm","/pool/{pool}",["VM.Allocate"],"require_param","pool"]]]"#,
    ),
    (
        "GET",
        "/nodes/{node}/storage/{storage}/content",
        r#"["perm","/storage/{storage}",["Datastore.Audit","Datastore.AllocateSpace"],"any",1]"#,
    ),
    (
        "POST",
        "/nodes/{node}/storage/{storage}/upload",
        r#"["perm","/storage/{storage}",["Datastore.AllocateTemplate"]]"#,
    ),
];

/// The privileges of the caller: `None` holds all of them.
#[derive(Clone, Copy)]
pub struct Privs<'a>(pub Option<&'a BTreeSet<String>>);

impl Privs<'_> {
    pub fn has(&self, p: &str) -> bool {
        self.0.is_none_or(|set| set.contains(p))
    }
    fn has_any(&self, ps: &[&str]) -> bool {
        ps.iter().any(|p| self.has(p))
    }
}

pub(super) fn denied(what: &str) -> Response {
    let message = if what.is_empty() {
        "Permission check failed".to_string()
    } else {
        format!("Permission check failed ({what})")
    };
    fail(StatusCode::FORBIDDEN, &message)
}

/// `path` with `{name}` replaced from `vars`; `None` when one is missing.
fn fill(path: &str, vars: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let mut out = String::new();
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}')? + start;
        out.push_str(&vars(&rest[start + 1..end])?);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// Evaluates a schema `check` expression: `Ok` or the text of the refusal, which is
/// `path, privilege` (`path, a|b` for an `any` check, empty for a failed `or`).
fn eval(check: &Value, privs: Privs, vars: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    let items = check.as_array().map(Vec::as_slice).unwrap_or_default();
    match items.first().and_then(Value::as_str) {
        Some("and") => {
            for c in &items[1..] {
                eval(c, privs, vars)?;
            }
            Ok(())
        }
        Some("or") => {
            if items[1..].iter().any(|c| eval(c, privs, vars).is_ok()) {
                Ok(())
            } else {
                Err(String::new())
            }
        }
        Some("perm") => {
            let path_t = items.get(1).and_then(Value::as_str).unwrap_or("/");
            let wanted: Vec<&str> = items
                .get(2)
                .and_then(Value::as_array)
                .map(|l| l.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let opts: BTreeMap<&str, &Value> = items[3.min(items.len())..]
                .chunks(2)
                .filter_map(|kv| Some((kv.first()?.as_str()?, kv.get(1)?)))
                .collect();
            if let Some(p) = opts.get("require_param").and_then(|v| v.as_str()) {
                if vars(p).is_none() {
                    return Err(format!("parameter '{p}' missing"));
                }
            }
            let path = fill(path_t, vars).unwrap_or_else(|| path_t.to_string());
            if opts.contains_key("any") {
                if privs.has_any(&wanted) {
                    Ok(())
                } else {
                    Err(format!("{path}, {}", wanted.join("|")))
                }
            } else {
                match wanted.iter().find(|p| !privs.has(p)) {
                    None => Ok(()),
                    Some(p) => Err(format!("{path}, {p}")),
                }
            }
        }
        _ => Ok(()),
    }
}

/// The schema's check of `method template`, if it has one: `Some` is the 403 to answer.
pub(super) fn check(
    method: &str,
    template: &str,
    privs: Privs,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Option<Response> {
    let (_, _, expr) = CHECKS
        .iter()
        .find(|(m, t, _)| *m == method && *t == template)?;
    let expr: Value = serde_json::from_str(expr).ok()?;
    eval(&expr, privs, vars).err().map(|what| denied(&what))
}

/// What clone checks in its code: `Datastore.AllocateSpace` on the storage its disks go to.
pub(super) fn clone_extra(privs: Privs, storage: &str) -> Option<Response> {
    (!privs.has("Datastore.AllocateSpace"))
        .then(|| denied(&format!("/storage/{storage}, Datastore.AllocateSpace")))
}

/// The privilege a VM config key needs, as Proxmox's config update checks each key.
pub fn config_privilege(key: &str, value: &str) -> &'static str {
    let base = key.trim_end_matches(|c: char| c.is_ascii_digit());
    match base {
        "cores" | "sockets" | "cpu" | "cpulimit" | "cpuunits" | "vcpus" | "numa" | "affinity" => {
            "VM.Config.CPU"
        }
        "memory" | "balloon" | "shares" => "VM.Config.Memory",
        "cicustom" | "cipassword" | "citype" | "ciuser" | "ciupgrade" | "sshkeys" | "ipconfig"
        | "nameserver" | "searchdomain" => "VM.Config.Cloudinit",
        "net" => "VM.Config.Network",
        "ide" | "sata" | "scsi" | "virtio" => {
            if value.contains("media=cdrom") || value == "none" || value.contains(":iso/") {
                "VM.Config.CDROM"
            } else {
                "VM.Config.Disk"
            }
        }
        "efidisk" | "tpmstate" | "unused" => "VM.Config.Disk",
        "vga" | "hostpci" | "usb" | "serial" | "parallel" | "audio" | "rng" | "machine"
        | "bios" | "scsihw" | "tablet" | "keyboard" | "watchdog" => "VM.Config.HWType",
        _ => "VM.Config.Options",
    }
}

/// A drive key whose volume is Proxmox's cloud-init drive (`STORAGE:vm-N-cloudinit` or
/// `STORAGE:cloudinit` when adding one).
fn is_cloudinit_drive(key: &str, value: &str) -> bool {
    let base = key.trim_end_matches(|c: char| c.is_ascii_digit());
    let volume = value.split(',').next().unwrap_or_default();
    matches!(base, "ide" | "sata" | "scsi" | "virtio")
        && base.len() < key.len()
        && volume.rsplit([':', '/']).next().is_some_and(|name| {
            name == "cloudinit" || (name.starts_with("vm-") && name.ends_with("-cloudinit"))
        })
}

/// Each key a config write sets or deletes needs its own privilege (and a bridge
/// `SDN.Use`): `Some` is the 403 for the first one missing.
pub(super) fn config_privileges(
    privs: Privs,
    vmid: u32,
    params: &[(String, String)],
    current: &BTreeMap<String, String>,
) -> Option<Response> {
    for (k, v) in params {
        if matches!(k.as_str(), "digest" | "skiplock" | "force" | "revert") {
            continue;
        }
        let keys: Vec<(String, String)> = if k == "delete" {
            v.split([',', ';', ' '])
                .filter(|d| !d.is_empty())
                .map(|d| (d.to_string(), current.get(d).cloned().unwrap_or_default()))
                .collect()
        } else {
            vec![(k.clone(), v.clone())]
        };
        for (key, value) in keys {
            let p = config_privilege(&key, &value);
            // A cloud-init drive is neither a disk nor a plain CD-ROM to the check:
            // adding or removing one needs both of these.
            let needed: &[&str] = if is_cloudinit_drive(&key, &value) {
                &["VM.Config.Cloudinit", "VM.Config.CDROM"]
            } else {
                std::slice::from_ref(&p)
            };
            if let Some(missing) = needed.iter().find(|p| !privs.has(p)) {
                return Some(denied(&format!("/vms/{vmid}, {missing}")));
            }
            if p == "VM.Config.Network" && !privs.has("SDN.Use") {
                if let Some(bridge) = value.split(',').find_map(|kv| kv.strip_prefix("bridge=")) {
                    return Some(denied(&format!(
                        "/sdn/zones/localnetwork/{bridge}, SDN.Use"
                    )));
                }
            }
        }
    }
    None
}

/// Deleting a volume needs `Datastore.Allocate` on its storage.
pub(super) fn volume_delete(privs: Privs, storage: &str) -> Option<Response> {
    (!privs.has("Datastore.Allocate"))
        .then(|| denied(&format!("/storage/{storage}, Datastore.Allocate")))
}

/// Whether a listing (`user: all` in the schema) shows an entry of this kind: VMs need
/// `VM.Audit`; `GET /nodes/{node}/storage` shows a storage to `Datastore.Audit` or
/// `Datastore.AllocateSpace`. Hosts are always listed (see [`hide_host_stats`]).
pub fn can_see(privs: Privs, kind: &str) -> bool {
    match kind {
        "qemu" | "lxc" | "vm" => privs.has("VM.Audit"),
        "storage" => privs.has_any(&["Datastore.Audit", "Datastore.AllocateSpace"]),
        _ => true,
    }
}

/// The figures of a host entry Proxmox leaves out for a caller without `Sys.Audit` on
/// `/nodes/{node}`: the host is still listed, online, with no CPU, memory, disk or uptime
/// (`extract_node_stats` with `exclude_stats`, for `/nodes` and `/cluster/resources`).
const HOST_STATS: &[&str] = &[
    "uptime", "cpu", "mem", "disk", "maxcpu", "maxmem", "maxdisk",
];

/// Takes a host entry's figures out when the caller lacks `Sys.Audit`.
pub fn hide_host_stats(privs: Privs, entry: &mut Value) {
    if privs.has("Sys.Audit") {
        return;
    }
    if let Value::Object(m) = entry {
        for k in HOST_STATS {
            m.remove(*k);
        }
    }
}

/// A `/cluster/resources` answer as the caller may see it: guests with `VM.Audit`,
/// storages with `Datastore.Audit` (this listing checks that one alone), every host,
/// its figures only with `Sys.Audit`.
pub(super) fn filter_resources(privs: Privs, v: Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .filter(|i| match i["type"].as_str().unwrap_or("") {
                    "storage" => privs.has("Datastore.Audit"),
                    kind => can_see(privs, kind),
                })
                .map(|mut i| {
                    if i["type"] == "node" {
                        hide_host_stats(privs, &mut i);
                    }
                    i
                })
                .collect(),
        ),
        other => other,
    }
}
