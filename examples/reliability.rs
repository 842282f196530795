//! The reliability figures of README.md: the real loop over the in-memory world on
//! the virtual clock, killed between external calls and restarted from what it can
//! read back, with 0 %, 10 % and 20 % of calls failing or half-done; every invariant
//! is checked after every cycle (see `crates/sim/src/whatif/crash.rs`).
//!
//! Run: `cargo run --release --example reliability [-- OPTIONS]`
//!
//! - `--seed N`: the first run's seed (default 1); run `i` uses `N + i`.
//! - `--runs R`: runs per fault rate (default 20).
//! - `--faults 0,0.1,0.2`: the fault rates (shares of calls).
//! - `--crash-every M`: a crash every M calls on average (default 60; 0: none).
//! - `--trace`: with one run and one rate, print every cycle (how to look into a
//!   failing seed).
//!
//! Exits 1 when any invariant broke, printing each failing run's seed and how to
//! rerun it.

use std::process::ExitCode;
use std::sync::Arc;

use nodewright::sim::whatif::crash::{campaign, render, run, scenario_config, RunOptions};

struct Args {
    seed: u64,
    runs: u32,
    rates: Vec<f64>,
    crash_every: u64,
    trace: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seed: 1,
        runs: 20,
        rates: vec![0.0, 0.1, 0.2],
        crash_every: 60,
        trace: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--runs" => a.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--crash-every" => {
                a.crash_every = value()?
                    .parse()
                    .map_err(|e| format!("--crash-every: {e}"))?
            }
            "--faults" => {
                a.rates = value()?
                    .split(',')
                    .map(|r| {
                        r.trim()
                            .parse::<f64>()
                            .map_err(|e| format!("--faults {r}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
                if a.rates.iter().any(|r| !(0.0..=1.0).contains(r)) {
                    return Err("--faults: each rate is between 0 and 1".into());
                }
            }
            "--trace" => a.trace = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(a)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("reliability: {e}");
            return ExitCode::from(2);
        }
    };
    let started = std::time::Instant::now();
    let mut failed = Vec::new();
    if args.trace {
        let (Some(rate), 1) = (args.rates.first(), args.runs) else {
            eprintln!("reliability: --trace needs --runs 1 and one --faults rate");
            return ExitCode::from(2);
        };
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("reliability: temp dir: {e}");
                return ExitCode::FAILURE;
            }
        };
        let config = match scenario_config(dir.path()) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                eprintln!("reliability: {e}");
                return ExitCode::FAILURE;
            }
        };
        let opts = RunOptions {
            seed: args.seed,
            fault_rate: *rate,
            crash_every: args.crash_every,
            trace: true,
        };
        match run(&config, opts).await {
            Ok(f) => {
                println!("{f:#?}");
                if !f.violations.is_empty() {
                    failed.push(f);
                }
            }
            Err(e) => {
                eprintln!("reliability: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        let totals = campaign(
            args.seed,
            args.runs,
            &args.rates,
            args.crash_every,
            &mut |f| {
                if !f.violations.is_empty() {
                    failed.push(f.clone());
                }
            },
        )
        .await;
        match totals {
            Ok(t) => print!("{}", render(&t)),
            Err(e) => {
                eprintln!("reliability: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("wall time: {:.1} s", started.elapsed().as_secs_f64());
    for f in &failed {
        println!(
            "seed {} at {} % faults broke an invariant:\n  {}\n  rerun: {}",
            f.seed,
            f.fault_rate * 100.0,
            f.violations.join("\n  "),
            f.rerun()
        );
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
