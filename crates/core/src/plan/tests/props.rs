//! Properties of the planner over random clusters (proptest): every snapshot gets one
//! action with its reasons, the same every time and whatever the order of pods and VMs;
//! nothing that is not ours is named; a node is deleted only when no pod needs it
//! (unless it is broken past its deadline); scale-ups stay within `maxSize` and the
//! cluster's limits, counting a frozen provider's groups as full.

use proptest::prelude::*;

use super::scale_up::mk_config_groups;
use super::*;

/// What one random object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Our VM with its node.
    Member,
    /// Our VM, no node yet.
    Booting,
    /// A node with no labels.
    Unlabelled,
    /// A node and a VM of another cluster.
    OtherCluster,
    /// A node labelled ours without a VM of ours.
    LabelledNoVm,
    /// Our VM whose node lost its labels.
    Disowned,
}

#[derive(Debug, Clone)]
struct NodeSpec {
    kind: Kind,
    batch: bool,
    age_min: u64,
    ready: bool,
    /// 0: none, 1: by us (empty), 2: by us (unhealthy), 3: by a person.
    cordon: u8,
    startup: bool,
    vm_error: bool,
    unneeded_min: Option<u64>,
}

#[derive(Debug, Clone)]
struct PodSpec {
    node: Option<usize>,
    cpu_m: u64,
    mem_mi: u64,
    /// 0: ReplicaSet, 1: Job, 2: bare, 3: DaemonSet, 4: our image puller.
    owner: u8,
    web: bool,
}

#[derive(Debug, Clone)]
struct ClusterSpec {
    nodes: Vec<NodeSpec>,
    pods: Vec<PodSpec>,
    max_workers: u32,
    max_batch: u32,
    min_workers: u32,
    limit_nodes: Option<u32>,
    scale_down: bool,
    expire: bool,
    frozen_batch: bool,
    pdb_allowed: i32,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        6 => Just(Kind::Member),
        2 => Just(Kind::Booting),
        1 => Just(Kind::Unlabelled),
        1 => Just(Kind::OtherCluster),
        1 => Just(Kind::LabelledNoVm),
        1 => Just(Kind::Disowned),
    ]
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        kind(),
        any::<bool>(),
        1u64..600,
        prop::bool::weighted(0.85),
        prop_oneof![8 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.03),
        prop::option::weighted(0.3, 0u64..30),
    )
        .prop_map(
            |(kind, batch, age_min, ready, cordon, startup, vm_error, unneeded_min)| NodeSpec {
                kind,
                batch,
                age_min,
                ready,
                cordon,
                startup,
                vm_error,
                unneeded_min,
            },
        )
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        prop::option::weighted(0.7, 0usize..12),
        1u64..40,
        1u64..40,
        prop_oneof![5 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
        any::<bool>(),
    )
        .prop_map(|(node, cpu, mem, owner, web)| PodSpec {
            node,
            cpu_m: cpu * 100,
            mem_mi: mem * 256,
            owner,
            web,
        })
}

fn cluster_spec() -> impl Strategy<Value = ClusterSpec> {
    (
        prop::collection::vec(node_spec(), 0..12),
        prop::collection::vec(pod_spec(), 0..24),
        1u32..6,
        1u32..4,
        0u32..3,
        prop::option::of(1u32..9),
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.2),
        0i32..2,
    )
        .prop_map(
            |(nodes, pods, max_w, max_b, min_w, limit, sd, expire, frozen, pdb)| ClusterSpec {
                nodes,
                pods,
                max_workers: max_w,
                max_batch: max_b,
                min_workers: min_w.min(max_w),
                limit_nodes: limit,
                scale_down: sd,
                expire,
                frozen_batch: frozen,
                pdb_allowed: pdb,
            },
        )
}

fn config_of(c: &ClusterSpec) -> Config {
    let mut top = format!(
        "scaleDown: {{enabled: {}, unneededTime: 5m, delayAfterAdd: 0s}}\n",
        c.scale_down
    );
    if let Some(l) = c.limit_nodes {
        top.push_str(&format!("limits: {{nodes: {l}}}\n"));
    }
    if c.expire {
        top.push_str("oldNodeAgeLimit: 4h\n");
    }
    let groups = format!(
        r#"- name: workers
  provider: openstack
  minSize: {}
  maxSize: {}
  resources: {{cpu: "4", memory: 8Gi}}
  reserved: {{memory: 0}}
  openstack: {{flavor: f, image: i}}
  userData: {{template: nodewright-plan-test.j2}}
- name: batch
  provider: kamatera
  maxSize: {}
  kamatera: {{datacenter: EU, image: ubuntu, cpu: 2B, ram: 4 GiB}}
  reserved: {{memory: 0}}
  userData: {{template: nodewright-plan-test.j2}}
"#,
        c.min_workers, c.max_workers, c.max_batch
    );
    mk_config_groups(&top, &groups)
}

/// The node name of spec `i`.
fn name_of(i: usize, n: &NodeSpec) -> String {
    let group = if n.batch { "batch" } else { "workers" };
    match n.kind {
        Kind::Unlabelled => format!("legacy-{i}"),
        Kind::OtherCluster => format!("other-{group}-{i}"),
        _ => format!("dev-{group}-{i}"),
    }
}

fn snapshot_of(c: &ClusterSpec) -> Snapshot {
    let mut s = Snapshot::default();
    for (g, cpu, mem) in [("workers", 4000, 8 * GI), ("batch", 2000, 4 * GI)] {
        s.group_shapes.insert(
            g.into(),
            crate::model::GroupShape {
                cpu_milli: Some(cpu),
                memory: Some(mem),
                ..Default::default()
            },
        );
    }
    if c.frozen_batch {
        s.unavailable_providers
            .insert("kamatera".into(), "HTTP 503".into());
        s.group_shapes.remove("batch");
    }
    let mut has_node = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        let name = name_of(i, n);
        let group = if n.batch { "batch" } else { "workers" };
        // Booting VMs are mostly young: few are past provisionTimeout (10m).
        let age_min = if n.kind == Kind::Booting {
            n.age_min % 12
        } else {
            n.age_min
        };
        let created = ago(age_min * 60);
        let ours_vm = matches!(n.kind, Kind::Member | Kind::Booting | Kind::Disowned);
        let frozen = n.batch && c.frozen_batch;
        if (ours_vm || n.kind == Kind::OtherCluster) && !frozen {
            let mut server = mk_server(&name, created);
            server.group = Some(group.into());
            server.provider = if n.batch { "kamatera" } else { "openstack" }.into();
            if n.kind == Kind::OtherCluster {
                server.cluster = Some("other".into());
            }
            if n.vm_error {
                server.status = ServerStatus::Error;
            }
            s.servers.push(server);
        }
        if n.kind == Kind::Booting {
            has_node.push(false);
            continue;
        }
        let mut node = mk_node(&name, created + Duration::from_secs(30));
        node.labels.insert(LABEL_GROUP.into(), group.into());
        node.labels
            .insert("kubernetes.io/hostname".into(), name.clone());
        match n.kind {
            Kind::Unlabelled | Kind::Disowned => {
                node.labels.remove(LABEL_CLUSTER);
                node.labels.remove(LABEL_GROUP);
            }
            Kind::OtherCluster => {
                node.labels.insert(LABEL_CLUSTER.into(), "other".into());
            }
            _ => {}
        }
        if n.batch {
            node.allocatable = mk_alloc(2000, 4 * GI);
        }
        node.ready = n.ready;
        if !n.ready {
            node.ready_changed = Some(ago(n.age_min.min(60) * 30));
        }
        if n.startup {
            node.taints.push(Taint {
                key: STARTUP_TAINT_KEY.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
            });
        }
        match n.cordon {
            1 => cordon_by_us(&mut node, "empty", 120),
            2 => cordon_by_us(&mut node, "unhealthy", 3600),
            3 => node.unschedulable = true,
            _ => {}
        }
        if let Some(m) = n.unneeded_min {
            node.annotations.insert(
                crate::model::ANNOTATION_UNNEEDED_SINCE.into(),
                humantime::format_rfc3339_seconds(ago(m * 60)).to_string(),
            );
        }
        s.nodes.push(node);
        has_node.push(true);
    }
    for (i, p) in c.pods.iter().enumerate() {
        let node = p
            .node
            .filter(|n| has_node.get(*n).copied().unwrap_or(false))
            .and_then(|n| c.nodes.get(n).map(|spec| name_of(n, spec)));
        let mut pod = mk_pod(&format!("p{i}"), node.as_deref(), p.mem_mi << 20);
        pod.requests.cpu = p.cpu_m;
        match p.owner {
            1 => pod.controller_kind = Some("Job".into()),
            2 => {
                pod.controller_kind = None;
                pod.controller_name = None;
            }
            3 => pod.controller_kind = Some("DaemonSet".into()),
            4 => {
                pod.namespace = "kube-system".into();
                pod.labels.insert(LABEL_IMAGE_PULLER.into(), "dev".into());
                pod.controller_kind = None;
                pod.controller_name = None;
            }
            _ => {}
        }
        if p.web {
            pod.labels.insert("app".into(), "web".into());
        }
        s.pods.push(pod.into());
    }
    s.pdbs.push(PdbInfo {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(crate::model::LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            ..Default::default()
        }),
        disruptions_allowed: c.pdb_allowed,
    });
    s
}

/// Node names the planner may act on: our VM's node, labelled as its VM's group.
fn managed_nodes(s: &Snapshot) -> BTreeSet<String> {
    s.servers
        .iter()
        .filter(|v| v.cluster.as_deref() == Some("dev"))
        .filter(|v| {
            s.nodes.iter().any(|n| {
                n.name == v.name
                    && n.labels.get(LABEL_CLUSTER).map(String::as_str) == Some("dev")
                    && n.labels.get(LABEL_GROUP) == v.group.as_ref()
            })
        })
        .map(|v| v.name.clone())
        .collect()
}

/// Every node and VM name an action writes to.
fn named(a: &Action, s: &Snapshot) -> (Vec<String>, Vec<String>) {
    let pod_node = |p: &PodRef| {
        s.pods
            .iter()
            .find(|q| q.namespace == p.namespace && q.name == p.name)
            .and_then(|q| q.node_name.clone())
    };
    match a {
        Action::None
        | Action::ScaleUp { .. }
        | Action::FillWarmPool { .. }
        | Action::DeletePods { .. } => (vec![], vec![]),
        Action::StartWarm { servers, .. }
        | Action::MarkJoined { servers, .. }
        | Action::RestartVanished { servers, .. }
        | Action::StopUnreachable { servers, .. }
        | Action::FinishJoin { servers, .. } => {
            (vec![], servers.iter().map(|v| v.name.clone()).collect())
        }
        Action::RemoveStartupTaint { nodes }
        | Action::Cordon { nodes, .. }
        | Action::Uncordon { nodes, .. }
        | Action::ReuseCordoned { nodes }
        | Action::ForgetCordon { nodes } => (nodes.clone(), vec![]),
        Action::SoftTaint { add, remove } => (add.iter().chain(remove).cloned().collect(), vec![]),
        Action::Drain { nodes, pods } => {
            let mut all = nodes.clone();
            all.extend(pods.iter().filter_map(pod_node));
            (all, vec![])
        }
        Action::DeleteServers { servers, nodes } => (
            nodes.clone(),
            servers.iter().map(|v| v.name.clone()).collect(),
        ),
        Action::ParkWarm { servers } => (
            servers.iter().map(|v| v.name.clone()).collect(),
            servers.iter().map(|v| v.name.clone()).collect(),
        ),
        Action::DeleteNodes { nodes } => (
            nodes.iter().map(|t| t.node.clone()).collect(),
            nodes.iter().map(|t| t.server.name.clone()).collect(),
        ),
        Action::MarkUnneeded { mark, clear, .. } => {
            (mark.iter().chain(clear).cloned().collect(), vec![])
        }
        Action::PullImages { node, .. } | Action::GiveUpPulls { node, .. } => {
            (vec![node.clone()], vec![])
        }
        Action::RelabelHash { nodes } => (nodes.keys().cloned().collect(), vec![]),
        // Nodes labelled ours whose VM is gone: checked on their own below.
        Action::DeleteNodesWithoutVm { .. } => (vec![], vec![]),
        Action::DeletePodsPastLimit { nodes, pods } => {
            let mut all = nodes.clone();
            all.extend(pods.iter().filter_map(pod_node));
            (all, vec![])
        }
    }
}

/// A pod that would have to move if its node went.
fn needs_node(p: &PodInfo) -> bool {
    !p.ignored_by_drain() && !p.labels.contains_key(LABEL_IMAGE_PULLER)
}

/// The same snapshot with pods and VMs listed the other way round. (Not the nodes: the
/// scheduling model fills nodes first-fit in list order, which the API server keeps by
/// name, so a reordered node list may rightly change where pending pods are expected.)
fn reversed(s: &Snapshot) -> Snapshot {
    let mut r = s.clone();
    r.pods.reverse();
    r.servers.reverse();
    r
}

/// Found by the property below: a drain listed its pods in the order the snapshot did.
#[test]
fn drain_evicts_the_same_pods_in_the_same_order_whatever_the_list_order() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    cordon_by_us(&mut s.nodes[0], "expired", 60);
    s.pods.push(mk_pod("p0", Some("dev-workers-a"), GI).into());
    s.pods.push(mk_pod("p1", Some("dev-workers-a"), GI).into());
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::Drain { .. }), "{d:#?}");
    assert_eq!(plan_it(&reversed(&s), &c).action, d.action);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_planner_keeps_its_promises(spec in cluster_spec()) {
        let c = config_of(&spec);
        let s = snapshot_of(&spec);
        let d = plan_it(&s, &c);
        // One action, with its reasons; the same one again, and whatever the order.
        prop_assert!(d.action == Action::None || !d.reasons.is_empty(), "{d:#?}");
        prop_assert_eq!(&plan_it(&s, &c), &d);
        prop_assert_eq!(&plan_it(&reversed(&s), &c).action, &d.action);

        // Nothing that is not ours.
        let managed = managed_nodes(&s);
        let ours: BTreeSet<&str> = s
            .servers
            .iter()
            .filter(|v| v.cluster.as_deref() == Some("dev"))
            .map(|v| v.name.as_str())
            .collect();
        let (nodes, vms) = named(&d.action, &s);
        for n in &nodes {
            prop_assert!(managed.contains(n), "{} is not ours: {:#?}", n, d);
        }
        for v in &vms {
            prop_assert!(ours.contains(v.as_str()), "VM {} is not ours: {:#?}", v, d);
        }
        // A Node deleted for its VM being gone: labelled ours, NotReady, and no VM of
        // its name listed.
        if let Action::DeleteNodesWithoutVm { nodes } = &d.action {
            for name in nodes {
                let n = s.nodes.iter().find(|n| &n.name == name);
                prop_assert!(
                    n.is_some_and(|n| !n.ready
                        && n.labels.get(LABEL_CLUSTER).map(String::as_str) == Some("dev")),
                    "{} is not a NotReady node of ours: {:#?}", name, d
                );
                prop_assert!(!s.servers.iter().any(|v| &v.name == name), "{:#?}", d);
            }
        }
        if let Action::DeletePods { pods } = &d.action {
            for p in pods {
                let ours = s.pods.iter().any(|q| {
                    q.name == p.name
                        && q.namespace == c.image_puller.namespace
                        && q.labels.get(LABEL_IMAGE_PULLER).map(String::as_str) == Some("dev")
                });
                prop_assert!(ours, "{} is not our image puller", p);
            }
        }

        // No node deleted while a pod needs it, unless broken past its deadline.
        if let Action::DeleteNodes { nodes } = &d.action {
            for t in nodes {
                let node = s.nodes.iter().find(|n| n.name == t.node);
                let broken = node.is_some_and(|n| {
                    n.annotations.get(crate::model::ANNOTATION_DISRUPTION).map(String::as_str)
                        == Some("unhealthy")
                });
                let needed = s
                    .pods
                    .iter()
                    .any(|p| p.node_name.as_deref() == Some(t.node.as_str()) && needs_node(p));
                prop_assert!(broken || !needed, "{} still runs pods: {:#?}", t.node, d);
            }
        }

        // Scale-ups within maxSize and limits.nodes; never into a frozen group.
        if let Action::ScaleUp { group, count, .. } = &d.action {
            prop_assert!(*count >= 1);
            prop_assert!(!(spec.frozen_batch && group == "batch"), "{d:#?}");
            let live = |g: Option<&str>| {
                s.servers
                    .iter()
                    .filter(|v| v.cluster.as_deref() == Some("dev"))
                    .filter(|v| v.status != ServerStatus::Deleting)
                    .filter(|v| g.is_none() || v.group.as_deref() == g)
                    .count() as u32
            };
            let g = c.group(group).expect("a configured group");
            prop_assert!(live(Some(group)) + count <= g.max_size, "{d:#?}");
            if let Some(limit) = spec.limit_nodes {
                let frozen = if spec.frozen_batch { spec.max_batch } else { 0 };
                prop_assert!(live(None) + frozen + count <= limit, "{d:#?}");
            }
        }
    }
}
