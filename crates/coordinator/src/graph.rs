//! The global dependency graph (FX §3.3-3.4): txs of merged blocks wait here until every
//! earlier conflicting tx has finished, then they are released for signature
//! verification and commit.

use crate::error::{Error, Result};
use crate::index::{KeyIndex, KeyRef, NO_TX};
use crate::key::KeyHasher;
use crate::local::{BlockTx, HEAD, LocalGraph, TAIL};
use smallvec::SmallVec;
use std::collections::VecDeque;

use types::{Height, Status};

/// Configuration of a [`DependencyGraph`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphConfig {
    /// Back-pressure threshold: no block is accepted while this many txs (or more) are
    /// unfinished in the graph. A block is accepted whole, so the graph may hold up to
    /// `max_pending + block size - 1` txs.
    pub max_pending: usize,
    /// Second back-pressure threshold: no block is accepted while the span of merged
    /// txs from the oldest unfinished one to the newest (finished txs included) is this
    /// large. Finished txs behind a slow one stay queued (a few dozen bytes each); this
    /// bounds that memory when one tx is stuck while its neighbours keep finishing.
    pub max_window: usize,
    /// The number of the first block to be merged (the block after the last one fully
    /// committed, on restart).
    pub first_block: u64,
    /// Seed of the key fingerprint hash; draw it at random in a service.
    pub hash_seed: u64,
}

impl Default for GraphConfig {
    fn default() -> Self {
        GraphConfig {
            max_pending: 100_000,
            max_window: 2_000_000,
            first_block: 0,
            hash_seed: 0,
        }
    }
}

/// A tx whose every earlier conflicting tx has finished: it may be verified and
/// committed now, concurrently with every other released tx. Pass its height back to
/// [`DependencyGraph::complete`].
pub type Released = BlockTx;

/// An input of the graph as a state machine (see [`DependencyGraph::handle`]).
#[derive(Debug)]
pub enum Input {
    /// The next block's local graph.
    Block(LocalGraph),
    /// A released tx finished with a final status.
    Completed {
        /// The tx's height.
        height: Height,
        /// Its final status (committed or any abort).
        status: Status,
    },
}

/// Counters since the graph was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Blocks merged.
    pub blocks: u64,
    /// Txs merged.
    pub added: u64,
    /// Txs released.
    pub released: u64,
    /// Txs completed as [`Status::Committed`].
    pub committed: u64,
    /// Txs completed with any other status.
    pub aborted: u64,
    /// Dependency edges added (intra-block and towards earlier blocks).
    pub edges: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Waiting,
    Released,
    Finished,
}

/// One merged tx.
#[derive(Debug)]
struct Node {
    state: NodeState,
    /// Unfinished txs this one waits for (with multiplicity of edges).
    waiting_on: u32,
    /// Moved out when the tx is released.
    payload: Option<BlockTx>,
    /// Later txs waiting for this one.
    dependents: Vec<u64>,
    /// Keys whose index entry points at this tx.
    refs: SmallVec<[KeyRef; 4]>,
}

/// A merged block: where its txs sit in the node queue.
#[derive(Debug)]
struct BlockRec {
    number: u64,
    first_seq: u64,
    /// Tx indices of the block when they are not exactly `0..len`.
    sparse: Option<Box<[u32]>>,
    len: u32,
    unfinished: u32,
}

/// The cross-block dependency graph of the coordinator: a pure state machine (no I/O,
/// no clock, no threads). Feed it blocks in order with [`DependencyGraph::add_block`]
/// (or [`LocalGraph::build`] + [`DependencyGraph::merge`]) and completions with
/// [`DependencyGraph::complete`]; both return the txs that became ready.
#[derive(Debug)]
pub struct DependencyGraph {
    config: GraphConfig,
    hasher: KeyHasher,
    index: KeyIndex,
    /// Txs by sequence number (merge order) from `first_seq` on; finished txs at the
    /// front are dropped.
    nodes: VecDeque<Node>,
    first_seq: u64,
    blocks: VecDeque<BlockRec>,
    next_block: u64,
    waiting: usize,
    in_flight: usize,
    stats: GraphStats,
}

impl DependencyGraph {
    /// An empty graph expecting block `config.first_block` next.
    pub fn new(config: GraphConfig) -> DependencyGraph {
        DependencyGraph {
            hasher: KeyHasher::new(config.hash_seed),
            next_block: config.first_block,
            config,
            index: KeyIndex::default(),
            nodes: VecDeque::new(),
            first_seq: 0,
            blocks: VecDeque::new(),
            waiting: 0,
            in_flight: 0,
            stats: GraphStats::default(),
        }
    }

    /// The key hasher to build [`LocalGraph`]s with (e.g. on other threads).
    pub fn key_hasher(&self) -> &KeyHasher {
        &self.hasher
    }

    /// The number of the block the graph accepts next.
    pub fn next_block(&self) -> u64 {
        self.next_block
    }

    /// Txs in the graph that have not finished (waiting or released).
    pub fn pending(&self) -> usize {
        self.waiting + self.in_flight
    }

    /// Txs still waiting for an earlier conflicting tx.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Txs released and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether no tx is pending.
    pub fn is_empty(&self) -> bool {
        self.pending() == 0
    }

    /// Whether the next block would be accepted: fewer than `max_pending` pending txs
    /// and a window below `max_window`.
    pub fn has_capacity(&self) -> bool {
        self.pending() < self.config.max_pending && self.window() < self.config.max_window
    }

    /// Merged txs from the oldest unfinished one to the newest, finished ones included.
    pub fn window(&self) -> usize {
        self.nodes.len()
    }

    /// Distinct keys currently indexed (keys touched by an unfinished tx).
    pub fn indexed_keys(&self) -> usize {
        self.index.len()
    }

    /// Counters since creation.
    pub fn stats(&self) -> GraphStats {
        self.stats
    }

    /// The state-machine form of [`DependencyGraph::merge`] and
    /// [`DependencyGraph::complete`]: one input in, the newly released txs out.
    pub fn handle(&mut self, input: Input) -> Result<Vec<Released>> {
        match input {
            Input::Block(local) => self.merge(local),
            Input::Completed { height, status } => self.complete(height, status),
        }
    }

    /// Builds the local graph of `txs` and merges it: see [`LocalGraph::build`] and
    /// [`DependencyGraph::merge`]. Fails without building when the block is out of order
    /// or the graph is full.
    pub fn add_block(&mut self, block_number: u64, txs: Vec<BlockTx>) -> Result<Vec<Released>> {
        self.check_accepts(block_number)?;
        let local = LocalGraph::build(&self.hasher, block_number, txs)?;
        self.merge(local)
    }

    /// Merges the next block's local graph and returns its txs that are ready at once.
    /// On error the graph is unchanged (and `local` is dropped).
    pub fn merge(&mut self, local: LocalGraph) -> Result<Vec<Released>> {
        let mut out = Vec::new();
        self.merge_into(local, &mut out)?;
        Ok(out)
    }

    /// Like [`DependencyGraph::merge`], appending released txs to `out`.
    pub fn merge_into(&mut self, mut local: LocalGraph, out: &mut Vec<Released>) -> Result<()> {
        if local.hash_seed != self.hasher.seed() {
            return Err(Error::HasherMismatch {
                expected: self.hasher.seed(),
                got: local.hash_seed,
            });
        }
        self.check_accepts(local.block_number)?;
        let base = self.first_seq + self.nodes.len() as u64;
        self.push_block_rec(&local, base);
        let entries: Vec<u32> = local.keys.iter().map(|k| self.index.resolve(k.fp)).collect();
        let n = local.len();
        let txs = std::mem::take(&mut local.txs);
        self.nodes.reserve(n);
        for (i, payload) in txs.into_iter().enumerate() {
            self.nodes.push_back(Node {
                state: NodeState::Waiting,
                waiting_on: 0,
                payload: Some(payload),
                dependents: Vec::new(),
                refs: SmallVec::new(),
            });
            self.link_tx(&local, &entries, base, i);
        }
        self.waiting += n;
        self.stats.blocks += 1;
        self.stats.added += n as u64;
        for seq in base..base + n as u64 {
            if self.node(seq).waiting_on == 0 {
                self.release(seq, out);
            }
        }
        self.next_block += 1;
        self.pop_finished();
        Ok(())
    }

    fn check_accepts(&self, block_number: u64) -> Result<()> {
        if block_number != self.next_block {
            return Err(Error::OutOfOrderBlock {
                expected: self.next_block,
                got: block_number,
            });
        }
        if self.pending() >= self.config.max_pending {
            return Err(Error::GraphFull {
                pending: self.pending(),
                limit: self.config.max_pending,
            });
        }
        if self.window() >= self.config.max_window {
            return Err(Error::WindowFull {
                window: self.window(),
                limit: self.config.max_window,
            });
        }
        Ok(())
    }

    fn push_block_rec(&mut self, local: &LocalGraph, first_seq: u64) {
        let dense = local
            .txs
            .iter()
            .enumerate()
            .all(|(i, t)| t.height.index as usize == i);
        let sparse = (!dense).then(|| local.txs.iter().map(|t| t.height.index).collect());
        let len = local.len() as u32;
        self.blocks.push_back(BlockRec {
            number: local.block_number,
            first_seq,
            sparse,
            len,
            unfinished: len,
        });
    }

    /// Adds the edges of tx `i` of `local` (sequence number `base + i`): towards earlier
    /// txs of its block, then, for each key it touched before the block first wrote it,
    /// towards the global last writer and (for a write) the global readers. Then points
    /// the index at the tx for each key where it is part of the block's final state.
    fn link_tx(&mut self, local: &LocalGraph, entries: &[u32], base: u64, i: usize) {
        let seq = base + i as u64;
        for &d in local.local_deps(i) {
            self.add_edge(base + u64::from(d), seq);
        }
        for access in local.tx_accesses(i) {
            let entry = entries[access.local_key as usize];
            if access.flags & HEAD != 0 {
                let writer = self.index.entry(entry).last_writer;
                if writer != NO_TX {
                    self.add_edge(writer, seq);
                }
                if access.key.write {
                    for r in 0..self.index.entry(entry).readers.len() {
                        let reader = self.index.entry(entry).readers[r];
                        if self.is_live(reader) {
                            self.add_edge(reader, seq);
                        }
                    }
                }
            }
            if access.flags & TAIL != 0 {
                let key_ref = if access.key.write {
                    self.index.set_writer(entry, seq)
                } else {
                    let (nodes, first_seq) = (&self.nodes, self.first_seq);
                    let live = |s: u64| {
                        s >= first_seq && nodes[(s - first_seq) as usize].state != NodeState::Finished
                    };
                    self.index.add_reader(entry, seq, live)
                };
                self.node_mut(seq).refs.push(key_ref);
            }
        }
    }

    fn add_edge(&mut self, from: u64, to: u64) {
        let deps = &mut self.node_mut(from).dependents;
        if deps.last() == Some(&to) {
            return; // edges of one tx are added consecutively: this is a duplicate
        }
        deps.push(to);
        self.node_mut(to).waiting_on += 1;
        self.stats.edges += 1;
    }

    fn is_live(&self, seq: u64) -> bool {
        seq >= self.first_seq && self.node(seq).state != NodeState::Finished
    }

    #[inline]
    fn node(&self, seq: u64) -> &Node {
        &self.nodes[(seq - self.first_seq) as usize]
    }

    #[inline]
    fn node_mut(&mut self, seq: u64) -> &mut Node {
        &mut self.nodes[(seq - self.first_seq) as usize]
    }

    fn release(&mut self, seq: u64, out: &mut Vec<Released>) {
        let node = self.node_mut(seq);
        debug_assert_eq!(node.state, NodeState::Waiting);
        node.state = NodeState::Released;
        if let Some(released) = node.payload.take() {
            out.push(released);
        }
        self.waiting -= 1;
        self.in_flight += 1;
        self.stats.released += 1;
    }

    /// Marks the released tx at `height` finished with `status` (committed or aborted:
    /// both end its conflicts) and returns the txs that became ready.
    pub fn complete(&mut self, height: Height, status: Status) -> Result<Vec<Released>> {
        let mut out = Vec::new();
        self.complete_into(height, status, &mut out)?;
        Ok(out)
    }

    /// Like [`DependencyGraph::complete`], appending released txs to `out`.
    pub fn complete_into(&mut self, height: Height, status: Status, out: &mut Vec<Released>) -> Result<()> {
        let (block_pos, seq) = self.locate(height)?;
        match self.node(seq).state {
            NodeState::Waiting => return Err(Error::NotReleased { height }),
            NodeState::Finished => return Err(Error::AlreadyFinished { height }),
            NodeState::Released => {}
        }
        let node = self.node_mut(seq);
        node.state = NodeState::Finished;
        let refs = std::mem::take(&mut node.refs);
        let dependents = std::mem::take(&mut node.dependents);
        for r in refs {
            self.index.release(r, seq);
        }
        for d in dependents {
            let dep = self.node_mut(d);
            dep.waiting_on -= 1;
            if dep.waiting_on == 0 {
                self.release(d, out);
            }
        }
        self.in_flight -= 1;
        self.blocks[block_pos].unfinished -= 1;
        if status == Status::Committed {
            self.stats.committed += 1;
        } else {
            self.stats.aborted += 1;
        }
        self.pop_finished();
        Ok(())
    }

    /// Position in `blocks` and sequence number of the tx at `height`.
    fn locate(&self, height: Height) -> Result<(usize, u64)> {
        let unknown = Error::UnknownTx { height };
        let front = self.blocks.front().ok_or_else(|| unknown.clone())?;
        if height.block < front.number || height.block >= self.next_block {
            return Err(unknown);
        }
        let block_pos = (height.block - front.number) as usize;
        let b = &self.blocks[block_pos];
        let pos = match &b.sparse {
            None if height.index < b.len => height.index,
            None => return Err(unknown),
            Some(indices) => indices.binary_search(&height.index).map_err(|_| unknown)? as u32,
        };
        let seq = b.first_seq + u64::from(pos);
        if seq < self.first_seq {
            return Err(Error::AlreadyFinished { height });
        }
        Ok((block_pos, seq))
    }

    /// Drops finished txs and blocks from the fronts of their queues.
    fn pop_finished(&mut self) {
        while self.nodes.front().is_some_and(|n| n.state == NodeState::Finished) {
            self.nodes.pop_front();
            self.first_seq += 1;
        }
        while self.blocks.front().is_some_and(|b| b.unfinished == 0) {
            self.blocks.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use types::{ReadWrite, Tx, TxId, TxNamespace};

    fn tx(ns: &str, rw: &[&str]) -> Arc<Tx> {
        let ns = TxNamespace {
            ns_id: ns.to_string(),
            read_writes: rw
                .iter()
                .map(|k| ReadWrite {
                    key: k.as_bytes().to_vec(),
                    version: None,
                    value: vec![],
                })
                .collect(),
            ..TxNamespace::default()
        };
        Arc::new(Tx {
            namespaces: vec![ns],
            ..Tx::default()
        })
    }

    /// Keys whose txs all finished stay mapped (unused) until they outnumber the used
    /// ones by the slack, so the index stays bounded while fresh keys keep coming; an
    /// unused key touched again is revived without dependencies on finished txs.
    #[test]
    fn unused_keys_are_revived_or_purged() {
        let mut g = DependencyGraph::new(GraphConfig::default());
        let h = Height::new;
        // Key "k" written and finished: unused but mapped (with the namespace's own key,
        // which every tx on "ns" reads).
        let w = BlockTx::new(TxId::from("w"), h(0, 0), tx("ns", &["k"]));
        assert_eq!(g.add_block(0, vec![w]).unwrap().len(), 1);
        assert!(g.complete(h(0, 0), Status::Committed).unwrap().is_empty());
        assert_eq!((g.indexed_keys(), g.index.mapped()), (0, 2));
        // Touched again: revived, no edge to the finished writer; a second tx on it in
        // the same block still waits for the first.
        let b1 = vec![
            BlockTx::new(TxId::from("a"), h(1, 0), tx("ns", &["k"])),
            BlockTx::new(TxId::from("b"), h(1, 1), tx("ns", &["k"])),
        ];
        let released: Vec<Height> = g.add_block(1, b1).unwrap().iter().map(|r| r.height).collect();
        assert_eq!(released, vec![h(1, 0)]);
        assert_eq!((g.indexed_keys(), g.index.mapped()), (2, 2));
        let next: Vec<Height> = g
            .complete(h(1, 0), Status::Committed)
            .unwrap()
            .iter()
            .map(|r| r.height)
            .collect();
        assert_eq!(next, vec![h(1, 1)]);
        assert!(g.complete(h(1, 1), Status::Committed).unwrap().is_empty());
        // Fresh keys (3,800), each finished soon: the unused keys never exceed the used
        // ones by more than the slack.
        for b in 2..40u64 {
            let txs: Vec<BlockTx> = (0..100u32)
                .map(|i| {
                    BlockTx::new(
                        TxId::from(format!("t{b}-{i}").as_str()),
                        h(b, i),
                        tx("ns", &[&format!("k{b}-{i}")]),
                    )
                })
                .collect();
            assert_eq!(g.add_block(b, txs).unwrap().len(), 100);
            for i in 0..100 {
                g.complete(h(b, i), Status::Committed).unwrap();
                let slack = crate::index::PURGE_SLACK;
                assert!(g.index.mapped() <= 2 * g.indexed_keys() + slack + 1);
            }
        }
        assert_eq!(g.indexed_keys(), 0);
        assert!(
            g.index.mapped() <= crate::index::PURGE_SLACK + 1,
            "purged: {}",
            g.index.mapped()
        );
    }

    /// A fingerprint collision makes unrelated txs look conflicting: they are serialized
    /// (less parallelism) but every tx is still released once, in block order.
    #[test]
    fn fingerprint_collisions_only_serialize() {
        let mut g = DependencyGraph::new(GraphConfig::default());
        g.hasher = KeyHasher::colliding(0);
        let txs: Vec<BlockTx> = ["x", "y", "z"]
            .iter()
            .enumerate()
            .map(|(i, k)| {
                BlockTx::new(
                    TxId::from(*k),
                    Height::new(0, i as u32),
                    tx(if i == 1 { "other" } else { "ns" }, &[k]),
                )
            })
            .collect();
        let mut released = g.add_block(0, txs).unwrap();
        for i in 0..3u32 {
            assert_eq!(
                released.iter().map(|r| r.height).collect::<Vec<_>>(),
                vec![Height::new(0, i)]
            );
            released = g.complete(Height::new(0, i), Status::Committed).unwrap();
        }
        assert!(released.is_empty());
        assert!(g.is_empty());
        assert_eq!(g.indexed_keys(), 0);
    }
}
