//! Issue 18: with `join: cloudInit` (the default) nothing reached the VM unless the user
//! put a `cicustom` snippet on every host by hand. Now the group's rendered user data goes
//! as a NoCloud seed ISO through the API alone, and is gone once the node joined.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use nodewright::cloud::proxmox::seed::{self, SeedFiles};
use nodewright::model::Server;
use nodewright::sim::proxmox::{iso, SimStorage, SimVm, SNIPPET};
use nodewright::userdata::{self, RenderContext, UserDataConfig};

use super::*;

fn tool(program: &str, args: &[&str], package: &str) -> (bool, Vec<u8>, String) {
    match Command::new(program).args(args).output() {
        Ok(o) => (
            o.status.success(),
            o.stdout,
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{program}` is not installed: apt-get install {package} (.ci/run installs it); this test never skips"
        ),
        Err(e) => panic!("cannot run `{program}`: {e}"),
    }
}

/// The shipped cloud-config template rendered for one node, join token inside.
fn rendered_cloud_config() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates");
    let config = UserDataConfig {
        template: "k3s-agent.cloud-init.yaml.j2".into(),
        format: None,
        variables: serde_json::from_value(serde_json::json!({
            "k3s_url": "https://10.20.0.5:6443",
            "k3s_token": "K10seed::server:s3cr3t",
        }))
        .expect("vars"),
        variable_files: Default::default(),
        bootstrap_token: false,
    };
    let ctx = RenderContext::new(
        "prod",
        "workers",
        "prod-workers-a1b2c",
        &BTreeMap::new(),
        vec![],
    );
    userdata::render(&dir, &config, &ctx)
        .expect("renders")
        .content
}

/// The seed is an image Debian's own tools read as cloud-init needs it: label `cidata`,
/// lower-case `user-data`, `meta-data` and `network-config` (Joliet and Rock Ridge), the
/// user data byte for byte, and valid cloud-config.
#[test]
fn the_seed_iso_is_read_by_xorriso_isoinfo_and_cloud_init_as_written() {
    let user_data = rendered_cloud_config();
    let config: BTreeMap<String, String> = [
        ("ipconfig0", "ip=10.20.0.10/24,gw=10.20.0.1"),
        ("nameserver", "10.20.0.2"),
        ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let files = seed::seed_files(
        "prod-workers-a1b2c",
        101,
        &user_data,
        &["ssh-ed25519 AAAAC3Nza me@laptop".to_string()],
        &config,
    );
    let bytes = seed::build_iso(&files).expect("iso");
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir
        .path()
        .join(seed::file_name("prod", e2e::TEST_IDENTITY, 101));
    std::fs::write(&path, &bytes).expect("write");
    let f = path.to_string_lossy().into_owned();

    let (ok, out, err) = tool("isoinfo", &["-d", "-i", &f], "genisoimage");
    let out = String::from_utf8_lossy(&out);
    assert!(ok, "{err}");
    assert!(out.contains("Volume id: cidata"), "{out}");
    assert!(out.contains("Joliet"), "{out}");
    assert!(out.contains("Rock Ridge"), "{out}");
    for (name, want) in [
        ("user-data", Some(&files.user_data)),
        ("meta-data", Some(&files.meta_data)),
        ("network-config", files.network_config.as_ref()),
    ] {
        let want = want.expect("static pool: network-config present");
        for ext in ["-J", "-R"] {
            let (ok, got, err) = tool(
                "isoinfo",
                &[ext, "-i", &f, "-x", &format!("/{name}")],
                "genisoimage",
            );
            assert!(ok, "{err}");
            assert_eq!(
                String::from_utf8_lossy(&got),
                *want,
                "isoinfo {ext} /{name}"
            );
        }
    }
    let (ok, out, err) = tool("xorriso", &["-indev", &f, "-ls", "/"], "xorriso");
    let listing = String::from_utf8_lossy(&out);
    assert!(ok, "{err}");
    for name in ["'user-data'", "'meta-data'", "'network-config'"] {
        assert!(listing.contains(name), "{listing}");
    }
    assert!(err.contains("Volume id    : 'cidata'"), "{err}");
    let extracted = dir.path().join("user-data");
    let target = extracted.to_string_lossy().into_owned();
    let (ok, _, err) = tool(
        "xorriso",
        &[
            "-osirrox",
            "on",
            "-indev",
            &f,
            "-extract",
            "/user-data",
            &target,
        ],
        "xorriso",
    );
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read_to_string(&extracted).expect("extracted"),
        user_data
    );
    let (ok, out, err) = tool(
        "cloud-init",
        &["schema", "--config-file", &target],
        "cloud-init",
    );
    let out = String::from_utf8_lossy(&out);
    assert!(ok && out.contains("Valid cloud-config"), "{out}{err}");
    // The simulator's guest reads the same.
    let img = iso::read(&bytes).expect("readable");
    assert_eq!(img.label, "cidata");
    assert_eq!(img.files.get("user-data"), Some(&user_data.into_bytes()));
}

/// Through the loop, with no snippet anywhere: the node joins with the group's rendered
/// user data, which only the seed carried, and once it joined the seed is ejected and
/// deleted from the storage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_init_group_with_no_snippet_joins_through_its_seed_and_the_seed_is_gone_after() {
    let env = e2e::env().await;
    let rec = e2e::reconciler(&env, &e2e::group("ci", 1, "{template: k3s-shared}")).await;
    e2e::drive(&rec, Duration::from_secs(30), || {
        env.cluster.nodes().iter().any(|n| {
            e2e::ready_joined(n)
                && n.metadata
                    .name
                    .as_deref()
                    .is_some_and(|m| m.starts_with("e2e-ci-"))
        })
    })
    .await;
    let vm = env.pve.guests().into_iter().next().expect("one VM");
    // What joined is the rendered template, as the seed carried it.
    let joined_with = vm.installed.clone().expect("joined through cloud-init");
    assert!(
        joined_with.starts_with("#!/bin/sh\nexec k3s agent --server https://192.0.2.1:6443")
            && joined_with.contains(&format!("--node-name={}", vm.name)),
        "{joined_with}"
    );
    let calls = env.pve.calls();
    let upload = calls
        .iter()
        .find(|c| c.endpoint.as_deref() == Some("/nodes/{node}/storage/{storage}/upload"))
        .expect("the seed was uploaded");
    // Named with the cluster's identity: its kube-system namespace's UID.
    let uid = e2e::identity_of(&env.cluster).await;
    assert_eq!(
        upload.params,
        vec![
            ("content".to_string(), "iso".to_string()),
            (
                "filename".to_string(),
                format!("nw-e2e-{uid}-{}-seed.iso", vm.vmid)
            ),
        ]
    );
    // Gone after the join: ejected from the VM, deleted from the storage.
    assert_eq!(
        vm.config.get("ide3").map(String::as_str),
        Some("none,media=cdrom"),
        "{:?}",
        vm.config
    );
    assert!(
        env.pve.all_volumes().is_empty(),
        "{:?}",
        env.pve.all_volumes()
    );
    assert!(calls.iter().any(|c| c.method == "DELETE"
        && c.endpoint.as_deref() == Some("/nodes/{node}/storage/{storage}/content/{volume}")));
    assert_clean(&env.pve);
}

/// The simulator's guest joins only with what reached it: the same VM with its seed taken
/// off before it boots never joins, and says why.
#[tokio::test]
async fn a_cloud_init_vm_whose_seed_never_arrived_does_not_join() {
    let (events, hook) = common::recorder();
    let s = sim_with(SimProxmoxOptions {
        hook: Some(hook),
        boot_delay: Duration::from_secs(2),
        ..SimProxmoxOptions::default()
    })
    .await;
    let p = provider(&s, &[("workers", "template: k3s-shared\n")]);
    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", WORKERS_USER_DATA))
        .await
        .expect("create");
    let vmid: u32 = a.id.parse().expect("vmid");
    s.unset_config(vmid, "ide3");
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let vm = s.guests().into_iter().find(|v| v.vmid == vmid).expect("vm");
    assert!(vm.booted, "{vm:?}");
    assert!(!vm.joined, "{vm:?}");
    assert_eq!(
        vm.cloud_init_note.as_deref(),
        Some("no cidata seed attached: cloud-init found no user data")
    );
    assert!(!events
        .lock()
        .expect("events")
        .iter()
        .any(|e| matches!(e, VmEvent::Booted { .. })));
}

/// A host with no storage for ISO images: the scale-up fails saying how to fix it, and no
/// VM is left running without its user data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_iso_storage_the_scale_up_fails_naming_the_fix_and_nothing_joins() {
    let env = e2e::env_with(SimProxmoxOptions {
        storages: vec![
            SimStorage::new("local-lvm", false, "images,rootdir"),
            SimStorage::new("ceph", true, "images,rootdir"),
        ],
        ..SimProxmoxOptions::default()
    })
    .await;
    let rec = e2e::reconciler(&env, &e2e::group("ci", 1, "{template: k3s-shared}")).await;
    let mut errors = Vec::new();
    for _ in 0..15 {
        if let Err(e) = rec.cycle(SystemTime::now()).await {
            errors.push(e.to_string());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        errors
            .iter()
            .any(|e| e.contains("no ISO storage visible on host")
                && e.contains("proxmox.seedStorage")
                && e.contains("cicustom")),
        "{errors:?}"
    );
    assert!(env
        .pve
        .guests()
        .iter()
        .all(|v| !v.joined && v.status != "running"));
    assert!(!env.cluster.nodes().iter().any(|n| n
        .metadata
        .name
        .as_deref()
        .is_some_and(|m| m.starts_with("e2e-ci-"))));
    assert_clean(&env.pve);
}

/// `cicustom` (a snippet the user keeps): no seed is built, Proxmox's cloud-init drive
/// stays, and the VM joins from the snippet.
#[tokio::test]
async fn a_cicustom_group_builds_no_seed_and_joins_from_its_snippet() {
    let (events, hook) = common::recorder();
    let s = sim_with(SimProxmoxOptions {
        hook: Some(hook),
        ..SimProxmoxOptions::default()
    })
    .await;
    let settings = format!("template: k3s-shared\ncicustom: user={SNIPPET}\n");
    let p = provider(&s, &[("workers", &settings)]);
    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", WORKERS_USER_DATA))
        .await
        .expect("create");
    common::wait_for("the snippet join", Duration::from_secs(5), || {
        events
            .lock()
            .expect("events")
            .iter()
            .any(|e| matches!(e, VmEvent::Booted { name, .. } if *name == a.name))
    })
    .await;
    let vm = s.guests().into_iter().next().expect("vm");
    assert_eq!(vm.config.get("cicustom"), Some(&format!("user={SNIPPET}")));
    assert!(vm
        .config
        .get("ide2")
        .is_some_and(|d| d.contains("cloudinit")));
    assert!(s.all_volumes().is_empty());
    assert!(!s
        .calls()
        .iter()
        .any(|c| c.endpoint.as_deref() == Some("/nodes/{node}/storage/{storage}/upload")));
    assert_clean(&s);
}

/// A simulator with one VM of group `workers` made through the provider, its seed
/// attached: (simulator, provider, server, VM).
async fn one_seeded_vm() -> (SimProxmox, ProxmoxProvider, Server, SimVm) {
    let s = sim_with(SimProxmoxOptions::default()).await;
    let p = provider(&s, &[("workers", "template: k3s-shared\n")]);
    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", WORKERS_USER_DATA))
        .await
        .expect("create");
    let vm = s.guests().into_iter().next().expect("vm");
    (s, p, a, vm)
}

/// One sweep, as a freshly started process's first listing makes it.
async fn sweep_once(s: &SimProxmox) {
    provider(s, &[("workers", "template: k3s-shared\n")])
        .observe("prod", &["workers".to_string()])
        .await
        .expect("observe");
}

/// Seeds left behind (their VM destroyed by hand, or ejected but not deleted) are swept;
/// a fresh one, an attached one and another cluster's are kept.
#[tokio::test]
async fn seeds_left_behind_are_swept_and_the_rest_kept() {
    let (s, p, a, vm) = one_seeded_vm().await;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let old = now - 3600;
    let iso = seed::build_iso(&SeedFiles {
        user_data: "#!/bin/sh\n".into(),
        meta_data: "instance-id: x\n".into(),
        network_config: None,
    })
    .expect("iso");
    // Its VM gone (id 4242), old: swept. Fresh: kept. Another cluster's: kept.
    s.put_volume(
        "pve1",
        "local",
        &seed::file_name("prod", e2e::TEST_IDENTITY, 4242),
        iso.clone(),
        old,
    );
    s.put_volume(
        "pve2",
        "local",
        &seed::file_name("prod", e2e::TEST_IDENTITY, 4243),
        iso.clone(),
        now,
    );
    s.put_volume(
        "pve1",
        "local",
        &seed::file_name("staging", e2e::TEST_IDENTITY, 4244),
        iso.clone(),
        old,
    );
    // Attached to a live VM, old: kept.
    let attached = format!(
        "local:iso/{}",
        seed::file_name("prod", e2e::TEST_IDENTITY, vm.vmid)
    );
    let before = s.volumes(&vm.node, "local");
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].0, attached);
    s.put_volume(
        &vm.node,
        "local",
        &seed::file_name("prod", e2e::TEST_IDENTITY, vm.vmid),
        before[0].1.clone(),
        old,
    );

    p.observe("prod", &["workers".to_string()])
        .await
        .expect("observe");
    let left: Vec<(String, String)> = s.all_volumes();
    let names: Vec<&str> = left.iter().map(|(_, v)| v.as_str()).collect();
    assert!(!names.iter().any(|v| v.contains("-4242-")), "{names:?}");
    assert!(names.iter().any(|v| v.contains("-4243-")), "{names:?}");
    assert!(
        names
            .iter()
            .any(|v| v.contains("nw-staging-") && v.contains("-4244-")),
        "{names:?}"
    );
    assert!(names.contains(&attached.as_str()), "{names:?}");

    // Ejected by a process that died before deleting it: swept at the next sweep.
    s.set_config(vm.vmid, "ide3", "none,media=cdrom");
    let fresh = provider(&s, &[("workers", "template: k3s-shared\n")]);
    fresh
        .observe("prod", &["workers".to_string()])
        .await
        .expect("observe");
    assert!(
        !s.all_volumes().iter().any(|(_, v)| *v == attached),
        "{:?}",
        s.all_volumes()
    );
    p.delete_server("prod", &a.id).await.expect("delete");
    assert_clean(&s);
}

/// Issue 29, item 7, the upgrade: seeds the previous release named without the cluster's
/// identity (`nw-<cluster>-<vmid>-seed.iso`) are still swept where no other cluster can
/// have written that name (a storage Proxmox reports as not shared, seen by this Proxmox
/// cluster alone, whose VM ids are unique), and left, and reported, on a shared one.
#[tokio::test]
async fn item_7_seeds_named_by_the_previous_release_are_swept_only_from_a_storage_not_shared() {
    let mut storages = SimProxmoxOptions::default().storages;
    storages.push(SimStorage::new("nfs", true, "iso"));
    let s = sim_with(SimProxmoxOptions {
        storages,
        ..SimProxmoxOptions::default()
    })
    .await;
    let old = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        - 3600;
    let iso = seed::build_iso(&SeedFiles {
        user_data: "#!/bin/sh\n".into(),
        meta_data: "instance-id: x\n".into(),
        network_config: None,
    })
    .expect("iso");
    s.put_volume("pve1", "local", "nw-prod-4242-seed.iso", iso.clone(), old);
    s.put_volume("pve1", "nfs", "nw-prod-4243-seed.iso", iso.clone(), old);
    let observed = provider(&s, &[("workers", "template: k3s-shared\n")])
        .observe("prod", &["workers".to_string()])
        .await
        .expect("observe");
    let names: Vec<String> = s.all_volumes().into_iter().map(|(_, v)| v).collect();
    assert!(
        !names.contains(&"local:iso/nw-prod-4242-seed.iso".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"nfs:iso/nw-prod-4243-seed.iso".to_string()),
        "{names:?}"
    );
    assert!(
        observed
            .failures
            .iter()
            .any(|f| f.contains("nfs:iso/nw-prod-4243-seed.iso") && f.contains("left")),
        "{:?}",
        observed.failures
    );
    assert_clean(&s);
}

/// The removal at the join failed (the token lacked the delete privilege for a while, or
/// the call was lost): the seed, join token inside, stayed attached until the VM was
/// deleted. The sweep now removes a seed whose VM's node joined after the seed was made,
/// and keeps one newer than the mark (a warm VM started again with a fresh seed).
#[tokio::test]
async fn a_seed_whose_removal_at_the_join_failed_is_swept_once_its_node_joined() {
    let (s, p, a, vm) = one_seeded_vm().await;
    let now = SystemTime::now();
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
    };
    let attached = format!(
        "local:iso/{}",
        seed::file_name("prod", e2e::TEST_IDENTITY, vm.vmid)
    );
    let bytes = s.volumes(&vm.node, "local")[0].1.clone();
    // Uploaded an hour ago; its node joined ten minutes ago (a warm VM's old mark would
    // be older than its seed): the mark is older than the seed, so the seed stays.
    s.put_volume(
        &vm.node,
        "local",
        &seed::file_name("prod", e2e::TEST_IDENTITY, vm.vmid),
        bytes.clone(),
        secs(now) - 3600,
    );
    p.mark_joined("prod", &a.id, Some(now - Duration::from_secs(7200)))
        .await
        .expect("mark");
    sweep_once(&s).await;
    assert!(
        s.all_volumes().iter().any(|(_, v)| *v == attached),
        "a seed newer than the joined mark is kept: {:?}",
        s.all_volumes()
    );
    // Joined after the upload: the next sweep ejects and deletes it.
    p.mark_joined("prod", &a.id, Some(now - Duration::from_secs(600)))
        .await
        .expect("mark");
    sweep_once(&s).await;
    assert!(
        !s.all_volumes().iter().any(|(_, v)| *v == attached),
        "the joined node's seed is gone: {:?}",
        s.all_volumes()
    );
    let config = s
        .guests()
        .into_iter()
        .find(|g| g.vmid == vm.vmid)
        .expect("vm")
        .config;
    assert!(
        !config
            .values()
            .any(|v| v.contains(&seed::file_name("prod", e2e::TEST_IDENTITY, vm.vmid))),
        "and no longer attached: {config:?}"
    );
    p.delete_server("prod", &a.id).await.expect("delete");
    assert_clean(&s);
}

/// `check` says how each group's user data reaches its VMs instead of showing the template
/// as if it were used: a seed on which storage, or the user's snippets.
#[tokio::test]
async fn check_says_how_the_user_data_is_delivered() {
    let s = sim_with(SimProxmoxOptions::default()).await;
    let snippet = format!("template: k3s-shared\ncicustom: user={SNIPPET}\n");
    let p = provider(
        &s,
        &[("seeded", "template: k3s-shared\n"), ("snippet", &snippet)],
    );
    let lines = p.check().await.expect("check");
    assert!(
        lines.contains(&"group seeded: user data: rendered template as a NoCloud seed ISO (cidata) uploaded to storage local (hosts pve1, pve2, pve3), attached as a CD-ROM until the node joins; readable meanwhile by anyone with Datastore.Audit there".to_string()),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(
            |l| l.starts_with("group snippet: user data: NOT the rendered template")
                && l.contains(SNIPPET)
        ),
        "{lines:#?}"
    );
    // A seedStorage that takes no ISO images is named with the fix.
    let p = provider(
        &s,
        &[("seeded", "template: k3s-shared\nseedStorage: ceph\n")],
    );
    let e = p.check().await.expect_err("ceph takes no ISO images");
    assert!(
        e.to_string()
            .contains("storage 'ceph' on host pve1 is not active, does not accept ISO images")
            && e.to_string().contains("these do: local"),
        "{e}"
    );
    assert_clean(&s);
}
