//! nodewright: a stateless Kubernetes node autoscaler for Proxmox VE, plain OpenStack
//! and small clouds.
//!
//! Each cycle observes the cluster and the cloud ([`cluster`], [`cloud`]), lets the pure
//! planner ([`plan`]) choose exactly one action with its reasons, and carries it out
//! ([`act`]); [`run`] is the loop around it. Nothing is kept between cycles that cannot
//! be read back.

pub mod act;
pub mod cloud;
pub mod cluster;
pub mod config;
pub mod model;
pub mod pacing;
pub mod plan;
pub mod run;
pub mod telemetry;
pub mod userdata;
pub mod yaml;
