//! `fabrx bench vc` (docs/benchmarks.md "vcservice"): committed tx/s of the
//! validator-committer alone, for each backend (the embedded store, and PostgreSQL with
//! set-based SQL and with one statement per key) at several batch sizes; each tx reads
//! one pre-populated key and writes two new keys, and every tx commits. The caller
//! prints the Markdown table: [`HEADER`], then each [`Row::markdown`].

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Instant;
use types::{Endorsement, Height, Read, ReadWrite, Tx, TxId, TxNamespace, VcTx, Write};
use vcservice::{Backend, Durability, EmbeddedBackend, Engine, EngineConfig, PgBackend, PgOptions, SqlMode};

/// Pre-populated keys of each configuration's namespace, the txs' reads.
const POPULATION: usize = 1000;

/// The table's header: its column names and the alignment line.
pub const HEADER: &str =
    "| backend | batch size | txs | committed | seconds | committed tx/s |\n|---|---:|---:|---:|---:|---:|";

/// What to measure (`fabrx bench vc` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// PostgreSQL URL to measure too (the embedded store is always measured).
    pub pg: Option<String>,
    /// Txs per configuration.
    pub txs: usize,
    /// Batch sizes, one configuration per backend each.
    pub batch_sizes: Vec<usize>,
    /// Batches in flight (commit workers).
    pub workers: NonZeroUsize,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A temporary directory for the embedded store could not be made.
    #[error("creating a temporary directory for the embedded store")]
    TempDir(#[source] std::io::Error),
    /// A backend could not be opened, or the validator-committer failed.
    #[error(transparent)]
    Vcservice(#[from] vcservice::Error),
    /// The validator-committer's metrics could not be made.
    #[error(transparent)]
    Metrics(#[from] telemetry::Error),
    /// A commit worker did not finish.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// Result alias of the module.
pub type Result<T> = std::result::Result<T, Error>;

/// What the run tells its caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Every backend is open; the measurements come next.
    Ready {
        /// Configurations to measure.
        configurations: usize,
    },
    /// One configuration is measured.
    Measured(Row),
}

/// One configuration's measurement: a line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The backend (`embedded (RocksDB, synced)`, `postgres SetBased`, `postgres PerKey`).
    pub backend: String,
    /// Txs per batch.
    pub batch: usize,
    /// Txs sent.
    pub txs: usize,
    /// Of those, committed.
    pub committed: usize,
    /// Seconds the commits took.
    pub seconds: f64,
}

impl Row {
    /// Committed txs per second.
    pub fn tps(&self) -> f64 {
        self.committed as f64 / self.seconds
    }

    /// The row's line of the Markdown table.
    pub fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {:.2} | {:.0} |",
            self.backend,
            self.batch,
            self.txs,
            self.committed,
            self.seconds,
            self.tps()
        )
    }
}

/// Measures the embedded store (and PostgreSQL with `options.pg`) at each batch size.
pub async fn run(options: &Options, mut on_event: impl FnMut(Event)) -> Result<Vec<Row>> {
    let dir = tempfile::tempdir().map_err(Error::TempDir)?;
    let mut configs: Vec<(String, Arc<dyn Backend>, usize)> = Vec::new();
    let embedded: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::SyncEachCommit)?);
    for &b in &options.batch_sizes {
        configs.push(("embedded (RocksDB, synced)".into(), embedded.clone(), b));
    }
    if let Some(url) = &options.pg {
        for mode in [SqlMode::SetBased, SqlMode::PerKey] {
            let mut opts = PgOptions::new(url.clone());
            opts.mode = mode;
            opts.pool_size = u32::try_from(options.workers.get())
                .ok()
                .and_then(NonZeroU32::new)
                .unwrap_or(NonZeroU32::MIN)
                .max(NonZeroU32::MIN.saturating_add(1));
            let pg: Arc<dyn Backend> = Arc::new(PgBackend::connect(&opts)?);
            pg.init_schema().await?;
            for &b in &options.batch_sizes {
                configs.push((format!("postgres {mode:?}"), pg.clone(), b));
            }
        }
    }
    on_event(Event::Ready {
        configurations: configs.len(),
    });
    let mut rows = Vec::with_capacity(configs.len());
    for (i, (backend_name, backend, batch)) in configs.into_iter().enumerate() {
        let engine = Engine::new(
            backend,
            EngineConfig::default(),
            vcservice::metrics::Metrics::unexported()?,
        );
        let ns = format!("bench{i}_{}", std::process::id());
        prepare(&engine, &ns, POPULATION).await?;
        let batches = workload(&ns, options.txs, batch, POPULATION);
        let (committed, seconds) = drive(&engine, batches, options.workers).await?;
        let row = Row {
            backend: backend_name,
            batch,
            txs: options.txs,
            committed,
            seconds,
        };
        on_event(Event::Measured(row.clone()));
        rows.push(row);
    }
    Ok(rows)
}

/// A placeholder endorsement (the validator-committer does not verify signatures).
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
async fn prepare(engine: &Engine, ns: &str, population: usize) -> Result<()> {
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
async fn drive(engine: &Engine, batches: Vec<Vec<VcTx>>, workers: NonZeroUsize) -> Result<(usize, f64)> {
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
            Ok::<_, vcservice::Error>(committed)
        }));
    }
    let mut committed = 0;
    for t in tasks {
        committed += t.await??;
    }
    Ok((committed, start.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_is_conflict_free_batches_of_one_read_and_two_writes() {
        let batches = workload("ns", 5, 2, 3);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![2, 2, 1]);
        let txs: Vec<&VcTx> = batches.iter().flatten().collect();
        let heights: Vec<(u64, u32)> = txs.iter().map(|t| (t.height.block, t.height.index)).collect();
        assert_eq!(heights, vec![(1, 0), (1, 1), (2, 0), (2, 1), (3, 0)]);
        let last = &txs[4];
        assert_eq!(last.id, TxId("ns-4".into()));
        let n = &last.tx.namespaces[0];
        assert_eq!(n.reads_only[0].key, b"pop1");
        assert_eq!(n.read_writes[0].key, b"a4");
        assert_eq!(n.blind_writes[0].key, b"b4");
    }

    #[test]
    fn a_row_is_a_line_of_the_table() {
        let row = Row {
            backend: "postgres SetBased".into(),
            batch: 500,
            txs: 20_000,
            committed: 20_000,
            seconds: 4.0,
        };
        assert_eq!(
            row.markdown(),
            "| postgres SetBased | 500 | 20000 | 20000 | 4.00 | 5000 |"
        );
        let columns = |l: &str| l.matches('|').count();
        for line in HEADER.lines() {
            assert_eq!(columns(line), columns(&row.markdown()), "{line}");
        }
    }
}
