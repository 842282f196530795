//! Issue 29: a VM whose node joined and whose Node is gone. A kubelet registers its Node
//! only when it starts (the simulated one too), so such a VM never comes back by itself:
//! nodewright restarts it once, recording the restart on the VM, and reports it if no
//! Node is back `provisionTimeout` after; it never deletes it for it. Against each
//! simulated cloud over loopback HTTP, the whole loop (plan and act).

use nodewright_testkit as common;

use common::lost_node::{self, LostNodeCloud};
use nodewright::sim::env::SimEnv;

/// Proxmox: `POST /nodes/{node}/qemu/{vmid}/status/reboot`, the mark a `nw-r-<secs>` tag;
/// every request checked against the official schema.
mod proxmox {
    use super::*;

    const CONFIG: &str = r#"clusterName: prod
freeMemoryTarget: 0 B
provisionTimeout: 10m
nodeGroups:
  - name: g
    provider: proxmox
    minSize: 2
    maxSize: 3
    proxmox: {template: k3s-shared, memory: 4 GiB, cores: 2}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "lost-node-token"}
"#;

    fn tags_of(env: &SimEnv, name: &str) -> String {
        env.proxmox
            .guests()
            .into_iter()
            .find(|v| v.name == name)
            .map(|v| v.tags().to_string())
            .unwrap_or_default()
    }

    const CLOUD: LostNodeCloud = LostNodeCloud {
        config: CONFIG,
        vms: |env| {
            env.proxmox
                .guests()
                .into_iter()
                .map(|v| (v.vmid.to_string(), v.name))
                .collect()
        },
        restarts: |env| {
            env.proxmox
                .calls()
                .iter()
                .filter(|c| {
                    c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}/status/reboot")
                        && c.status == 200
                })
                .count()
        },
        restart_mark: |env, name| {
            tags_of(env, name)
                .split(';')
                .any(|t| t.starts_with("nw-r-"))
        },
        deletes: |env| {
            env.proxmox
                .calls()
                .iter()
                .filter(|c| {
                    c.method == "DELETE"
                        && c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}")
                })
                .count()
        },
        stops: |env| {
            env.proxmox
                .calls()
                .iter()
                .filter(|c| {
                    c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}/status/stop")
                        && c.status == 200
                })
                .count()
        },
        fence_mark: |env, name| {
            tags_of(env, name)
                .split(';')
                .any(|t| t.starts_with("nw-f-"))
        },
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_joined_vm_whose_node_is_gone_is_restarted_once_then_reported_never_deleted() {
        lost_node::a_joined_vm_whose_node_is_gone_is_restarted_once_then_reported_never_deleted(
            &CLOUD,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn item_5_a_not_ready_node_holding_local_data_has_its_vm_stopped_once_never_deleted() {
        lost_node::item_5_a_not_ready_node_holding_local_data_has_its_vm_stopped_once_never_deleted(
            &CLOUD,
        )
        .await;
    }
}

/// OpenStack: `POST /servers/{id}/action` with a SOFT `reboot`, the mark the server
/// metadata `nodewright-restarted`.
mod openstack {
    use super::*;

    const CONFIG: &str = r#"clusterName: prod
freeMemoryTarget: 0 B
provisionTimeout: 10m
nodeGroups:
  - name: g
    provider: openstack
    minSize: 2
    maxSize: 3
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "lost-node-token"}
"#;

    const CLOUD: LostNodeCloud = LostNodeCloud {
        config: CONFIG,
        vms: |env| {
            env.cloud
                .servers()
                .into_iter()
                .map(|s| (s.id, s.name))
                .collect()
        },
        // No warm pool here: every server action is a reboot.
        restarts: |env| {
            env.cloud
                .calls()
                .iter()
                .filter(|c| c.method == "POST" && c.path.ends_with("/action"))
                .count()
        },
        restart_mark: |env, name| {
            env.cloud
                .servers()
                .iter()
                .any(|s| s.name == name && s.metadata.contains_key("nodewright-restarted"))
        },
        deletes: |env| {
            env.cloud
                .calls()
                .iter()
                .filter(|c| {
                    c.method == "DELETE"
                        && c.path.contains("/servers/")
                        && !c.path.contains("/metadata/")
                })
                .count()
        },
        // No warm pool here, and the Node stays: the one server action is the stop.
        stops: |env| {
            env.cloud
                .calls()
                .iter()
                .filter(|c| c.method == "POST" && c.path.ends_with("/action"))
                .count()
        },
        fence_mark: |env, name| {
            env.cloud
                .servers()
                .iter()
                .any(|s| s.name == name && s.metadata.contains_key("nodewright-fenced"))
        },
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_joined_vm_whose_node_is_gone_is_restarted_once_then_reported_never_deleted() {
        lost_node::a_joined_vm_whose_node_is_gone_is_restarted_once_then_reported_never_deleted(
            &CLOUD,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn item_5_a_not_ready_node_holding_local_data_has_its_vm_stopped_once_never_deleted() {
        lost_node::item_5_a_not_ready_node_holding_local_data_has_its_vm_stopped_once_never_deleted(
            &CLOUD,
        )
        .await;
    }
}

/// Kamatera: `POST /service/server/reboot`, the mark a `nodewright_b<secs>` tag.
mod kamatera {
    use super::*;

    const CONFIG: &str = r#"clusterName: prod
freeMemoryTarget: 0 B
provisionTimeout: 10m
nodeGroups:
  - name: g
    provider: kamatera
    minSize: 2
    maxSize: 3
    kamatera: {datacenter: EU, image: ubuntu_server_24.04_64-bit, cpu: 2B, ram: 8 GiB}
    userData:
      template: k3s-agent.join.sh.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "lost-node-token"}
"#;

    const CLOUD: LostNodeCloud = LostNodeCloud {
        config: CONFIG,
        vms: |env| {
            env.kamatera
                .servers()
                .into_iter()
                .map(|s| (s.id, s.name))
                .collect()
        },
        restarts: |env| {
            env.kamatera
                .calls()
                .iter()
                .filter(|c| c.method == "POST" && c.path == "/service/server/reboot")
                .count()
        },
        restart_mark: |env, name| {
            env.kamatera
                .servers()
                .iter()
                .any(|s| s.name == name && s.tags.iter().any(|t| t.starts_with("nodewright_b")))
        },
        deletes: |env| {
            env.kamatera
                .calls()
                .iter()
                .filter(|c| c.path == "/service/server/terminate")
                .count()
        },
        stops: |env| {
            env.kamatera
                .calls()
                .iter()
                .filter(|c| c.method == "POST" && c.path == "/service/server/poweroff")
                .count()
        },
        fence_mark: |env, name| {
            env.kamatera
                .servers()
                .iter()
                .any(|s| s.name == name && s.tags.iter().any(|t| t.starts_with("nodewright_f")))
        },
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_joined_vm_whose_node_is_gone_is_restarted_once_then_reported_never_deleted() {
        lost_node::a_joined_vm_whose_node_is_gone_is_restarted_once_then_reported_never_deleted(
            &CLOUD,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn item_5_a_not_ready_node_holding_local_data_has_its_vm_stopped_once_never_deleted() {
        lost_node::item_5_a_not_ready_node_holding_local_data_has_its_vm_stopped_once_never_deleted(
            &CLOUD,
        )
        .await;
    }
}
