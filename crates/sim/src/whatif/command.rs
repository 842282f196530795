//! `nodewright simulate --workload FILE [--config FILE] [--compare OTHER.yaml]
//! [--plot OUT.svg] [--json]`: reads the workload and the config(s), replays, and
//! returns what to print.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::peers::{replay_peer, Policy};
use super::plot::{plot_svg, PlotError};
use super::replay::{replay, Replay};
use super::report::{duration_text, render_table};
use super::scoring::Scoring;
use super::workload::{parse_workload, WorkloadError, WorkloadRow};
use super::world::{WorldError, WorldOptions};
use crate::config::{Config, ConfigError};

/// What the command line asked for.
#[derive(Debug, Clone)]
pub struct WhatIf {
    pub workload: PathBuf,
    pub config: PathBuf,
    pub compare: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub json: bool,
    pub world: WorldOptions,
    /// Who decides: nodewright (the default) or a peer policy.
    pub policy: Policy,
}

#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("workload {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Workload {
        path: String,
        #[source]
        source: WorkloadError,
    },
    #[error("workload {0}: no pods (only a header, comments or blank lines)")]
    Empty(String),
    #[error("config {path}: {source}")]
    World {
        path: String,
        #[source]
        source: WorldError,
    },
    #[error(transparent)]
    Plot(#[from] PlotError),
    #[error("--boot-delay `{value}`: {message}; expected a duration (`90s`) or GROUP=DURATION (`gpu=5m`)")]
    BootDelay { value: String, message: String },
    #[error("--policy `{0}`: expected `nodewright` (the default), `ca-like` or `karpenter-like`")]
    Policy(String),
    #[error("--scoring `{0}`: expected `least-allocated` (the default, kube-scheduler's) or `most-allocated`")]
    Scoring(String),
}

impl WhatIfError {
    /// Bad input (exit code 2) rather than a failure while running.
    pub fn is_usage(&self) -> bool {
        !matches!(self, WhatIfError::Plot(_))
    }
}

/// Reads `--boot-delay` values (`90s`, or `GROUP=90s`) into `options`.
pub fn boot_delays(values: &[String], options: &mut WorldOptions) -> Result<(), WhatIfError> {
    for v in values {
        let err = |message: String| WhatIfError::BootDelay {
            value: v.clone(),
            message,
        };
        let (group, text) = match v.split_once('=') {
            Some((g, d)) if !g.trim().is_empty() => (Some(g.trim()), d),
            Some(_) => return Err(err("the group name is empty".into())),
            None => (None, v.as_str()),
        };
        let d: Duration = humantime::parse_duration(text.trim()).map_err(|e| err(e.to_string()))?;
        match group {
            Some(g) => {
                options.group_boot_delay.insert(g.to_string(), d);
            }
            None => options.boot_delay = d,
        }
    }
    Ok(())
}

/// Reads `--policy` (None: nodewright).
pub fn policy(value: Option<&str>) -> Result<Policy, WhatIfError> {
    value.map_or(Ok(Policy::Nodewright), |v| {
        Policy::parse(v).ok_or_else(|| WhatIfError::Policy(v.to_string()))
    })
}

/// Reads `--scoring` (None: least-allocated) into `options`.
pub fn scoring(value: Option<&str>, options: &mut WorldOptions) -> Result<(), WhatIfError> {
    if let Some(v) = value {
        options.scoring = Scoring::parse(v).ok_or_else(|| WhatIfError::Scoring(v.to_string()))?;
    }
    Ok(())
}

/// Reads and parses the workload file.
pub fn read_workload(path: &Path) -> Result<Vec<WorkloadRow>, WhatIfError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| WhatIfError::Read {
        path: shown.clone(),
        source,
    })?;
    let rows = parse_workload(&text).map_err(|source| WhatIfError::Workload {
        path: shown.clone(),
        source,
    })?;
    if rows.is_empty() {
        return Err(WhatIfError::Empty(shown));
    }
    Ok(rows)
}

/// The file name of `path`, to label its column.
fn label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

async fn one(
    path: &Path,
    config: Config,
    rows: Vec<WorkloadRow>,
    options: &WorldOptions,
    policy: Policy,
) -> Result<(Replay, Duration), WhatIfError> {
    let started = Instant::now();
    let config = Arc::new(config);
    let r = match policy {
        Policy::Nodewright => replay(config, &label(path), rows, options).await,
        peer => replay_peer(
            config,
            &format!("{} {}", peer.as_str(), label(path)),
            rows,
            options,
            peer,
        ),
    }
    .map_err(|source| WhatIfError::World {
        path: path.display().to_string(),
        source,
    })?;
    Ok((r, started.elapsed()))
}

/// `<stem>.compare.svg` next to `path`: where the second run's plot goes.
fn compare_plot_path(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plot".into());
    path.with_file_name(format!("{stem}.compare.svg"))
}

/// Runs the what-if and returns the text (or JSON) to print.
pub async fn run(args: &WhatIf) -> Result<String, WhatIfError> {
    // Every input is checked before anything runs.
    let config = Config::load(&args.config)?;
    let other = args.compare.as_deref().map(Config::load).transpose()?;
    let rows = read_workload(&args.workload)?;

    let mut runs = vec![(
        args.config.clone(),
        one(&args.config, config, rows.clone(), &args.world, args.policy).await?,
    )];
    if let (Some(path), Some(c)) = (&args.compare, other) {
        runs.push((
            path.clone(),
            one(path, c, rows, &args.world, args.policy).await?,
        ));
    }
    if let Some(plot) = &args.plot {
        for (i, (path, (r, _))) in runs.iter().enumerate() {
            let out = if i == 0 {
                plot.clone()
            } else {
                compare_plot_path(plot)
            };
            let title = format!("{} on {}", label(path), label(&args.workload));
            plot_svg(&r.timeline, &title, &out)?;
        }
    }
    if args.json {
        let value = match runs.as_slice() {
            [(_, (a, _))] => serde_json::to_value(&a.report),
            [(_, (a, _)), (_, (b, _))] => {
                serde_json::to_value(serde_json::json!({"config": a.report, "compare": b.report}))
            }
            _ => Ok(serde_json::Value::Null),
        };
        // Plain data: serializing it cannot fail.
        let text = value
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        return Ok(format!("{text}\n"));
    }
    let mut out = format!(
        "what-if: {} ({} pods) replayed through the real loop in virtual time\n",
        args.workload.display(),
        rows_len(&runs)
    );
    for (path, (r, wall)) in &runs {
        let secs = wall.as_secs_f64();
        out.push_str(&format!(
            "  {}: {} of virtual time, {} cycles in {:.2} s ({:.0} cycles/s)\n",
            path.display(),
            duration_text(r.report.virtual_seconds),
            r.report.cycles,
            secs,
            if secs > 0.0 {
                r.report.cycles as f64 / secs
            } else {
                0.0
            }
        ));
    }
    out.push('\n');
    let reports: Vec<_> = runs.iter().map(|(_, (r, _))| &r.report).collect();
    out.push_str(&render_table(&reports));
    if let Some(plot) = &args.plot {
        out.push_str(&format!("\nplot: {}", plot.display()));
        if runs.len() > 1 {
            out.push_str(&format!(", {}", compare_plot_path(plot).display()));
        }
        out.push('\n');
    }
    Ok(out)
}

fn rows_len(runs: &[(PathBuf, (Replay, Duration))]) -> u32 {
    runs.first().map_or(0, |(_, (r, _))| r.report.pods)
}
