//! Issue 30: kubeadm joins that still work in month six. nodewright mints a bootstrap
//! token for each VM (`userData.bootstrapToken`), good for `provisionTimeout`, and deletes
//! it once the node joined; the simulated API server holds bootstrap tokens as a real one
//! does, so a `kubeadm join` boots into a node only with a valid, unexpired token. Over
//! loopback HTTP: the real loop, the simulated API server (HTTPS, its cluster-info) and
//! the simulated OpenStack.

use nodewright_testkit as common;

use std::time::{Duration, SystemTime};

use common::{app_pods, phase};
use k8s_openapi::api::core::v1::Secret;
use nodewright::plan::Action;
use nodewright::run::Reconciler;
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::{SimEnv, SimTimings};

const GI: u64 = 1 << 30;
const DAY: Duration = Duration::from_secs(24 * 3600);

fn config(user_data: &str) -> String {
    format!(
        r#"clusterName: kadm
freeMemoryTarget: 0 B
provisionTimeout: 2m
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 0
    maxSize: 4
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
{user_data}
"#
    )
}

/// The simulators, with `templates` (name, text) added to the shipped ones, and a
/// reconciler for a group of `user_data`.
async fn start(user_data: &str, templates: &[(&str, &str)]) -> (SimEnv, Reconciler) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    for (name, text) in templates {
        std::fs::write(env.templates.join(name), text).expect("template written");
    }
    let rec = common::reconciler_for(&env, &config(user_data)).await;
    (env, rec)
}

/// The bootstrap-token Secrets in kube-system.
fn tokens(env: &SimEnv) -> Vec<Secret> {
    env.cluster
        .list::<Secret>()
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some("bootstrap.kubernetes.io/token"))
        .collect()
}

/// `sha256:<hex>` of the cluster CA's public key, computed as kubeadm's documentation
/// says (`openssl x509 -pubkey | openssl rsa/pkey -pubin -outform der | sha256`).
fn openssl_ca_hash(env: &SimEnv) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let pem = env
        .cluster
        .ca_pem()
        .expect("the simulated API server serves HTTPS");
    let run = |args: &[&str], input: &[u8]| {
        let mut child = Command::new("openssl")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("openssl runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("written");
        let out = child.wait_with_output().expect("openssl ends");
        assert!(out.status.success(), "openssl {args:?}");
        out.stdout
    };
    let public = run(&["x509", "-pubkey", "-noout"], pem.as_bytes());
    let der = run(&["pkey", "-pubin", "-outform", "der"], &public);
    let digest = run(&["dgst", "-sha256", "-r"], &der);
    let hex = String::from_utf8_lossy(&digest)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    format!("sha256:{hex}")
}

/// What the simulators hold, for a failure message.
fn world(env: &SimEnv) -> String {
    let tokens: Vec<(Option<String>, Option<String>)> = tokens(env)
        .iter()
        .map(|s| {
            let description = s
                .data
                .as_ref()
                .and_then(|d| d.get("description"))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            (s.metadata.name.clone(), description)
        })
        .collect();
    let servers: Vec<String> = env.cloud.servers().iter().map(|s| s.name.clone()).collect();
    let nodes: Vec<Option<String>> = env
        .cluster
        .nodes()
        .iter()
        .map(|n| n.metadata.name.clone())
        .collect();
    let secret_calls: Vec<String> = env
        .cluster
        .calls()
        .iter()
        .filter(|c| c.resource == "secrets")
        .map(|c| format!("{} {}", c.verb, c.path))
        .collect();
    format!(
        "kubelets refused: {:?}; tokens: {tokens:?}; servers: {servers:?}; nodes: {nodes:?}; secret calls: {secret_calls:?}",
        env.cluster.kubelet_refusals()
    )
}

/// A `web` pod of 5 GiB, cycled until it runs on a node of the group.
async fn first_node(env: &SimEnv, rec: &Reconciler) {
    env.cluster
        .add_replicaset(
            "default",
            "web",
            1,
            SimPodTemplate::new("nginx:1.25", 5 * GI),
        )
        .expect("web");
    cycle_until(env, rec, Duration::ZERO, "a first node", |e| {
        running(e, "web") == 1
    })
    .await;
}

fn running(env: &SimEnv, app: &str) -> usize {
    app_pods(env, app)
        .iter()
        .filter(|p| phase(p) == "Running")
        .count()
}

/// Cycles at `ahead` past the wall clock (the server's clock moved as far) until `done`;
/// every action taken, as text.
async fn cycle_until(
    env: &SimEnv,
    rec: &Reconciler,
    ahead: Duration,
    what: &str,
    done: impl Fn(&SimEnv) -> bool,
) -> Vec<String> {
    let start = std::time::Instant::now();
    let mut acted = Vec::new();
    while !done(env) {
        let report = rec
            .cycle(SystemTime::now() + ahead)
            .await
            .expect("cycle succeeds against the simulators");
        if report.decision.action != Action::None {
            acted.push(report.decision.action.to_string());
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "no {what}; acted: {acted:#?}; {}",
            world(env)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    acted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minted_tokens_keep_a_kubeadm_group_scaling_up_past_a_day_and_go_once_joined() {
    let (env, rec) = start(
        "      template: kubeadm-join.cloud-init.yaml.j2\n      bootstrapToken: true",
        &[],
    )
    .await;
    first_node(&env, &rec).await;
    let server = &env.cloud.servers()[0];
    let user_data = server.user_data.clone().unwrap_or_default();
    assert!(user_data.contains("kind: JoinConfiguration"), "{user_data}");
    assert!(
        !user_data.contains("--token"),
        "the token is on no command line: {user_data}"
    );
    assert!(
        user_data.contains(&format!("\"{}\"", openssl_ca_hash(&env))),
        "the CA hash kubeadm's docs compute: {user_data}"
    );
    // Joined: its token is deleted.
    cycle_until(&env, &rec, Duration::ZERO, "its token deleted", |e| {
        tokens(e).is_empty()
    })
    .await;

    // A day and an hour later, past any token `kubeadm token create` made that day.
    let ahead = DAY + Duration::from_secs(3600);
    env.advance_clock(ahead);
    env.cluster
        .scale_replicaset("default", "web", 2)
        .expect("scale");
    cycle_until(&env, &rec, ahead, "a node on day two", |e| {
        running(e, "web") == 2
    })
    .await;
    assert_eq!(env.cloud.servers().len(), 2);
    cycle_until(&env, &rec, ahead, "its token deleted", |e| {
        tokens(e).is_empty()
    })
    .await;
}

/// What a user pasted before: the output of `kubeadm token create --print-join-command`.
const PASTED: &str = "#cloud-config\nruncmd:\n  - kubeadm join 10.0.0.1:6443 --token {{ token }} --discovery-token-ca-cert-hash sha256:00 --node-name {{ node_name }} --node-labels={{ labels | items | map(\"join\", \"=\") | join(\",\") }} --register-with-taints={{ all_taints | join(\",\") }}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pasted_join_token_stops_working_after_its_ttl_and_the_kubelet_says_why() {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    // Made by `kubeadm token create` at the start: good for 24 h.
    let expires = k8s_openapi::jiff::Timestamp::try_from(SystemTime::now() + DAY)
        .expect("time")
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let (env, rec) = start(
        "      template: pasted.yaml.j2\n      variables: {token: \"abcdef.0123456789abcdef\"}",
        &[("pasted.yaml.j2", PASTED)],
    )
    .await;
    env.cluster
        .add_object(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
            "data": {
                "token-id": b64("abcdef"), "token-secret": b64("0123456789abcdef"),
                "expiration": b64(&expires),
                "usage-bootstrap-authentication": b64("true"),
                "usage-bootstrap-signing": b64("true"),
            },
        }))
        .expect("token");
    first_node(&env, &rec).await;
    let ahead = DAY + Duration::from_secs(3600);
    env.advance_clock(ahead);
    env.cluster
        .scale_replicaset("default", "web", 2)
        .expect("scale");
    cycle_until(&env, &rec, ahead, "the day-two VM refused", |e| {
        e.cloud.servers().len() == 2
            && e.cluster
                .kubelet_refusals()
                .values()
                .any(|why| why.contains("invalid for this cluster or it has expired"))
    })
    .await;
    assert_eq!(
        running(&env, "web"),
        1,
        "no node joined with the expired token"
    );
}
