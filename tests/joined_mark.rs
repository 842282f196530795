//! Issue 19: the mark that a VM's node joined is written to the cloud and read back by a
//! later process, in each provider's own syntax, over loopback HTTP against the simulated
//! clouds (Proxmox requests checked against the official API schema).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use nodewright::cloud::kamatera::{
    joined_tag, parse_joined_tag, KamateraCredentials, KamateraProvider, KamateraSettings,
    ProviderOptions as KamateraOptions,
};
use nodewright::cloud::openstack::{
    OpenStackCredentials, OpenStackProvider, OpenStackSettings, ProviderOptions as OpenStackOptions,
};
use nodewright::cloud::proxmox::{
    ProviderOptions as ProxmoxOptions, ProxmoxCredentials, ProxmoxProvider, ProxmoxSettings,
};
use nodewright::cloud::{CloudError, CloudProvider, CreateRequest, JOINED_TAG};
use nodewright::model::ServerStatus;
use nodewright::sim::kamatera::{SimKamatera, SimKamateraOptions};
use nodewright::sim::openstack::{SimOpenStack, SimOpenStackOptions};
use nodewright::sim::proxmox::{SimProxmox, SimProxmoxOptions};

fn req(name: &str, cluster: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: cluster.into(),
        group: "workers".into(),
        user_data: "#!/bin/sh\n".into(),
        size: None,
        settings_hash: String::new(),
        zone: None,
    }
}

fn secs(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(s)
}

/// Marks `id` twice and checks what a fresh provider (`fresh`, as a restarted process
/// builds it) reads back: the latest time, counting as joined; a mark for another
/// cluster is refused; the mark taken off is gone.
async fn marks_and_reads_back(
    p: &dyn CloudProvider,
    fresh: &dyn Fn() -> Box<dyn CloudProvider>,
    cluster: &str,
    id: &str,
) {
    let created = p
        .get_server(cluster, id)
        .await
        .expect("get")
        .expect("exists")
        .created;
    let first = created + Duration::from_secs(60);
    let second = created + Duration::from_secs(120);
    p.mark_joined(cluster, id, Some(first)).await.expect("mark");
    p.mark_joined(cluster, id, Some(second))
        .await
        .expect("mark again");
    p.mark_joined(cluster, id, Some(second))
        .await
        .expect("same mark again");
    let listed = fresh().list_servers(cluster).await.expect("list");
    let s = listed.iter().find(|s| s.id == id).expect("listed");
    let want = secs(nodewright::model::unix_secs(second));
    assert_eq!(s.joined, Some(want), "{s:?}");
    assert!(s.ever_joined(), "{s:?}");
    match p.mark_joined("someone-else", id, Some(second)).await {
        Err(CloudError::Refused { .. }) => {}
        other => panic!("a mark for another cluster: {other:?}"),
    }
    // Taken off (before nodewright deletes the VM's Node itself), twice: no mark left.
    p.mark_joined(cluster, id, None).await.expect("unmark");
    p.mark_joined(cluster, id, None)
        .await
        .expect("unmark again");
    let listed = fresh().list_servers(cluster).await.expect("list");
    let s = listed.iter().find(|s| s.id == id).expect("listed");
    assert_eq!(s.joined, None, "{s:?}");
    assert_ne!(s.status, ServerStatus::Removing, "{s:?}");
    // The removing mark (written before a removal deletes the VM's Node): read back by a
    // fresh process, so a VM whose delete failed is never taken for capacity on its way.
    match p.mark_removing("someone-else", id).await {
        Err(CloudError::Refused { .. }) => {}
        other => panic!("a removing mark for another cluster: {other:?}"),
    }
    let before = secs(nodewright::model::unix_secs(SystemTime::now()));
    p.mark_removing(cluster, id).await.expect("mark removing");
    p.mark_removing(cluster, id)
        .await
        .expect("mark removing again");
    let after = SystemTime::now();
    let listed = fresh().list_servers(cluster).await.expect("list");
    let s = listed.iter().find(|s| s.id == id).expect("listed");
    assert_eq!(s.status, ServerStatus::Removing, "{s:?}");
    // Issue 29 item 6: the mark carries its time, read back by a fresh process.
    assert!(
        s.removing_since.is_some_and(|t| t >= before && t <= after),
        "{s:?}"
    );
    let now = fresh().get_server(cluster, id).await.expect("get");
    assert_eq!(
        now.as_ref().map(|s| (s.status, s.removing_since)),
        Some((ServerStatus::Removing, s.removing_since))
    );
    // Let in again: the removing mark goes, time and all.
    p.mark_joined(cluster, id, Some(after)).await.expect("mark");
    let s = fresh()
        .get_server(cluster, id)
        .await
        .expect("get")
        .expect("there");
    assert_ne!(s.status, ServerStatus::Removing, "{s:?}");
    assert_eq!(s.removing_since, None, "{s:?}");
    p.mark_joined(cluster, id, None).await.expect("unmark");
}

#[tokio::test]
async fn openstack_records_the_joined_mark_in_server_metadata() {
    let sim = SimOpenStack::start(SimOpenStackOptions::default())
        .await
        .expect("simulator starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("openstack.yaml");
    sim.write_credentials_file(&path).expect("credentials");
    let build = || {
        let settings = OpenStackSettings {
            flavor: "m1.medium".into(),
            image: "fedora-coreos".into(),
            network: Some("private".into()),
            key_name: None,
            security_groups: Vec::new(),
            availability_zone: None,
            server_group: None,
        };
        OpenStackProvider::with_options(
            OpenStackCredentials::from_file(&path).expect("credentials load"),
            BTreeMap::from([("workers".to_string(), settings)]),
            OpenStackOptions::default(),
        )
        .expect("provider builds")
    };
    let p = build();
    let made = p
        .create_server(&req("c1-workers-j", "c1"))
        .await
        .expect("create");
    marks_and_reads_back(&p, &|| Box::new(build()), "c1", &made.id).await;
    let vm = &sim.servers()[0];
    // The metadata key was written, then deleted.
    assert!(!vm.metadata.contains_key(JOINED_TAG), "{:?}", vm.metadata);
    assert!(sim
        .calls()
        .iter()
        .any(|c| c.method == "DELETE" && c.path.ends_with(&format!("/metadata/{JOINED_TAG}"))));
}

#[tokio::test]
async fn proxmox_records_the_joined_mark_as_a_tag() {
    let sim = SimProxmox::start(SimProxmoxOptions::default())
        .await
        .expect("simulator starts (needs PVE_API_SCHEMA)");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pve.yaml");
    sim.write_credentials_file(&path).expect("credentials");
    let build = || {
        let settings: ProxmoxSettings =
            nodewright::yaml::from_str("template: k3s-shared\n").expect("settings");
        ProxmoxProvider::with_options(
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
        .expect("provider builds")
    };
    let p = build();
    let made = p
        .create_server(&req("prod-workers-jjjjj", "prod"))
        .await
        .expect("create");
    marks_and_reads_back(&p, &|| Box::new(build()), "prod", &made.id).await;
    // At most one mark at a time, next to the ownership tags, which stay.
    let written: Vec<String> = sim
        .calls()
        .into_iter()
        .filter_map(|c| {
            c.params
                .into_iter()
                .find(|(k, _)| k == "tags")
                .map(|(_, v)| v)
        })
        .collect();
    for tags in &written {
        assert!(
            tags.split(';').filter(|t| t.starts_with("nw-j-")).count() <= 1,
            "{tags}"
        );
        assert!(tags.contains("nw-c-prod"), "{tags}");
    }
    assert!(
        sim.violations().is_empty(),
        "schema violations: {:#?}",
        sim.violations()
    );
}

#[tokio::test]
async fn kamatera_records_the_joined_mark_as_a_tag() {
    let sim = SimKamatera::start(SimKamateraOptions::default())
        .await
        .expect("simulator starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kamatera.yaml");
    sim.write_credentials_file(&path).expect("credentials");
    let build = || {
        // The longest tag prefix Kamatera's tags leave room for.
        let settings: KamateraSettings = nodewright::yaml::from_str(
            "datacenter: EU\nimage: ubuntu_server_24.04_64-bit\ncpu: 2B\nram: 4 GiB\ntagPrefix: abcdefghijk\n",
        )
        .expect("settings");
        KamateraProvider::with_options(
            KamateraCredentials::from_file(&path).expect("credentials load"),
            BTreeMap::from([("workers".to_string(), settings)]),
            KamateraOptions {
                poll_initial: Duration::from_millis(15),
                poll_max: Duration::from_millis(40),
                command_timeout: Duration::from_secs(10),
                ..KamateraOptions::default()
            },
        )
        .expect("provider builds")
    };
    let p = build();
    let made = p
        .create_server(&req("c1-workers-jjjjj", "c1"))
        .await
        .expect("create");
    marks_and_reads_back(&p, &|| Box::new(build()), "c1", &made.id).await;
    let tag = joined_tag("abcdefghijk", secs(1_900_000_000));
    assert_eq!(tag.len(), 23, "{tag}");
    // Every mark was taken off.
    let tags = build().fresh_tags(&made.id).await.expect("tags");
    assert!(
        !tags
            .iter()
            .any(|t| parse_joined_tag("abcdefghijk", t).is_some()),
        "{tags:?}"
    );
}
