//! Test-only Byzantine behaviour of a batcher node (feature `testing`, never in a build
//! of the release binary): what a faulty party's batcher may do, so that multi-process
//! tests can show the other parties cope (docs/ordering-faults.md).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crypto::SigningKey;
use tokio::sync::watch;
use tracing::warn;
use types::digest::Digest32;
use types::{BatchId, PartyId};

use super::served::Served;
use crate::{Baf, BatchHeader, RequestDigest, SignedBatch};

/// A Byzantine batcher's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Byzantine {
    /// As primary, it serves its batches (`Pull`) only to party `to`'s batcher: with its
    /// own attestation that makes f + 1 (n = 4), so the batches are ordered although no
    /// other party's batcher or assembler can pull them. Every `Fetch` it answers with
    /// forged requests under the asked id and digest.
    Withhold {
        /// The one party it serves.
        to: PartyId,
    },
    /// As primary, a late equivocation. A batch it cuts that holds a victim request (one
    /// whose bytes contain [`VICTIM_MARKER`]) and at least one other request exists in
    /// two versions under one id: version A, the batch without its victims, signed again
    /// with the primary's key, and version B, the batch as cut. Its own party's nodes and
    /// party `to`'s see only A: it persists A, serves it to their pulls and submits its
    /// own BAF of A, so A is ordered with f + 1 attestations (n = 4). The other parties'
    /// pulls wait at that seq until it sees A ordered in the decisions it follows; then
    /// they get B. It then forgets the victims (they count as ordered in its mempool,
    /// so it never batches them again, nor accepts their forwards), never accuses
    /// itself, and holds a `Fetch` of A by another party's batcher until that batcher
    /// acked B (at most [`FETCH_HOLD`]): such a batcher then holds B when it learns
    /// that A was ordered, the case a correct batcher must handle.
    EquivocateLate {
        /// The one other party that gets version A.
        to: PartyId,
    },
}

/// What marks a request as a late equivocator's victim: a request whose bytes contain
/// it (a test puts it in the tx id).
pub const VICTIM_MARKER: &[u8] = b"fabrx-victim";

/// Longest a late equivocator holds another party's batcher's `Fetch` of version A.
/// The batcher's own fetch of an ordered batch gives up on one batcher after 10 s.
pub const FETCH_HOLD: Duration = Duration::from_secs(8);

/// Equivocated batches remembered at most (the oldest are forgotten first).
const MAX_EQUIVOCATIONS: usize = 256;

impl std::str::FromStr for Byzantine {
    type Err = String;

    /// `withhold:P` or `equivocate-late:P`.
    fn from_str(text: &str) -> Result<Byzantine, String> {
        let party = |mode: &str, to: &str| {
            to.parse::<PartyId>()
                .map_err(|e| format!("{mode}:P needs a party: {e}"))
        };
        match text.split_once(':') {
            Some(("withhold", to)) => party("withhold", to).map(|to| Byzantine::Withhold { to }),
            Some(("equivocate-late", to)) => {
                party("equivocate-late", to).map(|to| Byzantine::EquivocateLate { to })
            }
            _ => Err(format!(
                "unknown Byzantine behaviour {text:?} (withhold:P, equivocate-late:P)"
            )),
        }
    }
}

impl Byzantine {
    /// Whether a `Pull` from `caller` is served.
    pub(crate) fn serves_pull(self, caller: Option<PartyId>) -> bool {
        match self {
            Byzantine::Withhold { to } => caller == Some(to),
            Byzantine::EquivocateLate { .. } => true,
        }
    }

    /// Whether `Fetch` answers are forged.
    pub(crate) fn forges_fetch(self) -> bool {
        matches!(self, Byzantine::Withhold { .. })
    }
}

/// One batch cut in two versions.
#[derive(Debug)]
struct Equivocation {
    /// Without the victims: for the own party and `to`.
    a: Arc<SignedBatch>,
    /// As cut: for the others, once A is ordered.
    b: Arc<SignedBatch>,
    victims: Vec<RequestDigest>,
    /// A was ordered: B is served to the others.
    released: bool,
    /// The parties whose batcher acked B.
    acked_b: BTreeSet<PartyId>,
}

/// The state of a late equivocator (`Byzantine::EquivocateLate`), shared by the node's
/// loop (cutting, serving, attesting, decisions) and its `BatcherPeer` service (pulls,
/// fetches, acks).
#[derive(Debug)]
pub(crate) struct Late {
    own: PartyId,
    to: PartyId,
    /// By (term, seq) of this primary's batches.
    batches: Mutex<BTreeMap<(u64, u64), Equivocation>>,
    version: watch::Sender<u64>,
}

fn is_victim(request: &[u8]) -> bool {
    request.windows(VICTIM_MARKER.len()).any(|w| w == VICTIM_MARKER)
}

impl Late {
    /// A late equivocator of party `own` that shows version A to party `to` as well.
    pub(crate) fn new(own: PartyId, to: PartyId) -> Late {
        Late {
            own,
            to,
            batches: Mutex::new(BTreeMap::new()),
            version: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(u64, u64), Equivocation>> {
        self.batches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver that changes whenever a version B is released or acked.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Whether party `caller` is deceived: shown version B (late) instead of A.
    pub(crate) fn deceives(&self, caller: PartyId) -> bool {
        caller != self.own && caller != self.to
    }

    /// A batch the core asks to persist: when it is this primary's and holds a victim and
    /// another request, returns version A (signed with `key`) and remembers both.
    pub(crate) fn split(&self, batch: &Arc<SignedBatch>, key: &SigningKey) -> Option<Arc<SignedBatch>> {
        if batch.id().primary != self.own || !batch.requests.iter().any(|r| is_victim(r)) {
            return None;
        }
        let (victims, kept): (Vec<_>, Vec<_>) = batch.requests.iter().cloned().partition(|r| is_victim(r));
        if kept.is_empty() {
            warn!(id = %batch.id(), "late equivocation: a batch of victims only is not split");
            return None;
        }
        let a = Arc::new(SignedBatch::sign(batch.id(), batch.header.term, kept, key));
        warn!(
            id = %batch.id(),
            term = batch.header.term,
            victims = victims.len(),
            "late equivocation: version A without the victims for parties {} and {}",
            self.own,
            self.to
        );
        let mut batches = self.lock();
        batches.insert(
            (batch.header.term, batch.id().seq),
            Equivocation {
                a: Arc::clone(&a),
                b: Arc::clone(batch),
                victims: victims.iter().map(|r| RequestDigest::of(r)).collect(),
                released: false,
                acked_b: BTreeSet::new(),
            },
        );
        while batches.len() > MAX_EQUIVOCATIONS {
            batches.pop_first();
        }
        Some(a)
    }

    /// Version A of the batch with this header when it is a version B.
    pub(crate) fn version_a(&self, header: &BatchHeader) -> Option<Arc<SignedBatch>> {
        self.lock()
            .get(&(header.term, header.id.seq))
            .filter(|e| e.b.header == *header)
            .map(|e| Arc::clone(&e.a))
    }

    /// Its own BAF of version A instead of `baf` when `baf` attests a version B.
    pub(crate) fn baf(&self, baf: Baf, key: &SigningKey) -> Baf {
        match self.version_a(&baf.header) {
            Some(a) => Baf::sign_at(baf.config, &a, baf.signer, key),
            None => baf,
        }
    }

    /// The loop learned from a decision that batch `id` with `digest` of `term` was
    /// ordered. When it is a version A, its B is served to the others from now on;
    /// returns the victims' digests, for the loop to forget.
    pub(crate) fn on_ordered(&self, term: u64, id: BatchId, digest: &Digest32) -> Vec<RequestDigest> {
        let mut batches = self.lock();
        let Some(e) = batches
            .get_mut(&(term, id.seq))
            .filter(|e| e.a.id() == id && e.a.header.digest == *digest && !e.released)
        else {
            return Vec::new();
        };
        e.released = true;
        warn!(%id, term, "late equivocation: version A ordered; version B goes to the other parties");
        let victims = e.victims.clone();
        drop(batches);
        self.changed();
        victims
    }

    /// An ack another batcher sent: remembered when it acks a version B.
    pub(crate) fn on_ack(&self, baf: &Baf) {
        let mut batches = self.lock();
        let Some(e) = batches
            .get_mut(&(baf.header.term, baf.header.id.seq))
            .filter(|e| e.b.header == baf.header)
        else {
            return;
        };
        if e.acked_b.insert(baf.signer) {
            warn!(id = %baf.header.id, party = baf.signer, "late equivocation: a batcher acked version B");
            drop(batches);
            self.changed();
        }
    }

    /// What a `Pull` of a deceived party reads next from `seq` of `primary`'s lane in
    /// `term`: what everyone reads, except that this primary's equivocated seqs are
    /// waited for until A is ordered and then give B.
    pub(crate) fn next_for_deceived(
        &self,
        served: &Served,
        term: u64,
        primary: PartyId,
        seq: u64,
    ) -> Option<Arc<SignedBatch>> {
        let normal = served.next_for_pull(term, primary, seq);
        if primary != self.own {
            return normal;
        }
        // Up to the batch the others would read next (anything, when nothing is served).
        let upto = normal.as_ref().map_or(u64::MAX, |b| b.id().seq.max(seq));
        let batches = self.lock();
        match batches.range((term, seq)..=(term, upto)).next() {
            Some((_, e)) => e.released.then(|| Arc::clone(&e.b)),
            None => normal,
        }
    }

    /// Holds a `Fetch` of a version A by a deceived party's batcher until that batcher
    /// acked version B, at most [`FETCH_HOLD`]: its decision follower then learns that
    /// A was ordered only after it holds B.
    pub(crate) async fn hold_fetch(&self, caller: wire::tls::Peer, id: BatchId, digest: &Digest32) {
        if caller.role != wire::tls::Role::Batcher || !self.deceives(caller.party) {
            return;
        }
        let mut rx = self.subscribe();
        let waiting = |batches: &BTreeMap<(u64, u64), Equivocation>| {
            batches
                .values()
                .any(|e| e.a.id() == id && e.a.header.digest == *digest && !e.acked_b.contains(&caller.party))
        };
        let wait = async {
            loop {
                rx.borrow_and_update();
                if !waiting(&self.lock()) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(FETCH_HOLD, wait).await.is_err() {
            warn!(%id, party = caller.party, "late equivocation: version B not acked; fetch answered");
        }
    }

    /// Forgets the equivocations of terms before `term`.
    pub(crate) fn forget_before(&self, term: u64) {
        self.lock().retain(|(t, _), _| *t >= term);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(party: PartyId) -> SigningKey {
        crypto::derive_signing_key(crypto::Scheme::Ed25519, &format!("late/{party}"))
    }

    fn batch(seq: u64, requests: &[&[u8]]) -> Arc<SignedBatch> {
        let requests = requests.iter().map(|r| arma::Request::from(*r)).collect();
        Arc::new(SignedBatch::sign(BatchId::new(0, 1, seq), 0, requests, &key(1)))
    }

    #[test]
    fn modes_parse() {
        assert_eq!("withhold:2".parse(), Ok(Byzantine::Withhold { to: 2 }));
        assert_eq!(
            "equivocate-late:3".parse(),
            Ok(Byzantine::EquivocateLate { to: 3 })
        );
        assert!("equivocate-late:x".parse::<Byzantine>().is_err());
        assert!("equivocate:2".parse::<Byzantine>().is_err());
    }

    /// A batch with a victim is split; the deceived party's pull waits at its seq until
    /// A is ordered, then reads B even though A left the served set; others read A.
    #[test]
    fn the_deceived_read_b_only_after_a_is_ordered() {
        let late = Late::new(1, 2);
        let served = Served::new(std::num::NonZeroUsize::new(16).unwrap());
        assert!(late.split(&batch(1, &[b"plain"]), &key(1)).is_none());
        assert!(
            late.split(&batch(1, &[b"fabrx-victim-1"]), &key(1)).is_none(),
            "nothing left for A"
        );
        let first = batch(1, &[b"one"]);
        served.insert(Arc::clone(&first));
        let b = batch(2, &[b"two", b"tx fabrx-victim-2", b"three"]);
        let a = late.split(&b, &key(1)).unwrap();
        assert_eq!(a.requests.len(), 2);
        assert!(a.signature_verifies(&key(1).public_key()));
        assert_eq!(late.version_a(&b.header).unwrap().header, a.header);
        served.insert(Arc::clone(&a));
        assert!(late.deceives(3) && !late.deceives(2) && !late.deceives(1));
        assert_eq!(
            late.next_for_deceived(&served, 0, 1, 1).unwrap().header,
            first.header
        );
        assert!(
            late.next_for_deceived(&served, 0, 1, 2).is_none(),
            "B not released"
        );
        assert_eq!(served.next_for_pull(0, 1, 2).unwrap().header, a.header);
        served.remove(first.id(), &first.header.digest);
        assert!(
            late.next_for_deceived(&served, 0, 1, 1).is_none(),
            "skipping to 2: still held"
        );
        served.remove(a.id(), &a.header.digest);
        let victims = late.on_ordered(0, a.id(), &a.header.digest);
        assert_eq!(victims, vec![RequestDigest::of(b"tx fabrx-victim-2")]);
        assert!(late.on_ordered(0, a.id(), &a.header.digest).is_empty(), "once");
        assert_eq!(late.next_for_deceived(&served, 0, 1, 1).unwrap().header, b.header);
        assert_eq!(late.next_for_deceived(&served, 0, 1, 2).unwrap().header, b.header);
        let baf = late.baf(Baf::sign(&b, 1, &key(1)), &key(1));
        assert_eq!(baf.header, a.header);
    }
}
