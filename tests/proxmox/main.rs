//! The Proxmox VE provider against the simulated Proxmox VE over loopback HTTP(S); every
//! request the client sends is checked against the official API schema by the simulator.

use nodewright_testkit as common;

mod auth;
mod check;
mod config;
mod privileges;
mod reconciler;
mod seed;
mod seed_identity;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::pve::{self as e2e, fast, provider_with, sim_with, token_creds};
use common::{recorder, Events};
use nodewright::cloud::proxmox::{
    pve_urlencode, ProviderOptions, ProxmoxCredentials, ProxmoxProvider,
};
use nodewright::cloud::{CloudError, CloudProvider, CreateRequest};
use nodewright::model::ServerStatus;
use nodewright::sim::proxmox::{SimAuth, SimProxmox, SimProxmoxOptions, SimTls};
use nodewright::sim::VmEvent;

async fn sim() -> (SimProxmox, Events) {
    let (events, hook) = recorder();
    let s = sim_with(SimProxmoxOptions {
        hook: Some(hook),
        ..SimProxmoxOptions::default()
    })
    .await;
    (s, events)
}

fn provider(s: &SimProxmox, groups: &[(&str, &str)]) -> ProxmoxProvider {
    provider_with(token_creds(s), groups)
}

/// A group settings hash as the config computes it (12 hex digits), stamped on every VM
/// these tests create.
const HASH: &str = "0a1b2c3d4e5f";

fn req(name: &str, group: &str, user_data: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: "prod".into(),
        group: group.into(),
        user_data: user_data.into(),
        size: None,
        settings_hash: HASH.into(),
        zone: None,
    }
}

fn assert_clean(s: &SimProxmox) {
    let v = s.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

/// A join as a cloud-config template renders it (k3s agent with the ownership labels and
/// the startup taint).
const WORKERS_USER_DATA: &str = "#cloud-config\nruncmd:\n  - k3s agent --node-name=prod-workers-aaaaa --node-label=nodewright.io/cluster=prod --node-label=nodewright.io/group=workers --node-taint=nodewright.io/startup=true:NoSchedule\n";

const SHARED: &str = "template: k3s-shared\ncores: 4\nmemory: 6 GiB\nciuser: ubuntu\nsshKeys: [\"ssh-ed25519 AAAAC3Nza+/x= me@laptop\"]\nbridge: vmbr1\npool: k8s\n";

#[tokio::test]
async fn full_scale_up_and_down_passes_the_schema_with_token_auth() {
    let (s, events) = sim().await;
    let static_group = format!(
        "{SHARED}clone: linked\nipConfig:\n  static:\n    cidr: 10.20.0.0/24\n    first: 10.20.0.10\n    last: 10.20.0.20\n    gateway: 10.20.0.1\n    nameservers: [10.20.0.2, 10.20.0.3]\n"
    );
    let p = provider(
        &s,
        &[
            ("workers", static_group.as_str()),
            (
                "agents",
                "template: 9002\njoin: guestAgent\nstorage: ceph\n",
            ),
        ],
    );
    p.verify().await.expect("verify");
    assert_eq!(
        p.group_shape("workers").await.expect("shape").memory,
        Some(6 << 30)
    );
    assert_eq!(
        p.group_shape("agents").await.expect("shape").memory,
        Some(4096 << 20)
    );

    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", WORKERS_USER_DATA))
        .await
        .expect("create");
    let script = "#!/bin/sh\nk3s agent --node-name=prod-agents-bbbbb --node-label=nodewright.io/cluster=prod\n";
    let b = p
        .create_server(&req("prod-agents-bbbbb", "agents", script))
        .await
        .expect("create");
    assert_eq!(a.status, ServerStatus::Building);
    assert_eq!(a.memory_bytes, Some(6 << 30));
    p.wait_for_joins().await;
    assert_eq!(
        p.join_state(&b.id),
        Some(nodewright::cloud::proxmox::JoinState::Done)
    );

    let vm = s
        .guests()
        .into_iter()
        .find(|v| v.name == a.name)
        .expect("vm");
    assert_eq!(vm.config.get("cores").map(String::as_str), Some("4"));
    assert_eq!(vm.config.get("memory").map(String::as_str), Some("6144"));
    assert_eq!(
        vm.config.get("ipconfig0").map(String::as_str),
        Some("ip=10.20.0.10/24,gw=10.20.0.1")
    );
    assert_eq!(
        vm.config.get("nameserver").map(String::as_str),
        Some("10.20.0.2 10.20.0.3")
    );
    assert!(vm
        .config
        .get("net0")
        .is_some_and(|n| n.ends_with("bridge=vmbr1") && !n.contains("vmbr0")));
    assert!(vm.tags().contains("nw-c-prod") && vm.tags().contains("nw-g-workers"));
    assert_eq!(vm.status, "running");
    // The seed replaced Proxmox's own cloud-init drive (both would be labelled cidata).
    let seed = format!("local:iso/nw-prod-{}-{}-seed.iso", e2e::TEST_IDENTITY, a.id);
    assert_eq!(
        vm.config.get("ide3").map(String::as_str),
        Some(format!("{seed},media=cdrom").as_str())
    );
    assert_eq!(vm.config.get("ide2"), None, "{:?}", vm.config);
    let on_storage: Vec<String> = s
        .volumes(&vm.node, "local")
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    assert_eq!(on_storage, vec![seed.clone()]);

    // Booted: the cloud-init VM with the user data its seed carried; the agent VM after
    // its script ran.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let booted: BTreeMap<String, String> = events
        .lock()
        .expect("events")
        .iter()
        .filter_map(|e| match e {
            VmEvent::Booted {
                name, user_data, ..
            } => Some((name.clone(), user_data.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(booted.get(&b.name).map(String::as_str), Some(script));
    assert_eq!(
        booted.get(&a.name).map(String::as_str),
        Some(WORKERS_USER_DATA),
        "the cloud-init VM joins with the seed's user data"
    );

    let listed = p.list_servers("prod").await.expect("list");
    assert_eq!(listed.len(), 2, "{listed:?}");
    for l in &listed {
        assert_eq!(l.status, ServerStatus::Active);
        assert_eq!(l.cluster.as_deref(), Some("prod"));
        assert!(
            SystemTime::now()
                .duration_since(l.created)
                .unwrap_or_default()
                < Duration::from_secs(60)
        );
    }
    assert!(p.list_servers("other").await.expect("list").is_empty());

    p.delete_server("prod", &a.id).await.expect("delete");
    p.delete_server("prod", &b.id).await.expect("delete");
    p.delete_server("prod", &b.id)
        .await
        .expect("deleting a gone VM is success");
    assert!(s.guests().is_empty());
    assert!(
        s.all_volumes().is_empty(),
        "the seed goes with its VM: {:?}",
        s.all_volumes()
    );
    assert!(events
        .lock()
        .expect("events")
        .iter()
        .any(|e| matches!(e, VmEvent::Deleted { name } if *name == a.name)));

    assert_clean(&s);
    let calls = s.calls();
    let endpoints: BTreeSet<String> = calls
        .iter()
        .filter_map(|c| c.endpoint.clone().map(|e| format!("{} {e}", c.method)))
        .collect();
    for want in [
        "GET /cluster/resources",
        "GET /cluster/nextid",
        "GET /nodes/{node}/storage",
        "GET /nodes/{node}/qemu/{vmid}/config",
        "POST /nodes/{node}/qemu/{vmid}/clone",
        "POST /nodes/{node}/qemu/{vmid}/config",
        "POST /nodes/{node}/qemu/{vmid}/status/start",
        "POST /nodes/{node}/qemu/{vmid}/status/stop",
        "DELETE /nodes/{node}/qemu/{vmid}",
        "POST /nodes/{node}/storage/{storage}/upload",
        "DELETE /nodes/{node}/storage/{storage}/content/{volume}",
        "GET /nodes/{node}/tasks/{upid}/status",
        "POST /nodes/{node}/qemu/{vmid}/agent/ping",
        "POST /nodes/{node}/qemu/{vmid}/agent/file-write",
        "POST /nodes/{node}/qemu/{vmid}/agent/exec",
        "GET /nodes/{node}/qemu/{vmid}/agent/exec-status",
    ] {
        assert!(
            endpoints.contains(want),
            "{want} never called: {endpoints:#?}"
        );
    }
    let token = format!(
        "PVEAPIToken={}={}",
        s.options().token_id,
        s.options().token_secret
    );
    assert_eq!(
        token,
        "PVEAPIToken=nodewright@pve!autoscaler=5f0c2a9e-1b7d-4c3e-9a8f-6d2e1c0b9a87"
    );
    for c in &calls {
        assert_eq!(c.auth, SimAuth::Token(token.clone()), "{c:?}");
        assert!(
            c.status < 400 || c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}/agent/ping"),
            "{c:?}"
        );
    }
}

#[tokio::test]
async fn vm_id_race_moves_on_to_the_next_id() {
    let (s, _) = sim().await;
    let p = provider(&s, &[("workers", "template: k3s-shared\n")]);
    s.race_next_clones(2);
    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", ""))
        .await
        .expect("create despite races");
    let ids: BTreeSet<u32> = s.vms().iter().map(|v| v.vmid).collect();
    // Two ids were taken by the racer; ours is a third, fresh one.
    assert!(ids.contains(&100) && ids.contains(&101), "{ids:?}");
    assert_eq!(a.id, "102");
    let vm = s
        .guests()
        .into_iter()
        .find(|v| v.vmid == 102)
        .expect("ours");
    assert_eq!(vm.name, "prod-workers-aaaaa");
    // The racer's VMs are not ours.
    assert_eq!(p.list_servers("prod").await.expect("list").len(), 1);
    assert_clean(&s);
}

#[tokio::test]
async fn static_pool_never_hands_out_an_address_twice_even_across_restarts() {
    let (s, _) = sim().await;
    let group = "template: k3s-shared\nipConfig:\n  static:\n    cidr: 192.168.50.0/24\n    first: 192.168.50.10\n    last: 192.168.50.13\n    gateway: 192.168.50.1\n";
    // Someone else's nodewright VM (another cluster) already holds .10.
    s.insert_vm(
        "pve3",
        "other-x-11111",
        "nw-c-other;nw-g-x",
        Some("ip=192.168.50.10/24,gw=192.168.50.1"),
    );
    let p = provider(&s, &[("workers", group)]);
    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", ""))
        .await
        .expect("create");
    let b = p
        .create_server(&req("prod-workers-bbbbb", "workers", ""))
        .await
        .expect("create");
    drop(p);
    // A restarted nodewright knows nothing but what it reads back.
    let p = provider(&s, &[("workers", group)]);
    let c = p
        .create_server(&req("prod-workers-ccccc", "workers", ""))
        .await
        .expect("create");
    let e = p
        .create_server(&req("prod-workers-ddddd", "workers", ""))
        .await
        .expect_err("exhausted");
    assert!(e.to_string().contains("exhausted"), "{e}");
    let ip = |id: &str| {
        s.vms()
            .into_iter()
            .find(|v| v.vmid.to_string() == id)
            .and_then(|v| v.config.get("ipconfig0").cloned())
            .unwrap_or_default()
    };
    let addrs: Vec<String> = [&a.id, &b.id, &c.id].iter().map(|id| ip(id)).collect();
    assert_eq!(
        addrs,
        vec![
            "ip=192.168.50.11/24,gw=192.168.50.1",
            "ip=192.168.50.12/24,gw=192.168.50.1",
            "ip=192.168.50.13/24,gw=192.168.50.1",
        ]
    );
    // Freed by a delete, the address may be used again, but only once.
    p.delete_server("prod", &b.id).await.expect("delete");
    let d = p
        .create_server(&req("prod-workers-eeeee", "workers", ""))
        .await
        .expect("create");
    assert_eq!(ip(&d.id), "ip=192.168.50.12/24,gw=192.168.50.1");
    let live: Vec<String> = s
        .guests()
        .iter()
        .filter_map(|v| v.config.get("ipconfig0").cloned())
        .collect();
    let unique: BTreeSet<&String> = live.iter().collect();
    assert_eq!(unique.len(), live.len(), "{live:?}");
    assert_clean(&s);
}

#[tokio::test]
async fn host_choice_spreads_the_group_and_respects_local_templates() {
    let (s, _) = sim().await;
    let p = provider(
        &s,
        &[
            ("spread", "template: k3s-shared\n"),
            ("local", "template: k3s-local\n"),
            ("pinned", "template: k3s-shared\nnodes: [pve2, pve3]\n"),
        ],
    );
    let host_of = |id: &str| {
        s.vms()
            .into_iter()
            .find(|v| v.vmid.to_string() == id)
            .map(|v| v.node)
            .unwrap_or_default()
    };
    let mut spread = Vec::new();
    for n in ["aaaaa", "bbbbb", "ccccc"] {
        let v = p
            .create_server(&req(&format!("prod-spread-{n}"), "spread", ""))
            .await
            .expect("create");
        spread.push(host_of(&v.id));
    }
    // Equal VM counts: the tightest fit first (pve3: 32 GiB against 64), then the hosts
    // without a VM of the group.
    assert_eq!(spread[0], "pve3");
    assert_eq!(
        spread.iter().collect::<BTreeSet<_>>().len(),
        3,
        "{spread:?}"
    );
    for n in ["aaaaa", "bbbbb"] {
        let v = p
            .create_server(&req(&format!("prod-local-{n}"), "local", ""))
            .await
            .expect("create");
        assert_eq!(
            host_of(&v.id),
            "pve1",
            "a template on local storage clones on its own host"
        );
    }
    for n in ["aaaaa", "bbbbb", "ccccc"] {
        let v = p
            .create_server(&req(&format!("prod-pinned-{n}"), "pinned", ""))
            .await
            .expect("create");
        assert!(["pve2", "pve3"].contains(&host_of(&v.id).as_str()));
    }
    // A local template restricted to other hosts cannot be placed.
    let q = provider(&s, &[("bad", "template: k3s-local\nnodes: [pve2]\n")]);
    let e = q
        .create_server(&req("prod-bad-aaaaa", "bad", ""))
        .await
        .expect_err("no host");
    assert!(e.to_string().contains("local storage"), "{e}");
    assert_clean(&s);
}

#[tokio::test]
async fn ssh_keys_are_percent_encoded_as_proxmox_expects() {
    let (s, _) = sim().await;
    let keys = [
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI+b/c= alice@laptop",
        "ssh-rsa AAAAB3NzaC1yc2E= cardno:000609769932",
    ];
    let p = provider(
        &s,
        &[(
            "workers",
            &format!(
                "template: k3s-shared\nsshKeys: [\"{}\", \"{}\"]\n",
                keys[0], keys[1]
            ),
        )],
    );
    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", ""))
        .await
        .expect("create");
    let vm = s
        .guests()
        .into_iter()
        .find(|v| v.vmid.to_string() == a.id)
        .expect("vm");
    let stored = vm.config.get("sshkeys").cloned().unwrap_or_default();
    assert_eq!(
        stored,
        "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAI%2Bb%2Fc%3D%20alice%40laptop%0Assh-rsa%20AAAAB3NzaC1yc2E%3D%20cardno%3A000609769932"
    );
    assert_eq!(stored, pve_urlencode(&keys.join("\n")));
    assert!(!stored.contains('+') && !stored.contains(' '));
    assert_clean(&s);
}

#[tokio::test]
async fn task_failure_is_surfaced_and_the_half_made_vm_removed() {
    let (s, _) = sim().await;
    let p = provider(&s, &[("workers", "template: k3s-shared\n")]);
    s.fail_next_tasks("qmstart", 1, "start failed: QEMU exited with code 1");
    let e = p
        .create_server(&req("prod-workers-aaaaa", "workers", ""))
        .await
        .expect_err("start fails");
    let m = e.to_string();
    assert!(
        m.contains("qmstart") && m.contains("start failed: QEMU exited with code 1"),
        "{m}"
    );
    assert!(s.guests().is_empty(), "the half-made VM is destroyed");
    assert_clean(&s);
}

#[tokio::test]
async fn create_failing_leaves_nothing_behind() {
    let (s, _) = sim().await;
    let p = provider(&s, &[("workers", "template: k3s-shared\n")]);
    s.fail_next_tasks("qmclone", 1, "clone failed: storage 'ceph' is full");
    let e = p
        .create_server(&req("prod-workers-aaaaa", "workers", ""))
        .await
        .expect_err("clone fails");
    assert!(e.to_string().contains("storage 'ceph' is full"), "{e}");
    assert!(s.guests().is_empty());
    // Not a template: a clear error.
    let q = provider(&s, &[("x", "template: 12345\n")]);
    let e = q
        .create_server(&req("prod-x-aaaaa", "x", ""))
        .await
        .expect_err("missing template");
    assert!(matches!(e, CloudError::NotFound { .. }), "{e}");
    // The next create works.
    p.create_server(&req("prod-workers-bbbbb", "workers", ""))
        .await
        .expect("create");
    assert_clean(&s);
}

#[tokio::test]
async fn guest_agent_join_failure_and_never_ready_show_as_errors() {
    let (s, events) = sim().await;
    let p = provider(
        &s,
        &[("agents", "template: agent-shared\njoin: guestAgent\n")],
    );
    s.set_join_exit_code(3);
    s.never_ready("prod-agents-stuck");
    let a = p
        .create_server(&req("prod-agents-aaaaa", "agents", "#!/bin/sh\nexit 3\n"))
        .await
        .expect("create");
    let b = p
        .create_server(&req("prod-agents-stuck1", "agents", "#!/bin/sh\ntrue\n"))
        .await
        .expect("create");
    p.wait_for_joins().await;
    let listed = p.list_servers("prod").await.expect("list");
    for id in [&a.id, &b.id] {
        let l = listed.iter().find(|l| &l.id == id).expect("listed");
        assert_eq!(l.status, ServerStatus::Error, "{l:?}");
    }
    assert!(
        matches!(p.join_state(&a.id), Some(nodewright::cloud::proxmox::JoinState::Failed(m)) if m.contains("exit code 3"))
    );
    assert!(
        matches!(p.join_state(&b.id), Some(nodewright::cloud::proxmox::JoinState::Failed(m)) if m.contains("guest agent"))
    );
    assert!(!events
        .lock()
        .expect("events")
        .iter()
        .any(|e| matches!(e, VmEvent::Booted { .. })));
    assert_clean(&s);
}

#[tokio::test]
async fn leftover_vm_found_by_tags_and_delete_failing_once() {
    let (s, _) = sim().await;
    let p = provider(&s, &[("workers", "template: k3s-shared\n")]);
    let left = s.insert_vm(
        "pve2",
        "prod-workers-crash",
        "nw-c-prod;nw-g-workers;nw-t-1700000000",
        None,
    );
    let untagged = s.insert_vm("pve2", "prod-workers-manual", "", None);
    let listed = p.list_servers("prod").await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, left.to_string());
    assert_eq!(listed[0].group.as_deref(), Some("workers"));
    assert_eq!(
        listed[0].created,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    );
    // Without a time tag, the config's meta ctime is used.
    let no_time = s.insert_vm(
        "pve1",
        "prod-workers-notime",
        "nw-c-prod;nw-g-workers",
        None,
    );
    let l = p.list_servers("prod").await.expect("list");
    assert!(l.iter().any(|x| x.id == no_time.to_string()
        && x.created > SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)));
    s.fail_next_deletes(1);
    let e = p
        .delete_server("prod", &left.to_string())
        .await
        .expect_err("fails once");
    assert!(e.to_string().contains("locked"), "{e}");
    p.delete_server("prod", &left.to_string())
        .await
        .expect("second attempt works");
    assert!(!s.vms().iter().any(|v| v.vmid == left));
    // Never deletes what is not ours.
    let e = p
        .delete_server("prod", &untagged.to_string())
        .await
        .expect_err("refused");
    assert!(e.to_string().contains("not tagged"), "{e}");
    assert!(s.vms().iter().any(|v| v.vmid == untagged));
    assert_clean(&s);
}

/// Issue 8: Proxmox accepted any VM carrying a nodewright cluster tag, another cluster's
/// included. Now a VM is destroyed only when its tags name this cluster and no other;
/// no stop or destroy is sent for the others.
#[tokio::test]
async fn proxmox_delete_refuses_a_vm_tagged_for_another_cluster() {
    let (s, _) = sim().await;
    let p = provider(&s, &[("workers", "template: k3s-shared\n")]);
    let theirs = s.insert_vm(
        "pve2",
        "dev-workers-aaaaa",
        "nw-c-dev;nw-g-workers;nw-t-1700000000",
        None,
    );
    let both = s.insert_vm(
        "pve2",
        "prod-workers-both",
        "nw-c-prod;nw-g-workers;nw-c-dev",
        None,
    );
    let group_only = s.insert_vm("pve1", "prod-workers-group", "nw-g-workers", None);
    for (vmid, cause) in [
        (theirs, "tagged for cluster 'dev', not 'prod'"),
        (both, "tagged for several clusters (prod, dev)"),
        (group_only, "not tagged as a nodewright VM"),
    ] {
        match p.delete_server("prod", &vmid.to_string()).await {
            Err(e @ CloudError::Refused { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&format!("({vmid})")), "names the VM: {text}");
                assert!(text.contains(cause), "names the cause: {text}");
            }
            other => panic!("{vmid}: expected a refusal, got {other:?}"),
        }
        assert!(s.vms().iter().any(|v| v.vmid == vmid), "{vmid} destroyed");
    }
    assert!(
        !s.calls().iter().any(|c| c.method == "DELETE"
            || c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}/status/stop")),
        "a stop or destroy was sent"
    );
    // Neither cluster lists the VM tagged for both.
    for cluster in ["prod", "dev"] {
        let listed = p.list_servers(cluster).await.expect("list");
        assert!(
            !listed.iter().any(|l| l.id == both.to_string()),
            "{cluster}: {listed:?}"
        );
    }
    // Read back as its tags say; another cluster's is its.
    let read = p
        .get_server("prod", &theirs.to_string())
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(read.cluster.as_deref(), Some("dev"));
    assert_eq!(read.group.as_deref(), Some("workers"));
    assert!(p.get_server("prod", "999999").await.expect("get").is_none());
    // Its own cluster may delete it.
    p.delete_server("dev", &theirs.to_string())
        .await
        .expect("dev deletes its own VM");
    assert!(!s.vms().iter().any(|v| v.vmid == theirs));
    assert_clean(&s);
}
