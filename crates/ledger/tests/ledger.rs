//! The ledger on disk: lookups, reopen without re-indexing, torn tails, order, first
//! block, table growth, lost index files, concurrent readers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};

use ledger::{BlockEntry, ENTRY_HEADER_LEN, Error, Ledger, LedgerConfig, LedgerTx, TxLocation};
use types::{Height, Status, TxId};

fn tx(id: &str, status: Option<Status>) -> LedgerTx {
    LedgerTx {
        id: TxId(id.into()),
        status,
    }
}

fn txs(n: u64) -> Vec<LedgerTx> {
    (0..(n % 4))
        .map(|i| {
            let status = match (n + i) % 3 {
                0 => Some(Status::Committed),
                1 => Some(Status::AbortedMvccConflict),
                _ => None,
            };
            tx(&format!("tx-{n}-{i}"), status)
        })
        .collect()
}

fn body(n: u64) -> Vec<u8> {
    format!("block {n} {}", "z".repeat((n % 5) as usize)).into_bytes()
}

fn fill(l: &mut Ledger, from: u64, to: u64) {
    for n in from..to {
        l.append(n, &body(n), &txs(n)).unwrap();
    }
}

fn expect_all(l: &Ledger, from: u64, to: u64) {
    for n in from..to {
        let want = BlockEntry {
            number: n,
            block: body(n),
            txs: txs(n),
        };
        assert_eq!(l.get_block(n).unwrap(), Some(want), "block {n}");
        for (i, t) in txs(n).iter().enumerate() {
            let loc = TxLocation {
                height: Height::new(n, i as u32),
                status: t.status,
            };
            assert_eq!(l.tx(&t.id).unwrap(), Some(loc), "tx {n}-{i}");
        }
    }
}

fn small() -> LedgerConfig {
    LedgerConfig {
        segment_bytes: NonZeroU64::new(400).unwrap(),
        checkpoint_every: NonZeroU32::new(8).unwrap(),
        ..LedgerConfig::default()
    }
}

fn last_segment(dir: &Path) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "blocks"))
        .collect();
    v.sort();
    v.pop().unwrap()
}

#[test]
fn lookups_by_number_and_tx_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), small()).unwrap();
    assert_eq!((l.first_block(), l.next_block()), (0, 0));
    assert_eq!(l.get_block(0).unwrap(), None);
    fill(&mut l, 0, 30);
    expect_all(&l, 0, 30);
    assert_eq!(l.get_block(30).unwrap(), None);
    assert_eq!(l.tx(&TxId("tx-5-3".into())).unwrap(), None);
    assert_eq!(l.tx(&TxId("nope".into())).unwrap(), None);
}

#[test]
fn first_occurrence_wins_and_unstored_statuses_are_not_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), LedgerConfig::default()).unwrap();
    l.append(0, b"0", &[tx("a", Some(Status::AbortedSignatureInvalid))])
        .unwrap();
    l.append(
        1,
        b"1",
        &[
            tx("a", Some(Status::RejectedDuplicateTxId)),
            tx("b", Some(Status::MalformedBadEnvelope)),
            tx("c", None),
            tx("c", Some(Status::Committed)),
        ],
    )
    .unwrap();
    let a = Some(TxLocation {
        height: Height::new(0, 0),
        status: Some(Status::AbortedSignatureInvalid),
    });
    let c = Some(TxLocation {
        height: Height::new(1, 2),
        status: None,
    });
    assert_eq!(l.tx(&TxId("a".into())).unwrap(), a);
    assert_eq!(l.tx(&TxId("b".into())).unwrap(), None);
    assert_eq!(l.tx(&TxId("c".into())).unwrap(), c);
    drop(l);
    let l = Ledger::open(dir.path(), LedgerConfig::default()).unwrap();
    assert_eq!(l.tx(&TxId("a".into())).unwrap(), a);
    assert_eq!(l.tx(&TxId("b".into())).unwrap(), None);
    assert_eq!(l.tx(&TxId("c".into())).unwrap(), c);
    assert_eq!(l.get_block(1).unwrap().unwrap().txs.len(), 4);
}

#[test]
fn reopen_reads_the_indexes_instead_of_rebuilding_them() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut l = Ledger::open(dir.path(), small()).unwrap();
        // Enough txs to grow the tx table past its initial 1024 slots.
        fill(&mut l, 0, 1500);
        assert_eq!(l.reindexed_on_open(), 0);
    }
    let table = std::fs::metadata(dir.path().join("txs.idx")).unwrap().len();
    assert!(table > 1024 * 32, "table of {table} bytes");
    let mut l = Ledger::open(dir.path(), small()).unwrap();
    assert_eq!(l.reindexed_on_open(), 0, "a clean reopen indexes nothing again");
    assert_eq!(l.next_block(), 1500);
    expect_all(&l, 0, 1500);
    fill(&mut l, 1500, 1510);
    expect_all(&l, 1490, 1510);
}

#[test]
fn lost_index_files_are_rebuilt_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut l = Ledger::open(dir.path(), small()).unwrap();
        fill(&mut l, 0, 50);
    }
    std::fs::remove_file(dir.path().join("index.meta")).unwrap();
    let l = Ledger::open(dir.path(), small()).unwrap();
    assert_eq!(l.reindexed_on_open(), 50);
    expect_all(&l, 0, 50);
    drop(l);
    std::fs::write(dir.path().join("index.meta"), b"garbage").unwrap();
    let l = Ledger::open(dir.path(), small()).unwrap();
    assert_eq!(l.reindexed_on_open(), 50);
    expect_all(&l, 0, 50);
}

#[test]
fn torn_tail_at_every_byte_of_the_last_block() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut l = Ledger::open(dir.path(), LedgerConfig::default()).unwrap();
        fill(&mut l, 0, 8);
    }
    let path = last_segment(dir.path());
    let full = std::fs::read(&path).unwrap();
    let last_len =
        ENTRY_HEADER_LEN + 4 + txs(7).iter().map(|t| 8 + t.id.0.len()).sum::<usize>() + body(7).len();
    let before = full.len() - last_len;
    for cut in before..full.len() {
        std::fs::write(&path, &full[..cut]).unwrap();
        let mut l = Ledger::open(dir.path(), LedgerConfig::default()).unwrap();
        assert_eq!(l.next_block(), 7, "cut {cut}");
        assert_eq!(l.get_block(7).unwrap(), None);
        assert_eq!(l.tx(&TxId("tx-7-0".into())).unwrap(), None, "cut {cut}");
        expect_all(&l, 0, 7);
        fill(&mut l, 7, 8);
        expect_all(&l, 7, 8);
        drop(l);
        assert_eq!(std::fs::read(&path).unwrap(), full, "cut {cut}");
    }
}

#[test]
fn corruption_before_the_tail_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut l = Ledger::open(dir.path(), LedgerConfig::default()).unwrap();
        fill(&mut l, 0, 4);
    }
    let path = last_segment(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[ENTRY_HEADER_LEN + 1] ^= 0x08;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        Ledger::open(dir.path(), LedgerConfig::default()),
        Err(Error::Journal {
            source: journal::Error::Corrupt { seq: 0, .. }
        })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn consecutive_block_numbers_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), LedgerConfig::default()).unwrap();
    fill(&mut l, 0, 3);
    for bad in [0, 2, 4, u64::MAX] {
        assert!(
            matches!(l.append(bad, b"x", &[]), Err(Error::OutOfOrder { expected: 3, got }) if got == bad),
            "append {bad}"
        );
    }
    assert_eq!(l.next_block(), 3);
    fill(&mut l, 3, 4);
    expect_all(&l, 0, 4);
}

#[test]
fn first_block_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let at = |first| LedgerConfig {
        first_block: Some(first),
        ..LedgerConfig::default()
    };
    {
        let mut l = Ledger::open(dir.path(), at(100)).unwrap();
        assert_eq!((l.first_block(), l.next_block()), (100, 100));
        assert!(matches!(
            l.append(0, b"", &[]),
            Err(Error::OutOfOrder {
                expected: 100,
                got: 0
            })
        ));
        fill(&mut l, 100, 105);
        assert_eq!(l.get_block(99).unwrap(), None);
    }
    let l = Ledger::open(dir.path(), LedgerConfig::default()).unwrap();
    assert_eq!(
        (l.first_block(), l.next_block(), l.reindexed_on_open()),
        (100, 105, 0)
    );
    expect_all(&l, 100, 105);
    drop(l);
    assert!(matches!(
        Ledger::open(dir.path(), at(0)),
        Err(Error::FirstBlockMismatch {
            stored: 100,
            configured: 0
        })
    ));
}

#[test]
fn one_writer_many_readers() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path(), small()).unwrap();
    assert!(matches!(
        Ledger::open(dir.path(), small()),
        Err(Error::Journal {
            source: journal::Error::Locked { .. }
        })
    ));
    let reader = l.reader();
    let handle = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = 0;
        while seen < 300 {
            assert!(std::time::Instant::now() < deadline, "reader stuck at {seen}");
            let next = reader.next_block();
            for n in seen..next {
                assert_eq!(reader.get_block(n).unwrap().unwrap().block, body(n));
                if let Some(t) = txs(n).first() {
                    assert_eq!(reader.tx(&t.id).unwrap().unwrap().height, Height::new(n, 0));
                }
            }
            seen = next;
            std::thread::yield_now();
        }
        seen
    });
    fill(&mut l, 0, 300);
    assert_eq!(handle.join().unwrap(), 300);
}
