//! The committer pipeline in one process (FX §3): intake → dependency graph →
//! signature verification → validator-committer, with statuses aggregated per block and
//! emitted strictly in block order (a tx may finish after txs of later blocks).
//!
//! One orchestrating task owns the graph, the intake and the aggregator; verification and
//! commit run in up to `workers` concurrent jobs (verification on blocking threads). The
//! graph's capacity bounds how many blocks are admitted ahead, so a slow vcservice slows
//! block intake instead of growing memory. Policy updates from committed `_meta` txs are
//! applied before any tx released after them is verified; the graph guarantees that txs
//! on a namespace are released only after an earlier `_meta` tx on it finished.

use crate::core::{CommitterCore, Finished, Input, Job, Output};
use crate::metrics::Metrics;
use crate::stages::{CommitStage, VerifyBatch, VerifyStage};
use crate::{Error, Result};
use std::sync::Arc;
use tokio::task::JoinSet;
use types::{Block, META_NAMESPACE, NamespacePolicy};

pub use crate::core::{BlockResult, PipelineConfig};

type JobResult = Result<Vec<Finished>>;

/// What a [`BlockSource`] has now.
#[derive(Debug)]
pub enum Next {
    /// The next block.
    Block(Block),
    /// None yet; [`BlockSource::next`] waits for it.
    Later,
    /// The source is done.
    Done,
}

/// Where the pipeline takes its blocks from, in order.
pub trait BlockSource {
    /// The next block if one is at hand now.
    fn try_next(&mut self) -> Next;
    /// Resolves once [`BlockSource::try_next`] would not answer [`Next::Later`].
    /// Cancel-safe: abandoning the wait loses nothing.
    fn ready(&mut self) -> impl std::future::Future<Output = ()> + Send;
}

/// Blocks all at hand (a block file, a workload).
struct IterSource<I>(I);

impl<I: Iterator<Item = Block>> BlockSource for IterSource<I> {
    fn try_next(&mut self) -> Next {
        self.0.next().map_or(Next::Done, Next::Block)
    }

    fn ready(&mut self) -> impl std::future::Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// Blocks as they arrive on a bounded channel (an orderer source feeds it); done once
/// every sender is gone.
pub struct ChannelSource {
    rx: tokio::sync::mpsc::Receiver<Block>,
    /// A block received by `ready`, not yet taken.
    next: Option<Block>,
    closed: bool,
}

impl ChannelSource {
    /// Blocks from `rx`.
    pub fn new(rx: tokio::sync::mpsc::Receiver<Block>) -> ChannelSource {
        ChannelSource {
            rx,
            next: None,
            closed: false,
        }
    }
}

impl BlockSource for ChannelSource {
    fn try_next(&mut self) -> Next {
        if let Some(b) = self.next.take() {
            return Next::Block(b);
        }
        if self.closed {
            return Next::Done;
        }
        match self.rx.try_recv() {
            Ok(b) => Next::Block(b),
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => Next::Later,
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => Next::Done,
        }
    }

    async fn ready(&mut self) {
        if self.next.is_none() && !self.closed {
            // `recv` is cancel-safe, and its block is stored in the same poll.
            match self.rx.recv().await {
                Some(b) => self.next = Some(b),
                None => self.closed = true,
            }
        }
    }
}

/// What the pipeline waited for.
enum Event {
    Source,
    Job(Option<std::result::Result<JobResult, tokio::task::JoinError>>),
}

/// The committer pipeline: the shell around [`CommitterCore`]. It owns the stages and the
/// job tasks and carries out the core's outputs in order.
pub struct Pipeline {
    verify: Arc<dyn VerifyStage>,
    commit: Arc<dyn CommitStage>,
    core: CommitterCore,
    jobs: JoinSet<JobResult>,
    metrics: Metrics,
    /// When each block in the pipeline was admitted, oldest first (blocks finish in
    /// order); at most [`ADMITTED_KEPT`].
    admitted_at: std::collections::VecDeque<(u64, std::time::Instant)>,
}

/// Admission instants kept for the block latency histogram (more blocks than the graph
/// ever holds at once).
const ADMITTED_KEPT: usize = 65_536;

/// Decodes a stored `_meta` value.
fn decode_policy(v: &[u8]) -> Option<NamespacePolicy> {
    use types::check::PayloadDecoder;
    wire::ProstDecoder::default().decode_policy(v)
}

impl Pipeline {
    /// A pipeline over any verification and commit stages (in-process or remote pools).
    /// Sets the meta policy and every committed namespace policy on the verifier first.
    /// It records into `metrics`.
    pub async fn with_stages(
        verify: Arc<dyn VerifyStage>,
        commit: Arc<dyn CommitStage>,
        meta_policy: &NamespacePolicy,
        config: PipelineConfig,
        metrics: Metrics,
    ) -> Result<Pipeline> {
        verify.set_policy(META_NAMESPACE, meta_policy).await?;
        for (ns, value) in commit.policies().await? {
            if let Some(p) = decode_policy(&value) {
                // A stored policy passed the structural checks; one that no longer
                // parses leaves its namespace without a policy (its txs abort).
                if let Err(e) = verify.set_policy(&ns, &p).await {
                    tracing::warn!(%ns, error = %e, "stored policy unusable");
                }
            }
        }
        Ok(Pipeline {
            verify,
            commit,
            core: CommitterCore::new(config),
            jobs: JoinSet::new(),
            metrics,
            admitted_at: std::collections::VecDeque::new(),
        })
    }

    /// Runs `blocks` (consecutive numbers from the configured first block) to completion,
    /// calling `emit` once per block, in block order, when all its txs are final. The
    /// last fully committed block is recorded in the state before each block is emitted.
    /// An error from `emit` (e.g. the block store could not append) stops the pipeline
    /// at once and is returned: nothing after that block is emitted.
    pub async fn run<I, F>(&mut self, blocks: I, emit: F) -> Result<()>
    where
        I: IntoIterator<Item = Block>,
        F: FnMut(BlockResult) -> Result<()>,
    {
        self.run_source(IterSource(blocks.into_iter()), emit).await
    }

    /// [`Pipeline::run`] over a source whose blocks may arrive later (an orderer's
    /// Deliver stream): a block is taken from the source only when the graph has room
    /// for it, so a slow committer holds the source back instead of growing memory.
    pub async fn run_source<S, F>(&mut self, mut source: S, mut emit: F) -> Result<()>
    where
        S: BlockSource,
        F: FnMut(BlockResult) -> Result<()>,
    {
        let mut done = false;
        loop {
            // Admit up to `parallel_blocks` blocks at a time while the graph has room
            // (counting the txs chosen but not yet merged against its limits). A block is
            // taken from the source only when it is admitted (sources may time-stamp it).
            let mut chosen = Vec::new();
            let mut unmerged = 0usize;
            while !done && self.core.has_room(chosen.len(), unmerged) {
                match source.try_next() {
                    Next::Block(b) => {
                        unmerged = unmerged.saturating_add(b.txs.len());
                        if self.admitted_at.len() >= ADMITTED_KEPT {
                            self.admitted_at.pop_front();
                        }
                        self.admitted_at
                            .push_back((b.header.number, std::time::Instant::now()));
                        chosen.push(b);
                    }
                    Next::Later => break,
                    Next::Done => done = true,
                }
            }
            let outputs = self.core.handle(Input::Blocks(chosen))?;
            self.carry_out(outputs, &mut emit).await?;
            self.observe();
            if done && self.core.is_idle() {
                break;
            }
            let can_take = !done && self.core.has_room(0, 0);
            let event = if self.jobs.is_empty() {
                if !can_take {
                    return Err(Error::Stage {
                        stage: "pipeline",
                        detail: "blocks are pending but no job is running".into(),
                    });
                }
                source.ready().await;
                Event::Source
            } else {
                tokio::select! {
                    joined = self.jobs.join_next() => Event::Job(joined),
                    () = source.ready(), if can_take => Event::Source,
                }
            };
            match event {
                Event::Source => {}
                Event::Job(Some(joined)) => {
                    let finished = joined.map_err(|e| Error::Stage {
                        stage: "pipeline",
                        detail: e.to_string(),
                    })??;
                    let outputs = self.core.handle(Input::JobDone(finished))?;
                    self.carry_out(outputs, &mut emit).await?;
                }
                Event::Job(None) => {}
            }
        }
        self.observe();
        Ok(())
    }

    /// Carries out the core's outputs, in order.
    async fn carry_out<F>(&mut self, outputs: Vec<Output>, emit: &mut F) -> Result<()>
    where
        F: FnMut(BlockResult) -> Result<()>,
    {
        // Final blocks come last and in order: the newest is recorded once, before the
        // first of them is emitted (one synced write per round instead of one per block;
        // a restart resumes from the block store, so recording ahead of it is harmless).
        let mut unrecorded = outputs.iter().rev().find_map(|o| match o {
            Output::BlockFinal(b) => Some(b.number),
            _ => None,
        });
        for output in outputs {
            match output {
                Output::SetPolicy { ns, policy } => {
                    if let Err(e) = self.verify.set_policy(&ns, &policy).await {
                        tracing::warn!(%ns, error = %e, "committed policy unusable");
                    }
                }
                Output::Dispatch(job) => self.spawn_job(job),
                Output::BlockFinal(block) => {
                    if let Some(newest) = unrecorded.take() {
                        self.commit.set_last_committed(newest.max(block.number)).await?;
                    }
                    self.metrics.blocks.inc();
                    self.metrics.txs.inc_by(block.statuses.len() as u64);
                    while self.admitted_at.front().is_some_and(|(n, _)| *n < block.number) {
                        self.admitted_at.pop_front();
                    }
                    if let Some((_, at)) = self.admitted_at.pop_front_if(|(n, _)| *n == block.number) {
                        self.metrics.block_seconds.observe(at.elapsed().as_secs_f64());
                    }
                    let committed = block
                        .statuses
                        .iter()
                        .filter(|(_, s)| *s == types::Status::Committed)
                        .count();
                    self.metrics.committed.inc_by(committed as u64);
                    emit(block)?;
                }
            }
        }
        Ok(())
    }

    /// One verify-and-commit job: verifies the txs marked for it, then commits the batch.
    fn spawn_job(&mut self, job: Job) {
        let verify = self.verify.clone();
        let commit = self.commit.clone();
        self.jobs.spawn(async move {
            let mut txs = job.txs;
            let to_verify: Vec<usize> = (0..txs.len()).filter(|&i| txs[i].verify).collect();
            if !to_verify.is_empty() {
                // Every tx's body, or none (then the stage encodes the txs itself).
                let bodies: Option<Vec<_>> = to_verify.iter().map(|&i| txs[i].body.clone()).collect();
                let verdicts = match bodies {
                    Some(bodies) => {
                        // The ids are lent to the batch and given back (no copy of each).
                        let batch: VerifyBatch = to_verify
                            .iter()
                            .map(|&i| (std::mem::take(&mut txs[i].vtx.id), txs[i].vtx.tx.clone()))
                            .collect();
                        let verdicts = verify.verify_encoded(&batch, bodies).await;
                        for (&i, (id, _)) in to_verify.iter().zip(batch) {
                            txs[i].vtx.id = id;
                        }
                        verdicts?
                    }
                    None => {
                        let batch = to_verify
                            .iter()
                            .map(|&i| (txs[i].vtx.id.clone(), txs[i].vtx.tx.clone()))
                            .collect();
                        verify.verify(batch).await?
                    }
                };
                if verdicts.len() != to_verify.len() {
                    return Err(Error::Stage {
                        stage: "verify",
                        detail: format!("{} verdicts for {} txs", verdicts.len(), to_verify.len()),
                    });
                }
                for (&i, v) in to_verify.iter().zip(verdicts) {
                    if v.is_some() {
                        txs[i].vtx.prelim = v;
                    }
                }
            }
            let meta: Vec<(bool, Arc<types::Tx>)> =
                txs.iter().map(|t| (t.in_graph, t.vtx.tx.clone())).collect();
            let bodies: Option<Vec<_>> = txs.iter_mut().map(|t| t.body.take()).collect();
            let batch = txs.into_iter().map(|t| t.vtx).collect();
            let outcomes = match bodies {
                Some(bodies) => commit.process_encoded(batch, bodies).await?,
                None => commit.process(batch).await?,
            };
            if outcomes.len() != meta.len() {
                return Err(Error::Stage {
                    stage: "commit",
                    detail: format!("{} outcomes for {} txs", outcomes.len(), meta.len()),
                });
            }
            Ok(outcomes
                .into_iter()
                .zip(meta)
                .map(|(outcome, (in_graph, tx))| Finished {
                    outcome,
                    in_graph,
                    tx,
                })
                .collect())
        });
    }

    /// Sets the gauges from the current state.
    fn observe(&self) {
        let m = &self.metrics;
        let (pending, window, ready) = self.core.gauges();
        m.graph_pending.set(gauge(pending));
        m.graph_window.set(gauge(window));
        m.ready.set(gauge(ready));
        m.jobs_in_flight.set(gauge(self.core.jobs()));
        m.next_block
            .set(i64::try_from(self.core.next_block()).unwrap_or(i64::MAX));
    }
}

/// A gauge value from a count.
fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
