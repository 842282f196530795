//! What `check --offline` used to pass and a real cluster then refused: labels a kubelet
//! may not set, sizes read wrongly, static pools that cannot hold the group, templates
//! the join method cannot run, unreadable or misspelt credentials.

use super::*;

/// `GOOD` with its group on Proxmox, given the `proxmox:` block.
fn on_proxmox(block: &str) -> String {
    GOOD.replacen("provider: openstack", "provider: proxmox", 1)
        .replacen(
            "openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}",
            &format!("proxmox: {block}"),
            1,
        )
}

/// `GOOD` with its group on Kamatera, given the `kamatera:` block.
fn on_kamatera(block: &str) -> String {
    GOOD.replacen("provider: openstack", "provider: kamatera", 1)
        .replacen(
            "openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}",
            &format!("kamatera: {block}"),
            1,
        )
}

/// Runs `(case, config text, expected path, fragments)` cases; the failures.
fn failures(cases: &[(&str, String, &str, &[&str])]) -> Vec<String> {
    let mut out = Vec::new();
    for (case, text, path, fragments) in cases {
        out.extend(common::config_case_failures(
            case,
            parse(text),
            path,
            true,
            fragments,
        ));
    }
    out
}

#[test]
fn a_group_label_a_kubelet_refuses_is_named_with_the_fix() {
    let text = GOOD.replacen(
        "labels: {role: worker}",
        "labels: {node-role.kubernetes.io/worker: \"true\"}",
        1,
    );
    let f = failures(&[(
        "node-role label",
        text,
        "nodeGroups[0].labels.node-role.kubernetes.io/worker",
        &[
            "group `workers`",
            "`node-role.kubernetes.io/worker` cannot be set by a kubelet (NodeRestriction",
            "`example.com/role: worker`",
            "by another means",
        ],
    )]);
    assert!(f.is_empty(), "{}", f.join("\n"));
    // The labels a kubelet may set on itself pass.
    let text = GOOD.replacen(
        "labels: {role: worker}",
        "labels: {node.kubernetes.io/pool: a, topology.kubernetes.io/zone: z1, example.com/role: worker}",
        1,
    );
    parse(&text).expect("kubelet-settable labels load");
}

#[test]
fn bare_number_memory_is_refused_with_an_example() {
    let kamatera = "{datacenter: EU, image: ubuntu, cpu: 2B, ram: 8192}";
    let cases: Vec<(&str, String, &str, &[&str])> = vec![
        (
            "freeMemoryTarget: 8",
            GOOD.replacen("freeMemoryTarget: 9 GiB", "freeMemoryTarget: 8", 1),
            "freeMemoryTarget",
            &["`8` has no unit", "`8 GiB`"],
        ),
        (
            "Kamatera ram: 8192",
            on_kamatera(kamatera),
            "nodeGroups[0].kamatera.ram",
            &["`8192` has no unit", "`8192 MiB`", "8 GiB"],
        ),
        (
            "Proxmox memory: 8192",
            on_proxmox("{template: 9000, memory: 8192}"),
            "nodeGroups[0].proxmox.memory",
            &["`8192` has no unit", "`8192 MiB`"],
        ),
        (
            "reserved memory: 512",
            GOOD.replacen("  labels:", "  reserved: {memory: 512}\n  labels:", 1),
            "nodeGroups[0].reserved.memory",
            &["`512` has no unit", "`512 GiB`"],
        ),
        (
            "decimal freeMemoryTarget",
            GOOD.replacen("freeMemoryTarget: 9 GiB", "freeMemoryTarget: 8GB", 1),
            "freeMemoryTarget",
            &["8,000,000,000 bytes (7.45 GiB)", "write `8 GiB`"],
        ),
        (
            "decimal node resources",
            GOOD.replacen("  labels:", "  resources: {memory: 16G}\n  labels:", 1),
            "nodeGroups[0].resources.memory",
            &["decimal", "`16 GiB`"],
        ),
    ];
    let f = failures(&cases);
    assert!(f.is_empty(), "{}", f.join("\n"));
    // Binary units in either spelling, and every provider alike.
    let c = parse(&GOOD.replacen("freeMemoryTarget: 9 GiB", "freeMemoryTarget: 9Gi", 1))
        .expect("Gi loads");
    assert_eq!(c.free_memory_target.as_u64(), 9 << 30);
    let c = parse(&on_kamatera(
        "{datacenter: EU, image: ubuntu, cpu: 2B, ram: 8 GiB}",
    ))
    .expect("kamatera loads");
    let k = c.node_groups[0]
        .settings
        .of::<nodewright::cloud::kamatera::KamateraSettings>()
        .expect("kamatera");
    assert_eq!(k.ram.bytes(), 8 << 30);
    let c = parse(&on_proxmox("{template: 9000, memory: 8192 MiB}")).expect("proxmox loads");
    let px = c.node_groups[0]
        .settings
        .of::<nodewright::cloud::proxmox::ProxmoxSettings>()
        .expect("proxmox");
    assert_eq!(px.memory.map(|m| m.as_u64()), Some(8 << 30));
}

const STATIC: &str =
    "{template: 9000, ipConfig: {static: {cidr: 10.0.0.0/24, gateway: 10.0.0.1, first: 10.0.0.10, last: 10.0.0.20}}}";

#[test]
fn static_pool_gateway_outside_cidr_fails_offline_check() {
    parse(&on_proxmox(STATIC)).expect("the base pool is valid");
    let at = "nodeGroups[0].proxmox.ipConfig.static";
    let cases: Vec<(&str, String, &str, &[&str])> = vec![
        (
            "gateway outside the cidr",
            on_proxmox(&STATIC.replace("gateway: 10.0.0.1", "gateway: 10.0.1.1")),
            at,
            &[
                "gateway 10.0.1.1 lies outside the cidr",
                "10.0.0.1 to 10.0.0.254",
            ],
        ),
        (
            "range outside the cidr",
            on_proxmox(&STATIC.replace("last: 10.0.0.20", "last: 10.0.1.20")),
            at,
            &["last 10.0.1.20 lies outside the cidr"],
        ),
        (
            "first after last",
            on_proxmox(&STATIC.replace("first: 10.0.0.10", "first: 10.0.0.30")),
            at,
            &["first 10.0.0.30 is after last 10.0.0.20"],
        ),
        (
            "fewer addresses than maxSize",
            on_proxmox(&STATIC.replace("last: 10.0.0.20", "last: 10.0.0.11")).replacen(
                "maxSize: 3",
                "maxSize: 5",
                1,
            ),
            at,
            &["holds 2 addresses", "fewer than maxSize 5"],
        ),
        (
            "the gateway inside the range does not count",
            on_proxmox(
                &STATIC
                    .replace("first: 10.0.0.10", "first: 10.0.0.1")
                    .replace("last: 10.0.0.20", "last: 10.0.0.3"),
            ),
            at,
            &[
                "holds 2 addresses",
                "without the gateway",
                "fewer than maxSize 3",
            ],
        ),
    ];
    let f = failures(&cases);
    assert!(f.is_empty(), "{}", f.join("\n"));
    // And through the binary, as a user runs it.
    let (_dir, file) = write_config(&on_proxmox(
        &STATIC.replace("gateway: 10.0.0.1", "gateway: 10.0.1.1"),
    ));
    let (code, out) = check_offline(&file, &[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(at) && out.contains("gateway 10.0.1.1"),
        "{out}"
    );
}

#[test]
fn an_empty_or_missing_template_fails_offline_check_naming_the_shipped_ones() {
    let cases: Vec<(&str, String, &str, &[&str])> = vec![
        (
            "empty template",
            GOOD.replacen(
                "template: k3s-agent.cloud-init.yaml.j2",
                "template: \"\"",
                1,
            ),
            "nodeGroups[0].userData.template",
            &["empty"],
        ),
        (
            "misspelt template",
            GOOD.replacen(
                "template: k3s-agent.cloud-init.yaml.j2",
                "template: k3s-agent.cloudinit.yaml.j2",
                1,
            ),
            "nodeGroups[0].userData.template",
            &[
                "`k3s-agent.cloudinit.yaml.j2` not found",
                "did you mean `k3s-agent.cloud-init.yaml.j2`?",
                "k3s-agent.butane.yaml.j2, k3s-agent.cloud-init.yaml.j2, k3s-agent.join.sh.j2, kubeadm-join.cloud-init.yaml.j2, kubeadm-join.sh.j2",
            ],
        ),
    ];
    let f = failures(&cases);
    assert!(f.is_empty(), "{}", f.join("\n"));
}

/// Writes `text` as `autoscaler.yaml` in a fresh directory, templates pointing at the
/// repository's; (the directory, kept alive by the caller, and the file).
fn write_config(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("autoscaler.yaml");
    let text = text.replacen(
        "templatesDir: templates",
        &format!("templatesDir: {}", repo().join("templates").display()),
        1,
    );
    std::fs::write(&file, text).expect("write config");
    (dir, file)
}

/// `nodewright check --offline` on `file` with `env` set and no credentials variable
/// inherited: (exit code, stdout and stderr).
fn check_offline(file: &Path, env: &[(&str, &Path)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodewright"));
    cmd.args(["check", "--offline"])
        .env("AUTOSCALER_CONFIG_FILE", file)
        .env_remove("OPENSTACK_CREDENTIALS_FILE")
        .env_remove("PROXMOX_CREDENTIALS_FILE")
        .env_remove("KAMATERA_CREDENTIALS_FILE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run nodewright");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_guest_agent_group_with_a_cloud_config_template_fails_offline_check() {
    let (_dir, file) = write_config(&on_proxmox("{template: 9000, join: guestAgent}"));
    let (code, out) = check_offline(&file, &[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("renders cloud-config")
            && out.contains("`proxmox.join: guestAgent`")
            && out.contains("k3s-agent.join.sh.j2"),
        "{out}"
    );
    // With the join script it passes.
    let (_dir, file) = write_config(&on_proxmox("{template: 9000, join: guestAgent}").replacen(
        "template: k3s-agent.cloud-init.yaml.j2",
        "template: k3s-agent.join.sh.j2",
        1,
    ));
    let (code, out) = check_offline(&file, &[]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn unreadable_or_misspelt_credentials_fail_offline_check() {
    let (dir, file) = write_config(&on_proxmox("{template: 9000}"));
    let missing = dir.path().join("nope.yaml");
    let (code, out) = check_offline(&file, &[("PROXMOX_CREDENTIALS_FILE", &missing)]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("PROXMOX_CREDENTIALS_FILE") && out.contains("cannot read credentials file"),
        "{out}"
    );
    let creds = dir.path().join("proxmox.yaml");
    std::fs::write(
        &creds,
        "url: https://pve.example.org:8006\ntokenID: nodewright@pve!a\ntokenSecret: not-shown-anywhere\n",
    )
    .expect("write");
    let (code, out) = check_offline(&file, &[("PROXMOX_CREDENTIALS_FILE", &creds)]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("unknown key `tokenID`; did you mean `tokenId`?"),
        "{out}"
    );
    assert!(!out.contains("not-shown-anywhere"), "{out}");
    std::fs::write(
        &creds,
        "url: https://pve.example.org:8006\ntokenId: nodewright@pve!a\ntokenSecret: s\n",
    )
    .expect("write");
    let (code, out) = check_offline(&file, &[("PROXMOX_CREDENTIALS_FILE", &creds)]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("credentials"), "{out}");
}
