//! Seeded fault injection for the HTTP simulators (Kubernetes API server, OpenStack,
//! Proxmox VE, Kamatera): one [`FaultSpec`] shared by every server, one [`Faults`]
//! handle per server (its own random stream, derived from the seed and the server's
//! name, and its own counters).
//!
//! A faulted request answers 5xx, times out (held, then its connection dropped; half of
//! them after the server did the work, so the answer alone is lost), answers 429 with
//! `Retry-After`, or is slow. The simulators also leave operations half done at the
//! same rate ([`HalfDone`]): a create answering 500 while the server appears, a delete
//! accepted that never happens, a Proxmox clone task failing after the VM exists, a 409
//! Conflict on a node patch. Tests can also force the next faults ([`Faults::force`],
//! [`Faults::force_half_done`]) and switch injection off to check convergence.
//!
//! Every 429 sets a "not before" time on its endpoint (method and path); the next request
//! to that endpoint arriving earlier (beyond [`IN_FLIGHT_GRACE`]) is counted in
//! [`FaultCounts::early_retries`], so tests can assert Retry-After is honoured.

mod layer;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

pub(crate) use layer::inject;
pub use layer::{ConnKill, Dialect, KillableListener};

/// Environment variable `nodewright simulate` reads a fault spec from (as `--faults`).
pub const ENV_FAULTS: &str = "NODEWRIGHT_SIM_FAULTS";

/// A request arriving this soon after a 429 was sent was already on its way: not counted
/// as ignoring the Retry-After.
pub const IN_FLIGHT_GRACE: Duration = Duration::from_millis(100);

/// The longest `retryAfter`: about 11.6 days, as far as the `Retry-After: 999999` a
/// misbehaving server was seen to send.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(1_000_000);

/// What faults to inject, shared by every simulator.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultSpec {
    /// Fraction (0 to 1) of requests that fail, and of operations left half done.
    pub rate: f64,
    /// Seed of every simulator's random stream: the same seed, the same faults for the
    /// same sequence of requests.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Kinds to inject; all of them by default.
    #[serde(default = "FaultKind::all")]
    pub kinds: Vec<FaultKind>,
    /// Value of the `Retry-After` header of a 429.
    #[serde(default = "default_retry_after", with = "humantime_serde")]
    pub retry_after: Duration,
    /// How long a slow request is held before it is served.
    #[serde(default = "default_slow", with = "humantime_serde")]
    pub slow: Duration,
    /// How long a timed-out request is held before its connection is dropped.
    #[serde(default = "default_hold", with = "humantime_serde")]
    pub hold: Duration,
    /// The pause between two bytes of a dripping answer.
    #[serde(default = "default_drip", with = "humantime_serde")]
    pub drip: Duration,
}

fn default_seed() -> u64 {
    1
}
fn default_retry_after() -> Duration {
    Duration::from_secs(1)
}
fn default_slow() -> Duration {
    Duration::from_millis(400)
}
fn default_hold() -> Duration {
    Duration::from_millis(300)
}
fn default_drip() -> Duration {
    Duration::from_secs(1)
}

/// A kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// 500 or 503 in the server's own error format.
    ServerError,
    /// Held for `hold`, then the connection is dropped without an answer.
    Timeout,
    /// 429 with `Retry-After`.
    TooManyRequests,
    /// Served after `slow`.
    Slow,
    /// Operations left half done (see [`HalfDone`]).
    HalfDone,
    /// Answered a byte at a time, one every `drip`: the status and headers at once, the
    /// body for as long as it lasts, as a hung proxy does. Not among the default kinds:
    /// it tests a client's deadlines, and a call without one hangs on it.
    Drip,
}

impl FaultKind {
    pub fn all() -> Vec<FaultKind> {
        vec![
            FaultKind::ServerError,
            FaultKind::Timeout,
            FaultKind::TooManyRequests,
            FaultKind::Slow,
            FaultKind::HalfDone,
        ]
    }
}

/// An operation a simulator can leave half done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HalfDone {
    /// OpenStack, Kamatera: the create answers 500, yet the server appears and boots.
    CreateFailsButServerAppears,
    /// OpenStack: the delete answers 204 and nothing happens. Kamatera: the terminate is
    /// queued and its command ends in error. Proxmox: the destroy task fails.
    DeleteNeverHappens,
    /// Proxmox: the clone task fails after the VM exists (it stays, unlocked).
    CloneFailsAfterVmExists,
    /// Kubernetes: a node PATCH answers 409 Conflict and changes nothing.
    NodePatchConflict,
}

impl HalfDone {
    pub fn as_str(self) -> &'static str {
        match self {
            HalfDone::CreateFailsButServerAppears => "create-fails-but-server-appears",
            HalfDone::DeleteNeverHappens => "delete-never-happens",
            HalfDone::CloneFailsAfterVmExists => "clone-fails-after-vm-exists",
            HalfDone::NodePatchConflict => "node-patch-conflict",
        }
    }
}

impl FaultSpec {
    /// `rate` of every kind, default seed and timings.
    pub fn rate(rate: f64) -> FaultSpec {
        FaultSpec {
            rate,
            seed: default_seed(),
            kinds: FaultKind::all(),
            retry_after: default_retry_after(),
            slow: default_slow(),
            hold: default_hold(),
            drip: default_drip(),
        }
    }

    /// A fraction (`0.2`: every kind at 20 %), or the path of a YAML file holding a spec.
    pub fn parse(text: &str) -> Result<FaultSpec, String> {
        let spec = match text.trim().parse::<f64>() {
            Ok(rate) => FaultSpec::rate(rate),
            Err(_) => Self::from_file(Path::new(text.trim()))?,
        };
        spec.validate()?;
        Ok(spec)
    }

    fn from_file(path: &Path) -> Result<FaultSpec, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "faults: '{}' is neither a fraction (e.g. 0.2) nor a readable file: {e}",
                path.display()
            )
        })?;
        serde_yaml::from_str(&text).map_err(|e| format!("faults file {}: {e}", path.display()))
    }

    /// Checks the ranges; the error names the field and what it takes.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.rate) {
            return Err(format!(
                "faults: rate {} is not a fraction; expected 0 to 1 (0.2 = 20 % of requests)",
                self.rate
            ));
        }
        if self.kinds.is_empty() {
            return Err("faults: kinds is empty; list at least one of server-error, timeout, too-many-requests, slow, half-done, drip (or leave it out for all but drip)".into());
        }
        if self.retry_after.is_zero() || self.retry_after > MAX_RETRY_AFTER {
            return Err(format!(
                "faults: retryAfter {:?} is out of range; expected 1s to {}s (far beyond any client's patience, as a broken server may ask)",
                self.retry_after,
                MAX_RETRY_AFTER.as_secs()
            ));
        }
        if self.drip.is_zero() {
            return Err("faults: drip 0s would not drip; expected 1ms to 30s".into());
        }
        for (name, d) in [
            ("slow", self.slow),
            ("hold", self.hold),
            ("drip", self.drip),
        ] {
            if d > Duration::from_secs(30) {
                return Err(format!(
                    "faults: {name} {d:?} is too long; expected at most 30s"
                ));
            }
        }
        Ok(())
    }
}

/// What the layer does to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    ServerError {
        unavailable: bool,
    },
    /// `done`: serve it first, then drop the answer.
    Timeout {
        done: bool,
    },
    TooManyRequests,
    Slow,
    Drip,
}

/// What was injected, and how clients behaved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub requests: u64,
    pub server_errors: u64,
    pub timeouts: u64,
    pub too_many_requests: u64,
    pub slow: u64,
    pub drips: u64,
    pub half_done: BTreeMap<&'static str, u64>,
    /// Requests that came back to an endpoint before its Retry-After ran out.
    pub early_retries: u64,
}

impl FaultCounts {
    /// Faults injected, of every kind.
    pub fn faults(&self) -> u64 {
        self.server_errors
            + self.timeouts
            + self.too_many_requests
            + self.slow
            + self.drips
            + self.half_done.values().sum::<u64>()
    }

    pub fn add(&mut self, o: &FaultCounts) {
        self.requests += o.requests;
        self.server_errors += o.server_errors;
        self.timeouts += o.timeouts;
        self.too_many_requests += o.too_many_requests;
        self.slow += o.slow;
        self.drips += o.drips;
        self.early_retries += o.early_retries;
        for (k, v) in &o.half_done {
            *self.half_done.entry(k).or_default() += v;
        }
    }
}

impl std::fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let half: Vec<String> = self
            .half_done
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        write!(
            f,
            "{} requests, {} faults: 5xx {}, timeouts {}, 429 {}, slow {}, dripping {}, half done {} [{}]; early retries {}",
            self.requests,
            self.faults(),
            self.server_errors,
            self.timeouts,
            self.too_many_requests,
            self.slow,
            self.drips,
            self.half_done.values().sum::<u64>(),
            half.join(", "),
            self.early_retries
        )
    }
}

struct State {
    rng: u64,
    enabled: bool,
    counts: FaultCounts,
    /// Endpoint → (when the 429 was sent, not before).
    not_before: HashMap<String, (Instant, Instant)>,
    early: Vec<String>,
    forced: Vec<(FaultKind, String)>,
    forced_half: Vec<HalfDone>,
}

struct Inner {
    spec: FaultSpec,
    state: Mutex<State>,
}

/// One simulator's fault injector; clones share it. The default injects nothing.
#[derive(Clone, Default)]
pub struct Faults(Option<Arc<Inner>>);

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => write!(f, "Faults(off)"),
            Some(i) => write!(f, "Faults({:?})", i.spec),
        }
    }
}

/// SplitMix64: small, seedable, good enough to pick faults.
fn next(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(s: &mut u64) -> f64 {
    (next(s) >> 11) as f64 / (1u64 << 53) as f64
}

impl Faults {
    /// The injector of server `server` (its name picks its own random stream).
    pub fn new(spec: &FaultSpec, server: &str) -> Faults {
        let mut rng = spec.seed;
        for b in server.bytes() {
            rng = next(&mut rng) ^ u64::from(b);
        }
        Faults(Some(Arc::new(Inner {
            spec: spec.clone(),
            state: Mutex::new(State {
                rng,
                enabled: true,
                counts: FaultCounts::default(),
                not_before: HashMap::new(),
                early: Vec::new(),
                forced: Vec::new(),
                forced_half: Vec::new(),
            }),
        })))
    }

    fn lock(&self) -> Option<MutexGuard<'_, State>> {
        self.0
            .as_ref()
            .map(|i| i.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn spec(&self) -> Option<&FaultSpec> {
        self.0.as_ref().map(|i| &i.spec)
    }

    /// Random injection on (the default) or off; forced faults and the Retry-After
    /// checks go on either way.
    pub fn set_enabled(&self, on: bool) {
        if let Some(mut st) = self.lock() {
            st.enabled = on;
        }
    }

    /// The next `n` requests whose `METHOD path` contains `endpoint` get `kind`
    /// (`HalfDone` is not a request fault: see [`Faults::force_half_done`]).
    pub fn force(&self, kind: FaultKind, endpoint: &str, n: usize) {
        if let Some(mut st) = self.lock() {
            st.forced
                .extend(std::iter::repeat_n((kind, endpoint.to_string()), n));
        }
    }

    /// The next `n` chances of `op` are taken.
    pub fn force_half_done(&self, op: HalfDone, n: usize) {
        if let Some(mut st) = self.lock() {
            st.forced_half.extend(std::iter::repeat_n(op, n));
        }
    }

    /// Forgets the Retry-Afters sent so far: a client process that was killed and
    /// started again cannot know them.
    pub fn forget_retry_afters(&self) {
        if let Some(mut st) = self.lock() {
            st.not_before.clear();
        }
    }

    pub fn counts(&self) -> FaultCounts {
        self.lock().map(|s| s.counts.clone()).unwrap_or_default()
    }

    /// The requests that came before their endpoint's Retry-After ran out.
    pub fn early_retries(&self) -> Vec<String> {
        self.lock().map(|s| s.early.clone()).unwrap_or_default()
    }

    /// Counts the request, checks it against its endpoint's Retry-After and picks its
    /// fault, if any.
    pub(crate) fn pick(&self, endpoint: &str) -> Option<Fault> {
        let inner = self.0.as_ref()?;
        let mut st = self.lock()?;
        st.counts.requests += 1;
        let now = Instant::now();
        if let Some((sent, not_before)) = st.not_before.remove(endpoint) {
            if now < not_before && now > sent + IN_FLIGHT_GRACE {
                st.counts.early_retries += 1;
                let early = format!(
                    "{endpoint}: {:.2}s after a 429 asking for {:.0}s",
                    (now - sent).as_secs_f64(),
                    (not_before - sent).as_secs_f64()
                );
                st.early.push(early);
            }
        }
        let forced = st
            .forced
            .iter()
            .position(|(_, e)| endpoint.contains(e.as_str()));
        let kind = match forced {
            Some(i) => st.forced.remove(i).0,
            None => {
                let request_kinds: Vec<FaultKind> = inner
                    .spec
                    .kinds
                    .iter()
                    .copied()
                    .filter(|k| *k != FaultKind::HalfDone)
                    .collect();
                if !st.enabled || request_kinds.is_empty() || unit(&mut st.rng) >= inner.spec.rate {
                    return None;
                }
                let i = (next(&mut st.rng) % request_kinds.len() as u64) as usize;
                request_kinds[i]
            }
        };
        let coin = next(&mut st.rng) & 1 == 1;
        Some(match kind {
            FaultKind::ServerError | FaultKind::HalfDone => {
                st.counts.server_errors += 1;
                Fault::ServerError { unavailable: coin }
            }
            FaultKind::Timeout => {
                st.counts.timeouts += 1;
                Fault::Timeout { done: coin }
            }
            FaultKind::TooManyRequests => {
                st.counts.too_many_requests += 1;
                Fault::TooManyRequests
            }
            FaultKind::Slow => {
                st.counts.slow += 1;
                Fault::Slow
            }
            FaultKind::Drip => {
                st.counts.drips += 1;
                Fault::Drip
            }
        })
    }

    /// Records that a 429 for `endpoint` is being sent now.
    pub(crate) fn sent_429(&self, endpoint: &str) {
        let Some(retry) = self.spec().map(|s| s.retry_after) else {
            return;
        };
        if let Some(mut st) = self.lock() {
            let now = Instant::now();
            st.not_before
                .insert(endpoint.to_string(), (now, now + retry));
        }
    }

    /// Whether this chance of leaving `op` half done is taken (forced, or at the rate
    /// when half-done faults are on).
    pub fn half_done(&self, op: HalfDone) -> bool {
        let Some(inner) = self.0.as_ref() else {
            return false;
        };
        let Some(mut st) = self.lock() else {
            return false;
        };
        let taken = if let Some(i) = st.forced_half.iter().position(|o| *o == op) {
            st.forced_half.remove(i);
            true
        } else {
            st.enabled
                && inner.spec.kinds.contains(&FaultKind::HalfDone)
                && unit(&mut st.rng) < inner.spec.rate
        };
        if taken {
            *st.counts.half_done.entry(op.as_str()).or_default() += 1;
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_from_a_fraction_or_a_file_and_bad_ones_name_the_field() {
        assert_eq!(FaultSpec::parse("0.2"), Ok(FaultSpec::rate(0.2)));
        let dir = tempfile::tempdir().expect("tmp");
        let cases: &[(&str, Result<(), &str>)] = &[
            (
                "rate: 0.1\nseed: 7\nkinds: [timeout, half-done]\nretryAfter: 2s\n",
                Ok(()),
            ),
            ("rate: 1.5\n", Err("rate 1.5 is not a fraction")),
            ("rate: 0.1\nkinds: []\n", Err("kinds is empty")),
            ("rate: 0.1\nretryAfter: 1000001s\n", Err("retryAfter")),
            ("rate: 0.1\nslow: 1h\n", Err("slow")),
            ("rate: 0.1\nrtae: 0.2\n", Err("unknown field `rtae`")),
            (
                "rate: 0.1\nkinds: [explode]\n",
                Err("unknown variant `explode`"),
            ),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let path = dir.path().join(format!("f{i}.yaml"));
            std::fs::write(&path, text).expect("write");
            let got = FaultSpec::parse(&path.display().to_string());
            match (want, got) {
                (Ok(()), Ok(spec)) => {
                    assert_eq!(spec.seed, 7);
                    assert_eq!(spec.kinds, vec![FaultKind::Timeout, FaultKind::HalfDone]);
                    assert_eq!(spec.retry_after, Duration::from_secs(2));
                }
                (Err(part), Err(e)) => assert!(e.contains(part), "{text}: {e}"),
                (want, got) => panic!("{text}: wanted {want:?}, got {got:?}"),
            }
        }
        let e = FaultSpec::parse("/nonexistent/faults.yaml").expect_err("missing");
        assert!(e.contains("neither a fraction"), "{e}");
    }

    #[test]
    fn the_same_seed_gives_the_same_faults_and_the_rate_holds() {
        let spec = FaultSpec {
            seed: 42,
            ..FaultSpec::rate(0.2)
        };
        let run = |server: &str| {
            let f = Faults::new(&spec, server);
            (0..5000)
                .map(|_| f.pick("GET /x").is_some())
                .collect::<Vec<bool>>()
        };
        let a = run("openstack");
        assert_eq!(a, run("openstack"));
        assert_ne!(a, run("proxmox"), "each server has its own stream");
        let hit = a.iter().filter(|x| **x).count();
        assert!((800..1200).contains(&hit), "{hit} of 5000 at 20 %");
        let off = Faults::default();
        assert!(off.pick("GET /x").is_none());
        assert!(!off.half_done(HalfDone::NodePatchConflict));
    }

    #[test]
    fn forced_faults_come_first_and_only_on_their_endpoint() {
        let f = Faults::new(&FaultSpec::rate(0.0), "k8s");
        f.force(FaultKind::TooManyRequests, "PATCH /api/v1/nodes/", 1);
        f.force_half_done(HalfDone::NodePatchConflict, 1);
        assert_eq!(f.pick("GET /api/v1/nodes"), None);
        assert_eq!(
            f.pick("PATCH /api/v1/nodes/a"),
            Some(Fault::TooManyRequests)
        );
        assert_eq!(f.pick("PATCH /api/v1/nodes/a"), None);
        assert!(f.half_done(HalfDone::NodePatchConflict));
        assert!(!f.half_done(HalfDone::NodePatchConflict));
        let c = f.counts();
        assert_eq!((c.requests, c.too_many_requests), (3, 1));
        assert_eq!(c.half_done.get("node-patch-conflict"), Some(&1));
    }
}
