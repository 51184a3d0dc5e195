//! File WAL: round trip, reopen, torn last record, mid-file corruption (a corrupted
//! length field included), zero-filled tail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bft::certificate::{Certificate, Phase, Prepared};
use bft::{Decision, Digest, FileWal, InstanceId, Proposal, Signature, Wal, WalEntry};

fn proposal(seq: u64) -> Arc<Proposal> {
    Arc::new(Proposal {
        instance: InstanceId(3),
        seq,
        requests: vec![vec![1, 2, 3], vec![], vec![9; 300]],
        metadata: b"meta".to_vec(),
    })
}

fn cert(phase: Phase, seq: u64) -> Certificate {
    Certificate {
        phase,
        instance: InstanceId(3),
        view: 7,
        seq,
        digest: Digest([5; 32]),
        signatures: vec![(0, Signature(vec![1; 64])), (2, Signature(vec![2; 64]))],
    }
}

fn entries() -> Vec<WalEntry> {
    vec![
        WalEntry::Accepted {
            view: 7,
            proposal: proposal(1),
        },
        WalEntry::Prepared(Prepared {
            proposal: proposal(1),
            certificate: cert(Phase::Prepare, 1),
        }),
        WalEntry::Decided(Arc::new(Decision {
            proposal: proposal(1),
            certificate: cert(Phase::Commit, 1),
        })),
        WalEntry::ViewChange { target: 8 },
        WalEntry::NewView {
            view: 8,
            decided: 1,
            carried: Some(proposal(2)),
        },
        WalEntry::NewView {
            view: 9,
            decided: 1,
            carried: None,
        },
        WalEntry::Switched {
            epoch: 2,
            members: bft::Members::new(vec![0, 2, 3, 4]).unwrap(),
            decision: Arc::new(Decision {
                proposal: proposal(1),
                certificate: cert(Phase::Commit, 1),
            }),
        },
    ]
}

/// The WAL is a journal directory; its (only) segment file.
fn segment(wal: &Path) -> PathBuf {
    wal.join(format!("{:020}.wal", 0))
}

#[test]
fn round_trip_and_reopen_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bft.wal");
    let (mut wal, found) = FileWal::open(&path).expect("open");
    assert!(found.is_empty());
    wal.append(&entries()[..3]).expect("append");
    wal.append(&entries()[3..]).expect("append");
    drop(wal);
    let (mut wal, found) = FileWal::open(&path).expect("reopen");
    assert_eq!(found, entries());
    wal.append(&[WalEntry::ViewChange { target: 10 }])
        .expect("append");
    drop(wal);
    let (_, found) = FileWal::open(&path).expect("reopen");
    assert_eq!(found.len(), entries().len() + 1);
    assert_eq!(found.last(), Some(&WalEntry::ViewChange { target: 10 }));
}

#[test]
fn torn_last_record_is_cut_at_every_length() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bft.wal");
    let (mut wal, _) = FileWal::open(&path).expect("open");
    wal.append(&entries()[..2]).expect("append");
    drop(wal);
    let good = std::fs::read(segment(&path)).expect("read");
    let (mut wal, _) = FileWal::open(&path).expect("open");
    wal.append(&entries()[2..3]).expect("append");
    drop(wal);
    let full = std::fs::read(segment(&path)).expect("read");
    // A crash can leave any prefix of the last record on disk.
    for cut in good.len()..full.len() {
        std::fs::write(segment(&path), &full[..cut]).expect("write");
        let (mut wal, found) = FileWal::open(&path).expect("open torn");
        assert_eq!(found, entries()[..2], "cut at {cut}");
        assert_eq!(
            std::fs::metadata(segment(&path)).expect("meta").len() as usize,
            good.len()
        );
        // The log keeps working after the repair.
        wal.append(&entries()[3..4]).expect("append after repair");
        drop(wal);
        let (_, found) = FileWal::open(&path).expect("reopen");
        assert_eq!(found.len(), 3);
    }
}

#[test]
fn garbage_tail_with_bad_crc_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bft.wal");
    let (mut wal, _) = FileWal::open(&path).expect("open");
    wal.append(&entries()).expect("append");
    drop(wal);
    let mut bytes = std::fs::read(segment(&path)).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff; // flip a bit in the last record's payload
    std::fs::write(segment(&path), &bytes).expect("write");
    let (_, found) = FileWal::open(&path).expect("open");
    assert_eq!(found, entries()[..entries().len() - 1]);
}

#[test]
fn corruption_before_the_end_fails_loudly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bft.wal");
    let (mut wal, _) = FileWal::open(&path).expect("open");
    wal.append(&entries()).expect("append");
    drop(wal);
    let mut bytes = std::fs::read(segment(&path)).expect("read");
    bytes[10] ^= 0xff; // inside the first record's payload
    std::fs::write(segment(&path), &bytes).expect("write");
    let err = FileWal::open(&path).expect_err("corrupt wal must not open");
    assert!(matches!(err, bft::Error::WalCorrupt { offset: 0, .. }), "{err}");
    // Appending garbage after a valid log is also detected as a torn tail.
    let (mut wal, _) = FileWal::open(&dir.path().join("other.wal")).expect("open");
    wal.append(&entries()[..1]).expect("append");
    drop(wal);
    let mut f = OpenOptions::new()
        .append(true)
        .open(segment(&dir.path().join("other.wal")))
        .expect("open");
    f.write_all(&[200, 0, 0]).expect("write");
    drop(f);
    let (_, found) = FileWal::open(&dir.path().join("other.wal")).expect("open");
    assert_eq!(found, entries()[..1]);
}

#[test]
fn corrupted_length_field_in_the_middle_fails_loudly_and_cuts_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bft.wal");
    let (mut wal, _) = FileWal::open(&path).expect("open");
    wal.append(&entries()[..1]).expect("append");
    drop(wal);
    let first_len = std::fs::read(segment(&path)).expect("read").len() as u64;
    let (mut wal, _) = FileWal::open(&path).expect("open");
    wal.append(&entries()[1..]).expect("append");
    drop(wal);
    let mut bytes = std::fs::read(segment(&path)).expect("read");
    // Shrink the second record's length: a length-prefixed log without a CRC over the
    // length would take what follows for a torn tail and cut it.
    bytes[first_len as usize] ^= 0x01;
    std::fs::write(segment(&path), &bytes).expect("write");
    let err = FileWal::open(&path).expect_err("corrupt wal must not open");
    assert!(
        matches!(err, bft::Error::WalCorrupt { offset, .. } if offset == first_len),
        "{err}"
    );
    assert_eq!(std::fs::read(segment(&path)).expect("read"), bytes);
}

#[test]
fn zero_filled_tail_after_power_loss_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bft.wal");
    let (mut wal, _) = FileWal::open(&path).expect("open");
    wal.append(&entries()[..3]).expect("append");
    drop(wal);
    let good = std::fs::read(segment(&path)).expect("read");
    let mut f = OpenOptions::new()
        .append(true)
        .open(segment(&path))
        .expect("open");
    f.write_all(&[0u8; 4096]).expect("zeros");
    drop(f);
    let (mut wal, found) = FileWal::open(&path).expect("a zero-filled tail is torn");
    assert_eq!(found, entries()[..3]);
    assert_eq!(std::fs::read(segment(&path)).expect("read"), good);
    wal.append(&entries()[3..]).expect("append");
    drop(wal);
    let (_, found) = FileWal::open(&path).expect("reopen");
    assert_eq!(found, entries());
}

/// A switch entry as it was written before sets had member lists: tag 7, the epoch,
/// then the decision (the new entry without its member list).
fn switch_entry_before_member_lists() -> Vec<u8> {
    let entry = WalEntry::Switched {
        epoch: 2,
        members: bft::Members::new(vec![0, 2, 3, 4]).unwrap(),
        decision: Arc::new(Decision {
            proposal: proposal(1),
            certificate: cert(Phase::Commit, 1),
        }),
    };
    let new = bft::wal::encode_entry(&entry);
    assert_eq!(new[0], 8, "switch entries with members have tag 8");
    let mut old = vec![7];
    old.extend_from_slice(&new[1..9]); // the epoch
    old.extend_from_slice(&new[9 + 4 + 4 * 4..]); // past the four members
    old
}

#[test]
fn a_switch_entry_of_the_format_before_member_lists_is_refused_by_name() {
    let old = switch_entry_before_member_lists();
    assert_eq!(bft::wal::decode_entry(&old), None);
    assert!(bft::wal::predates_member_lists(&old));
    let new_payload = bft::wal::encode_entry(&entries()[0]);
    assert!(!bft::wal::predates_member_lists(&new_payload));
    // Written to a WAL directory as the earlier version did: opening it names the cause.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bft.wal");
    let config = journal::Config {
        durability: journal::Durability::Manual,
        max_record_bytes: std::num::NonZeroU32::new(1 << 30).unwrap(),
        extension: "wal",
        ..journal::Config::default()
    };
    let mut j = journal::Journal::open(&path, config).expect("journal");
    j.append(&new_payload).expect("append");
    j.append(&old).expect("append");
    j.sync().expect("sync");
    drop(j);
    match FileWal::open(&path) {
        Err(bft::Error::WalFormat { reason, .. }) => assert!(reason.contains("member lists"), "{reason}"),
        other => panic!("expected a format refusal, got {:?}", other.map(|(_, e)| e)),
    }
}

#[test]
fn bad_member_lists_do_not_decode() {
    let entry = WalEntry::Switched {
        epoch: 1,
        members: bft::Members::new(vec![0, 2, 3, 4]).unwrap(),
        decision: Arc::new(Decision {
            proposal: proposal(1),
            certificate: cert(Phase::Commit, 1),
        }),
    };
    let good = bft::wal::encode_entry(&entry);
    assert_eq!(bft::wal::decode_entry(&good), Some(entry));
    // ids out of order, repeated, an empty list, a count past the end
    for (at, value) in [(13usize, 2u32), (17, 5), (9, 0), (9, u32::MAX)] {
        let mut bad = good.clone();
        bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
        assert_eq!(bft::wal::decode_entry(&bad), None, "byte {at} = {value}");
    }
}
