//! `nodewright check` against the simulated Proxmox VE: the server's version and the
//! privileges the role needs there, the explanation outside the quotes of what it could
//! not find, the group's pool, and the hosts a local-storage template cannot reach.

use super::*;

/// The lines `check` prints for one group `g` with these settings, on a simulator with
/// `opts`.
async fn check(opts: SimProxmoxOptions, settings: &str) -> Result<Vec<String>, CloudError> {
    let s = sim_with(opts).await;
    provider(&s, &[("g", settings)]).verify().await
}

fn on_version(version: &str) -> SimProxmoxOptions {
    SimProxmoxOptions {
        version: version.into(),
        ..SimProxmoxOptions::default()
    }
}

#[tokio::test]
async fn check_names_the_privileges_of_the_servers_version() {
    let pve8 = check(on_version("8.4.1"), "template: k3s-shared\n")
        .await
        .expect("check passes");
    assert_eq!(
        pve8[1],
        "Proxmox VE 8.4.1 (release 8.4): the role needs VM.Audit VM.Clone VM.Allocate VM.PowerMgmt VM.Config.CPU VM.Config.Memory VM.Config.Cloudinit VM.Config.Network VM.Config.Options VM.Config.CDROM VM.Monitor Datastore.Audit Datastore.AllocateSpace Datastore.AllocateTemplate Datastore.Allocate Sys.Audit SDN.Use (docs/proxmox.md, the role for PVE 8)"
    );
    let pve9 = check(on_version("9.1.3"), "template: k3s-shared\n")
        .await
        .expect("check passes");
    assert_eq!(
        pve9[1],
        "Proxmox VE 9.1.3 (release 9.1): the role needs VM.Audit VM.Clone VM.Allocate VM.PowerMgmt VM.Config.CPU VM.Config.Memory VM.Config.Cloudinit VM.Config.Network VM.Config.Options VM.Config.CDROM VM.GuestAgent.Unrestricted Datastore.Audit Datastore.AllocateSpace Datastore.AllocateTemplate Datastore.Allocate Sys.Audit SDN.Use (docs/proxmox.md, the role for PVE 9)"
    );
}

/// The `-privs "..."` lists of docs/proxmox.md's `pveum role add` commands, in order.
fn documented_roles() -> Vec<BTreeSet<String>> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/proxmox.md"))
        .expect("docs/proxmox.md");
    docs.split("pveum role add NodewrightAutoscaler -privs \"")
        .skip(1)
        .map(|rest| {
            rest.split('"')
                .next()
                .unwrap_or_default()
                .split(|c: char| c.is_whitespace() || c == '\\')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[test]
fn the_docs_give_the_role_check_names_for_pve_9_then_pve_8() {
    let as_set = |v: Vec<&str>| v.into_iter().map(str::to_string).collect::<BTreeSet<_>>();
    let roles = documented_roles();
    assert_eq!(roles.len(), 2, "{roles:?}");
    assert_eq!(
        roles[0],
        as_set(nodewright::cloud::proxmox::check::role_privileges(9))
    );
    assert_eq!(
        roles[1],
        as_set(nodewright::cloud::proxmox::check::role_privileges(8))
    );
    // PVE 9 has no VM.Monitor, PVE 8 no VM.GuestAgent.* (pveum refuses either there).
    assert!(roles[0].contains("VM.GuestAgent.Unrestricted") && !roles[0].contains("VM.Monitor"));
    assert!(
        roles[1].contains("VM.Monitor") && !roles[1].iter().any(|p| p.starts_with("VM.GuestAgent"))
    );
}

#[tokio::test]
async fn check_puts_its_explanation_after_the_quoted_name() {
    let err = check(
        SimProxmoxOptions::default(),
        "template: k3s-shared\nbridge: vmbr9\n",
    )
    .await
    .expect_err("no such bridge");
    assert_eq!(
        err.to_string(),
        "proxmox: bridge 'vmbr9' not found (group g, on host pve1; its Linux and OVS bridges are vmbr0, vmbr1)"
    );
}

#[tokio::test]
async fn check_refuses_a_pool_that_does_not_exist() {
    let err = check(
        SimProxmoxOptions::default(),
        "template: k3s-shared\npool: k8s-typo\n",
    )
    .await
    .expect_err("no such pool");
    assert_eq!(
        err.to_string(),
        "proxmox: pool 'k8s-typo' not found (group g; the token sees pools k8s; Proxmox lists only the pools it holds Pool.Audit on: create it (`pveum pool add k8s-typo`) or, if it exists, grant Pool.Audit on /pool/k8s-typo)"
    );
    let lines = check(
        SimProxmoxOptions::default(),
        "template: k3s-shared\npool: k8s\n",
    )
    .await
    .expect("the pool exists");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("group g: template k3s-shared") && l.contains(", pool k8s")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn check_reports_the_hosts_a_local_storage_template_cannot_reach() {
    let lines = check(SimProxmoxOptions::default(), "template: k3s-local\n")
        .await
        .expect("check passes");
    assert!(
        lines.contains(&"group g: hosts pve2, pve3 get none of its VMs: the template's disks are on local storage (local-lvm of host pve1), which a clone cannot leave; put a copy of the template (same name) on each of them, or its disks on shared storage".to_string()),
        "{lines:?}"
    );
    let pinned = check(
        SimProxmoxOptions::default(),
        "template: k3s-local\nnodes: [pve1, pve3]\n",
    )
    .await
    .expect("check passes");
    assert!(
        pinned.contains(&"group g: hosts pve3 get none of its VMs: the template's disks are on local storage (local-lvm of host pve1), which a clone cannot leave; put a copy of the template (same name) on each of them, or its disks on shared storage, or drop them from `nodes:`".to_string()),
        "{pinned:?}"
    );
}
