//! Write-ahead log. The core emits `Output::Persist(entry)` before any output that
//! depends on it; the shell appends the entry durably before executing the outputs
//! that follow. On restart, [`crate::Replica::restore`] replays the entries so the
//! replica never contradicts what it signed or accepted before the crash.
//!
//! [`FileWal`] is a [`journal`] directory (segment files `*.wal`), one record per entry,
//! synced once per [`Wal::append`] call. The journal's torn-tail rule applies: a torn
//! tail (an append that was never acknowledged) is cut off on open; a bad record before
//! the tail, a corrupted length field included, makes `open` fail with
//! [`Error::WalCorrupt`] instead of dropping what follows. A record whose CRC holds but
//! that does not decode as an entry is corruption too.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use journal::{Durability, Journal};

use crate::certificate::{Certificate, Decision, Phase, Prepared};
use crate::checkpoint::StableCheckpoint;
use crate::codec::{Reader, Writer};
use crate::types::{InstanceId, MAX_MEMBERS, Members, Proposal, Seq, View};
use crate::{Error, Result};

/// Journal segment size of a WAL.
const SEGMENT_BYTES: u64 = 64 << 20;

/// Largest WAL entry (a proposal with its requests and certificate).
const MAX_ENTRY_BYTES: u32 = 1 << 30;

/// One durable fact about this replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalEntry {
    /// The replica accepted (or, as leader, made) this proposal in `view`; it must
    /// never accept or propose another one for the same `(view, seq)`.
    Accepted {
        /// View of the pre-prepare.
        view: View,
        /// The proposal.
        proposal: Arc<Proposal>,
    },
    /// The replica holds this prepared certificate and is about to send its commit.
    Prepared(Prepared),
    /// The replica is about to ask for view `target`; it never acts in lower views.
    ViewChange {
        /// The view asked for.
        target: View,
    },
    /// The replica installed `view`; `decided` and `carried` are the new view's
    /// obligations (see [`crate::messages::Carry`]) so a restarted replica keeps
    /// enforcing them.
    NewView {
        /// The installed view.
        view: View,
        /// Highest decided sequence number proven by the new-view proof.
        decided: Seq,
        /// The proposal that must be re-proposed at `decided + 1`, if any.
        carried: Option<Arc<Proposal>>,
    },
    /// A decision with its certificate.
    Decided(Arc<Decision>),
    /// `decision` switched the replica to the replica set of `epoch` (see
    /// [`crate::Membership`]): the view state before this entry (views, the
    /// view-change target, the accepted proposal, the prepared certificate) belongs to
    /// the old set and no longer binds the replica; the new set starts in view 0. The
    /// decision is kept to prove the switch to replicas of the old set
    /// ([`crate::Message::SyncSnapshot`]).
    Switched {
        /// The new set's epoch.
        epoch: u64,
        /// The new set's members (a restart checks that the application names the
        /// same ones).
        members: Members,
        /// The decision that changed the set, certified by the old set.
        decision: Arc<Decision>,
    },
    /// A stable checkpoint, and a restatement (`NewView`, `ViewChange`, `Accepted`,
    /// `Prepared` entries) of what the replica had promised when it was written. It
    /// stands for every entry before it and for the decisions up to its sequence
    /// number, so a WAL may drop those ([`compaction_point`]).
    Checkpoint {
        /// The checkpoint with its snapshot.
        checkpoint: Arc<StableCheckpoint>,
        /// The restated entries.
        state: Vec<WalEntry>,
    },
}

/// Where a WAL whose entries are `entries` (in order, the last one a
/// [`WalEntry::Checkpoint`] at `seq`) may start: the index of the first decision above
/// `seq`, or of the checkpoint itself if no such decision precedes it. Everything
/// before that index may be dropped.
pub fn compaction_point<'a>(entries: impl Iterator<Item = &'a WalEntry>, seq: Seq) -> usize {
    let mut count = 0;
    for (i, e) in entries.enumerate() {
        if matches!(e, WalEntry::Decided(d) if d.seq() > seq) {
            return i;
        }
        count = i + 1;
    }
    count.saturating_sub(1)
}

/// A durable, append-only store of [`WalEntry`]s.
pub trait Wal {
    /// Appends entries; returns only once they are durable.
    fn append(&mut self, entries: &[WalEntry]) -> Result<()>;
}

/// In-memory WAL for simulations: "durable" means it survives a simulated crash
/// because the harness keeps it while dropping the replica.
#[derive(Clone, Debug, Default)]
pub struct MemWal {
    /// Entries in append order.
    pub entries: Vec<WalEntry>,
}

impl Wal for MemWal {
    fn append(&mut self, entries: &[WalEntry]) -> Result<()> {
        for e in entries {
            self.entries.push(e.clone());
            if let WalEntry::Checkpoint { checkpoint, .. } = e {
                let cut = compaction_point(self.entries.iter(), checkpoint.seq);
                self.entries.drain(..cut);
            }
        }
        Ok(())
    }
}

/// Append-only, fsync'ed WAL on a [`journal`] directory. After a checkpoint entry is
/// durable, the journal segments holding only entries before its compaction point
/// ([`compaction_point`]) are deleted.
#[derive(Debug)]
pub struct FileWal {
    journal: Journal,
    path: PathBuf,
    /// Journal record of each decision above the last checkpoint, by sequence number.
    decided_at: BTreeMap<Seq, u64>,
}

/// The journal configuration of a WAL: the caller syncs once per batch of entries.
fn journal_config(segment_bytes: u64) -> journal::Config {
    journal::Config {
        segment_bytes: NonZeroU64::new(segment_bytes).unwrap_or(NonZeroU64::MIN),
        max_record_bytes: NonZeroU32::new(MAX_ENTRY_BYTES).unwrap_or(NonZeroU32::MIN),
        durability: Durability::Manual,
        first_seq: 0,
        extension: "wal",
    }
}

/// The engine's error for a journal error of the WAL at `path`.
fn wal_error(path: &Path, e: journal::Error) -> Error {
    match e {
        journal::Error::Corrupt { segment, offset, .. } => Error::WalCorrupt {
            path: segment.display().to_string(),
            offset,
        },
        journal::Error::Io { path, source } => Error::Io {
            path: path.display().to_string(),
            source,
        },
        other => Error::Wal {
            path: path.display().to_string(),
            source: other,
        },
    }
}

impl FileWal {
    /// Opens (or creates) the WAL in directory `path`, returns it with the entries it
    /// holds. A torn tail is truncated away; corruption before it is an error.
    pub fn open(path: &Path) -> Result<(FileWal, Vec<WalEntry>)> {
        Self::open_sized(path, SEGMENT_BYTES)
    }

    /// [`FileWal::open`] with journal segments of `segment_bytes` (checkpoints free
    /// whole segments; tests use small ones).
    pub fn open_sized(path: &Path, segment_bytes: u64) -> Result<(FileWal, Vec<WalEntry>)> {
        let journal = Journal::open(path, journal_config(segment_bytes)).map_err(|e| wal_error(path, e))?;
        let mut entries = Vec::new();
        let mut decided_at = BTreeMap::new();
        for record in journal.reader().replay(journal.first_seq()) {
            let record = record.map_err(|e| wal_error(path, e))?;
            let entry = decode_entry(&record.payload).ok_or_else(|| {
                if predates_member_lists(&record.payload) {
                    Error::WalFormat {
                        path: path.display().to_string(),
                        offset: record.position.offset,
                        reason: "a replica-set switch written before sets had member lists; \
                                 this WAL was written by an earlier version of the engine"
                            .into(),
                    }
                } else {
                    Error::WalCorrupt {
                        path: path.display().to_string(),
                        offset: record.position.offset,
                    }
                }
            })?;
            match &entry {
                WalEntry::Decided(d) => {
                    decided_at.insert(d.seq(), record.seq);
                }
                WalEntry::Checkpoint { checkpoint, .. } => {
                    decided_at.retain(|s, _| *s > checkpoint.seq);
                }
                _ => {}
            }
            entries.push(entry);
        }
        Ok((
            FileWal {
                journal,
                path: path.to_path_buf(),
                decided_at,
            },
            entries,
        ))
    }
}

impl Wal for FileWal {
    fn append(&mut self, entries: &[WalEntry]) -> Result<()> {
        let mut cut = None;
        for e in entries {
            let appended = self
                .journal
                .append(&encode_entry(e))
                .map_err(|err| wal_error(&self.path, err))?;
            match e {
                WalEntry::Decided(d) => {
                    self.decided_at.insert(d.seq(), appended.seq);
                }
                WalEntry::Checkpoint { checkpoint, .. } => {
                    let above = self
                        .decided_at
                        .range(checkpoint.seq + 1..)
                        .next()
                        .map(|(_, r)| *r);
                    cut = Some(above.unwrap_or(appended.seq).min(appended.seq));
                    self.decided_at.retain(|s, _| *s > checkpoint.seq);
                }
                _ => {}
            }
        }
        self.journal.sync().map_err(|err| wal_error(&self.path, err))?;
        if let Some(cut) = cut {
            // Only once the checkpoint is durable; whole segments only.
            self.journal
                .truncate_front(cut)
                .map_err(|err| wal_error(&self.path, err))?;
        }
        Ok(())
    }
}

fn encode_proposal(w: &mut Writer, p: &Proposal) {
    w.u32(p.instance.0);
    w.u64(p.seq);
    w.u32(p.requests.len() as u32);
    for r in &p.requests {
        w.bytes(r);
    }
    w.bytes(&p.metadata);
}

fn decode_proposal(r: &mut Reader) -> Option<Proposal> {
    let instance = InstanceId(r.u32()?);
    let seq = r.u64()?;
    let count = r.u32()? as usize;
    let mut requests = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        requests.push(r.bytes()?);
    }
    Some(Proposal {
        instance,
        seq,
        requests,
        metadata: r.bytes()?,
    })
}

fn encode_cert(w: &mut Writer, c: &Certificate) {
    w.u8(match c.phase {
        Phase::Prepare => 0,
        Phase::Commit => 1,
    });
    w.u32(c.instance.0);
    w.u64(c.view);
    w.u64(c.seq);
    w.raw(&c.digest.0);
    encode_signatures(w, &c.signatures);
}

fn decode_cert(r: &mut Reader) -> Option<Certificate> {
    let phase = match r.u8()? {
        0 => Phase::Prepare,
        1 => Phase::Commit,
        _ => return None,
    };
    let instance = InstanceId(r.u32()?);
    let view = r.u64()?;
    let seq = r.u64()?;
    let digest = crate::types::Digest(r.array32()?);
    let signatures = decode_signatures(r)?;
    Some(Certificate {
        phase,
        instance,
        view,
        seq,
        digest,
        signatures,
    })
}

fn encode_signatures(w: &mut Writer, signatures: &[(crate::ReplicaId, crate::crypto::Signature)]) {
    w.u32(signatures.len() as u32);
    for (id, sig) in signatures {
        w.u32(*id);
        w.bytes(&sig.0);
    }
}

fn decode_signatures(r: &mut Reader) -> Option<Vec<(crate::ReplicaId, crate::crypto::Signature)>> {
    let count = r.u32()? as usize;
    let mut signatures = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        signatures.push((r.u32()?, crate::crypto::Signature(r.bytes()?)));
    }
    Some(signatures)
}

fn encode_checkpoint(w: &mut Writer, c: &StableCheckpoint) {
    w.u32(c.instance.0);
    w.u64(c.seq);
    w.raw(&c.digest.0);
    encode_signatures(w, &c.signatures);
    w.bytes(&c.snapshot);
    encode_cert(w, &c.last_commit);
}

fn decode_checkpoint(r: &mut Reader) -> Option<StableCheckpoint> {
    let instance = InstanceId(r.u32()?);
    let seq = r.u64()?;
    let digest = crate::types::Digest(r.array32()?);
    let signatures = decode_signatures(r)?;
    Some(StableCheckpoint {
        instance,
        seq,
        digest,
        signatures,
        snapshot: Arc::new(r.bytes()?),
        last_commit: decode_cert(r)?,
    })
}

/// The tag of a [`WalEntry::Switched`] entry with its member list.
const TAG_SWITCHED: u8 = 8;

/// The tag of a switch entry written before sets had member lists (a set was `0..n`).
/// Such entries are refused with [`Error::WalFormat`]: a WAL that holds one was written
/// by an earlier version and cannot be read by this one.
const TAG_SWITCHED_BEFORE_MEMBER_LISTS: u8 = 7;

fn decode_members(r: &mut Reader) -> Option<Members> {
    let count = usize::try_from(r.u32()?).ok()?;
    if count > MAX_MEMBERS {
        return None;
    }
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(r.u32()?);
    }
    Members::new(ids).ok()
}

/// Whether `payload` is (or a checkpoint entry restating) a switch entry of the format
/// before member lists.
pub fn predates_member_lists(payload: &[u8]) -> bool {
    let mut r = Reader::new(payload);
    match r.u8() {
        Some(TAG_SWITCHED_BEFORE_MEMBER_LISTS) => true,
        Some(6) => {
            if decode_checkpoint(&mut r).is_none() {
                return false;
            }
            let Some(count) = r.u32() else {
                return false;
            };
            for _ in 0..count {
                match r.bytes() {
                    Some(e) if e.first() == Some(&TAG_SWITCHED_BEFORE_MEMBER_LISTS) => return true,
                    Some(_) => {}
                    None => return false,
                }
            }
            false
        }
        _ => false,
    }
}

/// Encodes one entry (the record payload).
pub fn encode_entry(e: &WalEntry) -> Vec<u8> {
    let mut w = Writer::default();
    match e {
        WalEntry::Accepted { view, proposal } => {
            w.u8(1);
            w.u64(*view);
            encode_proposal(&mut w, proposal);
        }
        WalEntry::Prepared(p) => {
            w.u8(2);
            encode_proposal(&mut w, &p.proposal);
            encode_cert(&mut w, &p.certificate);
        }
        WalEntry::ViewChange { target } => {
            w.u8(3);
            w.u64(*target);
        }
        WalEntry::NewView {
            view,
            decided,
            carried,
        } => {
            w.u8(4);
            w.u64(*view);
            w.u64(*decided);
            match carried {
                None => w.u8(0),
                Some(p) => {
                    w.u8(1);
                    encode_proposal(&mut w, p);
                }
            }
        }
        WalEntry::Decided(d) => {
            w.u8(5);
            encode_proposal(&mut w, &d.proposal);
            encode_cert(&mut w, &d.certificate);
        }
        WalEntry::Switched {
            epoch,
            members,
            decision,
        } => {
            w.u8(TAG_SWITCHED);
            w.u64(*epoch);
            w.u32(members.len());
            for id in members.ids() {
                w.u32(*id);
            }
            encode_proposal(&mut w, &decision.proposal);
            encode_cert(&mut w, &decision.certificate);
        }
        WalEntry::Checkpoint { checkpoint, state } => {
            w.u8(6);
            encode_checkpoint(&mut w, checkpoint);
            w.u32(state.len() as u32);
            for e in state {
                w.bytes(&encode_entry(e));
            }
        }
    }
    w.into_inner()
}

/// Decodes one record payload; `None` if malformed.
pub fn decode_entry(buf: &[u8]) -> Option<WalEntry> {
    let mut r = Reader::new(buf);
    let e = match r.u8()? {
        1 => WalEntry::Accepted {
            view: r.u64()?,
            proposal: Arc::new(decode_proposal(&mut r)?),
        },
        2 => WalEntry::Prepared(Prepared {
            proposal: Arc::new(decode_proposal(&mut r)?),
            certificate: decode_cert(&mut r)?,
        }),
        3 => WalEntry::ViewChange { target: r.u64()? },
        4 => WalEntry::NewView {
            view: r.u64()?,
            decided: r.u64()?,
            carried: match r.u8()? {
                0 => None,
                1 => Some(Arc::new(decode_proposal(&mut r)?)),
                _ => return None,
            },
        },
        5 => WalEntry::Decided(Arc::new(Decision {
            proposal: Arc::new(decode_proposal(&mut r)?),
            certificate: decode_cert(&mut r)?,
        })),
        6 => {
            let checkpoint = Arc::new(decode_checkpoint(&mut r)?);
            let count = r.u32()? as usize;
            let mut state = Vec::with_capacity(count.min(8));
            for _ in 0..count {
                // Restated entries are never checkpoints themselves.
                match decode_entry(&r.bytes()?)? {
                    WalEntry::Checkpoint { .. } => return None,
                    e => state.push(e),
                }
            }
            WalEntry::Checkpoint { checkpoint, state }
        }
        TAG_SWITCHED => WalEntry::Switched {
            epoch: r.u64()?,
            members: decode_members(&mut r)?,
            decision: Arc::new(Decision {
                proposal: Arc::new(decode_proposal(&mut r)?),
                certificate: decode_cert(&mut r)?,
            }),
        },
        _ => return None,
    };
    r.is_empty().then_some(e)
}
