//! The simulator refuses what the real service refuses; power, errors, commands, creation time, tag limits.

use super::*;

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
    let by_id = |list: &[nodewright::model::Server], id: &str| {
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
      ram: 4096 MiB
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
