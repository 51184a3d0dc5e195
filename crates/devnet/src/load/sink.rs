//! `fabrx loadgen --target sink` (docs/loadgen.md "A sink: what the load client
//! costs"): the network driver against `loadgen::sink` — routers that answer at once
//! and an assembler that blocks what one of them takes — served by another process, so
//! that the run measures what the load client costs, alone. The binary starts that
//! process ([`serve`] runs in it), hands the run its addresses and its process id, and
//! prints the summary.
//!
//! The txs are template txs (`loadgen::network::Load::template`): built once, each
//! tx's envelope written into its message with its id patched in. With TLS (the
//! default) both processes take their identities from a throwaway network directory
//! ([`make_tls`]): the sink serves as party 1's router, the client is the network's
//! client, and every link is mutual TLS as in a network `fabrx up` starts.

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use loadgen::network::{self as driver, Endpoints, Load, Pace};
use loadgen::series::Schedule;
use loadgen::sink::{RouterMode, Sink, SinkRouter};
use serde::{Deserialize, Serialize};

use super::network::{Event, Facts, Outcome, summary, unix_ms};
use super::{Error, Result};
use loadgen::merge::Raw;

/// Routers of the sink (the first also orders).
pub const ROUTERS: usize = 4;

/// How to load the sink.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Txs to send (a schedule in steps sends its own number).
    pub txs: usize,
    /// The size of each envelope, bytes (about).
    pub tx_size: usize,
    /// Txs sent and not yet confirmed, at most.
    pub max_in_flight: NonZeroUsize,
    /// Seconds to wait for outstanding confirmations after the last send.
    pub drain: f64,
    /// Due txs wait at most this long for more before they are sent
    /// (`loadgen::network::Pace::linger`).
    pub linger: Duration,
    /// Stop sending after this many seconds.
    pub duration: Option<f64>,
    /// The run's tag: tx ids are `<tag>-<index>`.
    pub tag: String,
}

/// Where the sink's process listens, as it prints it (one JSON line on its stdout).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listening {
    /// Each router's `host:port`.
    pub routers: Vec<String>,
    /// The assembler's `host:port`.
    pub assembler: String,
}

/// Writes a throwaway network directory into `dir` (one party, mutual TLS): what
/// [`serve`] and the client take their TLS identities from.
pub fn make_tls(dir: &Path) -> Result<()> {
    netconfig::generate(&netconfig::GenerateSpec::new(1, 1, dir))?;
    Ok(())
}

/// In the sink's process: installs party 1's router identity of the network in `tls`
/// (none: plain TCP) and starts [`ROUTERS`] routers (the first orders) and an
/// assembler on loopback.
pub async fn serve(tls: Option<&Path>) -> Result<(Sink, Listening)> {
    if let Some(dir) = tls {
        let path = netconfig::config_path(dir);
        let config = netconfig::NetworkConfig::load(&path).map_err(|source| Error::Config {
            path: path.clone(),
            source,
        })?;
        config.install_tls(&path, wire::tls::Role::Router, 1, None)?;
    }
    let routers: Vec<SinkRouter> = (0..ROUTERS)
        .map(|i| SinkRouter {
            mode: RouterMode::Admit,
            orders: i == 0,
        })
        .collect();
    let sink = loadgen::sink::start(&routers).await?;
    let listening = Listening {
        routers: sink.routers.iter().map(ToString::to_string).collect(),
        assembler: sink.assembler.to_string(),
    };
    Ok((sink, listening))
}

/// In the client's process: installs the client identity of the network in `tls`
/// (none: plain TCP).
pub fn install_client_tls(tls: Option<&Path>) -> Result<()> {
    if let Some(dir) = tls {
        super::network_config(dir)?;
    }
    Ok(())
}

/// Sends the load to the sink listening at `at` (process `sink_pid`, whose CPU time is
/// reported) and sums it up.
pub async fn run(
    at: &Listening,
    sink_pid: Option<u32>,
    options: &Options,
    schedule: Schedule,
    mut on_event: impl FnMut(Event),
) -> Result<Outcome> {
    for (flag, v) in [
        ("--drain", options.drain),
        ("--duration", options.duration.unwrap_or(1.0)),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(Error::Usage(format!(
                "invalid {flag}: must be a positive number of seconds"
            )));
        }
    }
    let txs = match schedule.total() {
        Some(n) => usize::try_from(n)?,
        None => options.txs,
    };
    if txs == 0 {
        return Err(Error::Usage("invalid --txs: must be at least 1".into()));
    }
    let endpoints = Endpoints {
        routers: at.routers.iter().map(|a| format!("http://{a}")).collect(),
        sidecar: None,
        assembler: format!("http://{}", at.assembler),
    };
    let cpu_at_start = crate::cpu::own_seconds();
    let load = Arc::new(Load::template(&format!("{}-", options.tag), txs, options.tx_size));
    on_event(Event::Planned {
        txs,
        tag: options.tag.clone(),
        routers: endpoints.routers.len(),
        confirmed_by: "sink",
    });
    let rate = match schedule {
        Schedule::Fixed { rate } => Some(rate),
        _ => None,
    };
    let pace = Pace {
        schedule,
        max_in_flight: options.max_in_flight,
        duration: options.duration.map(Duration::from_secs_f64),
        drain: Duration::from_secs_f64(options.drain),
        control: None,
        linger: options.linger,
    };
    let sink_cpu = || sink_pid.and_then(|p| crate::cpu::ticks(Some(u64::from(p))));
    let sink_at_load = sink_cpu();
    let cpu_at_load = crate::cpu::own_seconds();
    let started_unix_ms = unix_ms();
    let run = driver::run_load(&endpoints, load, pace, |p| on_event(Event::Progress(p))).await?;
    let cpu_at_end = crate::cpu::own_seconds();
    let sink_used = sink_at_load
        .zip(sink_cpu())
        .map(|(a, b)| b.saturating_sub(a) as f64 / crate::cpu::TICKS_PER_SECOND);
    let facts = Facts {
        target: "sink",
        confirmed_by: "sink",
        tag: options.tag.clone(),
        rate,
        genesis_seconds: 0.0,
        instance: 1,
        instances: 1,
        started_unix_ms,
        control: None,
        cpu: [cpu_at_start, cpu_at_load, cpu_at_end],
        expected_mismatches: None,
        sink_cpu: sink_used,
    };
    let summary = summary(&run, &facts);
    let raw = Raw {
        instance: 1,
        instances: 1,
        started_unix_ms,
        latency_us: run.latency_us.to_sparse(),
        series: run.series,
    };
    Ok(Outcome { summary, raw })
}
