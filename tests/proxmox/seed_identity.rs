//! Issue 29, item 7: seed ISOs were told apart by name only. Two clusters with the same
//! `clusterName` (both copied the shipped example) writing seeds to one ISO store (an NFS
//! share two Proxmox clusters mount, their VM ids overlapping) overwrote each other's
//! seeds, so a VM booted with the other cluster's join token, and swept each other's; and
//! a person's copy of a VM still joining kept the seed CD-ROM and booted as the original
//! node. Seeds now carry the cluster's own identity (its kube-system namespace's UID).

use std::sync::Arc;

use nodewright::cloud::proxmox::ProviderOptions;
use nodewright::run::Reconciler;
use nodewright::sim::cluster::SimCluster;
use nodewright::sim::proxmox::{iso, SharedFiles, SimStorage, SimVm};
use nodewright::sim::VmHook;

use super::*;

const URL_A: &str = "https://192.0.2.1:6443";
const URL_B: &str = "https://198.51.100.1:6443";

/// One cloud-init group `pve` of `min` nodes joining the cluster at `url`, its seeds on
/// the shared storage `nfs`.
fn group(min: u32, url: &str) -> String {
    format!(
        "  - name: pve\n    provider: proxmox\n    minSize: {min}\n    maxSize: 3\n    proxmox: {{template: k3s-shared, seedStorage: nfs}}\n    userData:\n      template: join.sh.j2\n      variables: {{k3s_url: \"{url}\"}}\n"
    )
}

/// A booted VM joins the cluster its user data names, as a real kubelet would: what
/// decides is the server it was told to join, not the Proxmox cluster it runs on.
fn joins_by_user_data(a: &SimCluster, b: &SimCluster) -> VmHook {
    let (to_a, to_b) = (a.vm_hook(), b.vm_hook());
    Arc::new(move |e: VmEvent| match &e {
        VmEvent::Booted { user_data, .. } if user_data.contains(URL_B) => to_b(e),
        VmEvent::Booted { .. } => to_a(e),
        _ => {
            to_a(e.clone());
            to_b(e)
        }
    })
}

/// Two clusters, both named `e2e`, each with its own simulated Proxmox VE cluster (VM ids
/// from 100 in both), whose shared storage `nfs` (ISO images) is one NFS share.
async fn two_clusters_sharing_an_iso_store() -> (e2e::Env, e2e::Env, SharedFiles) {
    let (a, b) = (e2e::sim_cluster().await, e2e::sim_cluster().await);
    let share = SharedFiles::default();
    let pve = |hook: VmHook| {
        let mut storages = SimProxmoxOptions::default().storages;
        storages.push(SimStorage::new("nfs", true, "iso"));
        SimProxmoxOptions {
            storages,
            shared_files: Some(share.clone()),
            // Booting takes a while: a seed overwritten meanwhile is what the guest reads.
            boot_delay: Duration::from_secs(2),
            hook: Some(hook),
            ..SimProxmoxOptions::default()
        }
    };
    let hook = joins_by_user_data(&a, &b);
    let env_a = e2e::env_for(a, pve(hook.clone())).await;
    let env_b = e2e::env_for(b, pve(hook)).await;
    (env_a, env_b, share)
}

/// The seed volume attached to `vm`, if any.
fn seed_of(vm: &SimVm) -> Option<String> {
    vm.config
        .values()
        .filter_map(|v| v.split(',').next())
        .find(|v| v.contains(":iso/nw-"))
        .map(str::to_string)
}

/// The user data in the seed `volume` on the share.
fn user_data_in(share: &SharedFiles, volume: &str) -> String {
    let (_, bytes) = share
        .files()
        .into_iter()
        .find(|(v, _)| v == volume)
        .unwrap_or_else(|| panic!("{volume} is on the share: {:?}", names(share)));
    let img = iso::read(&bytes).expect("an ISO image");
    String::from_utf8_lossy(img.files.get("user-data").expect("user-data")).into_owned()
}

fn names(share: &SharedFiles) -> Vec<String> {
    share.files().into_iter().map(|(v, _)| v).collect()
}

/// Cycles of `rec` until `pve` holds `n` VMs with a seed attached.
async fn seeded_vms(rec: &Reconciler, pve: &SimProxmox, n: usize) -> Vec<SimVm> {
    e2e::drive(rec, Duration::from_secs(30), || {
        pve.guests().iter().filter(|v| seed_of(v).is_some()).count() >= n
    })
    .await;
    pve.guests()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_7_two_clusters_of_one_name_sharing_an_iso_store_each_boot_with_their_own_user_data() {
    let (a, b, share) = two_clusters_sharing_an_iso_store().await;
    let rec_a = e2e::reconciler(&a, &group(1, URL_A)).await;
    let rec_b = e2e::reconciler(&b, &group(1, URL_B)).await;
    // Cluster A makes its VM, then cluster B makes its own, with the same VM id, while
    // A's guest is still booting.
    let vm_a = seeded_vms(&rec_a, &a.pve, 1).await.remove(0);
    let vm_b = seeded_vms(&rec_b, &b.pve, 1).await.remove(0);
    assert_eq!(
        vm_a.vmid, vm_b.vmid,
        "the two Proxmox clusters' VM ids overlap"
    );
    let (seed_a, seed_b) = (seed_of(&vm_a).expect("A's"), seed_of(&vm_b).expect("B's"));
    // Neither overwrote the other's: what each VM will boot from is its own cluster's.
    let (data_a, data_b) = (user_data_in(&share, &seed_a), user_data_in(&share, &seed_b));
    assert!(
        data_a.contains(URL_A) && !data_a.contains(URL_B),
        "{data_a}"
    );
    assert!(
        data_b.contains(URL_B) && !data_b.contains(URL_A),
        "{data_b}"
    );
    // Each seed is named with its cluster's identity, the kube-system namespace's UID.
    let (id_a, id_b) = (
        e2e::identity_of(&a.cluster).await,
        e2e::identity_of(&b.cluster).await,
    );
    assert_ne!(id_a, id_b);
    assert_eq!(
        seed_a,
        format!("nfs:iso/nw-e2e-{id_a}-{}-seed.iso", vm_a.vmid)
    );
    assert_eq!(
        seed_b,
        format!("nfs:iso/nw-e2e-{id_b}-{}-seed.iso", vm_b.vmid)
    );
    // Both loops go on: each node joins its own cluster, and each removes its own seed.
    let joined = |env: &e2e::Env, vm: &SimVm| {
        env.cluster
            .node(&vm.name)
            .as_ref()
            .is_some_and(e2e::ready_joined)
    };
    let start = std::time::Instant::now();
    while !(joined(&a, &vm_a) && joined(&b, &vm_b) && share.files().is_empty()) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "A's guest {:?}\nB's guest {:?}\nshare {:?}",
            a.pve.guests(),
            b.pve.guests(),
            names(&share)
        );
        let _ = rec_a.cycle(SystemTime::now()).await;
        let _ = rec_b.cycle(SystemTime::now()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let guest = |env: &e2e::Env, vmid: u32| {
        env.pve
            .guests()
            .into_iter()
            .find(|g| g.vmid == vmid)
            .expect("the VM")
    };
    let installed_a = guest(&a, vm_a.vmid).installed.expect("A's guest joined");
    let installed_b = guest(&b, vm_b.vmid).installed.expect("B's guest joined");
    assert!(installed_a.contains(URL_A), "{installed_a}");
    assert!(installed_b.contains(URL_B), "{installed_b}");
    assert!(a.cluster.node(&vm_b.name).is_none() && b.cluster.node(&vm_a.name).is_none());
    assert_clean(&a.pve);
    assert_clean(&b.pve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_7_a_cluster_never_sweeps_the_seeds_of_another_cluster_of_the_same_name() {
    let (a, b, share) = two_clusters_sharing_an_iso_store().await;
    // B's two VMs are still joining (their guests never finish booting): their seeds are
    // all they have to join with.
    b.pve.never_ready("e2e-");
    let rec_b = e2e::reconciler(&b, &group(2, URL_B)).await;
    let vms_b = seeded_vms(&rec_b, &b.pve, 2).await;
    // A sweeps at every cycle, any seed at once: nothing of B's is old enough to be spared.
    let sweeping = ProviderOptions {
        seed_sweep_every: Duration::ZERO,
        seed_grace: Duration::ZERO,
        ..e2e::fast()
    };
    let rec_a = e2e::reconciler_with(&a, &group(1, URL_A), sweeping).await;
    e2e::drive(&rec_a, Duration::from_secs(60), || {
        a.cluster.nodes().iter().any(|n| {
            e2e::ready_joined(n)
                && n.metadata
                    .name
                    .as_deref()
                    .is_some_and(|m| m != "control-plane")
        })
    })
    .await;
    for _ in 0..5 {
        rec_a.cycle(SystemTime::now()).await.expect("cycle");
    }
    let sweeps = a
        .pve
        .calls()
        .iter()
        .filter(|c| {
            c.method == "GET"
                && c.endpoint.as_deref() == Some("/nodes/{node}/storage/{storage}/content")
        })
        .count();
    assert!(sweeps >= 5, "A swept the share at each cycle: {sweeps}");
    for vm in &vms_b {
        let now = b
            .pve
            .guests()
            .into_iter()
            .find(|g| g.vmid == vm.vmid)
            .expect("B's VM");
        let seed = seed_of(&now).expect("still attached");
        assert_eq!(Some(&seed), seed_of(vm).as_ref());
        let data = user_data_in(&share, &seed);
        assert!(data.contains(URL_B) && !data.contains(URL_A), "{data}");
    }
    // A's own seed went when its node joined; B's two are all that is left.
    assert_eq!(names(&share).len(), 2, "{:?}", names(&share));
    assert_clean(&a.pve);
    assert_clean(&b.pve);
}

/// A call a person makes with the same API token, form-encoded as the API takes it.
async fn as_a_person(pve: &SimProxmox, path: &str, form: &[(&str, &str)]) {
    let o = pve.options();
    let answer = common::proxmox_client(pve)
        .post(format!("{}/api2/json{path}", pve.url()))
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_7_a_persons_copy_of_a_vm_still_joining_has_its_seed_ejected_and_is_reported() {
    let env = e2e::env().await;
    // The node VM is still joining: its guest never finishes booting.
    env.pve.never_ready("e2e-");
    let rec = e2e::reconciler(&env, &e2e::group("ci", 1, "{template: k3s-shared}")).await;
    let vm = seeded_vms(&rec, &env.pve, 1).await.remove(0);
    let seed = seed_of(&vm).expect("seed");
    // A person clones it: Proxmox copies its config, the seed CD-ROM and the marks too.
    let copy = 4242;
    as_a_person(
        &env.pve,
        &format!("/nodes/{}/qemu/{}/clone", vm.node, vm.vmid),
        &[("newid", &copy.to_string()), ("full", "1")],
    )
    .await;
    let guest = |vmid: u32| env.pve.guests().into_iter().find(|g| g.vmid == vmid);
    common::wait_for("the copy to be made", Duration::from_secs(20), || {
        guest(copy).is_some_and(|g| g.lock.is_none())
    })
    .await;
    assert_eq!(seed_of(&guest(copy).expect("copy")), Some(seed.clone()));
    // The next cycles see the copy: its seed is ejected, and it is reported.
    let start = std::time::Instant::now();
    let reported = loop {
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        if let Some((_, note)) = c
            .snapshot
            .cloud_failures
            .iter()
            .find(|(_, f)| f.contains(&format!("VM {copy} ")))
        {
            break note.clone();
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never reported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        reported.contains(&format!("is a copy of VM {}", vm.vmid)) && reported.contains("ejected"),
        "{reported}"
    );
    let now = guest(copy).expect("the copy is kept");
    assert_eq!(seed_of(&now), None, "{:?}", now.config);
    assert!(now.config.values().any(|v| v == "none,media=cdrom"));
    // The VM copied keeps its seed, and so does the storage.
    assert_eq!(
        seed_of(&guest(vm.vmid).expect("the VM")),
        Some(seed.clone())
    );
    assert!(env.pve.all_volumes().iter().any(|(_, v)| *v == seed));
    // Nothing destructive was sent to the copy.
    assert!(!env.pve.calls().iter().any(|c| {
        c.path.contains(&format!("/qemu/{copy}"))
            && (c.method == "DELETE"
                || c.path.ends_with("/status/stop")
                || c.path.ends_with("/status/shutdown"))
    }));
    // Started by the person, the copy finds no user data: it does not join as the node.
    as_a_person(
        &env.pve,
        &format!("/nodes/{}/qemu/{copy}/status/start", now.node),
        &[],
    )
    .await;
    common::wait_for("the copy to boot", Duration::from_secs(20), || {
        guest(copy).is_some_and(|g| g.booted)
    })
    .await;
    let booted = guest(copy).expect("copy");
    assert!(!booted.joined, "{booted:?}");
    assert_eq!(
        booted.cloud_init_note.as_deref(),
        Some("no cidata seed attached: cloud-init found no user data")
    );
    assert_clean(&env.pve);
}
