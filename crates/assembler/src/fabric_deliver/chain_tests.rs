//! Checkpoints and cursors: a walk from any checkpoint gives the blocks a walk from the
//! genesis block gives; the checkpoints stay within their bound.

use std::sync::Arc;

use super::*;
use arma::{DecisionProof, OrderedHeader};
use bft::InstanceId;
use types::digest::batch_digest;

fn nz64(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

fn nzu(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}

fn point(tag: u8) -> Point {
    Point {
        hash: [tag; 32],
        tx_count: u64::from(tag),
    }
}

/// `n` ledger blocks, block `i` with `1 + i % 3` requests.
fn ledger(n: u64) -> Vec<pb::OrderedBlock> {
    let mut previous = [0u8; 32];
    (0..n)
        .map(|i| {
            let requests: Vec<arma::Request> = (0..1 + i % 3)
                .map(|j| Arc::from(format!("tx-{i}-{j}").into_bytes()))
                .collect();
            let header = OrderedHeader {
                number: i,
                previous_hash: previous,
                digest: batch_digest(&requests),
                shard: 0,
                term: 0,
                primary: 1,
                seq: i + 1,
                decision: i + 1,
                index: 0,
                tx_count: u32::try_from(requests.len()).unwrap(),
            };
            previous = header.hash();
            let block = crate::core::Block {
                header,
                requests,
                proof: Arc::new(DecisionProof {
                    instance: InstanceId(0),
                    decision: i + 1,
                    view: 0,
                    requests_root: [0; 32],
                    metadata: Vec::new(),
                    signatures: Vec::new(),
                }),
            };
            crate::store::encode_block(&block, false)
        })
        .collect()
}

#[test]
fn checkpoints_are_recorded_in_order_and_found_below_a_block() {
    let mut c = Checkpoints::new(point(0), nz64(4), nzu(100));
    assert_eq!(c.nearest(0), (0, point(0)));
    assert_eq!(c.nearest(1_000), (0, point(0)));
    c.record(3, point(3)); // not a checkpoint block
    c.record(8, point(8)); // not the next checkpoint (4 is)
    assert_eq!(c.len(), 1);
    c.record(4, point(4));
    c.record(4, point(99)); // already held
    c.record(8, point(8));
    assert_eq!(c.len(), 3);
    assert_eq!(c.nearest(3), (0, point(0)));
    assert_eq!(c.nearest(4), (4, point(4)));
    assert_eq!(c.nearest(7), (4, point(4)));
    assert_eq!(c.nearest(8), (8, point(8)));
    assert_eq!(c.nearest(u64::MAX), (8, point(8)));
}

#[test]
fn past_the_bound_the_interval_doubles_and_every_other_point_goes() {
    let mut c = Checkpoints::new(point(0), nz64(2), nzu(4));
    for n in 1..=40u8 {
        c.record(u64::from(n), point(n));
        assert!(c.len() <= 4, "{} points after block {n}", c.len());
        assert!(c.bytes() <= 4 * Point::BYTES);
    }
    assert_eq!(Point::BYTES, 40);
    // Every point held is still the one at its block.
    let interval = c.interval();
    assert!(interval > 2);
    for k in 0..c.len() as u64 {
        let block = k * interval;
        assert_eq!(c.nearest(block), (block, point(u8::try_from(block).unwrap())));
    }
}

#[test]
fn a_walk_from_a_checkpoint_gives_the_blocks_of_a_walk_from_genesis() {
    let blocks = ledger(30);
    let genesis = Point {
        hash: [9; 32],
        tx_count: GENESIS_TX_COUNT,
    };
    let mut checkpoints = Checkpoints::new(genesis, nz64(8), nzu(100));
    let mut from_genesis = Vec::new();
    let mut cursor = Cursor::after(0, genesis);
    for b in &blocks {
        let number = cursor.next();
        let (block, point) = cursor.advance(b, Content::Block).unwrap();
        checkpoints.record(number, point);
        from_genesis.push(block);
    }
    assert_eq!(checkpoints.len(), 4); // blocks 0, 8, 16, 24
    // The cumulative tx count: 1 + the txs of every data block so far.
    let total: u64 = 1 + (0..30u64).map(|i| 1 + i % 3).sum::<u64>();
    let last = from_genesis.last().unwrap();
    let orderer =
        last.metadata.as_ref().unwrap().metadata[common::BlockMetadataIndex::Orderer as usize].clone();
    let meta = <wire::fabric::orderer::AssemblerBlockMetadata as prost::Message>::decode(orderer.as_slice())
        .unwrap();
    assert_eq!(meta.transaction_count, total);
    for start in [1u64, 7, 8, 9, 17, 25, 30] {
        let (at, point) = checkpoints.nearest(start - 1);
        let mut cursor = Cursor::after(at, point);
        let mut served = Vec::new();
        while cursor.next() <= 30 {
            let number = cursor.next();
            let (block, _) = cursor
                .advance(&blocks[cursor.next_ledger() as usize], Content::Block)
                .unwrap();
            if number >= start {
                served.push(block);
            }
        }
        assert_eq!(served, from_genesis[start as usize - 1..], "from block {start}");
    }
}

#[test]
fn a_cursor_takes_only_the_next_ledger_block() {
    let blocks = ledger(3);
    let mut cursor = Cursor::after(0, point(0));
    assert_eq!(
        cursor.advance(&blocks[1], Content::Block),
        Err(ChainError::OutOfOrder {
            expected: 0,
            got: Some(1)
        })
    );
    let mut headerless = blocks[0].clone();
    headerless.header = None;
    assert!(matches!(
        cursor.advance(&headerless, Content::Block),
        Err(ChainError::OutOfOrder { got: None, .. })
    ));
    // A tx count that overflows.
    let mut full = Cursor::after(
        0,
        Point {
            hash: [0; 32],
            tx_count: u64::MAX,
        },
    );
    assert_eq!(
        full.advance(&blocks[0], Content::Block),
        Err(ChainError::TxCount { number: 1 })
    );
    // Headers with signatures: no data, the same header.
    let (whole, _) = cursor.clone().advance(&blocks[0], Content::Block).unwrap();
    let (bare, _) = cursor.advance(&blocks[0], Content::HeaderWithSig).unwrap();
    assert_eq!(bare.header, whole.header);
    assert!(bare.data.unwrap().data.is_empty());
    assert_eq!(whole.data.unwrap().data.len(), 1);
}
