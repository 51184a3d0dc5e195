//! Drives the pure plan over a backend: status lookup → validation → conditional commit,
//! with retries. A database error is retried with backoff and never turns into a status;
//! a failed commit condition re-plans the chunk from fresh reads, so a resubmitted batch
//! racing with its first submission gets the stored statuses back (FX §3.6).
//!
//! The first attempt at a chunk is optimistic: it reads neither the stored statuses of
//! its ids nor the keys its txs expect absent and insert ([`plan::unchecked_read_set`]),
//! because the commit itself checks both (a status row or an inserted key that exists
//! fails it, and nothing is written). When it fails, the chunk is planned again from
//! every read, as before, so the statuses are the same; only a resubmission or an insert
//! of a key that exists pays for two plans.

use crate::backend::Backend;
use crate::metrics::Metrics;
use crate::model::{CommitResult, TxOutcome, VcTx};
use crate::plan;
use crate::{Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// Retry behaviour of the engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Attempts per chunk before giving up (errors and conflicts both count).
    pub max_attempts: u32,
    /// First backoff after a backend error.
    pub initial_backoff: Duration,
    /// Largest backoff.
    pub max_backoff: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_attempts: 20,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_secs(2),
        }
    }
}

/// Validates and commits batches on one backend. Cheap to clone; share it between workers.
#[derive(Clone)]
pub struct Engine {
    backend: Arc<dyn Backend>,
    config: EngineConfig,
    metrics: Arc<Metrics>,
}

/// A batch after the first pipeline stage.
#[derive(Debug)]
pub enum Prepared {
    /// Validated: commit `set`, then answer `outcomes`.
    Planned {
        /// The txs.
        chunk: Vec<VcTx>,
        /// What to commit.
        set: crate::model::CommitSet,
        /// The outcomes if the commit applies.
        outcomes: Vec<TxOutcome>,
    },
    /// Conflict-free chunks (already prechecked and split), to be processed in order.
    Whole(Vec<Vec<VcTx>>),
}

enum Attempt {
    Done(Vec<TxOutcome>),
    Conflict,
}

impl Engine {
    /// An engine over `backend`.
    pub fn new(backend: Arc<dyn Backend>, config: EngineConfig, metrics: Arc<Metrics>) -> Engine {
        Engine {
            backend,
            config,
            metrics,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Processes a batch and returns the outcome of every tx, in batch order.
    pub async fn process(&self, mut batch: Vec<VcTx>) -> Result<Vec<TxOutcome>> {
        plan::precheck(&mut batch, &wire::ProstDecoder::default());
        let out = self.process_chunks(plan::split_conflict_free(batch)).await?;
        self.count(&out);
        Ok(out)
    }

    /// Processes conflict-free chunks one after the other, in order.
    async fn process_chunks(&self, chunks: Vec<Vec<VcTx>>) -> Result<Vec<TxOutcome>> {
        let mut out = Vec::with_capacity(chunks.iter().map(Vec::len).sum());
        for chunk in chunks {
            out.extend(self.process_chunk(&chunk).await?);
        }
        Ok(out)
    }

    fn count(&self, out: &[TxOutcome]) {
        let m = &self.metrics;
        m.batches.inc();
        for o in out {
            m.txs.with_label_values(&[o.status.name()]).inc();
        }
    }

    /// First pipeline stage: prechecks a batch and, when it is one conflict-free chunk,
    /// reads and validates it. Multi-chunk batches are returned as their chunks, to be
    /// processed in order by [`Engine::finish`].
    pub async fn prepare(&self, mut batch: Vec<VcTx>) -> Prepared {
        plan::precheck(&mut batch, &wire::ProstDecoder::default());
        let mut chunks = plan::split_conflict_free(batch);
        if chunks.len() != 1 {
            return Prepared::Whole(chunks);
        }
        let chunk = chunks.pop().unwrap_or_default();
        match self.plan_unchecked(&chunk).await {
            Ok((set, outcomes)) => Prepared::Planned { chunk, set, outcomes },
            Err(_) => Prepared::Whole(vec![chunk]),
        }
    }

    /// Second pipeline stage: commits a prepared batch; on a failed condition or error it
    /// falls back to the full retry loop.
    pub async fn finish(&self, prepared: Prepared) -> Result<Vec<TxOutcome>> {
        let out = match prepared {
            Prepared::Whole(chunks) => self.process_chunks(chunks).await?,
            Prepared::Planned { chunk, set, outcomes } => {
                let t = Instant::now();
                let committed =
                    set.is_empty() || matches!(self.backend.commit(&set).await, Ok(CommitResult::Applied));
                self.observe("commit", t);
                if committed {
                    outcomes
                } else {
                    self.count_retry("unchecked");
                    self.process_chunk_checked(&chunk).await?
                }
            }
        };
        self.count(&out);
        Ok(out)
    }

    /// The optimistic plan: no stored statuses, no reads of the keys a tx inserts. A chunk
    /// with a tx answered without a stored status (an upstream status that is not stored)
    /// is planned from every read: the commit would not check that tx's id.
    async fn plan_unchecked(&self, chunk: &[VcTx]) -> Result<(crate::model::CommitSet, Vec<TxOutcome>)> {
        let disp = plan::classify(chunk, &crate::model::StatusMap::new());
        if disp.iter().any(|d| matches!(d, plan::Disposition::Answered(_))) {
            return self.plan(chunk).await;
        }
        let reads = plan::unchecked_read_set(chunk, &disp);
        let t = Instant::now();
        let versions = if reads.is_empty() {
            Default::default()
        } else {
            self.backend.versions(&reads).await?
        };
        self.observe("validate", t);
        Ok(plan::decide(chunk, &disp, &versions))
    }

    async fn plan(&self, chunk: &[VcTx]) -> Result<(crate::model::CommitSet, Vec<TxOutcome>)> {
        // An id that is not well formed is never stored (intake answers it 101/102), and
        // PostgreSQL refuses some of them (a NUL byte) outright: do not look them up.
        let ids: Vec<_> = chunk
            .iter()
            .filter(|t| types::txid::is_well_formed(t.id.as_str()))
            .map(|t| t.id.clone())
            .collect();
        let t = Instant::now();
        let stored = self.backend.statuses(&ids).await?;
        self.observe("statuses", t);
        let disp = plan::classify(chunk, &stored);
        let reads = plan::read_set(chunk, &disp);
        let t = Instant::now();
        let versions = if reads.is_empty() {
            Default::default()
        } else {
            self.backend.versions(&reads).await?
        };
        self.observe("validate", t);
        Ok(plan::decide(chunk, &disp, &versions))
    }

    /// One optimistic attempt ([`Engine::plan_unchecked`]), then the checked retry loop.
    async fn process_chunk(&self, chunk: &[VcTx]) -> Result<Vec<TxOutcome>> {
        let (set, outcomes) = match self.plan_unchecked(chunk).await {
            Ok(planned) => planned,
            Err(_) => return self.process_chunk_checked(chunk).await,
        };
        if set.is_empty() {
            return Ok(outcomes);
        }
        let t = Instant::now();
        let result = self.backend.commit(&set).await;
        self.observe("commit", t);
        if matches!(result, Ok(CommitResult::Applied)) {
            return Ok(outcomes);
        }
        self.count_retry("unchecked");
        self.process_chunk_checked(chunk).await
    }

    /// Plans from every read and commits, retrying failed conditions and errors.
    async fn process_chunk_checked(&self, chunk: &[VcTx]) -> Result<Vec<TxOutcome>> {
        let mut backoff = self.config.initial_backoff;
        let mut last = String::new();
        for attempt in 1..=self.config.max_attempts {
            match self.attempt(chunk).await {
                Ok(Attempt::Done(outcomes)) => return Ok(outcomes),
                Ok(Attempt::Conflict) => {
                    debug!(attempt, "commit condition failed; re-planning chunk");
                    self.count_retry("conflict");
                    last = "commit condition failed".into();
                }
                Err(e) => {
                    warn!(attempt, error = %e, "backend error; retrying");
                    self.count_retry("error");
                    last = e.to_string();
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.config.max_backoff);
                }
            }
        }
        Err(Error::GaveUp {
            attempts: self.config.max_attempts,
            last,
        })
    }

    async fn attempt(&self, chunk: &[VcTx]) -> Result<Attempt> {
        let (set, outcomes) = self.plan(chunk).await?;
        if set.is_empty() {
            return Ok(Attempt::Done(outcomes));
        }
        let t = Instant::now();
        let result = self.backend.commit(&set).await?;
        self.observe("commit", t);
        Ok(match result {
            CommitResult::Applied => Attempt::Done(outcomes),
            CommitResult::Conflict => Attempt::Conflict,
        })
    }

    fn observe(&self, stage: &str, since: Instant) {
        let m = &self.metrics;
        m.stage_seconds
            .with_label_values(&[stage])
            .observe(since.elapsed().as_secs_f64());
        m.backend_calls.with_label_values(&[stage]).inc();
    }

    fn count_retry(&self, reason: &str) {
        self.metrics.retries.with_label_values(&[reason]).inc();
    }
}
