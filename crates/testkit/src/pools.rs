//! The warm-pool tests that OpenStack and Kamatera share, the whole loop over loopback
//! HTTP: both boot a pool VM once to join, park it stopped, and start it on a scale-up.
//! Each test file describes its cloud in a [`PoolCloud`] and calls these.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nodewright_core::plan::Action;
use nodewright_core::run::Reconciler;
use nodewright_sim::cluster::SimPodTemplate;
use nodewright_sim::env::SimEnv;

use super::{act_until, act_until_placed, cordon_patch, env_with_config, reconciler_for};

const GI: u64 = 1 << 30;

/// One server as the pool tests look at it.
pub struct PoolVm {
    pub id: String,
    pub name: String,
    /// The cloud's own power state ("SHUTOFF", "off"...).
    pub power: String,
    /// `filling` or `parked`, from the cloud's warm marks.
    pub mark: Option<&'static str>,
    /// Carries the mark of a start out of the pool.
    pub started: bool,
}

/// What the shared tests need to know of one simulated cloud.
pub struct PoolCloud {
    /// The config of one group: machine `shape` (flavor, CPU), `maxSize`, warm pool size
    /// and `scaleDown.mode`.
    pub config: fn(shape: &str, max: u32, size: u32, mode: &str) -> String,
    /// A shape, and another one for a drifted group.
    pub shapes: [&'static str; 2],
    pub servers: fn(&SimEnv) -> Vec<PoolVm>,
    /// The power state of a parked server.
    pub parked_power: &'static str,
    /// Create calls so far.
    pub creates: fn(&SimEnv) -> usize,
    /// Whether a start call was made.
    pub started_call: fn(&SimEnv) -> bool,
    /// Whether server `id` was deleted.
    pub deleted_call: fn(&SimEnv, &str) -> bool,
}

impl PoolCloud {
    pub fn config_of(&self, max: u32, mode: &str) -> String {
        (self.config)(self.shapes[0], max, 1, mode)
    }

    pub fn server(&self, env: &SimEnv, name: &str) -> PoolVm {
        (self.servers)(env)
            .into_iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("server {name}"))
    }

    /// Fills the pool of one and waits until its server is parked: the name.
    pub async fn filled_and_parked(&self, env: &SimEnv, rec: &Reconciler) -> String {
        act_until(rec, "pool fill", |a| {
            matches!(a, Action::FillWarmPool { count: 1, .. })
        })
        .await;
        let servers = (self.servers)(env);
        assert_eq!(servers.len(), 1);
        let name = servers[0].name.clone();
        assert_eq!(servers[0].mark, Some("filling"));
        let acted = act_until(rec, "the fill parked", |a| {
            matches!(a, Action::ParkWarm { .. })
        })
        .await;
        let Some(Action::ParkWarm { servers }) = acted.last().map(|d| &d.action) else {
            unreachable!("until returns on ParkWarm")
        };
        assert_eq!(servers.len(), 1);
        assert_eq!(servers[0].name, name);
        let s = self.server(env, &name);
        assert_eq!(
            (s.power.as_str(), s.mark),
            (self.parked_power, Some("parked"))
        );
        assert!(env.cluster.node(&name).is_none(), "its Node is deleted");
        name
    }
}

/// The stop reached the VM while its Node still existed: the VM went first.
fn stopped_before_its_node_went(env: &SimEnv, name: &str) -> bool {
    env.vm_log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|e| !e.booted && e.name == name && e.node_existed)
}

pub async fn a_scale_up_starts_a_parked_server_without_a_create_and_the_pool_refills(
    c: &PoolCloud,
) {
    let (env, rec) = env_with_config(&c.config_of(3, "delete")).await;
    let name = c.filled_and_parked(&env, &rec).await;
    assert!(stopped_before_its_node_went(&env, &name));

    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    let before = (c.creates)(&env);
    let acted = act_until(&rec, "start of the parked server", |a| {
        matches!(a, Action::StartWarm { .. })
    })
    .await;
    let Some(Action::StartWarm { servers, .. }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on StartWarm")
    };
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].name, name);
    assert_eq!((c.creates)(&env), before, "a warm start makes no create");
    let started = c.server(&env, &name);
    assert_eq!(started.mark, None, "out of the pool");
    assert!(started.started);
    assert!((c.started_call)(&env));

    // Its kubelet registers again; the pod lands there; the pool refills.
    act_until(&rec, "pool refill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    assert_eq!((c.creates)(&env), before + 1);
    act_until_placed(&rec, &env, "waits", &name).await;
}

pub async fn a_filling_server_is_never_capacity_and_never_started(c: &PoolCloud) {
    let (env, rec) = env_with_config(&c.config_of(3, "delete")).await;
    act_until(&rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    let fill = (c.servers)(&env)[0].name.clone();
    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    // The pod gets a server of its own: created, as the pool has no parked server yet.
    let acted = act_until(&rec, "a scale-up", |a| {
        matches!(a, Action::ScaleUp { .. } | Action::StartWarm { .. })
    })
    .await;
    assert!(
        matches!(
            acted.last().map(|d| &d.action),
            Some(Action::ScaleUp { .. })
        ),
        "{acted:#?}"
    );
    let other = (c.servers)(&env)
        .into_iter()
        .find(|s| s.name != fill)
        .expect("the new server")
        .name;
    let acted = act_until_placed(&rec, &env, "waits", &other).await;
    assert!(
        acted
            .iter()
            .all(|d| !matches!(&d.action, Action::StartWarm { .. })),
        "{acted:#?}"
    );
    assert!(env.cluster.pods_on(&fill).is_empty(), "no pod on the fill");
}

pub async fn scale_down_mode_stop_parks_the_server_of_a_removed_node(c: &PoolCloud) {
    // maxSize 1: once the parked server runs, the pool has no room to refill.
    let (env, rec) = env_with_config(&c.config_of(1, "stop")).await;
    let name = c.filled_and_parked(&env, &rec).await;
    env.cluster
        .add_replicaset("default", "web", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("replicaset");
    act_until(&rec, "start", |a| matches!(a, Action::StartWarm { .. })).await;
    act_until(&rec, "startup taint removed", |a| {
        matches!(a, Action::RemoveStartupTaint { .. })
    })
    .await;
    env.cluster
        .scale_replicaset("default", "web", 0)
        .expect("scale");
    // The ReplicaSet controller deletes its pod a moment after the scale, bound or not:

    // until it has, the pod still waits for a node and may call the node back.

    super::wait_for("pods gone", Duration::from_secs(10), || {
        env.cluster.pods().iter().all(|p| {
            !p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web-"))
        })
    })
    .await;
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon as nodewright does");
    env.vm_log.lock().unwrap_or_else(|p| p.into_inner()).clear();

    let acted = act_until(&rec, "removal", |a| matches!(a, Action::DeleteNodes { .. })).await;
    let Some(Action::DeleteNodes { nodes: targets }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on DeleteNodes")
    };
    assert_eq!(targets.len(), 1);
    assert!(targets[0].park, "{targets:?}");
    assert!(env.cluster.node(&name).is_none(), "the Node is deleted");
    let s = c.server(&env, &name);
    assert_eq!((s.power.as_str(), s.mark), (c.parked_power, Some("parked")));
    assert!(stopped_before_its_node_went(&env, &name));
    assert!(!(c.deleted_call)(&env, &s.id));
}

pub async fn a_drifted_parked_server_is_deleted_instead_of_reused(c: &PoolCloud) {
    let (env, rec) = env_with_config(&c.config_of(3, "delete")).await;
    let old = c.filled_and_parked(&env, &rec).await;
    // New group settings (the shape): the parked server was made from the old ones.
    let rec = reconciler_for(&env, &(c.config)(c.shapes[1], 3, 1, "delete")).await;
    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    let acted = act_until(&rec, "the stale server deleted", |a| {
        matches!(a, Action::DeleteServers { .. })
    })
    .await;
    let Some(Action::DeleteServers { servers, .. }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on DeleteServers")
    };
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].name, old);
    assert!(acted.last().is_some_and(|d| d
        .reasons
        .iter()
        .any(|r| r.message.contains("other settings"))));
    super::wait_for("the stale server gone", Duration::from_secs(10), || {
        (c.servers)(&env).iter().all(|s| s.name != old)
    })
    .await;
    let acted = act_until(&rec, "a scale-up", |a| {
        matches!(a, Action::ScaleUp { .. } | Action::StartWarm { .. })
    })
    .await;
    assert!(
        acted.iter().all(|d| !matches!(&d.action, Action::StartWarm { servers, .. } if servers.iter().any(|s| s.name == old))),
        "{acted:#?}"
    );
}
