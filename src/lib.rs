//! nodewright: a stateless Kubernetes node autoscaler for Proxmox VE, plain OpenStack
//! and small clouds.
//!
//! This package is the command line: it puts together the core library
//! ([`nodewright_core`], re-exported here) and, with the `simulate` feature (on by
//! default, off in the container image), the simulators (`sim`, the `nodewright-sim`
//! crate, used by `nodewright simulate` and the tests).

pub use nodewright_core::*;
#[cfg(feature = "simulate")]
pub use nodewright_sim as sim;

pub mod cli;
