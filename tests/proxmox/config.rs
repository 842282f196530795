//! What a client reads back: the config `digest` follows every write, values are typed as
//! the schema types them, valid `cicustom`, `cpu` and `boot` values are accepted, and the
//! read endpoints a user's client calls answer.

use super::*;

async fn raw_sim() -> (SimProxmox, reqwest::Client, String, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = sim_with(SimProxmoxOptions::default()).await;
    let o = s.options().clone();
    let base = format!("{}/api2/json", s.url());
    (
        s,
        reqwest::Client::new(),
        base,
        format!("PVEAPIToken={}={}", o.token_id, o.token_secret),
    )
}

#[tokio::test]
async fn the_config_digest_changes_with_every_write_and_a_stale_one_is_refused() {
    let (s, http, base, token) = raw_sim().await;
    let url = format!("{base}/nodes/pve1/qemu/9000/config");
    let read = || async {
        let v: serde_json::Value = http
            .get(&url)
            .header("Authorization", &token)
            .send()
            .await
            .expect("read")
            .json()
            .await
            .expect("json");
        v["data"].clone()
    };
    let before = read().await;
    let digest = before["digest"].as_str().expect("digest").to_string();
    assert_eq!(digest.len(), 40, "{digest}");
    let put = |body: serde_json::Value| {
        http.put(&url)
            .header("Authorization", &token)
            .json(&body)
            .send()
    };
    let r = put(serde_json::json!({ "description": "first", "digest": digest }))
        .await
        .expect("write");
    assert_eq!(r.status(), 200);
    let after = read().await;
    assert_ne!(after["digest"], before["digest"]);
    // A write against the digest read before the first write is refused, as Proxmox
    // refuses a config someone else changed meanwhile.
    let r = put(serde_json::json!({ "description": "second", "digest": digest }))
        .await
        .expect("write");
    assert_eq!(r.status(), 500);
    let v: serde_json::Value = r.json().await.expect("json");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("detected modified configuration")),
        "{v}"
    );
    assert!(s.violations().is_empty(), "{:?}", s.violations());
}

#[tokio::test]
async fn config_numbers_are_json_numbers_and_cicustom_cpu_boot_are_accepted() {
    let (s, http, base, token) = raw_sim().await;
    let url = format!("{base}/nodes/pve1/qemu/9000/config");
    let r = http
        .put(&url)
        .header("Authorization", &token)
        .json(&serde_json::json!({
            "cicustom": "user=local:snippets/k3s-join.yaml,vendor=local:snippets/v.yaml",
            "cpu": "x86-64-v2-AES,flags=+aes;+pcid,phys-bits=host",
            "boot": "order=scsi0;ide2;net0",
            "onboot": 1, "balloon": 1024, "cpulimit": "1.5", "numa": 0,
        }))
        .send()
        .await
        .expect("write");
    let status = r.status();
    let body = r.text().await.expect("body");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = http
        .get(&url)
        .header("Authorization", &token)
        .send()
        .await
        .expect("read")
        .json()
        .await
        .expect("json");
    let cfg = &v["data"];
    assert_eq!(cfg["onboot"], 1, "{cfg}");
    assert_eq!(cfg["balloon"], 1024, "{cfg}");
    assert_eq!(cfg["cpulimit"], 1.5, "{cfg}");
    assert_eq!(cfg["cores"], 2, "{cfg}");
    assert_eq!(cfg["boot"], "order=scsi0;ide2;net0", "{cfg}");
    // An invalid one is still refused by the schema's format.
    let r = http
        .put(&url)
        .header("Authorization", &token)
        .json(&serde_json::json!({ "boot": "order=floppy0" }))
        .send()
        .await
        .expect("write");
    assert_eq!(r.status(), 400);
    let refused = s.violations();
    assert!(
        refused.len() == 1 && refused[0].contains("boot"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_read_endpoints_a_users_client_calls_answer() {
    let (s, http, base, token) = raw_sim().await;
    for path in [
        "/version",
        "/nodes",
        "/nodes/pve1/qemu",
        "/nodes/pve1/qemu/9000",
        "/nodes/pve1/qemu/9000/status/current",
        "/nodes/pve1/qemu/9000/config",
        "/nodes/pve1/storage",
        "/nodes/pve1/network",
        "/nodes/pve1/tasks",
        "/cluster/resources",
        "/cluster/status",
        "/cluster/nextid",
    ] {
        let r = http
            .get(format!("{base}{path}"))
            .header("Authorization", &token)
            .send()
            .await
            .expect("answers");
        assert_eq!(r.status(), 200, "{path}");
    }
    let v: serde_json::Value = http
        .get(format!("{base}/nodes/pve1/qemu"))
        .header("Authorization", &token)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let vmids: Vec<u64> = v["data"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|vm| vm["vmid"].as_u64())
        .collect();
    assert_eq!(vmids, [9000], "{v}");
    assert!(s.violations().is_empty(), "{:?}", s.violations());
}
