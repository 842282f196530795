//! Issue 8, drift: every provider stamps the group settings hash on the VM in the create
//! call itself, in its own tag syntax, and reads it back when listing, over loopback
//! HTTP against the simulated clouds. (The planner's use of it is in the plan tests.)

use std::collections::BTreeMap;
use std::time::Duration;

use nodewright::cloud::kamatera::{
    hash_tag, KamateraCredentials, KamateraProvider, KamateraSettings,
    ProviderOptions as KamateraOptions,
};
use nodewright::cloud::openstack::{
    OpenStackCredentials, OpenStackProvider, OpenStackSettings, ProviderOptions as OpenStackOptions,
};
use nodewright::cloud::proxmox::{
    ProviderOptions as ProxmoxOptions, ProxmoxCredentials, ProxmoxProvider, ProxmoxSettings,
};
use nodewright::cloud::{CloudProvider, CreateRequest, CLUSTER_TAG, GROUP_TAG, SETTINGS_HASH_TAG};
use nodewright::sim::kamatera::{SimKamatera, SimKamateraOptions};
use nodewright::sim::openstack::{SimOpenStack, SimOpenStackOptions};
use nodewright::sim::proxmox::{SimProxmox, SimProxmoxOptions};

/// A group settings hash as the config computes it (12 hex digits).
const HASH: &str = "0a1b2c3d4e5f";

fn req(name: &str, cluster: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: cluster.into(),
        group: "workers".into(),
        user_data: "#!/bin/sh\n".into(),
        size: None,
        settings_hash: HASH.into(),
        zone: None,
    }
}

#[tokio::test]
async fn openstack_stamps_the_settings_hash_in_the_create_and_reads_it_back() {
    let sim = SimOpenStack::start(SimOpenStackOptions::default())
        .await
        .expect("simulator starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("openstack.yaml");
    sim.write_credentials_file(&path).expect("credentials");
    let settings = OpenStackSettings {
        flavor: "m1.medium".into(),
        image: "fedora-coreos".into(),
        network: Some("private".into()),
        key_name: None,
        security_groups: Vec::new(),
        availability_zone: None,
        server_group: None,
    };
    let p = OpenStackProvider::with_options(
        OpenStackCredentials::from_file(&path).expect("credentials load"),
        BTreeMap::from([("workers".to_string(), settings)]),
        OpenStackOptions {
            delete_poll_interval: Duration::from_millis(20),
            ..OpenStackOptions::default()
        },
    )
    .expect("provider builds");
    let made = p
        .create_server(&req("c1-workers-h", "c1"))
        .await
        .expect("create");
    assert_eq!(made.settings_hash.as_deref(), Some(HASH));
    // Metadata (what is read back) and a tag, both from the create itself: no
    // metadata or tag call follows it.
    let vm = &sim.servers()[0];
    assert_eq!(
        vm.metadata.get(SETTINGS_HASH_TAG).map(String::as_str),
        Some(HASH)
    );
    assert!(
        vm.tags.contains(&format!("{SETTINGS_HASH_TAG}={HASH}")),
        "{:?}",
        vm.tags
    );
    let later: Vec<String> = sim
        .calls()
        .into_iter()
        .filter(|c| c.path.contains("/metadata") || c.path.contains("/tags"))
        .map(|c| format!("{} {}", c.method, c.path))
        .collect();
    assert!(later.is_empty(), "{later:?}");
    let listed = p.list_servers("c1").await.expect("list");
    assert_eq!(listed[0].settings_hash.as_deref(), Some(HASH));
    let read = p.get_server("c1", &made.id).await.expect("get");
    assert_eq!(read.and_then(|s| s.settings_hash).as_deref(), Some(HASH));
    // A VM made before the hash was stamped reads back without one.
    let old = sim.insert_server(
        "c1-workers-old",
        BTreeMap::from([
            (CLUSTER_TAG.to_string(), "c1".to_string()),
            (GROUP_TAG.to_string(), "workers".to_string()),
        ]),
    );
    let listed = p.list_servers("c1").await.expect("list");
    let old = listed.iter().find(|s| s.id == old).expect("listed");
    assert_eq!(old.settings_hash, None);
}

/// Proxmox tags must match `[a-z0-9_][a-z0-9_\-+.]*`: the hash is `nw-h-<hash>`, set in
/// the same configuration call as the ownership tags (the simulator checks every
/// request against the official API schema).
#[tokio::test]
async fn proxmox_stamps_the_settings_hash_with_the_ownership_tags_and_reads_it_back() {
    let sim = SimProxmox::start(SimProxmoxOptions::default())
        .await
        .expect("simulator starts (needs PVE_API_SCHEMA)");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pve.yaml");
    sim.write_credentials_file(&path).expect("credentials");
    let settings: ProxmoxSettings =
        nodewright::yaml::from_str("template: k3s-shared\n").expect("settings");
    let p = ProxmoxProvider::with_options(
        ProxmoxCredentials::from_file(&path).expect("credentials load"),
        BTreeMap::from([("workers".to_string(), settings)]),
        ProxmoxOptions {
            poll_interval: Duration::from_millis(50),
            task_timeout: Duration::from_secs(10),
            identity: nodewright::cloud::ClusterIdentity::known(
                nodewright_testkit::pve::TEST_IDENTITY,
            ),
            ..ProxmoxOptions::default()
        },
    )
    .expect("provider builds");
    let made = p
        .create_server(&req("prod-workers-hhhhh", "prod"))
        .await
        .expect("create");
    assert_eq!(made.settings_hash.as_deref(), Some(HASH));
    let tag_values: Vec<String> = sim
        .calls()
        .into_iter()
        .filter_map(|c| {
            c.params
                .into_iter()
                .find(|(k, _)| k == "tags")
                .map(|(_, v)| v)
        })
        .collect();
    assert_eq!(
        tag_values.len(),
        1,
        "one call sets every tag: {tag_values:?}"
    );
    let tags: Vec<&str> = tag_values[0].split(';').collect();
    assert!(tags.contains(&"nw-c-prod"), "{tags:?}");
    assert!(tags.contains(&format!("nw-h-{HASH}").as_str()), "{tags:?}");
    let listed = p.list_servers("prod").await.expect("list");
    let listed = listed.iter().find(|l| l.id == made.id).expect("listed");
    assert_eq!(listed.settings_hash.as_deref(), Some(HASH));
    let read = p.get_server("prod", &made.id).await.expect("get");
    assert_eq!(read.and_then(|r| r.settings_hash).as_deref(), Some(HASH));
    let old = sim.insert_vm(
        "pve1",
        "prod-workers-old",
        "nw-c-prod;nw-g-workers;nw-t-1700000000",
        None,
    );
    let listed = p.list_servers("prod").await.expect("list");
    let old = listed
        .iter()
        .find(|l| l.id == old.to_string())
        .expect("listed");
    assert_eq!(old.settings_hash, None);
    assert!(
        sim.violations().is_empty(),
        "schema violations: {:#?}",
        sim.violations()
    );
}

/// Kamatera tags take at most 23 letters, digits, `-` and `_`: the hash is
/// `<tagPrefix>_h<10 base-36 digits>`, sent in the create's `tag` field.
#[tokio::test]
async fn kamatera_stamps_the_settings_hash_in_the_create_and_reads_it_back() {
    let sim = SimKamatera::start(SimKamateraOptions::default())
        .await
        .expect("simulator starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kamatera.yaml");
    sim.write_credentials_file(&path).expect("credentials");
    // The longest tag prefix Kamatera's tags leave room for.
    let settings: KamateraSettings = nodewright::yaml::from_str(
        "datacenter: EU\nimage: ubuntu_server_24.04_64-bit\ncpu: 2B\nram: 4096 MiB\ntagPrefix: abcdefghijk\n",
    )
    .expect("settings");
    let p = KamateraProvider::with_options(
        KamateraCredentials::from_file(&path).expect("credentials load"),
        BTreeMap::from([("workers".to_string(), settings)]),
        KamateraOptions {
            poll_initial: Duration::from_millis(15),
            poll_max: Duration::from_millis(40),
            command_timeout: Duration::from_secs(10),
            ..KamateraOptions::default()
        },
    )
    .expect("provider builds");
    let made = p
        .create_server(&req("c1-workers-hhhhh", "c1"))
        .await
        .expect("create");
    assert_eq!(made.settings_hash.as_deref(), Some(HASH));
    let tag = hash_tag("abcdefghijk", HASH).expect("tag");
    assert_eq!(tag.len(), 23);
    let creates: Vec<serde_json::Value> = sim
        .calls()
        .into_iter()
        .filter(|c| c.method == "POST" && c.path == "/service/server")
        .filter_map(|c| c.body)
        .collect();
    assert_eq!(creates.len(), 1);
    let sent = creates[0]["tag"].as_str().unwrap_or_default();
    assert!(sent.split(' ').any(|t| t == tag), "{sent}");
    // Nothing had to be added after the create.
    assert!(
        !sim.calls()
            .iter()
            .filter_map(|c| c.body.as_ref())
            .any(|b| b.get("add").is_some()),
        "a tag was added after the create"
    );
    let listed = p.list_servers("c1").await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].settings_hash.as_deref(), Some(HASH));
    // Read back from the tags (not the cache), as after a restart.
    let read = p.get_server("c1", &made.id).await.expect("get");
    assert_eq!(read.and_then(|r| r.settings_hash).as_deref(), Some(HASH));
    let old = sim.insert_server(
        "c1-workers-old",
        &["abcdefghijk-c1", "abcdefghijk-workers"],
        true,
    );
    let listed = p.list_servers("c1").await.expect("list");
    let old = listed.iter().find(|l| l.id == old).expect("listed");
    assert_eq!(old.settings_hash, None);
    assert_eq!(old.group.as_deref(), Some("workers"));
}
