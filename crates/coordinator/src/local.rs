//! The local dependency graph of one block (FX §3.4: blocks are analysed independently,
//! possibly in parallel, then merged into the global graph strictly in block order).
//!
//! Building a block's graph looks only at the block itself: which keys each tx touches,
//! which earlier txs *of the same block* each tx depends on, and per key a summary of
//! how the block leaves the key (last writer, readers since that write). The merge into
//! the global graph then needs only that summary, plus the txs that touched a key before
//! the block's first write of it.

use crate::error::{Error, Result};
use crate::key::{FpMap, KeyAccess, KeyHasher, collect_accesses};
use rayon::prelude::*;

use types::Height;

/// One tx handed to the coordinator: id, height (block, index) and the decoded tx.
pub use types::BlockTx;

/// Marks "no tx" / "no access" in the `u32` links below.
pub(crate) const NONE: u32 = u32::MAX;

/// The access touched the key before the block's first write of it: it must be checked
/// against the global graph.
pub(crate) const HEAD: u8 = 1;
/// The access is part of the state the block leaves behind for the key (the last
/// writer, or a reader after it): the global key index will point at it.
pub(crate) const TAIL: u8 = 2;

/// One (tx, key) pair of a block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Access {
    /// The key.
    pub(crate) key: KeyAccess,
    /// Index of the key in [`LocalGraph::keys`].
    pub(crate) local_key: u32,
    /// Local index of the tx making the access.
    tx: u32,
    /// Previous read access of the same key since its last local write (a chain
    /// through `accesses`), or [`NONE`].
    prev_reader: u32,
    /// [`HEAD`] / [`TAIL`] bits.
    pub(crate) flags: u8,
}

/// How a block leaves one key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LocalKey {
    /// The key's fingerprint.
    pub(crate) fp: u64,
    /// The write access of the last tx of the block that writes the key, or [`NONE`].
    last_writer: u32,
    /// Most recent read access since `last_writer` (chain head), or [`NONE`].
    last_reader: u32,
}

/// The dependency graph of one block, ready to be merged into a
/// [`crate::DependencyGraph`]. Built without looking at any other block, so blocks can
/// be built on any thread (see [`build_parallel`]).
#[derive(Debug)]
pub struct LocalGraph {
    pub(crate) block_number: u64,
    pub(crate) hash_seed: u64,
    pub(crate) txs: Vec<BlockTx>,
    /// `accesses[access_start[i]..access_start[i + 1]]` are the keys of tx `i`.
    pub(crate) access_start: Vec<u32>,
    pub(crate) accesses: Vec<Access>,
    /// `deps[dep_start[i]..dep_start[i + 1]]` are the earlier txs of the block that
    /// tx `i` depends on, without duplicates.
    pub(crate) dep_start: Vec<u32>,
    pub(crate) deps: Vec<u32>,
    pub(crate) keys: Vec<LocalKey>,
}

impl LocalGraph {
    /// Builds the graph of block `block_number`. Heights must lie in that block and
    /// strictly increase (gaps are allowed: txs decided upstream are simply left out).
    pub fn build(hasher: &KeyHasher, block_number: u64, txs: Vec<BlockTx>) -> Result<LocalGraph> {
        check_heights(block_number, &txs)?;
        let n = txs.len();
        let mut keys_of: Vec<KeyAccess> = Vec::with_capacity(n * 4);
        let mut access_start = Vec::with_capacity(n + 1);
        access_start.push(0u32);
        for BlockTx { tx, .. } in &txs {
            collect_accesses(hasher, tx, &mut keys_of);
            access_start.push(keys_of.len() as u32);
        }
        let mut g = LocalGraph {
            block_number,
            hash_seed: hasher.seed(),
            access_start,
            accesses: Vec::with_capacity(keys_of.len()),
            dep_start: Vec::with_capacity(n + 1),
            deps: Vec::new(),
            keys: Vec::with_capacity(keys_of.len()),
            txs,
        };
        let mut index: FpMap<u32> = FpMap::with_capacity_and_hasher(keys_of.len(), Default::default());
        // dep_mark[j] == i means tx j is already recorded as a dependency of tx i.
        let mut dep_mark: Vec<u32> = vec![NONE; n];
        g.dep_start.push(0);
        for i in 0..n {
            let range = g.access_start[i] as usize..g.access_start[i + 1] as usize;
            for &key in &keys_of[range] {
                g.add_access(&mut index, &mut dep_mark, i as u32, key);
            }
            g.dep_start.push(g.deps.len() as u32);
        }
        g.mark_tails();
        Ok(g)
    }

    /// Records that tx `i` touches `key`, adding its dependencies on earlier txs of
    /// the block: on the last writer (wr, ww) and, for a write, on every reader since
    /// that write (rw). Readers before it are covered transitively through the writer.
    fn add_access(&mut self, index: &mut FpMap<u32>, dep_mark: &mut [u32], i: u32, key: KeyAccess) {
        let next_key = self.keys.len() as u32;
        let local_key = *index.entry(key.fp).or_insert(next_key);
        if local_key == next_key {
            self.keys.push(LocalKey {
                fp: key.fp,
                last_writer: NONE,
                last_reader: NONE,
            });
        }
        let state = self.keys[local_key as usize];
        let access_idx = self.accesses.len() as u32;
        let mut access = Access {
            key,
            local_key,
            tx: i,
            prev_reader: NONE,
            flags: 0,
        };
        if state.last_writer == NONE {
            access.flags |= HEAD;
        } else {
            let writer = self.accesses[state.last_writer as usize].tx;
            self.add_dep(dep_mark, i, writer);
        }
        let entry = &mut self.keys[local_key as usize];
        if key.write {
            entry.last_writer = access_idx;
            entry.last_reader = NONE;
            let mut r = state.last_reader;
            while r != NONE {
                let reader = self.accesses[r as usize];
                self.add_dep(dep_mark, i, reader.tx);
                r = reader.prev_reader;
            }
        } else {
            access.prev_reader = state.last_reader;
            entry.last_reader = access_idx;
        }
        self.accesses.push(access);
    }

    fn add_dep(&mut self, dep_mark: &mut [u32], i: u32, on: u32) {
        if on != i && dep_mark[on as usize] != i {
            dep_mark[on as usize] = i;
            self.deps.push(on);
        }
    }

    /// Flags the accesses the global key index will point at after the merge.
    fn mark_tails(&mut self) {
        for k in 0..self.keys.len() {
            let key = self.keys[k];
            let mut r = key.last_reader;
            while r != NONE {
                self.accesses[r as usize].flags |= TAIL;
                r = self.accesses[r as usize].prev_reader;
            }
            if key.last_writer != NONE {
                self.accesses[key.last_writer as usize].flags |= TAIL;
            }
        }
    }

    /// The block number.
    pub fn block_number(&self) -> u64 {
        self.block_number
    }

    /// Number of txs in the block.
    pub fn len(&self) -> usize {
        self.txs.len()
    }

    /// Whether the block has no txs.
    pub fn is_empty(&self) -> bool {
        self.txs.is_empty()
    }

    /// Number of distinct keys (fingerprints) the block touches.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Number of intra-block dependency edges (after removing duplicates).
    pub fn edge_count(&self) -> usize {
        self.deps.len()
    }

    /// The local indices of the earlier txs of the block that tx `i` depends on.
    pub fn local_deps(&self, i: usize) -> &[u32] {
        &self.deps[self.dep_start[i] as usize..self.dep_start[i + 1] as usize]
    }

    pub(crate) fn tx_accesses(&self, i: usize) -> &[Access] {
        &self.accesses[self.access_start[i] as usize..self.access_start[i + 1] as usize]
    }
}

fn check_heights(block_number: u64, txs: &[BlockTx]) -> Result<()> {
    let mut previous: Option<Height> = None;
    for BlockTx { height, .. } in txs {
        if height.block != block_number {
            return Err(Error::HeightOutsideBlock {
                block_number,
                height: *height,
            });
        }
        if let Some(p) = previous
            && p.index >= height.index
        {
            return Err(Error::HeightNotIncreasing {
                block_number,
                previous: p,
                got: *height,
            });
        }
        previous = Some(*height);
    }
    Ok(())
}

/// Builds the local graphs of several blocks on the rayon pool, one block per task. The
/// results keep the input order; merge them in that order.
pub fn build_parallel(hasher: &KeyHasher, blocks: Vec<(u64, Vec<BlockTx>)>) -> Vec<Result<LocalGraph>> {
    blocks
        .into_par_iter()
        .map(|(number, txs)| LocalGraph::build(hasher, number, txs))
        .collect()
}
