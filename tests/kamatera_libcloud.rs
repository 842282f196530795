//! An independent client in CI: Apache Libcloud's Kamatera driver (PyPI `apache-libcloud`,
//! installed by `.ci/run`) runs list → create → list → power off/on → reboot → create with
//! an SSH key only → list by a name regex → terminate against the simulated Kamatera API
//! (tests/libcloud_kamatera.py). Without the module
//! outside CI (`CI` unset) the test prints SKIPPED and passes; in CI it fails.

use std::time::Duration;

use nodewright::sim::kamatera::{SimKamatera, SimKamateraOptions};

/// Whether `python3` can import Libcloud; the reason when it cannot.
async fn libcloud_available() -> Result<(), String> {
    let out = tokio::process::Command::new("python3")
        .args(["-c", "import libcloud.compute.drivers.kamatera"])
        .output()
        .await
        .map_err(|e| format!("python3 cannot be run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "python3 cannot import libcloud ({}); install it with `python3 -m pip install apache-libcloud`",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[tokio::test]
async fn libcloud_kamatera_driver_runs_a_full_cycle_against_the_simulator() {
    if let Err(why) = libcloud_available().await {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the independent Kamatera client: {why}"
        );
        println!("SKIPPED: {why}");
        return;
    }
    let sim = SimKamatera::start(SimKamateraOptions {
        step: Duration::from_millis(40),
        ..SimKamateraOptions::default()
    })
    .await
    .expect("simulator starts");
    let url = sim.url();
    let (host, port) = url
        .trim_start_matches("http://")
        .rsplit_once(':')
        .expect("host:port");
    let o = sim.options();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/libcloud_kamatera.py");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("python3")
            .arg(script)
            .env("KAMATERA_SIM_HOST", host)
            .env("KAMATERA_SIM_PORT", port)
            .env("KAMATERA_CLIENT_ID", &o.client_id)
            .env("KAMATERA_SECRET", &o.secret)
            .output(),
    )
    .await
    .expect("the Libcloud cycle finishes within 2 minutes")
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("libcloud kamatera cycle: ok"),
        "Libcloud's cycle failed ({}):\n{stdout}\n{stderr}",
        out.status
    );

    // What the driver did, as the simulator saw it.
    let calls: Vec<String> = sim
        .calls()
        .iter()
        .map(|c| match &c.query {
            Some(q) => format!("{} {}?{q}", c.method, c.path),
            None => format!("{} {}", c.method, c.path),
        })
        .collect();
    for wanted in [
        "GET /service/server?datacenter=1",
        "GET /service/server?capabilities=1&datacenter=EU",
        "GET /service/server?sizes=1&datacenter=EU",
        "GET /service/server?images=1&datacenter=EU",
        "POST /service/server",
        "POST /service/server/info",
        "GET /service/servers",
        "POST /service/server/poweroff",
        "POST /service/server/poweron",
        "POST /service/server/reboot",
        "POST /service/server/terminate",
    ] {
        assert!(
            calls.iter().any(|c| c == wanted),
            "no `{wanted}` in {calls:#?}"
        );
    }
    assert!(sim.calls().iter().all(|c| c.authorized), "{calls:#?}");
    let kinds: Vec<(String, String)> = sim
        .commands()
        .into_iter()
        .map(|c| (c.kind, c.status))
        .collect();
    let done = |k: &str| kinds.iter().any(|(kind, s)| kind == k && s == "complete");
    for k in ["create", "poweroff", "poweron", "reboot", "terminate"] {
        assert!(done(k), "{k} not completed: {kinds:?}");
    }
    // The key-only create sent no password, only the key.
    let key_only = sim
        .calls()
        .into_iter()
        .filter(|c| c.method == "POST" && c.path == "/service/server")
        .filter_map(|c| c.body)
        .find(|b| b["name"] == "libcloud-key-only")
        .expect("the key-only create");
    assert_eq!(key_only["password"], "", "{key_only}");
    assert!(
        key_only["ssh-key"]
            .as_str()
            .is_some_and(|k| k.starts_with("ssh-ed25519 ")),
        "{key_only}"
    );
    assert!(sim.servers().is_empty(), "{:?}", sim.servers());
}
