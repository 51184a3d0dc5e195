//! `fabrx loadgen --target mock-orderer` (docs/loadgen.md "A mock orderer"): the
//! committer of a network started by `fabrx up --no-orderer`, measured behind a mock
//! orderer, around `loadgen::mock_orderer`. The workload's blocks are signed with a
//! quorum of the network's consenter keys (read from the network directory), served on
//! party P's assembler endpoint to the committing party's sidecar, and their statuses
//! summed up.

use super::{Error, Result, meta_key, network_config, per_second, round_ms};
use loadgen::Workload;
use loadgen::WorkloadSpec;
use loadgen::mock_orderer::{self, MockRun};
use loadgen::series::Series;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How to run the mock orderer.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The network directory (of `fabrx up --no-orderer`).
    pub network: PathBuf,
    /// The committing party whose assembler endpoint is served.
    pub party: u32,
    /// How long to wait for a status before giving up.
    pub drain: Duration,
    /// Compare every status with the serial oracle.
    pub verify_serial: bool,
}

/// What the run tells its caller before it serves.
#[derive(Debug, Clone)]
pub enum Event {
    /// The blocks are signed; serving starts.
    Serving {
        /// Blocks to serve, the genesis included.
        blocks: usize,
        /// Load txs among them.
        load_txs: usize,
        /// Seconds planning and signing took.
        signing_seconds: f64,
        /// Where the blocks are served.
        listen: SocketAddr,
        /// The sidecar the statuses come from (`http://…`).
        sidecar: String,
    },
}

/// The summary line of a mock-orderer run (docs/loadgen.md "A mock orderer").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// `mock-orderer`.
    pub target: String,
    /// Load txs served.
    pub txs: u64,
    /// Load blocks served.
    pub blocks: u64,
    /// Load txs `COMMITTED`.
    pub committed: u64,
    /// Every other status, with its count.
    pub aborted: BTreeMap<String, u64>,
    /// Load txs without a status when the run ended.
    pub never_confirmed: u64,
    /// Txs with a status per second of `seconds`.
    pub tps: f64,
    /// Committed txs per second of `seconds`.
    pub goodput_tps: f64,
    /// `goodput_tps` under the name the contract gives it.
    pub goodput: f64,
    /// Median latency from a block's first serve to a tx's status, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile of the same.
    pub p99_ms: Option<f64>,
    /// First load block served to the last status.
    pub seconds: f64,
    /// With `verify_serial`: load txs whose status differs from the serial oracle's.
    pub serial_mismatches: Option<u64>,
    /// The run's tag.
    pub tag: String,
}

impl Summary {
    /// The JSON line printed on stdout and written as `summary.json`.
    pub fn line(&self) -> Result<String> {
        super::line(self)
    }
}

/// A finished run: its summary and per-second rows.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The summary.
    pub summary: Summary,
    /// The per-second rows of the load blocks, for the report.
    pub series: Series,
}

/// Plans and signs the workload as ordered blocks, serves them to the sidecar and
/// collects the statuses; with `verify_serial`, compares them with the serial oracle.
pub async fn run(spec: WorkloadSpec, options: &Options, mut on_event: impl FnMut(Event)) -> Result<Outcome> {
    let dir = &options.network;
    let party = options.party;
    // The client identity for both sides: the sidecar authorizes its callers, and checks
    // only that a server's certificate is one the network's CA signed.
    let config = network_config(dir)?;
    let listen = config
        .party(party)?
        .assembler
        .as_ref()
        .ok_or_else(|| Error::Usage(format!("party {party} has no assembler endpoint to serve on")))?
        .listen_addr();
    let sidecar = format!("http://{}", config.committer_party(party)?.sidecar);
    let consenters = consenter_quorum(&config, dir)?;
    let meta = meta_key(dir)?;
    let began = Instant::now();
    let chain = config.cluster_keys().chain_id();
    let (workload, blocks) = tokio::task::spawn_blocking(move || -> Result<_> {
        let w = loadgen::workload::plan(&spec)?.sign_with_meta(meta)?;
        let all: Vec<types::Block> = w.genesis.iter().chain(&w.load).cloned().collect();
        let blocks = mock_orderer::ordered_blocks(&all, &consenters, &chain);
        Ok((w, blocks))
    })
    .await??;
    let ids: Vec<Vec<String>> = workload
        .genesis
        .iter()
        .chain(&workload.load)
        .map(|b| b.txs.iter().map(|(id, _)| id.0.clone()).collect())
        .collect();
    on_event(Event::Serving {
        blocks: blocks.len(),
        load_txs: workload.load_txs(),
        signing_seconds: began.elapsed().as_secs_f64(),
        listen,
        sidecar: sidecar.clone(),
    });
    let g = workload.genesis.len();
    let run = mock_orderer::serve(listen, blocks, &ids, g, &sidecar, options.drain).await?;
    let mismatches = if options.verify_serial {
        let w = workload.clone();
        let oracle = tokio::task::spawn_blocking(move || loadgen::committer::oracle(&w)).await??;
        Some(mismatch_count(&run.statuses[g..], &oracle.statuses))
    } else {
        None
    };
    Ok(Outcome {
        summary: summary(&workload, &run, g, mismatches),
        series: run.series,
    })
}

/// A quorum of the network's consenter keys (replicas 0..q), with their replica
/// numbers: what the sidecar requires of an ordered block.
fn consenter_quorum(
    config: &netconfig::NetworkConfig,
    dir: &std::path::Path,
) -> Result<Vec<(u32, crypto::SigningKey)>> {
    let n = config.n();
    let q = usize::try_from(2 * ((n.saturating_sub(1)) / 3) + 1).unwrap_or(usize::MAX);
    let mut consenters = Vec::with_capacity(q);
    for p in config.parties().iter().take(q) {
        let node = netconfig::Node::Consenter(p.id);
        let path = netconfig::key_file_path(dir, node)
            .ok_or_else(|| Error::Usage("a consenter has a key file".into()))?;
        consenters.push((p.id - 1, config.read_node_key(node, &path)?));
    }
    Ok(consenters)
}

/// Load txs whose status differs from the oracle's (a missing status counts).
fn mismatch_count(got: &[Vec<Option<String>>], want: &[Vec<types::Status>]) -> u64 {
    let mut n = 0u64;
    for (g, w) in got.iter().zip(want) {
        for (a, b) in g.iter().zip(w) {
            if a.as_deref() != Some(b.name()) {
                n += 1;
            }
        }
    }
    n
}

/// The summary of `run`, whose blocks from `g` on are the load's.
fn summary(workload: &Workload, run: &MockRun, g: usize, mismatches: Option<u64>) -> Summary {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut missing = 0u64;
    for s in run.statuses[g..].iter().flatten() {
        match s {
            Some(s) => *counts.entry(s.clone()).or_default() += 1,
            None => missing += 1,
        }
    }
    let txs = workload.load_txs() as u64;
    let committed = counts.get("COMMITTED").copied().unwrap_or(0);
    let ms = |q: f64| {
        run.latency_us
            .quantile(q)
            .map(|us| (us as f64 / 100.0).round() / 10.0)
    };
    counts.remove("COMMITTED");
    Summary {
        target: "mock-orderer".into(),
        txs,
        blocks: workload.load.len() as u64,
        committed,
        aborted: counts,
        never_confirmed: missing,
        tps: per_second(txs - missing, run.seconds),
        goodput_tps: per_second(committed, run.seconds),
        goodput: per_second(committed, run.seconds),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        seconds: round_ms(run.seconds),
        serial_mismatches: mismatches,
        tag: workload.spec.tag.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_different_status_is_a_mismatch() {
        use types::Status;
        let got = vec![
            vec![Some("COMMITTED".to_string()), None],
            vec![Some("ABORTED_MVCC_CONFLICT".to_string())],
        ];
        let want = vec![
            vec![Status::Committed, Status::Committed],
            vec![Status::Committed],
        ];
        assert_eq!(mismatch_count(&got, &want), 2);
    }
}
