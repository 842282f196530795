//! Warm pools against real Nova (fake virt driver) from `tests/openstack-real/setup.sh`:
//! a pool server is created marked `filling`, parked with `os-stop` (SHUTOFF, marked
//! `parked`), started out of the pool with `os-start` (the mark removed, the start time
//! stamped), and refused when it is not parked. Skipped, loudly, without the stack (see
//! tests/openstack_real.rs).

use nodewright_testkit::real_os;

use nodewright::cloud::{CloudError, CloudProvider};
use nodewright::model::ServerStatus;
use real_os::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_nova_parks_and_starts_a_warm_server() {
    let os = real_os_or_skip!("real_nova_parks_and_starts_a_warm_server");
    let p = provider(
        &os.password,
        settings(
            &os.id("FLAVOR_LARGE_ID"),
            &os.id("IMAGE_ID"),
            Some(&os.id("NETWORK_ID")),
        ),
    );
    let cluster = unique_cluster("warm");
    let admin = Admin::login(&os).await;
    let _guard = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster.clone(),
    };
    let req = request(&format!("{cluster}-workers-w1"), &cluster, "#!/bin/sh\n");
    let made = p.create_warm(&req).await.expect("create_warm");
    let s = wait_for_status(&p, &cluster, &made.id, ServerStatus::Active).await;
    assert!(s.warm && s.filling, "{s:?}");
    assert_eq!(
        admin
            .server(&made.id)
            .await
            .metadata
            .get("nodewright-warm")
            .map(String::as_str),
        Some("filling")
    );
    // Not parked yet: a start is refused before any call changes it.
    let render = |_: Option<&str>| Ok::<_, String>(req.clone());
    let refused = p.start_warm(&cluster, &made.id, &render).await;
    assert!(
        matches!(refused, Err(CloudError::Refused { .. })),
        "{refused:?}"
    );

    p.park(&cluster, &made.id).await.expect("park");
    let s = p
        .get_server(&cluster, &made.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(s.status, ServerStatus::Stopped, "{s:?}");
    assert!(s.warm && !s.filling, "{s:?}");
    assert_eq!(admin.server(&made.id).await.status, "SHUTOFF");
    // Parking a parked server again stops nothing (Nova would answer 409) and succeeds.
    p.park(&cluster, &made.id).await.expect("park again");

    p.start_warm(&cluster, &made.id, &render)
        .await
        .expect("start_warm");
    let s = wait_for_status(&p, &cluster, &made.id, ServerStatus::Active).await;
    assert!(!s.warm, "{s:?}");
    let meta = admin.server(&made.id).await.metadata;
    assert!(!meta.contains_key("nodewright-warm"), "{meta:?}");
    assert!(meta.contains_key("nodewright-started"), "{meta:?}");
    p.delete_server(&cluster, &made.id).await.expect("delete");
}
