//! Where a storage's volumes live and how a VM reads one: the storage model that the
//! storage endpoints, the task runner (reading a cloud-init ISO at boot), the host
//! listings and the checks of a VM's config share. A leaf below them all.

use super::{Shared, SimProxmoxOptions, SimStorage};

/// Where a storage's files live as seen from `node`: the host, or `""` when shared.
pub(super) fn location(o: &SimProxmoxOptions, storage: &str, node: &str) -> String {
    match o.storages.iter().find(|s| s.name == storage) {
        Some(s) if s.shared => String::new(),
        _ => node.to_string(),
    }
}

/// The plugin type the storage reports.
pub(super) fn plugin(s: &SimStorage) -> &'static str {
    if s.shared {
        "rbd"
    } else if s.accepts("iso") {
        "dir"
    } else {
        "lvmthin"
    }
}

/// The bytes of volume `volid` as VM on `node` would read it.
pub(super) fn read(shared: &Shared, st: &super::St, node: &str, volid: &str) -> Option<Vec<u8>> {
    let storage = volid.split(':').next()?;
    let loc = location(&shared.opts, storage, node);
    st.volumes
        .get(&(loc, volid.to_string()))
        .map(|v| v.bytes.clone())
}
