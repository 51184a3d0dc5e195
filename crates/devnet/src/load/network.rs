//! `fabrx loadgen --target network` (docs/loadgen.md "A network"): the load of a network
//! started by `fabrx up`, around the `loadgen::network` driver. It reads the network
//! directory (`network.json` for the running sidecars, the network config for routers
//! and assemblers, the administrator key for the `_meta` tx), commits the genesis first
//! (namespace, then the coins), sends the load and sums it up.
//!
//! Several processes may share one run (`--instance I --instances K`): [`share`] gives
//! each its own tag, seed and part of the rate, [`share_of`] its part of the txs, and
//! [`Outcome::write_raw`] what `fabrx loadgen merge` combines.

use super::metrics::LoadMetrics;
use super::{Error, Result, meta_key, network_config, per_second, round_ms};
use loadgen::merge::Raw;
use loadgen::network::{self as driver, Endpoints, Load, NetProgress, NetworkRun, Pace, RateControl};
use loadgen::series::{Schedule, StepRow};
use loadgen::{Workload, WorkloadSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most load processes of one run.
pub const MAX_INSTANCES: u32 = 1000;

/// How to load a network: the flags of `--target network` besides the workload's.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The network directory (`fabrx up --dir`).
    pub network: PathBuf,
    /// Load txs to send (none: the workload's blocks × block size).
    pub txs: Option<usize>,
    /// Stop sending after this many seconds.
    pub duration: Option<f64>,
    /// Txs sent and not yet confirmed, at most.
    pub max_in_flight: NonZeroUsize,
    /// Seconds to wait for outstanding statuses after the last send.
    pub drain: f64,
    /// Due txs wait at most this long for more before they are sent
    /// (`loadgen::network::Pace::linger`).
    pub linger: Duration,
    /// Which committing party's sidecar reports the statuses (none: the first running).
    pub party: Option<u32>,
    /// Make each load tx's envelope about this many bytes.
    pub tx_size: Option<usize>,
    /// This process's number among the load processes of the run, 1 to `instances`.
    pub instance: u32,
    /// Load processes of the run.
    pub instances: u32,
    /// Serve the load's own metrics and its `/rate` control on this address.
    pub metrics: Option<String>,
    /// Send template txs (`loadgen::network::Load::template`: no planning, no signing)
    /// instead of the token workload; only to a network without a running committer,
    /// which would refuse their signatures.
    pub template: bool,
}

impl Options {
    /// Refuses lengths of time that are not a positive number of seconds.
    fn check(&self) -> Result<()> {
        for (flag, v) in [
            ("--drain", self.drain),
            ("--duration", self.duration.unwrap_or(1.0)),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::Usage(format!(
                    "invalid {flag}: must be a positive number of seconds"
                )));
            }
        }
        Ok(())
    }
}

/// What the run tells its caller while it goes on.
#[derive(Debug, Clone)]
pub enum Event {
    /// The load is planned and signed; the genesis (with a committer) and the load come
    /// next.
    Planned {
        /// Load txs to send.
        txs: usize,
        /// The run's tag.
        tag: String,
        /// Routers the txs go to.
        routers: usize,
        /// `committer` or `orderer`: who reports the statuses.
        confirmed_by: &'static str,
    },
    /// The load's metrics and rate control are served on `addr`.
    MetricsServed {
        /// The address.
        addr: String,
    },
    /// Once a second while the load runs.
    Progress(NetProgress),
}

/// This instance's share of the run: its tag, seed and schedule (instance `instance`
/// of `instances`); unchanged for a run of one process.
pub fn share(spec: &mut WorkloadSpec, schedule: Schedule, instance: u32, instances: u32) -> Result<Schedule> {
    let (i, k) = (instance, instances);
    if !(1..=MAX_INSTANCES).contains(&k) {
        return Err(Error::Usage(format!(
            "invalid --instances {k}: give 1 to {MAX_INSTANCES}"
        )));
    }
    if !(1..=k).contains(&i) {
        return Err(Error::Usage(format!(
            "invalid --instance {i}: give 1 to --instances ({k})"
        )));
    }
    if k == 1 {
        return Ok(schedule);
    }
    spec.tag = format!("{}_{i}", spec.tag);
    spec.seed = spec.seed.wrapping_add(u64::from(i - 1));
    spec.validate().map_err(|source| Error::Share {
        what: format!("the tag of instance {i} is `{}`", spec.tag),
        source,
    })?;
    let kf = f64::from(k);
    Ok(match schedule {
        Schedule::Unpaced => Schedule::Unpaced,
        Schedule::Fixed { rate } => Schedule::Fixed { rate: rate / kf },
        Schedule::Steps { rates, step } => {
            let mine: Vec<f64> = rates.iter().map(|r| r / kf).collect();
            Schedule::steps(&mine, step.as_secs_f64()).map_err(|source| Error::Share {
                what: format!("instance {i}'s share (1/{k}) of --rates"),
                source,
            })?
        }
    })
}

/// Instance `i`'s share (1 to `k`) of `total` txs: the shares differ by at most one and
/// add up to `total`.
pub fn share_of(total: usize, i: u32, k: u32) -> usize {
    let part = |j: u32| (total as u128 * u128::from(j) / u128::from(k.max(1))) as usize;
    part(i).saturating_sub(part(i.saturating_sub(1)))
}

/// The padding of each created coin's value that brings a load tx's envelope to about
/// `size` bytes (measured on a one-tx plan with the same shape).
pub fn padding_for(spec: &WorkloadSpec, size: usize) -> Result<usize> {
    let outputs = spec.writes.saturating_sub(spec.spends());
    if outputs == 0 {
        return Err(Error::Usage(
            "--tx-size needs txs that create coins (--writes > --reads)".into(),
        ));
    }
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
        .map_or(0, |(id, tx)| driver::envelope(id, tx).len());
    Ok(size.saturating_sub(plain) / outputs)
}

/// The summary line of a network run (docs/contracts.md "Contracts"; docs/loadgen.md
/// "A network").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// `network` (or `sink`).
    pub target: String,
    /// `committer` (statuses from a sidecar), `orderer` (tx ids from an assembler) or
    /// `sink` (tx ids from the sink's assembler).
    pub confirmed_by: String,
    /// Load txs sent.
    pub sent: u64,
    /// Of those, acknowledged by a quorum of routers.
    pub submitted: u64,
    /// Of those, refused by so many routers that no quorum was possible (an
    /// `ALREADY_EXISTS` is a refusal unless the tx was decided in this run).
    pub refused: u64,
    /// The refused txs by the reason of the refusal that made a quorum impossible (the
    /// gRPC code's name, e.g. `AlreadyExists`, `ResourceExhausted`).
    #[serde(default)]
    pub refused_reasons: BTreeMap<String, u64>,
    /// Load txs the committer `COMMITTED` in this run.
    pub committed: u64,
    /// Every other final status but `ORDERED` decided in this run, with its count.
    pub aborted: BTreeMap<String, u64>,
    /// Load txs `ORDERED` in this run (a network without a committer).
    pub ordered: u64,
    /// Load txs with a final status decided in this run.
    pub confirmed: u64,
    /// Load txs whose only status the committer decided before this run began (an
    /// earlier run sent the same tx ids): not confirmed, committed or aborted by it.
    #[serde(default)]
    pub decided_before_run: u64,
    /// Sent txs without any final status when the run ended.
    pub never_confirmed: u64,
    /// Of those, the txs a quorum of routers admitted (acknowledged, not delivered).
    #[serde(default)]
    pub admitted_never_confirmed: u64,
    /// Confirmed txs per second of `seconds`.
    pub tps: f64,
    /// Committed txs per second of `seconds`.
    pub goodput_tps: f64,
    /// `goodput_tps` under the name the contract gives it.
    pub goodput: f64,
    /// Median send-to-confirmation latency, ms.
    pub p50_ms: Option<f64>,
    /// 90th percentile of the same.
    pub p90_ms: Option<f64>,
    /// 99th percentile of the same.
    pub p99_ms: Option<f64>,
    /// Highest of the same.
    pub max_ms: f64,
    /// First send to the last confirmation.
    pub seconds: f64,
    /// Seconds the genesis took (0 without a committer).
    pub genesis_seconds: f64,
    /// The fixed rate of the run, txs per second (none: unpaced or in steps).
    pub rate: Option<f64>,
    /// Routers' refusals, by reason.
    pub router_errors: BTreeMap<String, u64>,
    /// The run's tag.
    pub tag: String,
    /// With a committer and no double spends: confirmed txs whose status is not the
    /// planner's intent.
    pub expected_mismatches: Option<u64>,
    /// The run stopped with its in-flight bound full of txs never confirmed.
    pub stalled: bool,
    /// With rate steps: each step's rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepRow>>,
    /// This process's number among the run's load processes.
    pub instance: u32,
    /// Load processes of the run.
    pub instances: u32,
    /// Wall-clock instant of the first send, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// With a rate control: the changes made to the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_changes: Option<u64>,
    /// With a rate control: the rate at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_rate: Option<f64>,
    /// CPU seconds of planning, signing, building envelopes and the genesis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_prepare_cpu_seconds: Option<f64>,
    /// That plus sending the load and following its statuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpu_seconds: Option<f64>,
    /// `sent / client_cpu_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_txs_per_cpu_second: Option<f64>,
    /// `--target sink`: CPU seconds the sink's process used while the load ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_cpu_seconds: Option<f64>,
}

impl Summary {
    /// The JSON line printed on stdout and written as `summary.json`.
    pub fn line(&self) -> Result<String> {
        super::line(self)
    }
}

/// A finished run: its summary and what `raw.json` holds (the per-second rows among
/// it, for the report).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The summary.
    pub summary: Summary,
    /// The instance, its start, its latency histogram and its per-second rows.
    pub raw: Raw,
}

impl Outcome {
    /// Writes `raw.json` into the report directory `dir` (which exists): what
    /// `fabrx loadgen merge` needs besides the summary.
    pub fn write_raw(&self, dir: &Path) -> Result<()> {
        let path = dir.join("raw.json");
        let text = serde_json::to_string(&self.raw)?;
        std::fs::write(&path, text).map_err(|source| Error::Write { path, source })
    }
}

/// The load, planned and signed; not yet sent.
struct Planned {
    endpoints: Endpoints,
    /// None: template txs.
    workload: Option<Workload>,
    /// The run's tag.
    tag: String,
    /// Load txs to send.
    txs: usize,
    /// CPU seconds of the process before planning.
    cpu_at_start: Option<f64>,
}

/// Checks the options, finds the network's endpoints and plans and signs the load
/// (`txs` of it: the schedule's, or this instance's share).
async fn plan(mut spec: WorkloadSpec, options: &Options, schedule: &Schedule) -> Result<Planned> {
    options.check()?;
    let txs = match schedule.total() {
        Some(n) => usize::try_from(n)?,
        None => share_of(
            options.txs.unwrap_or(spec.blocks.saturating_mul(spec.block_size)),
            options.instance,
            options.instances,
        ),
    };
    if txs == 0 {
        return Err(Error::Usage("invalid --txs: must be at least 1".into()));
    }
    if options.template {
        let endpoints = endpoints(&options.network, options.party).await?;
        if endpoints.sidecar.is_some() {
            return Err(Error::Usage(
                "--template sends txs no committer accepts: use it on a network that only orders (no committing party running)".into(),
            ));
        }
        return Ok(Planned {
            endpoints,
            workload: None,
            tag: spec.tag,
            txs,
            cpu_at_start: crate::cpu::own_seconds(),
        });
    }
    let block_size = NonZeroUsize::new(spec.block_size)
        .ok_or_else(|| Error::Usage("invalid --block-size: must be at least 1".into()))?;
    spec.blocks = txs.div_ceil(block_size.get());
    if let Some(size) = options.tx_size {
        spec.output_padding = padding_for(&spec, size)?;
    }
    let endpoints = endpoints(&options.network, options.party).await?;
    let meta = meta_key(&options.network)?;
    let cpu_at_start = crate::cpu::own_seconds();
    let workload =
        tokio::task::spawn_blocking(move || loadgen::workload::plan(&spec)?.sign_with_meta(meta)).await??;
    Ok(Planned {
        endpoints,
        tag: workload.spec.tag.clone(),
        workload: Some(workload),
        txs,
        cpu_at_start,
    })
}

/// Runs the load against the network: plans, commits the genesis (with a committer),
/// serves the metrics (with `options.metrics`), sends, and sums up. `on_event` hears of
/// each phase and of the progress once a second.
pub async fn run(
    spec: WorkloadSpec,
    options: &Options,
    schedule: Schedule,
    mut on_event: impl FnMut(Event),
) -> Result<Outcome> {
    let Planned {
        endpoints,
        workload,
        tag,
        txs,
        cpu_at_start,
    } = plan(spec, options, &schedule).await?;
    let confirmed_by = if endpoints.sidecar.is_some() {
        "committer"
    } else {
        "orderer"
    };
    on_event(Event::Planned {
        txs,
        tag: tag.clone(),
        routers: endpoints.routers.len(),
        confirmed_by,
    });
    let (genesis_seconds, load) =
        genesis_and_load(&endpoints, workload.as_ref(), &tag, txs, options.tx_size).await?;
    let load = Arc::new(load);
    let rate = match schedule {
        Schedule::Fixed { rate } => Some(rate),
        _ => None,
    };
    // The rate can change only through the metrics port, so only a run serving one has a
    // control.
    let control = rate
        .filter(|_| options.metrics.is_some())
        .map(|r| Arc::new(RateControl::new(r)));
    let metrics = LoadMetrics::start(options.metrics.as_deref(), options.instance, control.clone()).await?;
    if let Some(addr) = &options.metrics {
        on_event(Event::MetricsServed { addr: addr.clone() });
    }
    let pace = Pace {
        schedule,
        max_in_flight: options.max_in_flight,
        duration: options.duration.map(Duration::from_secs_f64),
        drain: Duration::from_secs_f64(options.drain),
        control: control.clone(),
        linger: options.linger,
    };
    let cpu_at_load = crate::cpu::own_seconds();
    let started_unix_ms = unix_ms();
    let run = driver::run_load(&endpoints, load, pace, |p| {
        metrics.update(&p);
        on_event(Event::Progress(p));
    })
    .await?;
    let facts = Facts {
        target: "network",
        confirmed_by,
        tag,
        rate,
        genesis_seconds,
        instance: options.instance,
        instances: options.instances,
        started_unix_ms,
        control: control.as_deref(),
        cpu: [cpu_at_start, cpu_at_load, crate::cpu::own_seconds()],
        expected_mismatches: workload
            .as_ref()
            .filter(|w| endpoints.sidecar.is_some() && w.spec.conflict_rate == 0.0)
            .map(|w| mismatches(&run, w)),
        sink_cpu: None,
    };
    let summary = summary(&run, &facts);
    let raw = Raw {
        instance: options.instance,
        instances: options.instances,
        started_unix_ms,
        latency_us: run.latency_us.to_sparse(),
        series: run.series,
    };
    Ok(Outcome { summary, raw })
}

/// Commits the genesis (with a committer) and makes the load's `txs` txs: the
/// workload's envelopes, or without one template txs of `tx_size` bytes. Returns the
/// genesis's seconds too.
async fn genesis_and_load(
    endpoints: &Endpoints,
    workload: Option<&Workload>,
    tag: &str,
    txs: usize,
    tx_size: Option<usize>,
) -> Result<(f64, Load)> {
    Ok(match workload {
        Some(w) => {
            let genesis_seconds = if endpoints.sidecar.is_some() {
                genesis(endpoints, w).await?
            } else {
                0.0
            };
            (genesis_seconds, envelopes(w.load.iter(), txs))
        }
        None => {
            let size = tx_size.unwrap_or(TEMPLATE_TX_SIZE);
            (0.0, Load::template(&format!("{tag}-"), txs, size))
        }
    })
}

/// The envelope size of template txs without `--tx-size`, bytes.
const TEMPLATE_TX_SIZE: usize = 300;

/// The ids and envelopes of the first `txs` txs of `blocks`, in one buffer.
fn envelopes<'a>(blocks: impl Iterator<Item = &'a types::Block>, txs: usize) -> Load {
    Load::from_envelopes(
        blocks
            .flat_map(|b| b.txs.iter())
            .take(txs)
            .map(|(id, tx)| (id.0.clone(), driver::envelope(id, tx))),
    )
}

/// What the summary says besides the driver's counts.
pub(super) struct Facts<'a> {
    /// `network` or `sink`.
    pub(super) target: &'static str,
    pub(super) confirmed_by: &'static str,
    pub(super) tag: String,
    pub(super) rate: Option<f64>,
    pub(super) genesis_seconds: f64,
    pub(super) instance: u32,
    pub(super) instances: u32,
    pub(super) started_unix_ms: u64,
    pub(super) control: Option<&'a RateControl>,
    /// CPU seconds of the process before planning, at the start of the load and after it.
    pub(super) cpu: [Option<f64>; 3],
    pub(super) expected_mismatches: Option<u64>,
    /// CPU seconds the sink's process used during the load (`--target sink`).
    pub(super) sink_cpu: Option<f64>,
}

/// The summary of `run`: the driver's counts and latencies, the run's facts and the
/// client's own cost.
pub(super) fn summary(run: &NetworkRun, facts: &Facts<'_>) -> Summary {
    let ms = |q: f64| {
        run.latency_us
            .quantile(q)
            .map(|us| (us as f64 / 1000.0 * 10.0).round() / 10.0)
    };
    let committed = run.statuses.get("COMMITTED").copied().unwrap_or(0);
    let aborted = run
        .statuses
        .iter()
        .filter(|(s, _)| *s != "COMMITTED" && *s != "ORDERED")
        .map(|(s, n)| (s.clone(), *n))
        .collect();
    let cost = client_cost(facts.cpu, run.sent);
    Summary {
        target: facts.target.into(),
        confirmed_by: facts.confirmed_by.into(),
        sent: run.sent,
        submitted: run.submitted,
        refused: run.refused,
        refused_reasons: run.refused_reasons.clone(),
        committed,
        aborted,
        ordered: run.statuses.get("ORDERED").copied().unwrap_or(0),
        confirmed: run.confirmed,
        decided_before_run: run.decided_before_run,
        never_confirmed: run.never_confirmed(),
        admitted_never_confirmed: run.admitted_never_confirmed,
        tps: per_second(run.confirmed, run.seconds),
        goodput_tps: per_second(committed, run.seconds),
        goodput: per_second(committed, run.seconds),
        p50_ms: ms(0.5),
        p90_ms: ms(0.9),
        p99_ms: ms(0.99),
        max_ms: (run.latency_us.max() as f64 / 100.0).round() / 10.0,
        seconds: round_ms(run.seconds),
        genesis_seconds: round_ms(facts.genesis_seconds),
        rate: facts.rate,
        router_errors: run.router_errors.clone(),
        tag: facts.tag.clone(),
        expected_mismatches: facts.expected_mismatches,
        stalled: run.stalled,
        steps: (!run.series.steps.is_empty()).then(|| run.series.steps.clone()),
        instance: facts.instance,
        instances: facts.instances,
        started_unix_ms: facts.started_unix_ms,
        rate_changes: facts.control.map(RateControl::changes),
        final_rate: facts.control.map(RateControl::get),
        client_prepare_cpu_seconds: cost.map(|c| c.0),
        client_cpu_seconds: cost.map(|c| c.1),
        client_txs_per_cpu_second: cost.and_then(|c| c.2),
        sink_cpu_seconds: facts.sink_cpu.map(|s| (s * 1000.0).round() / 1000.0),
    }
}

/// The client's own cost from its CPU seconds before planning, at the start of the
/// load and after it: preparing (planning, signing, envelopes, the genesis), the whole
/// run, and txs sent per CPU second (none in no CPU time).
pub(super) fn client_cost(cpu: [Option<f64>; 3], sent: u64) -> Option<(f64, f64, Option<f64>)> {
    let [Some(a), Some(b), Some(c)] = cpu else {
        return None;
    };
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    let per_cpu = (c > a).then(|| (sent as f64 / (c - a) * 10.0).round() / 10.0);
    Some((round(b - a), round(c - a), per_cpu))
}

pub(super) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Confirmed load txs whose status is not the planner's intent. Without double spends
/// every load tx's status is independent of the order the network chose, so the intent
/// is the serial oracle's answer.
fn mismatches(run: &NetworkRun, workload: &Workload) -> u64 {
    let expected = workload.intents.iter().flatten().map(|i| i.expected().name());
    let n = run
        .outcome
        .iter()
        .zip(expected)
        .filter(|(got, want)| got.as_deref().is_some_and(|g| g != *want))
        .count();
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// How long the genesis waits for each of its txs' statuses.
const GENESIS_DRAIN: Duration = Duration::from_secs(60);

/// Commits the genesis blocks one after the other: each tx must end `COMMITTED` — in
/// this run, or in an earlier one with the same tag and seed (the coins it makes exist
/// either way). Returns the seconds it took.
async fn genesis(endpoints: &Endpoints, workload: &Workload) -> Result<f64> {
    let began = Instant::now();
    for block in &workload.genesis {
        let txs = Arc::new(envelopes(std::iter::once(block), usize::MAX));
        let pace = Pace {
            schedule: Schedule::Unpaced,
            max_in_flight: NonZeroUsize::new(txs.len()).unwrap_or(NonZeroUsize::MIN),
            duration: None,
            drain: GENESIS_DRAIN,
            control: None,
            linger: loadgen::network::LINGER,
        };
        let run = driver::run_load(endpoints, txs.clone(), pace, |_| {}).await?;
        for i in 0..txs.len() {
            let id = txs.id(i).into_owned();
            match run.status_of(i) {
                Some(("COMMITTED", _)) => {}
                Some((status, _)) => {
                    return Err(Error::GenesisStatus {
                        id,
                        status: status.into(),
                    });
                }
                None => {
                    return Err(Error::GenesisUnconfirmed {
                        id,
                        routers: run.router_errors.clone(),
                    });
                }
            }
        }
    }
    Ok(began.elapsed().as_secs_f64())
}

/// How long the load waits for the consenters to answer the config in force.
const IN_FORCE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Routers and an assembler from the network config — the config in force when f + 1
/// consenters answer it (a party that joined has its router sent to, docs/reconfiguration.md
/// "Adding a party"), else the genesis file; the sidecar of a running committing party
/// (`party`, or the first) from `network.json`.
async fn endpoints(dir: &Path, party: Option<u32>) -> Result<Endpoints> {
    let genesis = network_config(dir)?;
    let config = match tokio::time::timeout(IN_FORCE_WAIT, netconfig::in_force::in_force_config(&genesis))
        .await
    {
        Ok(Ok((in_force, _))) => {
            // Its TLS section authorizes the routers that joined.
            netconfig::tls::follow::follow(&in_force);
            in_force
        }
        Ok(Err(reason)) => {
            tracing::debug!(%reason, "the config in force is unknown: the genesis config's routers are used");
            genesis
        }
        Err(_) => genesis,
    };
    let routers = config.parties().iter().map(|p| p.router.uri()).collect();
    let assembler = config
        .parties()
        .iter()
        .find_map(|p| p.assembler.as_ref().map(netconfig::Endpoint::uri))
        .ok_or_else(|| Error::Usage("the network has no assembler".into()))?;
    let listing = crate::file::path(dir);
    let text = std::fs::read_to_string(&listing).map_err(|source| Error::NotUp {
        path: listing.clone(),
        source,
    })?;
    let nodes: crate::file::NetworkFile = serde_json::from_str(&text).map_err(Error::Listing)?;
    let mut sidecars = nodes.nodes.iter().filter(|n| n.role == "sidecar");
    let sidecar =
        match party {
            Some(p) => Some(sidecars.find(|n| n.party == p).ok_or_else(|| {
                Error::Usage(format!("party {p} runs no sidecar in {}", listing.display()))
            })?),
            None => sidecars.next(),
        };
    Ok(Endpoints {
        routers,
        sidecar: sidecar.map(|n| format!("http://{}", n.listen)),
        assembler,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_differ_by_at_most_one_and_add_up() {
        for (total, k) in [(0, 1), (10, 3), (7, 7), (5, 8), (1_000_001, 4)] {
            let shares: Vec<usize> = (1..=k).map(|i| share_of(total, i, k)).collect();
            assert_eq!(shares.iter().sum::<usize>(), total, "{total} over {k}");
            let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(hi - lo <= 1, "{shares:?}");
        }
    }

    #[test]
    fn an_instance_gets_its_tag_seed_and_part_of_the_rate() {
        let base = WorkloadSpec {
            tag: "run".into(),
            seed: 42,
            ..WorkloadSpec::default()
        };
        let mut one = base.clone();
        let fixed = Schedule::Fixed { rate: 900.0 };
        assert!(
            matches!(share(&mut one, fixed.clone(), 1, 1), Ok(Schedule::Fixed { rate }) if rate == 900.0)
        );
        assert_eq!(one, base);
        let mut third = base.clone();
        let mine = share(&mut third, fixed.clone(), 3, 3).unwrap();
        assert!(matches!(mine, Schedule::Fixed { rate } if rate == 300.0));
        assert_eq!((third.tag.as_str(), third.seed), ("run_3", 44));
        assert!(share(&mut base.clone(), fixed.clone(), 4, 3).is_err());
        assert!(share(&mut base.clone(), fixed, 1, MAX_INSTANCES + 1).is_err());
    }

    #[test]
    fn the_summary_line_names_the_documented_fields_in_sorted_order() {
        let s = Summary {
            target: "network".into(),
            confirmed_by: "committer".into(),
            sent: 3,
            submitted: 3,
            refused: 0,
            refused_reasons: BTreeMap::new(),
            committed: 2,
            aborted: BTreeMap::from([("ABORTED_MVCC_CONFLICT".to_string(), 1)]),
            ordered: 0,
            confirmed: 3,
            decided_before_run: 0,
            never_confirmed: 0,
            admitted_never_confirmed: 0,
            tps: 1.5,
            goodput_tps: 1.0,
            goodput: 1.0,
            p50_ms: Some(2.0),
            p90_ms: None,
            p99_ms: Some(3.5),
            max_ms: 3.5,
            seconds: 2.0,
            genesis_seconds: 0.5,
            rate: None,
            router_errors: BTreeMap::new(),
            tag: "t".into(),
            expected_mismatches: None,
            stalled: false,
            steps: None,
            instance: 1,
            instances: 1,
            started_unix_ms: 7,
            rate_changes: None,
            final_rate: None,
            client_prepare_cpu_seconds: Some(0.25),
            client_cpu_seconds: Some(1.0),
            client_txs_per_cpu_second: None,
            sink_cpu_seconds: None,
        };
        let line = s.line().unwrap();
        assert!(
            line.starts_with(
                r#"{"aborted":{"ABORTED_MVCC_CONFLICT":1},"admitted_never_confirmed":0,"client_cpu_seconds":1.0,"#
            ),
            "{line}"
        );
        for field in [
            r#""expected_mismatches":null"#,
            r#""p90_ms":null"#,
            r#""rate":null"#,
            r#""goodput":1.0"#,
        ] {
            assert!(line.contains(field), "{field} in {line}");
        }
        for absent in ["steps", "rate_changes", "final_rate", "client_txs_per_cpu_second"] {
            assert!(!line.contains(absent), "{absent} in {line}");
        }
        let back: Summary = serde_json::from_str(&line).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn the_client_cost_needs_all_three_readings() {
        assert_eq!(client_cost([Some(1.0), None, Some(3.0)], 10), None);
        assert_eq!(
            client_cost([Some(1.0), Some(1.5), Some(3.0)], 10),
            Some((0.5, 2.0, Some(5.0)))
        );
        assert_eq!(
            client_cost([Some(1.0), Some(1.0), Some(1.0)], 10),
            Some((0.0, 0.0, None))
        );
    }
}
