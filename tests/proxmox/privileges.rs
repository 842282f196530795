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

/// What nodewright reports while it runs `groups` with the documented privileges but
/// `privilege`: each cycle's error (what the log says), the decision's reasons and notes
/// (what `nodewright plan` prints), until one names `wanted` (returned) or 30 s pass
/// (the test fails with all it saw: a silent stall).
async fn reported_without(privilege: &str, groups: &str, wanted: &str) -> String {
    let env = e2e::env_with(SimProxmoxOptions {
        privileges: Some(without(&documented_privileges(), privilege)),
        ..SimProxmoxOptions::default()
    })
    .await;
    let rec = e2e::reconciler(&env, groups).await;
    let mut seen: Vec<String> = Vec::new();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        match rec.cycle_detailed(SystemTime::now()).await {
            Err(e) => seen.push(e.to_string()),
            Ok(c) => {
                if let Err(e) = &c.result {
                    seen.push(e.to_string());
                }
                let d = &c.decision;
                seen.extend(d.reasons.iter().chain(&d.notes).map(|r| r.message.clone()));
            }
        }
        if let Some(hit) = seen.iter().find(|e| e.contains(wanted)) {
            return hit.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen.dedup();
    panic!("without {privilege}, nothing nodewright reported in 30 s says {wanted:?}: {seen:#?}");
}

/// A `join: cloudInit` group (the seed ISO) of one node.
fn seed_group() -> String {
    e2e::group("ci", 1, "{template: k3s-shared}")
}

/// A `join: guestAgent` group of one node.
fn agent_group() -> String {
    e2e::group("ga", 1, "{template: agent-shared, join: guestAgent}")
}

/// The 403 Proxmox answers for `privilege` on `path`, as nodewright passes it on.
fn refused(path: &str, privilege: &str) -> String {
    format!("Permission check failed ({path}, {privilege})")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_audit_nodewright_says_the_token_sees_no_vm() {
    let said = reported_without("VM.Audit", &seed_group(), "lacks VM.Audit on /vms").await;
    assert!(said.contains("template k3s-shared"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_clone_the_clone_is_refused_naming_it() {
    reported_without("VM.Clone", &seed_group(), &refused("/vms/9001", "VM.Clone")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_allocate_the_clone_error_names_it() {
    // Proxmox's answer names nothing (a failed `or`); nodewright adds what is missing.
    let said = reported_without("VM.Allocate", &seed_group(), "lacks VM.Allocate on /vms/").await;
    assert!(said.contains("Permission check failed"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_power_mgmt_the_start_is_refused_naming_it() {
    reported_without("VM.PowerMgmt", &seed_group(), ", VM.PowerMgmt)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_config_cpu_setting_cores_is_refused_naming_it() {
    let groups = e2e::group("ci", 1, "{template: k3s-shared, cores: 4}");
    reported_without("VM.Config.CPU", &groups, ", VM.Config.CPU)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_config_memory_setting_memory_is_refused_naming_it() {
    let groups = e2e::group("ci", 1, "{template: k3s-shared, memory: 6 GiB}");
    reported_without("VM.Config.Memory", &groups, ", VM.Config.Memory)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_config_cloudinit_the_config_is_refused_naming_it() {
    reported_without(
        "VM.Config.Cloudinit",
        &seed_group(),
        ", VM.Config.Cloudinit)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_config_network_setting_the_bridge_is_refused_naming_it() {
    let groups = e2e::group("ci", 1, "{template: k3s-shared, bridge: vmbr1}");
    reported_without("VM.Config.Network", &groups, ", VM.Config.Network)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sdn_use_the_bridge_is_refused_naming_it() {
    let groups = e2e::group("ci", 1, "{template: k3s-shared, bridge: vmbr1}");
    reported_without(
        "SDN.Use",
        &groups,
        &refused("/sdn/zones/localnetwork/vmbr1", "SDN.Use"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_config_options_the_ownership_tags_are_refused_naming_it() {
    reported_without("VM.Config.Options", &seed_group(), ", VM.Config.Options)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_config_cdrom_the_seed_drive_is_refused_naming_it() {
    reported_without("VM.Config.CDROM", &seed_group(), ", VM.Config.CDROM)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vm_guest_agent_unrestricted_the_join_is_refused_naming_it() {
    reported_without(
        "VM.GuestAgent.Unrestricted",
        &agent_group(),
        "VM.GuestAgent.Unrestricted",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_datastore_audit_nodewright_says_the_template_storage_is_hidden() {
    let said = reported_without(
        "Datastore.Audit",
        &seed_group(),
        "lacks Datastore.Audit on /storage/ceph",
    )
    .await;
    assert!(said.contains("does not list storage ceph"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_datastore_allocate_space_the_clone_is_refused_naming_it() {
    reported_without(
        "Datastore.AllocateSpace",
        &seed_group(),
        &refused("/storage/ceph", "Datastore.AllocateSpace"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_datastore_allocate_template_the_seed_upload_is_refused_naming_it() {
    reported_without(
        "Datastore.AllocateTemplate",
        &seed_group(),
        &refused("/storage/local", "Datastore.AllocateTemplate"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_datastore_allocate_the_joined_nodes_seed_stays_and_the_plan_says_why() {
    let said = reported_without(
        "Datastore.Allocate",
        &seed_group(),
        &refused("/storage/local", "Datastore.Allocate"),
    )
    .await;
    assert!(said.contains("cloud-init seed of VM"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sys_audit_nodewright_says_the_hosts_come_without_figures() {
    let said = reported_without("Sys.Audit", &seed_group(), "lacks Sys.Audit on /nodes/").await;
    assert!(said.contains("without its CPU and memory"), "{said}");
}

/// Every privilege of the documented role has its test above: the role holds nothing
/// nodewright does not need, and each one's absence is reported naming it.
#[test]
fn each_documented_privilege_has_a_test_naming_it_when_missing() {
    let tested = [
        "VM.Audit",
        "VM.Clone",
        "VM.Allocate",
        "VM.PowerMgmt",
        "VM.Config.CPU",
        "VM.Config.Memory",
        "VM.Config.Cloudinit",
        "VM.Config.Network",
        "SDN.Use",
        "VM.Config.Options",
        "VM.Config.CDROM",
        "VM.GuestAgent.Unrestricted",
        "Datastore.Audit",
        "Datastore.AllocateSpace",
        "Datastore.AllocateTemplate",
        "Datastore.Allocate",
        "Sys.Audit",
    ];
    let tested: BTreeSet<String> = tested.iter().map(|p| p.to_string()).collect();
    assert_eq!(documented_privileges(), tested);
}

/// GET `path` with the simulator's token; the answer's `data`.
async fn get_data(s: &SimProxmox, path: &str) -> serde_json::Value {
    let (http, base, token) = raw(s);
    let r = http
        .get(format!("{base}{path}"))
        .header("Authorization", &token)
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status().as_u16(), 200, "{path}");
    let v: serde_json::Value = r.json().await.expect("json");
    v["data"].clone()
}

/// Proxmox's `/cluster/resources` lists a storage only to a token holding
/// `Datastore.Audit` on it, while a host's storage list also shows it for
/// `Datastore.AllocateSpace`: without `Datastore.Audit` a shared template would look
/// local, so `nodewright check` names the privilege.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storages_hidden_by_a_missing_datastore_audit_are_named_as_such() {
    let s = sim_with(SimProxmoxOptions {
        privileges: Some(without(&documented_privileges(), "Datastore.Audit")),
        ..SimProxmoxOptions::default()
    })
    .await;
    let listed = get_data(&s, "/cluster/resources?type=storage").await;
    assert_eq!(listed, serde_json::json!([]));
    let on_host = get_data(&s, "/nodes/pve2/storage").await;
    assert!(
        on_host
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["storage"] == "ceph")),
        "Datastore.AllocateSpace shows it on the host: {on_host}"
    );
    let e = provider(&s, &[("ci", "template: k3s-shared\n")])
        .check()
        .await
        .expect_err("the template's storage is hidden");
    assert!(
        e.to_string().contains("does not list storage ceph")
            && e.to_string()
                .contains("lacks Datastore.Audit on /storage/ceph"),
        "{e}"
    );
    // Without Datastore.AllocateSpace too, the host's list hides it as well.
    let mut privs = without(&documented_privileges(), "Datastore.Audit");
    privs.remove("Datastore.AllocateSpace");
    let s = sim_with(SimProxmoxOptions {
        privileges: Some(privs),
        ..SimProxmoxOptions::default()
    })
    .await;
    assert_eq!(
        get_data(&s, "/nodes/pve2/storage").await,
        serde_json::json!([])
    );
}

/// Without `Sys.Audit` Proxmox still lists every host, online, but without its CPU,
/// memory, disk and uptime: `nodewright check` names the privilege instead of passing
/// with hosts that look as if they had no room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_without_sys_audit_names_it() {
    let s = sim_with(SimProxmoxOptions {
        privileges: Some(without(&documented_privileges(), "Sys.Audit")),
        ..SimProxmoxOptions::default()
    })
    .await;
    for path in ["/cluster/resources?type=node", "/nodes"] {
        let hosts = get_data(&s, path).await;
        let hosts = hosts.as_array().expect("a list");
        assert_eq!(hosts.len(), 3, "{path}: every host is listed");
        for h in hosts {
            assert_eq!(h["status"], "online", "{path}: {h}");
            for figure in ["maxmem", "maxcpu", "mem", "cpu", "uptime"] {
                assert!(h.get(figure).is_none(), "{path}: {figure} shown: {h}");
            }
        }
    }
    let e = provider(&s, &[("ci", "template: k3s-shared\n")])
        .check()
        .await
        .expect_err("hosts without figures");
    assert!(
        e.to_string().contains("without its CPU and memory")
            && e.to_string().contains("lacks Sys.Audit on /nodes/pve1"),
        "{e}"
    );
    // With it, the same listing has the figures.
    let s = sim_with(SimProxmoxOptions {
        privileges: Some(documented_privileges()),
        ..SimProxmoxOptions::default()
    })
    .await;
    let hosts = get_data(&s, "/cluster/resources?type=node").await;
    assert!(
        hosts[0]["maxmem"].as_u64().is_some_and(|m| m > 0),
        "{hosts}"
    );
}
