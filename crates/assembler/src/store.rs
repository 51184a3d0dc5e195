//! The party's block ledger: every block as `fabrx.v1.OrderedBlock` bytes (header,
//! requests, proof) in a [`ledger::Ledger`], indexed by number. The orderer's ledger
//! keeps no tx-id index: no reader of the assembler looks a tx up by id, and indexing
//! every request cost a decode and an index write per tx. Readers learn of appends
//! through a watch channel of the next block number.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use arma::{DecisionProof, OrderedHeader};
use ledger::{Ledger, LedgerConfig, LedgerReader};
use prost::Message as _;
use tokio::sync::watch;
use types::digest::Digest32;
use types::{PartyId, ShardId};
use wire::pb;

use crate::core::Block;

/// Errors of the block store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The ledger failed.
    #[error("ledger: {0}")]
    Ledger(#[from] ledger::Error),
    /// A stored block does not decode (the ledger's CRC held: written by other code).
    #[error("block {number} in the ledger does not decode: {reason}")]
    Corrupt {
        /// The block.
        number: u64,
        /// Why.
        reason: String,
    },
}

/// The wire form of a block (`headers_only`: without its requests, except a config
/// block's: its config is what a reader needs to verify the blocks after it).
pub fn encode_block(block: &Block, headers_only: bool) -> pb::OrderedBlock {
    pb::OrderedBlock {
        header: Some((&block.header).into()),
        requests: if headers_only && !block.header.is_config() {
            Vec::new()
        } else {
            block.requests.iter().map(|r| r.to_vec()).collect()
        },
        proof: Some(block.proof.as_ref().into()),
    }
}

/// Batches appended since the node started, by (shard, primary, seq, digest), at most
/// [`BatchIndex::CAPACITY`] (the oldest forgotten first): what the assembler serves to
/// other assemblers fetching a batch (`FetchBatch`).
#[derive(Debug, Default)]
pub struct BatchIndex {
    blocks: HashMap<BatchKey, u64>,
    order: VecDeque<BatchKey>,
}

/// A batch's ordered id and digest.
type BatchKey = (ShardId, PartyId, u64, Digest32);

impl BatchIndex {
    /// Batches remembered.
    pub const CAPACITY: usize = 16_384;

    fn insert(&mut self, key: BatchKey, number: u64) {
        if self.blocks.insert(key, number).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > Self::CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.blocks.remove(&old);
            }
        }
    }
}

/// The block store (single writer).
pub struct BlockStore {
    ledger: Ledger,
    tx_next: watch::Sender<u64>,
    index: Arc<Mutex<BatchIndex>>,
}

impl BlockStore {
    /// Opens (or creates) the store in `dir`, starting at block 0.
    pub fn open(dir: &Path) -> Result<BlockStore, StoreError> {
        let ledger = Ledger::open(
            dir,
            LedgerConfig {
                first_block: Some(0),
                ..LedgerConfig::default()
            },
        )?;
        let (tx_next, _) = watch::channel(ledger.next_block());
        Ok(BlockStore {
            ledger,
            tx_next,
            index: Arc::default(),
        })
    }

    /// The next block to append.
    pub fn next_block(&self) -> u64 {
        self.ledger.next_block()
    }

    /// The header and proof of the last block, if any (where a restart resumes).
    pub fn last(&self) -> Result<Option<(OrderedHeader, Arc<DecisionProof>)>, StoreError> {
        let Some(number) = self.next_block().checked_sub(1) else {
            return Ok(None);
        };
        let block = self.reader().block(number, true)?;
        let Some(block) = block else {
            return Ok(None);
        };
        let corrupt = |reason: String| StoreError::Corrupt { number, reason };
        let header = block.header.as_ref().ok_or_else(|| corrupt("no header".into()))?;
        let header = OrderedHeader::try_from(header).map_err(|e| corrupt(e.to_string()))?;
        let proof = block.proof.as_ref().ok_or_else(|| corrupt("no proof".into()))?;
        let proof = DecisionProof::try_from(proof).map_err(|e| corrupt(e.to_string()))?;
        Ok(Some((header, Arc::new(proof))))
    }

    /// Appends `block` durably, then tells the readers.
    pub fn append(&mut self, block: &Block) -> Result<(), StoreError> {
        let bytes = encode_block(block, false).encode_to_vec();
        self.ledger.append(block.header.number, &bytes, &[])?;
        let h = &block.header;
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((h.shard, h.primary, h.seq, h.digest), h.number);
        self.tx_next.send_replace(self.ledger.next_block());
        Ok(())
    }

    /// A reader that sees every append once it returned.
    pub fn reader(&self) -> StoreReader {
        StoreReader {
            ledger: self.ledger.reader(),
            rx_next: self.tx_next.subscribe(),
            index: Arc::clone(&self.index),
        }
    }
}

/// Reads the store while the node writes it.
#[derive(Clone)]
pub struct StoreReader {
    ledger: LedgerReader,
    rx_next: watch::Receiver<u64>,
    index: Arc<Mutex<BatchIndex>>,
}

impl StoreReader {
    /// The next block to be appended (blocks below it are readable).
    pub fn next_block(&self) -> u64 {
        *self.rx_next.borrow()
    }

    /// A receiver of the next block number, changed on every append.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.rx_next.clone()
    }

    /// The block holding batch (`shard`, `primary`, `seq`) with `digest`, when it was
    /// appended since the node started.
    pub fn find_batch(&self, shard: ShardId, primary: PartyId, seq: u64, digest: Digest32) -> Option<u64> {
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .blocks
            .get(&(shard, primary, seq, digest))
            .copied()
    }

    /// Block `number`, if held (blocking file read); `headers_only` drops the requests
    /// (not a config block's: see [`encode_block`]).
    pub fn block(&self, number: u64, headers_only: bool) -> Result<Option<pb::OrderedBlock>, StoreError> {
        let Some(entry) = self.ledger.get_block(number)? else {
            return Ok(None);
        };
        let mut block =
            pb::OrderedBlock::decode(entry.block.as_slice()).map_err(|e| StoreError::Corrupt {
                number,
                reason: e.to_string(),
            })?;
        let config = block
            .header
            .as_ref()
            .is_some_and(|h| h.shard == arma::CONFIG_SHARD);
        if headers_only && !config {
            block.requests.clear();
        }
        Ok(Some(block))
    }
}
