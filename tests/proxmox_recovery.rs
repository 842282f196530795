//! Proxmox VE findings of issue 11, against the schema-checking simulator: error text that
//! older servers put only in the HTTP status line, the VM-id collision retry that depends
//! on it, and a clone left half-made by a process killed before configuring it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nodewright::cloud::proxmox::{
    JoinState, ProviderOptions, ProxmoxCredentials, ProxmoxProvider, ProxmoxSettings,
};
use nodewright::cloud::{CloudProvider, CreateRequest};
use nodewright::sim::proxmox::{SimProxmox, SimProxmoxOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn sim(status_line_errors: bool) -> SimProxmox {
    SimProxmox::start(SimProxmoxOptions {
        status_line_errors,
        ..SimProxmoxOptions::default()
    })
    .await
    .expect("simulator starts (needs PVE_API_SCHEMA)")
}

fn creds(s: &SimProxmox) -> ProxmoxCredentials {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("pve.yaml");
    s.write_credentials_file(&p).expect("write");
    ProxmoxCredentials::from_file(&p).expect("credentials load")
}

fn provider(s: &SimProxmox, groups: &[(&str, &str)]) -> ProxmoxProvider {
    let groups: BTreeMap<String, ProxmoxSettings> = groups
        .iter()
        .map(|(n, y)| {
            let settings = nodewright::yaml::from_str(y).expect("settings parse");
            (n.to_string(), settings)
        })
        .collect();
    let options = ProviderOptions {
        poll_interval: Duration::from_millis(50),
        task_timeout: Duration::from_secs(10),
        agent_timeout: Duration::from_millis(600),
        exec_timeout: Duration::from_secs(5),
        ..ProviderOptions::default()
    };
    ProxmoxProvider::with_options(creds(s), groups, options).expect("provider builds")
}

fn req(name: &str, group: &str, user_data: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: "prod".into(),
        group: group.into(),
        user_data: user_data.into(),
    }
}

fn assert_clean(s: &SimProxmox) {
    let v = s.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

/// The first line of the raw answer to `GET path` (no client library in between).
async fn status_line(s: &SimProxmox, path: &str) -> String {
    let addr = s.url().trim_start_matches("http://").to_string();
    let mut tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let o = s.options();
    let request = format!(
        "GET /api2/json{path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: PVEAPIToken={}={}\r\nConnection: close\r\n\r\n",
        o.token_id, o.token_secret
    );
    tcp.write_all(request.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw).to_string();
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn proxmox_error_text_only_in_the_status_line_is_reported() {
    let s = sim(true).await;
    // What an older server sends: the message is the reason phrase, not the standard one.
    assert_eq!(
        status_line(&s, "/nodes/pve1/qemu/4242/config").await,
        "HTTP/1.1 500 Configuration file 'nodes/pve1/qemu-server/4242.conf' does not exist"
    );
    // A guest agent that never answers: the join fails with the server's words, not
    // "Internal Server Error".
    s.never_ready("prod-agents-");
    let p = provider(
        &s,
        &[("agents", "template: agent-shared\njoin: guestAgent\n")],
    );
    let vm = p
        .create_server(&req("prod-agents-aaaaa", "agents", "#!/bin/sh\ntrue\n"))
        .await
        .expect("create");
    p.wait_for_joins().await;
    match p.join_state(&vm.id) {
        Some(JoinState::Failed(m)) => {
            assert!(m.contains("QEMU guest agent is not running"), "{m}");
            assert!(!m.contains("Internal Server Error"), "{m}");
        }
        other => panic!("join should have failed, got {other:?}"),
    }
    assert_clean(&s);
}

#[tokio::test]
async fn proxmox_vm_id_collision_reported_in_the_status_line_retries_with_another_id() {
    let s = sim(true).await;
    let p = provider(&s, &[("workers", "template: k3s-shared\n")]);
    // Another process takes the id between our nextid and our clone.
    s.race_next_clones(1);
    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", ""))
        .await
        .expect("create despite the collision");
    assert_eq!(a.id, "101", "the racer has 100");
    let clones: Vec<u16> = s
        .calls()
        .iter()
        .filter(|c| c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}/clone"))
        .map(|c| c.status)
        .collect();
    assert_eq!(
        clones,
        vec![500, 200],
        "one refused clone, then one with a fresh id"
    );
    assert_clean(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxmox_two_processes_creating_at_once_both_succeed_with_distinct_ids() {
    let s = sim(true).await;
    // Two processes: two providers, each with its own create lock.
    let p1 = provider(&s, &[("workers", "template: k3s-shared\n")]);
    let p2 = provider(&s, &[("workers", "template: k3s-shared\n")]);
    let mut ids = BTreeSet::new();
    for round in 0..3 {
        let (ra, rb) = (
            req(&format!("prod-workers-a{round}xyz"), "workers", ""),
            req(&format!("prod-workers-b{round}xyz"), "workers", ""),
        );
        let (a, b) = tokio::join!(p1.create_server(&ra), p2.create_server(&rb));
        ids.insert(a.expect("first process creates").id);
        ids.insert(b.expect("second process creates").id);
    }
    assert_eq!(ids.len(), 6, "{ids:?}");
    assert_eq!(s.guests().len(), 6);
    assert_clean(&s);
}
