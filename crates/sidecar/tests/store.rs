//! The block store on disk: append and reopen, torn tails at every byte, corruption in
//! the middle, order, segments, first block, many blocks.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use sidecar::Error;
use sidecar::store::{BlockStore, HEADER_LEN, StoreConfig, StoredBlock};
use std::path::{Path, PathBuf};
use types::{Height, Status, TxId};

fn statuses(n: u64, count: usize) -> Vec<(TxId, Status)> {
    (0..count)
        .map(|i| {
            let s = match (n as usize + i) % 3 {
                0 => Status::Committed,
                1 => Status::AbortedMvccConflict,
                _ => Status::MalformedNoWrites,
            };
            (TxId(format!("tx-{n}-{i}")), s)
        })
        .collect()
}

fn body(n: u64) -> Vec<u8> {
    format!("block {n} body {}", "x".repeat((n % 7) as usize)).into_bytes()
}

fn fill(store: &mut BlockStore, from: u64, to: u64) {
    for n in from..to {
        store.append(n, &body(n), &statuses(n, (n % 4) as usize)).unwrap();
    }
}

fn expect_block(store: &BlockStore, n: u64) {
    assert_eq!(
        store.get_block(n).unwrap(),
        Some(StoredBlock {
            number: n,
            block: body(n),
            statuses: statuses(n, (n % 4) as usize),
        }),
        "block {n}"
    );
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "blocks"))
        .collect();
    v.sort();
    v
}

fn small_segments() -> StoreConfig {
    StoreConfig {
        segment_bytes: 300,
        ..StoreConfig::default()
    }
}

#[test]
fn append_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = BlockStore::open(dir.path()).unwrap();
        assert_eq!((store.first_block(), store.next_block()), (0, 0));
        assert_eq!(store.get_block(0).unwrap(), None);
        fill(&mut store, 0, 10);
        assert_eq!(store.next_block(), 10);
        expect_block(&store, 3);
    }
    let mut store = BlockStore::open(dir.path()).unwrap();
    assert_eq!(store.next_block(), 10);
    for n in 0..10 {
        expect_block(&store, n);
    }
    assert_eq!(store.get_block(10).unwrap(), None);
    // Block 7 holds three txs: (7 + i) % 3 picks their statuses.
    assert_eq!(
        store.tx_status(&TxId("tx-7-0".into())),
        Some((Status::AbortedMvccConflict, Height::new(7, 0)))
    );
    assert_eq!(
        store.tx_status(&TxId("tx-7-2".into())),
        Some((Status::Committed, Height::new(7, 2)))
    );
    assert_eq!(store.tx_status(&TxId("tx-7-3".into())), None);
    fill(&mut store, 10, 12);
    expect_block(&store, 11);
}

#[test]
fn empty_block_and_large_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = BlockStore::open_with(dir.path(), small_segments()).unwrap();
    store.append(0, b"", &[]).unwrap();
    let big = vec![0xabu8; 10_000];
    store.append(1, &big, &statuses(1, 3)).unwrap();
    store.append(2, b"after", &[]).unwrap();
    drop(store);
    let store = BlockStore::open_with(dir.path(), small_segments()).unwrap();
    assert_eq!(store.get_block(0).unwrap().unwrap().block, b"");
    assert_eq!(store.get_block(1).unwrap().unwrap().block, big);
    assert_eq!(store.get_block(2).unwrap().unwrap().block, b"after");
}

#[test]
fn out_of_order_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = BlockStore::open(dir.path()).unwrap();
    fill(&mut store, 0, 3);
    for bad in [0, 2, 4, u64::MAX] {
        match store.append(bad, b"x", &[]) {
            Err(Error::StoreOutOfOrder { expected: 3, got }) => assert_eq!(got, bad),
            other => panic!("append {bad}: {other:?}"),
        }
    }
    assert_eq!(store.next_block(), 3);
    expect_block(&store, 2);
    store.append(3, &body(3), &statuses(3, 3)).unwrap();
}

#[test]
fn duplicate_ids_and_unstored_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = BlockStore::open(dir.path()).unwrap();
    let a = TxId("a".into());
    store
        .append(0, b"0", &[(a.clone(), Status::AbortedSignatureInvalid)])
        .unwrap();
    store
        .append(
            1,
            b"1",
            &[
                (a.clone(), Status::RejectedDuplicateTxId),
                (TxId("b".into()), Status::MalformedBadEnvelope),
                (a.clone(), Status::Committed),
            ],
        )
        .unwrap();
    let expect = Some((Status::AbortedSignatureInvalid, Height::new(0, 0)));
    assert_eq!(store.tx_status(&a), expect);
    assert_eq!(store.tx_status(&TxId("b".into())), None);
    drop(store);
    let store = BlockStore::open(dir.path()).unwrap();
    assert_eq!(store.tx_status(&a), expect);
    assert_eq!(store.tx_status(&TxId("b".into())), None);
    // The block keeps every status as appended.
    assert_eq!(store.get_block(1).unwrap().unwrap().statuses.len(), 3);
}

#[test]
fn torn_tail_at_every_byte_of_the_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = {
        let mut store = BlockStore::open(dir.path()).unwrap();
        fill(&mut store, 0, 5);
        segments(dir.path()).pop().unwrap()
    };
    let full = std::fs::read(&path).unwrap();
    let mut store = BlockStore::open(dir.path()).unwrap();
    let before = {
        // Length of the file without its last record.
        let last = store.get_block(4).unwrap().unwrap();
        drop(store);
        let payload =
            4 + last.statuses.iter().map(|(id, _)| 8 + id.0.len()).sum::<usize>() + last.block.len();
        full.len() - HEADER_LEN - payload
    };
    for cut in before..full.len() {
        std::fs::write(&path, &full[..cut]).unwrap();
        store = BlockStore::open(dir.path()).unwrap();
        assert_eq!(store.next_block(), 4, "cut at {cut}");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            before as u64,
            "cut at {cut}"
        );
        expect_block(&store, 3);
        assert_eq!(store.get_block(4).unwrap(), None);
        assert_eq!(store.tx_status(&TxId("tx-4-0".into())), None);
        // The caller appends the block again.
        fill(&mut store, 4, 5);
        drop(store);
        assert_eq!(std::fs::read(&path).unwrap(), full, "cut at {cut}");
    }
}

#[test]
fn corrupt_last_record_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = BlockStore::open(dir.path()).unwrap();
        fill(&mut store, 0, 3);
    }
    let path = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let store = BlockStore::open(dir.path()).unwrap();
    assert_eq!(store.next_block(), 2);
}

#[test]
fn corruption_in_the_middle_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = BlockStore::open(dir.path()).unwrap();
        fill(&mut store, 0, 6);
    }
    let path = segments(dir.path()).pop().unwrap();
    let good = std::fs::read(&path).unwrap();
    // Every byte of the records of blocks 1..=4 (not the last record).
    let store = BlockStore::open(dir.path()).unwrap();
    let record_len = |n: u64| {
        let b = store.get_block(n).unwrap().unwrap();
        HEADER_LEN + 4 + b.statuses.iter().map(|(id, _)| 8 + id.0.len()).sum::<usize>() + b.block.len()
    };
    let start = record_len(0);
    let end: usize = (0..5).map(record_len).sum();
    drop(store);
    for i in start..end {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        match BlockStore::open(dir.path()) {
            Err(Error::StoreCorrupt { .. }) => {}
            other => panic!("flip at {i}: {other:?}"),
        }
        // Nothing was cut.
        assert_eq!(std::fs::read(&path).unwrap(), bad);
    }
    std::fs::write(&path, &good).unwrap();
    assert_eq!(BlockStore::open(dir.path()).unwrap().next_block(), 6);
}

#[test]
fn segments_roll_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = BlockStore::open_with(dir.path(), small_segments()).unwrap();
        fill(&mut store, 0, 40);
    }
    let segs = segments(dir.path());
    assert!(segs.len() > 3, "{} segments", segs.len());
    let mut store = BlockStore::open_with(dir.path(), small_segments()).unwrap();
    for n in 0..40 {
        expect_block(&store, n);
    }
    fill(&mut store, 40, 45);
    drop(store);

    // A torn tail in a segment that is not the last is corruption.
    let first = &segments(dir.path())[0];
    let bytes = std::fs::read(first).unwrap();
    std::fs::write(first, &bytes[..bytes.len() - 1]).unwrap();
    assert!(matches!(
        BlockStore::open(dir.path()),
        Err(Error::StoreCorrupt { .. })
    ));
    std::fs::write(first, &bytes).unwrap();

    // A missing segment in the middle is a gap: corruption.
    let segs = segments(dir.path());
    let second = std::fs::read(&segs[1]).unwrap();
    std::fs::remove_file(&segs[1]).unwrap();
    assert!(matches!(
        BlockStore::open(dir.path()),
        Err(Error::StoreCorrupt { .. })
    ));
    std::fs::write(&segs[1], second).unwrap();
    assert_eq!(BlockStore::open(dir.path()).unwrap().next_block(), 45);
}

#[test]
fn empty_last_segment_after_a_crash_while_rolling() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = BlockStore::open_with(dir.path(), small_segments()).unwrap();
        fill(&mut store, 0, 20);
    }
    // The next segment was created, its first record never written.
    std::fs::File::create(dir.path().join(format!("{:020}.blocks", 20))).unwrap();
    let mut store = BlockStore::open_with(dir.path(), small_segments()).unwrap();
    assert_eq!(store.next_block(), 20);
    fill(&mut store, 20, 30);
    drop(store);
    let store = BlockStore::open_with(dir.path(), small_segments()).unwrap();
    for n in 0..30 {
        expect_block(&store, n);
    }
}

#[test]
fn first_block() {
    let dir = tempfile::tempdir().unwrap();
    let later = StoreConfig {
        first_block: Some(100),
        ..StoreConfig::default()
    };
    {
        let mut store = BlockStore::open_with(dir.path(), later.clone()).unwrap();
        assert_eq!((store.first_block(), store.next_block()), (100, 100));
        assert!(matches!(
            store.append(0, b"", &[]),
            Err(Error::StoreOutOfOrder {
                expected: 100,
                got: 0
            })
        ));
        fill(&mut store, 100, 103);
        assert_eq!(store.get_block(99).unwrap(), None);
        assert_eq!(store.get_block(0).unwrap(), None);
    }
    // Adopted when not configured, refused when configured otherwise.
    assert_eq!(BlockStore::open(dir.path()).unwrap().next_block(), 103);
    let other = StoreConfig {
        first_block: Some(0),
        ..StoreConfig::default()
    };
    assert!(matches!(
        BlockStore::open_with(dir.path(), other),
        Err(Error::StoreFirstBlockMismatch {
            stored: 100,
            configured: 0
        })
    ));
    let store = BlockStore::open_with(dir.path(), later).unwrap();
    expect_block(&store, 102);
}

#[test]
fn one_writer_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlockStore::open(dir.path()).unwrap();
    assert!(matches!(
        BlockStore::open(dir.path()),
        Err(Error::StoreLocked { .. })
    ));
    drop(store);
    BlockStore::open(dir.path()).unwrap();
}

#[test]
fn reader_sees_appends() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = BlockStore::open_with(dir.path(), small_segments()).unwrap();
    let reader = store.reader();
    let handle = std::thread::spawn(move || {
        // Poll with a deadline until the writer is done; every visible block is whole.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = 0;
        while seen < 200 {
            assert!(std::time::Instant::now() < deadline, "reader stuck at {seen}");
            let next = reader.next_block();
            for n in seen..next {
                let b = reader.get_block(n).unwrap().unwrap();
                assert_eq!(b.block, body(n));
            }
            seen = next;
            std::thread::yield_now();
        }
        seen
    });
    fill(&mut store, 0, 200);
    assert_eq!(handle.join().unwrap(), 200);
}

#[test]
fn many_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        segment_bytes: 64 << 10,
        ..StoreConfig::default()
    };
    let count = 5_000;
    {
        let mut store = BlockStore::open_with(dir.path(), config.clone()).unwrap();
        fill(&mut store, 0, count);
    }
    let store = BlockStore::open_with(dir.path(), config).unwrap();
    assert_eq!(store.next_block(), count);
    for n in (0..count).step_by(97) {
        expect_block(&store, n);
    }
    assert_eq!(
        store.tx_status(&TxId(format!("tx-{}-1", count - 2))),
        Some((Status::AbortedMvccConflict, Height::new(count - 2, 1)))
    );
    assert!(segments(dir.path()).len() > 1);
}

#[test]
fn zero_filled_tail_after_power_loss_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = BlockStore::open(dir.path()).unwrap();
        fill(&mut store, 0, 3);
    }
    let path = segments(dir.path()).pop().unwrap();
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, [good.clone(), vec![0u8; 4096]].concat()).unwrap();
    let mut store = BlockStore::open(dir.path()).unwrap();
    assert_eq!(store.next_block(), 3);
    assert_eq!(std::fs::read(&path).unwrap(), good);
    fill(&mut store, 3, 5);
    drop(store);
    let store = BlockStore::open(dir.path()).unwrap();
    for n in 0..5 {
        expect_block(&store, n);
    }
}

#[test]
fn corrupted_length_field_in_the_middle_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = BlockStore::open(dir.path()).unwrap();
        fill(&mut store, 0, 4);
    }
    let path = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    // The first record's length field (the first bytes of the segment), made shorter.
    bytes[0] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        BlockStore::open(dir.path()),
        Err(Error::StoreCorrupt { offset: 0, .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was cut");
}
