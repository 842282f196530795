//! Helpers shared by the integration tests (`mod common;` in each test file).
// Each test file is its own crate and uses only some of these helpers.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright::sim::{VmEvent, VmHook};
use nodewright::STARTUP_TAINT_KEY;

/// The crate's root directory.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The node's `Ready` condition is `True`.
pub fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The node still carries nodewright's startup taint.
pub fn has_startup_taint(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == STARTUP_TAINT_KEY))
}

/// The pod's phase, `""` when it has none yet.
pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

pub fn running(p: &Pod) -> bool {
    phase(p) == "Running"
}

/// VM events a simulated cloud reported, in order.
pub type Events = Arc<Mutex<Vec<VmEvent>>>;

/// A hook for a simulated cloud that records its events.
pub fn recorder() -> (Events, VmHook) {
    let events: Events = Arc::default();
    let sink = events.clone();
    (
        events,
        Arc::new(move |e| sink.lock().unwrap_or_else(|p| p.into_inner()).push(e)),
    )
}

/// A child process killed (and reaped) when this is dropped.
pub struct Killed(pub Child);

impl Killed {
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The real `nodewright` binary, pointed at `env`'s cluster, clouds and `config` through
/// the environment variables a user would set, with nothing inherited that could redirect
/// it (`KUBECONFIG`, `POD_NAMESPACE`).
pub fn nodewright_for(
    env: &nodewright::sim::env::SimEnv,
    config: &std::path::Path,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nodewright"));
    cmd.envs(env.env_vars(config))
        .env_remove("KUBECONFIG")
        .env_remove("POD_NAMESPACE");
    cmd
}

/// A cordon as a person makes it, or (`ours`) as nodewright makes it: with the
/// annotations that say why and since when.
pub fn cordon_patch(ours: bool) -> serde_json::Value {
    if !ours {
        return serde_json::json!({"spec": {"unschedulable": true}});
    }
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    serde_json::json!({
        "metadata": {"annotations": {
            nodewright::ANNOTATION_CORDONED: "scale-down: empty",
            nodewright::ANNOTATION_CORDONED_AT: now,
            nodewright::ANNOTATION_DISRUPTION: "empty",
        }},
        "spec": {"unschedulable": true}
    })
}
