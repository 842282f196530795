//! Read endpoints a user's client (proxmoxer, the web UI's calls) uses besides the ones
//! nodewright needs: the host list, a host's VMs, a VM's current status and its index.
//! Their answers are checked against the schema's `returns` like every other.

use serde_json::{json, Value};

use super::perms::{can_see, hide_host_stats, Privs};
use super::{Shared, SimVm, GIB, MIB};

/// `GET /nodes`: every host, as `pvesh get /nodes` lists them (their figures only to
/// a caller holding `Sys.Audit`).
pub(super) fn nodes(shared: &Shared, privs: Privs) -> Value {
    let o = &shared.opts;
    let st = shared.lock();
    let list: Vec<Value> = o
        .hosts
        .iter()
        .map(|h| {
            let used: u64 = st
                .vms
                .values()
                .filter(|v| v.node == h.name && v.status == "running")
                .map(|v| v.memory_mib() * MIB)
                .sum();
            let mut v = json!({
                "node": h.name, "id": format!("node/{}", h.name), "type": "node",
                "status": if h.online { "online" } else { "offline" },
                "level": "", "ssl_fingerprint": "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF",
            });
            if h.online {
                v["maxcpu"] = json!(h.cores);
                v["maxmem"] = json!(h.maxmem);
                v["mem"] = json!(h.base_mem + used);
                v["cpu"] = json!(0.05);
                v["uptime"] = json!(100000);
                v["maxdisk"] = json!(100 * GIB);
                v["disk"] = json!(10 * GIB);
            }
            hide_host_stats(privs, &mut v);
            v
        })
        .collect();
    Value::Array(list)
}

fn vm_summary(vm: &SimVm) -> Value {
    let running = vm.status == "running";
    let mut v = json!({
        "vmid": vm.vmid, "status": vm.status, "name": vm.name,
        "maxmem": vm.memory_mib() * MIB, "mem": if running { vm.memory_mib() * MIB / 2 } else { 0 },
        "cpus": vm.cpus(), "cpu": if running { 0.01 } else { 0.0 },
        "maxdisk": 8 * GIB, "disk": 0, "uptime": 0, "netin": 0, "netout": 0,
        "diskread": 0, "diskwrite": 0,
    });
    if vm.template {
        v["template"] = json!(1);
    }
    if !vm.tags().is_empty() {
        v["tags"] = json!(vm.tags());
    }
    if let Some(l) = &vm.lock {
        v["lock"] = json!(l);
    }
    v
}

/// `GET /nodes/{node}/qemu`: the VMs on `node` the caller may audit.
pub(super) fn qemu_list(shared: &Shared, node: &str, privs: Privs) -> Value {
    let st = shared.lock();
    Value::Array(
        st.vms
            .values()
            .filter(|v| v.node == node && can_see(privs, "qemu"))
            .map(vm_summary)
            .collect(),
    )
}

/// `GET /nodes/{node}/qemu/{vmid}/status/current`.
pub(super) fn qemu_status(shared: &Shared, vmid: u32) -> Value {
    let st = shared.lock();
    let Some(vm) = st.vms.get(&vmid) else {
        return Value::Null;
    };
    let mut v = vm_summary(vm);
    v["qmpstatus"] = json!(vm.status);
    v["ha"] = json!({ "managed": 0 });
    if vm.agent_enabled() {
        v["agent"] = json!(1);
    }
    v
}

/// `GET /nodes/{node}/qemu/{vmid}`: the directory index of a VM.
pub(super) fn qemu_index() -> Value {
    let dirs = [
        "config",
        "pending",
        "status",
        "unlink",
        "vncproxy",
        "termproxy",
        "migrate",
        "resize",
        "move",
        "rrd",
        "rrddata",
        "monitor",
        "agent",
        "snapshot",
        "spiceproxy",
        "sendkey",
        "firewall",
        "mtunnel",
        "remote_migrate",
    ];
    Value::Array(
        dirs.iter()
            .map(|d| json!({ "subdir": d }))
            .collect::<Vec<_>>(),
    )
}

/// `GET /version`: the pve-manager version, its `x.y` release and the short git revision
/// it was built from (hex, as the schema's pattern says).
pub(super) fn version(version: &str) -> Value {
    let release: Vec<&str> = version.split('.').take(2).collect();
    json!({ "version": version, "release": release.join("."), "repoid": "5a5b1c2d" })
}

/// `GET /pools`: the pools the caller holds `Pool.Audit` on (the simulated privileges are
/// granted on `/`, so all of them or none).
pub(super) fn pools(pools: &[String], privs: Privs) -> Value {
    if !privs.has("Pool.Audit") {
        return json!([]);
    }
    pools.iter().map(|p| json!({ "poolid": p })).collect()
}
