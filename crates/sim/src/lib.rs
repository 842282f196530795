//! In-process simulators: a Kubernetes API server and clouds, all on 127.0.0.1, so
//! the unmodified loop (and kubectl) can be exercised over real HTTP; and the what-if
//! world, an in-memory cluster and cloud on a virtual clock.
//!
//! Built only on the public API of `nodewright-core`, so the autoscaler itself carries
//! no simulator code.

// The core's modules under their usual names, so paths read as in the core
// (`cluster` here is the simulated API server; the core's is `nodewright_core::cluster`.)
pub(crate) use nodewright_core::{act, cloud, config, model, plan, run};

pub mod cluster;
pub mod endpoints;
pub mod env;
pub mod faults;
pub mod kamatera;
pub mod openstack;
pub mod proxmox;
pub mod scenario;
mod serve;
pub mod whatif;

use std::sync::Arc;

/// What a simulated cloud tells the simulated cluster, standing in for a VM's kubelet.
#[derive(Debug, Clone)]
pub enum VmEvent {
    /// The VM finished booting; its kubelet registers a Node named `name`,
    /// with labels and taints taken from `user_data`.
    Booted {
        name: String,
        user_data: String,
        memory_bytes: u64,
        cpus: u32,
    },
    /// The VM is gone; its node stops reporting (NotReady) if it still exists.
    Deleted { name: String },
    /// The VM was powered off: its kubelet stops, as for [`VmEvent::Deleted`], and
    /// registers again at the next [`VmEvent::Booted`].
    Stopped { name: String },
}

pub type VmHook = Arc<dyn Fn(VmEvent) + Send + Sync>;
