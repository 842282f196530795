//! The NoCloud seed of a `join: cloudInit` VM: the group's rendered user data delivered
//! through the Proxmox API alone (Proxmox has no API to write snippets).
//!
//! A seed is an ISO 9660 image labelled `cidata` holding `user-data`, `meta-data` and, for
//! the static IP pool, `network-config` (cloud-init's NoCloud datasource), uploaded as
//! `iso` content and attached as a CD-ROM before the VM starts. Proxmox's own cloud-init
//! drive is labelled `cidata` too, so it is removed from the clone: a guest with two
//! `cidata` drives would read whichever it finds first.
//!
//! Nothing is kept in memory: the seed of VM `<vmid>` of cluster `<cluster>` whose
//! identity is `<uid>` (its kube-system namespace's UID) is the file
//! `nw-<cluster>-<uid>-<vmid>-seed.iso` (values encoded as in [`super::tags`]), and whether
//! it is still there is read back from the VM's config and the storage's content.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

use hadris_iso::read::PathSeparator;
use hadris_iso::write::options::{BaseIsoLevel, CreationFeatures, IsoFormatOptions};
use hadris_iso::write::{File, InputFiles, IsoImageWriter};
use serde_json::json;

use super::tags;

/// Volume label cloud-init's NoCloud datasource looks for.
pub const LABEL: &str = "cidata";
const PREFIX: &str = "nw-";
const SUFFIX: &str = "-seed.iso";

/// The files of one seed. The user data holds the join token: never log it.
#[derive(Clone, PartialEq, Eq)]
pub struct SeedFiles {
    pub user_data: String,
    pub meta_data: String,
    pub network_config: Option<String>,
}

impl std::fmt::Debug for SeedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeedFiles")
            .field(
                "user_data",
                &format_args!("<{} bytes>", self.user_data.len()),
            )
            .field("meta_data", &self.meta_data)
            .field("network_config", &self.network_config)
            .finish()
    }
}

/// The seed of VM `vmid` named `name` (its hostname and node name): `user_data` as
/// rendered, `ssh_keys` as NoCloud `public-keys` (Proxmox's `sshkeys` travel on its own
/// cloud-init drive, which the seed replaces), and the network from the VM's config.
pub fn seed_files(
    name: &str,
    vmid: u32,
    user_data: &str,
    ssh_keys: &[String],
    config: &BTreeMap<String, String>,
) -> SeedFiles {
    let mut meta = serde_json::Map::new();
    meta.insert(
        "instance-id".into(),
        json!(format!("nodewright-{vmid}-{name}")),
    );
    meta.insert("local-hostname".into(), json!(name));
    if !ssh_keys.is_empty() {
        meta.insert("public-keys".into(), json!(ssh_keys));
    }
    SeedFiles {
        user_data: user_data.to_string(),
        meta_data: yaml(&serde_json::Value::Object(meta)),
        network_config: network_config(config),
    }
}

fn yaml(v: &serde_json::Value) -> String {
    serde_yaml::to_string(v).unwrap_or_default()
}

/// network-config (version 2) for a static `ipconfig0` (`ip=10.0.0.5/24,gw=10.0.0.1`),
/// matched on `net0`'s MAC; `None` for DHCP, which cloud-init does by itself on the first
/// NIC when no network-config is given.
pub fn network_config(config: &BTreeMap<String, String>) -> Option<String> {
    let ipconfig = config.get("ipconfig0")?;
    let field = |k: &str| {
        ipconfig
            .split(',')
            .find_map(|p| p.trim().strip_prefix(k).map(str::to_string))
    };
    let ip = field("ip=").filter(|ip| ip.contains('/'))?;
    let mut eth = serde_json::Map::new();
    if let Some(mac) = config.get("net0").and_then(|n| mac_of(n)) {
        eth.insert("match".into(), json!({ "macaddress": mac }));
        eth.insert("set-name".into(), json!("eth0"));
    }
    eth.insert("addresses".into(), json!([ip]));
    if let Some(gw) = field("gw=") {
        eth.insert("routes".into(), json!([{ "to": "default", "via": gw }]));
    }
    let ns: Vec<&str> = config
        .get("nameserver")
        .map(|n| n.split_whitespace().collect())
        .unwrap_or_default();
    if !ns.is_empty() {
        eth.insert("nameservers".into(), json!({ "addresses": ns }));
    }
    Some(yaml(&json!({ "version": 2, "ethernets": { "eth0": eth } })))
}

/// The MAC of a `net0` value (`virtio=BC:24:11:00:23:28,bridge=vmbr0`), lower case.
fn mac_of(net0: &str) -> Option<String> {
    net0.split(',').find_map(|p| {
        let (_, v) = p.split_once('=')?;
        let ok = v.len() == 17
            && v.split(':')
                .all(|o| o.len() == 2 && o.chars().all(|c| c.is_ascii_hexdigit()));
        ok.then(|| v.to_ascii_lowercase())
    })
}

/// The ISO image: volume label `cidata`, Rock Ridge and Joliet names so the files keep
/// their lower-case names on every reader (the plain ISO 9660 names are upper case).
pub fn build_iso(files: &SeedFiles) -> Result<Vec<u8>, String> {
    let file = |name: &str, contents: &str| File::File {
        name: Arc::new(name.to_string()),
        contents: contents.as_bytes().to_vec(),
    };
    let mut entries = vec![
        file("meta-data", &files.meta_data),
        file("user-data", &files.user_data),
    ];
    if let Some(n) = &files.network_config {
        entries.push(file("network-config", n));
    }
    let options = IsoFormatOptions {
        volume_name: LABEL.into(),
        system_id: None,
        volume_set_id: None,
        publisher_id: None,
        preparer_id: None,
        application_id: Some("NODEWRIGHT".into()),
        sector_size: 2048,
        features: CreationFeatures {
            filenames: BaseIsoLevel::Level2 {
                supports_lowercase: false,
                supports_rrip: true,
            },
            long_filenames: false,
            joliet: Some(hadris_iso::joliet::JolietLevel::Level3),
            rock_ridge: Some(hadris_iso::rrip::RripOptions::default()),
            el_torito: None,
            hybrid_boot: None,
        },
        path_separator: PathSeparator::ForwardSlash,
        strict_charset: false,
    };
    let input = InputFiles {
        path_separator: PathSeparator::ForwardSlash,
        files: entries,
    };
    IsoImageWriter::create(Cursor::new(Vec::new()), input, options)
        .map(|c| c.into_inner())
        .map_err(|e| format!("building the seed image failed: {e}"))
}

/// `nw-<cluster>-<identity>-<vmid>-seed.iso`: names the cluster, its identity (the
/// kube-system namespace's UID, see [`crate::cloud::ClusterIdentity`]) and the VM, so a
/// seed is found by its name alone, and never taken for the seed of another cluster that
/// has the same name and writes to the same ISO storage (an NFS share two Proxmox
/// clusters mount, whose VM ids overlap).
pub fn file_name(cluster: &str, identity: &str, vmid: u32) -> String {
    format!(
        "{PREFIX}{}-{}-{vmid}{SUFFIX}",
        tags::encode(cluster),
        tags::encode(identity)
    )
}

/// Who made a seed of a cluster of this name, as its file name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Maker {
    /// This cluster: its identity is in the name.
    This,
    /// A release from before identities (`nw-<cluster>-<vmid>-seed.iso`): this cluster
    /// or another of the same name, which only the storage can tell (see
    /// [`legacy_is_ours`]).
    Unnamed,
    /// Another cluster of the same name (or this one before its identity is known).
    Other,
}

/// A seed file name read back: the VM it was made for and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedName {
    pub vmid: u32,
    pub maker: Maker,
}

/// The seed file `name` (a file name or `<storage>:iso/<file>`) of a cluster named
/// `cluster` whose identity is `identity` (`None`: not known yet), if it is one.
pub fn read_name(cluster: &str, identity: Option<&str>, name: &str) -> Option<SeedName> {
    let file = name.rsplit('/').next()?;
    let rest = file
        .strip_prefix(PREFIX)?
        .strip_prefix(tags::encode(cluster).as_str())?
        .strip_prefix('-')?
        .strip_suffix(SUFFIX)?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(rest) {
        let vmid = rest.parse().ok()?;
        return Some(SeedName {
            vmid,
            maker: Maker::Unnamed,
        });
    }
    let (id, vmid) = rest.rsplit_once('-')?;
    if id.is_empty() || !digits(vmid) {
        return None;
    }
    let maker = match identity {
        Some(mine) if tags::encode(mine) == id => Maker::This,
        _ => Maker::Other,
    };
    Some(SeedName {
        vmid: vmid.parse().ok()?,
        maker,
    })
}

/// Whether a seed named as before identities ([`Maker::Unnamed`]) on a storage is this
/// cluster's by its name alone: only on a storage Proxmox reports as not shared. Such a
/// storage is seen by this Proxmox cluster only, whose VM ids are unique, so the name
/// `nw-<cluster>-<vmid>` was made for this cluster's VM `<vmid>`. On a shared one (an NFS
/// share other Proxmox clusters may mount, VM ids overlapping) another cluster of the
/// same name may have written the same name: never removed there, only reported.
pub fn legacy_is_ours(storage_shared: bool) -> bool {
    !storage_shared
}

/// The volume id of `file` on `storage`.
pub fn volume_id(storage: &str, file: &str) -> String {
    format!("{storage}:iso/{file}")
}

/// The drive value attaching `volume` as a CD-ROM.
pub fn drive_value(volume: &str) -> String {
    format!("{volume},media=cdrom")
}

/// An emptied CD-ROM drive (media ejected: takes effect at once on a running VM, where
/// removing an IDE drive would wait for the next reboot).
pub const EJECTED: &str = "none,media=cdrom";

/// Slots a seed may take, in order of preference.
const SLOTS: [&str; 10] = [
    "ide3", "ide1", "ide0", "sata0", "sata1", "sata2", "sata3", "sata4", "sata5", "ide2",
];

/// A seed of a cluster of this name attached to a VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// The drive slot (`ide3`).
    pub slot: String,
    /// The volume id (`local:iso/nw-...-seed.iso`).
    pub volume: String,
    pub name: SeedName,
}

/// Every seed of a cluster named `cluster` (any maker) attached in `config`.
pub fn attached_seeds(
    config: &BTreeMap<String, String>,
    cluster: &str,
    identity: Option<&str>,
) -> Vec<Attached> {
    config
        .iter()
        .filter(|(k, _)| is_drive(k))
        .filter_map(|(k, v)| {
            let volume = v.split(',').next()?;
            let name = read_name(cluster, identity, volume)?;
            Some(Attached {
                slot: k.clone(),
                volume: volume.to_string(),
                name,
            })
        })
        .collect()
}

/// The drive holding the seed this cluster made for VM `vmid` (or one named as before
/// identities for that VM), if attached; never another cluster's.
pub fn attached(
    config: &BTreeMap<String, String>,
    cluster: &str,
    identity: Option<&str>,
    vmid: u32,
) -> Option<Attached> {
    attached_seeds(config, cluster, identity)
        .into_iter()
        .find(|a| a.name.vmid == vmid && a.name.maker != Maker::Other)
}

fn is_drive(key: &str) -> bool {
    ["ide", "sata", "scsi", "virtio"].iter().any(|p| {
        key.strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Proxmox's cloud-init drive (`<storage>:vm-<id>-cloudinit,media=cdrom`), if any.
pub fn cloudinit_drive(config: &BTreeMap<String, String>) -> Option<String> {
    config.iter().find_map(|(k, v)| {
        let volume = v.split(',').next()?;
        (is_drive(k) && volume.ends_with("-cloudinit")).then(|| k.clone())
    })
}

/// Where to attach a seed: an emptied CD-ROM, else the first slot not in use (the
/// cloud-init drive's slot is in use: it cannot be deleted and set in one call).
pub fn free_slot(config: &BTreeMap<String, String>) -> Option<&'static str> {
    SLOTS
        .iter()
        .copied()
        .find(|s| {
            config
                .get(*s)
                .is_some_and(|v| v.starts_with("none,") || v == "none")
        })
        .or_else(|| SLOTS.iter().copied().find(|s| !config.contains_key(*s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const UID: &str = "6f1c2a3b-9d4e-4f00-8a1b-2c3d4e5f6a7b";

    #[test]
    fn file_names_round_trip_per_cluster_and_identity() {
        let f = file_name("Prod_EU", UID, 123);
        assert_eq!(
            f,
            "nw-_50rod_5f_45_55-6f1c2a3b-9d4e-4f00-8a1b-2c3d4e5f6a7b-123-seed.iso"
        );
        let ours = Some(SeedName {
            vmid: 123,
            maker: Maker::This,
        });
        assert_eq!(read_name("Prod_EU", Some(UID), &f), ours);
        assert_eq!(
            read_name("Prod_EU", Some(UID), &format!("local:iso/{f}")),
            ours
        );
        // Another cluster of the same name, or this one before its identity is read.
        for other in [Some("0b5e0d3c-0000-4000-8000-000000000000"), None] {
            assert_eq!(
                read_name("Prod_EU", other, &f).map(|n| n.maker),
                Some(Maker::Other)
            );
        }
        assert_eq!(read_name("prod", Some(UID), &f), None);
        assert_eq!(read_name("prod", Some(UID), "nw-prod-x-seed.iso"), None);
        assert_eq!(read_name("prod", Some(UID), "nw-prod--1-seed.iso"), None);
        assert_eq!(read_name("prod", Some(UID), "ubuntu.iso"), None);
    }

    #[test]
    fn seeds_named_before_identities_are_read_as_unnamed() {
        // As the previous release named them.
        let n = read_name("prod", Some(UID), "local:iso/nw-prod-105-seed.iso");
        assert_eq!(
            n,
            Some(SeedName {
                vmid: 105,
                maker: Maker::Unnamed
            })
        );
        // A cluster named `prod-eu`'s old seed is not `prod`'s: read as another's.
        let n = read_name("prod", Some(UID), "nw-prod-eu-105-seed.iso");
        assert_eq!(n.map(|n| n.maker), Some(Maker::Other));
        assert!(legacy_is_ours(false) && !legacy_is_ours(true));
    }

    #[test]
    fn static_address_becomes_network_config_v2() {
        let c = cfg(&[
            ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
            ("nameserver", "10.0.0.2 10.0.0.3"),
            ("net0", "virtio=BC:24:11:00:23:28,bridge=vmbr0"),
        ]);
        let n: serde_json::Value =
            serde_yaml::from_str(&network_config(&c).expect("static")).expect("yaml");
        let eth = &n["ethernets"]["eth0"];
        assert_eq!(n["version"], 2);
        assert_eq!(eth["match"]["macaddress"], "bc:24:11:00:23:28");
        assert_eq!(eth["addresses"][0], "10.0.0.5/24");
        assert_eq!(eth["routes"][0]["via"], "10.0.0.1");
        assert_eq!(eth["nameservers"]["addresses"][1], "10.0.0.3");
        assert_eq!(network_config(&cfg(&[("ipconfig0", "ip=dhcp")])), None);
        assert_eq!(network_config(&cfg(&[])), None);
    }

    #[test]
    fn slots_avoid_the_cloudinit_drive_and_reuse_an_ejected_cdrom() {
        let c = cfg(&[
            ("ide2", "ceph:vm-101-cloudinit,media=cdrom"),
            ("scsi0", "ceph:vm-101-disk-0,size=8G"),
        ]);
        assert_eq!(cloudinit_drive(&c).as_deref(), Some("ide2"));
        assert_eq!(free_slot(&c), Some("ide3"));
        let c = cfg(&[("ide3", "cdrom,media=cdrom"), ("ide1", EJECTED)]);
        assert_eq!(free_slot(&c), Some("ide1"));
        let f = file_name("c1", UID, 101);
        let c = cfg(&[("ide3", &drive_value(&volume_id("local", &f)))]);
        assert_eq!(
            attached(&c, "c1", Some(UID), 101).map(|a| (a.slot, a.volume)),
            Some(("ide3".into(), format!("local:iso/{f}")))
        );
        assert_eq!(attached(&c, "c1", Some(UID), 102), None);
        assert_eq!(attached(&c, "c2", Some(UID), 101), None);
        // Another cluster's of the same name is attached, but not this one's.
        let theirs = "0b5e0d3c-0000-4000-8000-000000000000";
        assert_eq!(attached(&c, "c1", Some(theirs), 101), None);
        assert_eq!(attached_seeds(&c, "c1", Some(theirs)).len(), 1);
    }

    #[test]
    fn meta_data_names_the_vm_and_debug_hides_the_user_data() {
        let s = seed_files(
            "c1-g-abc",
            101,
            "#cloud-config\ntoken: s3cret\n",
            &["ssh-ed25519 AAAA a@b".into()],
            &cfg(&[]),
        );
        let m: serde_json::Value = serde_yaml::from_str(&s.meta_data).expect("yaml");
        assert_eq!(m["local-hostname"], "c1-g-abc");
        assert_eq!(m["instance-id"], "nodewright-101-c1-g-abc");
        assert_eq!(m["public-keys"][0], "ssh-ed25519 AAAA a@b");
        assert!(!format!("{s:?}").contains("s3cret"));
        let iso = build_iso(&s).expect("iso");
        assert_eq!(iso.len() % 2048, 0);
        assert_eq!(&iso[16 * 2048 + 1..16 * 2048 + 6], b"CD001");
    }
}
