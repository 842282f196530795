//! Where a storage's volumes live and how a VM reads one: the storage model that the
//! storage endpoints, the task runner (reading a cloud-init ISO at boot), the host
//! listings and the checks of a VM's config share. A leaf below them all.

use std::collections::BTreeMap;
use std::ops::DerefMut;
use std::sync::{Arc, Mutex};

use super::{Shared, SimProxmoxOptions, SimStorage, SimVolume};

/// Files by (location, volume id).
pub(super) type Files = BTreeMap<(String, String), SimVolume>;

/// The files of the shared storages of one or more simulated Proxmox clusters: an NFS
/// export that several Proxmox clusters mount under the same storage name, each of them
/// listing, writing and deleting the same files (see
/// [`SimProxmoxOptions::shared_files`]).
#[derive(Clone, Default)]
pub struct SharedFiles(Arc<Mutex<Files>>);

impl std::fmt::Debug for SharedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFiles").finish_non_exhaustive()
    }
}

impl SharedFiles {
    /// Every file on the share: (volume id, bytes).
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((_, v), f)| (v.clone(), f.bytes.clone()))
            .collect()
    }
}

/// Where a storage's files live as seen from `node`: the host, or `""` when shared.
pub(super) fn location(o: &SimProxmoxOptions, storage: &str, node: &str) -> String {
    match o.storages.iter().find(|s| s.name == storage) {
        Some(s) if s.shared => String::new(),
        _ => node.to_string(),
    }
}

/// The files at `loc`: a host's own, or the shared storages' (on the share other
/// simulated clusters mount, when there is one).
pub(super) fn files<'a>(
    o: &'a SimProxmoxOptions,
    st: &'a mut super::St,
    loc: &str,
) -> Box<dyn DerefMut<Target = Files> + 'a> {
    match (&o.shared_files, loc.is_empty()) {
        (Some(share), true) => Box::new(share.0.lock().unwrap_or_else(|p| p.into_inner())),
        _ => Box::new(&mut st.volumes),
    }
}

/// The plugin type the storage reports: a shared storage that takes ISO images is a
/// file share (NFS; Ceph RBD takes disk images only), a local one a directory.
pub(super) fn plugin(s: &SimStorage) -> &'static str {
    match (s.shared, s.accepts("iso")) {
        (true, true) => "nfs",
        (true, false) => "rbd",
        (false, true) => "dir",
        (false, false) => "lvmthin",
    }
}

/// The bytes of volume `volid` as VM on `node` would read it.
pub(super) fn read(shared: &Shared, st: &super::St, node: &str, volid: &str) -> Option<Vec<u8>> {
    let storage = volid.split(':').next()?;
    let loc = location(&shared.opts, storage, node);
    let key = (loc, volid.to_string());
    match (&shared.opts.shared_files, key.0.is_empty()) {
        (Some(share), true) => share
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .map(|v| v.bytes.clone()),
        _ => st.volumes.get(&key).map(|v| v.bytes.clone()),
    }
}
