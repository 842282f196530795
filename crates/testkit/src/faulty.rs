//! Shared by the fault and SIGKILL suites: a three-provider config, the VMs that are
//! ours in every simulator, and the invariants checked after every cycle or poll.

use std::collections::{BTreeMap, BTreeSet};

use nodewright_sim::cluster::SimPodTemplate;
use nodewright_sim::env::SimEnv;

pub const GI: u64 = 1 << 30;

/// Groups, their provider and maxSize; pods select their group by the `workload` label.
pub const GROUPS: &[(&str, usize)] = &[("workers", 3), ("batch", 2), ("cache", 2)];

/// One group per provider, scale-down within seconds; `scan` is the scanInterval.
pub fn config(cluster: &str, scan: &str) -> String {
    format!(
        r#"clusterName: {cluster}
freeMemoryTarget: 0 B
provisionTimeout: 10s
scanInterval: {scan}
scaleDown: {{delayAfterAdd: 1s, delayAfterFailure: 2s, unneededTime: 1s}}
scaleUpBackoff: {{initial: 1s, max: 4s}}
nodeGroups:
  - name: workers
    provider: openstack
    maxSize: 3
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    labels: {{workload: workers}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.10:6443", k3s_token: fault-token}}
  - name: batch
    provider: proxmox
    maxSize: 2
    proxmox: {{template: agent-shared, memory: 8 GiB, cores: 4, join: guestAgent}}
    labels: {{workload: batch}}
    userData:
      template: k3s-agent.join.sh.j2
      variables: {{k3s_url: "https://192.0.2.10:6443", k3s_token: fault-token}}
  - name: cache
    provider: kamatera
    maxSize: 2
    kamatera: {{datacenter: EU, image: ubuntu_server_24.04_64-bit, cpu: 2B, ram: 8 GiB}}
    labels: {{workload: cache}}
    userData:
      template: k3s-agent.join.sh.j2
      variables: {{k3s_url: "https://192.0.2.10:6443", k3s_token: fault-token}}
"#
    )
}

/// A ReplicaSet `group`-app of `replicas` pods of 5 GiB on `group`: one pod per node.
pub fn add_app(env: &SimEnv, group: &str, replicas: i32) {
    env.cluster
        .add_replicaset(
            "default",
            &format!("{group}-app"),
            replicas,
            SimPodTemplate::new("nginx:1.25", 5 * GI).node_selector("workload", group),
        )
        .expect("replicaset");
}

pub fn scale_app(env: &SimEnv, group: &str, replicas: i32) {
    env.cluster
        .scale_replicaset("default", &format!("{group}-app"), replicas)
        .expect("scale");
}

/// Every VM of `cluster` in the three simulators, as (group, name).
pub fn vms(env: &SimEnv, cluster: &str) -> Vec<(String, String)> {
    let names = env
        .cloud
        .servers()
        .into_iter()
        .map(|s| s.name)
        .chain(env.proxmox.guests().into_iter().map(|v| v.name))
        .chain(env.kamatera.servers().into_iter().map(|s| s.name));
    let prefix = format!("{cluster}-");
    names
        .filter_map(|n| {
            let rest = n.strip_prefix(&prefix)?;
            let group = GROUPS
                .iter()
                .find(|(g, _)| rest.starts_with(&format!("{g}-")))?;
            Some((group.0.to_string(), n.clone()))
        })
        .collect()
}

/// Names of the Ready nodes.
pub fn ready_nodes(env: &SimEnv) -> BTreeSet<String> {
    env.cluster
        .nodes()
        .into_iter()
        .filter(super::ready)
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// Never above maxSize, no two VMs of one name, no VM deleted while its node (and the
/// pods on it) still existed. Returns what is wrong.
pub fn violations(env: &SimEnv, cluster: &str) -> Vec<String> {
    let mut out = Vec::new();
    let vms = vms(env, cluster);
    let mut per_group: BTreeMap<&str, usize> = BTreeMap::new();
    let mut names = BTreeSet::new();
    for (g, n) in &vms {
        *per_group.entry(g.as_str()).or_default() += 1;
        if !names.insert(n.clone()) {
            out.push(format!("duplicate VM name {n}"));
        }
    }
    for (g, max) in GROUPS {
        let n = per_group.get(g).copied().unwrap_or(0);
        if n > *max {
            out.push(format!(
                "group {g} has {n} VMs, above maxSize {max}: {vms:?}"
            ));
        }
    }
    for e in env.vm_log.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        if !e.booted && e.node_existed {
            out.push(format!("VM {} deleted while its node existed", e.name));
        }
    }
    out
}

/// VMs of ours without a Ready node of their name.
pub fn orphans(env: &SimEnv, cluster: &str) -> Vec<String> {
    let nodes = ready_nodes(env);
    vms(env, cluster)
        .into_iter()
        .filter(|(_, n)| !nodes.contains(n))
        .map(|(_, n)| n)
        .collect()
}

/// Pods of `group`-app Running.
pub fn running_of(env: &SimEnv, group: &str) -> usize {
    super::app_pods(env, &format!("{group}-app"))
        .iter()
        .filter(|p| super::running(p))
        .count()
}
