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

use crate::blockfile::FileBlock;
use crate::intake::{Intake, Route};
use crate::stages::{CommitStage, LocalVerifier, VerifyStage};
use crate::{Error, Result};
use coordinator::{BlockTx, DependencyGraph, GraphConfig, LocalGraph, build_parallel};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::task::JoinSet;
use types::{META_NAMESPACE, NamespacePolicy, Status, TxId};
use vcservice::{Engine, TxOutcome, VcTx};

/// Sizes of the pipeline.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Concurrent verify-and-commit jobs.
    pub workers: usize,
    /// Largest batch handed to the vcservice.
    pub max_batch: usize,
    /// Dependency graph configuration (capacity = back-pressure).
    pub graph: GraphConfig,
    /// Blocks admitted together, whose local graphs are built in parallel.
    pub parallel_blocks: usize,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            workers: 4,
            max_batch: 500,
            graph: GraphConfig::default(),
            parallel_blocks: 4,
        }
    }
}

/// The final statuses of one block, in tx order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockResult {
    /// Block number.
    pub number: u64,
    /// (id, status) of every tx, by index.
    pub statuses: Vec<(TxId, Status)>,
}

struct Work {
    vtx: VcTx,
    verify: bool,
    in_graph: bool,
}

impl Work {
    /// A tx the graph released: verify its signatures, then commit.
    fn released(r: coordinator::Released) -> Work {
        Work {
            vtx: VcTx {
                id: r.id,
                height: r.height,
                tx: r.tx,
                prelim: None,
            },
            verify: true,
            in_graph: true,
        }
    }
}

struct Agg {
    statuses: Vec<Option<(TxId, Status)>>,
    remaining: usize,
}

type JobResult = Result<Vec<(TxOutcome, bool, Arc<types::Tx>)>>;

/// The in-process committer.
pub struct Pipeline {
    verify: Arc<dyn VerifyStage>,
    commit: Arc<dyn CommitStage>,
    graph: DependencyGraph,
    intake: Intake,
    decoder: wire::ProstDecoder,
    config: PipelineConfig,
    ready: Vec<Work>,
    jobs: JoinSet<JobResult>,
    agg: BTreeMap<u64, Agg>,
    next_block: u64,
    next_emit: u64,
}

/// Decodes a stored `_meta` value.
fn decode_policy(v: &[u8]) -> Option<NamespacePolicy> {
    use types::check::PayloadDecoder;
    wire::ProstDecoder::default().decode_policy(v)
}

impl Pipeline {
    /// A pipeline over `engine`, with the policy that endorses `_meta` txs and the
    /// policies already committed in the state (loaded from `_meta` rows).
    pub async fn new(
        engine: Engine,
        meta_policy: &NamespacePolicy,
        config: PipelineConfig,
    ) -> Result<Pipeline> {
        Pipeline::with_stages(
            Arc::new(LocalVerifier::new()),
            Arc::new(engine),
            meta_policy,
            config,
        )
        .await
    }

    /// A pipeline over any verification and commit stages (in-process or remote pools).
    /// Sets the meta policy and every committed namespace policy on the verifier first.
    pub async fn with_stages(
        verify: Arc<dyn VerifyStage>,
        commit: Arc<dyn CommitStage>,
        meta_policy: &NamespacePolicy,
        config: PipelineConfig,
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
        let first = config.graph.first_block;
        Ok(Pipeline {
            verify,
            commit,
            graph: DependencyGraph::new(config.graph.clone()),
            intake: Intake::new(),
            decoder: wire::ProstDecoder {
                key_ok: |p| sigverifier::parse_policy_key(p).is_some(),
            },
            config,
            ready: Vec::new(),
            jobs: JoinSet::new(),
            agg: BTreeMap::new(),
            next_block: first,
            next_emit: first,
        })
    }

    /// Runs `blocks` (consecutive numbers from the configured first block) to completion,
    /// calling `emit` once per block, in block order, when all its txs are final. The
    /// last fully committed block is recorded in the state after each emitted block.
    pub async fn run<I, F>(&mut self, blocks: I, mut emit: F) -> Result<()>
    where
        I: IntoIterator<Item = FileBlock>,
        F: FnMut(BlockResult),
    {
        let mut blocks = blocks.into_iter();
        let mut exhausted = false;
        loop {
            // Admit up to `parallel_blocks` blocks at a time: intake in order, local graphs
            // built in parallel, merged strictly in block order.
            // The graph refuses a block once it is full, so count the admitted but not
            // yet merged txs against its limits.
            let mut admitted: Vec<(u64, Vec<BlockTx>)> = Vec::new();
            let mut unmerged = 0usize;
            while !exhausted
                && self.graph.pending() + unmerged < self.config.graph.max_pending
                && self.graph.window() + unmerged < self.config.graph.max_window
                && self.ready.len() < 4 * self.config.max_batch
                && admitted.len() < self.config.parallel_blocks.max(1)
            {
                match blocks.next() {
                    Some(b) => {
                        let (number, txs) = self.admit(b)?;
                        unmerged += txs.len();
                        admitted.push((number, txs));
                    }
                    None => exhausted = true,
                }
            }
            self.merge(admitted)?;
            self.dispatch();
            self.emit_finished(&mut emit).await?;
            if exhausted && self.jobs.is_empty() && self.ready.is_empty() {
                break;
            }
            match self.jobs.join_next().await {
                Some(joined) => {
                    let outcomes = joined.map_err(|e| Error::Stage {
                        stage: "pipeline",
                        detail: e.to_string(),
                    })??;
                    self.on_done(outcomes).await?;
                }
                None if exhausted && self.ready.is_empty() => break,
                None => {}
            }
        }
        self.emit_finished(&mut emit).await?;
        Ok(())
    }

    /// Builds the local graphs of admitted blocks (in parallel when there are several)
    /// and merges them in block order.
    fn merge(&mut self, admitted: Vec<(u64, Vec<BlockTx>)>) -> Result<()> {
        let locals = match admitted.len() {
            0 => return Ok(()),
            1 => admitted
                .into_iter()
                .map(|(n, txs)| LocalGraph::build(self.graph.key_hasher(), n, txs))
                .collect(),
            _ => build_parallel(self.graph.key_hasher(), admitted),
        };
        for local in locals {
            let released = self.graph.merge(local?)?;
            self.ready.extend(released.into_iter().map(Work::released));
        }
        Ok(())
    }

    /// Intake of one block: answers and storable statuses are queued; returns the txs to
    /// schedule through the graph.
    fn admit(&mut self, block: FileBlock) -> Result<(u64, Vec<BlockTx>)> {
        if block.number != self.next_block {
            return Err(Error::OutOfOrder {
                expected: self.next_block,
                got: block.number,
            });
        }
        self.next_block += 1;
        let admitted = self.intake.admit(block.number, &block.txs, &self.decoder);
        let mut agg = Agg {
            statuses: vec![None; admitted.len()],
            remaining: 0,
        };
        let mut scheduled: Vec<BlockTx> = Vec::new();
        for a in admitted {
            match a.route {
                Route::Answer(s) => agg.statuses[a.height.index as usize] = Some((a.id, s)),
                Route::Store(s) => {
                    agg.remaining += 1;
                    let vtx = VcTx {
                        id: a.id,
                        height: a.height,
                        tx: a.tx,
                        prelim: Some(s),
                    };
                    self.ready.push(Work {
                        vtx,
                        verify: false,
                        in_graph: false,
                    });
                }
                Route::Schedule => {
                    agg.remaining += 1;
                    scheduled.push((a.id, a.height, a.tx));
                }
            }
        }
        self.agg.insert(block.number, agg);
        Ok((block.number, scheduled))
    }

    fn dispatch(&mut self) {
        while !self.ready.is_empty() && self.jobs.len() < self.config.workers.max(1) {
            let take = self.ready.len().min(self.config.max_batch.max(1));
            let mut work: Vec<Work> = self.ready.drain(..take).collect();
            let verify = self.verify.clone();
            let commit = self.commit.clone();
            self.jobs.spawn(async move {
                let to_verify: Vec<usize> = (0..work.len()).filter(|&i| work[i].verify).collect();
                if !to_verify.is_empty() {
                    let batch = to_verify
                        .iter()
                        .map(|&i| (work[i].vtx.id.clone(), work[i].vtx.tx.clone()))
                        .collect();
                    let verdicts = verify.verify(batch).await?;
                    if verdicts.len() != to_verify.len() {
                        return Err(Error::Stage {
                            stage: "verify",
                            detail: format!("{} verdicts for {} txs", verdicts.len(), to_verify.len()),
                        });
                    }
                    for (&i, v) in to_verify.iter().zip(verdicts) {
                        if v.is_some() {
                            work[i].vtx.prelim = v;
                        }
                    }
                }
                let meta: Vec<(bool, Arc<types::Tx>)> =
                    work.iter().map(|w| (w.in_graph, w.vtx.tx.clone())).collect();
                let outcomes = commit.process(work.into_iter().map(|w| w.vtx).collect()).await?;
                if outcomes.len() != meta.len() {
                    return Err(Error::Stage {
                        stage: "commit",
                        detail: format!("{} outcomes for {} txs", outcomes.len(), meta.len()),
                    });
                }
                Ok(outcomes
                    .into_iter()
                    .zip(meta)
                    .map(|(o, (g, tx))| (o, g, tx))
                    .collect())
            });
        }
    }

    async fn on_done(&mut self, outcomes: Vec<(TxOutcome, bool, Arc<types::Tx>)>) -> Result<()> {
        // Policies first, so txs released below are verified under them.
        for (o, _, tx) in &outcomes {
            if o.status != Status::Committed {
                continue;
            }
            for ns in tx.namespaces.iter().filter(|n| n.ns_id == META_NAMESPACE) {
                for rw in &ns.read_writes {
                    if let (Ok(name), Some(p)) = (std::str::from_utf8(&rw.key), decode_policy(&rw.value))
                        && let Err(e) = self.verify.set_policy(name, &p).await
                    {
                        tracing::warn!(ns = %name, error = %e, "committed policy unusable");
                    }
                }
            }
        }
        for (o, in_graph, _) in outcomes {
            self.intake.finished(&o.id);
            if let Some(agg) = self.agg.get_mut(&o.height.block) {
                agg.statuses[o.height.index as usize] = Some((o.id.clone(), o.status));
                agg.remaining -= 1;
            }
            if in_graph {
                let released = self.graph.complete(o.height, o.status)?;
                self.ready.extend(released.into_iter().map(Work::released));
            }
        }
        Ok(())
    }

    async fn emit_finished<F: FnMut(BlockResult)>(&mut self, emit: &mut F) -> Result<()> {
        while let Some(agg) = self.agg.get(&self.next_emit) {
            if agg.remaining > 0 {
                break;
            }
            let Some(agg) = self.agg.remove(&self.next_emit) else {
                break;
            };
            let statuses = agg.statuses.into_iter().flatten().collect();
            self.commit.set_last_committed(self.next_emit).await?;
            emit(BlockResult {
                number: self.next_emit,
                statuses,
            });
            self.next_emit += 1;
        }
        Ok(())
    }
}
