//! Image warming (issue 30): pull secrets carried, pulls that fail given up and
//! recorded on the node, several nodes at once, no guesses past the kubelet's 50-image
//! listing, new nodes warmed under the startup taint.

use super::*;
use crate::model::{ANNOTATION_UNPULLABLE_IMAGES, STARTUP_TAINT_KEY};

/// Two joined nodes and a pod on `a` using `images`; `a` has them all.
fn two_nodes(images: &[&str]) -> Snapshot {
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    let mut p = mk_pod("web", Some("dev-workers-a"), GI);
    p.images = images.iter().map(|i| i.to_string()).collect();
    s.pods.push(p.into());
    for i in images {
        s.nodes[0].images.insert(normalize_image(i));
    }
    s
}

/// A puller of this cluster on `node`, started 30 s ago, still running.
fn running_puller(c: &Config, name: &str, node: &str) -> PodInfo {
    let mut p = mk_pod(name, Some(node), 0);
    p.namespace = c.image_puller.namespace.clone();
    p.labels.insert(LABEL_IMAGE_PULLER.into(), "true".into());
    p.labels
        .insert(LABEL_CLUSTER.into(), c.cluster_name.clone());
    p.phase = PodPhase::Pending;
    p.unschedulable = false;
    p.unschedulable_since = None;
    p.created = ago(30);
    p
}

#[test]
fn pullers_carry_the_pull_secrets_of_the_pods_whose_images_they_pull() {
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = two_nodes(&["registry.example/private/app:1"]);
    std::sync::Arc::make_mut(&mut s.pods[0]).image_pull_secrets = vec!["regcred".into()];
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::PullImages {
            node: "dev-workers-b".into(),
            images: vec!["registry.example/private/app:1".into()],
            pull_secrets: vec!["regcred".into()],
        },
        "{d:?}"
    );
}

#[test]
fn a_puller_that_cannot_pull_is_given_up_at_once_and_recorded_on_its_node() {
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = two_nodes(&["nginx:1.25", "ghost:404"]);
    let mut p = running_puller(&c, "puller", "dev-workers-b");
    p.images = vec!["ghost:404".into()];
    p.pull_failures = vec![("ghost:404".into(), "ImagePullBackOff".into())];
    s.pods.push(p.into());
    let d = plan_it(&s, &c);
    match &d.action {
        Action::GiveUpPulls {
            node,
            unpullable,
            pods,
        } => {
            assert_eq!(node, "dev-workers-b");
            let at = crate::model::unix_secs(now());
            assert_eq!(
                unpullable,
                &BTreeMap::from([("docker.io/library/ghost:404".to_string(), at)])
            );
            assert_eq!(pods.len(), 1);
        }
        other => panic!("expected GiveUpPulls, got {other:?}"),
    }
    assert!(d.has_reason(ReasonCode::ImageUnpullable), "{d:?}");
}

#[test]
fn an_image_given_up_on_is_not_pulled_anywhere_until_long_after_but_others_are() {
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = two_nodes(&["redis:7", "ghost:404"]);
    s.nodes[0].images.remove(&normalize_image("ghost:404"));
    let at = crate::model::unix_secs(ago(3600));
    s.nodes[0].annotations.insert(
        ANNOTATION_UNPULLABLE_IMAGES.into(),
        format!(r#"{{"docker.io/library/ghost:404": {at}}}"#),
    );
    // Recorded on a, an hour ago: b gets redis and not the ghost, and says why.
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::PullImages {
            node: "dev-workers-b".into(),
            images: vec!["docker.io/library/redis:7".into()],
            pull_secrets: Vec::new(),
        },
        "{d:?}"
    );
    assert!(
        d.notes
            .iter()
            .any(|n| n.code == ReasonCode::ImageUnpullable && n.message.contains("ghost:404")),
        "{d:?}"
    );
    // Six hours after it was given up it is tried again.
    let later = ago(3600) + Duration::from_secs(6 * 3600 + 1);
    let d = plan(&s, &c, later);
    assert!(
        matches!(&d.action, Action::PullImages { images, .. }
            if images.contains(&"docker.io/library/ghost:404".to_string())),
        "{d:?}"
    );
}

#[test]
fn a_node_with_a_puller_running_does_not_keep_other_nodes_from_being_warmed() {
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = two_nodes(&["redis:7"]);
    mk_member(&mut s, "dev-workers-c", 3600);
    s.pods
        .push(running_puller(&c, "puller-b", "dev-workers-b").into());
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::PullImages { node, .. } if node == "dev-workers-c"),
        "{d:?}"
    );
}

#[test]
fn a_node_whose_image_listing_is_full_gets_no_puller_for_images_it_may_have() {
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = two_nodes(&["small:1", "big:1"]);
    // b lists 50 images of 100 MB each, neither of the pod's: it may have them.
    let b = &mut s.nodes[1];
    for i in 0..50 {
        let name = normalize_image(&format!("filler-{i}:1"));
        b.images.insert(name.clone());
        b.image_listing.sizes.insert(name, 100_000_000);
    }
    b.image_listing.entries = 50;
    // a lists small at 10 MB (b would not name it if it had it) and big at 900 MB
    // (b would name it first if it had it).
    let a = &mut s.nodes[0];
    a.image_listing
        .sizes
        .insert(normalize_image("small:1"), 10_000_000);
    a.image_listing
        .sizes
        .insert(normalize_image("big:1"), 900_000_000);
    a.image_listing.entries = 2;
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::PullImages {
            node: "dev-workers-b".into(),
            images: vec!["docker.io/library/big:1".into()],
            pull_secrets: Vec::new(),
        },
        "{d:?}"
    );
}

#[test]
fn a_new_node_under_the_startup_taint_is_warmed_before_it_is_ready() {
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = two_nodes(&["redis:7"]);
    s.nodes.truncate(1);
    s.servers.truncate(1);
    s.servers.push(mk_server("dev-workers-n", ago(60)));
    let mut n = mk_node("dev-workers-n", ago(10));
    n.ready = false;
    n.taints.push(Taint {
        key: STARTUP_TAINT_KEY.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
    });
    s.nodes.push(n);
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::PullImages { node, .. } if node == "dev-workers-n"),
        "{d:?}"
    );
}
