//! The committer's deciding logic as a pure state machine (FX §3.2–3.4), like the BFT
//! replica: no tokio, no I/O, no clock. [`CommitterCore::handle`] takes blocks and finished
//! jobs and returns what the shell must do, in order:
//!
//! - [`Output::SetPolicy`]: a committed `_meta` tx changed a namespace policy; the shell
//!   sets it on the verify stage *before* it starts any job that follows in the outputs
//!   (the graph releases a tx on a namespace only after an earlier `_meta` tx on it
//!   finished, so those jobs must verify under the new policy);
//! - [`Output::Dispatch`]: a batch of txs to verify (those marked) and then commit;
//! - [`Output::BlockFinal`]: every tx of the next block in order is final; the shell records
//!   the block as committed, then stores and publishes it.
//!
//! Intake (structural checks, ids in flight), the dependency graph, the per-block
//! aggregation of statuses and the job limit live here; the shell
//! ([`crate::pipeline::Pipeline`]) owns the tasks and the stages.

use crate::intake::{Intake, Route};
use crate::{Error, Result};
use coordinator::{DependencyGraph, GraphConfig, LocalGraph, build_parallel};
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use types::check::PayloadDecoder;
use types::{Block, BlockTx, META_NAMESPACE, NamespacePolicy, Status, Tx, TxId, TxOutcome, VcTx};
use wire::encode::{StoredBlock, TxBody};

/// Sizes of the committer core.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Concurrent verify-and-commit jobs.
    pub workers: NonZeroUsize,
    /// Largest batch of one job.
    pub max_batch: NonZeroUsize,
    /// Dependency graph configuration (capacity = back-pressure on block intake).
    pub graph: GraphConfig,
    /// Blocks admitted together, whose local graphs are built in parallel.
    pub parallel_blocks: NonZeroUsize,
    /// Build the local graphs of blocks admitted together on the rayon pool (else one
    /// after the other on the core's thread). With cores to spare this shortens a round;
    /// with none, the pool's workers, which spin a while before they sleep, cost more
    /// than the builds they share.
    pub build_in_parallel: bool,
    /// Encode each block's stored form when it is admitted ([`BlockResult::stored`]),
    /// and hand each tx's encoded body from it to the stages with the tx
    /// ([`JobTx::body`]), so that each tx is encoded once for the store and for every
    /// message that carries it (the sidecar node, which stores blocks and calls remote
    /// stages); off, nothing is encoded here.
    pub encode_blocks: bool,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        let n = |v: usize| NonZeroUsize::new(v).unwrap_or(NonZeroUsize::MIN);
        PipelineConfig {
            workers: n(4),
            max_batch: n(500),
            graph: GraphConfig::default(),
            parallel_blocks: n(4),
            build_in_parallel: true,
            encode_blocks: false,
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
    /// The block's stored form, encoded when it was admitted (with
    /// [`PipelineConfig::encode_blocks`]; else `None`).
    pub stored: Option<bytes::Bytes>,
}

/// One tx of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTx {
    /// The tx as the commit stage gets it (with a status decided upstream, if any).
    pub vtx: VcTx,
    /// Verify its signatures first (else its status is decided already).
    pub verify: bool,
    /// It came through the dependency graph (it must be completed there).
    pub in_graph: bool,
    /// The tx's encoded body, a view of its block's stored form (with
    /// [`PipelineConfig::encode_blocks`]; else `None`).
    pub body: Option<TxBody>,
}

/// A batch of txs for one verify-and-commit job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The txs, in the order the commit stage answers them.
    pub txs: Vec<JobTx>,
}

/// A tx of a finished job: its outcome and the job entry it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The outcome the commit stage gave.
    pub outcome: TxOutcome,
    /// Whether the tx came through the graph.
    pub in_graph: bool,
    /// The tx body (its `_meta` writes change policies once committed).
    pub tx: Arc<Tx>,
}

/// An input of the core.
#[derive(Debug)]
pub enum Input {
    /// The next blocks, in order (at most what [`CommitterCore::admit_room`] allowed).
    Blocks(Vec<Block>),
    /// A job dispatched earlier finished.
    JobDone(Vec<Finished>),
}

/// What the shell must do, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Set a namespace policy on the verify stage before starting later jobs.
    SetPolicy {
        /// The namespace.
        ns: String,
        /// Its new policy.
        policy: NamespacePolicy,
    },
    /// Start a verify-and-commit job.
    Dispatch(Job),
    /// The next block in order is final: record it as committed, then emit it.
    BlockFinal(BlockResult),
}

struct Agg {
    statuses: Vec<Option<(TxId, Status)>>,
    remaining: usize,
    /// The intake's sequence number of the block's first tx.
    first_seq: u64,
    /// The stored form and each tx's body in it, by index (empty without
    /// [`PipelineConfig::encode_blocks`]).
    stored: StoredBlock,
}

impl Agg {
    /// The body of the tx at `index`, if the block was encoded.
    fn body(&self, index: u32) -> Option<TxBody> {
        self.stored.bodies.get(usize::try_from(index).ok()?).cloned()
    }
}

/// The committer's pure core: intake, dependency graph, aggregation, job limit.
pub struct CommitterCore {
    graph: DependencyGraph,
    intake: Intake,
    decoder: wire::ProstDecoder,
    config: PipelineConfig,
    ready: Vec<JobTx>,
    jobs: usize,
    agg: BTreeMap<u64, Agg>,
    next_block: u64,
    next_emit: u64,
}

impl CommitterCore {
    /// A core expecting block `config.graph.first_block` next.
    pub fn new(config: PipelineConfig) -> CommitterCore {
        let first = config.graph.first_block;
        CommitterCore {
            graph: DependencyGraph::new(config.graph.clone()),
            intake: Intake::new(),
            // An unusable policy key is malformed (114), decided at intake.
            decoder: wire::ProstDecoder {
                key_ok: |p| policy::parse_policy_key(p).is_some(),
            },
            config,
            ready: Vec::new(),
            jobs: 0,
            agg: BTreeMap::new(),
            next_block: first,
            next_emit: first,
        }
    }

    /// Handles one input; see the module documentation for the outputs.
    pub fn handle(&mut self, input: Input) -> Result<Vec<Output>> {
        let mut out = Vec::new();
        match input {
            Input::Blocks(blocks) => self.on_blocks(blocks)?,
            Input::JobDone(finished) => self.on_job_done(finished, &mut out)?,
        }
        self.dispatch(&mut out);
        self.emit_finished(&mut out);
        Ok(out)
    }

    /// How many more blocks of `txs_each` txs may be admitted now, counting `unmerged`
    /// txs of blocks already chosen: none while the graph is at its limits or the ready
    /// queue is long (back-pressure), at most `parallel_blocks` at a time.
    pub fn has_room(&self, chosen_blocks: usize, unmerged_txs: usize) -> bool {
        let g = &self.config.graph;
        self.graph.pending().saturating_add(unmerged_txs) < g.max_pending
            && self.graph.window().saturating_add(unmerged_txs) < g.max_window
            && self.ready.len() < self.config.max_batch.get().saturating_mul(4)
            && chosen_blocks < self.config.parallel_blocks.get()
    }

    /// Whether nothing is in flight: no job running, nothing ready, no block waiting.
    pub fn is_idle(&self) -> bool {
        self.jobs == 0 && self.ready.is_empty() && self.agg.is_empty()
    }

    /// Jobs dispatched and not yet done.
    pub fn jobs(&self) -> usize {
        self.jobs
    }

    /// The next block expected.
    pub fn next_block(&self) -> u64 {
        self.next_block
    }

    /// Gauges for metrics: (graph pending, graph window, ready txs).
    pub fn gauges(&self) -> (usize, usize, usize) {
        (self.graph.pending(), self.graph.window(), self.ready.len())
    }

    fn on_blocks(&mut self, blocks: Vec<Block>) -> Result<()> {
        let mut admitted = Vec::with_capacity(blocks.len());
        for b in blocks {
            admitted.push(self.admit(b)?);
        }
        // Local graphs built in parallel when there are several (and that is wanted),
        // merged in block order.
        let locals: Vec<coordinator::Result<LocalGraph>> = match admitted.len() {
            0 => return Ok(()),
            n if n == 1 || !self.config.build_in_parallel => admitted
                .into_iter()
                .map(|(n, txs)| LocalGraph::build(self.graph.key_hasher(), n, txs))
                .collect(),
            _ => build_parallel(self.graph.key_hasher(), admitted),
        };
        for local in locals {
            let released = self.graph.merge(local?)?;
            self.release(released);
        }
        Ok(())
    }

    /// Intake of one block: answered txs are recorded, storable statuses queued; returns
    /// the txs to schedule through the graph.
    fn admit(&mut self, mut block: Block) -> Result<(u64, Vec<BlockTx>)> {
        let number = block.number();
        if number != self.next_block {
            return Err(Error::OutOfOrder {
                expected: self.next_block,
                got: number,
            });
        }
        self.next_block = number.checked_add(1).ok_or(Error::OutOfOrder {
            expected: self.next_block,
            got: number,
        })?;
        let stored = if self.config.encode_blocks {
            wire::encode::stored_block(&block)?
        } else {
            StoredBlock::default()
        };
        let txs = block.take_block_txs()?;
        let (first_seq, admitted) =
            self.intake
                .admit_numbered(txs, |i| block.refused_status(i), &self.decoder);
        let mut agg = Agg {
            statuses: vec![None; admitted.len()],
            remaining: 0,
            first_seq,
            stored,
        };
        let mut scheduled = Vec::new();
        for (i, a) in admitted.into_iter().enumerate() {
            match a.route {
                Route::Answer(s) => agg.statuses[i] = Some((a.tx.id, s)),
                Route::Store(s) => {
                    agg.remaining += 1;
                    let body = agg.body(a.tx.height.index);
                    self.ready.push(JobTx {
                        vtx: VcTx {
                            prelim: Some(s),
                            ..VcTx::from(a.tx)
                        },
                        verify: false,
                        in_graph: false,
                        body,
                    });
                }
                Route::Schedule => {
                    agg.remaining += 1;
                    scheduled.push(a.tx);
                }
            }
        }
        self.agg.insert(number, agg);
        Ok((number, scheduled))
    }

    fn on_job_done(&mut self, finished: Vec<Finished>, out: &mut Vec<Output>) -> Result<()> {
        self.jobs = self.jobs.saturating_sub(1);
        // Policies first, so txs released below are verified under them.
        for f in finished.iter().filter(|f| f.outcome.status == Status::Committed) {
            for ns in f.tx.namespaces.iter().filter(|n| n.ns_id == META_NAMESPACE) {
                for rw in &ns.read_writes {
                    if let (Ok(name), Some(policy)) = (
                        std::str::from_utf8(&rw.key),
                        self.decoder.decode_policy(&rw.value),
                    ) {
                        out.push(Output::SetPolicy {
                            ns: name.to_string(),
                            policy,
                        });
                    }
                }
            }
        }
        for f in finished {
            let o = f.outcome;
            let slot = self
                .agg
                .get_mut(&o.height.block)
                .and_then(|agg| Some(agg).filter(|a| (o.height.index as usize) < a.statuses.len()));
            let Some(agg) = slot else {
                return Err(Error::Stage {
                    stage: "commit",
                    detail: format!("outcome for {} at {:?}, which is not pending", o.id, o.height),
                });
            };
            let (height, status) = (o.height, o.status);
            self.intake
                .finished(agg.first_seq.saturating_add(u64::from(height.index)));
            agg.statuses[height.index as usize] = Some((o.id, status));
            agg.remaining = agg.remaining.saturating_sub(1);
            if f.in_graph {
                let released = self.graph.complete(height, status)?;
                self.release(released);
            }
        }
        Ok(())
    }

    /// Queues txs the graph released: verify their signatures, then commit.
    fn release(&mut self, released: Vec<BlockTx>) {
        let agg = &self.agg;
        self.ready.extend(released.into_iter().map(|r| {
            let body = agg.get(&r.height.block).and_then(|a| a.body(r.height.index));
            JobTx {
                vtx: VcTx::from(r),
                verify: true,
                in_graph: true,
                body,
            }
        }));
    }

    fn dispatch(&mut self, out: &mut Vec<Output>) {
        while !self.ready.is_empty() && self.jobs < self.config.workers.get() {
            let take = self.ready.len().min(self.config.max_batch.get());
            let txs: Vec<JobTx> = self.ready.drain(..take).collect();
            self.jobs += 1;
            out.push(Output::Dispatch(Job { txs }));
        }
    }

    fn emit_finished(&mut self, out: &mut Vec<Output>) {
        while self.agg.get(&self.next_emit).is_some_and(|a| a.remaining == 0) {
            let Some(agg) = self.agg.remove(&self.next_emit) else {
                break;
            };
            let stored = self.config.encode_blocks.then_some(agg.stored.bytes);
            out.push(Output::BlockFinal(BlockResult {
                number: self.next_emit,
                statuses: agg.statuses.into_iter().flatten().collect(),
                stored,
            }));
            self.next_emit = self.next_emit.saturating_add(1);
        }
    }
}
