//! What-if in virtual time: a workload replayed against a config through the real loop
//! (`Reconciler`: observe → plan → act) over an in-memory cluster and cloud behind the
//! same traits as production (`ClusterApi`, `CloudProvider`), with a virtual clock, so
//! a week of load replays in seconds.
//!
//! - [`workload`]: the CSV workload file.
//! - [`world`]: the in-memory cluster and cloud, the scheduler and kubelets;
//!   [`api`]: the world behind `ClusterApi` and `CloudProvider`.
//! - [`replay`]: the loop on the virtual clock; [`command`]: `simulate --workload`;
//!   [`demo`]: `simulate` with no workload, the scripted story in virtual time.
//! - [`scoring`]: kube-scheduler's default scores, which node a pod goes to (shared
//!   with the simulated API server's scheduler).
//! - [`report`]: the figures (node-hours, lower bound, waits, evictions, actions) and
//!   the timeline the plot is drawn from.
//! - [`peers`]: other autoscalers' policies (Cluster-Autoscaler-like, Karpenter-like)
//!   deciding over the same world, for comparison.
//! - [`plot`]: the SVG.
//! - [`crash`]: crash points and injected faults ([`faults`]) with the invariants
//!   checked after every cycle ([`invariants`]).

pub mod api;
pub mod command;
pub mod crash;
pub mod demo;
pub mod faults;
pub mod figures;
pub mod invariants;
pub mod peers;
pub mod plot;
pub mod replay;
pub mod report;
pub mod scoring;
pub mod spec;
mod state;
pub mod workload;
pub mod world;

#[cfg(test)]
mod tests;
