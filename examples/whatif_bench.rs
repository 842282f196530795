//! How fast the what-if replays a week: a generated 7-day, 20,000-pod workload through
//! the real loop (observe → plan → act) against the in-memory world, on the virtual
//! clock, with one `scanInterval` (30 s) between cycles.
//!
//! Run: `cargo run --release --example whatif_bench [pods] [days] [seed]`
//! (default 20,000 pods over 7 days). A benchmark, not a test: it prints the wall time,
//! cycles per second and the report, and asserts nothing about speed.
//!
//! The workload (deterministic for a seed):
//! - 40 service replicas running all week (500m–1 CPU, 1–2 GiB);
//! - a daily curve: replicas of `web` added through the morning, removed in the
//!   evening (one row each, 20 per weekday, 8 on weekends);
//! - the rest are batch pods (`Job`) arriving at random, more in working hours and
//!   in bursts of 20–60 on the hour every few hours, running 2 minutes to 2 hours,
//!   250m–4 CPU and 256 MiB–8 GiB.
//!
//! The config: one group of 8 CPU / 16 GiB nodes (up to 80), freeMemoryTarget 4 GiB,
//! scale-down after 10 minutes unneeded, 90 s boot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodewright::config::Config;
use nodewright::sim::whatif::replay::replay;
use nodewright::sim::whatif::report::{duration_text, render_table};
use nodewright::sim::whatif::workload::{PodKind, WorkloadRow};
use nodewright::sim::whatif::world::WorldOptions;

const DAY: u64 = 86_400;

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
}

fn row(
    arrival_s: u64,
    name: &str,
    cpu_m: u64,
    mem_mib: u64,
    duration_s: u64,
    kind: PodKind,
) -> WorkloadRow {
    WorkloadRow {
        line: 0,
        arrival_ms: arrival_s * 1000,
        name: name.to_string(),
        cpu_m,
        mem_mib,
        duration_s,
        kind,
        node_selector: BTreeMap::new(),
        gpu: 0,
        priority: 0,
        image: None,
        local_volume: false,
    }
}

fn workload(pods: usize, days: u64, seed: u64) -> Vec<WorkloadRow> {
    let mut rng = Rng(seed);
    let span = days * DAY;
    let mut rows = Vec::with_capacity(pods);
    for i in 0..40.min(pods) {
        let cpu = rng.range(5, 10) * 100;
        let mem = rng.range(4, 8) * 256;
        rows.push(row(
            0,
            &format!("svc-{}", i % 8),
            cpu,
            mem,
            span,
            PodKind::Deployment,
        ));
    }
    for d in 0..days {
        let weekday = d % 7 < 5;
        let extra = if weekday { 20 } else { 8 };
        for k in 0..extra {
            if rows.len() >= pods {
                break;
            }
            // Up between 07:00 and 11:00, down between 17:00 and 22:00.
            let up = d * DAY + 7 * 3600 + k * 4 * 3600 / extra;
            let down = d * DAY + 22 * 3600 - k * 5 * 3600 / extra;
            rows.push(row(up, "web", 1000, 2048, down - up, PodKind::Deployment));
        }
    }
    // Batch: thinned uniform arrivals (more in working hours) plus bursts.
    let mut burst_at = 3 * 3600;
    while rows.len() < pods {
        if rng.unit() < 0.002 && burst_at < span {
            let n = rng.range(20, 60);
            let (cpu, mem, dur) = (
                rng.range(1, 4) * 500,
                rng.range(1, 8) * 512,
                rng.range(10, 40) * 60,
            );
            for _ in 0..n {
                if rows.len() >= pods {
                    break;
                }
                rows.push(row(burst_at, "burst", cpu, mem, dur, PodKind::Job));
            }
            burst_at += rng.range(3, 9) * 3600;
            continue;
        }
        let t = rng.next() % span;
        let hour = t % DAY / 3600;
        let busy = (8..20).contains(&hour) && t / DAY % 7 < 5;
        if !busy && rng.unit() < 0.6 {
            continue;
        }
        let cpu = rng.range(1, 16) * 250;
        let mem = rng.range(1, 32) * 256;
        let dur = (120.0 + rng.unit().powi(3) * 7080.0) as u64;
        rows.push(row(t, "batch", cpu, mem, dur, PodKind::Job));
    }
    rows.sort_by_key(|r| r.arrival_ms);
    rows
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let pods: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let days: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(7)
        .max(1);
    let seed: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(7);

    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("t.sh.j2"),
        "#!/bin/sh\n{% for a in k3s_node_args %}{{ a }}\n{% endfor %}",
    )?;
    let yaml = format!(
        "clusterName: bench\nfreeMemoryTarget: 4 GiB\ntemplatesDir: {}\nnodeGroups:\n- name: workers\n  provider: openstack\n  maxSize: 80\n  openstack: {{flavor: m1.xlarge, image: i, network: n}}\n  userData: {{template: t.sh.j2}}\n",
        dir.path().display()
    );
    let config = Arc::new(Config::parse(&yaml, dir.path())?);
    let rows = workload(pods, days, seed);
    let options = WorldOptions {
        boot_delay: Duration::from_secs(90),
        ..WorldOptions::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    println!(
        "whatif_bench: {} pods over {days} day(s), seed {seed}; one group of 8 CPU / 16 GiB nodes",
        rows.len()
    );
    let started = Instant::now();
    let r = rt.block_on(replay(config, "bench", rows, &options))?;
    let wall = started.elapsed().as_secs_f64();
    let rep = &r.report;
    println!(
        "replayed {} of virtual time in {wall:.2} s wall: {} cycles, {:.0} cycles/s, {:.0}x real time",
        duration_text(rep.virtual_seconds),
        rep.cycles,
        rep.cycles as f64 / wall,
        rep.virtual_seconds as f64 / wall
    );
    println!(
        "timeline: {} samples, {} marks\n",
        r.timeline.samples.len(),
        r.timeline.marks.len()
    );
    print!("{}", render_table(&[rep]));
    Ok(())
}
