//! Resource arithmetic as kube-scheduler's NodeResourcesFit counts it: CPU in
//! millicores, memory, ephemeral storage, pods per node, and every other resource
//! (hugepages, `nvidia.com/gpu`, ...) by name. Requests only, never limits or usage.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// Resource names with a field of their own; anything else is a scalar resource.
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// An amount of every resource the scheduler checks. Used both for what a pod requests
/// and for what a node offers (its allocatable).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Resources {
    /// Millicores.
    pub cpu: u64,
    /// Bytes.
    pub memory: u64,
    /// Bytes.
    pub ephemeral_storage: u64,
    /// Pod slots (a node's `pods` allocatable; a pod requests one).
    pub pods: u64,
    /// Hugepages and extended resources, in whole units (bytes for hugepages).
    pub scalar: BTreeMap<String, u64>,
}

impl Resources {
    pub fn cpu_mem(cpu_milli: u64, memory: u64) -> Resources {
        Resources {
            cpu: cpu_milli,
            memory,
            ..Resources::default()
        }
    }

    /// Sets one resource by its Kubernetes name; `value` is in base units (cores for
    /// CPU, bytes for memory), as [`super::quantity::quantity_value`] returns it.
    pub fn set(&mut self, name: &str, value: f64) {
        match name {
            // The API server rounds CPU up to whole millicores.
            CPU => self.cpu = ceil_units(value * 1000.0),
            MEMORY => self.memory = ceil_units(value),
            EPHEMERAL_STORAGE => self.ephemeral_storage = ceil_units(value),
            PODS => self.pods = ceil_units(value),
            other => {
                let v = ceil_units(value);
                if v > 0 {
                    self.scalar.insert(other.to_string(), v);
                } else {
                    self.scalar.remove(other);
                }
            }
        }
    }

    /// The amount of one resource by its Kubernetes name.
    pub fn get(&self, name: &str) -> u64 {
        match name {
            CPU => self.cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.pods,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    pub fn add(&mut self, o: &Resources) {
        self.cpu = self.cpu.saturating_add(o.cpu);
        self.memory = self.memory.saturating_add(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(o.ephemeral_storage);
        self.pods = self.pods.saturating_add(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    /// Subtracts, stopping at zero.
    pub fn sub(&mut self, o: &Resources) {
        self.cpu = self.cpu.saturating_sub(o.cpu);
        self.memory = self.memory.saturating_sub(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(o.ephemeral_storage);
        self.pods = self.pods.saturating_sub(o.pods);
        for (k, v) in &o.scalar {
            if let Some(e) = self.scalar.get_mut(k) {
                *e = e.saturating_sub(*v);
            }
        }
    }

    /// Each resource the larger of the two (init containers against the app's sum).
    pub fn max_with(&mut self, o: &Resources) {
        self.cpu = self.cpu.max(o.cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        self.pods = self.pods.max(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// The resources where `request` exceeds `self - used`, by name, as the scheduler
    /// reports them ("Insufficient cpu"). Zero requests always fit, as in the scheduler.
    pub fn shortfalls(&self, used: &Resources, request: &Resources) -> Vec<&'static str> {
        let mut out = Vec::new();
        let short = |alloc: u64, used: u64, req: u64| req > 0 && used.saturating_add(req) > alloc;
        if short(self.pods, used.pods, request.pods.max(1)) {
            out.push(PODS);
        }
        if short(self.cpu, used.cpu, request.cpu) {
            out.push(CPU);
        }
        if short(self.memory, used.memory, request.memory) {
            out.push(MEMORY);
        }
        if short(
            self.ephemeral_storage,
            used.ephemeral_storage,
            request.ephemeral_storage,
        ) {
            out.push(EPHEMERAL_STORAGE);
        }
        if request.scalar.iter().any(|(k, v)| {
            short(
                self.scalar_limit(k),
                used.scalar.get(k).copied().unwrap_or(0),
                *v,
            )
        }) {
            out.push("extended");
        }
        out
    }

    /// Whether `request` fits into what is left of `self` after `used`.
    pub fn fits(&self, used: &Resources, request: &Resources) -> bool {
        let ok = |alloc: u64, used: u64, req: u64| req == 0 || used.saturating_add(req) <= alloc;
        ok(self.pods, used.pods, request.pods.max(1))
            && ok(self.cpu, used.cpu, request.cpu)
            && ok(self.memory, used.memory, request.memory)
            && ok(
                self.ephemeral_storage,
                used.ephemeral_storage,
                request.ephemeral_storage,
            )
            && request.scalar.iter().all(|(k, v)| {
                ok(
                    self.scalar_limit(k),
                    used.scalar.get(k).copied().unwrap_or(0),
                    *v,
                )
            })
    }

    /// What `self` offers of scalar resource `k`: none when unset, except a CSI attach
    /// count a node does not publish, which is unlimited (as kube-scheduler's
    /// NodeVolumeLimits treats a driver without `allocatable.count`).
    fn scalar_limit(&self, k: &str) -> u64 {
        match self.scalar.get(k) {
            Some(v) => *v,
            None if k.starts_with(super::volumes::ATTACH_PREFIX) => u64::MAX,
            None => 0,
        }
    }

    /// Names of scalar resources `request` asks for, with their amounts.
    pub fn scalar_names(&self) -> impl Iterator<Item = &str> {
        self.scalar.keys().map(String::as_str)
    }

    /// The sort key of first-fit decreasing: the larger share of a reference node's CPU
    /// or memory this takes, so CPU-heavy and memory-heavy pods are both sorted by size.
    pub fn dominant_share(&self, reference: &Resources) -> f64 {
        let share = |v: u64, of: u64| if of == 0 { 0.0 } else { v as f64 / of as f64 };
        let scalar = self
            .scalar
            .iter()
            .map(|(k, v)| share(*v, reference.scalar.get(k).copied().unwrap_or(0)))
            .fold(0.0, f64::max);
        share(self.cpu, reference.cpu)
            .max(share(self.memory, reference.memory))
            .max(scalar)
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu {}, memory {}",
            fmt_cpu(self.cpu),
            bytesize::ByteSize(self.memory).display().iec()
        )?;
        if self.ephemeral_storage > 0 {
            write!(
                f,
                ", ephemeral-storage {}",
                bytesize::ByteSize(self.ephemeral_storage).display().iec()
            )?;
        }
        for (k, v) in &self.scalar {
            write!(f, ", {k} {v}")?;
        }
        Ok(())
    }
}

/// Rounds a quantity up to whole units as the API server does, without the float noise
/// of the unit conversion turning `350m` (0.35 × 1000 = 350.00000000000006) into 351.
pub fn ceil_units(v: f64) -> u64 {
    let nearest = v.round();
    if (v - nearest).abs() <= 1e-6 * nearest.abs().max(1.0) {
        nearest as u64
    } else {
        v.ceil() as u64
    }
}

/// `1500m` as `1.5`, `250m` as `250m`.
pub fn fmt_cpu(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        format!("{}", milli / 1000)
    } else if milli > 1000 {
        format!("{:.1}", milli as f64 / 1000.0)
    } else {
        format!("{milli}m")
    }
}

/// One container's requests, as the pod-level sum needs them.
#[derive(Debug, Clone, Default)]
pub struct ContainerRequests {
    pub requests: Resources,
    /// An init container with `restartPolicy: Always` (a sidecar): it keeps running
    /// beside the app containers.
    pub restartable: bool,
}

/// What the scheduler reserves for a pod: the app containers plus sidecars, or the
/// largest init container step (each init container runs beside the sidecars started
/// before it) if that is more, per resource; plus the pod overhead; plus one pod slot.
pub fn pod_requests(
    app: &[Resources],
    init: &[ContainerRequests],
    overhead: Option<&Resources>,
) -> Resources {
    let mut total = Resources::default();
    for c in app {
        total.add(c);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in init {
        if c.restartable {
            total.add(&c.requests);
            sidecars.add(&c.requests);
            init_peak.max_with(&sidecars);
        } else {
            let mut step = c.requests.clone();
            step.add(&sidecars);
            init_peak.max_with(&step);
        }
    }
    total.max_with(&init_peak);
    if let Some(o) = overhead {
        total.add(o);
    }
    total.pods = 1;
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: u64 = 1 << 20;

    fn r(cpu: u64, mem_mi: u64) -> Resources {
        Resources::cpu_mem(cpu, mem_mi * MI)
    }

    #[test]
    fn app_containers_add_up() {
        let p = pod_requests(&[r(100, 64), r(200, 128)], &[], None);
        assert_eq!((p.cpu, p.memory, p.pods), (300, 192 * MI, 1));
    }

    #[test]
    fn init_container_larger_than_app_sum_wins_per_resource() {
        let init = ContainerRequests {
            requests: r(1000, 10),
            restartable: false,
        };
        let p = pod_requests(&[r(100, 512)], &[init], None);
        assert_eq!((p.cpu, p.memory), (1000, 512 * MI));
    }

    #[test]
    fn sidecars_run_beside_app_and_later_init_containers() {
        let sidecar = ContainerRequests {
            requests: r(200, 100),
            restartable: true,
        };
        let late_init = ContainerRequests {
            requests: r(900, 10),
            restartable: false,
        };
        // app 100m + sidecar 200m = 300m; init step: 900m + sidecar 200m = 1100m.
        let p = pod_requests(&[r(100, 50)], &[sidecar, late_init], None);
        assert_eq!(p.cpu, 1100);
        assert_eq!(p.memory, 150 * MI);
    }

    #[test]
    fn overhead_is_added_after_the_max() {
        let p = pod_requests(&[r(100, 100)], &[], Some(&r(50, 20)));
        assert_eq!((p.cpu, p.memory), (150, 120 * MI));
    }

    #[test]
    fn pods_without_requests_count_as_zero_but_take_a_slot() {
        let p = pod_requests(&[Resources::default()], &[], None);
        assert_eq!((p.cpu, p.memory, p.pods), (0, 0, 1));
        let mut node = r(1000, 1024);
        node.pods = 1;
        assert!(node.fits(&Resources::default(), &p));
        let used = Resources {
            pods: 1,
            ..Resources::default()
        };
        assert_eq!(node.shortfalls(&used, &p), vec![PODS]);
    }

    #[test]
    fn extended_resources_must_be_offered() {
        let mut node = r(4000, 8192);
        node.pods = 110;
        let mut gpu_pod = r(100, 100);
        gpu_pod.set("nvidia.com/gpu", 1.0);
        assert!(!node.fits(&Resources::default(), &gpu_pod));
        node.set("nvidia.com/gpu", 2.0);
        assert!(node.fits(&Resources::default(), &gpu_pod));
    }

    #[test]
    fn millicores_survive_the_float_conversion_exactly() {
        // 12.5 % of millicore values used to come out 1m high.
        for m in 1..=20_000u64 {
            let mut r = Resources::default();
            r.set(CPU, m as f64 / 1000.0);
            assert_eq!(r.cpu, m, "{m}m");
        }
        let mut r = Resources::default();
        r.set(MEMORY, 1.5 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(r.memory, 3 << 29);
    }

    #[test]
    fn cpu_rounds_up_to_millicores() {
        let mut x = Resources::default();
        x.set(CPU, 0.0005);
        assert_eq!(x.cpu, 1);
        x.set(CPU, 2.0);
        assert_eq!(fmt_cpu(x.cpu), "2");
        assert_eq!(fmt_cpu(1500), "1.5");
        assert_eq!(fmt_cpu(250), "250m");
    }
}
