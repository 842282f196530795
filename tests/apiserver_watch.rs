//! The simulated API server's list and watch semantics over loopback HTTP, checked with
//! independent clients: the official Python client's `watch=True`, kube-rs's
//! `runtime::watcher` (list-then-watch and streaming lists, relisting after 410 Gone),
//! and raw requests for query booleans, option validation and list paging.
//!
//! The Python test needs python3 and the `kubernetes` package (`pip install
//! kubernetes`, as .ci/run does): it prints SKIPPED without python3, and without the
//! package too unless `CI` is set, where it fails.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::Api;
use nodewright::sim::cluster::{SimCluster, SimClusterOptions, SimNodeSpec, SimPodTemplate};

const WAIT: Duration = Duration::from_secs(20);

async fn start(opts: SimClusterOptions) -> SimCluster {
    let sim = SimCluster::start(opts).await.expect("start sim");
    sim.add_node(SimNodeSpec::new("n1", 8 << 30)).expect("node");
    sim
}

/// A client sending the admin's bearer token (the generated kubeconfig's).
fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    let value = format!("Bearer {}", SimClusterOptions::default().token);
    headers.insert(
        reqwest::header::AUTHORIZATION,
        value.parse().expect("header"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client")
}

/// GET and return (status, body).
async fn get(url: &str) -> (u16, String) {
    let resp = http().get(url).send().await.expect("request");
    let code = resp.status().as_u16();
    // A watch answer is a stream: read what arrives within a moment.
    let mut body = Vec::new();
    let mut resp = resp;
    while let Ok(Ok(Some(chunk))) =
        tokio::time::timeout(Duration::from_millis(300), resp.chunk()).await
    {
        body.extend_from_slice(&chunk);
    }
    (code, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_booleans_and_options_as_the_real_server_reads_them() {
    let sim = start(SimClusterOptions::default()).await;
    sim.add_pod("default", "p1", SimPodTemplate::new("busybox:1", 0))
        .expect("pod");
    let pods = format!("{}/api/v1/namespaces/default/pods", sim.url());
    for spelling in ["True", "true", "1", "yes"] {
        let (code, body) = get(&format!("{pods}?watch={spelling}&timeoutSeconds=1")).await;
        assert_eq!(code, 200);
        assert!(
            body.starts_with("{\"type\":\"ADDED\""),
            "watch={spelling} watches: {body}"
        );
    }
    for spelling in ["False", "false", "0"] {
        let (code, body) = get(&format!("{pods}?watch={spelling}")).await;
        assert_eq!(code, 200);
        assert!(
            body.contains("\"kind\":\"PodList\""),
            "watch={spelling} lists"
        );
    }
    let (code, body) = get(&format!("{pods}?watch=true&timeoutSeconds=soon")).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("timeoutSeconds"), "{body}");
    let (code, body) = get(&format!("{pods}?watch=1&sendInitialEvents=true")).await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    );
    let (code, body) = get(&format!("{pods}?sendInitialEvents=true")).await;
    assert_eq!(code, 422);
    assert!(body.contains("sendInitialEvents is forbidden for list"));

    // A streaming list ends its initial events with the initial-events-end bookmark.
    let (code, body) = get(&format!(
        "{pods}?watch=1&sendInitialEvents=1&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=1&timeoutSeconds=1"
    ))
    .await;
    assert_eq!(code, 200);
    let lines: Vec<&str> = body.lines().collect();
    assert!(
        lines[0].contains("\"ADDED\"") && lines[0].contains("\"p1\""),
        "{body}"
    );
    assert!(
        lines[1].contains("\"BOOKMARK\"") && lines[1].contains("k8s.io/initial-events-end"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_lists_are_consistent_and_expire() {
    let sim = start(SimClusterOptions {
        watch_history: 16,
        ..Default::default()
    })
    .await;
    for i in 0..5 {
        sim.add_pod(
            "default",
            &format!("p{i}"),
            SimPodTemplate::new("busybox:1", 0),
        )
        .expect("pod");
    }
    let pods = format!("{}/api/v1/namespaces/default/pods", sim.url());
    let page = |body: &str| -> (Vec<String>, Option<String>, String) {
        let v: serde_json::Value = serde_json::from_str(body).expect("json");
        let names = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        let cont = v["metadata"]["continue"].as_str().map(str::to_string);
        let rv = v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (names, cont, rv)
    };
    let (_, body) = get(&format!("{pods}?limit=2")).await;
    let (names, cont, rv1) = page(&body);
    assert_eq!(names, ["p0", "p1"]);
    let cont = cont.expect("a continue token");
    // Changes after the first page do not show in the next ones.
    sim.add_pod("default", "p2a", SimPodTemplate::new("busybox:1", 0))
        .expect("pod");
    let (_, body) = get(&format!("{pods}?limit=2&continue={cont}")).await;
    let (names, cont, rv2) = page(&body);
    assert_eq!(
        (names, rv2),
        (vec!["p2".to_string(), "p3".to_string()], rv1)
    );
    // Once the history of that version is forgotten, the token is 410 Expired.
    for i in 0..20 {
        sim.add_namespace(&format!("ns-{i}")).expect("namespace");
    }
    let (code, body) = get(&format!("{pods}?limit=2&continue={}", cont.expect("more"))).await;
    assert_eq!(code, 410, "{body}");
    assert!(body.contains("\"reason\":\"Expired\""), "{body}");
    let (code, body) = get(&format!(
        "{pods}?resourceVersion=2&resourceVersionMatch=Exact"
    ))
    .await;
    assert_eq!(code, 410, "{body}");
}

async fn next_event(
    stream: &mut (impl futures::Stream<Item = watcher::Result<Event<Pod>>> + Unpin),
) -> watcher::Result<Event<Pod>> {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("watcher event in time")
        .expect("watcher stream goes on")
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watcher_syncs_both_ways_and_sees_changes() {
    let sim = start(SimClusterOptions::default()).await;
    sim.add_pod("default", "before", SimPodTemplate::new("busybox:1", 0))
        .expect("pod");
    let client = sim.kube_client().await.expect("client");
    for streaming in [false, true] {
        let mut config = watcher::Config::default();
        if streaming {
            config = config.streaming_lists();
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let mut stream = watcher::watcher(api, config).boxed();
        let mut initial = Vec::new();
        loop {
            match next_event(&mut stream).await.expect("no error") {
                Event::Init => {}
                Event::InitApply(p) => initial.push(name(&p)),
                Event::InitDone => break,
                other => panic!("unexpected {other:?} before InitDone"),
            }
        }
        assert!(initial.contains(&"before".to_string()), "{initial:?}");
        let new = format!("after-{streaming}");
        sim.add_pod("default", &new, SimPodTemplate::new("busybox:1", 0))
            .expect("pod");
        loop {
            if let Event::Apply(p) = next_event(&mut stream).await.expect("no error") {
                if name(&p) == new {
                    break;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watcher_relists_after_410_gone() {
    let sim = start(SimClusterOptions {
        watch_history: 16,
        ..Default::default()
    })
    .await;
    let client = sim.kube_client().await.expect("client");
    let api: Api<Pod> = Api::namespaced(client, "default");
    // Without bookmarks, a selective watch that saw nothing resumes from its list's
    // version, which the changes below push out of the history.
    let config = watcher::Config::default()
        .labels("app=rare")
        .timeout(1)
        .disable_bookmarks();
    let mut stream = watcher::watcher(api, config).boxed();
    let mut inits = 0;
    loop {
        if let Event::InitDone = next_event(&mut stream).await.expect("no error") {
            inits += 1;
            break;
        }
    }
    // Pod writes: the server keeps a window per resource, as the real watch cache does.
    for i in 0..40 {
        sim.add_pod(
            "default",
            &format!("filler-{i}"),
            SimPodTemplate::new("busybox:1", 0),
        )
        .expect("pod");
    }
    let mut gone = false;
    while inits < 2 {
        match next_event(&mut stream).await {
            Err(watcher::Error::WatchError(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
                gone = true;
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(Event::InitDone) => inits += 1,
            Ok(_) => {}
        }
    }
    assert!(gone, "the watcher got 410 Gone before relisting");
    sim.add_pod(
        "default",
        "rare-1",
        SimPodTemplate::new("busybox:1", 0).label("app", "rare"),
    )
    .expect("pod");
    loop {
        if let Ok(Event::Apply(p)) = next_event(&mut stream).await {
            assert_eq!(name(&p), "rare-1");
            break;
        }
    }
}

const PYTHON_WATCH: &str = r#"
import sys
from kubernetes import client, config, watch
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_pod, "default", timeout_seconds=20):
    name = ev["object"].metadata.name
    print(ev["type"], name, flush=True)
    if name == "py-2":
        w.stop()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_watch_true_sees_pods() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output();
    match probe {
        Err(_) => {
            println!("SKIPPED: python3 not found");
            return;
        }
        Ok(out) if !out.status.success() => {
            let why = String::from_utf8_lossy(&out.stderr);
            if std::env::var_os("CI").is_some() {
                panic!("the kubernetes Python package does not import in CI: {why}");
            }
            println!(
                "SKIPPED: python package kubernetes not installed (pip install kubernetes): {why}"
            );
            return;
        }
        Ok(_) => {}
    }
    let sim = start(SimClusterOptions::default()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    sim.add_pod("default", "py-1", SimPodTemplate::new("busybox:1", 0))
        .expect("pod");
    let child = tokio::process::Command::new("python3")
        .arg("-c")
        .arg(PYTHON_WATCH)
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run python3");
    // Let the watch start, then add the pod it waits for.
    let calls_watch = |s: &SimCluster| {
        s.calls()
            .iter()
            .any(|c| c.verb == "watch" && c.resource == "pods")
    };
    assert!(
        sim.wait_until(calls_watch, WAIT).await,
        "python never watched: {:?}",
        sim.calls()
    );
    sim.add_pod("default", "py-2", SimPodTemplate::new("busybox:1", 0))
        .expect("pod");
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("python finished in time")
        .expect("python output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.contains(&"ADDED py-1"), "{stdout}");
    assert!(lines.contains(&"ADDED py-2"), "{stdout}");
    let watch = sim
        .calls()
        .into_iter()
        .find(|c| c.verb == "watch")
        .map(|c| c.path);
    assert_eq!(watch.as_deref(), Some("/api/v1/namespaces/default/pods"));
}
