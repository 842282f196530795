//! Groups of several sizes (issue 28, "the right node size") over loopback HTTP against
//! the simulated API server and clouds, the whole loop (plan and act).

use std::time::SystemTime;

use nodewright_testkit as common;

use common::{act_until, env_with_config};
use nodewright::plan::Action;
use nodewright::sim::cluster::SimPodTemplate;

const MI: u64 = 1 << 20;

const OPENSTACK: &str = r#"clusterName: prod
freeMemoryTarget: 0 B
nodeGroups:
  - name: os
    provider: openstack
    maxSize: 4
    openstack: {flavor: [m1.small, m1.large], image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "sizes-secret-token"}
"#;

/// The size the decision scaled up with.
fn sized(a: &Action) -> Option<&str> {
    match a {
        Action::ScaleUp { size, .. } => size.as_deref(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openstack_group_of_two_flavors_creates_the_small_one_for_a_small_pod_and_the_large_one_for_a_large_pod(
) {
    let (env, rec) = env_with_config(OPENSTACK).await;
    env.cluster
        .add_pod(
            "default",
            "little",
            SimPodTemplate::new("nginx:1.25", 512 * MI).cpu(250),
        )
        .expect("pod");
    let acted = act_until(&rec, "scale-up for the little pod", |a| {
        matches!(a, Action::ScaleUp { .. })
    })
    .await;
    let last = &acted.last().expect("a scale-up").action;
    assert_eq!(sized(last), Some("m1.small"), "{last}");
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 1);
    // Nova's m1.small is flavor id 2, m1.large 4 (the simulator's catalog, as DevStack's).
    assert_eq!(servers[0].flavor_id, "2");
    assert_eq!(
        servers[0]
            .metadata
            .get("nodewright-size")
            .map(String::as_str),
        Some("m1.small")
    );

    // 6 GiB fits no m1.small (2 GiB), nor the small VM booting: an m1.large is made.
    env.cluster
        .add_pod(
            "default",
            "large",
            SimPodTemplate::new("nginx:1.25", 6 * 1024 * MI).cpu(1000),
        )
        .expect("pod");
    let acted = act_until(&rec, "scale-up for the large pod", |a| {
        matches!(a, Action::ScaleUp { .. })
    })
    .await;
    let last = &acted.last().expect("a scale-up").action;
    assert_eq!(sized(last), Some("m1.large"), "{last}");
    let servers = env.cloud.servers();
    let large: Vec<_> = servers.iter().filter(|s| s.flavor_id == "4").collect();
    assert_eq!(large.len(), 1, "{servers:#?}");
    assert_eq!(
        large[0].metadata.get("nodewright-size").map(String::as_str),
        Some("m1.large")
    );

    // A fresh process reads the booting VMs back with their sizes: nothing more to add.
    let fresh = common::reconciler_for(&env, OPENSTACK).await;
    let (_, d) = fresh.plan(SystemTime::now()).await.expect("plan");
    assert!(
        !matches!(d.action, Action::ScaleUp { .. }),
        "the booting VMs take both pods: {}",
        d.action
    );
}
