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

/// The tx table in memory (the default) and in its file only.
fn configs() -> [LedgerConfig; 2] {
    let file_only = LedgerConfig {
        tx_table_memory_bytes: 0,
        ..config()
    };
    [config(), file_only]
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
    for config in configs() {
        crash_between_journal_append_and_index_update_with(&config);
    }
}

fn crash_between_journal_append_and_index_update_with(config: &LedgerConfig) {
    let config = || config.clone();
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
    for config in configs() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path(), config.clone()).unwrap();
        fill(&mut l, 0, 10);
        let count = l.tx_count;
        crash(l);
        let l = Ledger::open(dir.path(), config).unwrap();
        assert_eq!(l.reindexed_on_open(), 2);
        // The slots of blocks 8 and 9 (in memory and never flushed, or written in the
        // file) are counted once, not twice.
        assert_eq!(l.tx_count, count);
        check(&l, 10);
    }
}

/// A table in memory grows fourfold while the result fits the budget, then twofold (it
/// leaves memory at the same size as when it always grew twofold); every tx is found
/// after each growth, across a crash.
#[test]
fn a_tx_table_grows_fourfold_while_it_fits_in_memory() {
    let capacity = |l: &Ledger| l.reader.view().table.capacity();
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), config()).unwrap();
    assert_eq!(capacity(&l), 1024);
    fill(&mut l, 0, 239); // 717 txs: 70 % of 1,024 slots is 716.8
    assert_eq!(capacity(&l), 4096);
    fill(&mut l, 239, 956); // 2,868 txs
    assert_eq!(capacity(&l), 16_384);
    check(&l, 956);
    crash(l);
    let l = Ledger::open(dir.path(), config()).unwrap();
    assert_eq!(capacity(&l), 16_384);
    check(&l, 956);
    drop(l);
    // A budget of 8,192 slots: 4,096 fits fourfold, 16,384 does not (8,192 does).
    let budget = LedgerConfig {
        tx_table_memory_bytes: 8192 * 32,
        ..config()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), budget).unwrap();
    fill(&mut l, 0, 956);
    assert_eq!(capacity(&l), 8192);
    assert!(l.reader.view().table.in_memory());
    check(&l, 956);
}

/// The tx table leaves memory when it grows past the budget (2,048 slots here) and
/// keeps answering, across a crash and a clean reopen.
#[test]
fn a_tx_table_past_its_memory_budget_lives_in_its_file() {
    let small = LedgerConfig {
        tx_table_memory_bytes: 2048 * 32,
        ..config()
    };
    let in_memory = |l: &Ledger| l.reader.view().table.in_memory();
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), small.clone()).unwrap();
    fill(&mut l, 0, 300); // 900 txs: 2,048 slots
    assert!(in_memory(&l));
    fill(&mut l, 300, 601); // 1,803 txs: 4,096 slots
    assert!(!in_memory(&l));
    check(&l, 601);
    crash(l);
    let mut l = Ledger::open(dir.path(), small).unwrap();
    assert_eq!(l.reindexed_on_open(), 1);
    assert!(!in_memory(&l));
    check(&l, 601);
    fill(&mut l, 601, 605);
    drop(l);
    // A larger budget takes the same file back into memory.
    let l = Ledger::open(dir.path(), config()).unwrap();
    assert!(in_memory(&l));
    check(&l, 605);
}
