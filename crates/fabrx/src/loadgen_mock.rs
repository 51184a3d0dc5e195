//! `fabrx loadgen --target mock-orderer` (docs/loadgen.md "A mock orderer"): the shell
//! around `loadgen::mock_orderer`. It signs the workload's blocks with a quorum of the
//! network's consenter keys (read from the network directory), serves them on party
//! P's assembler endpoint to the committing party's sidecar (started by
//! `fabrx up --no-orderer`), and prints a summary line.

use anyhow::Context;
use loadgen::mock_orderer;
use loadgen::{Workload, WorkloadSpec};
use std::path::Path;
use std::time::{Duration, Instant};

/// How to run the mock orderer.
pub struct MockArgs<'a> {
    /// The network directory.
    pub dir: &'a Path,
    /// The committing party whose assembler endpoint is served.
    pub party: u32,
    /// How long to wait for a status before giving up.
    pub drain: Duration,
    /// Compare every status with the serial oracle.
    pub verify_serial: bool,
    /// `--report DIR`.
    pub report: Option<&'a Path>,
}

/// Runs the mock orderer and prints the summary.
pub async fn run(spec: WorkloadSpec, args: MockArgs<'_>) -> anyhow::Result<()> {
    let MockArgs {
        dir,
        party,
        drain,
        verify_serial,
        report,
    } = args;
    let config_path = netconfig::config_path(dir);
    let config = netconfig::NetworkConfig::load(&config_path)
        .with_context(|| format!("loading the network config {}", config_path.display()))?;
    // The client identity for both sides: the sidecar authorizes its callers, and checks
    // only that a server's certificate is one the network's CA signed.
    config.install_client_tls(dir)?;
    let listen = config
        .party(party)?
        .assembler
        .as_ref()
        .with_context(|| format!("party {party} has no assembler endpoint to serve on"))?
        .listen_addr();
    let sidecar = format!("http://{}", config.committer_party(party)?.sidecar);
    // A quorum of consenter keys (replicas 0..q): what the sidecar requires.
    let n = config.n();
    let q = usize::try_from(2 * ((n.saturating_sub(1)) / 3) + 1).unwrap_or(usize::MAX);
    let mut consenters = Vec::with_capacity(q);
    for p in config.parties().iter().take(q) {
        let node = netconfig::Node::Consenter(p.id);
        let path = netconfig::key_file_path(dir, node).context("a consenter has a key file")?;
        consenters.push((p.id - 1, config.read_node_key(node, &path)?));
    }
    let meta_path = netconfig::meta_key_path(dir);
    let meta = crypto::read_key_file(&meta_path)
        .with_context(|| format!("reading the network's administrator key {}", meta_path.display()))?;
    let began = Instant::now();
    let chain = config.cluster_keys().chain_id();
    let (workload, blocks) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
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
    eprintln!(
        "mock orderer: {} blocks ({} load txs) signed in {:.1} s; serving on {listen} to the sidecar at {sidecar}",
        blocks.len(),
        workload.load_txs(),
        began.elapsed().as_secs_f64()
    );
    let g = workload.genesis.len();
    let run = mock_orderer::serve(listen, blocks, &ids, g, &sidecar, drain).await?;
    let mismatches = if verify_serial {
        let w = workload.clone();
        let oracle = tokio::task::spawn_blocking(move || loadgen::committer::oracle(&w)).await??;
        Some(mismatch_count(&run.statuses[g..], &oracle.statuses))
    } else {
        None
    };
    let line = summary(&workload, &run, g, mismatches).to_string();
    if let Some(dir) = report {
        let title = format!(
            "fabrx loadgen --target mock-orderer · {} txs · run {}",
            workload.load_txs(),
            workload.spec.tag
        );
        crate::report_files::write_report(dir, &run.series, &line, &title)?;
    }
    println!("{line}");
    Ok(())
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

fn summary(
    workload: &Workload,
    run: &mock_orderer::MockRun,
    g: usize,
    mismatches: Option<u64>,
) -> serde_json::Value {
    let mut counts: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut missing = 0u64;
    for s in run.statuses[g..].iter().flatten() {
        match s {
            Some(s) => *counts.entry(s.clone()).or_default() += 1,
            None => missing += 1,
        }
    }
    let txs = workload.load_txs() as u64;
    let committed = counts.get("COMMITTED").copied().unwrap_or(0);
    let per_second = |n: u64| {
        if run.seconds > 0.0 {
            (n as f64 / run.seconds * 10.0).round() / 10.0
        } else {
            0.0
        }
    };
    let ms = |q: f64| {
        run.latency_us
            .quantile(q)
            .map(|us| (us as f64 / 100.0).round() / 10.0)
    };
    let aborted: serde_json::Map<String, serde_json::Value> = counts
        .iter()
        .filter(|(s, _)| *s != "COMMITTED")
        .map(|(s, n)| (s.clone(), serde_json::json!(n)))
        .collect();
    serde_json::json!({
        "target": "mock-orderer",
        "txs": txs,
        "blocks": workload.load.len(),
        "committed": committed,
        "aborted": aborted,
        "never_confirmed": missing,
        "tps": per_second(txs - missing),
        "goodput_tps": per_second(committed),
        // The name docs/contracts.md gives; `goodput_tps` as the committer target spells it.
        "goodput": per_second(committed),
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "seconds": (run.seconds * 1000.0).round() / 1000.0,
        "serial_mismatches": mismatches,
        "tag": workload.spec.tag,
    })
}
