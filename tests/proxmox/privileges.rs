//! Privileges: a token without the privilege a call needs gets Proxmox's 403 naming it,
//! and nodewright runs with exactly the privileges docs/proxmox.md lists.

use super::*;

/// The privileges of the role docs/proxmox.md tells users to create
/// (`pveum role add NodewrightAutoscaler -privs "..."`).
fn documented_privileges() -> BTreeSet<String> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/proxmox.md"))
        .expect("docs/proxmox.md");
    let start = docs
        .find("-privs \"")
        .expect("a pveum role add -privs line")
        + 8;
    let end = start + docs[start..].find('"').expect("closing quote");
    docs[start..end]
        .split(|c: char| c.is_whitespace() || c == '\\')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

fn without(privs: &BTreeSet<String>, p: &str) -> BTreeSet<String> {
    let mut out = privs.clone();
    assert!(out.remove(p), "{p} is not in {privs:?}");
    out
}

fn raw(s: &SimProxmox) -> (reqwest::Client, String, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let o = s.options();
    (
        reqwest::Client::new(),
        format!("{}/api2/json", s.url()),
        format!("PVEAPIToken={}={}", o.token_id, o.token_secret),
    )
}

fn as_json(params: &[(&str, &str)]) -> serde_json::Value {
    params
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// (status, message) of an answer.
async fn answer(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let v: serde_json::Value = r.json().await.expect("json");
    (status, v["message"].as_str().unwrap_or("").to_string())
}

/// A privilege taken away, the call it refuses (method, path, parameters) and the
/// `path, privilege` of Proxmox's message (empty for a failed `or`).
type Refusal<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);

#[tokio::test]
async fn a_token_without_a_privilege_gets_proxmoxs_403_naming_it() {
    let all = documented_privileges();
    let cases: &[Refusal] = &[
        (
            "VM.Clone",
            "POST",
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "120"), ("name", "c1")],
            "/vms/9000, VM.Clone",
        ),
        (
            "VM.Allocate",
            "POST",
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "120"), ("name", "c1")],
            "",
        ),
        (
            "Datastore.AllocateSpace",
            "POST",
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "120"), ("name", "c1")],
            "/storage/local-lvm, Datastore.AllocateSpace",
        ),
        ("Sys.Audit", "GET", "/cluster/status", &[], "/, Sys.Audit"),
        (
            "VM.Audit",
            "GET",
            "/nodes/pve1/qemu/9000/config",
            &[],
            "/vms/9000, VM.Audit",
        ),
        (
            "Datastore.AllocateTemplate",
            "POST",
            "/nodes/pve1/storage/local/upload",
            &[("content", "iso"), ("filename", "x.iso")],
            "/storage/local, Datastore.AllocateTemplate",
        ),
    ];
    for (privilege, method, path, params, what) in cases {
        let s = sim_with(SimProxmoxOptions {
            privileges: Some(without(&all, privilege)),
            ..SimProxmoxOptions::default()
        })
        .await;
        let (http, base, token) = raw(&s);
        let url = format!("{base}{path}");
        let req = if *method == "GET" {
            http.get(url).query(params)
        } else {
            http.post(url).json(&as_json(params))
        };
        let (status, message) = answer(
            req.header("Authorization", &token)
                .send()
                .await
                .expect("answers"),
        )
        .await;
        let want = if what.is_empty() {
            "Permission check failed\n".to_string()
        } else {
            format!("Permission check failed ({what})\n")
        };
        assert_eq!(
            (status, message.as_str()),
            (403, want.as_str()),
            "{privilege}"
        );
        // With the privilege, the same call passes the check.
        let s = sim_with(SimProxmoxOptions {
            privileges: Some(all.clone()),
            ..SimProxmoxOptions::default()
        })
        .await;
        let (http, base, token) = raw(&s);
        let url = format!("{base}{path}");
        let req = if *method == "GET" {
            http.get(url).query(params)
        } else {
            http.post(url).json(&as_json(params))
        };
        let (status, message) = answer(
            req.header("Authorization", &token)
                .send()
                .await
                .expect("answers"),
        )
        .await;
        assert_ne!(status, 403, "{privilege}: {message}");
    }
}

#[tokio::test]
async fn each_config_key_needs_its_own_privilege() {
    let all = documented_privileges();
    let s = sim_with(SimProxmoxOptions {
        privileges: Some(without(&all, "VM.Config.Cloudinit")),
        ..SimProxmoxOptions::default()
    })
    .await;
    let (http, base, token) = raw(&s);
    let put = |form: &'static [(&'static str, &'static str)]| {
        http.put(format!("{base}/nodes/pve1/qemu/9000/config"))
            .header("Authorization", &token)
            .json(&as_json(form))
            .send()
    };
    let (status, message) = answer(put(&[("ciuser", "core")]).await.expect("answers")).await;
    assert_eq!(
        (status, message.as_str()),
        (
            403,
            "Permission check failed (/vms/9000, VM.Config.Cloudinit)\n"
        )
    );
    // A key of another privilege in the same role is still allowed.
    let (status, message) = answer(put(&[("cores", "4")]).await.expect("answers")).await;
    assert_eq!(status, 200, "{message}");
}

/// The simulator's copy of each endpoint's `permissions.check` is the official schema's.
#[test]
fn the_simulators_permission_checks_are_the_schemas() {
    let text = std::fs::read_to_string(nodewright::sim::proxmox::schema::schema_path())
        .expect("the API schema file");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("schema json");
    fn find<'a>(nodes: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
        for n in nodes.as_array()? {
            if n["path"] == path {
                return Some(n);
            }
            if let Some(found) = find(&n["children"], path) {
                return Some(found);
            }
        }
        None
    }
    for (method, path) in nodewright::sim::proxmox::schema::ROUTES {
        let info = &find(&schema, path).unwrap_or_else(|| panic!("{path}"))["info"][method];
        let official = &info["permissions"]["check"];
        let ours = nodewright::sim::proxmox::perms::CHECKS
            .iter()
            .find(|(m, p, _)| m == method && p == path)
            .map(|(_, _, c)| serde_json::from_str::<serde_json::Value>(c).expect("check json"));
        match ours {
            Some(c) => assert_eq!(&c, official, "{method} {path}"),
            None => assert!(
                official.is_null(),
                "{method} {path}: the schema checks {official}"
            ),
        }
    }
}

/// Runs the reconciler with `privileges` over a `ci` (cloud-init) and a `ga` (guest
/// agent) group of `min` nodes each; the errors it met.
async fn scale(env: &e2e::Env, min: u32, done: impl Fn() -> bool) -> Vec<String> {
    let groups = format!(
        "{}{}",
        e2e::group("ci", min, "{template: k3s-shared}"),
        e2e::group("ga", min, "{template: agent-shared, join: guestAgent}")
    );
    let rec = e2e::reconciler(env, &groups).await;
    e2e::drive(&rec, Duration::from_secs(40), done).await
}

fn joined(env: &e2e::Env) -> Vec<String> {
    env.cluster
        .nodes()
        .into_iter()
        .filter(e2e::ready_joined)
        .filter_map(|n| n.metadata.name)
        .filter(|n| n.starts_with("e2e-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodewright_scales_up_and_down_with_exactly_the_documented_privileges() {
    let env = e2e::env_with(SimProxmoxOptions {
        privileges: Some(documented_privileges()),
        ..SimProxmoxOptions::default()
    })
    .await;
    let errors = scale(&env, 1, || joined(&env).len() == 2).await;
    assert!(
        errors
            .iter()
            .all(|e| !e.contains("Permission check failed")),
        "{errors:?}"
    );
    let names = joined(&env);
    for n in &names {
        e2e::cordon(&env, n).await;
    }
    let errors = scale(&env, 0, || env.pve.guests().is_empty()).await;
    assert!(
        errors
            .iter()
            .all(|e| !e.contains("Permission check failed")),
        "{errors:?}"
    );
    let denied: Vec<u16> = env
        .pve
        .calls()
        .iter()
        .map(|c| c.status)
        .filter(|s| *s == 403)
        .collect();
    assert!(denied.is_empty(), "{} calls refused", denied.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_privilege_is_an_error_naming_it_not_a_silent_stall() {
    for privilege in ["VM.Clone", "VM.Config.Cloudinit", "VM.PowerMgmt"] {
        let env = e2e::env_with(SimProxmoxOptions {
            privileges: Some(without(&documented_privileges(), privilege)),
            ..SimProxmoxOptions::default()
        })
        .await;
        let groups = e2e::group("ci", 1, "{template: k3s-shared}");
        let rec = e2e::reconciler(&env, &groups).await;
        let mut seen = Vec::new();
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Err(e) = rec.cycle(SystemTime::now()).await {
                seen.push(e.to_string());
            }
            if seen.iter().any(|e| e.contains(privilege)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            seen.iter()
                .any(|e| e.contains("Permission check failed") && e.contains(privilege)),
            "without {privilege}: {seen:?}"
        );
    }
}

/// Proxmox lists a storage to a token holding `Datastore.Audit` or
/// `Datastore.AllocateSpace` on it and leaves the others out, with no error: without
/// them `nodewright check` and the seed's storage choice say the privilege may be
/// missing rather than that the storage does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storages_hidden_by_a_missing_datastore_audit_are_named_as_such() {
    let mut privs = without(&documented_privileges(), "Datastore.Audit");
    privs.remove("Datastore.AllocateSpace");
    let s = sim_with(SimProxmoxOptions {
        privileges: Some(privs),
        ..SimProxmoxOptions::default()
    })
    .await;
    let e = provider(&s, &[("ci", "template: k3s-shared\n")])
        .check()
        .await
        .expect_err("the template's storage is hidden");
    assert!(
        e.to_string()
            .contains("of the template is not visible on host")
            && e.to_string().contains("Datastore.Audit on /storage/"),
        "{e}"
    );
    // And with only Datastore.Audit gone, Datastore.AllocateSpace still shows them.
    let s = sim_with(SimProxmoxOptions {
        privileges: Some(without(&documented_privileges(), "Datastore.Audit")),
        ..SimProxmoxOptions::default()
    })
    .await;
    let lines = provider(&s, &[("ci", "template: k3s-shared\n")])
        .check()
        .await
        .expect("storages visible through Datastore.AllocateSpace");
    assert!(!lines.is_empty());
}

/// Without `Sys.Audit` Proxmox lists no host: `nodewright check` names the privilege
/// instead of passing with no host to place VMs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_without_sys_audit_names_it() {
    let s = sim_with(SimProxmoxOptions {
        privileges: Some(without(&documented_privileges(), "Sys.Audit")),
        ..SimProxmoxOptions::default()
    })
    .await;
    let e = provider(&s, &[("ci", "template: k3s-shared\n")])
        .check()
        .await
        .expect_err("no host visible");
    assert!(
        e.to_string().contains("lists no host") && e.to_string().contains("Sys.Audit"),
        "{e}"
    );
}
