//! The Fabric chain over the party's ledger (pure): block 0 is the network's genesis
//! config block, block `n ≥ 1` the ledger's block `n − 1`, each chained on the Fabric
//! header hash of the one before and counting the txs of the chain up to it
//! (docs/assembler.md "Fabric Deliver").
//!
//! Serving block `n` needs the header hash of block `n − 1`, hence of every block before
//! it. [`Checkpoints`] keeps, every `interval` blocks, the hash and tx count at that
//! block (40 bytes each, at most `max` of them); a [`Cursor`] starts at the nearest
//! checkpoint at or below the block before the first one wanted and walks the ledger's
//! headers forward.

use std::num::{NonZeroU64, NonZeroUsize};

use arma::fabric::{BlockError, Content};
use wire::fabric::common;
use wire::pb;

/// Blocks between two checkpoints by default.
pub const DEFAULT_INTERVAL: NonZeroU64 = match NonZeroU64::new(256) {
    Some(n) => n,
    None => NonZeroU64::MIN,
};

/// Most checkpoints kept by default: 262,144 of 40 bytes (10 MiB; 20 MiB with a
/// vector's spare room), covering 67 million blocks at the default interval; past them
/// the interval doubles.
pub const DEFAULT_MAX_CHECKPOINTS: NonZeroUsize = match NonZeroUsize::new(1 << 18) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// The genesis block counts one tx (its config envelope).
pub const GENESIS_TX_COUNT: u64 = 1;

/// The chain's state right after one of its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// That block's Fabric header hash.
    pub hash: [u8; 32],
    /// Txs in the chain up to and with that block.
    pub tx_count: u64,
}

impl Point {
    /// Bytes a point takes in memory.
    pub const BYTES: usize = std::mem::size_of::<Point>();
}

/// Why a ledger block cannot continue the Fabric chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The ledger returned another block than the next one.
    #[error("expected ledger block {expected}, got {got:?}")]
    OutOfOrder {
        /// The ledger block wanted.
        expected: u64,
        /// The one returned (`None`: without a header).
        got: Option<u64>,
    },
    /// The block cannot be made a Fabric block.
    #[error(transparent)]
    Block(#[from] BlockError),
    /// The chain's tx count overflows.
    #[error("the tx count overflows at Fabric block {number}")]
    TxCount {
        /// The Fabric block.
        number: u64,
    },
}

/// The points at Fabric blocks `0, interval, 2·interval, …`, filled in order as streams
/// pass them; when more than `max` are held the interval doubles and every other point
/// is dropped, so at most `max` points (40 bytes each, twice that with a vector's spare
/// room) are held whatever the chain's length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoints {
    genesis: Point,
    interval: u64,
    max: usize,
    points: Vec<Point>,
}

impl Checkpoints {
    /// The checkpoints of a chain whose genesis block leaves `genesis`.
    pub fn new(genesis: Point, interval: NonZeroU64, max: NonZeroUsize) -> Checkpoints {
        Checkpoints {
            genesis,
            interval: interval.get(),
            max: max.get().max(2),
            points: vec![genesis],
        }
    }

    /// The current interval.
    pub fn interval(&self) -> u64 {
        self.interval
    }

    /// Points held.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether none is held (never: the genesis point stays).
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Bytes the points take.
    pub fn bytes(&self) -> usize {
        self.points.len().saturating_mul(Point::BYTES)
    }

    /// The highest checkpoint at or below Fabric block `number`: its block and point.
    pub fn nearest(&self, number: u64) -> (u64, Point) {
        let wanted = usize::try_from(number / self.interval).unwrap_or(usize::MAX);
        let i = wanted.min(self.points.len().saturating_sub(1));
        let block = u64::try_from(i).unwrap_or(u64::MAX).saturating_mul(self.interval);
        let point = self.points.get(i).copied().unwrap_or(self.genesis);
        (block, point)
    }

    /// Records the point after Fabric block `number` when it is the next checkpoint.
    pub fn record(&mut self, number: u64, point: Point) {
        let next = u64::try_from(self.points.len())
            .ok()
            .and_then(|n| n.checked_mul(self.interval));
        if next != Some(number) {
            return;
        }
        self.points.push(point);
        if self.points.len() > self.max {
            self.interval = self.interval.saturating_mul(2);
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 1
            });
        }
    }
}

/// A walk along the chain: the next Fabric block and the state after the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    next: u64,
    previous: Point,
}

impl Cursor {
    /// The cursor right after Fabric block `number`, whose state is `point`.
    pub fn after(number: u64, point: Point) -> Cursor {
        Cursor {
            next: number.saturating_add(1),
            previous: point,
        }
    }

    /// The next Fabric block.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The ledger block the next Fabric block is made of.
    pub fn next_ledger(&self) -> u64 {
        self.next.saturating_sub(1)
    }

    /// Makes the next Fabric block of the ledger block `ledger` (which must be
    /// [`Cursor::next_ledger`]) with `content`, and moves past it; returns the block and
    /// the state after it.
    pub fn advance(
        &mut self,
        ledger: &pb::OrderedBlock,
        content: Content,
    ) -> Result<(common::Block, Point), ChainError> {
        let header = ledger.header.as_ref();
        if header.map(|h| h.number) != Some(self.next_ledger()) || self.next == 0 {
            return Err(ChainError::OutOfOrder {
                expected: self.next_ledger(),
                got: header.map(|h| h.number),
            });
        }
        let txs = header.map_or(0, |h| u64::from(h.tx_count));
        let tx_count = self
            .previous
            .tx_count
            .checked_add(txs)
            .ok_or(ChainError::TxCount { number: self.next })?;
        let block = arma::fabric::data_block(ledger, &self.previous.hash, tx_count, content)?;
        let hash = block
            .header
            .as_ref()
            .map(arma::fabric::header_hash)
            .ok_or(ChainError::Block(BlockError::Missing("header")))?;
        let point = Point { hash, tx_count };
        self.previous = point;
        self.next = self.next.saturating_add(1);
        Ok((block, point))
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
