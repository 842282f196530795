//! Proxmox VE findings of issue 11, against the schema-checking simulator: error text that
//! older servers put only in the HTTP status line, the VM-id collision retry that depends
//! on it, and a clone left half-made by a process killed before configuring it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nodewright::cloud::proxmox::{
    JoinState, ProviderOptions, ProxmoxCredentials, ProxmoxProvider, ProxmoxSettings,
};
use nodewright::cloud::{CloudProvider, CreateRequest};
use nodewright::model::ServerStatus;
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
        identity: nodewright::cloud::ClusterIdentity::known(nodewright_testkit::pve::TEST_IDENTITY),
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
        size: None,
        settings_hash: String::new(),
        zone: None,
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

/// A cluster and a reconciler for `e2e` with one Proxmox group of `minSize: 0` (so the
/// cycle has nothing to add), as a freshly started process would build them.
mod cycle {
    use std::path::Path;
    use std::sync::Arc;

    use nodewright::act::Clouds;
    use nodewright::cluster::{kubeconfig_from_file, KubeCluster};
    use nodewright::config::Config;
    use nodewright::run::Reconciler;
    use nodewright::sim::cluster::{SimCluster, SimClusterOptions};

    use super::*;

    pub async fn cluster(dir: &Path) -> SimCluster {
        let cluster = SimCluster::start(SimClusterOptions::default())
            .await
            .expect("cluster");
        cluster
            .write_kubeconfig(&dir.join("kubeconfig"))
            .expect("kubeconfig");
        std::fs::create_dir_all(dir.join("templates")).expect("dir");
        std::fs::write(dir.join("templates/join.sh.j2"), "#!/bin/sh\ntrue\n").expect("template");
        cluster
    }

    pub async fn reconciler(dir: &Path, pve: &SimProxmox) -> Reconciler {
        let path = dir.join("autoscaler.yaml");
        std::fs::write(
            &path,
            format!(
                "clusterName: e2e\nfreeMemoryTarget: 0 B\nprovisionTimeout: 15m\ntemplatesDir: {}\nnodeGroups:\n  - name: workers\n    provider: proxmox\n    maxSize: 3\n    proxmox: {{template: k3s-shared, cicustom: \"user=local:snippets/k3s-join.yaml\"}}\n    userData: {{template: join.sh.j2}}\n",
                dir.join("templates").display()
            ),
        )
        .expect("config");
        let config = Config::load(&path).expect("config loads");
        let provider: Arc<dyn CloudProvider> =
            Arc::new(super::provider(pve, &[("workers", SNIPPET_GROUP)]));
        let mut clouds = Clouds::new();
        clouds.add_group("workers", provider);
        let kube = kubeconfig_from_file(&dir.join("kubeconfig"))
            .await
            .expect("kubeconfig");
        Reconciler {
            config: Arc::new(config),
            cluster: Arc::new(KubeCluster::new(
                kube::Client::try_from(kube).expect("client"),
            )),
            clouds,
            memory: Default::default(),
            dry_run: false,
        }
    }
}

/// A group that joins from the user's own `cicustom` snippet: the only `join: cloudInit`
/// kind whose half-made clone a later process can finish (a seed needs the user data of the
/// scale-up of the process gone).
const SNIPPET_GROUP: &str = "template: k3s-shared\ncicustom: user=local:snippets/k3s-join.yaml\n";

/// Issue 11: a process killed between the clone and the config call left a VM without
/// ownership tags that nothing ever removed. The clone call names and describes the VM, so
/// the next process recognises it (name and description must both say so). Regression
/// (clone in flight unseen after a restart): it was then removed as half-made once its
/// copy was done, and the work lost; now the next process finishes it (config call and
/// start) as the one gone would have. VMs merely named like ours are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxmox_clone_without_its_config_step_is_finished_by_the_next_process() {
    let dir = tempfile::tempdir().expect("tmp");
    let cluster = cycle::cluster(dir.path()).await;
    let s = SimProxmox::start(SimProxmoxOptions {
        clone_delay: Duration::from_millis(400),
        ..SimProxmoxOptions::default()
    })
    .await
    .expect("simulator starts (needs PVE_API_SCHEMA)");
    // Untagged VMs named like ours that are not half-made clones of ours.
    let manual = s.insert_vm("pve1", "e2e-workers-manual", "", None);
    let other = s.insert_vm("pve1", "e2e-workers-other", "", None);
    s.set_config(
        other,
        "description",
        "nodewright: cluster=staging group=workers created=1700000000",
    );

    // The first process dies while its clone is under way: no config call is ever sent.
    let dying = provider(&s, &[("workers", SNIPPET_GROUP)]);
    let create = tokio::spawn(async move {
        let mut r = req("e2e-workers-dying", "workers", "");
        r.cluster = "e2e".into();
        r.settings_hash = "c786192ec36e".into();
        dying.create_server(&r).await
    });
    // The template's cloud-init drive (ide2) sorts before its disk (scsi0): Proxmox
    // writes the name and description, still locked, once that drive is made.
    let cloning = loop {
        if let Some(vm) = s
            .guests()
            .into_iter()
            .find(|v| v.name == "e2e-workers-dying")
        {
            break vm;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    create.abort();
    assert_eq!(cloning.lock.as_deref(), Some("clone"), "{cloning:?}");
    assert!(cloning.tags().is_empty(), "{cloning:?}");
    assert!(
        cloning
            .config
            .get("description")
            .is_some_and(|d| d.starts_with("nodewright: cluster=e2e group=workers created=")),
        "the clone call set the description: {cloning:?}"
    );

    // A new process sees it as ours at once: still cloning.
    let next = provider(&s, &[("workers", SNIPPET_GROUP)]);
    let id = cloning.vmid.to_string();
    let listed = next.list_servers("e2e").await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].group.as_deref(), Some("workers"));
    assert_eq!(
        listed[0].status,
        ServerStatus::Building,
        "clone still running"
    );
    while s
        .guests()
        .iter()
        .any(|v| v.vmid == cloning.vmid && v.lock.is_some())
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Done copying, nobody configuring it: this process finishes it, building meanwhile.
    let listed = next.list_servers("e2e").await.expect("list");
    assert_eq!(listed[0].status, ServerStatus::Building, "{listed:?}");
    next.wait_for_joins().await;
    let vm = s
        .guests()
        .into_iter()
        .find(|v| v.vmid == cloning.vmid)
        .expect("kept");
    assert!(vm.tags().contains("nw-c-e2e"), "{vm:?}");
    assert!(vm.tags().contains("nw-g-workers"), "{vm:?}");
    // The settings hash the dying process cloned for, read back from the description:
    // drift is judged for a finished clone as for any other.
    assert!(vm.tags().contains("nw-h-c786192ec36e"), "{vm:?}");
    assert_eq!(vm.status, "running");
    let read = next
        .get_server("e2e", &id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(read.cluster.as_deref(), Some("e2e"));
    assert_eq!(read.status, ServerStatus::Active);

    // The next cycle removes nothing.
    let rec = cycle::reconciler(dir.path(), &s).await;
    let report = rec
        .cycle(std::time::SystemTime::now())
        .await
        .expect("cycle");
    assert!(
        !matches!(
            &report.decision.action,
            nodewright::plan::Action::DeleteServers { .. }
        ),
        "{:?}",
        report.decision
    );
    let left: BTreeSet<u32> = s.guests().iter().map(|v| v.vmid).collect();
    assert_eq!(left, BTreeSet::from([manual, other, cloning.vmid]));
    // Neither of the others can be deleted by this cluster.
    for vmid in [manual, other] {
        let e = next
            .delete_server("e2e", &vmid.to_string())
            .await
            .expect_err("not ours");
        assert!(e.to_string().contains("not tagged"), "{e}");
    }
    assert_clean(&s);
    cluster.shutdown();
}

/// A half-made VM of a group that joins through the guest agent cannot be finished (the
/// join script belongs to a scale-up of the process gone): it is still removed as
/// half-made by the next cycle.
#[tokio::test]
async fn proxmox_half_made_vm_of_a_guest_agent_group_is_still_left_half_made() {
    left_half_made("agents", "template: agent-shared\njoin: guestAgent\n").await;
}

/// The same for a `join: cloudInit` group whose user data goes by seed: the seed would
/// need the rendered user data of the scale-up of the process gone.
#[tokio::test]
async fn proxmox_half_made_vm_of_a_seed_group_is_left_half_made() {
    left_half_made("workers", "template: k3s-shared\n").await;
}

async fn left_half_made(group: &'static str, settings: &'static str) {
    let s = sim(false).await;
    let agents = [(group, settings)];
    let dying = provider(&s, &agents);
    let create = tokio::spawn(async move {
        let mut r = req(&format!("e2e-{group}-dying"), group, "#!/bin/sh\ntrue\n");
        r.cluster = "e2e".into();
        dying.create_server(&r).await
    });
    let vmid = loop {
        if let Some(vm) = s.guests().first() {
            break vm.vmid;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    create.abort();
    while s.guests().iter().any(|v| v.lock.is_some()) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = provider(&s, &agents);
    let listed = next.list_servers("e2e").await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].group.as_deref(), Some(group));
    assert_eq!(listed[0].status, ServerStatus::Incomplete, "{listed:?}");
    next.wait_for_joins().await;
    assert!(s.guests()[0].tags().is_empty(), "not finished");
    next.delete_server("e2e", &vmid.to_string())
        .await
        .expect("removed as half-made");
    assert!(s.guests().is_empty());
    assert_clean(&s);
}

/// A call a person makes with the API token, form-encoded as Proxmox takes it.
async fn as_a_person(s: &SimProxmox, method: reqwest::Method, path: &str, form: &[(&str, &str)]) {
    let o = s.options();
    let answer = nodewright_testkit::proxmox_client(s)
        .request(method, format!("{}/api2/json{path}", s.url()))
        .header(
            "Authorization",
            format!("PVEAPIToken={}={}", o.token_id, o.token_secret),
        )
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(nodewright_testkit::form_body(form))
        .send()
        .await
        .expect("the simulated Proxmox answers");
    assert!(answer.status().is_success(), "{path}: {}", answer.status());
}

/// Issue 29, item 4: a stopped VM whose tags a person cleared (no Node) looked half-made
/// and was destroyed one cycle later, or, in a `cicustom` group, tagged again and
/// started. Half-made is what the config call never reached (the description it rewrites
/// still says `stage=cloned`); such a VM was configured, may hold data, and is reported
/// as disowned: never destroyed, never started.
#[tokio::test]
async fn item_4_a_stopped_vm_whose_tags_a_person_cleared_is_neither_destroyed_nor_started() {
    for (group, settings) in [
        ("workers", "template: k3s-shared\n"),
        ("snippets", SNIPPET_GROUP),
    ] {
        let s = sim(false).await;
        let groups = [(group, settings)];
        let first = provider(&s, &groups);
        let mut r = req(&format!("e2e-{group}-kept"), group, "#!/bin/sh\ntrue\n");
        r.cluster = "e2e".into();
        let made = first.create_server(&r).await.expect("created");
        first.wait_for_joins().await;
        let vm = s
            .guests()
            .into_iter()
            .find(|v| v.vmid.to_string() == made.id)
            .expect("made");
        assert_eq!(vm.status, "running", "{vm:?}");
        // A person stops it (maintenance) and clears its tags.
        let path = format!("/nodes/{}/qemu/{}", vm.node, vm.vmid);
        as_a_person(
            &s,
            reqwest::Method::POST,
            &format!("{path}/status/stop"),
            &[],
        )
        .await;
        as_a_person(
            &s,
            reqwest::Method::PUT,
            &format!("{path}/config"),
            &[("delete", "tags")],
        )
        .await;
        // The stop is a task: wait for it to end.
        let mut waited = 0;
        let stopped = loop {
            let v = s
                .guests()
                .into_iter()
                .find(|v| v.vmid == vm.vmid)
                .expect("there");
            if v.status == "stopped" {
                break v;
            }
            waited += 1;
            assert!(waited < 200, "never stopped: {v:?}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        assert!(stopped.tags().is_empty(), "{stopped:?}");
        let calls_before = s.calls().len();

        // A new process: the VM is no server of the cluster, it is reported.
        let next = provider(&s, &groups);
        let observed = next
            .observe("e2e", &[group.to_string()])
            .await
            .expect("observe");
        assert!(
            observed.servers.iter().all(|v| v.id != made.id),
            "{group}: taken for a VM of ours: {:?} {stopped:?}",
            observed.servers
        );
        assert!(
            observed.strays.iter().any(|st| st.id == made.id),
            "{group}: not reported: {:?}",
            observed.strays
        );
        next.wait_for_joins().await;
        let e = next
            .delete_server("e2e", &made.id)
            .await
            .expect_err("not deletable as ours");
        assert!(e.to_string().contains("not tagged"), "{group}: {e}");
        let after = s
            .guests()
            .into_iter()
            .find(|v| v.vmid == vm.vmid)
            .expect("kept");
        assert_eq!(after.status, "stopped", "{group}: started: {after:?}");
        assert!(after.tags().is_empty(), "{group}: tagged again: {after:?}");
        let touched: Vec<String> = s.calls()[calls_before..]
            .iter()
            .filter(|c| c.method != "GET" && c.path.contains(&format!("/qemu/{}", vm.vmid)))
            .map(|c| format!("{} {}", c.method, c.path))
            .collect();
        assert!(touched.is_empty(), "{group}: {touched:?}");
        assert_clean(&s);
    }
}
