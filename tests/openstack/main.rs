//! OpenStack provider against the simulated OpenStack, over real loopback HTTP.

use nodewright_testkit as common;

mod credentials;
mod provider;
mod real_nova;
mod shapes;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{recorder, Events};
use nodewright::cloud::openstack::{
    AuthMethod, DomainRef, Interface, OpenStackCredentials, OpenStackProvider, OpenStackSettings,
    ProjectScope, ProviderOptions,
};
use nodewright::cloud::{
    CloudError, CloudProvider, CreateRequest, CLUSTER_TAG, GROUP_TAG, SETTINGS_HASH_TAG,
};
use nodewright::model::ServerStatus;
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
        size: None,
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
) -> nodewright::model::Server {
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
