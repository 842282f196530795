//! Writes the workloads the cost comparison in BENCHMARKS.md replays (issue 28), each a
//! day (virtual day 0 is a Monday), deterministic: the same files every run.
//!
//! Run: `cargo run --example replay_workloads [OUT_DIR]` (default
//! `examples/workloads`), then replay each against `examples/bench/*.yaml` with
//! `nodewright simulate --workload … --policy nodewright|ca-like|karpenter-like`.
//! `cargo run --example replay_workloads -- --table` also replays every workload with
//! every policy, each through the same function as that command line
//! (`cli::simulate_workload` with `--json`), and prints the rows of BENCHMARKS.md.
//!
//! - `web.csv`: diurnal web traffic. A `web` Deployment whose replicas (500m, 1 GiB)
//!   follow the day, 6 at night to 48 in the early afternoon, re-evaluated every 5
//!   minutes (an HPA: a scale-out is new rows, a scale-in ends the newest replicas), and
//!   three steady services.
//! - `ci.csv`: bursty CI as Jobs. Through the working day (08:00 to 19:00) a pipeline
//!   every 4 to 20 minutes starts 5 to 40 Job pods (1 to 2 CPU, 2 to 4 GiB, 3 to 20
//!   minutes); three merge trains of 120 pods; a few nightly jobs. Arrivals to the
//!   millisecond (fractional seconds).
//! - `notebooks.csv`: interactive sessions as bare pods (`kind: Pod`, lost if evicted):
//!   arrivals through the working day, 1 to 4 CPU and 4 to 12 GiB, for 20 minutes to 4
//!   hours, and a hub Deployment.
//! - `mixed.csv`: mixed shapes: tiny sidecars (100m, 128 MiB), medium services, memory
//!   heavy caches (1 CPU, 12 GiB) and CPU heavy workers (6 CPU, 2 GiB), arriving and
//!   leaving through the day.
//! - `gpu.csv`: CPU services plus GPU training Jobs (`pool=gpu`, 1 GPU, 4 CPU, 24 GiB,
//!   1 to 3 hours) and short GPU inference bursts; only the GPU group hosts them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use nodewright::cli::{simulate_workload, SimulateArgs};
use nodewright::sim::whatif::workload::{to_csv, PodKind, WorkloadRow};

const DAY_MS: u64 = 86_400_000;
const HOUR_MS: u64 = 3_600_000;
const MIN_MS: u64 = 60_000;

/// A small seeded generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// An exponential gap with mean `mean_ms`, to the millisecond.
    fn gap(&mut self, mean_ms: f64) -> u64 {
        (-(1.0 - self.unit()).ln() * mean_ms) as u64
    }
}

struct Rows(Vec<WorkloadRow>);

impl Rows {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        at_ms: u64,
        name: &str,
        cpu_m: u64,
        mem_mib: u64,
        duration_s: u64,
        kind: PodKind,
        gpu: u32,
    ) {
        let mut node_selector = BTreeMap::new();
        if gpu > 0 {
            node_selector.insert("pool".to_string(), "gpu".to_string());
        }
        self.0.push(WorkloadRow {
            line: 0,
            arrival_ms: at_ms,
            name: name.to_string(),
            cpu_m,
            mem_mib,
            duration_s: duration_s.max(1),
            kind,
            node_selector,
            gpu,
            priority: 0,
            image: None,
            local_volume: false,
        });
    }
}

/// A pod shape of the mixed workload: name, CPU, memory (MiB), mean gap between arrivals
/// (minutes), duration range (minutes).
type Shape = (&'static str, u64, u64, u64, (u64, u64));
/// What writes one workload.
type Make = fn() -> Vec<WorkloadRow>;

/// Replicas wanted at `t` (ms into the day): `low` at night, `high` at 14:00.
fn diurnal(t: u64, low: f64, high: f64) -> u64 {
    let hour = t as f64 / HOUR_MS as f64;
    let phase = ((hour - 14.0) / 24.0 * std::f64::consts::TAU).cos();
    let level = ((phase + 1.0) / 2.0).powf(1.5);
    (low + (high - low) * level).round() as u64
}

fn web() -> Vec<WorkloadRow> {
    let mut rng = Rng(11);
    let mut rows = Rows(Vec::new());
    for (name, cpu, mem) in [("api", 1000, 2048), ("auth", 500, 1024), ("db", 2000, 6144)] {
        for _ in 0..2 {
            rows.push(0, name, cpu, mem, 86_400, PodKind::Deployment, 0);
        }
    }
    // Live replicas as (start ms); a scale-in ends the newest first.
    let mut live: Vec<u64> = Vec::new();
    let step = 5 * MIN_MS;
    let mut t = 0;
    while t < DAY_MS {
        let noise = rng.range(0, 4) as i64 - 2;
        let want = (diurnal(t, 6.0, 48.0) as i64 + noise).max(4) as usize;
        while live.len() < want {
            live.push(t);
        }
        while live.len() > want {
            if let Some(start) = live.pop() {
                let d = (t - start) / 1000;
                if d > 0 {
                    rows.push(start, "web", 500, 1024, d, PodKind::Deployment, 0);
                }
            }
        }
        t += step;
    }
    for start in live {
        rows.push(
            start,
            "web",
            500,
            1024,
            (DAY_MS - start) / 1000,
            PodKind::Deployment,
            0,
        );
    }
    rows.0
}

fn ci() -> Vec<WorkloadRow> {
    let mut rng = Rng(22);
    let mut rows = Rows(Vec::new());
    let mut t = 8 * HOUR_MS;
    while t < 19 * HOUR_MS {
        let n = rng.range(5, 40);
        for _ in 0..n {
            let at = t + rng.range(0, 30_000);
            let cpu = rng.range(2, 4) * 500;
            let mem = rng.range(2, 4) * 1024;
            let dur = rng.range(3, 20) * 60;
            rows.push(at, "ci", cpu, mem, dur, PodKind::Job, 0);
        }
        t += rng.range(4, 20) * MIN_MS + rng.range(0, 999);
    }
    for train in [
        10 * HOUR_MS + 17_500,
        13 * HOUR_MS + 40_250,
        16 * HOUR_MS + 5_125,
    ] {
        for k in 0..120 {
            let at = train + k * 250;
            rows.push(
                at,
                "train",
                1000,
                2048,
                rng.range(5, 15) * 60,
                PodKind::Job,
                0,
            );
        }
    }
    for k in 0..6 {
        rows.push(
            HOUR_MS + k * 1500,
            "nightly",
            2000,
            4096,
            5400,
            PodKind::Job,
            0,
        );
    }
    rows.0
}

fn notebooks() -> Vec<WorkloadRow> {
    let mut rng = Rng(33);
    let mut rows = Rows(Vec::new());
    rows.push(0, "hub", 500, 1024, 86_400, PodKind::Deployment, 0);
    let mut t = 8 * HOUR_MS;
    while t < 20 * HOUR_MS {
        let cpu = rng.range(1, 4) * 1000;
        let mem = rng.range(1, 3) * 4096;
        let dur = rng.range(20, 240) * 60;
        rows.push(t, "notebook", cpu, mem, dur, PodKind::Pod, 0);
        t += rng.gap(6.0 * MIN_MS as f64);
    }
    rows.0
}

fn mixed() -> Vec<WorkloadRow> {
    let mut rng = Rng(44);
    let mut rows = Rows(Vec::new());
    // (name, cpu, mem MiB, mean gap, duration range in minutes)
    let shapes: [Shape; 4] = [
        ("sidecar", 100, 128, 4, (30, 600)),
        ("service", 750, 1536, 8, (60, 720)),
        ("cache", 1000, 12_288, 40, (120, 900)),
        ("worker", 6000, 2048, 30, (20, 240)),
    ];
    for (name, cpu, mem, gap_min, (lo, hi)) in shapes {
        let mut t = rng.range(0, gap_min * MIN_MS);
        while t < DAY_MS {
            let busy = (7 * HOUR_MS..21 * HOUR_MS).contains(&t);
            let dur = rng.range(lo, hi) * 60;
            if busy || rng.unit() < 0.3 {
                rows.push(t, name, cpu, mem, dur, PodKind::Deployment, 0);
            }
            t += rng.gap((gap_min * MIN_MS) as f64);
        }
    }
    rows.0
}

fn gpu() -> Vec<WorkloadRow> {
    let mut rng = Rng(55);
    let mut rows = Rows(Vec::new());
    for (name, cpu, mem) in [("api", 1000, 2048), ("ui", 500, 1024)] {
        for _ in 0..3 {
            rows.push(0, name, cpu, mem, 86_400, PodKind::Deployment, 0);
        }
    }
    let mut t = 7 * HOUR_MS;
    while t < 21 * HOUR_MS {
        let dur = rng.range(60, 180) * 60;
        rows.push(t, "train", 4000, 24_576, dur, PodKind::Job, 1);
        t += rng.gap(40.0 * MIN_MS as f64);
    }
    let mut t = 9 * HOUR_MS;
    while t < 18 * HOUR_MS {
        for k in 0..rng.range(2, 6) {
            rows.push(
                t + k * 100,
                "infer",
                2000,
                8192,
                rng.range(5, 20) * 60,
                PodKind::Job,
                1,
            );
        }
        t += rng.gap(90.0 * MIN_MS as f64);
    }
    rows.0
}

/// One markdown row of the comparison: the figures of one replay (`--json`).
fn table_row(workload: &str, policy: &str, config: &str, v: &serde_json::Value) -> String {
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let nh = f("node_hours");
    let share = |k: &str| {
        if nh > 0.0 {
            100.0 * f(k) / nh
        } else {
            0.0
        }
    };
    format!(
        "| {workload} | {policy} | {config} | {nh:.1} | {:.2}× | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} % | {:.0} % | {:.0} |",
        nh / f("lower_bound_node_hours").max(f64::MIN_POSITIVE),
        f("cost"),
        f("wait_p95_s"),
        f("evictions"),
        f("running_jobs_evicted"),
        share("empty_node_hours"),
        share("booting_node_hours"),
        f("never_started") + f("pods_lost"),
    )
}

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let table = args.iter().any(|a| a == "--table");
    args.retain(|a| a != "--table");
    let dir = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("examples/workloads"));
    std::fs::create_dir_all(&dir)?;
    let sets: [(&str, Make); 5] = [
        ("web", web),
        ("ci", ci),
        ("notebooks", notebooks),
        ("mixed", mixed),
        ("gpu", gpu),
    ];
    for (name, make) in sets {
        let mut rows = make();
        rows.sort_by_key(|r| r.arrival_ms);
        // Unique names: the workload name and its row number.
        for (i, r) in rows.iter_mut().enumerate() {
            r.name = format!("{}-{i}", r.name);
        }
        let path = dir.join(format!("{name}.csv"));
        let header = format!(
            "# Generated by `cargo run --example replay_workloads` ({name}); see that file.\n"
        );
        std::fs::write(&path, header + &to_csv(&rows))?;
        println!("{}: {} pods", path.display(), rows.len());
    }
    if !table {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for (name, _) in sets {
        let config = if name == "gpu" {
            "examples/bench/gpu.yaml"
        } else {
            "examples/bench/cpu.yaml"
        };
        for policy in ["nodewright", "ca-like", "karpenter-like"] {
            let args = SimulateArgs {
                workload: Some(dir.join(format!("{name}.csv"))),
                json: true,
                policy: Some(policy.to_string()),
                ..SimulateArgs::default()
            };
            let out = rt.block_on(simulate_workload(std::path::Path::new(config), &args))?;
            let v: serde_json::Value = serde_json::from_str(&out)?;
            println!("{}", table_row(name, policy, config, &v));
        }
    }
    Ok(())
}
