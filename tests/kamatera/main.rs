//! The Kamatera provider against the simulated cloudcli API over loopback HTTP, and the
//! reconciler scaling a `provider: kamatera` group up and down with the simulated cluster.

use nodewright_testkit as common;

mod calls;
mod reconcile;
mod service;
mod sizes;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::{has_startup_taint, ready, recorder, running, Events};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use nodewright::act::Clouds;
use nodewright::cloud::kamatera::{
    time_tag, validate_settings, KamateraCredentials, KamateraProvider, KamateraSettings,
    ProviderOptions,
};
use nodewright::cloud::{CloudError, CloudProvider, CreateRequest};
use nodewright::cluster::{kubeconfig_from_file, KubeCluster};
use nodewright::config::Config;
use nodewright::model::ServerStatus;
use nodewright::plan::Action;
use nodewright::run::Reconciler;
use nodewright::sim::cluster::{SimCluster, SimClusterOptions, SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::SHIPPED_TEMPLATES;
use nodewright::sim::kamatera::{
    CreateFailure, SimKamatera, SimKamateraOptions, UnknownServerAnswer,
};
use nodewright::sim::{VmEvent, VmHook};

const GI: u64 = 1 << 30;

fn fast() -> ProviderOptions {
    ProviderOptions {
        poll_initial: Duration::from_millis(15),
        poll_max: Duration::from_millis(40),
        command_timeout: Duration::from_secs(10),
        ..ProviderOptions::default()
    }
}

/// Group settings: a base with `extra` lines added (or replacing base keys).
fn settings(extra: &str) -> KamateraSettings {
    let base = "datacenter: EU\nimage: ubuntu_server_24.04_64-bit\ncpu: 2B\nram: 4096 MiB\n";
    let overridden = |line: &str| {
        let key = line.split(':').next().unwrap_or("");
        extra.lines().any(|l| l.starts_with(&format!("{key}:")))
    };
    let kept: String = base
        .lines()
        .filter(|l| !overridden(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let yaml = format!("{kept}{extra}");
    nodewright::yaml::from_str(&yaml).expect("settings parse")
}

async fn sim_with(opts: SimKamateraOptions) -> (SimKamatera, Events) {
    let (events, hook) = recorder();
    let sim = SimKamatera::start(SimKamateraOptions {
        hook: Some(hook),
        ..opts
    })
    .await
    .expect("simulator starts");
    (sim, events)
}

async fn start_sim() -> (SimKamatera, Events) {
    sim_with(SimKamateraOptions::default()).await
}

fn creds(sim: &SimKamatera) -> KamateraCredentials {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kamatera.yaml");
    sim.write_credentials_file(&path)
        .expect("write credentials");
    KamateraCredentials::from_file(&path).expect("credentials load")
}

fn provider(sim: &SimKamatera, groups: &[(&str, KamateraSettings)]) -> KamateraProvider {
    let groups: BTreeMap<String, KamateraSettings> = groups
        .iter()
        .map(|(n, s)| (n.to_string(), s.clone()))
        .collect();
    KamateraProvider::with_options(creds(sim), groups, fast()).expect("provider builds")
}

/// A group settings hash as the config computes it (12 hex digits), stamped on every VM
/// these tests create.
const HASH: &str = "0a1b2c3d4e5f";

fn req(name: &str, group: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: "c1".into(),
        group: group.into(),
        user_data: format!("#!/bin/sh\necho joining {name}\n"),
        size: None,
        settings_hash: HASH.into(),
        zone: None,
    }
}

fn post_bodies(sim: &SimKamatera, path: &str) -> Vec<serde_json::Value> {
    sim.calls()
        .into_iter()
        .filter(|c| c.method == "POST" && c.path == path)
        .filter_map(|c| c.body)
        .collect()
}

/// A raw call to the simulator with the right API key: its HTTP status and JSON body.
async fn raw(
    sim: &SimKamatera,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let client =
        nodewright::cloud::http::client_builder(Duration::from_secs(5), Duration::from_secs(10))
            .build()
            .expect("client");
    let o = sim.options();
    let mut rb = client
        .request(method, format!("{}{path}", sim.url()))
        .header("AuthClientId", &o.client_id)
        .header("AuthSecret", &o.secret);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let resp = rb.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?} from {path}"));
    (status, value)
}
