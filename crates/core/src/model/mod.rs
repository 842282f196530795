//! The vocabulary every part speaks: cluster objects as the planner sees them, references,
//! servers and group shapes, resources and quantities, selector and affinity terms, host
//! placement, and the label and annotation names.
//!
//! A leaf: it imports nothing of the crate, so the planner, config and the adapters can
//! all depend on it without depending on each other (`tests/layers.rs` holds this).

pub mod bytes;
pub mod codes;
pub mod hosts;
pub mod join;
pub mod labels;
pub mod objects;
pub mod quantity;
pub mod refs;
pub mod resources;
pub mod selector;
pub mod server;
pub mod sizes;
pub mod version;
pub mod volumes;

pub use bytes::Bytes;
pub use codes::{Bucket, KeptReason};
pub use hosts::{GroupHosts, Host, HostState, Overcommit, VmSize};
pub use join::JoinCredentials;
pub use labels::*;
pub use objects::{
    normalize_image, ImageListing, NodeInfo, PdbInfo, PodInfo, PodPhase, Taint, Toleration,
    KUBELET_LISTED_IMAGES,
};
pub use quantity::{parse_quantity, quantity_value, Quantity};
pub use refs::{ObjectRef, PodRef, ServerRef};
pub use resources::{ceil_units, fmt_cpu, pod_requests, ContainerRequests, Resources};
pub use selector::{
    HostPort, LabelSelector, Namespaces, NodeSelectorTerm, Operator, PodAffinityTerm, Requirement,
    SpreadConstraint,
};
pub use server::{unix_secs, GroupShape, Server, ServerStatus, Stray, StrayKind};
pub use sizes::{Names, SizeShape, SIZE_TAG};
pub use version::KubeVersion;
pub use volumes::{
    attach_resource, ClaimInfo, ClassInfo, CsiNodeInfo, HeldVolume, LocalVolume, PodClaim, PvInfo,
    Volumes,
};
