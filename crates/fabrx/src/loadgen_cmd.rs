//! `fabrx loadgen`: drives load at a target (docs/loadgen.md). The workload, the driver,
//! the oracle and the baselines live in the `loadgen` crate, the runs of each target in
//! `devnet::load`; this is the shell: flags, progress on a terminal, the summary on
//! stdout, the report files, the exit code.

use crate::report_files::write_report;
use anyhow::Context;
use clap::{Args, ValueEnum};
use devnet::load::committer::{self, Event};
use loadgen::committer::Progress;
use loadgen::series::Schedule;
use loadgen::{Scheme, Summary, WorkloadSpec};
use std::io::IsTerminal;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the load generator drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// The in-process committer pipeline; the load generator acts as the orderer.
    Committer,
    /// A running network (`fabrx up`): txs to every party's router, statuses from a
    /// committer (or, ordering only, tx ids from an assembler).
    Network,
    /// Serve the workload's blocks, signed as ordered blocks, to the committing party's
    /// sidecar of `--network` (started with `fabrx up --no-orderer`).
    MockOrderer,
    /// Routers that answer at once and an assembler, in another process, over mutual
    /// TLS: what the load client costs, alone (template txs of --tx-size bytes).
    Sink,
}

/// Arguments of `fabrx loadgen`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct LoadgenArgs {
    /// Work on the results of load runs instead of running one.
    #[command(subcommand)]
    cmd: Option<LoadgenCmd>,
    /// What to load.
    #[arg(long, value_enum, required = true)]
    target: Option<Target>,
    /// Load blocks (the genesis blocks come on top) [default: 200; with --rates, what
    /// the steps send].
    #[arg(long)]
    blocks: Option<usize>,
    /// Txs per load block.
    #[arg(long, default_value_t = std::num::NonZeroUsize::new(500).unwrap_or(std::num::NonZeroUsize::MIN), value_parser = crate::server_args::positive_usize)]
    block_size: std::num::NonZeroUsize,
    /// Keys each tx reads (spent coins count as reads).
    #[arg(long, default_value_t = 1)]
    reads: usize,
    /// Keys each tx writes (spent coins count as writes).
    #[arg(long, default_value_t = 2)]
    writes: usize,
    /// Token namespace policy: ed25519, ecdsa-p256 or bls-threshold (3 of 5).
    #[arg(long, default_value = "ed25519")]
    scheme: String,
    /// Probability that a tx double-spends a coin an earlier tx of its window spends.
    #[arg(long, default_value_t = 0.0)]
    conflict_rate: f64,
    /// Probability that a tx carries a bad signature.
    #[arg(long, default_value_t = 0.0)]
    invalid_sig_rate: f64,
    /// Seed of the workload planner.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run tag: namespace `tok_<tag>`, tx ids `<tag>-…` (default: from the clock and pid,
    /// unique per run).
    #[arg(long)]
    tag: Option<String>,
    /// `embedded:DIR` or `postgres://…` (default: a fresh embedded store, deleted after).
    #[arg(long)]
    db: Option<String>,
    /// Compare every status and the final state with a serial oracle.
    #[arg(long)]
    verify_serial: bool,
    /// Print only the JSON summary line on stdout.
    #[arg(long)]
    json: bool,
    /// Concurrent verify-and-commit jobs of the pipeline.
    #[arg(long, default_value = "4", value_parser = crate::server_args::positive_usize)]
    workers: NonZeroUsize,
    /// Largest batch the pipeline hands to the validator-committer.
    #[arg(long, default_value = "500", value_parser = crate::server_args::positive_usize)]
    max_batch: NonZeroUsize,
    /// Back-pressure: the pipeline pulls no further block while this many txs are
    /// unfinished in its dependency graph (default: the pipeline's own default).
    #[arg(long, value_parser = crate::server_args::positive_usize)]
    max_pending: Option<NonZeroUsize>,
    /// Also measure the signature-verify ceiling and a one-tx-at-a-time commit.
    #[arg(long)]
    baseline: bool,
    /// Txs of the serial commit baseline (and of the verify sample).
    #[arg(long, default_value = "2000", value_parser = crate::server_args::positive_usize)]
    baseline_txs: NonZeroUsize,
    /// Write `per_second.csv`, `summary.json` and `report.svg` into this directory
    /// (created if needed).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Open-loop rate steps, txs per second, comma-separated (committer and network
    /// targets; needs --step-seconds).
    #[arg(long, value_delimiter = ',', value_name = "R1,R2,…")]
    rates: Vec<f64>,
    /// How long each rate step of --rates lasts, in seconds.
    #[arg(long, value_name = "SECS")]
    step_seconds: Option<f64>,
    /// `--target sink`: plain TCP instead of mutual TLS.
    #[arg(long)]
    insecure: bool,
    #[command(flatten)]
    pub(crate) network: crate::loadgen_network::NetworkArgs,
}

/// `fabrx loadgen <command>`.
#[derive(Debug, clap::Subcommand)]
pub enum LoadgenCmd {
    /// Combine the report directories of the instances of one run (`--instance I
    /// --instances K --report DIR` each) into one summary and report.
    Merge(MergeArgs),
    /// Serve the sink of `--target sink` (started by it).
    #[command(hide = true)]
    ServeSink(crate::loadgen_sink::ServeSinkArgs),
}

/// Arguments of `fabrx loadgen merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The instances' report directories (each with `summary.json` and `raw.json`).
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Also write the merged `per_second.csv`, `summary.json` and `report.svg` here.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Print only the JSON summary line on stdout.
    #[arg(long)]
    json: bool,
}

/// The largest report file `merge` reads.
const MAX_REPORT_FILE: u64 = 512 << 20;

fn read_bounded(path: &Path) -> anyhow::Result<String> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    anyhow::ensure!(
        len <= MAX_REPORT_FILE,
        "{} is {len} bytes, more than a report file holds ({MAX_REPORT_FILE})",
        path.display()
    );
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// `fabrx loadgen merge`.
fn merge(args: &MergeArgs) -> anyhow::Result<()> {
    let mut parts = Vec::with_capacity(args.dirs.len());
    for dir in &args.dirs {
        let name = dir.display().to_string();
        let summary = read_bounded(&dir.join("summary.json"))?;
        let summary: serde_json::Value = serde_json::from_str(summary.trim())
            .with_context(|| format!("{name}/summary.json does not parse"))?;
        let raw = read_bounded(&dir.join("raw.json")).with_context(|| {
            format!("{name} has no raw.json: was it written by `fabrx loadgen --target network --report`?")
        })?;
        let raw: loadgen::merge::Raw =
            serde_json::from_str(&raw).with_context(|| format!("{name}/raw.json does not parse"))?;
        parts.push(loadgen::merge::Part { name, summary, raw });
    }
    let merged = loadgen::merge::merge(&parts)?;
    let line = merged.summary.to_string();
    if let Some(dir) = &args.report {
        let title = format!(
            "fabrx loadgen merge · {} of {} instances · {} txs sent",
            parts.len(),
            merged.summary["instances"],
            merged.summary["sent"]
        );
        write_report(dir, &merged.series, &line, &title)?;
    }
    if !args.json {
        eprintln!(
            "merged {} reports: sent {} · confirmed {} · committed {} · {} tx/s · p50 {} ms · p99 {} ms",
            parts.len(),
            merged.summary["sent"],
            merged.summary["confirmed"],
            merged.summary["committed"],
            merged.summary["tps"],
            merged.summary["p50_ms"],
            merged.summary["p99_ms"]
        );
    }
    println!("{line}");
    Ok(())
}

/// The default of `--blocks`.
const DEFAULT_BLOCKS: usize = 200;

/// Runs the command.
pub async fn run(args: LoadgenArgs) -> anyhow::Result<()> {
    match &args.cmd {
        Some(LoadgenCmd::Merge(m)) => return merge(m),
        Some(LoadgenCmd::ServeSink(s)) => return crate::loadgen_sink::serve(s).await,
        None => {}
    }
    let target = args.target.context("--target is required")?;
    anyhow::ensure!(
        !args.insecure || target == Target::Sink,
        "--insecure is supported with --target sink only"
    );
    if target != Target::Network {
        for (flag, given) in [
            ("--instance", args.network.instance != 1),
            ("--instances", args.network.instances != 1),
            ("--metrics", args.network.metrics.is_some()),
            ("--template", args.network.template),
        ] {
            anyhow::ensure!(!given, "{flag} is supported with --target network only");
        }
    }
    let schedule = schedule_of(&args, target)?;
    match target {
        Target::Committer => committer_load(args, schedule).await,
        Target::Network => {
            let mut spec = spec_of(&args, &schedule, target)?;
            let schedule = crate::loadgen_network::share(&args.network, &mut spec, schedule)?;
            let out = crate::loadgen_network::Output {
                json: args.json,
                report: args.report.as_deref(),
            };
            crate::loadgen_network::run(spec, &args.network, schedule, out).await
        }
        Target::Sink => {
            let txs = args
                .blocks
                .unwrap_or(DEFAULT_BLOCKS)
                .saturating_mul(args.block_size.get());
            let tag = args.tag.clone().unwrap_or_else(default_tag);
            let options = args.network.sink_options(txs, tag);
            let out = crate::loadgen_network::Output {
                json: args.json,
                report: args.report.as_deref(),
            };
            crate::loadgen_sink::run(options, args.insecure, schedule, out).await
        }
        Target::MockOrderer => {
            let mut spec = spec_of(&args, &schedule, target)?;
            if let Some(size) = args.network.tx_size {
                spec.output_padding = devnet::load::network::padding_for(&spec, size)?;
            }
            let options = args.network.mock_options(args.verify_serial)?;
            crate::loadgen_mock::run(spec, &options, args.report.as_deref()).await
        }
    }
}

/// When the load's txs are due: `--rates` steps, `--rate`, or as fast as the target
/// takes them; combinations that make no sense are refused.
fn schedule_of(args: &LoadgenArgs, target: Target) -> anyhow::Result<Schedule> {
    let net = &args.network;
    if args.rates.is_empty() {
        anyhow::ensure!(
            args.step_seconds.is_none(),
            "--step-seconds needs --rates (the rate of each step)"
        );
        if target == Target::MockOrderer {
            anyhow::ensure!(
                net.rate.is_none(),
                "--rate is not supported with --target mock-orderer (it serves blocks as fast as the sidecar takes them)"
            );
        }
        return Ok(match net.rate {
            Some(rate) => {
                anyhow::ensure!(rate.is_finite() && rate > 0.0, "invalid --rate: must be positive");
                Schedule::Fixed { rate }
            }
            None => Schedule::Unpaced,
        });
    }
    anyhow::ensure!(
        target != Target::MockOrderer,
        "--rates is not supported with --target mock-orderer (it serves blocks as fast as the sidecar takes them); use --target committer or network"
    );
    let secs = args
        .step_seconds
        .context("--rates needs --step-seconds (how long each step lasts)")?;
    for (flag, given) in [
        ("--rate", net.rate.is_some()),
        ("--duration", net.duration.is_some()),
        ("--txs", net.txs.is_some()),
        ("--blocks", args.blocks.is_some()),
    ] {
        anyhow::ensure!(
            !given,
            "--rates cannot be combined with {flag}: the steps set the rate, the length and the number of txs"
        );
    }
    let schedule = Schedule::steps(&args.rates, secs)?;
    if target == Target::Committer {
        // The committer takes whole blocks: a step must hold at least one.
        for r in &args.rates {
            anyhow::ensure!(
                r * secs >= args.block_size.get() as f64,
                "invalid --rates: {r} tx/s for {secs} s is less than one block of {} txs; use a smaller --block-size or longer --step-seconds",
                args.block_size
            );
        }
    }
    Ok(schedule)
}

fn default_tag() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("r{secs:x}{:x}", std::process::id())
}

fn spec_of(args: &LoadgenArgs, schedule: &Schedule, target: Target) -> anyhow::Result<WorkloadSpec> {
    // With rate steps, the workload is what the steps send.
    let blocks = match schedule.total() {
        Some(txs) => usize::try_from(txs)?.div_ceil(args.block_size.get()),
        None => args.blocks.unwrap_or(DEFAULT_BLOCKS),
    };
    let spec = WorkloadSpec {
        blocks,
        block_size: args.block_size.get(),
        reads: args.reads,
        writes: args.writes,
        scheme: args.scheme.parse::<Scheme>()?,
        conflict_rate: args.conflict_rate,
        invalid_sig_rate: args.invalid_sig_rate,
        seed: args.seed,
        tag: args.tag.clone().unwrap_or_else(default_tag),
        reuse_outputs: target != Target::Network,
        output_padding: 0,
    };
    spec.validate()?;
    Ok(spec)
}

/// Prints progress on stderr at most every 250 ms, only on a terminal.
fn progress_printer() -> impl FnMut(&Progress) {
    let tty = std::io::stderr().is_terminal();
    let mut last = Instant::now() - Duration::from_secs(1);
    move |p: &Progress| {
        let done = p.blocks == p.of_blocks;
        if !tty || (!done && last.elapsed() < Duration::from_millis(250)) {
            return;
        }
        last = Instant::now();
        let secs = p.elapsed.as_secs_f64().max(1e-9);
        eprint!(
            "\rblock {}/{} · {} txs · {:.0} tx/s · {} committed   {}",
            p.blocks,
            p.of_blocks,
            p.txs,
            p.txs as f64 / secs,
            p.committed,
            if done { "\n" } else { "" }
        );
    }
}

/// `--target committer`: the flags become `devnet::load::committer` options; the
/// prebuild line and the progress go to stderr, the summary to stdout.
async fn committer_load(args: LoadgenArgs, schedule: Schedule) -> anyhow::Result<()> {
    let mut spec = spec_of(&args, &schedule, Target::Committer)?;
    if let Some(size) = args.network.tx_size {
        spec.output_padding = devnet::load::network::padding_for(&spec, size)?;
    }
    let options = committer::Options {
        db: args.db.clone(),
        workers: args.workers,
        max_batch: args.max_batch,
        max_pending: args.max_pending,
        verify_serial: args.verify_serial,
        baseline: args.baseline.then_some(args.baseline_txs),
    };
    let mut progress = progress_printer();
    let outcome = committer::run(spec, &schedule, &options, |event| match event {
        Event::Prebuilt {
            load_blocks,
            load_txs,
            genesis_blocks,
            scheme,
            seconds,
        } => eprintln!(
            "prebuilt {load_blocks} load blocks ({load_txs} txs) and {genesis_blocks} genesis blocks, signed ({scheme}), in {seconds:.2} s"
        ),
        Event::Progress(p) => progress(&p),
    })
    .await?;
    let summary = &outcome.summary;
    if !args.json {
        print_human(summary);
    }
    let line = serde_json::to_string(summary)?;
    if let Some(dir) = &args.report {
        let title = format!(
            "fabrx loadgen --target committer · {} · {} txs · run {}",
            summary.backend, summary.txs, summary.tag
        );
        write_report(dir, &outcome.series, &line, &title)?;
    }
    println!("{line}");
    let (statuses, state) = outcome.disagreements();
    anyhow::ensure!(
        statuses == 0 && state == 0,
        "the committer disagrees with the serial oracle: {statuses} statuses and {state} rows differ"
    );
    Ok(())
}

fn print_human(s: &Summary) {
    println!(
        "loadgen committer ({}, {}, {} blocks × {}, {}r/{}w, conflict {}, bad sig {}, max pending {}): {} txs in {:.2} s = {:.0} tx/s, goodput {:.0} tx/s",
        s.backend,
        s.scheme,
        s.blocks,
        s.block_size,
        s.reads,
        s.writes,
        s.conflict_rate,
        s.invalid_sig_rate,
        s.max_pending,
        s.txs,
        s.seconds,
        s.tps,
        s.goodput_tps
    );
    println!(
        "  committed {} · mvcc conflict {} · signature invalid {} · other {}",
        s.committed, s.mvcc_conflict, s.signature_invalid, s.other
    );
    println!("  latency p50 {:.1} ms · p99 {:.1} ms", s.p50_ms, s.p99_ms);
    for st in s.steps.iter().flatten() {
        println!(
            "  step {} at {} tx/s: {} sent, {:.0} tx/s, goodput {:.0} tx/s, p50 {} ms, p99 {} ms",
            st.step,
            st.rate,
            st.sent,
            st.tps,
            st.goodput_tps,
            st.p50_ms.map_or_else(|| "-".into(), |v| v.to_string()),
            st.p99_ms.map_or_else(|| "-".into(), |v| v.to_string())
        );
    }
    if let (Some(a), Some(b)) = (s.serial_mismatches, s.state_mismatches) {
        println!("  serial oracle: {a} status mismatches, {b} state mismatches");
    }
    if let Some(b) = &s.baseline {
        println!(
            "  verify: {:.0}/s on one core, ceiling {:.0}/s on {} cores, measured {:.0}/s in parallel",
            b.verify_per_s_one_core, b.verify_ceiling_per_s, b.cores, b.verify_per_s_all_cores
        );
        println!(
            "  batched verify: {:.0}/s on one core, ceiling {:.0}/s, measured {:.0}/s in parallel; pipeline at {:.2}× the single ceiling",
            b.verify_batch_per_s_one_core,
            b.verify_batch_ceiling_per_s,
            b.verify_batch_per_s_all_cores,
            b.tps_over_verify_ceiling
        );
        println!(
            "  serial commit: {} txs in {:.2} s = {:.0} tx/s; pipeline speedup {:.1}×",
            b.serial_txs, b.serial_seconds, b.serial_tps, b.pipeline_speedup
        );
    }
}
