//! Differences found against the real OpenStack, kept so the simulator keeps behaving like the real thing.

use super::*;

// ---------------------------------------------------------------------------
// Differences found against the real OpenStack (tests/openstack_real.rs), kept here so
// the simulator keeps behaving like the real thing.

/// Compute URL and a token, straight from the simulator's Keystone.
async fn raw_compute(sim: &SimOpenStack, http: &reqwest::Client) -> (String, String) {
    let (token, body) = raw_token(sim, http).await;
    let compute = body["token"]["catalog"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["type"] == "compute")
        .unwrap()["endpoints"][0]["url"]
        .as_str()
        .unwrap()
        .to_string();
    (compute, token)
}

#[tokio::test]
async fn real_nova_lists_a_deleted_server_as_deleting_for_a_moment() {
    // Real Nova answers DELETE with 204 and keeps listing the server (task_state
    // "deleting") for ~300 ms; a second DELETE meanwhile is 204 again.
    let f = fixture_with(
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(10),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    let s = f
        .provider
        .create_server(&request("c1-d", "c1", "x"))
        .await
        .unwrap();
    wait_for_status(&f, "c1", &s.id, ServerStatus::Active).await;
    let http = raw_client();
    let (compute, token) = raw_compute(&f.sim, &http).await;
    let delete = || {
        http.delete(format!("{compute}/servers/{}", s.id))
            .header("X-Auth-Token", &token)
            .header("OpenStack-API-Version", "compute 2.79")
            .send()
    };
    assert_eq!(delete().await.unwrap().status(), 204);
    let listed = f.provider.list_servers("c1").await.unwrap();
    assert_eq!(listed.len(), 1, "still listed right after the delete");
    assert_eq!(listed[0].status, ServerStatus::Deleting);
    assert_eq!(delete().await.unwrap().status(), 204);
    for _ in 0..100 {
        if f.provider.list_servers("c1").await.unwrap().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("server never went away");
}

#[tokio::test]
async fn real_nova_refuses_a_network_without_a_subnet() {
    let mut opts = SimOpenStackOptions::default();
    opts.networks.push(SimNetwork {
        id: "0b8f6c2a-1d3e-4f5a-9b7c-8d9e0f1a2b05".into(),
        name: "bare".into(),
        subnets: Vec::new(),
    });
    let f = fixture_with(
        opts,
        false,
        settings("m1.small", "fedora-coreos", Some("bare")),
    )
    .await;
    // The network exists, so `check` is happy; Nova is not.
    f.provider.verify().await.unwrap();
    let err = f
        .provider
        .create_server(&request("c1-n", "c1", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CloudError::Api { status: 400, message, .. }
            if message == "Network 0b8f6c2a-1d3e-4f5a-9b7c-8d9e0f1a2b05 requires a subnet in order to boot instances on."),
        "{err:?}"
    );
}

#[tokio::test]
async fn real_nova_quota_recheck_fails_a_raced_create_late_with_a_413_fault() {
    // Creates that race past the API's quota check are accepted (202) and put in ERROR by
    // the recheck after scheduling, with a 413 "Quota exceeded" fault.
    let f = fixture_with(
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(10),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    f.sim.fail_next_creates(1, CreateFailure::QuotaOnRecheck);
    let s = f
        .provider
        .create_server(&request("c1-raced", "c1", "x"))
        .await
        .expect("accepted at first");
    assert_eq!(s.status, ServerStatus::Building);
    wait_for_status(&f, "c1", &s.id, ServerStatus::Error).await;
    let http = raw_client();
    let (compute, token) = raw_compute(&f.sim, &http).await;
    let v: serde_json::Value = http
        .get(format!("{compute}/servers/{}", s.id))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["server"]["fault"]["code"], 413);
    assert!(v["server"]["fault"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Quota exceeded for instances"));
    assert!(f.events.lock().unwrap().is_empty(), "never booted");
}

#[tokio::test]
async fn real_nova_shows_no_availability_zone_until_scheduled() {
    let f = fixture_with(
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(300),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    let s = f
        .provider
        .create_server(&request("c1-az", "c1", "x"))
        .await
        .unwrap();
    let http = raw_client();
    let (compute, token) = raw_compute(&f.sim, &http).await;
    let az = |v: serde_json::Value| v["server"]["OS-EXT-AZ:availability_zone"].clone();
    let get = || async {
        http.get(format!("{compute}/servers/{}", s.id))
            .header("X-Auth-Token", &token)
            .header("OpenStack-API-Version", "compute 2.79")
            .send()
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    };
    assert_eq!(az(get().await), "");
    wait_for_status(&f, "c1", &s.id, ServerStatus::Active).await;
    assert_eq!(az(get().await), "nova");
}

#[tokio::test]
async fn real_glance_answers_an_unknown_image_id_with_an_html_404() {
    let f = fixture_with(
        SimOpenStackOptions::default(),
        false,
        settings("m1.small", "00000000-0000-4000-8000-000000000000", None),
    )
    .await;
    let err = f.provider.verify().await.unwrap_err();
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. }
            if what == "image" && name == "00000000-0000-4000-8000-000000000000"),
        "{err:?}"
    );
    let http = raw_client();
    let (token, body) = raw_token(&f.sim, &http).await;
    let image = body["token"]["catalog"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["type"] == "image")
        .unwrap()["endpoints"][0]["url"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = http
        .get(format!(
            "{image}/v2/images/00000000-0000-4000-8000-000000000000"
        ))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(resp
        .text()
        .await
        .unwrap()
        .contains("<h1>404 Not Found</h1>"));
}

#[tokio::test]
async fn real_nova_omits_the_fault_of_an_unscheduled_server_from_the_detail_list() {
    // "No valid host" leaves the server in cell0; real Nova's GET /servers/detail then
    // has no "fault" for it, GET /servers/{id} has {"code": 500, "message":
    // "No valid host was found. "} (trailing space and all).
    let f = fixture_with(
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(10),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    f.sim.fail_next_creates(1, CreateFailure::NoValidHost);
    let s = f
        .provider
        .create_server(&request("c1-nvh", "c1", "x"))
        .await
        .unwrap();
    wait_for_status(&f, "c1", &s.id, ServerStatus::Error).await;
    let http = raw_client();
    let (compute, token) = raw_compute(&f.sim, &http).await;
    let get = |url: String| {
        let (http, token) = (http.clone(), token.clone());
        async move {
            http.get(url)
                .header("X-Auth-Token", &token)
                .header("OpenStack-API-Version", "compute 2.79")
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    let list = get(format!("{compute}/servers/detail")).await;
    let listed = &list["servers"][0];
    assert_eq!(listed["status"], "ERROR");
    assert!(listed.get("fault").is_none(), "{listed}");
    let shown = get(format!("{compute}/servers/{}", s.id)).await;
    assert_eq!(shown["server"]["fault"]["code"], 500);
    assert_eq!(
        shown["server"]["fault"]["message"],
        "No valid host was found. "
    );
}

/// A server in ERROR carries Nova's `fault.message` into the planner's picture, also
/// when the listing leaves the fault out (cell0) and only `GET /servers/{id}` has it.
#[tokio::test]
async fn a_server_in_error_reports_novas_fault_message() {
    let f = fixture_with(
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(10),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    f.sim.fail_next_creates(1, CreateFailure::NoValidHost);
    let nvh = f
        .provider
        .create_server(&request("c1-nvh", "c1", "x"))
        .await
        .unwrap();
    let listed = wait_for_status(&f, "c1", &nvh.id, ServerStatus::Error).await;
    assert_eq!(listed.fault.as_deref(), Some("No valid host was found."));
    f.sim.fail_next_creates(1, CreateFailure::QuotaOnRecheck);
    let raced = f
        .provider
        .create_server(&request("c1-raced", "c1", "x"))
        .await
        .unwrap();
    let listed = wait_for_status(&f, "c1", &raced.id, ServerStatus::Error).await;
    let fault = listed.fault.unwrap_or_default();
    assert!(fault.starts_with("Quota exceeded for instances"), "{fault}");
    let one = f.provider.get_server("c1", &nvh.id).await.unwrap().unwrap();
    assert_eq!(one.fault.as_deref(), Some("No valid host was found."));
    let ok = f
        .provider
        .create_server(&request("c1-ok", "c1", "x"))
        .await
        .unwrap();
    let active = wait_for_status(&f, "c1", &ok.id, ServerStatus::Active).await;
    assert_eq!(active.fault, None);
}

#[tokio::test]
async fn real_nova_refuses_an_unknown_server_group_and_invalid_tags() {
    let f = fixture().await;
    let http = raw_client();
    let (compute, token) = raw_compute(&f.sim, &http).await;
    let o = f.sim.options().clone();
    let post = |body: serde_json::Value, mv: &'static str| {
        http.post(format!("{compute}/servers"))
            .header("X-Auth-Token", &token)
            .header("OpenStack-API-Version", format!("compute {mv}"))
            .json(&body)
            .send()
    };
    let server = |extra: serde_json::Value| {
        let mut s = serde_json::json!({
            "name": "raw", "flavorRef": "2", "imageRef": o.images[0].id, "networks": "none",
        });
        if let (Some(s), Some(extra)) = (s.as_object_mut(), extra.as_object()) {
            s.extend(extra.clone());
        }
        s
    };
    let bad = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        let v: serde_json::Value = r.json().await.unwrap();
        (
            status,
            v["badRequest"]["message"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        )
    };
    // A group that does not exist, and one that is not a uuid.
    let (st, msg) = bad(post(
        serde_json::json!({ "server": server(serde_json::json!({})),
            "os:scheduler_hints": { "group": "00000000-0000-4000-8000-000000000000" } }),
        "2.79",
    )
    .await
    .unwrap())
    .await;
    assert_eq!(st, 400);
    assert!(
        msg.contains("00000000-0000-4000-8000-000000000000"),
        "{msg}"
    );
    let (st, _) = bad(post(
        serde_json::json!({ "server": server(serde_json::json!({})),
            "os:scheduler_hints": { "group": "k8s-workers" } }),
        "2.79",
    )
    .await
    .unwrap())
    .await;
    assert_eq!(st, 400);
    // Tags: no '/' or ',', at most 60 characters, and only from 2.52 on.
    for tags in [
        serde_json::json!(["a/b"]),
        serde_json::json!(["a,b"]),
        serde_json::json!(["x".repeat(61)]),
    ] {
        let (st, msg) = bad(post(
            serde_json::json!({ "server": server(serde_json::json!({ "tags": tags })) }),
            "2.79",
        )
        .await
        .unwrap())
        .await;
        assert_eq!(st, 400, "{tags}");
        assert!(msg.contains("tags"), "{msg}");
    }
    let (st, _) = bad(post(
        serde_json::json!({ "server": server(serde_json::json!({ "tags": ["ok"] })) }),
        "2.51",
    )
    .await
    .unwrap())
    .await;
    assert_eq!(st, 400);
    assert!(f.sim.servers().is_empty());
    // A valid group and tags are accepted and shown back (the group only by GET /servers/{id}).
    let r = post(
        serde_json::json!({ "server": server(serde_json::json!({ "tags": ["k=v w"] })),
            "os:scheduler_hints": { "group": o.server_groups[0].id } }),
        "2.79",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 202);
    let id = r.json::<serde_json::Value>().await.unwrap()["server"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let v: serde_json::Value = http
        .get(format!("{compute}/servers/{id}"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["server"]["tags"], serde_json::json!(["k=v w"]));
    assert_eq!(
        v["server"]["server_groups"],
        serde_json::json!([o.server_groups[0].id])
    );
    let groups: serde_json::Value = http
        .get(format!("{compute}/os-server-groups"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(groups["server_groups"][0]["policy"], "anti-affinity");
    assert_eq!(
        groups["server_groups"][0]["members"],
        serde_json::json!([id])
    );
}

/// Issue 8: OpenStack deleted by id without reading the server's tags back. Now
/// `delete_server` reads it (`GET /servers/{id}`) and refuses one not tagged for the
/// cluster: another cluster's, untagged, re-tagged since it was created, or one whose
/// tags contradict its metadata. No `DELETE` is sent for any of them.
#[tokio::test]
async fn openstack_delete_refuses_a_server_of_another_cluster() {
    let f = fixture().await;
    let meta = |cluster: &str| {
        BTreeMap::from([
            (CLUSTER_TAG.to_string(), cluster.to_string()),
            (GROUP_TAG.to_string(), "workers".to_string()),
        ])
    };
    let theirs = f.sim.insert_server("c2-workers-aaaaa", meta("c2"));
    let untagged = f.sim.insert_server("c1-workers-manual", BTreeMap::new());
    let retagged = f
        .provider
        .create_server(&request("c1-workers-bbbbb", "c1", "x"))
        .await
        .unwrap()
        .id;
    // Handed over to cluster c2 after the create, metadata and tags alike.
    f.sim.set_metadata(&retagged, CLUSTER_TAG, Some("c2"));
    f.sim.set_tags(
        &retagged,
        &["nodewright-cluster=c2", "nodewright-group=workers"],
    );
    let contradicted = f.sim.insert_server("c1-workers-ccccc", meta("c1"));
    f.sim.set_tags(
        &contradicted,
        &["nodewright-cluster=c2", "nodewright-group=workers"],
    );

    for (id, cause) in [
        (&theirs, "names cluster 'c2', not 'c1'"),
        (&untagged, "carries no nodewright-cluster tag"),
        (&retagged, "names cluster 'c2', not 'c1'"),
        (&contradicted, "carries no nodewright-cluster tag"),
    ] {
        match f.provider.delete_server("c1", id).await {
            Err(e @ CloudError::Refused { .. }) => {
                let text = e.to_string();
                assert!(text.contains(id.as_str()), "names the server: {text}");
                assert!(text.contains(cause), "names the cause: {text}");
            }
            other => panic!("{id}: expected a refusal, got {other:?}"),
        }
        assert!(f.sim.servers().iter().any(|s| &s.id == id), "{id} deleted");
    }
    assert!(
        !f.sim.calls().iter().any(|c| c.method == "DELETE"),
        "a DELETE was sent: {:?}",
        f.sim.calls()
    );

    // Read back as it is, whoever it belongs to; a server that does not exist is None.
    let read = f.provider.get_server("c1", &theirs).await.unwrap().unwrap();
    assert_eq!(read.cluster.as_deref(), Some("c2"));
    assert_eq!(read.name, "c2-workers-aaaaa");
    assert!(f
        .provider
        .get_server("c1", "00000000-0000-0000-0000-000000000000")
        .await
        .unwrap()
        .is_none());

    // Its own cluster may delete it.
    f.provider.delete_server("c2", &theirs).await.unwrap();
    assert!(!f.sim.servers().iter().any(|s| s.id == theirs));
}

/// A cycle reads OpenStack with one server listing and one flavor listing, however many
/// groups with different flavors share the account.
#[tokio::test]
async fn one_observe_lists_servers_once_and_flavors_once_for_all_groups() {
    let f = fixture_with(
        SimOpenStackOptions::default(),
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    let creds = OpenStackCredentials::from_file(&f._dir.path().join("openstack.yaml")).unwrap();
    let by_group = BTreeMap::from([
        (
            "small".to_string(),
            settings("m1.small", "fedora-coreos", None),
        ),
        (
            "medium".to_string(),
            settings("m1.medium", "fedora-coreos", None),
        ),
        (
            "large".to_string(),
            settings("m1.large", "fedora-coreos", None),
        ),
    ]);
    let provider =
        OpenStackProvider::with_options(creds, by_group, ProviderOptions::default()).unwrap();
    let groups: Vec<String> = ["large", "medium", "small"].map(String::from).into();
    let before = f.sim.calls().len();
    let seen = provider.observe("c1", &groups).await.expect("observe");
    assert_eq!(seen.shapes.len(), 3);
    assert_eq!(seen.shapes["medium"].memory, Some(4096 << 20));
    let listed = |calls: &[nodewright::sim::openstack::SimCall], what: &str| {
        calls.iter().filter(|c| c.path.ends_with(what)).count()
    };
    let calls = f.sim.calls()[before..].to_vec();
    assert_eq!(listed(&calls, "/servers/detail"), 1, "{calls:?}");
    assert_eq!(listed(&calls, "/flavors/detail"), 1, "{calls:?}");
    // The next cycle finds every flavor resolved: only the servers are listed.
    let before = f.sim.calls().len();
    provider.observe("c1", &groups).await.expect("observe");
    let calls = f.sim.calls()[before..].to_vec();
    assert_eq!(listed(&calls, "/flavors/detail"), 0, "{calls:?}");
    assert_eq!(listed(&calls, "/servers/detail"), 1, "{calls:?}");
}
