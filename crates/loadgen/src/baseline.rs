//! Comparison measurements for a committer load run (`fabrx loadgen --baseline`):
//!
//! - the signature-verify ceiling: namespace endorsements of the workload verified one
//!   after the other on one thread, and in parallel on every core (rayon); then the same
//!   sample through the batch path the pipeline uses (`Policies::verify_batch`), on one
//!   thread and on every core;
//! - a serial commit: the load txs one at a time, each structurally checked, verified and
//!   committed through the vcservice engine as a batch of one, on one thread — what a
//!   committer without the dependency graph and batching would do.

use crate::committer;
use crate::workload::Workload;
use crate::{Error, Result};
use rayon::prelude::*;
use sidecar::pipeline::PipelineConfig;
use std::sync::Arc;
use std::time::Instant;
use types::check::check_tx;
use types::{META_NAMESPACE, Status, VcTx};
use vcservice::Engine;

/// Verification rates over a sample of the workload's txs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerifyRates {
    /// Txs in the sample.
    pub sample: usize,
    /// Verifications per second on one thread.
    pub one_core_per_s: f64,
    /// Verifications per second on the rayon pool (all cores).
    pub all_cores_per_s: f64,
    /// Batched verifications (`Policies::verify_batch`) per second on one thread.
    pub batch_one_core_per_s: f64,
    /// Batched verifications per second on the rayon pool (all cores).
    pub batch_all_cores_per_s: f64,
    /// Cores available to the process.
    pub cores: usize,
}

/// The outcome of a serial commit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SerialRun {
    /// Txs run.
    pub txs: u64,
    /// Of those, committed.
    pub committed: u64,
    /// Seconds they took.
    pub seconds: f64,
}

/// Measures verification on the first `sample` load txs (one namespace endorsement
/// each). CPU-bound: call it on a blocking thread.
pub fn verify_rates(workload: &Workload, sample: usize) -> Result<VerifyRates> {
    let mut policies = policy::Policies::new();
    policies
        .set(META_NAMESPACE, &workload.meta_policy)
        .and_then(|()| policies.set(&workload.spec.namespace(), &workload.ns_policy))
        .map_err(|e| Error::Keys {
            detail: e.to_string(),
        })?;
    let txs: Vec<_> = workload
        .load
        .iter()
        .flat_map(|b| &b.txs)
        .take(sample.max(1))
        .collect();
    let rate = |n: usize, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let t = Instant::now();
    let ok_one = txs
        .iter()
        .filter(|(id, tx)| policies.verify_tx(id, tx).is_ok())
        .count();
    let one = rate(txs.len(), t.elapsed().as_secs_f64());
    let t = Instant::now();
    let ok_all = txs
        .par_iter()
        .filter(|(id, tx)| policies.verify_tx(id, tx).is_ok())
        .count();
    let all = rate(txs.len(), t.elapsed().as_secs_f64());
    debug_assert_eq!(ok_one, ok_all);
    let batch: Vec<_> = txs.iter().map(|&(id, tx)| (id.clone(), tx.clone())).collect();
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .map_err(|e| Error::Task {
            detail: e.to_string(),
        })?;
    let t = Instant::now();
    let ok_batch_one = one_thread.install(|| valid(&policies.verify_batch(&batch)));
    let batch_one = rate(batch.len(), t.elapsed().as_secs_f64());
    let t = Instant::now();
    let ok_batch_all = valid(&policies.verify_batch(&batch));
    let batch_all = rate(batch.len(), t.elapsed().as_secs_f64());
    debug_assert_eq!((ok_batch_one, ok_batch_all), (ok_one, ok_one));
    Ok(VerifyRates {
        sample: txs.len(),
        one_core_per_s: one,
        all_cores_per_s: all,
        batch_one_core_per_s: batch_one,
        batch_all_cores_per_s: batch_all,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}

/// Valid txs among batch verdicts (`None` = valid).
fn valid(verdicts: &[Option<Status>]) -> usize {
    verdicts.iter().filter(|v| v.is_none()).count()
}

/// Runs the genesis through a pipeline, then the first `max_txs` load txs one at a time:
/// structural check, signature check, commit of a batch of one (on a dedicated thread).
pub async fn serial_commit(engine: Engine, workload: Arc<Workload>, max_txs: usize) -> Result<SerialRun> {
    committer::setup(engine.clone(), &workload, PipelineConfig::default()).await?;
    let handle = tokio::runtime::Handle::current();
    let job = tokio::task::spawn_blocking(move || -> Result<SerialRun> {
        let decoder = wire::ProstDecoder {
            key_ok: |p| policy::parse_policy_key(p).is_some(),
        };
        let mut policies = policy::Policies::new();
        policies
            .set(META_NAMESPACE, &workload.meta_policy)
            .and_then(|()| policies.set(&workload.spec.namespace(), &workload.ns_policy))
            .map_err(|e| Error::Keys {
                detail: e.to_string(),
            })?;
        let (mut txs, mut committed) = (0u64, 0u64);
        let start = Instant::now();
        'blocks: for block in &workload.load {
            for t in block.block_txs()? {
                if txs as usize >= max_txs {
                    break 'blocks;
                }
                let prelim = check_tx(&t.id, &t.tx, &decoder)
                    .and_then(|()| policies.verify_tx(&t.id, &t.tx))
                    .err();
                let vtx = VcTx {
                    prelim,
                    ..VcTx::from(t)
                };
                let out = handle.block_on(engine.process(vec![vtx]))?;
                txs += 1;
                committed += out.iter().filter(|o| o.status == Status::Committed).count() as u64;
            }
        }
        Ok(SerialRun {
            txs,
            committed,
            seconds: start.elapsed().as_secs_f64(),
        })
    });
    job.await.map_err(|e| Error::Task {
        detail: e.to_string(),
    })?
}
