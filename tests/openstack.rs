//! OpenStack provider against the simulated OpenStack, over real loopback HTTP.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{recorder, Events};
use nodewright::cloud::openstack::{
    AuthMethod, DomainRef, Interface, OpenStackCredentials, OpenStackProvider, OpenStackSettings,
    ProjectScope, ProviderOptions,
};
use nodewright::cloud::{
    CloudError, CloudProvider, CreateRequest, ServerStatus, CLUSTER_TAG, GROUP_TAG,
    SETTINGS_HASH_TAG,
};
use nodewright::sim::openstack::{
    CreateFailure, SimNetwork, SimOpenStack, SimOpenStackOptions, SimServerGroup,
};
use nodewright::sim::VmEvent;

const EXAMPLE: &str = r#"OS_AUTH_URL: "https://pouta.csc.fi:5001/v3"
OS_IDENTITY_API_VERSION: 3
OS_USERNAME: "user"
OS_PASSWORD: "fairlys3cretpassw0rd?not"
OS_USER_DOMAIN_NAME: "default"
OS_TENANT_ID: "12345"
OS_TENANT_NAME: "12345"
OS_REGION: "nova"
"#;

fn settings(flavor: &str, image: &str, network: Option<&str>) -> OpenStackSettings {
    OpenStackSettings {
        flavor: flavor.into(),
        image: image.into(),
        network: network.map(str::to_string),
        key_name: Some("ops".into()),
        security_groups: vec!["k8s-nodes".into()],
        availability_zone: None,
        server_group: None,
    }
}

fn groups(s: OpenStackSettings) -> BTreeMap<String, OpenStackSettings> {
    BTreeMap::from([("workers".to_string(), s)])
}

/// A group settings hash as the config computes it (12 hex digits), stamped on every VM
/// these tests create.
const HASH: &str = "0a1b2c3d4e5f";

fn request(name: &str, cluster: &str, user_data: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: cluster.into(),
        group: "workers".into(),
        user_data: user_data.into(),
        settings_hash: HASH.into(),
        zone: None,
    }
}

struct Fixture {
    sim: SimOpenStack,
    provider: OpenStackProvider,
    events: Events,
    _dir: tempfile::TempDir,
}

async fn fixture_with(
    mut opts: SimOpenStackOptions,
    app_credential: bool,
    s: OpenStackSettings,
) -> Fixture {
    let (events, hook) = recorder();
    opts.hook = Some(hook);
    let sim = SimOpenStack::start(opts).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("openstack.yaml");
    if app_credential {
        sim.write_app_credentials_file(&path).unwrap();
    } else {
        sim.write_credentials_file(&path).unwrap();
    }
    let creds = OpenStackCredentials::from_file(&path).unwrap();
    let provider = OpenStackProvider::with_options(
        creds,
        groups(s),
        ProviderOptions {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            resolve_ttl: Duration::from_secs(60),
            delete_timeout: Duration::from_secs(5),
            delete_poll_interval: Duration::from_millis(20),
        },
    )
    .unwrap();
    Fixture {
        sim,
        provider,
        events,
        _dir: dir,
    }
}

async fn fixture() -> Fixture {
    fixture_with(
        SimOpenStackOptions::default(),
        false,
        settings("m1.medium", "fedora-coreos", Some("private")),
    )
    .await
}

async fn wait_for_status(
    f: &Fixture,
    cluster: &str,
    id: &str,
    want: ServerStatus,
) -> nodewright::cloud::Server {
    for _ in 0..100 {
        let servers = f.provider.list_servers(cluster).await.unwrap();
        if let Some(s) = servers.iter().find(|s| s.id == id) {
            if s.status == want {
                return s.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server {id} never reached {want:?}");
}

// ---------------------------------------------------------------------------
// Credentials

#[test]
fn example_credentials_file_loads_unchanged() {
    let c = OpenStackCredentials::from_yaml_str(EXAMPLE).unwrap();
    assert_eq!(c.auth_url, "https://pouta.csc.fi:5001/v3");
    assert_eq!(c.tokens_url(), "https://pouta.csc.fi:5001/v3/auth/tokens");
    assert_eq!(c.region.as_deref(), Some("nova"));
    assert_eq!(c.interface, Interface::Public);
    assert!(!c.insecure);
    assert_eq!(
        c.auth,
        AuthMethod::Password {
            username: "user".into(),
            password: "fairlys3cretpassw0rd?not".into(),
            user_domain: DomainRef::Name("default".into()),
            project: ProjectScope::Id("12345".into()),
        }
    );
}

#[test]
fn credentials_debug_redacts_secrets() {
    let c = OpenStackCredentials::from_yaml_str(EXAMPLE).unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("fairlys3cretpassw0rd"), "{dbg}");
    assert!(dbg.contains("user"));
    let app = OpenStackCredentials::from_yaml_str(
        "OS_AUTH_URL: https://k:5000/v3\nOS_APPLICATION_CREDENTIAL_ID: abc\nOS_APPLICATION_CREDENTIAL_SECRET: topsecretvalue\n",
    )
    .unwrap();
    let dbg = format!("{app:?} {:#?}", app.auth);
    assert!(!dbg.contains("topsecretvalue"), "{dbg}");
}

#[test]
fn credential_files_table() {
    // (case, yaml, Ok(check) or Err(substrings the error must contain))
    type Check = fn(&OpenStackCredentials) -> bool;
    type Case = (&'static str, String, Result<Check, Vec<&'static str>>);
    let cases: Vec<Case> = vec![
        (
            "numbers as values",
            "OS_AUTH_URL: http://k:5000\nOS_IDENTITY_API_VERSION: '3'\nOS_USERNAME: 42\nOS_PASSWORD: 1234\nOS_USER_DOMAIN_ID: default\nOS_PROJECT_ID: 987\n".into(),
            Ok(|c| {
                c.tokens_url() == "http://k:5000/v3/auth/tokens"
                    && matches!(&c.auth, AuthMethod::Password { username, password, project: ProjectScope::Id(p), user_domain: DomainRef::Id(d) }
                        if username == "42" && password == "1234" && p == "987" && d == "default")
            }),
        ),
        (
            "project by name falls back to user domain",
            "OS_AUTH_URL: https://k/v3\nOS_USERNAME: u\nOS_PASSWORD: p\nOS_USER_DOMAIN_NAME: Default\nOS_PROJECT_NAME: demo\nOS_REGION_NAME: RegionOne\nOS_INTERFACE: internal\n".into(),
            Ok(|c| {
                c.interface == Interface::Internal
                    && c.region.as_deref() == Some("RegionOne")
                    && matches!(&c.auth, AuthMethod::Password { project: ProjectScope::Name { name, domain: DomainRef::Name(d) }, .. } if name == "demo" && d == "Default")
            }),
        ),
        (
            "project domain id",
            "OS_AUTH_URL: https://k/v3\nOS_USERNAME: u\nOS_PASSWORD: p\nOS_USER_DOMAIN_NAME: Default\nOS_TENANT_NAME: demo\nOS_PROJECT_DOMAIN_ID: d1\n".into(),
            Ok(|c| matches!(&c.auth, AuthMethod::Password { project: ProjectScope::Name { domain: DomainRef::Id(d), .. }, .. } if d == "d1")),
        ),
        (
            "application credential by id",
            "OS_AUTH_TYPE: v3applicationcredential\nOS_AUTH_URL: https://k/v3\nOS_APPLICATION_CREDENTIAL_ID: abc\nOS_APPLICATION_CREDENTIAL_SECRET: s\n".into(),
            Ok(|c| matches!(&c.auth, AuthMethod::ApplicationCredentialId { id, secret } if id == "abc" && secret == "s")),
        ),
        (
            "application credential by name",
            "OS_AUTH_URL: https://k/v3\nOS_APPLICATION_CREDENTIAL_NAME: app\nOS_APPLICATION_CREDENTIAL_SECRET: s\nOS_USERNAME: u\nOS_USER_DOMAIN_NAME: Default\n".into(),
            Ok(|c| matches!(&c.auth, AuthMethod::ApplicationCredentialName { name, .. } if name == "app")),
        ),
        (
            "unknown OS_ key is accepted",
            format!("{EXAMPLE}OS_COMPUTE_API_VERSION: 2.79\nOS_PROJECT_DOMAIN_NAME: Default\n"),
            Ok(|c| c.region.as_deref() == Some("nova")),
        ),
        (
            "explicit OS_INSECURE",
            format!("{EXAMPLE}OS_INSECURE: true\nOS_CACERT: /etc/ssl/ca.pem\n"),
            Ok(|c| c.insecure && c.cacert.as_deref() == Some(std::path::Path::new("/etc/ssl/ca.pem"))),
        ),
        (
            "missing OS_AUTH_URL",
            EXAMPLE.lines().filter(|l| !l.starts_with("OS_AUTH_URL")).collect::<Vec<_>>().join("\n"),
            Err(vec!["OS_AUTH_URL", "Keystone URL"]),
        ),
        (
            "missing OS_PASSWORD",
            EXAMPLE.lines().filter(|l| !l.starts_with("OS_PASSWORD")).collect::<Vec<_>>().join("\n"),
            Err(vec!["OS_PASSWORD"]),
        ),
        (
            "missing user domain",
            EXAMPLE.lines().filter(|l| !l.starts_with("OS_USER_DOMAIN")).collect::<Vec<_>>().join("\n"),
            Err(vec!["OS_USER_DOMAIN_NAME", "OS_USER_DOMAIN_ID"]),
        ),
        (
            "missing project",
            EXAMPLE.lines().filter(|l| !l.starts_with("OS_TENANT")).collect::<Vec<_>>().join("\n"),
            Err(vec!["OS_PROJECT_ID", "OS_TENANT_NAME"]),
        ),
        (
            "app credential without secret",
            "OS_AUTH_URL: https://k/v3\nOS_APPLICATION_CREDENTIAL_ID: abc\n".into(),
            Err(vec!["OS_APPLICATION_CREDENTIAL_SECRET"]),
        ),
        (
            "non-OS key",
            format!("{EXAMPLE}username: bob\n"),
            Err(vec!["'username'", "OS_*"]),
        ),
        (
            "identity v2",
            EXAMPLE.replace("OS_IDENTITY_API_VERSION: 3", "OS_IDENTITY_API_VERSION: 2"),
            Err(vec!["OS_IDENTITY_API_VERSION", "v3"]),
        ),
        (
            "nested value",
            format!("{EXAMPLE}OS_CACERT: [a, b]\n"),
            Err(vec!["OS_CACERT", "string or a number"]),
        ),
        (
            "bad insecure value",
            format!("{EXAMPLE}OS_INSECURE: maybe\n"),
            Err(vec!["OS_INSECURE"]),
        ),
        ("not a mapping", "- a\n- b\n".into(), Err(vec!["OS_*"])),
        ("empty file", "".into(), Err(vec!["OS_AUTH_URL"])),
    ];
    for (case, yaml, want) in cases {
        let got = OpenStackCredentials::from_yaml_str(&yaml);
        match (got, want) {
            (Ok(c), Ok(check)) => assert!(check(&c), "{case}: unexpected {c:?}"),
            (Err(e), Err(parts)) => {
                let msg = e.to_string();
                for p in parts {
                    assert!(msg.contains(p), "{case}: error '{msg}' lacks '{p}'");
                }
                assert!(
                    !msg.contains("fairlys3cretpassw0rd"),
                    "{case}: leaks password"
                );
            }
            (Ok(c), Err(_)) => panic!("{case}: expected an error, got {c:?}"),
            (Err(e), Ok(_)) => panic!("{case}: unexpected error {e}"),
        }
    }
}

#[test]
fn credentials_from_missing_file_names_it() {
    let err = OpenStackCredentials::from_file(std::path::Path::new("/nonexistent/os.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/os.yaml"), "{err}");
}

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

// ---------------------------------------------------------------------------
// The simulator's API shapes, with a plain HTTP client

fn raw_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn raw_token(sim: &SimOpenStack, http: &reqwest::Client) -> (String, serde_json::Value) {
    let o = sim.options();
    let resp = http
        .post(format!("{}/auth/tokens", sim.auth_url()))
        .json(&serde_json::json!({ "auth": {
            "identity": { "methods": ["password"], "password": { "user": {
                "name": o.username, "domain": { "name": o.domain }, "password": o.password } } },
            "scope": { "project": { "name": o.project, "domain": { "id": "default" } } },
        } }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let token = resp.headers()["x-subject-token"]
        .to_str()
        .unwrap()
        .to_string();
    (token, resp.json().await.unwrap())
}

#[tokio::test]
async fn simulator_matches_api_shapes() {
    let sim = SimOpenStack::start(SimOpenStackOptions::default())
        .await
        .unwrap();
    let http = raw_client();
    let (token, body) = raw_token(&sim, &http).await;
    let catalog = body["token"]["catalog"].as_array().unwrap();
    for ty in ["compute", "image", "network"] {
        let svc = catalog.iter().find(|s| s["type"] == ty).unwrap();
        let ifaces: Vec<&str> = svc["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["interface"].as_str().unwrap())
            .collect();
        assert_eq!(ifaces, ["public", "internal"], "{ty}");
        assert_eq!(svc["endpoints"][0]["region_id"], "RegionOne");
    }
    assert!(body["token"]["expires_at"].as_str().unwrap().ends_with('Z'));
    let compute = catalog.iter().find(|s| s["type"] == "compute").unwrap()["endpoints"][0]["url"]
        .as_str()
        .unwrap()
        .to_string();

    // No or bad token: 401.
    let r = http
        .get(format!("{compute}/servers/detail"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .get(format!("{compute}/servers/detail"))
        .header("X-Auth-Token", "bogus")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Invalid base64 user data: 400 badRequest.
    let o = sim.options();
    let r = http
        .post(format!("{compute}/servers"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .json(&serde_json::json!({ "server": {
            "name": "x", "flavorRef": "2", "imageRef": o.images[0].id, "networks": "none",
            "user_data": "***not base64***" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["openstack-api-version"], "compute 2.79");
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["badRequest"]["message"]
        .as_str()
        .unwrap()
        .contains("base 64"));

    // Unknown flavor, and missing networks at 2.37+.
    let r = http
        .post(format!("{compute}/servers"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .json(&serde_json::json!({ "server": {
            "name": "x", "flavorRef": "m1.small", "imageRef": o.images[0].id, "networks": "none" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = http
        .post(format!("{compute}/servers"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .json(&serde_json::json!({ "server": {
            "name": "x", "flavorRef": "2", "imageRef": o.images[0].id } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // Unsupported microversion: 406.
    let r = http
        .get(format!("{compute}/flavors/detail"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 3.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);

    // Create, then the embedded flavor only from 2.47 on.
    let r = http
        .post(format!("{compute}/servers"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .json(&serde_json::json!({ "server": {
            "name": "x", "flavorRef": "2", "imageRef": o.images[0].id, "networks": "none" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: serde_json::Value = r.json().await.unwrap();
    let id = v["server"]["id"].as_str().unwrap().to_string();
    let show = |mv: &'static str| {
        http.get(format!("{compute}/servers/{id}"))
            .header("X-Auth-Token", &token)
            .header("X-OpenStack-Nova-API-Version", mv)
            .send()
    };
    let new: serde_json::Value = show("2.79").await.unwrap().json().await.unwrap();
    assert_eq!(new["server"]["flavor"]["ram"], 2048);
    assert_eq!(new["server"]["status"], "BUILD");
    let old: serde_json::Value = show("2.1").await.unwrap().json().await.unwrap();
    assert_eq!(old["server"]["flavor"]["id"], "2");

    // Delete: 204, again 204 while it is still being deleted, then 404 itemNotFound.
    for want in [204, 204, 404] {
        if want == 404 {
            tokio::time::sleep(sim.options().delete_delay + Duration::from_millis(100)).await;
        }
        let r = http
            .delete(format!("{compute}/servers/{id}"))
            .header("X-Auth-Token", &token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want);
        if want == 404 {
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(v["itemNotFound"]["code"], 404);
        }
    }
}

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
