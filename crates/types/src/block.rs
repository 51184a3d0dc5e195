//! The nouns every role shares: a block, a batch id, a transaction at a height, and a
//! transaction's outcome. Each is one type here and is converted to and from protobuf once,
//! in `wire`.

use crate::digest::Digest32;
use crate::{Height, Status, Tx, TxId};
use std::sync::Arc;

/// A party of the network (Arma: parties are numbered 1..N).
pub type PartyId = u32;

/// A shard of the ordering service (shards are numbered 0..S−1).
pub type ShardId = u32;

/// The id of a batch cut by a shard's primary batcher (Arma §4): the shard, the party that
/// was primary when it was cut, and the primary's sequence number for that shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BatchId {
    /// The shard.
    pub shard: ShardId,
    /// The party whose batcher cut the batch.
    pub primary: PartyId,
    /// The primary's sequence number in the shard.
    pub seq: u64,
}

impl BatchId {
    /// A batch id.
    pub fn new(shard: ShardId, primary: PartyId, seq: u64) -> BatchId {
        BatchId { shard, primary, seq }
    }
}

impl std::fmt::Display for BatchId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.shard, self.primary, self.seq)
    }
}

/// A transaction at its place in the ledger: id, height and the decoded body (shared by
/// reference down the pipeline: decode once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockTx {
    /// The tx id.
    pub id: TxId,
    /// Where the tx sits in the ledger.
    pub height: Height,
    /// The decoded transaction.
    pub tx: Arc<Tx>,
}

impl BlockTx {
    /// A tx at a height.
    pub fn new(id: TxId, height: Height, tx: Arc<Tx>) -> BlockTx {
        BlockTx { id, height, tx }
    }
}

/// The final status of one transaction and the height it belongs to (the stored one for a
/// resubmitted id).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TxOutcome {
    /// The tx id.
    pub id: TxId,
    /// Its status.
    pub status: Status,
    /// The height the status belongs to.
    pub height: Height,
}

impl TxOutcome {
    /// An outcome.
    pub fn new(id: TxId, status: Status, height: Height) -> TxOutcome {
        TxOutcome { id, status, height }
    }
}

/// A transaction handed to the validator-committer: a tx at a height, plus a status that
/// was decided upstream (structure or signature), which the validator-committer stores and
/// nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcTx {
    /// The tx id.
    pub id: TxId,
    /// Where the tx sits in the ledger.
    pub height: Height,
    /// The decoded transaction.
    pub tx: Arc<Tx>,
    /// A status decided upstream: stored (when storable) and nothing else.
    pub prelim: Option<Status>,
}

impl From<BlockTx> for VcTx {
    fn from(t: BlockTx) -> VcTx {
        VcTx {
            id: t.id,
            height: t.height,
            tx: t.tx,
            prelim: None,
        }
    }
}

/// A chained block header (Arma: one block per ordered batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockHeader {
    /// Block number, from 0.
    pub number: u64,
    /// Hash of the previous block's header (zero for block 0).
    pub previous_hash: Digest32,
    /// Hash of the block's data (for an ordered block: the batch digest).
    pub data_hash: Digest32,
}

/// Where an ordered block came from, and who vouched for it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockMetadata {
    /// The ordered batch this block carries (`None` for blocks made without an orderer,
    /// e.g. a block file).
    pub batch: Option<BatchId>,
    /// The consenter decision that ordered it.
    pub decision: u64,
    /// Its index among the decision's blocks.
    pub index_in_decision: u32,
    /// Consenters' signatures over the header: (party, signature bytes).
    pub signatures: Vec<(PartyId, Vec<u8>)>,
}

/// A block as the committer consumes it: the header, the decoded transactions with their
/// ids in block order, and the metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Block {
    /// The header.
    pub header: BlockHeader,
    /// The txs in order: id and decoded body.
    pub txs: Vec<(TxId, Arc<Tx>)>,
    /// Metadata.
    pub metadata: BlockMetadata,
    /// Txs whose envelope failed the structural checks before their body could be used
    /// (an ordered block carries raw envelopes): their index and status, by index. Their
    /// body in `txs` is an empty `Tx`; the committer gives them this status.
    pub refused: Vec<(u32, Status)>,
}

impl Block {
    /// A block with only a number and txs (no orderer: a block file, a workload).
    pub fn unordered(number: u64, txs: Vec<(TxId, Arc<Tx>)>) -> Block {
        Block {
            header: BlockHeader {
                number,
                ..BlockHeader::default()
            },
            txs,
            metadata: BlockMetadata::default(),
            refused: Vec::new(),
        }
    }

    /// The status a tx of this block was refused with before the committer saw its
    /// body, if any.
    pub fn refused_status(&self, index: usize) -> Option<Status> {
        self.refused
            .iter()
            .find(|(i, _)| usize::try_from(*i).is_ok_and(|i| i == index))
            .map(|(_, s)| *s)
    }

    /// The block number.
    pub fn number(&self) -> u64 {
        self.header.number
    }

    /// The txs with their heights in this block. Fails only for a block of more than
    /// `u32::MAX` txs, which no height can address.
    pub fn block_txs(&self) -> crate::Result<Vec<BlockTx>> {
        let number = self.number();
        self.txs
            .iter()
            .enumerate()
            .map(|(i, (id, tx))| {
                let index = u32::try_from(i).map_err(|_| crate::Error::TooManyTxs { block: number })?;
                Ok(BlockTx::new(id.clone(), Height::new(number, index), tx.clone()))
            })
            .collect()
    }

    /// [`Block::block_txs`], moving the txs out of the block (it is left without txs,
    /// its header, metadata and refused statuses kept) instead of copying each id.
    pub fn take_block_txs(&mut self) -> crate::Result<Vec<BlockTx>> {
        let number = self.number();
        if u32::try_from(self.txs.len().saturating_sub(1)).is_err() {
            return Err(crate::Error::TooManyTxs { block: number });
        }
        Ok(std::mem::take(&mut self.txs)
            .into_iter()
            .zip(0u32..)
            .map(|((id, tx), index)| BlockTx::new(id, Height::new(number, index), tx))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_txs_carry_heights_in_order() {
        let tx = Arc::new(Tx::default());
        let b = Block::unordered(7, vec![("a".into(), tx.clone()), ("b".into(), tx.clone())]);
        let txs = b.block_txs().unwrap();
        assert_eq!(txs[0], BlockTx::new("a".into(), Height::new(7, 0), tx.clone()));
        assert_eq!(txs[1].height, Height::new(7, 1));
        assert_eq!(b.number(), 7);
        let mut taken = b.clone();
        assert_eq!(taken.take_block_txs().unwrap(), txs);
        assert!(taken.txs.is_empty());
        assert_eq!(
            (taken.header, taken.metadata, taken.refused),
            (b.header, b.metadata, b.refused)
        );
    }

    #[test]
    fn batch_id_orders_by_shard_then_primary_then_seq() {
        assert!(BatchId::new(0, 2, 9) < BatchId::new(1, 1, 0));
        assert!(BatchId::new(1, 1, 3) < BatchId::new(1, 1, 4));
        assert_eq!(BatchId::new(1, 2, 3).to_string(), "1/2/3");
    }
}
