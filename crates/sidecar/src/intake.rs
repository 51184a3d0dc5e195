//! Block intake (FX §3.2), pure: structural checks and duplicate ids in flight.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use types::check::{PayloadDecoder, check_tx};
use types::{BlockTx, Status, TxId};

/// What the pipeline does with one tx of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Decided here and never stored (100–102): answer directly.
    Answer(Status),
    /// Decided here; the vcservice stores the status and nothing else.
    Store(Status),
    /// Schedule through the dependency graph, signature check and vcservice.
    Schedule,
}

/// A tx of a block with its route.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The tx at its height (the body decoded once, shared by reference down the pipeline).
    pub tx: BlockTx,
    /// What to do with it.
    pub route: Route,
}

/// Structural checks plus the ids in flight.
///
/// Every tx admitted gets the next sequence number (answered ones too, occupying
/// nothing). The ids in flight are kept in admission order as bytes of one buffer, and
/// a map from a 64-bit hash of an id to the sequence numbers holding ids with that hash
/// finds them: admitting an id compares bytes only on a hash match, and a finished tx is
/// released by its sequence number, which compares none and frees nothing on its own
/// (no copy of each id to allocate, compare and free, as a set of ids would need). The
/// buffer holds the ids from the oldest tx in flight on, so its size follows the span
/// of txs in flight, which the dependency graph's window bounds.
pub struct Intake {
    /// Hash of an id in flight → the sequence numbers holding an id with that hash
    /// (nearly always one). The hash is foldhash seeded at random: an outsider cannot
    /// aim ids at one entry; a collision costs a byte comparison, never a wrong answer.
    by_hash: HashMap<u64, Seqs, foldhash::fast::RandomState>,
    hasher: foldhash::quality::RandomState,
    /// The spans of txs `first_seq..`, in order.
    spans: VecDeque<Span>,
    first_seq: u64,
    /// Id bytes; `bytes[i]` is at offset `bytes_base + i`.
    bytes: Vec<u8>,
    bytes_base: u64,
    /// Ids in flight.
    live: usize,
    /// Every id hashes alike (tests of the byte comparisons).
    #[cfg(test)]
    collide: bool,
}

/// One admitted tx: where its id's bytes are, if it occupies one.
#[derive(Debug, Clone, Copy)]
struct Span {
    /// Offset of the id's bytes (`bytes_base`-relative offsets are `start - bytes_base`).
    start: u64,
    len: u32,
    /// The id is in flight.
    live: bool,
}

/// The sequence numbers of the ids in flight with one hash.
#[derive(Debug)]
enum Seqs {
    One(u64),
    Many(Vec<u64>),
}

/// Stale map entries are swept once the map holds more than twice the ids in flight
/// plus this many entries.
const STALE_SLACK: usize = 1024;

/// The buffer of id bytes is compacted once its finished front is this large and
/// more than half of it.
const COMPACT_BYTES: u64 = 64 << 10;

impl Default for Intake {
    fn default() -> Self {
        Intake::new()
    }
}

impl Intake {
    /// An intake with nothing in flight.
    pub fn new() -> Intake {
        Intake {
            by_hash: HashMap::default(),
            hasher: foldhash::quality::RandomState::default(),
            spans: VecDeque::new(),
            first_seq: 0,
            bytes: Vec::new(),
            bytes_base: 0,
            live: 0,
            #[cfg(test)]
            collide: false,
        }
    }

    /// The hash of id bytes `id`.
    fn hash(&self, id: &[u8]) -> u64 {
        #[cfg(test)]
        if self.collide {
            return 7;
        }
        self.hasher.hash_one(id)
    }

    /// Routes every tx of a block (`txs` with their heights, in order). An id already in
    /// flight (this block or an earlier unfinished one) is `REJECTED_DUPLICATE_TX_ID`; an
    /// id already committed is recognised by the vcservice's status lookup. `refused`
    /// gives the status of a tx whose envelope already failed its checks (by index). Tx
    /// `i` gets sequence number [`Intake::next_seq`] (as it was before the call) `+ i`;
    /// see [`Intake::admit_numbered`].
    pub fn admit(
        &mut self,
        txs: Vec<BlockTx>,
        refused: impl Fn(usize) -> Option<Status>,
        dec: &dyn PayloadDecoder,
    ) -> Vec<Admitted> {
        self.admit_numbered(txs, refused, dec).1
    }

    /// [`Intake::admit`], also returning the sequence number of the block's first tx
    /// (tx `i` has `first + i`; [`Intake::finished`] takes it).
    pub fn admit_numbered(
        &mut self,
        txs: Vec<BlockTx>,
        refused: impl Fn(usize) -> Option<Status>,
        dec: &dyn PayloadDecoder,
    ) -> (u64, Vec<Admitted>) {
        let first = self.next_seq();
        let admitted = txs
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let checked = match refused(i) {
                    Some(s) => Err(s),
                    None => check_tx(&t.id, &t.tx, dec),
                };
                // The in-flight check comes before storing a malformed status: an earlier
                // tx with this id will store its own status, and a malformed duplicate
                // stored first (it bypasses the graph) would turn the original into a
                // duplicate.
                // Answered txs (no id, bad id, duplicate) never occupy their id; one
                // probe both checks the id and occupies it.
                let route = match checked {
                    Err(s) if !s.is_stored() => {
                        self.push_unoccupied();
                        Route::Answer(s)
                    }
                    _ if !self.occupy(&t.id) => {
                        self.push_unoccupied();
                        Route::Answer(Status::RejectedDuplicateTxId)
                    }
                    Err(s) => Route::Store(s),
                    Ok(()) => Route::Schedule,
                };
                Admitted { tx: t, route }
            })
            .collect();
        (first, admitted)
    }

    /// The sequence number the next admitted tx gets.
    pub fn next_seq(&self) -> u64 {
        self.first_seq + self.spans.len() as u64
    }

    /// Records a tx that occupies no id.
    fn push_unoccupied(&mut self) {
        let start = self.bytes_base + self.bytes.len() as u64;
        self.spans.push_back(Span {
            start,
            len: 0,
            live: false,
        });
    }

    /// Whether the tx with sequence number `seq` still occupies its id.
    fn is_live(spans: &VecDeque<Span>, first_seq: u64, seq: u64) -> bool {
        seq.checked_sub(first_seq)
            .and_then(|p| spans.get(usize::try_from(p).ok()?))
            .is_some_and(|s| s.live)
    }

    /// Occupies `id` with the next sequence number unless it is in flight already.
    fn occupy(&mut self, id: &TxId) -> bool {
        let hash = self.hash(id.0.as_bytes());
        let seq = self.next_seq();
        // Borrows the spans and bytes only (the map is borrowed below).
        let (spans, first_seq) = (&self.spans, self.first_seq);
        let live = |s: u64| Intake::is_live(spans, first_seq, s);
        let taken = |s: u64| {
            let span = spans[(s - first_seq) as usize];
            let at = (span.start - self.bytes_base) as usize;
            &self.bytes[at..at + span.len as usize] == id.0.as_bytes()
        };
        match self.by_hash.entry(hash) {
            Entry::Occupied(mut e) => match e.get_mut() {
                // A finished tx's entry is taken over (see `finished`).
                Seqs::One(s) if !live(*s) => *s = seq,
                Seqs::One(s) => {
                    if taken(*s) {
                        return false;
                    }
                    let first = *s;
                    *e.get_mut() = Seqs::Many(vec![first, seq]);
                }
                Seqs::Many(seqs) => {
                    seqs.retain(|&s| live(s));
                    if seqs.iter().any(|&s| taken(s)) {
                        return false;
                    }
                    seqs.push(seq);
                }
            },
            Entry::Vacant(e) => {
                e.insert(Seqs::One(seq));
            }
        }
        let start = self.bytes_base + self.bytes.len() as u64;
        self.bytes.extend_from_slice(id.0.as_bytes());
        self.spans.push_back(Span {
            start,
            // Ids are at most `types::txid::MAX_TX_ID_LEN` bytes once checked; an
            // unchecked one (refused before its checks) still fits a u32 here.
            len: u32::try_from(id.0.len()).unwrap_or(u32::MAX),
            live: true,
        });
        self.live += 1;
        true
    }

    /// Releases the id of the tx with sequence number `seq`, if it still occupies one
    /// (finishing a tx twice, or one that occupies nothing, does nothing). Only the tx's
    /// span is marked: its map entry goes stale, and is taken over by the next id with
    /// that hash or dropped when stale entries outnumber live ones (a sweep of the whole
    /// map, amortised O(1) per tx), so finishing a tx makes no random access to the map.
    pub fn finished(&mut self, seq: u64) {
        let Some(pos) = seq
            .checked_sub(self.first_seq)
            .and_then(|p| usize::try_from(p).ok())
        else {
            return;
        };
        match self.spans.get_mut(pos) {
            Some(span) if span.live => span.live = false,
            _ => return,
        }
        self.live -= 1;
        if self.by_hash.len() > self.live.saturating_mul(2).saturating_add(STALE_SLACK) {
            self.sweep();
        }
        self.pop_finished();
    }

    /// Drops every stale entry of the map.
    fn sweep(&mut self) {
        let (spans, first_seq) = (&self.spans, self.first_seq);
        let live = |s: u64| Intake::is_live(spans, first_seq, s);
        self.by_hash.retain(|_, seqs| match seqs {
            Seqs::One(s) => live(*s),
            Seqs::Many(v) => {
                v.retain(|&s| live(s));
                !v.is_empty()
            }
        });
    }

    /// Drops the finished txs at the front, and their bytes once they are many.
    fn pop_finished(&mut self) {
        while self.spans.front().is_some_and(|s| !s.live) {
            self.spans.pop_front();
            self.first_seq += 1;
        }
        let front = self
            .spans
            .front()
            .map_or(self.bytes_base + self.bytes.len() as u64, |s| s.start);
        let dead = front - self.bytes_base;
        if dead >= COMPACT_BYTES && dead * 2 > self.bytes.len() as u64 {
            self.bytes.drain(..dead as usize);
            self.bytes_base = front;
        }
    }

    /// Ids in flight.
    pub fn in_flight(&self) -> usize {
        self.live
    }

    /// Bytes of ids held (those in flight and finished ones not yet dropped).
    pub fn held_bytes(&self) -> usize {
        self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use types::{Block, Endorsement, Tx, TxNamespace, Write};

    fn txs(number: u64, txs: Vec<(TxId, Arc<Tx>)>) -> Vec<BlockTx> {
        Block::unordered(number, txs).block_txs().unwrap()
    }

    fn tx(ns: &str, signed: bool) -> Arc<Tx> {
        let n = TxNamespace {
            ns_id: ns.into(),
            blind_writes: vec![Write {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            }],
            ..Default::default()
        };
        let e = if signed {
            vec![Endorsement {
                signature: vec![1],
                ..Default::default()
            }]
        } else {
            vec![]
        };
        Arc::new(Tx {
            namespaces: vec![n],
            endorsements: vec![e],
            metadata: vec![],
        })
    }

    #[test]
    fn routes() {
        let dec = wire::ProstDecoder::default();
        let mut intake = Intake::new();
        let block = vec![
            (TxId("a".into()), tx("token", true)),
            (TxId("a".into()), tx("token", true)),
            (TxId("".into()), tx("token", true)),
            (TxId("b".into()), tx("Bad", true)),
            (TxId("c".into()), tx("token", false)),
        ];
        let routes: Vec<Route> = intake
            .admit(txs(0, block), |_| None, &dec)
            .into_iter()
            .map(|a| a.route)
            .collect();
        assert_eq!(
            routes,
            vec![
                Route::Schedule,
                Route::Answer(Status::RejectedDuplicateTxId),
                Route::Answer(Status::MalformedMissingTxId),
                Route::Store(Status::MalformedNamespaceIdInvalid),
                Route::Store(Status::MalformedMissingSignature),
            ]
        );
        // Still in flight in the next block, also for a malformed tx with that id (it
        // must not store a status under the id before the original does); free once
        // finished.
        let next = vec![(TxId("a".into()), tx("token", true))];
        assert_eq!(
            intake.admit(txs(1, next.clone()), |_| None, &dec)[0].route,
            Route::Answer(Status::RejectedDuplicateTxId)
        );
        let malformed = vec![(TxId("a".into()), tx("token", false))];
        assert_eq!(
            intake.admit(txs(1, malformed), |_| None, &dec)[0].route,
            Route::Answer(Status::RejectedDuplicateTxId)
        );
        // "a" was the first tx admitted (sequence number 0).
        intake.finished(0);
        assert_eq!(
            intake.admit(txs(2, next), |_| None, &dec)[0].route,
            Route::Schedule
        );
    }

    #[test]
    fn envelopes_refused_before_the_body_keep_their_status() {
        let dec = wire::ProstDecoder::default();
        let mut intake = Intake::new();
        let empty = Arc::new(Tx::default());
        let block = vec![
            (TxId("a".into()), tx("token", true)),
            (TxId("".into()), empty.clone()),
            (TxId("p".into()), empty.clone()),
            (TxId("a".into()), empty),
        ];
        let refused = |i: usize| match i {
            1 => Some(Status::MalformedBadEnvelope),
            2 | 3 => Some(Status::MalformedBadEnvelopePayload),
            _ => None,
        };
        let routes: Vec<Route> = intake
            .admit(txs(0, block), refused, &dec)
            .into_iter()
            .map(|a| a.route)
            .collect();
        assert_eq!(
            routes,
            vec![
                Route::Schedule,
                Route::Answer(Status::MalformedBadEnvelope),
                Route::Store(Status::MalformedBadEnvelopePayload),
                // A refused envelope reusing an id in flight must not store under it.
                Route::Answer(Status::RejectedDuplicateTxId),
            ]
        );
    }

    /// Random blocks of ids from a small alphabet, finished in random order, with
    /// random hashes and with every id hashing alike: the same routes as a set of the
    /// ids in flight, sequence numbers that follow admission, and nothing held once
    /// every tx finished.
    #[test]
    fn ids_in_flight_match_a_set_of_ids() {
        let dec = wire::ProstDecoder::default();
        for collide in [false, true] {
            for seed in 0..20u64 {
                let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut next = move |n: u64| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng % n
                };
                let mut intake = Intake::new();
                intake.collide = collide;
                let mut model: std::collections::HashMap<String, u64> = Default::default();
                let mut pending: Vec<(u64, String)> = Vec::new();
                let mut expected_seq = 0;
                for b in 0..60u64 {
                    let names: Vec<String> = (0..next(12)).map(|_| format!("id-{}", next(40))).collect();
                    let block: Vec<(TxId, Arc<Tx>)> = names
                        .iter()
                        .map(|n| (TxId(n.clone()), tx("token", true)))
                        .collect();
                    let (first, admitted) = intake.admit_numbered(txs(b, block), |_| None, &dec);
                    assert_eq!(first, expected_seq);
                    expected_seq += names.len() as u64;
                    for (i, (n, a)) in names.iter().zip(admitted).enumerate() {
                        let seq = first + i as u64;
                        let want = if model.contains_key(n) {
                            Route::Answer(Status::RejectedDuplicateTxId)
                        } else {
                            model.insert(n.clone(), seq);
                            pending.push((seq, n.clone()));
                            Route::Schedule
                        };
                        assert_eq!(a.route, want, "seed {seed}, collide {collide}, {n}");
                    }
                    for _ in 0..next(12) {
                        if pending.is_empty() {
                            break;
                        }
                        let (seq, n) = pending.swap_remove(next(pending.len() as u64) as usize);
                        intake.finished(seq);
                        intake.finished(seq); // twice: no effect
                        model.remove(&n);
                    }
                    assert_eq!(intake.in_flight(), model.len());
                }
                for (seq, _) in pending.drain(..) {
                    intake.finished(seq);
                }
                assert_eq!(intake.in_flight(), 0);
                assert!(intake.spans.is_empty());
                assert!(
                    intake.by_hash.len() <= STALE_SLACK,
                    "swept: {}",
                    intake.by_hash.len()
                );
            }
        }
    }

    /// The id bytes and map entries of finished txs are dropped once they are many: a
    /// long run holds only about the ids of the txs in flight, and each sweep keeps
    /// them (an id of the block in flight, sent again, is a duplicate).
    #[test]
    fn finished_ids_are_dropped() {
        let dec = wire::ProstDecoder::default();
        let mut intake = Intake::new();
        let mut seq = 0;
        let name = |b: u64, i: u64| format!("{b:08}-{i:056}");
        for b in 0..2_000u64 {
            let mut block: Vec<(TxId, Arc<Tx>)> =
                (0..50).map(|i| (TxId(name(b, i)), tx("token", true))).collect();
            if b > 0 {
                block.push((TxId(name(b - 1, 0)), tx("token", true)));
            }
            let n = block.len() as u64;
            let (first, admitted) = intake.admit_numbered(txs(b, block), |_| None, &dec);
            assert_eq!(first, seq);
            assert!(admitted[..50].iter().all(|a| a.route == Route::Schedule));
            if b > 0 {
                assert_eq!(
                    admitted[50].route,
                    Route::Answer(Status::RejectedDuplicateTxId),
                    "block {b}"
                );
            }
            // The previous block finishes (its answered tx too: no effect); this one
            // stays in flight.
            for s in seq.saturating_sub(51)..seq {
                intake.finished(s);
            }
            seq += n;
            assert_eq!(intake.in_flight(), 50);
            assert!(
                intake.by_hash.len() <= 2 * 50 + STALE_SLACK + 1,
                "{}",
                intake.by_hash.len()
            );
            assert!(
                intake.held_bytes() <= 2 * COMPACT_BYTES as usize + 51 * 65,
                "{}",
                intake.held_bytes()
            );
        }
    }
}
