//! `fabrx loadgen --target network` (docs/loadgen.md "A network"): the shell around
//! `devnet::load::network`. Its flags become the run's options; it prints what the run
//! tells it (the plan, the metrics address, the progress on a terminal), then the report
//! files and the summary line.

use anyhow::Context;
use clap::Args;
use devnet::load::network::{self, Event, Outcome};
use loadgen::WorkloadSpec;
use loadgen::series::Schedule;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Flags of `--target network`.
#[derive(Debug, Args)]
pub struct NetworkArgs {
    /// The network directory (`fabrx up --dir`).
    #[arg(long)]
    network: Option<PathBuf>,
    /// Load txs to send (default: --blocks × --block-size).
    #[arg(long)]
    pub(crate) txs: Option<usize>,
    /// Txs per second, open loop (default: as fast as --max-in-flight allows).
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Stop sending after this many seconds.
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Txs sent and not yet confirmed, at most.
    #[arg(long, default_value = "20000", value_parser = crate::server_args::positive_usize)]
    max_in_flight: std::num::NonZeroUsize,
    /// Seconds to wait for outstanding statuses after the last send.
    #[arg(long, default_value_t = 60.0)]
    drain: f64,
    /// Due txs wait at most this many milliseconds for more before they go out in one
    /// message per router (fewer, larger messages: less CPU per tx on every node of the
    /// request path; a tx's latency as its sender sees it grows by up to this much).
    #[arg(long, default_value_t = u64::try_from(loadgen::network::LINGER.as_millis()).unwrap_or(u64::MAX), value_name = "MS")]
    linger_ms: u64,
    /// Which committing party's sidecar reports the statuses (default: the first running).
    #[arg(long)]
    party: Option<u32>,
    /// Make each load tx's envelope about this many bytes (a memo in the value of the
    /// coins it creates); smaller than the plain tx: the plain tx.
    #[arg(long)]
    pub(crate) tx_size: Option<usize>,
    /// This process's number among the cooperating load processes of one run (1 to
    /// --instances): its own tag `<tag>_<I>` (namespace, keys, tx ids), seed + I − 1,
    /// and its share of the rate, the steps' rates and --txs.
    #[arg(long, default_value_t = 1, value_name = "I")]
    pub(crate) instance: u32,
    /// How many load processes share the run (`fabrx loadgen merge` combines their
    /// report directories).
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub(crate) instances: u32,
    /// Serve the load generator's own metrics on ADDR (`GET /metrics`), and its rate
    /// (`GET /rate`; with --rate, `POST /rate` with the new txs per second as the body).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics: Option<String>,
    /// Send template txs (one envelope of --tx-size bytes, 300 by default, its tx id
    /// patched in: no planning, no signing) instead of the token workload; for a network
    /// that only orders.
    #[arg(long)]
    pub(crate) template: bool,
}

/// This instance's share of the run: its tag, seed and schedule (`--instance I
/// --instances K`); unchanged for a run of one process.
pub fn share(args: &NetworkArgs, spec: &mut WorkloadSpec, schedule: Schedule) -> anyhow::Result<Schedule> {
    Ok(network::share(spec, schedule, args.instance, args.instances)?)
}

impl NetworkArgs {
    /// The options of `--target network`.
    fn options(&self) -> anyhow::Result<network::Options> {
        let dir = self
            .network
            .clone()
            .context("--target network needs --network DIR (the directory of `fabrx up`)")?;
        Ok(network::Options {
            network: dir,
            txs: self.txs,
            duration: self.duration,
            max_in_flight: self.max_in_flight,
            drain: self.drain,
            linger: Duration::from_millis(self.linger_ms),
            party: self.party,
            tx_size: self.tx_size,
            instance: self.instance,
            instances: self.instances,
            metrics: self.metrics.clone(),
            template: self.template,
        })
    }

    /// The options of `--target sink`: `txs` unless `--txs` says otherwise, envelopes
    /// of `--tx-size` bytes (300 by default), tx ids `<tag>-<index>`.
    pub fn sink_options(&self, txs: usize, tag: String) -> devnet::load::sink::Options {
        devnet::load::sink::Options {
            txs: self.txs.unwrap_or(txs),
            tx_size: self.tx_size.unwrap_or(SINK_TX_SIZE),
            max_in_flight: self.max_in_flight,
            drain: self.drain,
            linger: Duration::from_millis(self.linger_ms),
            duration: self.duration,
            tag,
        }
    }

    /// The options of `--target mock-orderer`: the network directory, the committing
    /// party and the drain.
    pub fn mock_options(&self, verify_serial: bool) -> anyhow::Result<devnet::load::mock::Options> {
        let dir = self
            .network
            .clone()
            .context("--target mock-orderer needs --network DIR (of `fabrx up --no-orderer`)")?;
        anyhow::ensure!(self.drain.is_finite() && self.drain > 0.0, "invalid --drain");
        Ok(devnet::load::mock::Options {
            network: dir,
            party: self.party.unwrap_or(1),
            drain: Duration::from_secs_f64(self.drain),
            verify_serial,
        })
    }
}

/// The envelope size of `--target sink` without `--tx-size`, bytes.
const SINK_TX_SIZE: usize = 300;

/// Where the results go.
pub struct Output<'a> {
    /// Only the JSON summary line on stdout.
    pub json: bool,
    /// `--report DIR`.
    pub report: Option<&'a Path>,
}

/// Runs the load against the network and prints the summary.
pub async fn run(
    spec: WorkloadSpec,
    args: &NetworkArgs,
    schedule: Schedule,
    output: Output<'_>,
) -> anyhow::Result<()> {
    let options = args.options()?;
    // On a worker of the runtime, next to the links' tasks, rather than on this thread:
    // the driver and its links hand each other messages all the time.
    let outcome =
        tokio::spawn(async move { network::run(spec, &options, schedule, printer()).await }).await??;
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    let summary = &outcome.summary;
    if summary.stalled {
        eprintln!(
            "loadgen: stopped: {} txs in flight and nothing confirmed for {} s (see never_confirmed)",
            args.max_in_flight, args.drain
        );
    }
    let line = summary.line()?;
    if let Some(dir) = output.report {
        let title = format!(
            "fabrx loadgen --target network · {} txs · confirmed by the {} · run {}",
            summary.sent, summary.confirmed_by, summary.tag
        );
        crate::report_files::write_report(dir, &outcome.raw.series, &line, &title)?;
        outcome.write_raw(dir)?;
    }
    if summary.decided_before_run > 0 {
        eprintln!(
            "loadgen: {} txs had been decided before this run (an earlier run sent the same ids: use a fresh --tag)",
            summary.decided_before_run
        );
    }
    print_summary(&outcome, &line, output.json);
    Ok(())
}

/// The human line on stderr (unless `json`), then the summary line on stdout.
pub(crate) fn print_summary(outcome: &Outcome, line: &str, json: bool) {
    let s = &outcome.summary;
    if !json {
        let ms = |v: Option<f64>| serde_json::Value::from(v).to_string();
        eprintln!(
            "sent {} · submitted {} · refused {} · confirmed {} · never confirmed {} · {:.0} tx/s · p50 {} ms · p99 {} ms",
            s.sent,
            s.submitted,
            s.refused,
            s.confirmed,
            s.never_confirmed,
            s.tps,
            ms(s.p50_ms),
            ms(s.p99_ms)
        );
    }
    println!("{line}");
}

/// Prints what the run tells: its plan and metrics address as lines, its progress on
/// one line rewritten in place (only on a terminal).
pub(crate) fn printer() -> impl FnMut(Event) {
    let tty = std::io::stderr().is_terminal();
    move |event| match event {
        Event::Planned {
            txs,
            tag,
            routers,
            confirmed_by,
        } => eprintln!(
            "loadgen: {txs} txs of run {tag} to {routers} routers; statuses from the {confirmed_by}"
        ),
        Event::MetricsServed { addr } => {
            eprintln!("loadgen: metrics and rate control on http://{addr}/metrics, /rate");
        }
        Event::Progress(p) => {
            if tty {
                eprint!(
                    "\r{:>6.1} s  sent {:>8}  submitted {:>8}  confirmed {:>8}  ",
                    p.elapsed, p.sent, p.submitted, p.confirmed
                );
            }
        }
    }
}
