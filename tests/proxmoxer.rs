//! An independent client in CI: proxmoxer (Debian's `python3-proxmoxer`, installed by
//! `.ci/run`) drives the simulated Proxmox VE over HTTPS with API-token authentication
//! (tests/proxmoxer_sim.py): hosts, VMs, clone, config, status, destroy. Without the
//! module outside CI (`CI` unset) the test prints SKIPPED and passes; in CI it fails.

use std::time::Duration;

use nodewright::sim::proxmox::{SimProxmox, SimProxmoxOptions, SimTls};

/// A python3 that imports proxmoxer (Debian's lives with the system python3), or why
/// there is none.
async fn python_with_proxmoxer() -> Result<String, String> {
    let mut why = Vec::new();
    for python in ["python3", "/usr/bin/python3"] {
        match tokio::process::Command::new(python)
            .args(["-c", "import proxmoxer"])
            .output()
            .await
        {
            Ok(out) if out.status.success() => return Ok(python.to_string()),
            Ok(out) => why.push(format!(
                "{python}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => why.push(format!("{python}: {e}")),
        }
    }
    Err(format!(
        "no python3 imports proxmoxer ({}); install Debian's python3-proxmoxer",
        why.join("; ")
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxmoxer_lists_clones_configures_and_destroys_over_https_with_a_token() {
    let python = match python_with_proxmoxer().await {
        Ok(p) => p,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run proxmoxer: {why}"
            );
            println!("SKIPPED: {why}");
            return;
        }
    };
    let tls = SimTls::self_signed().expect("certificate");
    let dir = tempfile::tempdir().expect("tmp");
    let ca = dir.path().join("pve-ca.pem");
    std::fs::write(&ca, &tls.cert_chain_pem).expect("ca file");
    let sim = SimProxmox::start(SimProxmoxOptions {
        tls: Some(tls),
        clone_delay: Duration::from_millis(50),
        ..SimProxmoxOptions::default()
    })
    .await
    .expect("simulator starts (needs the API schema)");
    let url = sim.url();
    let (host, port) = url
        .trim_start_matches("https://")
        .rsplit_once(':')
        .expect("host:port");
    let o = sim.options();
    let (user, token_name) = o.token_id.split_once('!').expect("USER!TOKEN");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxmoxer_sim.py");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&python)
            .arg(script)
            .env("PVE_SIM_HOST", host)
            .env("PVE_SIM_PORT", port)
            .env("PVE_SIM_CA", &ca)
            .env("PVE_USER", user)
            .env("PVE_TOKEN_NAME", token_name)
            .env("PVE_TOKEN_VALUE", &o.token_secret)
            .output(),
    )
    .await
    .expect("proxmoxer finishes within 2 minutes")
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("proxmoxer cycle: ok"),
        "proxmoxer's cycle failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // Every request proxmoxer sent was valid per the official schema, and every answer
    // the simulator gave it matched the schema's `returns`.
    assert!(sim.violations().is_empty(), "{:#?}", sim.violations());
    let endpoints: Vec<String> = sim
        .calls()
        .iter()
        .filter_map(|c| c.endpoint.clone().map(|e| format!("{} {e}", c.method)))
        .collect();
    for wanted in [
        "GET /nodes",
        "GET /nodes/{node}/qemu",
        "POST /nodes/{node}/qemu/{vmid}/clone",
        "PUT /nodes/{node}/qemu/{vmid}/config",
        "GET /nodes/{node}/qemu/{vmid}/status/current",
        "DELETE /nodes/{node}/qemu/{vmid}",
    ] {
        assert!(endpoints.iter().any(|e| e == wanted), "no {wanted}");
    }
}
