//! Crash cases that need the writer's internals: a record in the journal whose index
//! update never happened, and index updates past the last checkpoint.

use std::num::NonZeroU32;

use types::{Height, Status, TxId};

use super::*;

fn config() -> LedgerConfig {
    LedgerConfig {
        checkpoint_every: NonZeroU32::new(4).unwrap(),
        ..LedgerConfig::default()
    }
}

fn txs(n: u64) -> Vec<LedgerTx> {
    (0..3)
        .map(|i| LedgerTx {
            id: TxId(format!("tx-{n}-{i}")),
            status: Some(Status::Committed),
        })
        .collect()
}

fn fill(l: &mut Ledger, from: u64, to: u64) {
    for n in from..to {
        l.append(n, format!("block {n}").as_bytes(), &txs(n)).unwrap();
    }
}

fn check(l: &Ledger, to: u64) {
    for n in 0..to {
        assert_eq!(l.get_block(n).unwrap().unwrap().txs, txs(n), "block {n}");
        for i in 0..3 {
            let loc = l.tx(&TxId(format!("tx-{n}-{i}"))).unwrap().unwrap();
            assert_eq!(loc.height, Height::new(n, i), "tx {n}-{i}");
        }
    }
    assert_eq!(l.get_block(to).unwrap(), None);
}

/// Drops the ledger like a crash would: no checkpoint.
fn crash(mut l: Ledger) {
    l.checkpoint_on_drop = false;
}

#[test]
fn crash_between_journal_append_and_index_update() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), config()).unwrap();
    fill(&mut l, 0, 10); // checkpoints after blocks 3 and 7: watermark 8
    // Block 10 reaches the journal; the process dies before indexing it.
    l.journal
        .append(&entry::encode(10, b"block 10", &txs(10)))
        .unwrap();
    crash(l);
    let mut l = Ledger::open(dir.path(), config()).unwrap();
    assert_eq!(l.reindexed_on_open(), 3, "blocks 8, 9 and 10");
    assert_eq!(l.next_block(), 11);
    check(&l, 11);
    fill(&mut l, 11, 13);
    drop(l);
    let l = Ledger::open(dir.path(), config()).unwrap();
    assert_eq!(l.reindexed_on_open(), 0);
    check(&l, 13);
}

#[test]
fn index_updates_past_the_checkpoint_are_redone_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), config()).unwrap();
    fill(&mut l, 0, 10);
    let count = l.tx_count;
    crash(l);
    let l = Ledger::open(dir.path(), config()).unwrap();
    assert_eq!(l.reindexed_on_open(), 2);
    // The slots written before the crash were found, not inserted twice.
    assert_eq!(l.tx_count, count);
    check(&l, 10);
}
