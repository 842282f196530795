//! Issue 19 A, B and J, black-box: what people do to node VMs in Proxmox (remove this
//! cluster's tag, clone a node VM) against the real `nodewright run` over loopback HTTP
//! (the simulated Proxmox VE checks every request against the official API schema), and
//! a nameless clone that counts for two groups after a restart.

use nodewright_testkit as common;

use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use nodewright::cloud::{CloudError, CloudProvider};
use nodewright::plan::Action;
use nodewright::sim::env::{SimEnv, SimTimings};
use nodewright::sim::proxmox::{SimProxmox, SimVm};

use common::{nodewright_for, Killed};

const CONFIG: &str = r#"clusterName: prod
freeMemoryTarget: 0 B
provisionTimeout: 20s
scanInterval: 300ms
nodeGroups:
  - name: pve
    provider: proxmox
    minSize: 1
    maxSize: 3
    proxmox: {template: k3s-shared, memory: 4 GiB, cores: 2}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "t"}
"#;

fn spawn_run(env: &SimEnv, cfg: &std::path::Path) -> Killed {
    let log = std::fs::File::create(env.dir.join("run.log")).expect("log");
    let mut cmd = nodewright_for!(env, cfg);
    cmd.args(["run", "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(log);
    Killed(cmd.spawn().expect("start nodewright run"))
}

fn run_log(env: &SimEnv) -> String {
    std::fs::read_to_string(env.dir.join("run.log")).unwrap_or_default()
}

/// The VM of the group's first node once it joined (its node Ready, the startup taint off
/// and the joined mark on the VM), with a pod running on it.
async fn a_joined_node_running_a_pod(env: &SimEnv) -> SimVm {
    let start = Instant::now();
    let vm = loop {
        let joined = env.proxmox.guests().into_iter().find(|v| {
            v.tags().contains("nw-j-")
                && env
                    .cluster
                    .node(&v.name)
                    .as_ref()
                    .is_some_and(common::pve::ready_joined)
        });
        if let Some(vm) = joined {
            break vm;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no joined node: {:?}\n{}",
            env.proxmox.guests(),
            run_log(env)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    env.cluster
        .add_pod(
            "default",
            "web",
            nodewright::sim::cluster::SimPodTemplate::new("nginx:1.25", 256 << 20),
        )
        .expect("pod");
    common::wait_for(
        "the pod to run on the node",
        Duration::from_secs(30),
        || web_runs_on(env, &vm.name),
    )
    .await;
    vm
}

fn web_runs_on(env: &SimEnv, node: &str) -> bool {
    env.cluster
        .pods_on(node)
        .iter()
        .any(|p| p.metadata.name.as_deref() == Some("web") && common::running(p))
}

/// A call a person makes with the same API token, form-encoded as the API takes it.
async fn as_a_person(
    pve: &SimProxmox,
    method: reqwest::Method,
    path: &str,
    form: &[(&str, &str)],
) -> serde_json::Value {
    let o = pve.options();
    let answer = common::proxmox_client(pve)
        .request(method, format!("{}/api2/json{path}", pve.url()))
        .header(
            "Authorization",
            format!("PVEAPIToken={}={}", o.token_id, o.token_secret),
        )
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(common::form_body(form))
        .send()
        .await
        .expect("the simulated Proxmox answers");
    assert!(answer.status().is_success(), "{path}: {}", answer.status());
    answer.json().await.expect("JSON")
}

/// Calls nodewright made that change VM `vmid` (stop, shutdown, destroy).
fn destructive_calls(pve: &SimProxmox, vmid: u32) -> Vec<String> {
    pve.calls()
        .into_iter()
        .filter(|c| {
            let on_it = c.path.contains(&format!("/qemu/{vmid}"))
                && !c.path.contains(&format!("/qemu/{vmid}/clone"));
            on_it
                && (c.method == "DELETE"
                    || c.path.ends_with("/status/stop")
                    || c.path.ends_with("/status/shutdown"))
        })
        .map(|c| format!("{} {}", c.method, c.path))
        .collect()
}

fn plan_text(env: &SimEnv, cfg: &std::path::Path) -> String {
    let out = nodewright_for!(env, cfg)
        .arg("plan")
        .output()
        .expect("plan");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    text
}

/// Regression (issue 19 A): a person removed this cluster's tag from a running node VM;
/// the description written at clone time made it look half-made, and it was destroyed
/// with its Node and its pods, without a drain. It is disowned: left alone with its node
/// and pods, and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_vm_whose_cluster_tag_a_person_removed_keeps_its_node_and_pods() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (cfg, _) = env.write_config(CONFIG).expect("config loads");
    let _run = spawn_run(&env, &cfg);
    let vm = a_joined_node_running_a_pod(&env).await;
    let without: Vec<&str> = vm
        .tags()
        .split(';')
        .filter(|t| !t.starts_with("nw-c-"))
        .collect();
    as_a_person(
        &env.proxmox,
        reqwest::Method::PUT,
        &format!("/nodes/{}/qemu/{}/config", vm.node, vm.vmid),
        &[("tags", &without.join(";"))],
    )
    .await;
    // Many cycles (scanInterval 300 ms), and a replacement for the group's minSize.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let now = env
        .proxmox
        .guests()
        .into_iter()
        .find(|v| v.vmid == vm.vmid)
        .expect("the VM is still there");
    assert_eq!(now.status, "running");
    assert!(!now.tags().contains("nw-c-"), "left as the person made it");
    assert!(
        destructive_calls(&env.proxmox, vm.vmid).is_empty(),
        "{:?}",
        destructive_calls(&env.proxmox, vm.vmid)
    );
    assert!(env.cluster.node(&vm.name).is_some(), "its node stays");
    assert!(web_runs_on(&env, &vm.name), "its pod still runs there");
    let text = plan_text(&env, &cfg);
    assert!(
        text.contains(&format!("VM {} ({})", vm.name, vm.vmid))
            && text.contains("no longer carries this cluster's tag"),
        "{text}"
    );
    assert!(run_log(&env).contains("no longer carries this cluster's tag"));
    let v = env.proxmox.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

/// Regression (issue 19 B): a person cloned a node VM; Proxmox copied its `nw-*` tags and
/// description into the copy, which was taken for a VM of ours and removed. A VM is ours
/// only when its marks were made for its own VM id: the copy is reported, never touched,
/// and the check just before a delete refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_copy_of_a_node_vm_is_reported_and_never_destroyed() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (cfg, _) = env.write_config(CONFIG).expect("config loads");
    let _run = spawn_run(&env, &cfg);
    let vm = a_joined_node_running_a_pod(&env).await;
    let copy = 4242;
    as_a_person(
        &env.proxmox,
        reqwest::Method::POST,
        &format!("/nodes/{}/qemu/{}/clone", vm.node, vm.vmid),
        &[("newid", &copy.to_string()), ("full", "1")],
    )
    .await;
    common::wait_for("the copy to be made", Duration::from_secs(20), || {
        env.proxmox
            .guests()
            .iter()
            .any(|v| v.vmid == copy && v.lock.is_none())
    })
    .await;
    let made = env
        .proxmox
        .guests()
        .into_iter()
        .find(|v| v.vmid == copy)
        .expect("copy");
    assert!(
        made.tags().contains("nw-c-prod") && made.name.starts_with("Copy-of-VM-"),
        "Proxmox copied the marks: {made:?}"
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        env.proxmox.guests().iter().any(|v| v.vmid == copy),
        "the copy is still there"
    );
    assert!(
        destructive_calls(&env.proxmox, copy).is_empty(),
        "{:?}",
        destructive_calls(&env.proxmox, copy)
    );
    assert!(destructive_calls(&env.proxmox, vm.vmid).is_empty());
    assert!(
        web_runs_on(&env, &vm.name),
        "the original node keeps its pod"
    );
    let text = plan_text(&env, &cfg);
    assert!(
        text.contains(&format!("is a copy of VM {}", vm.vmid)),
        "{text}"
    );
    // The check just before a delete applies the same rule.
    let p = common::pve::provider_with(
        common::pve::token_creds(&env.proxmox),
        &[("pve", "template: k3s-shared\n")],
    );
    let read = p
        .get_server("prod", &copy.to_string())
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(read.cluster, None, "not ours: {read:?}");
    match p.delete_server("prod", &copy.to_string()).await {
        Err(CloudError::Refused { reason, .. }) => {
            assert!(reason.contains("copy"), "{reason}")
        }
        other => panic!("the copy's delete is refused: {other:?}"),
    }
    assert!(env.proxmox.guests().iter().any(|v| v.vmid == copy));
    let v = env.proxmox.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

/// Regression (issue 19 J): a clone still copying (no name yet) of a template two groups
/// use is listed once per group, and `observe` kept only one of the two, so after a crash
/// the other group (the one the clone was for) made a second VM. Both groups see it: no
/// second clone, and the clone becomes its group's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nameless_clone_counting_for_two_groups_is_seen_by_both_and_never_duplicated() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    // The cloud-init drive after the disk: the clone shows no name until the disk is copied.
    let template = 9001;
    env.proxmox.unset_config(template, "ide2");
    env.proxmox.set_config(
        template,
        "scsi1",
        &format!("ceph:vm-{template}-cloudinit,media=cdrom"),
    );
    let proxmox = "{template: k3s-shared, memory: 4 GiB, cores: 2, cicustom: \"user=local:snippets/k3s-join.yaml\"}";
    let group = |name: &str, min: u32| {
        format!(
            "  - name: {name}\n    provider: proxmox\n    minSize: {min}\n    maxSize: 2\n    proxmox: {proxmox}\n    userData:\n      template: k3s-agent.cloud-init.yaml.j2\n      variables: {{k3s_url: \"https://192.0.2.1:6443\", k3s_token: \"t\"}}\n"
        )
    };
    // `batch` sorts first, so a listing that keeps one server per id keeps batch's.
    let config = format!(
        "clusterName: prod\nfreeMemoryTarget: 0 B\nprovisionTimeout: 30s\nprovisionTimeoutMax: 60s\nprovisionProgressWindow: 1s\nnodeGroups:\n{}{}",
        group("batch", 0),
        group("pve", 1)
    );
    let first = common::reconciler_for(&env, &config).await;
    env.proxmox
        .slow_next_clones(1, 12, Duration::from_millis(150));
    let clone_running = || {
        env.proxmox
            .task_logs("qmclone")
            .last()
            .is_some_and(|l| l.last().is_some_and(|x| !x.starts_with("TASK ")))
    };
    let act = common::begin_scale_up(&env, first, "pve").await;
    common::wait_for("the clone to start", Duration::from_secs(10), clone_running).await;
    act.abort();
    let _ = act.await;
    assert!(
        env.proxmox.guests()[0].name.is_empty(),
        "nameless while copying"
    );

    let fresh = common::reconciler_for(&env, &config).await;
    let snapshot = fresh.observe().await.expect("observe");
    let id = env.proxmox.guests()[0].vmid.to_string();
    let mut groups: Vec<&str> = snapshot
        .servers
        .iter()
        .filter(|s| s.id == id)
        .filter_map(|s| s.group.as_deref())
        .collect();
    groups.sort();
    assert_eq!(groups, ["batch", "pve"], "{:?}", snapshot.servers);
    let mut joined = false;
    for _ in 0..150 {
        let (snapshot, decision) = fresh.plan(SystemTime::now()).await.expect("plan");
        assert!(
            !matches!(&decision.action, Action::ScaleUp { group, .. } if group == "pve"),
            "pve makes no second VM: {:?}",
            decision.reasons
        );
        let _ = fresh.act(&snapshot, &decision, SystemTime::now()).await;
        let name = env.proxmox.guests()[0].name.clone();
        if !name.is_empty() && env.cluster.node(&name).as_ref().is_some_and(common::ready) {
            joined = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        joined,
        "the clone became a node: {:?}",
        env.proxmox.guests()
    );
    let pve: Vec<SimVm> = env
        .proxmox
        .guests()
        .into_iter()
        .filter(|v| v.name.starts_with("prod-pve-"))
        .collect();
    assert_eq!(pve.len(), 1, "one VM for pve: {:?}", env.proxmox.guests());
    let v = env.proxmox.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}
