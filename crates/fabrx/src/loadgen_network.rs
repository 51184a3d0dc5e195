//! `fabrx loadgen --target network` (docs/loadgen.md "A network"): the shell around
//! `loadgen::network`. It reads the network directory (`network.json` for the running
//! sidecars, the network config for routers and assemblers, the administrator key for
//! the `_meta` tx), commits the genesis first (namespace, then the coins), then sends
//! the load and prints the summary line.

use anyhow::{Context, bail};
use clap::Args;
use loadgen::network::{self, Endpoints, NetProgress, NetworkRun, Pace};
use loadgen::series::Schedule;
use loadgen::{Workload, WorkloadSpec};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
}

/// Most load processes of one run.
pub const MAX_INSTANCES: u32 = 1000;

/// This instance's share of the run: its tag, seed and schedule (`--instance I
/// --instances K`); unchanged for a run of one process.
pub fn share(args: &NetworkArgs, spec: &mut WorkloadSpec, schedule: Schedule) -> anyhow::Result<Schedule> {
    let (i, k) = (args.instance, args.instances);
    anyhow::ensure!(
        (1..=MAX_INSTANCES).contains(&k),
        "invalid --instances {k}: give 1 to {MAX_INSTANCES}"
    );
    anyhow::ensure!(
        (1..=k).contains(&i),
        "invalid --instance {i}: give 1 to --instances ({k})"
    );
    if k == 1 {
        return Ok(schedule);
    }
    spec.tag = format!("{}_{i}", spec.tag);
    spec.seed = spec.seed.wrapping_add(u64::from(i - 1));
    spec.validate()
        .with_context(|| format!("the tag of instance {i} is `{}`", spec.tag))?;
    let kf = f64::from(k);
    Ok(match schedule {
        Schedule::Unpaced => Schedule::Unpaced,
        Schedule::Fixed { rate } => Schedule::Fixed { rate: rate / kf },
        Schedule::Steps { rates, step } => {
            let mine: Vec<f64> = rates.iter().map(|r| r / kf).collect();
            Schedule::steps(&mine, step.as_secs_f64())
                .with_context(|| format!("instance {i}'s share (1/{k}) of --rates"))?
        }
    })
}

/// Instance `i`'s share (1 to `k`) of `total` txs: the shares differ by at most one and
/// add up to `total`.
pub fn share_of(total: usize, i: u32, k: u32) -> usize {
    let part = |j: u32| (total as u128 * u128::from(j) / u128::from(k.max(1))) as usize;
    part(i).saturating_sub(part(i.saturating_sub(1)))
}

impl NetworkArgs {
    /// The network directory, the committing party and the drain of `--target mock-orderer`.
    pub fn mock_args(&self) -> anyhow::Result<(PathBuf, u32, Duration)> {
        let dir = self
            .network
            .clone()
            .context("--target mock-orderer needs --network DIR (of `fabrx up --no-orderer`)")?;
        anyhow::ensure!(self.drain.is_finite() && self.drain > 0.0, "invalid --drain");
        Ok((dir, self.party.unwrap_or(1), Duration::from_secs_f64(self.drain)))
    }
}

/// Where the results go.
pub struct Output<'a> {
    /// Only the JSON summary line on stdout.
    pub json: bool,
    /// `--report DIR`.
    pub report: Option<&'a Path>,
}

/// The load, ready to send: the genesis committed (with a committer), every load tx's
/// envelope built.
struct Prepared {
    endpoints: Endpoints,
    workload: Workload,
    load: Vec<(String, Arc<Vec<u8>>)>,
    tag: String,
    conflict_rate: f64,
    confirmed_by: &'static str,
    genesis_seconds: f64,
    /// CPU seconds of the process before the preparation.
    cpu_at_start: Option<f64>,
}

async fn prepare(
    mut spec: WorkloadSpec,
    args: &NetworkArgs,
    schedule: &Schedule,
) -> anyhow::Result<Prepared> {
    let dir = args
        .network
        .as_ref()
        .context("--target network needs --network DIR (the directory of `fabrx up`)")?;
    check(args)?;
    let txs = match schedule.total() {
        Some(n) => usize::try_from(n)?,
        None => share_of(
            args.txs.unwrap_or(spec.blocks.saturating_mul(spec.block_size)),
            args.instance,
            args.instances,
        ),
    };
    anyhow::ensure!(txs > 0, "invalid --txs: must be at least 1");
    let block_size =
        std::num::NonZeroUsize::new(spec.block_size).context("invalid --block-size: must be at least 1")?;
    spec.blocks = txs.div_ceil(block_size.get());
    if let Some(size) = args.tx_size {
        spec.output_padding = padding_for(&spec, size)?;
    }
    let endpoints = endpoints(dir, args.party)?;
    let meta_path = netconfig::meta_key_path(dir);
    let meta = crypto::read_key_file(&meta_path)
        .with_context(|| format!("reading the network's administrator key {}", meta_path.display()))?;
    let tag = spec.tag.clone();
    let conflict_rate = spec.conflict_rate;
    let cpu_at_start = devnet::cpu::own_seconds();
    let workload =
        tokio::task::spawn_blocking(move || loadgen::workload::plan(&spec)?.sign_with_meta(meta)).await??;
    let confirmed_by = if endpoints.sidecar.is_some() {
        "committer"
    } else {
        "orderer"
    };
    eprintln!(
        "loadgen: {txs} txs of run {tag} to {} routers; statuses from the {confirmed_by}",
        endpoints.routers.len()
    );
    let genesis_seconds = if endpoints.sidecar.is_some() {
        genesis(&endpoints, &workload).await?
    } else {
        0.0
    };
    let load: Vec<(String, Arc<Vec<u8>>)> = workload
        .load
        .iter()
        .flat_map(|b| b.txs.iter())
        .take(txs)
        .map(|(id, tx)| (id.0.clone(), Arc::new(network::envelope(id, tx))))
        .collect();
    Ok(Prepared {
        endpoints,
        workload,
        load,
        tag,
        conflict_rate,
        confirmed_by,
        genesis_seconds,
        cpu_at_start,
    })
}

/// Runs the load against the network and prints the summary.
pub async fn run(
    spec: WorkloadSpec,
    args: &NetworkArgs,
    schedule: Schedule,
    output: Output<'_>,
) -> anyhow::Result<()> {
    let Prepared {
        endpoints,
        workload,
        load,
        tag,
        conflict_rate,
        confirmed_by,
        genesis_seconds,
        cpu_at_start,
    } = prepare(spec, args, &schedule).await?;
    let rate = match schedule {
        Schedule::Fixed { rate } => Some(rate),
        _ => None,
    };
    // The rate can change only through the metrics port, so only a run serving one has a
    // control.
    let control = rate
        .filter(|_| args.metrics.is_some())
        .map(|r| Arc::new(network::RateControl::new(r)));
    let metrics = LoadMetrics::new(args.metrics.as_deref(), args.instance, control.clone()).await?;
    let pace = Pace {
        schedule,
        max_in_flight: args.max_in_flight,
        duration: args.duration.map(Duration::from_secs_f64),
        drain: Duration::from_secs_f64(args.drain),
        control: control.clone(),
    };
    let cpu_at_load = devnet::cpu::own_seconds();
    let started_unix_ms = unix_ms();
    let mut print = printer();
    let run = network::run(&endpoints, &load, pace, |p| {
        metrics.update(&p);
        print(p);
    })
    .await?;
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    if run.stalled {
        eprintln!(
            "loadgen: stopped: {} txs in flight and nothing confirmed for {} s (see never_confirmed)",
            args.max_in_flight, args.drain
        );
    }
    let mut summary = summary(&run, confirmed_by, &tag, rate, genesis_seconds);
    let cpu = [cpu_at_start, cpu_at_load, devnet::cpu::own_seconds()];
    annotate(
        &mut summary,
        args,
        started_unix_ms,
        control.as_deref(),
        cpu,
        run.sent,
    );
    if endpoints.sidecar.is_some() && conflict_rate == 0.0 {
        summary["expected_mismatches"] = serde_json::json!(mismatches(&run, &workload));
    }
    if !run.series.steps.is_empty() {
        summary["steps"] = serde_json::json!(run.series.steps);
    }
    if let Some(dir) = output.report {
        let title = format!(
            "fabrx loadgen --target network · {} txs · confirmed by the {confirmed_by} · run {tag}",
            run.sent
        );
        crate::report_files::write_report(dir, &run.series, &summary.to_string(), &title)?;
        write_raw(dir, args, started_unix_ms, &run)?;
    }
    print_summary(&run, &summary, output.json);
    Ok(())
}

/// The instance, the wall-clock start, the rate changes and the client's own cost:
/// preparing (planning, signing, envelopes; genesis included), then sending the load
/// and following its statuses (`cpu`: CPU seconds before, at the start of the load and
/// after it).
fn annotate(
    summary: &mut serde_json::Value,
    args: &NetworkArgs,
    started_unix_ms: u64,
    control: Option<&network::RateControl>,
    cpu: [Option<f64>; 3],
    sent: u64,
) {
    summary["instance"] = serde_json::json!(args.instance);
    summary["instances"] = serde_json::json!(args.instances);
    summary["started_unix_ms"] = serde_json::json!(started_unix_ms);
    if let Some(c) = control {
        summary["rate_changes"] = serde_json::json!(c.changes());
        summary["final_rate"] = serde_json::json!(c.get());
    }
    if let [Some(a), Some(b), Some(c)] = cpu {
        let round = |v: f64| (v * 1000.0).round() / 1000.0;
        summary["client_prepare_cpu_seconds"] = serde_json::json!(round(b - a));
        summary["client_cpu_seconds"] = serde_json::json!(round(c - a));
        if c > a {
            summary["client_txs_per_cpu_second"] =
                serde_json::json!((sent as f64 / (c - a) * 10.0).round() / 10.0);
        }
    }
}

/// `raw.json` of the report directory: what `fabrx loadgen merge` needs besides the
/// summary.
fn write_raw(dir: &Path, args: &NetworkArgs, started_unix_ms: u64, run: &NetworkRun) -> anyhow::Result<()> {
    let raw = loadgen::merge::Raw {
        instance: args.instance,
        instances: args.instances,
        started_unix_ms,
        latency_us: run.latency_us.to_sparse(),
        series: run.series.clone(),
    };
    let path = dir.join("raw.json");
    std::fs::write(&path, serde_json::to_string(&raw)?).with_context(|| format!("writing {}", path.display()))
}

/// The human line on stderr (unless `json`), then the summary line on stdout.
fn print_summary(run: &NetworkRun, summary: &serde_json::Value, json: bool) {
    if !json {
        eprintln!(
            "sent {} · submitted {} · confirmed {} · never confirmed {} · {:.0} tx/s · p50 {} ms · p99 {} ms",
            run.sent,
            run.submitted,
            run.confirmed,
            run.never_confirmed(),
            summary["tps"].as_f64().unwrap_or(0.0),
            summary["p50_ms"],
            summary["p99_ms"]
        );
    }
    println!("{summary}");
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The load generator's own metrics (`--metrics ADDR`), updated once a second.
struct LoadMetrics {
    sent: prometheus::IntCounter,
    submitted: prometheus::IntCounter,
    confirmed: prometheus::IntCounter,
    in_flight: prometheus::IntGauge,
    rate: prometheus::Gauge,
    control: Option<Arc<network::RateControl>>,
    last: std::sync::Mutex<(u64, u64, u64)>,
}

impl LoadMetrics {
    /// The metrics of load instance `instance`, served on `addr` (with the `/rate`
    /// control) when one is given.
    async fn new(
        addr: Option<&str>,
        instance: u32,
        control: Option<Arc<network::RateControl>>,
    ) -> anyhow::Result<Arc<LoadMetrics>> {
        let registry = telemetry::Registry::node("loadgen", &[("instance", instance.to_string())])?;
        let r = &registry;
        let m = Arc::new(LoadMetrics {
            sent: r.counter("sent_total", "Txs sent to the routers")?,
            submitted: r.counter("submitted_total", "Txs a quorum of routers acknowledged")?,
            confirmed: r.counter("confirmed_total", "Txs with a final status")?,
            in_flight: r.gauge("in_flight", "Txs sent and not confirmed")?,
            rate: r.float_gauge("rate", "Offered txs per second (0: unpaced)")?,
            control: control.clone(),
            last: std::sync::Mutex::new((0, 0, 0)),
        });
        m.rate.set(control.as_ref().map_or(0.0, |c| c.get()));
        if let Some(addr) = addr {
            let routes: telemetry::http::Routes = {
                let m = m.clone();
                Arc::new(move |req| rate_route(req, m.control.as_deref(), &m.rate))
            };
            telemetry::http::serve_with(addr, registry, Some(routes)).await?;
            eprintln!("loadgen: metrics and rate control on http://{addr}/metrics, /rate");
        }
        Ok(m)
    }

    fn update(&self, p: &NetProgress) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let (s, q, c) = *last;
        self.sent.inc_by(p.sent.saturating_sub(s));
        self.submitted.inc_by(p.submitted.saturating_sub(q));
        self.confirmed.inc_by(p.confirmed.saturating_sub(c));
        *last = (p.sent.max(s), p.submitted.max(q), p.confirmed.max(c));
        self.in_flight
            .set(i64::try_from(p.sent.saturating_sub(p.confirmed)).unwrap_or(i64::MAX));
        if let Some(c) = &self.control {
            self.rate.set(c.get());
        }
    }
}

/// `GET /rate` answers the offered rate; `POST /rate` (body: txs per second) changes
/// it in a fixed-rate run; other paths: the metrics.
fn rate_route(
    req: &telemetry::http::Request,
    control: Option<&network::RateControl>,
    gauge: &prometheus::Gauge,
) -> Option<(u16, String)> {
    if req.path != "/rate" {
        return None;
    }
    Some(match (req.method.as_str(), control) {
        ("GET", Some(c)) => (200, format!("{}\n", c.get())),
        ("GET", None) => (200, "unpaced\n".into()),
        ("POST" | "PUT", None) => (
            409,
            "this run has no fixed rate to change (start it with --rate)\n".into(),
        ),
        ("POST" | "PUT", Some(c)) => {
            let text = String::from_utf8_lossy(&req.body);
            let given = req
                .query
                .split('&')
                .find_map(|kv| kv.strip_prefix("tps="))
                .unwrap_or(text.trim());
            match given
                .trim()
                .parse::<f64>()
                .map_err(|e| e.to_string())
                .and_then(|r| c.set(r))
            {
                Ok(()) => {
                    gauge.set(c.get());
                    (200, format!("{}\n", c.get()))
                }
                Err(e) => (400, format!("invalid rate {given:?}: {e}\n")),
            }
        }
        _ => (405, "use GET or POST /rate\n".into()),
    })
}

/// The padding of each created coin's value that brings a load tx's envelope to about
/// `size` bytes (measured on a one-tx plan with the same shape).
pub(crate) fn padding_for(spec: &WorkloadSpec, size: usize) -> anyhow::Result<usize> {
    let outputs = spec.writes.saturating_sub(spec.spends());
    anyhow::ensure!(
        outputs > 0,
        "--tx-size needs txs that create coins (--writes > --reads)"
    );
    let probe = WorkloadSpec {
        blocks: 1,
        block_size: 1,
        output_padding: 0,
        ..spec.clone()
    };
    let meta = crypto::derive_signing_key(crypto::Scheme::Ed25519, "probe");
    let w = loadgen::workload::plan(&probe)?.sign_with_meta(meta)?;
    let plain = w
        .load
        .first()
        .and_then(|b| b.txs.first())
        .map_or(0, |(id, tx)| network::envelope(id, tx).len());
    Ok(size.saturating_sub(plain) / outputs)
}

fn check(args: &NetworkArgs) -> anyhow::Result<()> {
    for (flag, v) in [
        ("--drain", args.drain),
        ("--duration", args.duration.unwrap_or(1.0)),
    ] {
        anyhow::ensure!(
            v.is_finite() && v > 0.0,
            "invalid {flag}: must be a positive number of seconds"
        );
    }
    if let Some(r) = args.rate {
        anyhow::ensure!(r.is_finite() && r > 0.0, "invalid --rate: must be positive");
    }
    Ok(())
}

/// Confirmed load txs whose status is not the planner's intent. Without double spends
/// every load tx's status is independent of the order the network chose, so the intent
/// is the serial oracle's answer.
fn mismatches(run: &NetworkRun, workload: &Workload) -> usize {
    let expected = workload.intents.iter().flatten().map(|i| i.expected().name());
    run.outcome
        .iter()
        .zip(expected)
        .filter(|(got, want)| got.as_deref().is_some_and(|g| g != *want))
        .count()
}

/// Commits the genesis blocks one after the other: each tx must end `COMMITTED`.
async fn genesis(endpoints: &Endpoints, workload: &Workload) -> anyhow::Result<f64> {
    let began = std::time::Instant::now();
    for block in &workload.genesis {
        let txs: Vec<(String, Arc<Vec<u8>>)> = block
            .txs
            .iter()
            .map(|(id, tx)| (id.0.clone(), Arc::new(network::envelope(id, tx))))
            .collect();
        let pace = Pace {
            schedule: Schedule::Unpaced,
            max_in_flight: std::num::NonZeroUsize::new(txs.len()).unwrap_or(std::num::NonZeroUsize::MIN),
            duration: None,
            drain: Duration::from_secs(60),
            control: None,
        };
        let run = network::run(endpoints, &txs, pace, |_| {}).await?;
        for ((id, _), outcome) in txs.iter().zip(&run.outcome) {
            match outcome.as_deref() {
                Some("COMMITTED") => {}
                Some(status) => bail!("genesis tx {id} ended {status}, expected COMMITTED"),
                None => bail!(
                    "genesis tx {id} was not confirmed within 60 s (routers: {:?})",
                    run.router_errors
                ),
            }
        }
    }
    Ok(began.elapsed().as_secs_f64())
}

/// Routers and assembler from the network config; the sidecar of a running committing
/// party from `network.json`.
fn endpoints(dir: &Path, party: Option<u32>) -> anyhow::Result<Endpoints> {
    let config_path = netconfig::config_path(dir);
    let config = netconfig::NetworkConfig::load(&config_path)
        .with_context(|| format!("loading the network config {}", config_path.display()))?;
    config.install_client_tls(dir)?;
    let routers = config.parties().iter().map(|p| p.router.uri()).collect();
    let assembler = config
        .parties()
        .iter()
        .find_map(|p| p.assembler.as_ref().map(netconfig::Endpoint::uri))
        .context("the network has no assembler")?;
    let listing = dir.join("network.json");
    let text = std::fs::read_to_string(&listing)
        .with_context(|| format!("reading {} (is the network up?)", listing.display()))?;
    let nodes: serde_json::Value = serde_json::from_str(&text).context("network.json does not parse")?;
    let sidecars: Vec<(u64, String)> = nodes["nodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|n| n["role"] == "sidecar")
                .filter_map(|n| Some((n["party"].as_u64()?, n["listen"].as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let sidecar = match party {
        Some(p) => Some(
            sidecars
                .iter()
                .find(|(q, _)| *q == u64::from(p))
                .with_context(|| format!("party {p} runs no sidecar in {}", listing.display()))?
                .1
                .clone(),
        ),
        None => sidecars.first().map(|(_, l)| l.clone()),
    };
    Ok(Endpoints {
        routers,
        sidecar: sidecar.map(|l| format!("http://{l}")),
        assembler,
    })
}

fn printer() -> impl FnMut(NetProgress) {
    let tty = std::io::stderr().is_terminal();
    move |p: NetProgress| {
        if tty {
            eprint!(
                "\r{:>6.1} s  sent {:>8}  submitted {:>8}  confirmed {:>8}  ",
                p.elapsed, p.sent, p.submitted, p.confirmed
            );
        }
    }
}

/// The JSON summary line (docs/contracts.md "Contracts"; docs/loadgen.md).
fn summary(
    run: &NetworkRun,
    confirmed_by: &str,
    tag: &str,
    rate: Option<f64>,
    genesis_seconds: f64,
) -> serde_json::Value {
    let ms = |q: f64| {
        run.latency_us
            .quantile(q)
            .map(|us| (us as f64 / 1000.0 * 10.0).round() / 10.0)
    };
    let committed = run.statuses.get("COMMITTED").copied().unwrap_or(0);
    let aborted: serde_json::Map<String, serde_json::Value> = run
        .statuses
        .iter()
        .filter(|(s, _)| *s != "COMMITTED" && *s != "ORDERED")
        .map(|(s, n)| (s.clone(), serde_json::json!(n)))
        .collect();
    let per_second = |n: u64| {
        if run.seconds > 0.0 {
            (n as f64 / run.seconds * 10.0).round() / 10.0
        } else {
            0.0
        }
    };
    serde_json::json!({
        "target": "network",
        "confirmed_by": confirmed_by,
        "sent": run.sent,
        "submitted": run.submitted,
        "refused": run.refused,
        "committed": committed,
        "aborted": aborted,
        "ordered": run.statuses.get("ORDERED").copied().unwrap_or(0),
        "confirmed": run.confirmed,
        "never_confirmed": run.never_confirmed(),
        "tps": per_second(run.confirmed),
        "goodput_tps": per_second(committed),
        // The name docs/contracts.md gives; `goodput_tps` as the committer target spells it.
        "goodput": per_second(committed),
        "p50_ms": ms(0.5),
        "p90_ms": ms(0.9),
        "p99_ms": ms(0.99),
        "max_ms": (run.latency_us.max() as f64 / 100.0).round() / 10.0,
        "seconds": (run.seconds * 1000.0).round() / 1000.0,
        "genesis_seconds": (genesis_seconds * 1000.0).round() / 1000.0,
        "rate": rate,
        "router_errors": run.router_errors,
        "tag": tag,
        "expected_mismatches": null,
        "stalled": run.stalled,
    })
}
