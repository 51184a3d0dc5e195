//! `fabrx bench vc`: committed tx/s of the validator-committer for each backend, at
//! 1 read + 2 writes per tx and several batch sizes, and set-based SQL against
//! one-statement-per-key on PostgreSQL. Prints a Markdown table (docs/benchmarks.md).

use clap::{Args, Subcommand};
use std::sync::Arc;
use std::time::Instant;
use types::VcTx;
use types::{Endorsement, Height, Read, ReadWrite, Tx, TxId, TxNamespace, Write};
use vcservice::{Backend, Durability, EmbeddedBackend, Engine, EngineConfig, PgBackend, PgOptions, SqlMode};

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// The validator-committer alone.
    Vc(VcBenchArgs),
    /// The ordering service alone, for each network shape in rate steps: start,
    /// warm up, load, collect, tear down (docs/benchmarks.md "Suites").
    Ordering(crate::bench_suite::SuiteArgs),
    /// The committer: bad signatures, double spends, tx size, inputs and outputs.
    Committer(crate::bench_suite::SuiteArgs),
    /// The whole network in rate steps.
    E2e(crate::bench_suite::SuiteArgs),
}

/// Arguments of `fabrx bench vc`.
#[derive(Debug, Args)]
pub struct VcBenchArgs {
    /// PostgreSQL URL to measure too (the embedded store is always measured).
    #[arg(long)]
    pg: Option<String>,
    /// Transactions per configuration.
    #[arg(long, default_value_t = 20_000)]
    txs: usize,
    /// Batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "100,500,2000")]
    batch_sizes: Vec<usize>,
    /// Concurrent batches in flight (commit workers).
    #[arg(long, default_value = "4", value_parser = crate::server_args::positive_usize)]
    workers: std::num::NonZeroUsize,
}

/// Runs a benchmark.
pub async fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Vc(args) => run_vc(args).await,
        Bench::Ordering(a) => suite(devnet::bench::Suite::Ordering, &a).await,
        Bench::Committer(a) => suite(devnet::bench::Suite::Committer, &a).await,
        Bench::E2e(a) => suite(devnet::bench::Suite::E2e, &a).await,
    }
}

async fn suite(which: devnet::bench::Suite, args: &crate::bench_suite::SuiteArgs) -> anyhow::Result<()> {
    let options = args.options();
    let summary = tokio::task::spawn_blocking(move || devnet::bench::run(which, &options)).await??;
    println!("{}", summary.display());
    Ok(())
}

fn sig() -> Vec<Endorsement> {
    vec![Endorsement {
        signature: vec![1; 64],
        ..Default::default()
    }]
}

/// Conflict-free batches: each tx reads one pre-populated key and writes two new keys.
fn workload(ns: &str, txs: usize, batch: usize, population: usize) -> Vec<Vec<VcTx>> {
    (0..txs)
        .map(|i| {
            let n = TxNamespace {
                ns_id: ns.into(),
                ns_version: 0,
                reads_only: vec![Read {
                    key: format!("pop{}", i % population).into_bytes(),
                    version: Some(0),
                }],
                read_writes: vec![ReadWrite {
                    key: format!("a{i}").into_bytes(),
                    version: None,
                    value: vec![7; 32],
                }],
                blind_writes: vec![Write {
                    key: format!("b{i}").into_bytes(),
                    value: vec![9; 32],
                }],
            };
            VcTx {
                id: TxId(format!("{ns}-{i}")),
                height: Height::new(1 + (i / batch) as u64, (i % batch) as u32),
                tx: Arc::new(Tx {
                    namespaces: vec![n],
                    endorsements: vec![sig()],
                    metadata: vec![],
                }),
                prelim: None,
            }
        })
        .collect::<Vec<_>>()
        .chunks(batch)
        .map(|c| c.to_vec())
        .collect()
}

/// Creates the namespace and its pre-populated keys.
async fn prepare(engine: &Engine, ns: &str, population: usize) -> anyhow::Result<()> {
    let policy = wire::encode_policy(&types::NamespacePolicy {
        scheme: types::PolicyScheme::Ed25519,
        public_key: vec![1; 32],
    });
    let meta = TxNamespace {
        ns_id: "_meta".into(),
        read_writes: vec![ReadWrite {
            key: ns.as_bytes().to_vec(),
            version: None,
            value: policy,
        }],
        ..Default::default()
    };
    let create = VcTx {
        id: TxId(format!("create-{ns}")),
        height: Height::new(0, 0),
        tx: Arc::new(Tx {
            namespaces: vec![meta],
            endorsements: vec![sig()],
            metadata: vec![],
        }),
        prelim: None,
    };
    engine.process(vec![create]).await?;
    let pop = TxNamespace {
        ns_id: ns.into(),
        blind_writes: (0..population)
            .map(|i| Write {
                key: format!("pop{i}").into_bytes(),
                value: vec![1],
            })
            .collect(),
        ..Default::default()
    };
    let seed = VcTx {
        id: TxId(format!("populate-{ns}")),
        height: Height::new(0, 1),
        tx: Arc::new(Tx {
            namespaces: vec![pop],
            endorsements: vec![sig()],
            metadata: vec![],
        }),
        prelim: None,
    };
    engine.process(vec![seed]).await?;
    Ok(())
}

/// Commits all batches with `workers` in flight; returns (committed, seconds).
async fn drive(
    engine: &Engine,
    batches: Vec<Vec<VcTx>>,
    workers: std::num::NonZeroUsize,
) -> anyhow::Result<(usize, f64)> {
    let start = Instant::now();
    let queue = Arc::new(tokio::sync::Mutex::new(batches.into_iter()));
    let mut tasks = Vec::new();
    for _ in 0..workers.get() {
        let (engine, queue) = (engine.clone(), queue.clone());
        tasks.push(tokio::spawn(async move {
            let mut committed = 0usize;
            loop {
                let next = queue.lock().await.next();
                let Some(batch) = next else { break };
                let out = engine.process(batch).await?;
                committed += out
                    .iter()
                    .filter(|o| o.status == types::Status::Committed)
                    .count();
            }
            anyhow::Ok(committed)
        }));
    }
    let mut committed = 0;
    for t in tasks {
        committed += t.await??;
    }
    Ok((committed, start.elapsed().as_secs_f64()))
}

async fn run_vc(args: VcBenchArgs) -> anyhow::Result<()> {
    let population = 1000;
    let dir = tempfile::tempdir()?;
    let mut configs: Vec<(String, Arc<dyn Backend>, usize)> = Vec::new();
    let embedded: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::SyncEachCommit)?);
    for &b in &args.batch_sizes {
        configs.push(("embedded (RocksDB, synced)".into(), embedded.clone(), b));
    }
    if let Some(url) = &args.pg {
        for mode in [SqlMode::SetBased, SqlMode::PerKey] {
            let mut opts = PgOptions::new(url.clone());
            opts.mode = mode;
            opts.pool_size = u32::try_from(args.workers.get())
                .ok()
                .and_then(std::num::NonZeroU32::new)
                .unwrap_or(std::num::NonZeroU32::MIN)
                .max(std::num::NonZeroU32::MIN.saturating_add(1));
            let pg: Arc<dyn Backend> = Arc::new(PgBackend::connect(&opts)?);
            pg.init_schema().await?;
            for &b in &args.batch_sizes {
                configs.push((format!("postgres {mode:?}"), pg.clone(), b));
            }
        }
    }
    println!("| backend | batch size | txs | committed | seconds | committed tx/s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (i, (name, backend, batch)) in configs.into_iter().enumerate() {
        let engine = Engine::new(
            backend,
            EngineConfig::default(),
            vcservice::metrics::Metrics::unexported()?,
        );
        let ns = format!("bench{i}_{}", std::process::id());
        prepare(&engine, &ns, population).await?;
        let batches = workload(&ns, args.txs, batch, population);
        let (committed, secs) = drive(&engine, batches, args.workers).await?;
        println!(
            "| {name} | {batch} | {} | {committed} | {secs:.2} | {:.0} |",
            args.txs,
            committed as f64 / secs
        );
    }
    Ok(())
}
