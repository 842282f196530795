//! nodewright: a stateless Kubernetes node autoscaler for Proxmox VE, plain OpenStack
//! and small clouds.
//!
//! Each cycle observes the cluster and the cloud ([`cluster`], [`cloud`]), lets the pure
//! planner ([`plan`]) choose exactly one action with its reasons, and carries it out
//! ([`act`]). Nothing is kept between cycles that cannot be read back.

pub mod act;
pub mod cli;
pub mod cloud;
pub mod cluster;
pub mod config;
pub mod plan;
pub mod reconcile;
pub mod runner;
pub mod sim;
pub mod telemetry;
pub mod userdata;
pub mod yaml;

/// Node label and cloud tag values derive from these; see [`plan::ownership`].
pub const LABEL_CLUSTER: &str = "nodewright.io/cluster";
pub const LABEL_GROUP: &str = "nodewright.io/group";
/// Taint every new node registers with; removed by the autoscaler once the node is Ready.
pub const STARTUP_TAINT_KEY: &str = "nodewright.io/startup";
/// Annotation set when nodewright cordons a node, so it only drains what it cordoned.
pub const ANNOTATION_CORDONED: &str = "nodewright.io/cordoned-reason";
/// Label on the short-lived pods that pull images onto a node.
pub const LABEL_IMAGE_PULLER: &str = "nodewright.io/image-puller";
