//! Issue 29, item 2: an upgrade must not replace the nodes an earlier release made. Over
//! loopback HTTP: the Proxmox simulator (schema-checked) and the simulated API server with
//! kubelets; the earlier release is played by a process whose group carries the hash that
//! release stamped.

use nodewright_testkit as common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::pve as e2e;
use nodewright::model::LABEL_SETTINGS_HASH;
use nodewright::plan::{Action, ReasonCode};

/// The hash the release before the v2 hash stamped on the demo's `batch` nodes.
const PREVIOUS_RELEASE_HASH: &str = "1cd2489d8af3";

/// The demo's `batch` group (`simulate`'s config), `minSize: 1`.
const BATCH: &str = r#"  - name: batch
    provider: proxmox
    minSize: 1
    maxSize: 3
    proxmox: {template: agent-shared, memory: 8 GiB, cores: 4, join: guestAgent}
    userData:
      template: k3s-agent.join.sh.j2
      variables: {k3s_url: "https://192.0.2.10:6443", k3s_token: demo-join-token}
    labels: {workload: batch}
    taints: [{key: dedicated, value: batch, effect: NoSchedule}]
"#;

/// The previous release's node of the demo's `batch` group, Ready and labelled with the
/// hash that release stamped (its template in the templates directory): the names of
/// the VMs.
async fn made_by_the_previous_release(env: &e2e::Env) -> Vec<String> {
    let template = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/core/src/config/hash/testdata/k3s-agent.join.sh.j2");
    std::fs::copy(
        &template,
        env.dir.path().join("templates/k3s-agent.join.sh.j2"),
    )
    .expect("the previous release's template");

    // The previous release: its node labelled with the hash it computed.
    let mut previous = e2e::reconciler(env, BATCH).await;
    let mut config = (*previous.config).clone();
    config.node_groups[0].settings_hash = PREVIOUS_RELEASE_HASH.into();
    previous.config = Arc::new(config);
    let joined = || {
        env.cluster.nodes().iter().any(|n| {
            e2e::ready_joined(n)
                && n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_SETTINGS_HASH))
                    .map(String::as_str)
                    == Some(PREVIOUS_RELEASE_HASH)
        })
    };
    e2e::drive(&previous, Duration::from_secs(30), joined).await;
    let vms: Vec<String> = env.pve.guests().iter().map(|g| g.name.clone()).collect();
    assert_eq!(vms.len(), 1, "{vms:?}");
    vms
}

/// Issue 29 item 2, "An upgrade replaces every Proxmox node": the hash the previous
/// release stamped was rebuilt from today's types, whose `Debug` text changed, so every
/// node it made looked drifted. A node it made for the demo's `batch` group (its
/// `k3s-agent.join.sh.j2` still in the templates directory) is current for today's
/// release: no cycle finds it drifted, and it keeps its VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_replaces_every_proxmox_node() {
    let env = e2e::env().await;
    let vms = made_by_the_previous_release(&env).await;

    // Today's release, the same config.
    let today = e2e::reconciler(&env, BATCH).await;
    assert_ne!(
        today.config.node_groups[0].settings_hash,
        PREVIOUS_RELEASE_HASH
    );
    for _ in 0..5 {
        let report = today.cycle(SystemTime::now()).await.expect("cycle");
        let d = &report.decision;
        assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
        assert!(
            !matches!(
                d.action,
                Action::Cordon { .. } | Action::Drain { .. } | Action::DeleteNodes { .. }
            ),
            "{d:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after: Vec<String> = env.pve.guests().iter().map(|g| g.name.clone()).collect();
    assert_eq!(
        after, vms,
        "the node made by the previous release keeps its VM"
    );
}

/// Issue 29 item 2, "a format-only change relabels, never replaces": a node labelled with
/// a hash an earlier release stamped for today's settings is relabelled with today's hash
/// (a label patch), keeps its VM, and is never cordoned nor drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_2_a_format_only_change_relabels_the_node_and_never_replaces_it() {
    let env = e2e::env().await;
    let vms = made_by_the_previous_release(&env).await;
    let today = e2e::reconciler(&env, BATCH).await;
    let current = today.config.node_groups[0].settings_hash.clone();
    let name = vms[0].clone();
    let label = |env: &e2e::Env| {
        env.cluster
            .node(&name)
            .and_then(|n| n.metadata.labels)
            .and_then(|l| l.get(LABEL_SETTINGS_HASH).cloned())
    };
    let mut relabelled = false;
    for _ in 0..6 {
        let report = today.cycle(SystemTime::now()).await.expect("cycle");
        let d = &report.decision;
        assert!(
            !matches!(
                d.action,
                Action::Cordon { .. } | Action::Drain { .. } | Action::DeleteNodes { .. }
            ),
            "{d:#?}"
        );
        if let Action::RelabelHash { nodes } = &d.action {
            assert_eq!(nodes.get(&name), Some(&current), "{d:#?}");
            assert!(d.has_reason(ReasonCode::HashFormatChanged), "{d:#?}");
            relabelled = true;
        }
        if label(&env).as_deref() == Some(current.as_str()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(relabelled, "no relabel action");
    assert_eq!(label(&env), Some(current), "the node carries today's hash");
    let after: Vec<String> = env.pve.guests().iter().map(|g| g.name.clone()).collect();
    assert_eq!(after, vms, "the node keeps its VM");
}
