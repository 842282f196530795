//! The simulated Kubernetes API server at scale: seeding, lists and watches of a cluster
//! with 5,000 nodes and 150,000 pods, over loopback HTTP.
//!
//! Run: `cargo run --release --example apiserver_bench [nodes] [pods-per-node] [watchers] [changes]`
//! (defaults 5000 30 100 1000). A benchmark, not a test: it prints figures and asserts
//! only that the answers are complete.
//!
//! Figures:
//! - seeding (`SimCluster::seed_synthetic`) and the process's RSS after it and at the end
//!   (the server and this client share the process; the client keeps no objects);
//! - one unpaged list of every pod (first: objects encoded then; second: from the
//!   encodings cached in the store), and a list of every node;
//! - a paged list of every pod, 500 a page (as kube-rs's watcher and kubectl do);
//! - kube-rs's `watcher` syncing every pod, with the default list-then-watch and with
//!   streaming lists (`sendInitialEvents`);
//! - watch fan-out: `watchers` watches of every pod while `changes` pods are patched one
//!   after the other over HTTP: time from each patch's answer to each watcher seeing it
//!   (p50, p99, max), and events delivered per second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::Api;
use nodewright::sim::cluster::{SimCluster, SimClusterOptions, SyntheticCluster};

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// GETs `url` and returns (items in the answer, continue token, bytes).
async fn get_list(http: &reqwest::Client, url: &str) -> (usize, Option<String>, usize) {
    let body = http
        .get(url)
        .send()
        .await
        .expect("list request")
        .bytes()
        .await
        .expect("list body");
    let v: serde_json::Value = serde_json::from_slice(&body).expect("list is JSON");
    let items = v["items"].as_array().map_or(0, Vec::len);
    let cont = v["metadata"]["continue"].as_str().map(str::to_string);
    (items, cont, body.len())
}

async fn timed_list(http: &reqwest::Client, label: &str, url: &str, want: usize) {
    let t = Instant::now();
    let (items, _, bytes) = get_list(http, url).await;
    assert_eq!(items, want, "{label}: every object listed");
    println!(
        "{label:<34} {:>10}   {items} objects, {:.1} MiB",
        ms(t.elapsed()),
        bytes as f64 / (1 << 20) as f64
    );
}

async fn paged_list(http: &reqwest::Client, base: &str, want: usize) {
    let t = Instant::now();
    let (mut total, mut pages) = (0, 0);
    let mut cont: Option<String> = None;
    loop {
        let url = match &cont {
            Some(c) => format!("{base}?limit=500&continue={c}"),
            None => format!("{base}?limit=500"),
        };
        let (items, next, _) = get_list(http, &url).await;
        total += items;
        pages += 1;
        match next {
            Some(c) => cont = Some(c),
            None => break,
        }
    }
    assert_eq!(total, want, "paged list: every pod once");
    println!(
        "{:<34} {:>10}   {pages} pages",
        "list pods, 500 a page",
        ms(t.elapsed())
    );
}

async fn kube_watcher_sync(client: kube::Client, streaming: bool, want: usize) {
    let api: Api<Pod> = Api::all(client);
    let mut config = watcher::Config::default();
    if streaming {
        config = config.streaming_lists();
    }
    let t = Instant::now();
    let mut stream = watcher::watcher(api, config).boxed();
    let mut seen = 0;
    while let Some(ev) = stream.next().await {
        match ev.expect("watcher event") {
            Event::InitApply(_) => seen += 1,
            Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, want, "the watcher saw every pod");
    let label = if streaming {
        "kube watcher sync, streaming list"
    } else {
        "kube watcher sync, list + watch"
    };
    println!("{label:<34} {:>10}", ms(t.elapsed()));
}

/// Reads one watch stream, recording when each resourceVersion arrived.
async fn watch_reader(
    http: reqwest::Client,
    url: String,
    seen: Arc<Mutex<Vec<(u64, Instant)>>>,
    expect: usize,
) {
    let mut resp = http.get(&url).send().await.expect("watch request");
    let mut buf: Vec<u8> = Vec::new();
    let mut got = 0;
    while got < expect {
        let Ok(Some(chunk)) = resp.chunk().await else {
            break;
        };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let Ok(ev) = serde_json::from_slice::<serde_json::Value>(&line) else {
                continue;
            };
            if ev["type"] != "MODIFIED" {
                continue;
            }
            let rv = ev["object"]["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            seen.lock().expect("lock").push((rv, Instant::now()));
            got += 1;
        }
    }
}

async fn fan_out(sim: &SimCluster, http: &reqwest::Client, watchers: usize, changes: usize) {
    let base = sim.url();
    let rv = {
        let body = http
            .get(format!("{base}/api/v1/namespaces/bench-0/pods?limit=1"))
            .send()
            .await
            .expect("list")
            .bytes()
            .await
            .expect("body");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .to_string()
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let url = format!("{base}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=600");
        tasks.push(tokio::spawn(watch_reader(
            http.clone(),
            url,
            seen.clone(),
            changes,
        )));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    let t = Instant::now();
    for i in 0..changes {
        let url = format!(
            "{base}/api/v1/namespaces/bench-{}/pods/app-{:05}-00000",
            i % 10,
            i
        );
        let resp = http
            .patch(&url)
            .header("Content-Type", "application/merge-patch+json")
            .body(format!(
                "{{\"metadata\":{{\"labels\":{{\"bench-seq\":\"{i}\"}}}}}}"
            ))
            .send()
            .await
            .expect("patch");
        let at = Instant::now();
        let v: serde_json::Value = resp.json().await.expect("patched pod");
        let rv = v["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        sent.insert(rv, at);
    }
    let writes = t.elapsed();
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(120), task).await;
    }
    let total = t.elapsed();
    let seen = seen.lock().expect("lock");
    let mut lat: Vec<Duration> = seen
        .iter()
        .filter_map(|(rv, at)| sent.get(rv).map(|s| at.saturating_duration_since(*s)))
        .collect();
    lat.sort();
    assert_eq!(
        seen.len(),
        watchers * changes,
        "every watcher saw every change"
    );
    println!(
        "watch fan-out: {watchers} watchers x {changes} changes: writes {} ({:.0}/s), all delivered in {} ({:.0} events/s)",
        ms(writes),
        changes as f64 / writes.as_secs_f64(),
        ms(total),
        seen.len() as f64 / total.as_secs_f64()
    );
    println!(
        "  patch answered -> watcher has it: p50 {}, p99 {}, max {}",
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.99)),
        ms(percentile(&lat, 1.0))
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let nodes = arg(1, 5000);
    let per_node = arg(2, 30);
    let watchers = arg(3, 100);
    let changes = arg(4, 1000).min(nodes);
    let pods = nodes * per_node;
    println!("simulated API server: {nodes} nodes, {pods} pods");
    let sim = SimCluster::start(SimClusterOptions {
        watch_history: 50_000,
        ..Default::default()
    })
    .await
    .expect("start the simulated cluster");
    let base_rss = rss_mib();
    let t = Instant::now();
    sim.seed_synthetic(&SyntheticCluster {
        nodes,
        pods_per_node: per_node,
        ..Default::default()
    })
    .expect("seed");
    println!(
        "{:<34} {:>10}   RSS {:.0} MiB (before {:.0} MiB)",
        "seed",
        ms(t.elapsed()),
        rss_mib(),
        base_rss
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The admin's token, as the generated kubeconfig carries it (tokens are required).
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", sim.options().token)
            .parse()
            .expect("header value"),
    );
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("HTTP client");
    let url = sim.url();
    timed_list(
        &http,
        "list pods (first)",
        &format!("{url}/api/v1/pods"),
        pods,
    )
    .await;
    timed_list(
        &http,
        "list pods (again)",
        &format!("{url}/api/v1/pods"),
        pods,
    )
    .await;
    timed_list(&http, "list nodes", &format!("{url}/api/v1/nodes"), nodes).await;
    paged_list(&http, &format!("{url}/api/v1/pods"), pods).await;
    let client = sim.kube_client().await.expect("kube client");
    kube_watcher_sync(client.clone(), false, pods).await;
    kube_watcher_sync(client, true, pods).await;
    println!("RSS after lists (encodings cached): {:.0} MiB", rss_mib());
    fan_out(&sim, &http, watchers, changes).await;
    println!("RSS at the end: {:.0} MiB", rss_mib());
    sim.shutdown();
}
