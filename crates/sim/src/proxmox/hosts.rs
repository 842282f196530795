//! What the simulated hosts report: `/cluster/resources` (guests, hosts, storages),
//! `/cluster/ha/status/current` (an LRM per host, `maintenance mode` for a host in
//! maintenance) and `/cluster/status` (the cluster's name and its hosts).

use serde_json::{json, Value};

use super::{now_secs, volumes, Shared, GIB, MIB};

pub(super) fn resources(shared: &Shared, kind: Option<&str>) -> Value {
    let o = &shared.opts;
    let st = shared.lock();
    let mut out = Vec::new();
    if kind.is_none() || kind == Some("vm") {
        for vm in st.vms.values() {
            let mut v = json!({
                "id": format!("qemu/{}", vm.vmid), "type": "qemu", "vmid": vm.vmid, "node": vm.node,
                "status": vm.status, "template": u8::from(vm.template),
                "maxmem": vm.memory_mib() * MIB, "mem": if vm.status == "running" { vm.memory_mib() * MIB / 2 } else { 0 },
                "maxcpu": vm.cpus(), "cpu": 0.01, "maxdisk": 8 * GIB, "disk": 0, "uptime": 0,
            });
            // A clone's temporary config has no name; Proxmox then lists none.
            if !vm.name.is_empty() {
                v["name"] = json!(vm.name);
            }
            if !vm.tags().is_empty() {
                v["tags"] = json!(vm.tags());
            }
            if let Some(l) = &vm.lock {
                v["lock"] = json!(l);
            }
            out.push(v);
        }
    }
    if kind.is_none() || kind == Some("node") {
        for h in &o.hosts {
            let used: u64 = st
                .vms
                .values()
                .filter(|v| v.node == h.name && v.status == "running")
                .map(|v| v.memory_mib() * MIB)
                .sum();
            out.push(json!({
                "id": format!("node/{}", h.name), "type": "node", "node": h.name,
                "status": if h.online { "online" } else { "offline" },
                "maxmem": h.maxmem, "mem": h.base_mem + used, "maxcpu": h.cores, "cpu": 0.05,
                "level": "", "uptime": 100000,
            }));
        }
    }
    if kind.is_none() || kind == Some("storage") {
        for h in &o.hosts {
            for s in &o.storages {
                out.push(json!({
                    "id": format!("storage/{}/{}", h.name, s.name), "type": "storage", "node": h.name,
                    "storage": s.name, "shared": u8::from(s.shared), "status": "available",
                    "content": s.content, "plugintype": volumes::plugin(s),
                }));
            }
        }
    }
    Value::Array(out)
}

/// `GET /cluster/ha/status/current`: quorum, the CRM master, and one LRM per host.
pub(super) fn ha_status(shared: &Shared) -> Value {
    let o = &shared.opts;
    let now = now_secs();
    let master = o.hosts.iter().find(|h| h.online).map(|h| h.name.clone());
    let mut out = vec![json!({
        "id": "quorum", "type": "quorum", "node": master.clone().unwrap_or_default(),
        "status": "OK", "quorate": true,
    })];
    if let Some(m) = &master {
        out.push(json!({
            "id": "master", "type": "master", "node": m,
            "status": format!("{m} (active, {now})"), "timestamp": now,
        }));
    }
    for h in &o.hosts {
        let status = if !h.online {
            "old timestamp - dead?"
        } else if h.maintenance {
            "maintenance mode"
        } else {
            "idle"
        };
        out.push(json!({
            "id": format!("lrm:{}", h.name), "type": "lrm", "node": h.name,
            "status": format!("{status} ({now})"), "timestamp": now,
        }));
    }
    Value::Array(out)
}

/// `GET /cluster/status`: the cluster (when there is one) and its hosts.
pub(super) fn cluster_status(shared: &Shared) -> Value {
    let o = &shared.opts;
    let mut out = Vec::new();
    if let Some(name) = &o.cluster_name {
        out.push(json!({
            "id": "cluster", "type": "cluster", "name": name, "nodes": o.hosts.len(),
            "quorate": 1, "version": 3,
        }));
    }
    for (i, h) in o.hosts.iter().enumerate() {
        out.push(json!({
            "id": format!("node/{}", h.name), "type": "node", "name": h.name,
            "online": u8::from(h.online), "local": u8::from(i == 0), "nodeid": i + 1,
            "ip": format!("192.0.2.{}", i + 10), "level": "",
        }));
    }
    Value::Array(out)
}
