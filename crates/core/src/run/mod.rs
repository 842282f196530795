//! The loop: observe → decide → act, once per `scanInterval` or sooner when the cluster
//! changes. [`cycle`] is one cycle ([`Reconciler`]); [`memory`] what the loop remembers
//! between cycles in this process (backoffs, disruption times, last listings), apart
//! from the providers ([`crate::act::Clouds`]); [`wakeup`] when the next cycle starts;
//! `runner` is `nodewright run` as deployed (leader election, metrics, Events) and
//! `status` the status ConfigMap it writes; [`reload`] how a new config takes over
//! without forgetting the loop's memory or the providers' work in flight.

pub mod clouds;
pub mod cycle;
pub mod memory;
pub mod reload;
mod runner;
mod status;
pub mod wakeup;

pub use cycle::{log_report, Cycle, CycleError, CycleReport, NoteLog, Reconciler};
pub use memory::{DisruptionTimes, LastKnown, LoopMemory};
pub use reload::ProviderInputs;
pub use runner::{run, LeaderOptions, RunOptions};
