//! What `simulate --serve` prints: every simulated endpoint, the file that points a client
//! at it, and what it holds (flavors, templates, storages, bridges, ...), so other tools
//! (kubectl, the OpenStack CLI, proxmoxer, cloudcli) can be pointed at them.

use std::fmt::Write as _;
use std::path::Path;

use super::env::SimEnv;
use super::kamatera::catalog::IMAGES;

const GIB: u64 = 1 << 30;

/// One block per endpoint, two-space indented, the holdings of each below it.
pub fn describe(env: &SimEnv, config_path: &Path) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: String| {
        let _ = writeln!(out, "  {label:<16}{value}");
    };
    line("Kubernetes API", env.cluster.url());
    line("  kubeconfig", env.kubeconfig.display().to_string());

    let os = env.cloud.options();
    line(
        "OpenStack",
        format!(
            "{} (Keystone; Nova, Glance and Neutron are in its catalog)",
            env.cloud.auth_url()
        ),
    );
    line("  credentials", env.credentials.display().to_string());
    line(
        "  flavors",
        os.flavors
            .iter()
            .map(|f| {
                format!(
                    "{} ({} vCPU, {} MiB, {} GB disk)",
                    f.name, f.vcpus, f.ram_mib, f.disk_gb
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    );
    line("  images", names(os.images.iter().map(|i| i.name.as_str())));
    line(
        "  networks",
        names(os.networks.iter().map(|n| n.name.as_str())),
    );
    line(
        "  zones",
        names(os.availability_zones.iter().map(String::as_str)),
    );

    let pve = env.proxmox.options();
    line(
        "Proxmox VE",
        format!(
            "{}/api2/json (version {}; its certificate: {})",
            env.proxmox.url(),
            pve.version,
            env.dir.join("proxmox-ca.pem").display()
        ),
    );
    line(
        "  credentials",
        env.proxmox_credentials.display().to_string(),
    );
    line(
        "  hosts",
        pve.hosts
            .iter()
            .map(|h| format!("{} ({} cores, {} GiB)", h.name, h.cores, h.maxmem / GIB))
            .collect::<Vec<_>>()
            .join(", "),
    );
    line(
        "  templates",
        pve.templates
            .iter()
            .map(|t| {
                format!(
                    "{} (VM {} on {}, disk on {}, joins by {})",
                    t.name,
                    t.vmid,
                    t.node,
                    t.storage,
                    if t.cloud_init_join {
                        "cloud-init"
                    } else {
                        "the guest agent only"
                    }
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    );
    line(
        "  storages",
        pve.storages
            .iter()
            .map(|s| {
                format!(
                    "{} ({}{})",
                    s.name,
                    if s.shared { "shared, " } else { "local, " },
                    s.content
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    );
    line("  bridges", names(pve.bridges.iter().map(String::as_str)));
    line("  pools", names(pve.pools.iter().map(String::as_str)));
    line("  snippets", names(pve.snippets.iter().map(String::as_str)));

    let kam = env.kamatera.options();
    line("Kamatera", env.kamatera.url());
    line(
        "  credentials",
        env.kamatera_credentials.display().to_string(),
    );
    line(
        "  datacenters",
        names(kam.datacenters.iter().map(String::as_str)),
    );
    line("  images", names(IMAGES.iter().map(|i| i.description)));

    line("templates", env.templates.display().to_string());
    line("config", config_path.display().to_string());
    out
}

fn names<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = items.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
