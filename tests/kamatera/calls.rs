//! The Kamatera provider's calls against the simulated Kamatera: auth, create, tags, queue, delete.

use super::*;

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
        &[
            ("workers", settings("")),
            ("big", settings("ram: 16 GiB\n")),
        ],
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
async fn queue_is_polled_through_pending_and_running() {
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

/// Kamatera tags were read once per server for the life of the process: a person who took
/// a server away from nodewright (removed its cluster tag) was not heard until a restart.
/// Listings now read them again after ten minutes (`ProviderOptions::tag_ttl`).
#[tokio::test]
async fn a_tag_a_person_removed_is_seen_once_the_cached_tags_expire() {
    let (sim, _) = start_sim().await;
    let groups = [("workers", settings(""))];
    let p = provider(&sim, &groups);
    let made = p
        .create_server(&req("c1-workers-taken", "workers"))
        .await
        .expect("create");
    let expiring = KamateraProvider::with_options(
        creds(&sim),
        groups
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect(),
        ProviderOptions {
            tag_ttl: Duration::ZERO,
            ..fast()
        },
    )
    .expect("provider builds");
    for q in [&p, &expiring] {
        assert_eq!(q.list_servers("c1").await.expect("list").len(), 1);
    }
    let (status, body) = raw(
        &sim,
        reqwest::Method::POST,
        "/server/tags",
        Some(serde_json::json!({ "id": made.id, "remove": "nodewright-c1" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        expiring.list_servers("c1").await.expect("list").is_empty(),
        "tags read again: no longer ours"
    );
    assert_eq!(
        p.list_servers("c1").await.expect("list").len(),
        1,
        "within the default ten minutes the cached tags still serve the listing"
    );
    // A call that changes the server reads them afresh, whatever the cache holds.
    p.delete_server("c1", &made.id)
        .await
        .expect_err("not ours any more: refused");
    assert_eq!(sim.servers().len(), 1);
}

/// The real API answers command ids as JSON integers, every time (Libcloud's fixtures
/// and `ex_wait_command` take an int): the simulator does not vary their type.
#[tokio::test]
async fn command_ids_are_integers_as_the_real_api_answers_them() {
    let (sim, _) = start_sim().await;
    let o = sim.options().clone();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let post = |path: &'static str, body: serde_json::Value| {
        http.post(format!("{}{path}", sim.url()))
            .header("AuthClientId", &o.client_id)
            .header("AuthSecret", &o.secret)
            .json(&body)
            .send()
    };
    let mut ids = Vec::new();
    for (i, password) in ["SimPass1234", "__generate__"].iter().enumerate() {
        let body = serde_json::json!({
            "name": format!("raw-ids-{i}"), "password": password, "passwordValidate": password,
            "ssh-key": "", "datacenter": "EU", "image": "EU:6000C29d4e5f60718293a4b5c6d7e8f9",
            "cpu": "2B", "ram": 2048, "disk": "size=20", "dailybackup": "no", "managed": "no",
            "network": "name=wan,ip=auto", "quantity": 1, "billingcycle": "hourly",
            "monthlypackage": "", "poweronaftercreate": "yes",
        });
        let r = post("/service/server", body).await.expect("create answers");
        let status = r.status();
        let v: serde_json::Value = r.json().await.expect("json");
        assert!(status.is_success(), "{status} {v}");
        let list = v.get("commandIds").unwrap_or(&v).clone();
        ids.extend(list.as_array().cloned().unwrap_or_default());
        let name = format!("raw-ids-{i}");
        let r = post(
            "/service/server/poweroff",
            serde_json::json!({ "name": name }),
        )
        .await
        .expect("poweroff answers");
        let v: serde_json::Value = r.json().await.expect("json");
        ids.extend(v.as_array().cloned().unwrap_or_default());
    }
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(ids.iter().all(serde_json::Value::is_u64), "{ids:?}");
}
