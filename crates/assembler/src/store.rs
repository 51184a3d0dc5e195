//! The party's block ledger: every block as `fabrx.v1.OrderedBlock` bytes (header,
//! requests, proof) in a [`ledger::Ledger`], indexed by number and by the tx id of each
//! request that decodes as an envelope. Readers learn of appends through a watch
//! channel of the next block number.

use std::path::Path;
use std::sync::Arc;

use arma::{DecisionProof, OrderedHeader};
use ledger::{Ledger, LedgerConfig, LedgerReader, LedgerTx};
use prost::Message as _;
use tokio::sync::watch;
use types::{Status, TxId};
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

/// The tx ids of a block's requests, for the ledger's index: a request that is not an
/// envelope with a tx id is kept in the block, not indexed.
fn ledger_txs(requests: &[arma::Request]) -> Vec<LedgerTx> {
    requests
        .iter()
        .map(|r| match pb::Envelope::decode(&r[..]) {
            Ok(env) if !env.tx_id.is_empty() => LedgerTx {
                id: TxId(env.tx_id),
                status: None,
            },
            _ => LedgerTx {
                id: TxId(String::new()),
                status: Some(Status::MalformedBadEnvelope),
            },
        })
        .collect()
}

/// The wire form of a block (`headers_only`: without its requests).
pub fn encode_block(block: &Block, headers_only: bool) -> pb::OrderedBlock {
    pb::OrderedBlock {
        header: Some((&block.header).into()),
        requests: if headers_only {
            Vec::new()
        } else {
            block.requests.iter().map(|r| r.to_vec()).collect()
        },
        proof: Some(block.proof.as_ref().into()),
    }
}

/// The block store (single writer).
pub struct BlockStore {
    ledger: Ledger,
    tx_next: watch::Sender<u64>,
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
        Ok(BlockStore { ledger, tx_next })
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
        self.ledger
            .append(block.header.number, &bytes, &ledger_txs(&block.requests))?;
        self.tx_next.send_replace(self.ledger.next_block());
        Ok(())
    }

    /// A reader that sees every append once it returned.
    pub fn reader(&self) -> StoreReader {
        StoreReader {
            ledger: self.ledger.reader(),
            rx_next: self.tx_next.subscribe(),
        }
    }
}

/// Reads the store while the node writes it.
#[derive(Clone)]
pub struct StoreReader {
    ledger: LedgerReader,
    rx_next: watch::Receiver<u64>,
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

    /// Block `number`, if held (blocking file read); `headers_only` drops the requests.
    pub fn block(&self, number: u64, headers_only: bool) -> Result<Option<pb::OrderedBlock>, StoreError> {
        let Some(entry) = self.ledger.get_block(number)? else {
            return Ok(None);
        };
        let mut block =
            pb::OrderedBlock::decode(entry.block.as_slice()).map_err(|e| StoreError::Corrupt {
                number,
                reason: e.to_string(),
            })?;
        if headers_only {
            block.requests.clear();
        }
        Ok(Some(block))
    }

    /// Where the tx with id `id` is (block number and index), if any block holds it.
    pub fn tx(&self, id: &TxId) -> Result<Option<types::Height>, StoreError> {
        Ok(self.ledger.tx(id)?.map(|l| l.height))
    }
}
