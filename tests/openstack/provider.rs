//! The OpenStack provider against the simulated OpenStack: auth, create, list, delete, errors, TLS options.

use super::*;

// ---------------------------------------------------------------------------
// Provider against the simulator

#[tokio::test]
async fn password_auth_create_list_boot_delete() {
    let f = fixture().await;
    f.provider.check().await.unwrap();
    let user_data = "#cloud-config\nwrite_files:\n  - path: /etc/x\n    content: \"héllo ✓\"\n";
    let created = f
        .provider
        .create_server(&request("c1-workers-abc", "c1", user_data))
        .await
        .unwrap();
    assert_eq!(created.status, ServerStatus::Building);
    assert_eq!(created.memory_bytes, Some(4096 * 1024 * 1024));
    assert_eq!(created.cluster.as_deref(), Some("c1"));

    let sims = f.sim.servers();
    assert_eq!(sims.len(), 1);
    let s = &sims[0];
    assert_eq!(s.id, created.id);
    assert_eq!(s.user_data.as_deref(), Some(user_data));
    assert_eq!(s.metadata.get(CLUSTER_TAG).map(String::as_str), Some("c1"));
    assert_eq!(
        s.metadata.get(GROUP_TAG).map(String::as_str),
        Some("workers")
    );
    assert_eq!(s.flavor_id, "3");
    assert_eq!(s.image_id, f.sim.options().images[0].id);
    assert_eq!(s.networks, vec![f.sim.options().networks[0].id.clone()]);
    assert_eq!(s.key_name.as_deref(), Some("ops"));
    assert_eq!(s.security_groups, vec!["k8s-nodes".to_string()]);

    // BUILD first, then ACTIVE with the hook told.
    let listed = f.provider.list_servers("c1").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, ServerStatus::Building);
    let active = wait_for_status(&f, "c1", &created.id, ServerStatus::Active).await;
    assert_eq!(active.memory_bytes, Some(4096 * 1024 * 1024));
    assert_eq!(active.group.as_deref(), Some("workers"));
    assert_eq!(active.provider, "openstack");
    let age = std::time::SystemTime::now()
        .duration_since(active.created)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(60), "created parsed: {age:?}");
    {
        let events = f.events.lock().unwrap();
        match events.as_slice() {
            [VmEvent::Booted {
                name,
                user_data: ud,
                memory_bytes,
                cpus,
            }] => {
                assert_eq!(name, "c1-workers-abc");
                assert_eq!(ud, user_data);
                assert_eq!(*memory_bytes, 4096 * 1024 * 1024);
                assert_eq!(*cpus, 2);
            }
            other => panic!("unexpected events {other:?}"),
        }
    }

    // Nova calls carry the microversion; image/network lookups go to Glance/Neutron.
    let calls = f.sim.calls();
    assert!(calls
        .iter()
        .filter(|c| c.path.starts_with("/compute/"))
        .all(|c| c.microversion.as_deref() == Some("compute 2.79")));
    assert!(calls
        .iter()
        .any(|c| c.path == "/image/v2/images" && c.query.as_deref() == Some("name=fedora-coreos")));
    assert!(calls
        .iter()
        .any(|c| c.path == "/network/v2.0/networks" && c.query.as_deref() == Some("name=private")));

    f.provider.delete_server("c1", &created.id).await.unwrap();
    // Like real Nova, the server is listed as deleting for a moment after the 204.
    for _ in 0..100 {
        if f.sim.servers().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(f.sim.servers().is_empty());
    assert!(f.provider.list_servers("c1").await.unwrap().is_empty());
    assert!(matches!(
        f.events.lock().unwrap().last(),
        Some(VmEvent::Deleted { name }) if name == "c1-workers-abc"
    ));
    // Already gone is fine.
    f.provider.delete_server("c1", &created.id).await.unwrap();
    f.provider
        .delete_server("c1", "00000000-0000-0000-0000-000000000000")
        .await
        .unwrap();
    // One token served everything.
    assert_eq!(f.sim.tokens_issued(), 1);
}

#[tokio::test]
async fn application_credential_auth() {
    let f = fixture_with(
        SimOpenStackOptions::default(),
        true,
        settings("m1.small", "ubuntu-24.04", None),
    )
    .await;
    f.provider.check().await.unwrap();
    let created = f
        .provider
        .create_server(&request("c1-a", "c1", "x"))
        .await
        .unwrap();
    let sims = f.sim.servers();
    assert_eq!(sims[0].id, created.id);
    // No network configured: "networks": "none".
    assert!(sims[0].networks.is_empty());
    assert_eq!(created.memory_bytes, Some(2048 * 1024 * 1024));
}

#[tokio::test]
async fn wrong_password_is_auth_error() {
    let sim = SimOpenStack::start(SimOpenStackOptions::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("os.yaml");
    sim.write_credentials_file(&path).unwrap();
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("sim-password", "wrong-password");
    std::fs::write(&path, text).unwrap();
    let creds = OpenStackCredentials::from_file(&path).unwrap();
    let p = OpenStackProvider::new(creds, BTreeMap::new()).unwrap();
    let err = p.list_servers("c1").await.unwrap_err();
    assert!(matches!(err, CloudError::Auth { .. }), "{err:?}");
    assert!(!err.to_string().contains("wrong-password"));
    let err = p.check().await.unwrap_err();
    assert!(matches!(err, CloudError::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn list_is_filtered_by_cluster_and_paginated() {
    let f = fixture_with(
        SimOpenStackOptions {
            page_size: 2,
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", Some("private")),
    )
    .await;
    for i in 0..3 {
        f.provider
            .create_server(&request(&format!("c1-w{i}"), "c1", "x"))
            .await
            .unwrap();
    }
    f.provider
        .create_server(&request("c2-w0", "c2", "x"))
        .await
        .unwrap();
    f.sim.insert_server("untagged", BTreeMap::new());
    f.sim.insert_server(
        "other",
        BTreeMap::from([(CLUSTER_TAG.to_string(), "c3".to_string())]),
    );
    let mut names: Vec<String> = f
        .provider
        .list_servers("c1")
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.sort();
    assert_eq!(names, vec!["c1-w0", "c1-w1", "c1-w2"]);
    let c2 = f.provider.list_servers("c2").await.unwrap();
    assert_eq!(c2.len(), 1);
    assert_eq!(c2[0].name, "c2-w0");
    let pages = f
        .sim
        .calls()
        .iter()
        .filter(|c| {
            c.path == "/compute/v2.1/servers/detail"
                && c.query.as_deref().is_some_and(|q| q.contains("marker="))
        })
        .count();
    assert!(pages >= 4, "pagination followed: {pages}");
}

#[tokio::test]
async fn quota_and_server_errors_are_mapped() {
    let f = fixture().await;
    f.sim.fail_next_creates(1, CreateFailure::Quota);
    let err = f
        .provider
        .create_server(&request("c1-q", "c1", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, CloudError::Quota { .. }), "{err:?}");
    assert!(err.to_string().contains("Quota exceeded for instances"));

    f.sim.fail_next_creates(1, CreateFailure::ServerError);
    let err = f
        .provider
        .create_server(&request("c1-e", "c1", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CloudError::Api { status: 500, message, .. } if message.contains("Unexpected API Error")),
        "{err:?}"
    );

    f.sim.fail_next_creates(1, CreateFailure::NoValidHost);
    let s = f
        .provider
        .create_server(&request("c1-nvh", "c1", "x"))
        .await
        .unwrap();
    wait_for_status(&f, "c1", &s.id, ServerStatus::Error).await;

    f.sim.fail_next_deletes(1);
    let err = f.provider.delete_server("c1", &s.id).await.unwrap_err();
    assert!(
        matches!(err, CloudError::Api { status: 500, .. }),
        "{err:?}"
    );
    f.provider.delete_server("c1", &s.id).await.unwrap();
}

#[tokio::test]
async fn real_quota_is_mapped() {
    let f = fixture_with(
        SimOpenStackOptions {
            max_instances: Some(1),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    f.provider
        .create_server(&request("c1-1", "c1", "x"))
        .await
        .unwrap();
    let err = f
        .provider
        .create_server(&request("c1-2", "c1", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, CloudError::Quota { .. }), "{err:?}");
}

#[tokio::test]
async fn never_boot_stays_building() {
    let f = fixture_with(
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(20),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    f.sim.never_boot("c1-stuck");
    let stuck = f
        .provider
        .create_server(&request("c1-stuck-1", "c1", "x"))
        .await
        .unwrap();
    let ok = f
        .provider
        .create_server(&request("c1-ok-1", "c1", "x"))
        .await
        .unwrap();
    wait_for_status(&f, "c1", &ok.id, ServerStatus::Active).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let listed = f.provider.list_servers("c1").await.unwrap();
    let s = listed.iter().find(|s| s.id == stuck.id).unwrap();
    assert_eq!(s.status, ServerStatus::Building);
    assert_eq!(f.events.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn delete_waits_until_the_server_is_gone() {
    let f = fixture_with(
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(10),
            delete_delay: Duration::from_millis(300),
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
    let start = std::time::Instant::now();
    f.provider.delete_server("c1", &s.id).await.unwrap();
    // The simulator, like real Nova, shows it "deleting" for 300 ms after the 204.
    assert!(
        start.elapsed() >= Duration::from_millis(250),
        "{:?}",
        start.elapsed()
    );
    assert!(f.sim.servers().is_empty());
    assert!(f.provider.list_servers("c1").await.unwrap().is_empty());
    // Polled with GET /servers/{id} until the 404, backing off.
    let polls = f
        .sim
        .calls()
        .iter()
        .filter(|c| c.method == "GET" && c.path.ends_with(&format!("/servers/{}", s.id)))
        .count();
    assert!((2..=10).contains(&polls), "{polls} polls");
}

#[tokio::test]
async fn delete_that_never_finishes_times_out_naming_the_server() {
    let mut f = fixture_with(
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(10),
            delete_delay: Duration::from_secs(30),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    let creds = OpenStackCredentials::from_file(&f._dir.path().join("openstack.yaml")).unwrap();
    f.provider = OpenStackProvider::with_options(
        creds,
        groups(settings("m1.small", "fedora-coreos", None)),
        ProviderOptions {
            delete_timeout: Duration::from_millis(400),
            delete_poll_interval: Duration::from_millis(50),
            ..ProviderOptions::default()
        },
    )
    .unwrap();
    let s = f
        .provider
        .create_server(&request("c1-stuck", "c1", "x"))
        .await
        .unwrap();
    wait_for_status(&f, "c1", &s.id, ServerStatus::Active).await;
    let start = std::time::Instant::now();
    let err = f.provider.delete_server("c1", &s.id).await.unwrap_err();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("c1-stuck") && msg.contains(&s.id) && msg.contains("deleting"),
        "{msg}"
    );
}

#[tokio::test]
async fn server_group_by_name_or_id_goes_in_the_scheduler_hints() {
    let opts = SimOpenStackOptions::default();
    let workers = opts.server_groups[0].clone();
    let spread = opts.server_groups[1].clone();
    for (wanted, expect) in [
        (workers.name.clone(), &workers),
        (spread.id.clone(), &spread),
    ] {
        let mut s = settings("m1.small", "fedora-coreos", None);
        s.server_group = Some(wanted.clone());
        let f = fixture_with(opts.clone(), false, s).await;
        f.provider.check().await.unwrap();
        let created = f
            .provider
            .create_server(&request("c1-sg", "c1", "x"))
            .await
            .unwrap();
        let sims = f.sim.servers();
        assert_eq!(sims[0].id, created.id);
        assert_eq!(
            sims[0].server_group.as_deref(),
            Some(expect.id.as_str()),
            "{wanted}"
        );
        assert!(f
            .sim
            .calls()
            .iter()
            .any(|c| c.path == "/compute/v2.1/os-server-groups"
                && c.microversion.as_deref() == Some("compute 2.79")));
    }
}

#[tokio::test]
async fn missing_or_ambiguous_server_group_is_named() {
    let mut s = settings("m1.small", "fedora-coreos", None);
    s.server_group = Some("no-such-group".into());
    let f = fixture_with(SimOpenStackOptions::default(), false, s).await;
    let err = f.provider.check().await.unwrap_err();
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "server group" && name == "no-such-group"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("server group 'no-such-group'"),
        "{err}"
    );
    let err = f
        .provider
        .create_server(&request("c1-x", "c1", "x"))
        .await
        .unwrap_err();
    assert!(matches!(&err, CloudError::NotFound { .. }), "{err:?}");
    assert!(f.sim.servers().is_empty());

    let mut opts = SimOpenStackOptions::default();
    opts.server_groups.push(SimServerGroup {
        id: "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a08".into(),
        name: "k8s-workers".into(),
        policy: "affinity".into(),
    });
    let mut s = settings("m1.small", "fedora-coreos", None);
    s.server_group = Some("k8s-workers".into());
    let f = fixture_with(opts, false, s).await;
    let err = f.provider.check().await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("'k8s-workers'") && msg.contains("ambiguous"),
        "{msg}"
    );
    assert!(
        msg.contains("5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a08"),
        "{msg}"
    );
}

#[tokio::test]
async fn ownership_tags_are_sent_on_create() {
    let f = fixture().await;
    let created = f
        .provider
        .create_server(&request("c1-workers-t", "c1", "x"))
        .await
        .unwrap();
    let sims = f.sim.servers();
    assert_eq!(
        sims[0].tags,
        vec![
            format!("{CLUSTER_TAG}=c1"),
            format!("{GROUP_TAG}=workers"),
            format!("{SETTINGS_HASH_TAG}={HASH}")
        ]
    );
    // Without a server group: no scheduler hint.
    assert_eq!(sims[0].server_group, None);
    // Listing still goes by the metadata.
    let listed = f.provider.list_servers("c1").await.unwrap();
    assert_eq!(listed[0].id, created.id);
}

#[tokio::test]
async fn token_is_renewed_before_expiry_and_after_revocation() {
    let f = fixture_with(
        SimOpenStackOptions {
            token_lifetime: Duration::from_secs(2),
            ..Default::default()
        },
        false,
        settings("m1.small", "fedora-coreos", None),
    )
    .await;
    f.provider.list_servers("c1").await.unwrap();
    f.provider.list_servers("c1").await.unwrap();
    assert_eq!(f.sim.tokens_issued(), 1);
    // Renewed once half the lifetime has passed, before Keystone would reject it.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    f.provider.list_servers("c1").await.unwrap();
    assert_eq!(f.sim.tokens_issued(), 2);

    // A revoked token gets 401: re-authenticate once and retry.
    f.sim.set_token_lifetime(Duration::from_secs(3600));
    f.sim.revoke_tokens();
    f.provider.list_servers("c1").await.unwrap();
    assert_eq!(f.sim.tokens_issued(), 3);
    f.provider.list_servers("c1").await.unwrap();
    assert_eq!(f.sim.tokens_issued(), 3);
}

#[tokio::test]
async fn unknown_flavor_is_named() {
    let f = fixture_with(
        SimOpenStackOptions::default(),
        false,
        settings("m1.huge", "fedora-coreos", None),
    )
    .await;
    let err = f
        .provider
        .create_server(&request("c1-x", "c1", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "flavor" && name == "m1.huge"),
        "{err:?}"
    );
    assert!(err.to_string().contains("m1.huge"));
    assert!(f.sim.servers().is_empty());
}

#[tokio::test]
async fn check_names_missing_image_and_network() {
    let f = fixture_with(
        SimOpenStackOptions::default(),
        false,
        settings("m1.small", "debian-13", Some("private")),
    )
    .await;
    let err = f.provider.check().await.unwrap_err();
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "image" && name == "debian-13"),
        "{err:?}"
    );

    let f = fixture_with(
        SimOpenStackOptions::default(),
        false,
        settings("2", "fedora-coreos", Some("public-net")),
    )
    .await;
    let err = f.provider.check().await.unwrap_err();
    assert!(err.to_string().contains("network 'public-net'"), "{err}");
}

#[tokio::test]
async fn ids_resolve_as_well_as_names() {
    let opts = SimOpenStackOptions::default();
    let image_id = opts.images[1].id.clone();
    let net_id = opts.networks[0].id.clone();
    let f = fixture_with(opts, false, settings("4", &image_id, Some(&net_id))).await;
    f.provider.check().await.unwrap();
    let s = f
        .provider
        .create_server(&request("c1-ids", "c1", "x"))
        .await
        .unwrap();
    assert_eq!(s.memory_bytes, Some(8192 * 1024 * 1024));
    let sims = f.sim.servers();
    assert_eq!(sims[0].image_id, image_id);
    assert_eq!(sims[0].networks, vec![net_id]);
    assert_eq!(sims[0].flavor_id, "4");
}

#[tokio::test]
async fn unknown_group_and_unreachable_cloud() {
    let f = fixture().await;
    let mut req = request("c1-x", "c1", "x");
    req.group = "gpu".into();
    let err = f.provider.create_server(&req).await.unwrap_err();
    assert!(err.to_string().contains("'gpu'"), "{err}");

    // Nothing listens on this port any more.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let creds = OpenStackCredentials::from_yaml_str(&EXAMPLE.replace(
        "https://pouta.csc.fi:5001/v3",
        &format!("http://127.0.0.1:{port}/v3"),
    ))
    .unwrap();
    let p = OpenStackProvider::new(creds, BTreeMap::new()).unwrap();
    let err = p.list_servers("c1").await.unwrap_err();
    assert!(matches!(err, CloudError::Transport { .. }), "{err:?}");
}

// ---------------------------------------------------------------------------
// TLS options

/// A self-signed test CA generated for this test suite.
const TEST_CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBkTCCATegAwIBAgIUL21aBTATlAOHVhqY7hyi85L2AxYwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSbm9kZXdyaWdodC10ZXN0LWNhMCAXDTI2MTEyMjIxNDYyM1oY
DzIxMjYxMDI5MjE0NjIzWjAdMRswGQYDVQQDDBJub2Rld3JpZ2h0LXRlc3QtY2Ew
WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAATSX3HXqL9EXmHPinh37r9/oAlrwG8f
8lr4mpXSf5gBff+4S2zwoO7TAQwAQmXOvGWzYcl1iXkBhqX5K6OmV3eXo1MwUTAd
BgNVHQ4EFgQUVfknyFdwCrmM2RPTTpqcN9f0pDIwHwYDVR0jBBgwFoAUVfknyFdw
CrmM2RPTTpqcN9f0pDIwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBF
AiEAz5zDaZRUCgQZZqwLJ9Q1rL2izw4AwmqAkLCEqaE5MdYCIEJsJvvIbjjvIRfk
x56f4NvmeLnqwZjkxdcaQKxizM79
-----END CERTIFICATE-----
";

#[tokio::test]
async fn cacert_and_insecure_options() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, TEST_CA_PEM).unwrap();
    let with = |extra: String| {
        let creds = OpenStackCredentials::from_yaml_str(&format!("{EXAMPLE}{extra}")).unwrap();
        OpenStackProvider::new(creds, BTreeMap::new())
    };
    with(format!("OS_CACERT: {}\n", ca.display())).unwrap();
    with("OS_INSECURE: true\n".into()).unwrap();

    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let err = with(format!("OS_CACERT: {}\n", not_pem.display())).unwrap_err();
    assert!(err.to_string().contains("OS_CACERT"), "{err}");
    let err = with("OS_CACERT: /nonexistent/ca.pem\n".into()).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
}

/// What real Nova refuses only at create time (a key pair, a security group, an
/// availability zone that does not exist) is named by `check`, and the simulated Nova
/// refuses such a create with the 400 real Nova answers.
#[tokio::test]
async fn check_names_a_missing_key_pair_security_group_and_zone_as_nova_would_refuse_them() {
    type Edit = fn(&mut OpenStackSettings);
    let cases: [(&str, Edit, &str, &str); 3] = [
        (
            "key pair",
            |s| s.key_name = Some("nobody".into()),
            "key pair 'nobody'",
            "Invalid key_name provided.",
        ),
        (
            "security group",
            |s| s.security_groups = vec!["default".into(), "web".into()],
            "security group 'web'",
            "Security group web not found.",
        ),
        (
            "availability zone",
            |s| s.availability_zone = Some("az-9".into()),
            "availability zone 'az-9' not found; available: nova, az-1, az-2, az-3",
            "The requested availability zone is not available",
        ),
    ];
    for (what, edit, check_says, nova_says) in cases {
        let mut s = settings("m1.small", "fedora-coreos", Some("private"));
        edit(&mut s);
        let f = fixture_with(SimOpenStackOptions::default(), false, s).await;
        let err = f.provider.check().await.unwrap_err();
        assert!(err.to_string().contains(check_says), "{what}: {err}");
        let err = f
            .provider
            .create_server(&request("c1-x", "c1", "x"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(nova_says), "{what}: {err}");
        assert!(f.sim.servers().is_empty(), "{what}");
    }
    // Ids work as well as names, and what exists passes.
    let opts = SimOpenStackOptions::default();
    let mut s = settings("m1.small", "fedora-coreos", Some("private"));
    s.security_groups = vec![opts.security_groups[1].id.clone(), "default".into()];
    s.availability_zone = Some("az-2".into());
    s.server_group = Some(opts.server_groups[0].id.clone());
    let f = fixture_with(opts, false, s).await;
    let lines = f.provider.check().await.unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("key pair ops") && l.contains("availability zone az-2")),
        "{lines:?}"
    );
    f.provider
        .create_server(&request("c1-x", "c1", "x"))
        .await
        .unwrap();
}

/// The simulated Nova and Neutron answer the look-ups `check` makes as the real ones do.
#[tokio::test]
async fn simulated_nova_answers_key_pair_zone_and_server_group_look_ups() {
    let f = fixture().await;
    let http = raw_client();
    let (token, _) = raw_token(&f.sim, &http).await;
    let base = f.sim.auth_url().replace("/identity/v3", "");
    let get = |path: String| {
        http.get(format!("{base}{path}"))
            .header("X-Auth-Token", &token)
            .send()
    };
    let r = get("/compute/v2.1/os-keypairs/ops".into()).await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["keypair"]["name"], "ops");
    let r = get("/compute/v2.1/os-keypairs/nobody".into())
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["itemNotFound"]["code"], 404);
    assert!(v["itemNotFound"]["message"]
        .as_str()
        .unwrap_or_default()
        .starts_with("Keypair nobody not found for user "));
    let v: serde_json::Value = get("/compute/v2.1/os-availability-zone".into())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["availabilityZoneInfo"][0]["zoneName"], "nova");
    assert_eq!(v["availabilityZoneInfo"][0]["zoneState"]["available"], true);
    let id = f.sim.options().server_groups[0].id.clone();
    let v: serde_json::Value = get(format!("/compute/v2.1/os-server-groups/{id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["server_group"]["name"], "k8s-workers");
    let r = get("/compute/v2.1/os-server-groups/00000000-0000-4000-8000-000000000000".into())
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: serde_json::Value = get("/network/v2.0/security-groups?name=k8s-nodes".into())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["security_groups"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["security_groups"][0]["name"], "k8s-nodes");
}
