//! An independent client in CI: Debian's `openstack` CLI (`python3-openstackclient`,
//! installed by `.ci/run`) against the simulated OpenStack with its defaults: it reads
//! Keystone's and each service's version documents, gets a token, finds Nova, Glance and
//! Neutron in the catalog, and lists, creates and refuses as it would against a cloud.
//! Without the CLI outside CI (`CI` unset) the test prints SKIPPED and passes; in CI it
//! fails.

use std::time::Duration;

use nodewright::sim::openstack::{SimOpenStack, SimOpenStackOptions};
use serde_json::Value;

/// Whether the `openstack` CLI runs; the reason when it does not.
async fn cli_available() -> Result<(), String> {
    match tokio::process::Command::new("openstack")
        .arg("--version")
        .output()
        .await
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`openstack --version` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!(
            "the `openstack` CLI cannot be run ({e}); install Debian's python3-openstackclient"
        )),
    }
}

struct Cli {
    env: Vec<(String, String)>,
}

impl Cli {
    fn for_sim(sim: &SimOpenStack) -> Cli {
        let o = sim.options();
        let env = [
            ("OS_AUTH_URL", sim.auth_url()),
            ("OS_IDENTITY_API_VERSION", "3".into()),
            ("OS_USERNAME", o.username.clone()),
            ("OS_PASSWORD", o.password.clone()),
            ("OS_USER_DOMAIN_NAME", o.domain.clone()),
            ("OS_PROJECT_NAME", o.project.clone()),
            ("OS_PROJECT_DOMAIN_NAME", o.domain.clone()),
            ("OS_REGION_NAME", o.region.clone()),
            ("OS_INTERFACE", "public".into()),
        ];
        Cli {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }

    /// Runs `openstack ARGS`: (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = tokio::process::Command::new("openstack");
        // Only the simulator's settings: none of the caller's OS_* or clouds.yaml.
        for (k, _) in std::env::vars() {
            if k.starts_with("OS_") {
                cmd.env_remove(k);
            }
        }
        let home = tempfile::tempdir().expect("home");
        cmd.env("HOME", home.path())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .args(args);
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("the CLI answers within 2 minutes")
            .expect("openstack runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-f", "json"]);
        let (ok, out, err) = self.run(&all).await;
        assert!(ok, "openstack {args:?} failed:\n{out}\n{err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstack_cli_lists_creates_and_gets_novas_refusal_for_an_unknown_key() {
    if let Err(why) = cli_available().await {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the openstack CLI: {why}"
        );
        println!("SKIPPED: {why}");
        return;
    }
    let sim = SimOpenStack::start(SimOpenStackOptions {
        boot_delay: Duration::from_millis(100),
        ..SimOpenStackOptions::default()
    })
    .await
    .expect("simulator starts");
    let cli = Cli::for_sim(&sim);

    let flavors = cli.json(&["flavor", "list"]).await;
    let names: Vec<&str> = flavors
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|f| f["Name"].as_str())
        .collect();
    assert_eq!(names, ["m1.small", "m1.medium", "m1.large"], "{flavors}");
    let large = &flavors.as_array().expect("list")[2];
    assert_eq!(large["RAM"], 8192, "{large}");

    let servers = cli.json(&["server", "list"]).await;
    assert_eq!(servers, serde_json::json!([]));

    // Nova refuses a key pair the user does not have, and the CLI says so.
    let (ok, out, err) = cli
        .run(&[
            "server",
            "create",
            "--flavor",
            "m1.small",
            "--image",
            "fedora-coreos",
            "--network",
            "private",
            "--key-name",
            "no-such-key",
            "cli-refused",
        ])
        .await;
    assert!(!ok, "created with an unknown key:\n{out}\n{err}");
    assert!(
        err.contains("Invalid key_name provided.") && err.contains("HTTP 400"),
        "{err}"
    );
    assert!(sim.servers().is_empty());

    // The same create with the user's key is accepted and listed.
    let created = cli
        .json(&[
            "server",
            "create",
            "--flavor",
            "m1.small",
            "--image",
            "fedora-coreos",
            "--network",
            "private",
            "--key-name",
            "ops",
            "--wait",
            "cli-made",
        ])
        .await;
    assert_eq!(created["name"], "cli-made", "{created}");
    assert_eq!(created["status"], "ACTIVE", "{created}");
    let servers = cli.json(&["server", "list", "--name", "^cli-"]).await;
    let listed: Vec<&str> = servers
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|s| s["Name"].as_str())
        .collect();
    assert_eq!(listed, ["cli-made"], "{servers}");
    let (ok, out, err) = cli.run(&["server", "delete", "--wait", "cli-made"]).await;
    assert!(ok, "delete:\n{out}\n{err}");
    assert!(sim.servers().is_empty(), "{:?}", sim.servers());

    // It found the services through their version documents, as against a real cloud.
    let paths: Vec<String> = sim.calls().iter().map(|c| c.path.clone()).collect();
    for doc in ["/identity/v3", "/compute/v2.1", "/image"] {
        assert!(
            paths.iter().any(|p| p.trim_end_matches('/') == doc),
            "no GET {doc} in {paths:#?}"
        );
    }
}
