//! Providers fail alone, over real loopback HTTP: while one cloud's API cannot be
//! listed, its groups are frozen and the other provider's groups scale up and down.

mod common;

use std::time::{Duration, SystemTime};

use common::{phase, ready};
use nodewright::model::LABEL_GROUP;
use nodewright::plan::{Action, Bucket, ReasonCode};
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::{SimEnv, SimTimings};

const GI: u64 = 1 << 30;

fn group_pods_running(env: &SimEnv, app: &str) -> usize {
    env.cluster
        .pods()
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str)
                == Some(app)
                && phase(p) == "Running"
        })
        .count()
}

fn ready_nodes_of(env: &SimEnv, group: &str) -> usize {
    env.cluster
        .nodes()
        .iter()
        .filter(|n| {
            ready(n)
                && n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_GROUP))
                    .map(String::as_str)
                    == Some(group)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_listing_fails_for_many_cycles_does_not_stall_the_others() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let text = r#"clusterName: e2e
freeMemoryTarget: 0 B
provisionTimeout: 60s
scanInterval: 200ms
scaleDown: {delayAfterAdd: 1s, unneededTime: 0s}
nodeGroups:
  - name: os
    provider: openstack
    maxSize: 2
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}
  - name: kam
    provider: kamatera
    maxSize: 2
    kamatera: {datacenter: EU, image: ubuntu_server_24.04_64-bit, cpu: 2B, ram: 8 GiB}
    userData: {template: k3s-agent.join.sh.j2, variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}}
"#;
    let (_, cfg) = env.write_config(text).expect("config");
    let rec = env.reconciler(cfg).await.expect("reconciler");
    env.kamatera.set_listing_down(true);
    for g in ["os", "kam"] {
        env.cluster
            .add_replicaset(
                "default",
                &format!("app-{g}"),
                1,
                SimPodTemplate::new("nginx:1.25", 3 * GI).node_selector(LABEL_GROUP, g),
            )
            .expect("rs");
    }

    // Scale up on OpenStack while Kamatera cannot be listed, cycle after cycle.
    let mut cycles = 0;
    let mut frozen_noted = 0;
    while group_pods_running(&env, "app-os") < 1 {
        let report = rec
            .cycle(SystemTime::now())
            .await
            .expect("a cycle goes on while one provider is down");
        cycles += 1;
        if report.decision.has_reason(ReasonCode::ProviderUnavailable) {
            frozen_noted += 1;
        }
        if let Action::ScaleUp { group, .. } = &report.decision.action {
            assert_eq!(group, "os", "no create for a frozen group");
        }
        assert!(cycles < 300, "OpenStack group never scaled up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cycles >= 3, "the outage lasted {cycles} cycle(s)");
    assert_eq!(
        frozen_noted, cycles,
        "every cycle says the provider is frozen"
    );
    assert_eq!(ready_nodes_of(&env, "os"), 1);
    assert!(
        env.kamatera.servers().is_empty(),
        "nothing created while frozen"
    );
    let (_, decision) = rec.plan(SystemTime::now()).await.expect("plan");
    let kam_pod = env
        .cluster
        .pods()
        .into_iter()
        .find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("app-kam"))
        })
        .expect("kam pod");
    let name = kam_pod.metadata.name.unwrap_or_default();
    assert_eq!(
        decision.bucket_of("default", &name),
        Some(Bucket::NoCapacity),
        "{decision:#?}"
    );

    // And down again, still during the outage.
    env.cluster
        .scale_replicaset("default", "app-os", 0)
        .expect("scale");
    let mut more = 0;
    while !env.cloud.servers().is_empty() {
        rec.cycle(SystemTime::now()).await.expect("cycle");
        more += 1;
        assert!(more < 300, "OpenStack group never scaled down");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The API comes back: the frozen group gets its node.
    env.kamatera.set_listing_down(false);
    let mut after = 0;
    while group_pods_running(&env, "app-kam") < 1 {
        rec.cycle(SystemTime::now()).await.expect("cycle");
        after += 1;
        assert!(
            after < 300,
            "Kamatera group never scaled up after the outage"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(env.kamatera.servers().len(), 1);
}
