//! The journal on disk: round trips, torn tails at every byte, zero-filled tails,
//! corruption in the middle, segments, front truncation, the lock, read-only readers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};

use journal::{Config, Durability, Error, HEADER_LEN, Journal, JournalReader, Record};

fn config(segment_bytes: u64) -> Config {
    Config {
        segment_bytes: NonZeroU64::new(segment_bytes).unwrap(),
        max_record_bytes: NonZeroU32::new(4096).unwrap(),
        durability: Durability::SyncEachAppend,
        first_seq: 0,
        extension: "log",
    }
}

fn payload(seq: u64) -> Vec<u8> {
    format!("record {seq} {}", "y".repeat((seq % 11) as usize)).into_bytes()
}

fn fill(j: &mut Journal, from: u64, to: u64) {
    for seq in from..to {
        assert_eq!(j.append(&payload(seq)).unwrap().seq, seq);
    }
}

fn all(reader: &JournalReader, from: u64) -> Vec<Record> {
    reader.replay(from).collect::<journal::Result<Vec<_>>>().unwrap()
}

fn assert_holds(j: &Journal, from: u64, to: u64) {
    let seqs: Vec<u64> = all(&j.reader(), from).iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (from..to).collect::<Vec<_>>());
    for r in all(&j.reader(), from) {
        assert_eq!(r.payload, payload(r.seq), "record {}", r.seq);
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

fn record_len(seq: u64) -> usize {
    HEADER_LEN + payload(seq).len()
}

#[test]
fn append_read_replay_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let positions = {
        let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
        assert_eq!((j.first_seq(), j.next_seq()), (0, 0));
        let p: Vec<_> = (0..10).map(|s| j.append(&payload(s)).unwrap().position).collect();
        j.sync().unwrap();
        p
    };
    let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
    assert_eq!((j.next_seq(), j.cut_on_open()), (10, 0));
    assert_holds(&j, 0, 10);
    assert_holds(&j, 7, 10);
    assert!(all(&j.reader(), 10).is_empty());
    assert!(all(&j.reader(), 99).is_empty());
    for (seq, pos) in positions.iter().enumerate() {
        assert_eq!(j.reader().read(*pos).unwrap(), payload(seq as u64));
    }
    assert_eq!(
        j.reader().read_unchecked(positions[3], 0, 8).unwrap(),
        b"record 3"
    );
    assert!(j.reader().read_unchecked(positions[3], 0, 999).is_err());
    fill(&mut j, 10, 12);
    assert_holds(&j, 0, 12);
}

#[test]
fn first_seq_of_a_new_journal() {
    let dir = tempfile::tempdir().unwrap();
    let start_at_100 = Config {
        first_seq: 100,
        ..config(1 << 20)
    };
    {
        let mut j = Journal::open(dir.path(), start_at_100).unwrap();
        assert_eq!((j.first_seq(), j.next_seq()), (100, 100));
        fill(&mut j, 100, 103);
    }
    // An existing journal keeps its numbers whatever the configuration says.
    let j = Journal::open(dir.path(), config(1 << 20)).unwrap();
    assert_eq!((j.first_seq(), j.next_seq()), (100, 103));
    assert_eq!(all(&j.reader(), 0)[0].seq, 100);
    assert_holds(&j, 100, 103);
}

#[test]
fn torn_tail_at_every_byte_of_the_last_record() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
        fill(&mut j, 0, 5);
    }
    let path = segments(dir.path()).pop().unwrap();
    let full = std::fs::read(&path).unwrap();
    let before = full.len() - record_len(4);
    for cut in before..full.len() {
        std::fs::write(&path, &full[..cut]).unwrap();
        let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
        assert_eq!(j.next_seq(), 4, "cut at {cut}");
        assert_eq!(j.cut_on_open(), (cut - before) as u64, "cut at {cut}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), before as u64);
        assert_holds(&j, 0, 4);
        // The caller appends the record again; the log is as it would have been.
        fill(&mut j, 4, 5);
        drop(j);
        assert_eq!(std::fs::read(&path).unwrap(), full, "cut at {cut}");
    }
}

#[test]
fn corrupted_length_field_in_the_middle_is_an_error_and_nothing_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
        fill(&mut j, 0, 6);
    }
    let path = segments(dir.path()).pop().unwrap();
    let good = std::fs::read(&path).unwrap();
    let offset2 = record_len(0) + record_len(1);
    // Every bit of the length field of record 2, including those that would make it
    // shorter (a plain length-prefixed log would silently drop what follows).
    for bit in 0..32 {
        let mut bad = good.clone();
        bad[offset2 + bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&path, &bad).unwrap();
        match Journal::open(dir.path(), config(1 << 20)) {
            Err(Error::Corrupt { offset, seq: 2, .. }) => assert_eq!(offset, offset2 as u64, "bit {bit}"),
            other => panic!("bit {bit}: {other:?}"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), bad, "nothing cut (bit {bit})");
    }
    std::fs::write(&path, &good).unwrap();
    assert_eq!(Journal::open(dir.path(), config(1 << 20)).unwrap().next_seq(), 6);
}

#[test]
fn corrupted_payload_or_crc_in_the_middle_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
        fill(&mut j, 0, 4);
    }
    let path = segments(dir.path()).pop().unwrap();
    let good = std::fs::read(&path).unwrap();
    let last = good.len() - record_len(3);
    for i in 0..last {
        let mut bad = good.clone();
        bad[i] ^= 0x20;
        std::fs::write(&path, &bad).unwrap();
        assert!(
            matches!(
                Journal::open(dir.path(), config(1 << 20)),
                Err(Error::Corrupt { .. })
            ),
            "flip at {i}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bad);
    }
    // A flipped byte in the last record is a torn tail.
    let mut bad = good.clone();
    bad[last + HEADER_LEN] ^= 0x20;
    std::fs::write(&path, &bad).unwrap();
    let j = Journal::open(dir.path(), config(1 << 20)).unwrap();
    assert_eq!(j.next_seq(), 3);
}

#[test]
fn zero_filled_tail_after_power_loss_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
        fill(&mut j, 0, 3);
    }
    let path = segments(dir.path()).pop().unwrap();
    let good = std::fs::read(&path).unwrap();
    // The file was extended for two more records whose bytes never reached the disk,
    // or only the header of the first did.
    let mut header_only = good.clone();
    let mut frame = Vec::new();
    frame.extend_from_slice(&good[good.len() - record_len(2)..][..HEADER_LEN]);
    header_only.extend_from_slice(&frame);
    for image in [
        [good.clone(), vec![0u8; 4096]].concat(),
        [header_only, vec![0u8; 300]].concat(),
    ] {
        std::fs::write(&path, &image).unwrap();
        let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
        assert_eq!(j.next_seq(), 3);
        assert_eq!(std::fs::read(&path).unwrap(), good);
        fill(&mut j, 3, 5);
        drop(j);
        let j = Journal::open(dir.path(), config(1 << 20)).unwrap();
        assert_holds(&j, 0, 5);
        drop(j);
        std::fs::write(&path, &good).unwrap();
    }
    // Zeros and then data again are corruption.
    std::fs::write(&path, [good.clone(), vec![0u8; 64], vec![1u8]].concat()).unwrap();
    assert!(matches!(
        Journal::open(dir.path(), config(1 << 20)),
        Err(Error::Corrupt { seq: 3, .. })
    ));
}

#[test]
fn segments_roll_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut j = Journal::open(dir.path(), config(200)).unwrap();
        fill(&mut j, 0, 40);
        // A record larger than a segment gets a segment of its own.
        assert_eq!(j.append(&[7u8; 1000]).unwrap().position.offset, 0);
        fill(&mut j, 41, 45);
    }
    let segs = segments(dir.path());
    assert!(segs.len() > 5, "{} segments", segs.len());
    for s in &segs {
        let len = std::fs::metadata(s).unwrap().len();
        assert!(len <= 200 || len == (HEADER_LEN + 1000) as u64, "{s:?}: {len}");
    }
    let j = Journal::open(dir.path(), config(200)).unwrap();
    assert_eq!(j.next_seq(), 45);
    let records = all(&j.reader(), 38);
    assert_eq!(records[2].payload, vec![7u8; 1000]);
    assert_eq!(records.len(), 7);
    for r in all(&j.reader(), 0).iter().filter(|r| r.seq != 40) {
        assert_eq!(r.payload, payload(r.seq));
        assert_eq!(j.reader().read(r.position).unwrap(), payload(r.seq));
    }
}

#[test]
fn torn_tail_in_a_segment_that_is_not_the_last_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut j = Journal::open(dir.path(), config(200)).unwrap();
        fill(&mut j, 0, 30);
    }
    let segs = segments(dir.path());
    let first = std::fs::read(&segs[0]).unwrap();
    for image in [
        first[..first.len() - 1].to_vec(),
        [first.clone(), vec![0u8; 16]].concat(),
    ] {
        std::fs::write(&segs[0], &image).unwrap();
        assert!(matches!(
            Journal::open(dir.path(), config(200)),
            Err(Error::Corrupt { .. })
        ));
        assert_eq!(std::fs::read(&segs[0]).unwrap(), image);
    }
    std::fs::write(&segs[0], &first).unwrap();
    // A missing segment in the middle leaves a gap: corruption.
    let second = std::fs::read(&segs[1]).unwrap();
    std::fs::remove_file(&segs[1]).unwrap();
    assert!(matches!(
        Journal::open(dir.path(), config(200)),
        Err(Error::Corrupt { .. })
    ));
    std::fs::write(&segs[1], second).unwrap();
    assert_eq!(Journal::open(dir.path(), config(200)).unwrap().next_seq(), 30);
}

#[test]
fn empty_last_segment_after_a_crash_while_rolling() {
    let dir = tempfile::tempdir().unwrap();
    let next = {
        let mut j = Journal::open(dir.path(), config(200)).unwrap();
        fill(&mut j, 0, 20);
        j.next_seq()
    };
    std::fs::File::create(dir.path().join(format!("{next:020}.log"))).unwrap();
    let mut j = Journal::open(dir.path(), config(200)).unwrap();
    assert_eq!(j.next_seq(), 20);
    fill(&mut j, 20, 25);
    drop(j);
    assert_holds(&Journal::open(dir.path(), config(200)).unwrap(), 0, 25);
}

#[test]
fn truncate_front_removes_whole_segments_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), config(200)).unwrap();
    fill(&mut j, 0, 40);
    let before = segments(dir.path()).len();
    let reader = j.reader();
    let early = all(&reader, 0)[0].position;
    let removed = j.truncate_front(25).unwrap();
    assert!(removed > 0 && removed < before);
    assert_eq!(segments(dir.path()).len(), before - removed);
    let first = j.first_seq();
    assert!(first <= 25 && first > 0, "first {first}");
    assert!(matches!(reader.read(early), Err(Error::NoSegment { segment: 0 })));
    assert_holds(&j, first, 40);
    // Replay from a pruned number starts at the oldest record held.
    assert_eq!(all(&reader, 0)[0].seq, first);
    // Never the last segment, even when asked for everything.
    j.truncate_front(u64::MAX).unwrap();
    assert_eq!(segments(dir.path()).len(), 1);
    let first = j.first_seq();
    fill(&mut j, 40, 42);
    drop(j);
    let j = Journal::open(dir.path(), config(200)).unwrap();
    assert_eq!((j.first_seq(), j.next_seq()), (first, 42));
    assert_holds(&j, first, 42);
}

#[test]
fn one_writer_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), config(200)).unwrap();
    assert!(matches!(
        Journal::open(dir.path(), config(200)),
        Err(Error::Locked { .. })
    ));
    drop(j);
    Journal::open(dir.path(), config(200)).unwrap();
}

#[test]
fn oversized_record_is_refused_and_the_journal_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
    assert!(matches!(
        j.append(&[0u8; 4097]),
        Err(Error::RecordTooLarge { len: 4097, max: 4096 })
    ));
    fill(&mut j, 0, 2);
    assert_holds(&j, 0, 2);
}

#[test]
fn read_only_reader_sees_whole_records_and_repairs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), config(200)).unwrap();
    fill(&mut j, 0, 30);
    let ro = JournalReader::open_read_only(dir.path(), &config(200)).unwrap();
    assert_eq!(all(&ro, 0).len(), 30);
    drop(j);
    // A torn tail (a writer in the middle of an append) is not seen and not cut.
    let path = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[9, 9, 9]);
    std::fs::write(&path, &bytes).unwrap();
    let ro = JournalReader::open_read_only(dir.path(), &config(200)).unwrap();
    assert_eq!(ro.next_seq(), 30);
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert!(JournalReader::open_read_only(&dir.path().join("missing"), &config(200)).is_err());
}

#[test]
fn replay_reports_corruption_found_after_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), config(1 << 20)).unwrap();
    fill(&mut j, 0, 3);
    let path = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[HEADER_LEN + 1] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let results: Vec<_> = j.reader().replay(0).collect();
    assert_eq!(results.len(), 1, "replay stops at the first error");
    assert!(matches!(results[0], Err(Error::Corrupt { seq: 0, .. })));
}

#[test]
fn restart_at_drops_everything_and_continues_later() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path(), config(200)).unwrap();
    fill(&mut j, 0, 30);
    let reader = j.reader();
    assert!(
        matches!(j.restart_at(10), Err(Error::Config { .. })),
        "never backwards"
    );
    j.restart_at(100).unwrap();
    assert_eq!((j.first_seq(), j.next_seq()), (100, 100));
    assert_eq!(segments(dir.path()).len(), 1);
    assert!(all(&reader, 0).is_empty(), "readers see the restart");
    fill(&mut j, 100, 104);
    drop(j);
    let j = Journal::open(dir.path(), config(200)).unwrap();
    assert_eq!((j.first_seq(), j.next_seq()), (100, 104));
    assert_holds(&j, 100, 104);
}
