//! The final JSON line of `fabrx loadgen` (docs/loadgen.md).

use serde::{Deserialize, Serialize};

/// The outcome of a load run. The first ten fields are the stable contract; the rest
/// describe the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Load txs ordered (genesis excluded).
    pub txs: u64,
    /// Load txs `COMMITTED`.
    pub committed: u64,
    /// Load txs `ABORTED_MVCC_CONFLICT`.
    pub mvcc_conflict: u64,
    /// Load txs `ABORTED_SIGNATURE_INVALID`.
    pub signature_invalid: u64,
    /// Seconds from the first block handed to the committer to the last block emitted.
    pub seconds: f64,
    /// Final statuses per second (`txs / seconds`).
    pub tps: f64,
    /// Committed txs per second (`committed / seconds`).
    pub goodput_tps: f64,
    /// Median latency of a tx, from its block's pull by the committer to the block's
    /// statuses being emitted, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile of the same latency.
    pub p99_ms: f64,
    /// With `--verify-serial`: txs whose status differs from the serial oracle; `null`
    /// when not verified.
    pub serial_mismatches: Option<u64>,
    /// Load txs with any other status (should be 0 for generated workloads).
    pub other: u64,
    /// With `--verify-serial`: rows of the token namespace that differ from the oracle's
    /// final state (missing, extra or different); `null` when not verified.
    pub state_mismatches: Option<u64>,
    /// Load blocks.
    pub blocks: u64,
    /// Txs per load block.
    pub block_size: u64,
    /// Keys read per tx.
    pub reads: u64,
    /// Keys written per tx.
    pub writes: u64,
    /// Namespace signature scheme.
    pub scheme: String,
    /// Requested double-spend probability.
    pub conflict_rate: f64,
    /// Requested bad-signature probability.
    pub invalid_sig_rate: f64,
    /// Planner seed.
    pub seed: u64,
    /// Run tag (namespace `tok_<tag>`).
    pub tag: String,
    /// `embedded` or `postgres`.
    pub backend: String,
    /// Concurrent verify-and-commit jobs of the pipeline.
    pub workers: u64,
    /// Largest batch handed to the validator-committer.
    pub max_batch: u64,
    /// Back-pressure bound of the dependency graph: unfinished txs above which the
    /// pipeline pulls no further block.
    pub max_pending: u64,
    /// Seconds spent planning and signing (not part of `seconds`).
    pub prebuild_seconds: f64,
    /// Seconds the genesis blocks took through the pipeline (not part of `seconds`).
    pub genesis_seconds: f64,
    /// With `--rates`: throughput, goodput and latency of each rate step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<crate::series::StepRow>>,
    /// With `--baseline`: the comparison measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
}

/// Comparison measurements taken in the same run (`--baseline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Cores available to the process.
    pub cores: u64,
    /// Namespace signatures verified per second on one thread.
    pub verify_per_s_one_core: f64,
    /// `verify_per_s_one_core × cores`: the ceiling if verification scaled perfectly.
    pub verify_ceiling_per_s: f64,
    /// Namespace signatures verified per second on all cores (rayon), measured.
    pub verify_per_s_all_cores: f64,
    /// The same sample through the batch path the pipeline uses
    /// (`Policies::verify_batch`), per second on one thread.
    #[serde(default)]
    pub verify_batch_per_s_one_core: f64,
    /// `verify_batch_per_s_one_core × cores`: the batched ceiling.
    #[serde(default)]
    pub verify_batch_ceiling_per_s: f64,
    /// The batch path per second on all cores (rayon), measured.
    #[serde(default)]
    pub verify_batch_per_s_all_cores: f64,
    /// The pipeline's `tps` over `verify_ceiling_per_s` (the single-verification ceiling).
    #[serde(default)]
    pub tps_over_verify_ceiling: f64,
    /// Txs run one at a time (check, verify, commit through the vcservice engine).
    pub serial_txs: u64,
    /// Of those, committed.
    pub serial_committed: u64,
    /// Seconds they took.
    pub serial_seconds: f64,
    /// `serial_txs / serial_seconds`.
    pub serial_tps: f64,
    /// The pipeline's `tps` over `serial_tps`.
    pub pipeline_speedup: f64,
}
