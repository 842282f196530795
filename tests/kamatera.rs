//! The Kamatera provider against the simulated cloudcli API over loopback HTTP, and the
//! reconciler scaling a `provider: kamatera` group up and down with the simulated cluster.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::{has_startup_taint, ready, recorder, running, Events};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use nodewright::act::Clouds;
use nodewright::cloud::kamatera::{
    time_tag, validate_settings, KamateraCredentials, KamateraProvider, KamateraSettings,
    ProviderOptions,
};
use nodewright::cloud::{CloudError, CloudProvider, CreateRequest, ServerStatus};
use nodewright::cluster::{kubeconfig_from_file, KubeCluster};
use nodewright::config::Config;
use nodewright::plan::Action;
use nodewright::reconcile::Reconciler;
use nodewright::sim::cluster::{SimCluster, SimClusterOptions, SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::SHIPPED_TEMPLATES;
use nodewright::sim::kamatera::{
    CreateFailure, SimKamatera, SimKamateraOptions, UnknownServerAnswer,
};
use nodewright::sim::{VmEvent, VmHook};

const GI: u64 = 1 << 30;

fn fast() -> ProviderOptions {
    ProviderOptions {
        poll_initial: Duration::from_millis(15),
        poll_max: Duration::from_millis(40),
        command_timeout: Duration::from_secs(10),
        ..ProviderOptions::default()
    }
}

/// Group settings: a base with `extra` lines added (or replacing base keys).
fn settings(extra: &str) -> KamateraSettings {
    let base = "datacenter: EU\nimage: ubuntu_server_24.04_64-bit\ncpu: 2B\nram: 4096\n";
    let overridden = |line: &str| {
        let key = line.split(':').next().unwrap_or("");
        extra.lines().any(|l| l.starts_with(&format!("{key}:")))
    };
    let kept: String = base
        .lines()
        .filter(|l| !overridden(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let yaml = format!("{kept}{extra}");
    nodewright::yaml::from_str(&yaml).expect("settings parse")
}

async fn sim_with(opts: SimKamateraOptions) -> (SimKamatera, Events) {
    let (events, hook) = recorder();
    let sim = SimKamatera::start(SimKamateraOptions {
        hook: Some(hook),
        ..opts
    })
    .await
    .expect("simulator starts");
    (sim, events)
}

async fn start_sim() -> (SimKamatera, Events) {
    sim_with(SimKamateraOptions::default()).await
}

fn creds(sim: &SimKamatera) -> KamateraCredentials {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kamatera.yaml");
    sim.write_credentials_file(&path)
        .expect("write credentials");
    KamateraCredentials::from_file(&path).expect("credentials load")
}

fn provider(sim: &SimKamatera, groups: &[(&str, KamateraSettings)]) -> KamateraProvider {
    let groups: BTreeMap<String, KamateraSettings> = groups
        .iter()
        .map(|(n, s)| (n.to_string(), s.clone()))
        .collect();
    KamateraProvider::with_options(creds(sim), groups, fast()).expect("provider builds")
}

/// A group settings hash as the config computes it (12 hex digits), stamped on every VM
/// these tests create.
const HASH: &str = "0a1b2c3d4e5f";

fn req(name: &str, group: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: "c1".into(),
        group: group.into(),
        user_data: format!("#!/bin/sh\necho joining {name}\n"),
        settings_hash: HASH.into(),
        zone: None,
    }
}

fn post_bodies(sim: &SimKamatera, path: &str) -> Vec<serde_json::Value> {
    sim.calls()
        .into_iter()
        .filter(|c| c.method == "POST" && c.path == path)
        .filter_map(|c| c.body)
        .collect()
}

#[tokio::test]
async fn api_key_headers_are_sent_and_a_wrong_key_is_an_auth_error() {
    let (sim, _) = start_sim().await;
    let p = provider(&sim, &[("workers", settings(""))]);
    assert!(p.list_servers("c1").await.expect("list").is_empty());
    p.verify().await.expect("verify");
    let calls = sim.calls();
    assert!(
        !calls.is_empty() && calls.iter().all(|c| c.authorized),
        "{calls:?}"
    );

    let mut wrong = creds(&sim);
    wrong.secret = "not-the-secret".into();
    let bad = KamateraProvider::with_options(wrong, BTreeMap::new(), fast()).expect("builds");
    match bad.list_servers("c1").await {
        Err(CloudError::Auth { message, .. }) => {
            assert!(message.contains("Authentication failed"), "{message}");
            assert!(!message.contains("not-the-secret"), "{message}");
        }
        other => panic!("expected an auth error, got {other:?}"),
    }
    assert!(!sim.calls().last().expect("call").authorized);
}

#[tokio::test]
async fn create_sends_tags_script_password_and_space_joined_lists() {
    let (sim, events) = start_sim().await;
    let s = settings(
        "ram: 8 GiB\ndisks: [\"size=50\", \"size=100\"]\nnetworks: [\"name=wan,ip=auto\", \"name=lan-12345-net,ip=auto\"]\nextraTags: [team-a]\nsshKey: ssh-ed25519 AAAAC3Nza me@host\n",
    );
    let s = KamateraSettings {
        cpu: "4B".into(),
        ..s
    };
    let p = provider(&sim, &[("workers", s)]);
    let r = req("c1-workers-aaaaa", "workers");
    let server = p.create_server(&r).await.expect("create");
    assert_eq!(server.name, "c1-workers-aaaaa");
    assert_eq!(server.cluster.as_deref(), Some("c1"));
    assert_eq!(server.group.as_deref(), Some("workers"));
    assert_eq!(server.status, ServerStatus::Active);
    assert_eq!(server.memory_bytes, Some(8 * GI));
    let shape = p.group_shape("workers").await.expect("shape");
    assert_eq!(shape.memory, Some(8 * GI));

    let vm = sim.servers().into_iter().next().expect("server exists");
    assert_eq!(vm.id, server.id);
    let stamp = time_tag("nodewright", server.created);
    assert_eq!(
        vm.tags,
        vec![
            "nodewright-c1",
            "nodewright-workers",
            stamp.as_str(),
            "nodewright_h03xsp8a733",
            "team-a"
        ]
    );
    assert_eq!(vm.script, r.user_data);
    assert_eq!(vm.disks, vec!["size=50", "size=100"]);
    assert_eq!(
        vm.networks,
        vec!["name=wan,ip=auto", "name=lan-12345-net,ip=auto"]
    );
    assert_eq!(vm.ram_mb, 8192);
    assert_eq!(vm.power, "on");
    assert_eq!(vm.ssh_key, "ssh-ed25519 AAAAC3Nza me@host");

    let body = post_bodies(&sim, "/service/server")
        .pop()
        .expect("create body");
    assert_eq!(body["disk"], "size=50 size=100");
    assert_eq!(
        body["network"],
        "name=wan,ip=auto name=lan-12345-net,ip=auto"
    );
    assert_eq!(
        body["tag"],
        format!("nodewright-c1 nodewright-workers {stamp} nodewright_h03xsp8a733 team-a")
    );
    assert_eq!(body["billingcycle"], "hourly");
    assert_eq!(body["poweronaftercreate"], "yes");
    assert_eq!(body["quantity"], 1);
    assert_eq!(body["script-file"], r.user_data.as_str());
    assert_eq!(body["password"], body["passwordValidate"]);

    // The VM booted with the script as its user data.
    let booted = events.lock().expect("events").clone();
    match booted.as_slice() {
        [VmEvent::Booted {
            name,
            user_data,
            memory_bytes,
            cpus,
        }] => {
            assert_eq!(name, "c1-workers-aaaaa");
            assert_eq!(user_data, &r.user_data);
            assert_eq!(memory_bytes, &(8 * GI));
            assert_eq!(cpus, &4);
        }
        other => panic!("expected one boot, got {other:?}"),
    }

    // A second server gets another strong password.
    p.create_server(&req("c1-workers-bbbbb", "workers"))
        .await
        .expect("create");
    let pw: Vec<String> = sim.servers().iter().map(|s| s.password.clone()).collect();
    assert_eq!(pw.len(), 2);
    assert_ne!(pw[0], pw[1]);
    for p in &pw {
        assert!((10..=20).contains(&p.len()), "{p}");
    }
}

#[tokio::test]
async fn user_data_can_go_to_the_userdata_field() {
    let (sim, events) = start_sim().await;
    let p = provider(&sim, &[("workers", settings("userDataField: userdata\n"))]);
    let mut r = req("c1-workers-ccccc", "workers");
    r.user_data = "#cloud-config\nhostname: x\n".into();
    p.create_server(&r).await.expect("create");
    let vm = &sim.servers()[0];
    assert_eq!(vm.userdata, r.user_data);
    assert!(vm.script.is_empty());
    assert!(
        matches!(&events.lock().expect("events")[0], VmEvent::Booted { user_data, .. } if *user_data == r.user_data)
    );
}

#[tokio::test]
async fn list_returns_only_servers_tagged_for_the_cluster() {
    let (sim, _) = start_sim().await;
    let p = provider(
        &sim,
        &[("workers", settings("")), ("big", settings("ram: 16384\n"))],
    );
    let ours = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create");
    // Another cluster's server with a name like ours, an untagged one, one tagged
    // with another prefix, and a leftover of ours in the other group.
    sim.insert_server(
        "c1-workers-other",
        &["nodewright-c2", "nodewright-workers"],
        true,
    );
    sim.insert_server("c1-workers-untagged", &[], true);
    sim.insert_server("c1-workers-foreign", &["k8sca-c1", "k8scang-workers"], true);
    let leftover = sim.insert_server("c1-big-zzzzz", &["nodewright-c1", "nodewright-big"], false);
    sim.insert_server("elsewhere", &["nodewright-c1", "nodewright-workers"], true);

    let mut listed = p.list_servers("c1").await.expect("list");
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, vec!["c1-big-zzzzz", "c1-workers-aaaaa"]);
    assert_eq!(listed[1].id, ours.id);
    assert_eq!(listed[1].group.as_deref(), Some("workers"));
    assert_eq!(listed[1].status, ServerStatus::Active);
    assert_eq!(listed[1].memory_bytes, Some(4 * GI));
    assert_eq!(listed[0].id, leftover);
    assert_eq!(listed[0].group.as_deref(), Some("big"));
    assert_eq!(listed[0].status, ServerStatus::Stopped);
    assert_eq!(listed[0].memory_bytes, Some(16 * GI));
    assert!(listed.iter().all(|s| s.provider == "kamatera"));
    assert!(p.list_servers("c2").await.expect("list").is_empty());

    // Tags are read once per server, not on every cycle.
    let tag_calls = |sim: &SimKamatera| {
        sim.calls()
            .iter()
            .filter(|c| c.path == "/server/tags")
            .count()
    };
    let before = tag_calls(&sim);
    p.list_servers("c1").await.expect("list");
    assert_eq!(tag_calls(&sim), before);
}

#[tokio::test]
async fn queue_is_polled_through_pending_and_running_with_both_id_forms() {
    let (sim, _) = sim_with(SimKamateraOptions {
        step: Duration::from_millis(80),
        ..SimKamateraOptions::default()
    })
    .await;
    let p = provider(&sim, &[("workers", settings(""))]);
    p.create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create");
    p.create_server(&req("c1-workers-bbbbb", "workers"))
        .await
        .expect("create");
    let commands = sim.commands();
    assert!(commands.iter().any(|c| c.id_as_string));
    assert!(commands.iter().any(|c| !c.id_as_string));
    assert!(
        commands.iter().all(|c| c.status == "complete"),
        "{commands:?}"
    );
    for c in &commands {
        let polls = sim
            .calls()
            .iter()
            .filter(|call| {
                call.path == "/service/queue"
                    && call.query.as_deref() == Some(&format!("id={}", c.id))
            })
            .count();
        assert!(polls >= 2, "command {} polled {polls} times", c.id);
    }
}

#[tokio::test]
async fn a_create_completes_when_the_queue_stays_silent_but_the_server_is_up() {
    let (sim, _) = sim_with(SimKamateraOptions {
        silent_queue: true,
        ..SimKamateraOptions::default()
    })
    .await;
    let p = provider(&sim, &[("workers", settings(""))]);
    let s = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create completes by the server list");
    assert_eq!(s.status, ServerStatus::Active);
    assert_eq!(sim.servers()[0].power, "on");
}

#[tokio::test]
async fn delete_terminates_with_force_and_tolerates_a_missing_server() {
    let (sim, events) = start_sim().await;
    let p = provider(&sim, &[("workers", settings(""))]);
    let s = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create");
    p.delete_server("c1", &s.id).await.expect("delete");
    assert!(sim.servers().is_empty());
    let body = post_bodies(&sim, "/service/server/terminate")
        .pop()
        .expect("terminate body");
    assert_eq!(body, serde_json::json!({ "id": s.id, "force": true }));
    assert!(
        matches!(events.lock().expect("events").last(), Some(VmEvent::Deleted { name }) if name == "c1-workers-aaaaa")
    );
    // Gone already: success.
    p.delete_server("c1", &s.id).await.expect("delete again");
    assert!(p.list_servers("c1").await.expect("list").is_empty());
}

/// A raw call to the simulator with the right API key: its HTTP status and JSON body.
async fn raw(
    sim: &SimKamatera,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let client =
        nodewright::cloud::http::client_builder(Duration::from_secs(5), Duration::from_secs(10))
            .build()
            .expect("client");
    let o = sim.options();
    let mut rb = client
        .request(method, format!("{}{path}", sim.url()))
        .header("AuthClientId", &o.client_id)
        .header("AuthSecret", &o.secret);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let resp = rb.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?} from {path}"));
    (status, value)
}

#[tokio::test]
async fn kamatera_tags_in_current_api_shape_are_listed() {
    let (sim, _) = start_sim().await;
    let p = provider(&sim, &[("workers", settings(""))]);
    let made = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create");
    // On the wire: the current rows `{"id": SERVER_ID, "tagName": TAG}`, not `tag name`.
    let (status, rows) = raw(
        &sim,
        reqwest::Method::POST,
        "/server/tags",
        Some(serde_json::json!({ "id": made.id })),
    )
    .await;
    assert_eq!(status, 200, "{rows}");
    let rows = rows.as_array().expect("rows").clone();
    // Cluster, group, creation time and settings hash.
    assert_eq!(rows.len(), 4, "{rows:?}");
    for row in &rows {
        assert_eq!(row["id"], made.id.as_str(), "{row}");
        assert!(row["tagName"].is_string(), "{row}");
        assert!(row.get("tag name").is_none(), "{row}");
    }
    assert_eq!(rows[0]["tagName"], "nodewright-c1");
    // A fresh provider (another replica, or after a restart: no tag cache) lists it as
    // ours, cycle after cycle.
    let fresh = provider(&sim, &[("workers", settings(""))]);
    for _ in 0..3 {
        let listed = fresh
            .list_servers("c1")
            .await
            .expect("list in the current shape");
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].id, made.id);
        assert_eq!(listed[0].group.as_deref(), Some("workers"));
        assert_eq!(listed[0].created, made.created);
    }
}

#[tokio::test]
async fn a_delete_of_a_server_already_gone_is_done_whatever_the_api_answers() {
    // Both forms the real service answers an unknown id in (HTTP 500 each), one of them
    // with a text that says nothing about "not found".
    for answer in [
        UnknownServerAnswer::Wrapped,
        UnknownServerAnswer::Collapsed("Invalid request (1042)".into()),
    ] {
        let (sim, _) = sim_with(SimKamateraOptions {
            unknown_server_answer: answer.clone(),
            ..SimKamateraOptions::default()
        })
        .await;
        let a = provider(&sim, &[("workers", settings(""))]);
        let b = provider(&sim, &[("workers", settings(""))]);
        let s = a
            .create_server(&req("c1-workers-aaaaa", "workers"))
            .await
            .expect("create");
        assert_eq!(a.list_servers("c1").await.expect("list").len(), 1);
        // Another replica deletes it first; this one's delete then finds it gone.
        b.delete_server("c1", &s.id).await.expect("first delete");
        assert!(sim.servers().is_empty());
        let calls_since = |before: usize| -> Vec<String> {
            sim.calls()[before..]
                .iter()
                .map(|c| format!("{} {}", c.method, c.path))
                .collect()
        };
        let before = sim.calls().len();
        a.delete_server("c1", &s.id)
            .await
            .unwrap_or_else(|e| panic!("{answer:?}: a server already gone is deleted: {e}"));
        // The listing read before the delete (for its tags) shows it gone: nothing more.
        assert_eq!(
            calls_since(before),
            vec!["GET /service/servers"],
            "{answer:?}"
        );
        // Gone between that listing and the terminate: the refused terminate, then the
        // server list that shows it is gone.
        let before = sim.calls().len();
        a.terminate(&s.id)
            .await
            .unwrap_or_else(|e| panic!("{answer:?}: a server already gone is terminated: {e}"));
        assert_eq!(
            calls_since(before),
            vec!["POST /service/server/terminate", "GET /service/servers"],
            "{answer:?}"
        );
        assert!(a.list_servers("c1").await.expect("list").is_empty());
    }
}

#[tokio::test]
async fn a_refused_delete_of_a_listed_server_stays_an_error() {
    // A terminate refused for a server that is still there is not "already gone", even
    // when the refusal says "not found".
    let (sim, _) = sim_with(SimKamateraOptions {
        unknown_server_answer: UnknownServerAnswer::Collapsed("Server not found (404)".into()),
        ..SimKamateraOptions::default()
    })
    .await;
    let p = provider(&sim, &[("workers", settings(""))]);
    let s = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create");
    sim.fail_next_deletes(1);
    assert!(matches!(
        p.delete_server("c1", &s.id).await,
        Err(CloudError::Api { status: 500, .. })
    ));
    assert_eq!(sim.servers().len(), 1);
    // A wrong key is never taken for a missing server.
    let mut wrong = creds(&sim);
    wrong.secret = "not-the-secret".into();
    let bad = KamateraProvider::with_options(wrong, BTreeMap::new(), fast()).expect("builds");
    assert!(matches!(
        bad.delete_server("c1", &s.id).await,
        Err(CloudError::Auth { .. })
    ));
    assert_eq!(sim.servers().len(), 1);
    p.delete_server("c1", &s.id).await.expect("delete");
    assert!(sim.servers().is_empty());
}

#[tokio::test]
async fn the_simulator_refuses_server_calls_as_the_real_service_does() {
    let (sim, _) = start_sim().await;
    let id = sim.insert_server("c1-workers-aaaaa", &["nodewright-c1"], true);
    sim.insert_server("c1-workers-bbbbb", &["nodewright-c1"], true);
    let post = |path: &'static str, body: serde_json::Value| {
        let sim = sim.clone();
        async move { raw(&sim, reqwest::Method::POST, path, Some(body)).await }
    };
    for path in [
        "/server/tags",
        "/service/server/info",
        "/service/server/terminate",
        "/service/server/poweroff",
    ] {
        let (status, body) = post(
            path,
            serde_json::json!({ "id": id, "name": "c1-workers-aaaaa" }),
        )
        .await;
        assert_eq!(status, 500, "{path}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("but not both")),
            "{path}: {body}"
        );
        let (status, body) = post(path, serde_json::json!({})).await;
        assert_eq!(status, 500, "{path}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Missing server 'id' / 'name'")),
            "{path}: {body}"
        );
        let (status, body) = post(path, serde_json::json!({ "name": "nope" })).await;
        assert_eq!(status, 500, "{path}: {body}");
        assert_eq!(body["message"], "No servers found (name='nope')", "{path}");
        // An unknown id: the console's refusal wrapped by the service.
        let (status, body) = post(path, serde_json::json!({ "id": "0123456789abcdef" })).await;
        assert_eq!(status, 500, "{path}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Error response from server: [")),
            "{path}: {body}"
        );
        assert_eq!(body["responses"][0]["status_code"], 404, "{path}: {body}");
    }
    // Tags of a server by name, and an unknown path (a 404 that is not about a server).
    let (status, rows) = post(
        "/server/tags",
        serde_json::json!({ "name": "c1-workers-aaaaa" }),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        rows,
        serde_json::json!([{ "id": id, "tagName": "nodewright-c1" }])
    );
    let (status, body) = post("/service/server/nonesuch", serde_json::json!({ "id": id })).await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        serde_json::json!({ "error": true, "message": "Not Found" })
    );
    assert_eq!(
        sim.servers().len(),
        2,
        "nothing was changed by refused calls"
    );
}

#[tokio::test]
async fn power_off_and_on_wait_for_their_commands() {
    let (sim, _) = start_sim().await;
    let p = provider(&sim, &[("workers", settings(""))]);
    let s = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create");
    p.power_off(&s.id, true).await.expect("power off");
    assert_eq!(sim.servers()[0].power, "off");
    assert_eq!(
        p.list_servers("c1").await.expect("list")[0].status,
        ServerStatus::Stopped
    );
    p.power_on(&s.id).await.expect("power on");
    assert_eq!(sim.servers()[0].power, "on");
}

#[tokio::test]
async fn api_errors_keep_the_api_message() {
    // Refused for lack of balance: a quota error.
    let (sim, _) = sim_with(SimKamateraOptions {
        max_servers: Some(0),
        ..SimKamateraOptions::default()
    })
    .await;
    let p = provider(&sim, &[("workers", settings(""))]);
    match p.create_server(&req("c1-workers-aaaaa", "workers")).await {
        Err(CloudError::Quota { message, .. }) => {
            assert!(message.contains("server limit of 0"), "{message}")
        }
        other => panic!("expected a quota error, got {other:?}"),
    }
    // A datacenter the API does not know: an API error with its message.
    let (sim, _) = start_sim().await;
    let bad = KamateraSettings {
        datacenter: "XX".into(),
        ..settings("")
    };
    let p = provider(&sim, &[("workers", bad)]);
    match p.create_server(&req("c1-workers-aaaaa", "workers")).await {
        Err(CloudError::Api {
            status,
            message,
            call,
            ..
        }) => {
            assert_eq!(status, 400);
            assert_eq!(call, "POST /service/server");
            assert!(message.contains("Invalid datacenter: XX"), "{message}");
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    // An unknown group and a bad name never reach the API.
    assert!(p.create_server(&req("c1-x-aaaaa", "nope")).await.is_err());
    let p = provider(&sim, &[("workers", settings(""))]);
    assert!(p.create_server(&req("c1 bad", "workers")).await.is_err());
}

#[tokio::test]
async fn a_create_command_that_fails_reports_its_log_and_leaves_nothing() {
    let (sim, events) = start_sim().await;
    let p = provider(&sim, &[("workers", settings(""))]);
    sim.fail_next_creates(1, CreateFailure::CommandError);
    let e = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect_err("create fails");
    let text = e.to_string();
    assert!(
        text.contains("no available resources in datacenter EU"),
        "{text}"
    );
    assert!(sim.servers().is_empty());
    assert!(events.lock().expect("events").is_empty());
    // Refused outright: a quota error; the next create works.
    sim.fail_next_creates(1, CreateFailure::Refused);
    assert!(matches!(
        p.create_server(&req("c1-workers-bbbbb", "workers")).await,
        Err(CloudError::Quota { .. })
    ));
    p.create_server(&req("c1-workers-ccccc", "workers"))
        .await
        .expect("create after failures");
    assert_eq!(sim.servers().len(), 1);
}

#[tokio::test]
async fn a_delete_that_fails_once_succeeds_when_retried() {
    let (sim, _) = start_sim().await;
    let p = provider(&sim, &[("workers", settings(""))]);
    let s = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create");
    sim.fail_next_deletes(1);
    match p.delete_server("c1", &s.id).await {
        Err(CloudError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, 500);
            assert!(message.contains("try again"), "{message}");
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    assert_eq!(sim.servers().len(), 1);
    p.delete_server("c1", &s.id).await.expect("retry succeeds");
    assert!(sim.servers().is_empty());
}

#[tokio::test]
async fn a_command_past_its_deadline_is_an_error() {
    let (sim, _) = sim_with(SimKamateraOptions {
        step: Duration::from_secs(5),
        ..SimKamateraOptions::default()
    })
    .await;
    let s = KamateraSettings {
        command_timeout: Duration::from_millis(300),
        ..settings("")
    };
    let p = provider(&sim, &[("workers", s)]);
    let started = Instant::now();
    let e = p
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect_err("times out");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(e.to_string().contains("did not finish within"), "{e}");
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_restarted_provider_reads_the_creation_time_back_from_the_tag() {
    let (sim, _) = start_sim().await;
    let before = unix_secs(SystemTime::now());
    let a = provider(&sim, &[("workers", settings(""))]);
    let made = a
        .create_server(&req("c1-workers-aaaaa", "workers"))
        .await
        .expect("create");
    // Whole seconds, taken when the create was sent, and written as a tag.
    let created = unix_secs(made.created);
    assert_eq!(
        SystemTime::UNIX_EPOCH + Duration::from_secs(created),
        made.created
    );
    assert!(before <= created && created <= unix_secs(SystemTime::now()));
    let vm = &sim.servers()[0];
    assert!(
        vm.tags.contains(&format!("nodewright-t{created}")),
        "{:?}",
        vm.tags
    );
    assert_eq!(
        a.list_servers("c1").await.expect("list")[0].created,
        made.created
    );

    // A restart: another provider with the same credentials lists the server over a
    // second later and reports the same creation time, not when it first saw it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let b = provider(&sim, &[("workers", settings(""))]);
    let listed = b.list_servers("c1").await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, made.id);
    assert_eq!(listed[0].created, made.created);
    assert_eq!(listed[0].group.as_deref(), Some("workers"));
}

#[tokio::test]
async fn a_server_without_a_time_tag_falls_back_to_when_it_was_first_listed() {
    let (sim, _) = start_sim().await;
    // Made by an older nodewright: ownership tags, no creation-time tag.
    let legacy = sim.insert_server(
        "c1-workers-legacy",
        &["nodewright-c1", "nodewright-workers"],
        true,
    );
    // Made by another process at a known time.
    let tagged = sim.insert_server(
        "c1-workers-tagged",
        &[
            "nodewright-c1",
            "nodewright-workers",
            "nodewright-t1700000000",
        ],
        true,
    );
    let p = provider(&sim, &[("workers", settings(""))]);
    let before = SystemTime::now();
    let first = p.list_servers("c1").await.expect("list");
    let by_id = |list: &[nodewright::cloud::Server], id: &str| {
        list.iter()
            .find(|s| s.id == id)
            .cloned()
            .expect("server listed")
    };
    let t = by_id(&first, &tagged);
    assert_eq!(
        t.created,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    );
    assert_eq!(t.group.as_deref(), Some("workers"));
    let l = by_id(&first, &legacy);
    assert!(l.created >= before && l.created <= SystemTime::now());
    assert_eq!(l.group.as_deref(), Some("workers"));
    // Stable within the process; listing writes nothing.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let again = p.list_servers("c1").await.expect("list");
    assert_eq!(by_id(&again, &legacy).created, l.created);
    assert!(post_bodies(&sim, "/server/tags")
        .iter()
        .all(|b| b.get("add").is_none()));
}

#[test]
fn names_are_checked_against_kamatera_tag_limits() {
    let s = settings("");
    assert!(validate_settings("prod", "workers", &s).is_empty());
    let problems = validate_settings("production-eu", "workers", &s);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("`nodewright-production-eu` (24 characters)"),
        "{}",
        problems[0]
    );
    assert!(problems[0].contains("at most 23"), "{}", problems[0]);
    let short = settings("tagPrefix: nw\n");
    assert!(validate_settings("production-eu", "workers", &short).is_empty());
    assert!(!validate_settings("prod", "gpu-workers-large", &s).is_empty());
    // The prefix must leave room for the creation-time tag `<prefix>-t` + 10 digits.
    let long = settings("tagPrefix: nodewright-eu\n");
    let problems = validate_settings("a", "b", &long);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("kamatera.tagPrefix may have at most 11")
                && p.contains("at most 23")
                && p.contains("`nodewright-eu-t1700000000` (25 characters)")),
        "{problems:?}"
    );
}

#[test]
fn a_tag_prefix_too_long_for_the_time_tag_is_a_config_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("autoscaler.yaml");
    std::fs::write(
        &path,
        r#"clusterName: kt
freeMemoryTarget: 0 B
nodeGroups:
  - name: workers
    provider: kamatera
    minSize: 0
    maxSize: 3
    kamatera:
      datacenter: EU
      image: ubuntu_server_24.04_64-bit
      cpu: 2B
      ram: 4096
      tagPrefix: nodewright-eu
    userData:
      template: k3s-agent.sh.j2
"#,
    )
    .expect("config written");
    let e = Config::load(&path)
        .expect_err("prefix too long")
        .to_string();
    assert!(e.contains("kamatera.tagPrefix"), "{e}");
    assert!(e.contains("at most 23"), "{e}");
}

// ---------------------------------------------------------------------------
// The loop: a `provider: kamatera` group scaled up and down.

struct Env {
    cluster: SimCluster,
    cloud: SimKamatera,
    events: Events,
    dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.cluster.shutdown();
    }
}

const TEMPLATE: &str = "#!/bin/sh\n# k3s agent for a Kamatera server\ncurl -sfL https://get.k3s.io | K3S_URL={{ k3s_url }} K3S_TOKEN={{ k3s_token }} sh -s - agent{% for a in k3s_node_args %} {{ a }}{% endfor %}\n";

async fn env() -> Env {
    let cluster = SimCluster::start(SimClusterOptions {
        node_ready_delay: Duration::from_millis(200),
        pod_start_delay: Duration::from_millis(150),
        ..SimClusterOptions::default()
    })
    .await
    .expect("cluster starts");
    cluster
        .add_node(
            SimNodeSpec::new("control-plane", 4 * GI)
                .label("node-role.kubernetes.io/control-plane", "true")
                .taint("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
        )
        .expect("control plane");
    let events: Events = Arc::default();
    let (sink, kubelet) = (events.clone(), cluster.vm_hook());
    let hook: VmHook = Arc::new(move |e: VmEvent| {
        sink.lock().expect("events").push(e.clone());
        kubelet(e)
    });
    let cloud = SimKamatera::start(SimKamateraOptions {
        hook: Some(hook),
        step: Duration::from_millis(50),
        ..SimKamateraOptions::default()
    })
    .await
    .expect("kamatera starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let templates = dir.path().join("templates");
    std::fs::create_dir_all(&templates).expect("templates dir");
    for (name, text) in SHIPPED_TEMPLATES {
        std::fs::write(templates.join(name), text).expect("template");
    }
    std::fs::write(templates.join("k3s-agent.sh.j2"), TEMPLATE).expect("template");
    cluster
        .write_kubeconfig(&dir.path().join("kubeconfig"))
        .expect("kubeconfig");
    cloud
        .write_credentials_file(&dir.path().join("kamatera.yaml"))
        .expect("credentials");
    Env {
        cluster,
        cloud,
        events,
        dir,
    }
}

impl Env {
    fn config(&self, min_size: u32, extra: &str) -> Config {
        let text = format!(
            r#"templatesDir: {}
clusterName: kt
freeMemoryTarget: 0 B
provisionTimeout: 3s
scanInterval: 200ms
{extra}
nodeGroups:
  - name: workers
    provider: kamatera
    minSize: {min_size}
    maxSize: 3
    kamatera:
      datacenter: EU
      image: ubuntu_server_24.04_64-bit
      cpu: 4B
      ram: 8 GiB
      disks: ["size=40"]
    userData:
      template: k3s-agent.sh.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "kt-secret-token"}}
"#,
            self.dir.path().join("templates").display()
        );
        let path = self.dir.path().join("autoscaler.yaml");
        std::fs::write(&path, text).expect("config written");
        Config::load(&path).expect("config loads")
    }

    /// A reconciler like `SimEnv::reconciler`, with the Kamatera provider built from the
    /// credentials file (fast queue polling for the test).
    async fn reconciler(&self, config: Config) -> Reconciler {
        let kube = kubeconfig_from_file(&self.dir.path().join("kubeconfig"))
            .await
            .expect("kubeconfig");
        let client = kube::Client::try_from(kube).expect("client");
        let creds_path: PathBuf = self.dir.path().join("kamatera.yaml");
        let creds = KamateraCredentials::from_file(&creds_path).expect("credentials");
        let groups: BTreeMap<String, KamateraSettings> = config
            .node_groups
            .iter()
            .filter_map(|g| g.kamatera.clone().map(|k| (g.name.clone(), k)))
            .collect();
        let provider: Arc<dyn CloudProvider> =
            Arc::new(KamateraProvider::with_options(creds, groups, fast()).expect("provider"));
        let mut clouds = Clouds::new();
        for g in &config.node_groups {
            clouds.add_group(&g.name, provider.clone());
        }
        Reconciler {
            config: Arc::new(config),
            cluster: Arc::new(KubeCluster::new(client)),
            clouds,
            dry_run: false,
        }
    }
}

async fn drive(
    env: &Env,
    rec: &Reconciler,
    timeout: Duration,
    done: impl Fn(&Env) -> bool,
) -> Vec<Action> {
    let start = Instant::now();
    let mut actions = Vec::new();
    loop {
        let report = rec
            .cycle(SystemTime::now())
            .await
            .expect("cycle succeeds against the simulators");
        if report.decision.action != Action::None {
            actions.push(report.decision.action.clone());
        }
        if done(env) {
            return actions;
        }
        assert!(
            start.elapsed() < timeout,
            "did not converge in {timeout:?}; actions so far: {actions:#?}\nservers: {:?}",
            env.cloud
                .servers()
                .iter()
                .map(|s| &s.name)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_scales_a_kamatera_group_up_and_down() {
    let env = env().await;
    let rec = env.reconciler(env.config(0, "")).await;
    env.cluster
        .add_replicaset(
            "default",
            "web",
            3,
            SimPodTemplate::new("nginx:1.25", 2 * GI),
        )
        .expect("replicaset");
    let actions = drive(&env, &rec, Duration::from_secs(40), |env| {
        let pods: Vec<Pod> = env.cluster.pods();
        pods.iter().filter(|p| running(p)).count() >= 3
    })
    .await;
    assert!(
        actions.contains(&Action::ScaleUp {
            group: "workers".into(),
            count: 1
        }),
        "{actions:#?}"
    );
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
    let vm = servers[0].clone();
    assert!(vm.name.starts_with("kt-workers-"));
    assert_eq!(vm.tags[..2], ["nodewright-kt", "nodewright-workers"]);
    // Then the creation time and the settings hash the loop stamped.
    assert!(
        vm.tags.len() == 4
            && vm.tags[2].starts_with("nodewright-t")
            && vm.tags[3].starts_with("nodewright_h"),
        "{:?}",
        vm.tags
    );
    assert!(vm.script.starts_with("#!/bin/sh"));
    assert!(vm
        .script
        .contains("--node-taint=nodewright.io/startup=true:NoSchedule"));
    let node = env.cluster.node(&vm.name).expect("node registered");
    assert!(ready(&node) && !has_startup_taint(&node));

    // The work goes away and nodewright's cordon is on the node (as a process that
    // died after cordoning leaves it): it is drained, its Node deleted, then its
    // server terminated.
    env.cluster
        .scale_replicaset("default", "web", 0)
        .expect("scale down");
    let client = env.cluster.kube_client().await.expect("client");
    let nodes: Api<Node> = Api::all(client);
    nodes
        .patch(
            &vm.name,
            &PatchParams::default(),
            &Patch::Merge(common::cordon_patch(true)),
        )
        .await
        .expect("cordon");
    let actions = drive(&env, &rec, Duration::from_secs(40), |env| {
        env.cluster.node(&vm.name).is_none() && env.cloud.servers().is_empty()
    })
    .await;
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNodes { nodes } if nodes.iter().any(|t| t.node == vm.name))),
        "{actions:#?}"
    );
    let terminate = env
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.path == "/service/server/terminate")
        .filter_map(|c| c.body)
        .next()
        .expect("terminate called");
    assert_eq!(terminate["force"], true);
    assert!(
        matches!(env.events.lock().expect("events").last(), Some(VmEvent::Deleted { name }) if *name == vm.name)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kamatera_tags_in_current_api_shape_keep_every_cycle_working() {
    // Issue 11: with tag rows `{"id", "tagName"}` every cycle after the first create
    // failed. The loop over loopback HTTP: create, then keep cycling, and a restarted
    // process (no tag cache) too.
    let env = env().await;
    let rec = env.reconciler(env.config(1, "")).await;
    let joined = |env: &Env| {
        env.cluster.nodes().iter().any(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|m| m.starts_with("kt-workers-"))
                && ready(n)
                && !has_startup_taint(n)
        })
    };
    let actions = drive(&env, &rec, Duration::from_secs(40), joined).await;
    assert!(
        actions.contains(&Action::ScaleUp {
            group: "workers".into(),
            count: 1
        }),
        "{actions:#?}"
    );
    let vm = env.cloud.servers()[0].clone();
    let (status, rows) = raw(
        &env.cloud,
        reqwest::Method::POST,
        "/server/tags",
        Some(serde_json::json!({ "id": vm.id })),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        rows.as_array()
            .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["tagName"].is_string())),
        "{rows}"
    );
    let tag_calls = |env: &Env| {
        env.cloud
            .calls()
            .iter()
            .filter(|c| c.path == "/server/tags")
            .count()
    };
    let restarted = env.reconciler(env.config(1, "")).await;
    let before = tag_calls(&env);
    for r in [&rec, &restarted, &rec, &restarted, &rec] {
        let report = r
            .cycle(SystemTime::now())
            .await
            .expect("a cycle after the create succeeds");
        assert!(
            !matches!(
                report.decision.action,
                Action::ScaleUp { .. } | Action::DeleteServers { .. } | Action::DeleteNodes { .. }
            ),
            "{:?}",
            report.decision.action
        );
    }
    // The restarted process read the tags itself (in the current shape) and kept the
    // server as the group's one node.
    assert!(tag_calls(&env) > before);
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert_eq!(servers[0].id, vm.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_boots_is_replaced_after_the_provision_timeout() {
    let env = env().await;
    env.cloud.never_boot("");
    let rec = env
        .reconciler(env.config(1, "scaleUpBackoff: {initial: 300ms, max: 1s}"))
        .await;
    // The first server never joins: it is deleted after provisionTimeout (3s) and
    // another is created.
    let first = Arc::new(Mutex::new(None::<String>));
    let seen = first.clone();
    drive(&env, &rec, Duration::from_secs(40), move |env| {
        let servers = env.cloud.servers();
        let mut f = seen.lock().expect("first");
        if f.is_none() {
            *f = servers.first().map(|s| s.name.clone());
        }
        let Some(name) = f.clone() else { return false };
        !servers.iter().any(|s| s.name == name) && !servers.is_empty()
    })
    .await;
    let gone = first.lock().expect("first").clone().expect("first server");
    assert!(env.cluster.node(&gone).is_none());
    assert!(env
        .events
        .lock()
        .expect("events")
        .iter()
        .any(|e| matches!(e, VmEvent::Deleted { name } if *name == gone)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_timeout_counts_from_the_real_creation_after_a_restart() {
    let env = env().await;
    env.cloud.never_boot("");
    let config = env.config(1, "");
    // Process A creates a server that never boots, then goes away.
    let groups: BTreeMap<String, KamateraSettings> = config
        .node_groups
        .iter()
        .filter_map(|g| g.kamatera.clone().map(|k| (g.name.clone(), k)))
        .collect();
    let a = KamateraProvider::with_options(creds(&env.cloud), groups, fast()).expect("provider");
    let made = a
        .create_server(&CreateRequest {
            name: "kt-workers-first".into(),
            cluster: "kt".into(),
            group: "workers".into(),
            user_data: "#!/bin/sh\n".into(),
            settings_hash: HASH.into(),
            zone: None,
        })
        .await
        .expect("create");
    drop(a);
    let at = |secs: f64| made.created + Duration::from_secs_f64(secs);
    let sleep_until = |t: SystemTime| async move {
        if let Ok(d) = t.duration_since(SystemTime::now()) {
            tokio::time::sleep(d).await;
        }
    };
    // Process B starts 1.5s later (provisionTimeout is 3s): not timed out yet...
    sleep_until(at(1.5)).await;
    let rec = env.reconciler(env.config(1, "")).await;
    let report = rec.cycle(SystemTime::now()).await.expect("cycle");
    assert!(
        !matches!(report.decision.action, Action::DeleteServers { .. }),
        "{:?}",
        report.decision.action
    );
    // ...but 3s after the real creation it is, although B has seen it for under 2s.
    sleep_until(at(3.3)).await;
    let report = rec.cycle(SystemTime::now()).await.expect("cycle");
    match &report.decision.action {
        Action::DeleteServers { servers, .. } => {
            assert!(servers.iter().any(|s| s.id == made.id), "{servers:?}")
        }
        other => panic!("expected the never-booted server deleted, got {other:?}"),
    }
    let started = Instant::now();
    while env.cloud.servers().iter().any(|s| s.id == made.id) {
        assert!(started.elapsed() < Duration::from_secs(10), "not deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_server_found_by_its_tags_is_removed() {
    let env = env().await;
    // A crashed process left a server with our tags; it never joined.
    let leftover = env.cloud.insert_server(
        "kt-workers-crash",
        &["nodewright-kt", "nodewright-workers"],
        true,
    );
    // Someone else's server with similar tags must stay.
    env.cloud.insert_server(
        "kt-workers-other",
        &["nodewright-other", "nodewright-workers"],
        true,
    );
    let rec = env.reconciler(env.config(0, "")).await;
    let actions = drive(&env, &rec, Duration::from_secs(30), |env| {
        !env.cloud.servers().iter().any(|s| s.id == leftover)
    })
    .await;
    assert!(!actions.is_empty());
    assert_eq!(env.cloud.servers().len(), 1);
    assert_eq!(env.cloud.servers()[0].name, "kt-workers-other");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_creates_and_a_failed_delete_are_retried_by_the_loop() {
    let env = env().await;
    env.cloud.fail_next_creates(1, CreateFailure::Refused);
    env.cloud.fail_next_creates(1, CreateFailure::CommandError);
    // Each failed create backs the group off (30s, then 60s by default): keep it short.
    let rec = env
        .reconciler(env.config(1, "scaleUpBackoff: {initial: 200ms, max: 500ms}"))
        .await;
    let start = Instant::now();
    // Errors of a cycle are reported, not fatal: keep cycling until a node joins.
    loop {
        let _ = rec.cycle(SystemTime::now()).await;
        let joined = env.cluster.nodes().iter().any(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|m| m.starts_with("kt-workers-"))
                && ready(n)
                && !has_startup_taint(n)
        });
        if joined {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(40), "no node joined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(env.cloud.servers().len(), 1);
    let vm = env.cloud.servers()[0].clone();

    // Scale down with a terminate that fails once.
    env.cloud.fail_next_deletes(1);
    let rec = env.reconciler(env.config(0, "")).await;
    let client = env.cluster.kube_client().await.expect("client");
    Api::<Node>::all(client)
        .patch(
            &vm.name,
            &PatchParams::default(),
            &Patch::Merge(common::cordon_patch(true)),
        )
        .await
        .expect("cordon");
    let start = Instant::now();
    while !env.cloud.servers().is_empty() {
        let _ = rec.cycle(SystemTime::now()).await;
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "server not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let terminates = env
        .cloud
        .calls()
        .iter()
        .filter(|c| c.path == "/service/server/terminate")
        .count();
    assert!(terminates >= 2, "{terminates}");
}

/// Issue 8: Kamatera terminated by id without reading the server's tags back. Now
/// `delete_server` reads the server list and the server's tags afresh (not from the
/// cache) and refuses a server that is not this cluster's by its name and its tags;
/// no terminate is sent for any of them.
#[tokio::test]
async fn kamatera_delete_refuses_a_server_of_another_cluster() {
    let (sim, _) = start_sim().await;
    let p = provider(&sim, &[("workers", settings(""))]);
    let theirs = sim.insert_server(
        "c2-workers-aaaaa",
        &["nodewright-c2", "nodewright-workers"],
        true,
    );
    let their_tag = sim.insert_server(
        "c1-workers-bbbbb",
        &["nodewright-c2", "nodewright-workers"],
        true,
    );
    let untagged = sim.insert_server("c1-workers-manual", &[], true);
    // Ours when listed (its tags now cached), then handed to another cluster.
    let made = p
        .create_server(&req("c1-workers-ccccc", "workers"))
        .await
        .expect("create");
    assert_eq!(p.list_servers("c1").await.expect("list").len(), 1);
    for (key, tag) in [("remove", "nodewright-c1"), ("add", "nodewright-c2")] {
        let (status, _) = raw(
            &sim,
            reqwest::Method::POST,
            "/server/tags",
            Some(serde_json::json!({ "id": made.id, key: tag })),
        )
        .await;
        assert_eq!(status, 200);
    }

    for (id, cause) in [
        (&theirs, "its name does not start with 'c1-'"),
        (&their_tag, "it has no tag nodewright-c1"),
        (&untagged, "it has no tag nodewright-c1 (its tags: none)"),
        (&made.id, "it has no tag nodewright-c1"),
    ] {
        match p.delete_server("c1", id).await {
            Err(e @ CloudError::Refused { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("({id})")),
                    "names the server: {text}"
                );
                assert!(text.contains(cause), "names the cause: {text}");
            }
            other => panic!("{id}: expected a refusal, got {other:?}"),
        }
        assert!(sim.servers().iter().any(|s| &s.id == id), "{id} terminated");
    }
    assert!(
        post_bodies(&sim, "/service/server/terminate").is_empty(),
        "a terminate was sent"
    );

    // Read back afresh: not ours → no cluster; ours → cluster and group.
    let read = p
        .get_server("c1", &made.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(read.cluster, None);
    assert_eq!(read.name, "c1-workers-ccccc");
    let theirs_read = p
        .get_server("c2", &theirs)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(theirs_read.cluster.as_deref(), Some("c2"));
    assert_eq!(theirs_read.group.as_deref(), Some("workers"));
    assert!(p
        .get_server("c1", "no-such-id")
        .await
        .expect("get")
        .is_none());

    // Its own cluster may delete it.
    p.delete_server("c2", &theirs)
        .await
        .expect("c2 deletes its own server");
    assert!(!sim.servers().iter().any(|s| s.id == theirs));
}
