//! Command line: raw arguments (clap) → validated config → one of the commands.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;

use clap::{Args, Parser, Subcommand};

use crate::act::render_user_data;
use crate::cloud::CloudError;
use crate::cluster::{client_from_env, KubeCluster};
use crate::config::{Config, ConfigError, ENV_CONFIG_FILE};
use crate::plan::{unremovable, Bucket, Decision, Unremovable};
use crate::run::clouds::{build_clouds, build_clouds_read_only};
use crate::run::{LeaderOptions, Reconciler, RunOptions};
use crate::telemetry::{init_logging, LogFormat};

#[derive(Debug, Parser)]
#[command(
    name = "nodewright",
    version,
    about = "Kubernetes node autoscaler for Proxmox VE, plain OpenStack and small clouds"
)]
pub struct Cli {
    /// Path of autoscaler.yaml.
    #[arg(long, global = true, env = ENV_CONFIG_FILE, default_value = "autoscaler.yaml")]
    pub config: PathBuf,
    /// Log output format.
    #[arg(long, global = true, value_enum, default_value = "human")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the reconciliation loop.
    Run(RunArgs),
    /// Observe the live cluster and cloud once and print the action and its reasons.
    Plan {
        /// Print the decision as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Validate the config, render every template and verify cloud credentials.
    Check {
        /// Skip contacting the cloud (config and templates only).
        #[arg(long)]
        offline: bool,
    },
    /// Print the user data a new node of GROUP would get.
    Render {
        group: String,
        /// Node name to render for (default: an example name).
        #[arg(long)]
        node_name: Option<String>,
    },
    /// Run the loop against an embedded simulated cluster and cloud.
    #[cfg(feature = "simulate")]
    Simulate(SimulateArgs),
    /// Not in this build: built without the `simulate` feature (as the container image
    /// is), it has no simulator; `cargo run -- simulate` from a checkout has it.
    #[cfg(not(feature = "simulate"))]
    Simulate {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
}

/// What `simulate` answers in a build without the `simulate` feature.
#[cfg(not(feature = "simulate"))]
pub const NO_SIMULATOR: &str = "this build has no simulator: it was built without the `simulate` feature (as the container image is, to carry only what runs in a cluster); from a checkout, `cargo run -- simulate` has it";

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Observe and decide, log what would be done, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run a single cycle and exit (no leader election, no HTTP server).
    #[arg(long)]
    pub once: bool,
    /// Address for /metrics, /healthz and /readyz; `off` disables the server.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: String,
    /// Elect a leader among replicas on a Lease; only the leader acts.
    #[arg(long)]
    pub leader_elect: bool,
    #[arg(long, default_value = "nodewright")]
    pub lease_name: String,
    /// Namespace of the Lease and the status ConfigMap.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub renew_deadline: Duration,
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub retry_period: Duration,
    /// /healthz fails when the loop made no progress for this long.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub stuck_after: Duration,
    /// Name of the status ConfigMap (in the lease namespace), which also keeps when a
    /// node was last deleted and a removal last failed (the scale-down delays survive a
    /// restart); `off` disables both.
    #[arg(long, default_value = "nodewright-status")]
    pub status_configmap: String,
    /// Identical Events within this window are posted once.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub event_window: Duration,
}

impl RunArgs {
    fn options(&self, config_path: &Path) -> Result<RunOptions, CliError> {
        if self.renew_deadline >= self.lease_duration || self.retry_period >= self.renew_deadline {
            return Err(CliError::Usage(format!(
                "--retry-period ({}) < --renew-deadline ({}) < --lease-duration ({}) is required, so a leader steps down before its lease can be taken over",
                humantime::format_duration(self.retry_period),
                humantime::format_duration(self.renew_deadline),
                humantime::format_duration(self.lease_duration)
            )));
        }
        let metrics_addr = match self.metrics_addr.as_str() {
            "off" => None,
            a => Some(a.parse::<SocketAddr>().map_err(|e| {
                CliError::Usage(format!(
                    "--metrics-addr `{a}`: {e}; expected host:port such as 0.0.0.0:8080, or `off`"
                ))
            })?),
        };
        Ok(RunOptions {
            config_path: config_path.to_path_buf(),
            dry_run: self.dry_run,
            metrics_addr,
            leader: self.leader_elect.then(|| LeaderOptions {
                name: self.lease_name.clone(),
                namespace: self.lease_namespace.clone(),
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            }),
            stuck_after: self.stuck_after,
            status_configmap: (self.status_configmap != "off")
                .then(|| (self.lease_namespace.clone(), self.status_configmap.clone())),
            event_window: self.event_window,
        })
    }
}

#[cfg(feature = "simulate")]
#[derive(Debug, Clone, Default, Args)]
pub struct SimulateArgs {
    /// Keep the simulated cluster and cloud running without an autoscaler inside and
    /// print how to reach them.
    #[arg(long)]
    pub serve: bool,
    /// Directory for the generated kubeconfig, credentials and config (default: a temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// What-if: replay this workload (CSV, see docs/simulate.md) against --config in
    /// virtual time, through the real loop, and print node-hours, waits and actions.
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// With --workload: replay the same workload against this config too, side by side.
    #[arg(long, value_name = "OTHER.yaml")]
    pub compare: Option<PathBuf>,
    /// With --workload: draw nodes, pending pods, CPU and memory over time as SVG
    /// (with --compare, the second run goes to OUT.compare.svg).
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// With --workload: print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// With --workload: from VM creation to a Ready node, for every group (`90s`) or
    /// one (`gpu=5m`); repeatable. Default 60s.
    #[arg(long, value_name = "[GROUP=]DURATION")]
    pub boot_delay: Vec<String>,
    /// With --workload: the fraction of nodes (0 to 1) that go NotReady at a random
    /// time within a day of joining.
    #[arg(long, value_name = "FRACTION")]
    pub node_failures: Option<f64>,
    /// With --workload: who decides, `nodewright` (default) or a peer policy for
    /// comparison, `ca-like` or `karpenter-like` (see docs/simulate.md).
    #[arg(long, value_name = "POLICY")]
    pub policy: Option<String>,
    /// With --workload: the scheduler's NodeResourcesFit scoring, `least-allocated`
    /// (default, kube-scheduler's) or `most-allocated`.
    #[arg(long, value_name = "STRATEGY")]
    pub scoring: Option<String>,
    /// With --workload: seed of the node failures.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The scripted demo over real HTTP against the simulated API server and clouds,
    /// in real time (about two minutes).
    #[arg(long)]
    pub real_time: bool,
    /// With --real-time or --serve: inject faults into every simulator, as a fraction of
    /// requests (`0.2`) or the path of a YAML fault spec (see README, Reliability).
    /// Default: the environment variable NODEWRIGHT_SIM_FAULTS, else none.
    #[arg(long, value_name = "RATE|FILE")]
    pub faults: Option<String>,
}

#[cfg(feature = "simulate")]
impl SimulateArgs {
    /// Options that only mean something with --workload, given without it.
    fn whatif_only(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.compare.is_some() {
            v.push("--compare");
        }
        if self.plot.is_some() {
            v.push("--plot");
        }
        if self.json {
            v.push("--json");
        }
        if !self.boot_delay.is_empty() {
            v.push("--boot-delay");
        }
        if self.node_failures.is_some() {
            v.push("--node-failures");
        }
        if self.policy.is_some() {
            v.push("--policy");
        }
        if self.scoring.is_some() {
            v.push("--scoring");
        }
        v
    }

    /// The fault spec for --real-time and --serve: `--faults`, else
    /// `NODEWRIGHT_SIM_FAULTS`; a bad one is a usage error naming where it came from.
    fn fault_spec(&self) -> Result<Option<crate::sim::faults::FaultSpec>, CliError> {
        use crate::sim::faults::{FaultSpec, ENV_FAULTS};
        let (text, from) = match &self.faults {
            Some(t) => (t.clone(), "--faults"),
            None => match std::env::var(ENV_FAULTS) {
                Ok(t) if !t.trim().is_empty() => (t, ENV_FAULTS),
                _ => return Ok(None),
            },
        };
        FaultSpec::parse(&text)
            .map(Some)
            .map_err(|e| CliError::Usage(format!("simulate {from}: {e}")))
    }
}

/// `simulate --workload`: the what-if, returning what to print.
#[cfg(feature = "simulate")]
pub async fn simulate_workload(config: &Path, args: &SimulateArgs) -> Result<String, CliError> {
    use crate::sim::whatif::command::{self, WhatIf, WhatIfError};
    let Some(workload) = args.workload.clone() else {
        return Err(CliError::Usage(
            "simulate: --workload FILE is required here".into(),
        ));
    };
    if args.serve || args.real_time {
        return Err(CliError::Usage(
            "simulate: --workload cannot be combined with --serve or --real-time".into(),
        ));
    }
    if args.faults.is_some() {
        return Err(CliError::Usage(
            "simulate: --faults goes with --real-time or --serve (the HTTP simulators); the what-if injects its own (see README, Reliability)".into(),
        ));
    }
    let mut world = crate::sim::whatif::world::WorldOptions {
        seed: args.seed,
        ..Default::default()
    };
    if let Some(f) = args.node_failures {
        world.node_failures = f;
    }
    let convert = |e: WhatIfError| match e {
        WhatIfError::Config(c) => CliError::Config(c),
        e if e.is_usage() => CliError::Usage(e.to_string()),
        e => CliError::Other(e.into()),
    };
    command::boot_delays(&args.boot_delay, &mut world).map_err(convert)?;
    command::scoring(args.scoring.as_deref(), &mut world).map_err(convert)?;
    let policy = command::policy(args.policy.as_deref()).map_err(convert)?;
    let what = WhatIf {
        workload,
        config: config.to_path_buf(),
        compare: args.compare.clone(),
        plot: args.plot.clone(),
        json: args.json,
        world,
        policy,
    };
    command::run(&what).await.map_err(convert)
}

/// Errors a command ends with and their exit codes (see README, Commands): 2 for a config
/// that is wrong (including what it names that a cloud lacks), 3 for a cloud that cannot
/// be reached or refuses the credentials, 1 for anything else.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Unreachable(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Exit code of a config error.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code of a cloud that cannot be reached or refuses the credentials.
pub const EXIT_UNREACHABLE: u8 = 3;

impl CliError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Config(_) | CliError::Usage(_) => ExitCode::from(EXIT_CONFIG),
            CliError::Unreachable(_) => ExitCode::from(EXIT_UNREACHABLE),
            CliError::Other(_) => ExitCode::from(1),
        }
    }
}

/// Whether a cloud failed to answer at all, or refused the credentials (rather than
/// answering that something the config names does not exist).
fn cannot_reach(e: &CloudError) -> bool {
    match e {
        CloudError::Auth { .. } | CloudError::Transport { .. } => true,
        CloudError::Api { status, .. } => {
            matches!(status, 401 | 403 | 407 | 408 | 429) || *status >= 500
        }
        _ => false,
    }
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    // The simulate timeline is the output; logs would only interleave with it.
    let level = match cli.command {
        #[cfg(feature = "simulate")]
        Command::Simulate(_) => "warn",
        _ => "info",
    };
    init_logging(cli.log_format, level);
    match cli.command {
        #[cfg(not(feature = "simulate"))]
        Command::Simulate { .. } => Err(CliError::Usage(NO_SIMULATOR.into())),
        #[cfg(feature = "simulate")]
        Command::Simulate(args) => {
            if args.workload.is_some() {
                let text = simulate_workload(&cli.config, &args).await?;
                print!("{text}");
                return Ok(());
            }
            let stray = args.whatif_only();
            if !stray.is_empty() {
                return Err(CliError::Usage(format!(
                    "simulate: {} only go(es) with --workload FILE",
                    stray.join(", ")
                )));
            }
            if args.serve || args.real_time {
                let faults = args.fault_spec()?;
                return crate::sim::scenario::simulate(args.dir, args.serve, faults)
                    .await
                    .map_err(CliError::Other);
            }
            if args.faults.is_some() {
                return Err(CliError::Usage(
                    "simulate: --faults goes with --real-time or --serve".into(),
                ));
            }
            let text = crate::sim::whatif::demo::run().await?;
            print!("{text}");
            Ok(())
        }
        Command::Check { offline } => check(&cli.config, offline).await,
        Command::Render { group, node_name } => {
            let config = Config::load(&cli.config)?;
            let g = config.group(&group).ok_or_else(|| {
                let names: Vec<&str> = config.node_groups.iter().map(|g| g.name.as_str()).collect();
                CliError::Usage(format!(
                    "no node group `{group}`; expected one of: {}",
                    names.join(", ")
                ))
            })?;
            let name =
                node_name.unwrap_or_else(|| format!("{}-{}-example", config.cluster_name, g.name));
            let rendered = render_user_data(&config, g, &name).map_err(anyhow::Error::from)?;
            println!("{}", rendered.content);
            if let Some(note) = g
                .settings
                .of::<crate::cloud::proxmox::ProxmoxSettings>()
                .map(render_note)
            {
                eprintln!("{note}");
            }
            Ok(())
        }
        Command::Plan { json } => {
            let reconciler = reconciler(&cli.config, true).await?;
            let (_, decision) = reconciler
                .plan(SystemTime::now())
                .await
                .map_err(anyhow::Error::from)?;
            if json {
                let text = plan_json(&decision).map_err(anyhow::Error::from)?;
                println!("{text}");
            } else {
                print!("{}", plan_text(&decision));
            }
            Ok(())
        }
        Command::Run(args) => {
            if args.once {
                let reconciler = reconciler(&cli.config, args.dry_run).await?;
                let report = reconciler
                    .cycle(SystemTime::now())
                    .await
                    .map_err(anyhow::Error::from)?;
                println!("{}", report.decision.action);
                return Ok(());
            }
            let opts = args.options(&cli.config)?;
            // Fail fast with exit code 2 on a bad config, before any network.
            Config::load(&cli.config)?;
            let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                shutdown_signal().await;
                tracing::info!("shutting down");
                stop_tx.send_replace(true);
            });
            let mut stopping = stop_rx.clone();
            let run = crate::run::run(opts, stop_rx);
            tokio::pin!(run);
            // A stop abandons the cycle at once; what is left (releasing the lease) gets
            // SHUTDOWN_GRACE, so a hung API server cannot outlast the pod's own grace.
            let grace = async {
                let _ = stopping.wait_for(|s| *s).await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            };
            tokio::select! {
                r = &mut run => r?,
                _ = grace => tracing::warn!(
                    "shutdown took longer than {SHUTDOWN_GRACE:?}; exiting without waiting for the last calls (the leader lease expires on its own)"
                ),
            }
            Ok(())
        }
    }
}

/// What becomes of the rendered user data of a Proxmox group (on stderr, so the user data
/// alone is on stdout): `render` must not show a template as used when it is not.
fn render_note(s: &crate::cloud::proxmox::ProxmoxSettings) -> String {
    use crate::cloud::proxmox::JoinMode;
    match (&s.join, &s.cicustom) {
        (JoinMode::GuestAgent, _) => "proxmox: run as a script through the QEMU guest agent (join: guestAgent)".into(),
        (JoinMode::CloudInit, Some(c)) => format!(
            "proxmox: NOT used: the group's VMs read your cicustom snippets `{c}` instead"
        ),
        (JoinMode::CloudInit, None) => "proxmox: delivered as `user-data` of a NoCloud seed ISO, unless the template sets cicustom (`nodewright check` says which)".into(),
    }
}

/// How long `run` may take to stop after SIGTERM or Ctrl-C: well within Kubernetes'
/// default `terminationGracePeriodSeconds` (30 s).
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Pending pods `plan` lists per bucket; `plan --json` has every one.
const PLAN_PODS_SHOWN: usize = 10;

/// `plan` as text: the action, its reasons, the notes, then the pending pods by bucket
/// (counts for all four, then each pod with where it goes or why it cannot).
fn plan_text(d: &Decision) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "action: {}", d.action);
    for r in &d.reasons {
        let _ = writeln!(out, "  because {r}");
    }
    for n in &d.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    unremovable_text(&mut out, &d.unremovable);
    let counts = d.bucket_counts();
    if d.pending.is_empty() {
        let _ = writeln!(out, "pending pods: none");
        return out;
    }
    let per_bucket: Vec<String> = Bucket::ALL
        .iter()
        .map(|b| format!("{} {}", b.as_str(), counts.get(b).copied().unwrap_or(0)))
        .collect();
    let _ = writeln!(
        out,
        "pending pods: {} ({})",
        d.pending.len(),
        per_bucket.join(", ")
    );
    for b in Bucket::ALL {
        let pods: Vec<_> = d.pending.iter().filter(|p| p.bucket == b).collect();
        for p in pods.iter().take(PLAN_PODS_SHOWN) {
            let _ = writeln!(out, "  {:<15} {}: {}", b.as_str(), p.pod, p.detail);
        }
        if pods.len() > PLAN_PODS_SHOWN {
            let _ = writeln!(
                out,
                "  {:<15} ... and {} more (plan --json lists every pod)",
                b.as_str(),
                pods.len() - PLAN_PODS_SHOWN
            );
        }
    }
    out
}

/// The nodes scale-down keeps, each with its reason (the first [`PLAN_PODS_SHOWN`]),
/// after a line counting them per reason.
fn unremovable_text(out: &mut String, kept: &[Unremovable]) {
    use std::fmt::Write;
    if kept.is_empty() {
        return;
    }
    let per_reason: Vec<String> = unremovable::counts(kept)
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{} {n}", r.as_str()))
        .collect();
    let _ = writeln!(
        out,
        "kept by scale-down: {} node(s) ({})",
        kept.len(),
        per_reason.join(", ")
    );
    for u in kept.iter().take(PLAN_PODS_SHOWN) {
        let pod = match (&u.pod, &u.pod_reason) {
            (Some(p), Some(r)) => format!(" [pod {p}: {r}]"),
            (Some(p), None) => format!(" [pod {p}]"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  {} (group {}) {}: {}{pod}",
            u.node,
            u.group,
            u.label(),
            u.detail
        );
    }
    if kept.len() > PLAN_PODS_SHOWN {
        let _ = writeln!(
            out,
            "  ... and {} more (plan --json lists every node)",
            kept.len() - PLAN_PODS_SHOWN
        );
    }
}

/// `plan --json`: the decision, with `pending` always present and `buckets` counting
/// the pending pods in each of the four buckets.
fn plan_json(d: &Decision) -> Result<String, serde_json::Error> {
    let mut v = serde_json::to_value(d)?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("pending".into(), serde_json::to_value(&d.pending)?);
        obj.insert("unremovable".into(), serde_json::to_value(&d.unremovable)?);
        let counts = d.bucket_counts();
        let buckets: serde_json::Map<String, serde_json::Value> = Bucket::ALL
            .iter()
            .map(|b| {
                let n = counts.get(b).copied().unwrap_or(0);
                (b.as_str().to_string(), serde_json::Value::from(n))
            })
            .collect();
        obj.insert("buckets".into(), serde_json::Value::Object(buckets));
    }
    serde_json::to_string_pretty(&v)
}

async fn reconciler(config_path: &Path, dry_run: bool) -> Result<Reconciler, CliError> {
    let config = Config::load(config_path)?;
    let clouds = if dry_run {
        build_clouds_read_only(&config)
    } else {
        build_clouds(&config)
    }
    .map_err(|e| CliError::Usage(e.to_string()))?;
    let client = client_from_env().await.map_err(anyhow::Error::from)?;
    Ok(Reconciler {
        config: Arc::new(config),
        cluster: Arc::new(KubeCluster::new(client)),
        clouds,
        memory: Default::default(),
        dry_run,
    })
}

async fn check(config_path: &Path, offline: bool) -> Result<(), CliError> {
    let config = Config::load(config_path)?;
    println!("config {}: ok", config_path.display());
    for w in &config.warnings {
        println!("warning: {w}");
    }
    let mut failures = Vec::new();
    match crate::userdata::check_all(&config.templates_dir) {
        Ok(names) => println!(
            "templates in {}: {} parse",
            config.templates_dir.display(),
            names.join(", ")
        ),
        Err(errors) => failures.extend(errors.iter().map(|e| e.to_string())),
    }
    for g in &config.node_groups {
        let name = format!("{}-{}-check0", config.cluster_name, g.name);
        match render_user_data(&config, g, &name) {
            Ok(r) => match g.runs_user_data_as_script() {
                Some(runner) if !r.content.starts_with("#!") => failures.push(format!(
                    "group {}: template `{}` renders {} (it starts `{}`), but {runner}; use a template that renders a `#!` script, such as `k3s-agent.join.sh.j2`",
                    g.name,
                    g.user_data.template,
                    if r.content.starts_with("#cloud-config") {
                        "cloud-config".to_string()
                    } else {
                        r.format.to_string()
                    },
                    r.content.lines().next().unwrap_or_default().chars().take(40).collect::<String>()
                )),
                _ => println!(
                    "group {}: template {} renders ({:?}, {} bytes)",
                    g.name,
                    g.user_data.template,
                    r.format,
                    r.content.len()
                ),
            },
            Err(e) => failures.push(e.to_string()),
        }
    }
    for line in
        crate::run::clouds::check_credentials(&config, crate::run::clouds::credentials_from_env)
    {
        match line {
            Ok(line) => println!("{line}"),
            Err(problem) => failures.push(problem),
        }
    }
    let mut unreachable = Vec::new();
    if !offline {
        let clouds = match build_clouds(&config) {
            Ok(clouds) => clouds,
            // A credentials problem is listed above already.
            Err(_) if !failures.is_empty() => return Err(CliError::Usage(failures.join("\n"))),
            Err(e) => return Err(CliError::Usage(e.to_string())),
        };
        for provider in clouds.distinct() {
            match provider.verify().await {
                Ok(lines) => {
                    for line in lines {
                        println!("{}: {line}", provider.name());
                    }
                }
                Err(e) if cannot_reach(&e) => unreachable.push(e.to_string()),
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    // A config problem is the one to fix first: it decides the exit code.
    match (failures.is_empty(), unreachable.is_empty()) {
        (true, true) => Ok(()),
        (true, false) => Err(CliError::Unreachable(unreachable.join("\n"))),
        (false, _) => {
            failures.extend(unreachable);
            Err(CliError::Usage(failures.join("\n")))
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodRef;
    use crate::plan::{Action, PendingPod};

    fn decision(pending: Vec<PendingPod>) -> Decision {
        Decision {
            action: Action::None,
            reasons: vec![],
            notes: vec![],
            pending,
            unremovable: Vec::new(),
        }
    }

    fn pending(name: &str, bucket: Bucket, detail: &str) -> PendingPod {
        PendingPod {
            pod: PodRef {
                namespace: "default".into(),
                name: name.into(),
            },
            bucket,
            detail: detail.into(),
        }
    }

    #[test]
    fn plan_text_counts_every_bucket_and_caps_long_lists() {
        let mut pods: Vec<PendingPod> = (0..25)
            .map(|i| {
                pending(
                    &format!("web-{i}"),
                    Bucket::ScalingUp,
                    "new node of group web",
                )
            })
            .collect();
        pods.push(pending(
            "huge",
            Bucket::NoCapacity,
            "group web: needs cpu 12, a node has 8",
        ));
        let text = plan_text(&decision(pods));
        assert!(
            text.contains("pending pods: 26 (will-schedule 0, capacity-coming 0, scaling-up 25, no-capacity 1)"),
            "{text}"
        );
        assert!(
            text.contains("default/web-0: new node of group web"),
            "{text}"
        );
        assert!(
            !text.contains("default/web-10:"),
            "capped at {PLAN_PODS_SHOWN}: {text}"
        );
        assert!(text.contains("... and 15 more"), "{text}");
        assert!(
            text.contains("no-capacity     default/huge: group web: needs cpu 12, a node has 8"),
            "{text}"
        );
        assert!(plan_text(&decision(vec![])).contains("pending pods: none"));
    }

    #[test]
    fn plan_json_has_the_pending_pods_and_all_bucket_counts() {
        let d = decision(vec![pending(
            "huge",
            Bucket::NoCapacity,
            "group web: needs cpu 12",
        )]);
        let v: serde_json::Value =
            serde_json::from_str(&plan_json(&d).expect("json")).expect("parses");
        assert_eq!(v["pending"][0]["bucket"], "no-capacity");
        assert_eq!(v["pending"][0]["pod"]["name"], "huge");
        assert_eq!(v["buckets"]["no-capacity"], 1);
        assert_eq!(v["buckets"]["will-schedule"], 0);
        let empty: serde_json::Value =
            serde_json::from_str(&plan_json(&decision(vec![])).expect("json")).expect("parses");
        assert_eq!(empty["pending"], serde_json::json!([]));
        assert_eq!(empty["buckets"]["scaling-up"], 0);
    }

    /// The container image's binary (no `simulate` feature) used to link the whole
    /// simulator; now it has none, and `simulate` says so, in `--help` and when run.
    #[cfg(not(feature = "simulate"))]
    #[tokio::test]
    async fn a_build_without_the_simulator_says_so_for_simulate() {
        use clap::CommandFactory;
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("Not in this build"), "{help}");
        let cli = Cli::try_parse_from(["nodewright", "simulate", "--workload", "w.csv"])
            .expect("simulate parses, to say it is not here");
        let err = run(cli).await.expect_err("this build has no simulator");
        assert_eq!(err.to_string(), NO_SIMULATOR);
        assert_eq!(err.exit_code(), ExitCode::from(EXIT_CONFIG));
    }

    /// `render` used to print a Proxmox group's template as if its VMs got it; with the
    /// user's own cicustom snippets they do not, and it says so.
    #[test]
    fn render_says_what_becomes_of_a_proxmox_groups_user_data() {
        let s = |y: &str| -> crate::cloud::proxmox::ProxmoxSettings {
            crate::yaml::from_str(y).expect("settings")
        };
        assert!(render_note(&s("template: 1\n")).contains("NoCloud seed ISO"));
        let n = render_note(&s("template: 1\ncicustom: user=local:snippets/j.yaml\n"));
        assert!(
            n.contains("NOT used") && n.contains("user=local:snippets/j.yaml"),
            "{n}"
        );
        assert!(render_note(&s("template: 1\njoin: guestAgent\n")).contains("guest agent"));
    }
}
