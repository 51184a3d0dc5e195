//! The batcher state machine: `handle(Input) -> Vec<Output>`, no I/O inside.
//!
//! The shell executes the outputs in order. `Persist` asks for an fsync that the shell
//! confirms with `Input::Persisted`; nothing that attests to a batch (BAF, ack) is emitted
//! before that confirmation (Arma §4: a batcher signs a BAF only for a batch it persisted).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crypto::SigningKey;
use types::digest::{Digest32, batch_digest};
use types::{BatchId, PartyId, Quorum};

use crate::mempool::{Entry, Mempool, OrderedMemory};
use crate::messages::{Baf, Complaint, Request, RequestDigest, SignedBatch};
use crate::{Config, Error, Result};

/// Where the shard's ordering stands, as learned from the consenters' decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermInfo {
    /// The shard's term (its primary is party `((shard + term) mod N) + 1`).
    pub term: u64,
    /// The seq of the shard's last ordered batch, 0 if none: the term's first batch is
    /// `last_ordered_seq + 1`.
    pub last_ordered_seq: u64,
}

/// What drives the batcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The clock advanced to `now` ms (monotonic; only differences matter).
    Tick(u64),
    /// A client request from this party's router (answered `Admitted` or `Refused`).
    Request(Request),
    /// A request a secondary forwarded to this batcher as primary (not answered).
    Forwarded {
        /// The forwarding party (authenticated by the transport).
        from: PartyId,
        /// The request.
        request: Request,
    },
    /// A batch pulled from party `from` (authenticated by the transport).
    Batch {
        /// The party that served it.
        from: PartyId,
        /// The batch.
        batch: SignedBatch,
    },
    /// A compact batch pulled from party `from` (request digests in place of the
    /// requests): rebuilt from the pending requests and then taken as a pulled batch;
    /// answered `NeedFullBatch` when it cannot be rebuilt (docs/batcher.md "Compact pulls").
    CompactBatch {
        /// The party that served it.
        from: PartyId,
        /// The batch.
        batch: crate::CompactBatch,
    },
    /// A batch pulled from party `from` with a request whose content the shell refused
    /// (`arma::admission`: the shell checks content, the core only sizes, shards and
    /// duplicates): rejected with a complaint when it is the primary's next batch.
    RefusedBatch {
        /// The party that served it.
        from: PartyId,
        /// The batch.
        batch: SignedBatch,
        /// The refused request's index.
        index: usize,
        /// Why it was refused.
        reason: String,
    },
    /// A BAF another batcher of the shard sent this primary as its ack.
    Baf(Baf),
    /// The consenters moved the shard to a new term.
    TermChanged(TermInfo),
    /// The consenters ordered the batch `id`, whose requests the party's ledger delivers
    /// (one per block of this shard, in block order, before the term changes of the same
    /// decision).
    Ordered {
        /// The ordered batch.
        id: BatchId,
        /// Its requests, in order.
        requests: Vec<Request>,
    },
    /// The shell made the batch `id` with this digest durable.
    Persisted {
        /// The batch.
        id: BatchId,
        /// Its digest (a primary may cut a new batch under an id it cut in an earlier term).
        digest: Digest32,
    },
}

/// Why a request from the router was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefuseReason {
    /// The request is pending, in an unordered batch, or was ordered recently.
    Duplicate,
    /// The batcher holds `mempool_max_requests` requests.
    MempoolFullRequests,
    /// The request would take the held bytes over `mempool_max_bytes`.
    MempoolFullBytes,
    /// The request is larger than `max_request_bytes`.
    TooLarge,
    /// The request maps to another shard.
    WrongShard,
}

/// What the batcher asks its shell to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Make the batch durable, then answer `Input::Persisted`.
    Persist(Arc<SignedBatch>),
    /// The batch is persisted: serve it to secondaries and assemblers that pull it.
    Serve(Arc<SignedBatch>),
    /// Send the BAF to the consenters.
    SendBaf(Baf),
    /// Send this BAF to the consenters as evidence that the primary equivocated: it
    /// attests a version of an ordered batch id with another digest, so the shell submits
    /// it until the term changes (not only until the id is ordered).
    SendEvidence(Baf),
    /// Send the BAF to the primary `to` as this secondary's ack.
    AckPrimary {
        /// The primary.
        to: PartyId,
        /// The ack.
        baf: Baf,
    },
    /// Forward a request the primary seems to ignore.
    ForwardToPrimary {
        /// The primary.
        to: PartyId,
        /// The request.
        request: Request,
    },
    /// Send the complaint to the consenters.
    Complain(Complaint),
    /// Pull the batch `id` from its primary (replaces any earlier pull).
    Pull(BatchId),
    /// The compact batch `id` names a request this batcher does not hold pending (or one
    /// it holds with other bytes): fetch the full batch with this digest from `from` and
    /// feed it as `Input::Batch`.
    NeedFullBatch {
        /// The primary that served the compact batch.
        from: PartyId,
        /// The batch.
        id: BatchId,
        /// Its digest.
        digest: Digest32,
    },
    /// The router's request was admitted.
    Admitted {
        /// The request's digest.
        digest: RequestDigest,
    },
    /// The router's request was refused.
    Refused {
        /// The request's digest.
        digest: RequestDigest,
        /// Why.
        reason: RefuseReason,
    },
    /// A pulled batch failed verification (a complaint follows if none was sent this term).
    BatchRejected {
        /// The party that served it.
        from: PartyId,
        /// What is wrong with it.
        error: Error,
    },
}

/// A batch this batcher cut or accepted in the current term and that is not ordered yet.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub batch: Arc<SignedBatch>,
    pub digests: Vec<RequestDigest>,
    /// Whether each request was pending here (admitted by this batcher) when the batch came.
    pub own: Vec<bool>,
    pub bytes: u64,
    pub persisted: bool,
    /// Parties whose ack (BAF) the primary holds, itself included once persisted.
    pub acks: BTreeSet<PartyId>,
}

/// The batcher of one party for one shard.
pub struct Batcher {
    pub(crate) cfg: Config,
    pub(crate) key: SigningKey,
    pub(crate) quorum: Quorum,
    pub(crate) now: u64,
    pub(crate) term: u64,
    pub(crate) primary: PartyId,
    pub(crate) term_started_ms: u64,
    /// Primary: the seq of the next batch to cut; secondary: of the next batch to accept.
    /// `None` once the seq space is exhausted.
    pub(crate) next_seq: Option<u64>,
    pub(crate) mempool: Mempool,
    pub(crate) in_flight: BTreeMap<BatchId, InFlight>,
    pub(crate) in_flight_digests: HashMap<RequestDigest, BatchId, arma::DigestHash>,
    pub(crate) in_flight_requests: usize,
    pub(crate) in_flight_bytes: u64,
    pub(crate) ordered: OrderedMemory,
    pub(crate) complained: bool,
    /// Insertion key from which pending requests have not been forwarded in this round.
    pub(crate) forward_cursor: u64,
    /// When the current forwarding round started: a new round, every `forward_timeout_ms`,
    /// forwards the overdue requests again (a primary with a full mempool drops forwards).
    pub(crate) forward_round_ms: u64,
    pub(crate) pull: Option<BatchId>,
    pub(crate) out: Vec<Output>,
    /// The request digests of the batch the last `handle` ordered.
    newly_ordered: Vec<RequestDigest>,
    /// The sequence of the network config in force, signed into every BAF and complaint.
    pub(crate) config_seq: u64,
}

impl Batcher {
    /// Applies the batching parameters of a config put in force (at the decision that
    /// did, before its term changes); parameters that would make the config invalid are
    /// refused and the ones in force kept.
    pub fn set_batching(&mut self, b: &arma::BatchingView) -> Result<()> {
        let mut next = self.cfg.clone();
        next.max_batch_requests =
            std::num::NonZeroU32::new(b.max_batch_requests).ok_or(Error::LimitTooSmall {
                field: "max_batch_requests",
                value: 0,
                other: "one request",
                minimum: 1,
            })?;
        next.max_batch_bytes = std::num::NonZeroU64::new(b.max_batch_bytes).ok_or(Error::LimitTooSmall {
            field: "max_batch_bytes",
            value: 0,
            other: "one byte",
            minimum: 1,
        })?;
        next.batch_timeout_ms = b.batch_timeout_ms;
        next.forward_timeout_ms = b.forward_timeout_ms;
        next.complain_timeout_ms = b.complain_timeout_ms;
        next.validate()?;
        self.cfg = next;
        Ok(())
    }

    /// Puts the batcher keys of a config in force (at the decision that did, before its
    /// term changes, docs/reconfiguration.md "Rotating a batcher key"): the other
    /// batchers' batches are verified with `keys` from now on, and this batcher signs
    /// with `key`. `keys` names the shard's batchers, one per party in force: when a
    /// config added or removed a party, the parties become those `keys` names, and with
    /// them the acknowledgements a batch needs and the rotation of primaries from the
    /// term change that follows (docs/reconfiguration.md "Adding a party", "Removing a
    /// party"). `key` should be the one `keys` names for this party (the shell picks it
    /// from the keys it holds), but is taken even when it is not: a node that lacks its
    /// new key still verifies the others right, and the consenters refuse what it
    /// signs. Refused keys (none, or none for this batcher's party: it left) change
    /// nothing.
    pub fn set_keys(
        &mut self,
        keys: std::collections::BTreeMap<PartyId, crypto::PublicKey>,
        key: SigningKey,
    ) -> Result<()> {
        let mut next = self.cfg.clone();
        let parties = arma::Parties::new(keys.keys().copied().collect()).map_err(|e| Error::BadKeySet {
            reason: e.to_string(),
        })?;
        let changes = parties != next.parties;
        next.parties = parties;
        next.keys = keys;
        next.validate()?;
        let quorum = Quorum::new(next.parties.len() as usize).map_err(|_| Error::NoParties)?;
        self.cfg = next;
        self.quorum = quorum;
        self.key = key;
        if changes {
            // The primary of the current term under the new rotation: at a switch the
            // term changes right after, but a batcher restarted after a join is built
            // from the genesis config and put back under this one in its current term.
            self.primary = self.cfg.primary_of(self.term);
        }
        Ok(())
    }

    /// The network config of sequence `sequence` is in force (at the decision that put it
    /// in force, before its term changes; again at a restart): this batcher's BAFs and
    /// complaints name it from now on, and the consenters refuse those that name
    /// another (docs/reconfiguration.md "Config sequence in messages").
    pub fn set_config_sequence(&mut self, sequence: u64) {
        self.config_seq = sequence;
    }

    /// The sequence of the network config this batcher signs under.
    pub fn config_sequence(&self) -> u64 {
        self.config_seq
    }

    /// Whether `key` is the one the config in force names for this batcher.
    pub fn is_own_key(&self, key: &crypto::PublicKey) -> bool {
        self.cfg.keys.get(&self.cfg.party) == Some(key)
    }

    /// This batcher's signing key.
    pub fn signing_key(&self) -> &SigningKey {
        &self.key
    }

    /// The core's config.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// A batcher starting at `start` (term 0 and seq 0 at genesis; after a restart, what the
    /// decisions say). Fails if the config is invalid or `key` is not the party's key.
    pub fn new(cfg: Config, key: SigningKey, start: TermInfo) -> Result<Batcher> {
        cfg.validate()?;
        if cfg.keys.get(&cfg.party) != Some(&key.public_key()) {
            return Err(Error::SigningKeyMismatch { party: cfg.party });
        }
        let quorum = Quorum::new(cfg.parties.len() as usize).map_err(|_| Error::NoParties)?;
        Ok(Batcher {
            quorum,
            key,
            now: 0,
            term: start.term,
            primary: cfg.primary_of(start.term),
            term_started_ms: 0,
            next_seq: start.last_ordered_seq.checked_add(1),
            mempool: Mempool::new(),
            in_flight: BTreeMap::new(),
            in_flight_digests: HashMap::default(),
            in_flight_requests: 0,
            in_flight_bytes: 0,
            ordered: OrderedMemory::new(cfg.ordered_memory.get()),
            complained: false,
            forward_cursor: 0,
            forward_round_ms: 0,
            pull: None,
            out: Vec::new(),
            newly_ordered: Vec::new(),
            config_seq: 0,
            cfg,
        })
    }

    /// The request digests of the batch the last [`Batcher::handle`] ordered (none when
    /// it was not an `Ordered` input of this shard), in order: what the shell records as
    /// ordered, without hashing the requests again.
    pub fn take_newly_ordered(&mut self) -> Vec<RequestDigest> {
        std::mem::take(&mut self.newly_ordered)
    }

    /// Feeds one input and returns the outputs to execute in order.
    pub fn handle(&mut self, input: Input) -> Vec<Output> {
        self.newly_ordered.clear();
        match input {
            Input::Tick(now) => self.now = self.now.max(now),
            Input::Request(request) => self.on_request(request),
            Input::Forwarded { from, request } => self.on_forwarded(from, request),
            Input::Batch { from, batch } => self.on_batch(from, batch),
            Input::CompactBatch { from, batch } => self.on_compact_batch(from, batch),
            Input::RefusedBatch {
                from,
                batch,
                index,
                reason,
            } => self.on_refused_batch(from, &batch, index, reason),
            Input::Baf(baf) => self.on_baf(baf),
            Input::TermChanged(info) => self.on_term_changed(info),
            Input::Ordered { id, requests } => self.on_ordered(id, &requests),
            Input::Persisted { id, digest } => self.on_persisted(id, digest),
        }
        if self.is_primary() {
            self.cut_batches();
        } else {
            self.watch_censorship();
            self.request_pull();
        }
        std::mem::take(&mut self.out)
    }

    /// Moves the clock forward to `now` (ms, the clock of `Input::Tick`) without acting
    /// on it: a shell calls it before each input so that arrivals are stamped with the
    /// time they arrived, and ticks only at [`Batcher::next_deadline`].
    pub fn advance_clock(&mut self, now: u64) {
        self.now = self.now.max(now);
    }

    /// The earliest time (ms, the clock of `Input::Tick`) at which a `Tick` may make this
    /// batcher act on its own (cut a batch as primary; forward requests or complain as a
    /// secondary), given its state now; `None` when no tick can until another input
    /// arrives. Never later than the first tick that would act, possibly earlier (a tick
    /// before it does nothing): a shell may sleep until then instead of ticking.
    pub fn next_deadline(&self) -> Option<u64> {
        let oldest = self.mempool.oldest()?;
        if self.is_primary() {
            return self
                .may_cut()
                .then(|| oldest.arrival_ms.saturating_add(self.cfg.batch_timeout_ms));
        }
        let since = |arrival: u64| arrival.max(self.term_started_ms);
        let forward = self.cfg.forward_timeout_ms;
        // The next round starts (and forwards again what waited long enough) ...
        let mut due = self.forward_round_ms.saturating_add(forward);
        // ... or the next request this round has not forwarded waits long enough ...
        if let Some((_, next)) = self.mempool.starting_at(self.forward_cursor).next() {
            due = due.min(since(next.arrival_ms).saturating_add(forward));
        }
        // ... or the oldest one waits long enough for a complaint.
        if !self.complained {
            due = due.min(since(oldest.arrival_ms).saturating_add(self.cfg.complain_timeout_ms));
        }
        Some(due)
    }

    /// After a restart, re-adopts a batch this batcher had persisted before it stopped, as
    /// if its `Persisted` had just arrived: the shell calls it for the batches of its
    /// store that belong to the current term and primary, in seq order, from
    /// `last_ordered_seq + 1` on. A batch is adopted when it is the next seq of the
    /// current primary and term (and, for another primary's batch, still verifies);
    /// the seq to cut or accept moves past it, so a restarted primary never signs a
    /// second batch under a seq it already signed in the term. The `max_unordered_batches`
    /// bound is not applied: every batch that was persisted is adopted (it may have been
    /// attested already), and ordering brings the count back under the bound.
    ///
    /// Returns `Serve`, `SendBaf` and, for another primary's batch, `AckPrimary`; an
    /// empty vector when the batch is not adopted.
    pub fn restore(&mut self, batch: Arc<SignedBatch>) -> Vec<Output> {
        let id = batch.id();
        let adoptable = id.shard == self.cfg.shard
            && id.primary == self.primary
            && batch.header.term == self.term
            && self.next_seq == Some(id.seq)
            && !self.in_flight.contains_key(&id)
            && (id.primary == self.cfg.party || crate::verify_batch(&self.cfg, &batch).is_ok());
        if !adoptable {
            return Vec::new();
        }
        self.next_seq = id.seq.checked_add(1);
        let digest = batch.header.digest;
        let digests = batch.requests.iter().map(|r| RequestDigest::of(r)).collect();
        self.add_in_flight(batch, digests);
        self.out.retain(|o| !matches!(o, Output::Persist(_)));
        self.on_persisted(id, digest);
        if !self.is_primary() {
            self.pull = None;
        }
        std::mem::take(&mut self.out)
    }

    /// After a restart, remembers a request as ordered (the shell replays the digests of
    /// the last `ordered_memory` ordered requests from its progress log), so that a
    /// resubmission is refused as a duplicate.
    pub fn remember_ordered(&mut self, digest: RequestDigest) {
        self.mempool.remove(&digest);
        self.ordered.insert(digest);
    }

    /// The request digests of the batch `id` with `digest` while it is in flight: what
    /// the shell serves as its compact form.
    pub fn request_digests(&self, id: BatchId, digest: &Digest32) -> Option<&[RequestDigest]> {
        self.in_flight
            .get(&id)
            .filter(|b| b.batch.header.digest == *digest)
            .map(|b| b.digests.as_slice())
    }

    /// Whether this batcher is its shard's primary in the current term.
    pub fn is_primary(&self) -> bool {
        self.primary == self.cfg.party
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The current primary.
    pub fn primary(&self) -> PartyId {
        self.primary
    }

    /// The seq of the next batch to cut (primary) or accept (secondary).
    pub fn next_seq(&self) -> Option<u64> {
        self.next_seq
    }

    /// Pending requests: (count, bytes).
    pub fn pending(&self) -> (usize, u64) {
        (self.mempool.len(), self.mempool.bytes())
    }

    /// Requests in unordered batches of the term: (count, bytes).
    pub fn in_flight(&self) -> (usize, u64) {
        (self.in_flight_requests, self.in_flight_bytes)
    }

    /// Batches of the term not ordered yet.
    pub fn unordered_batches(&self) -> usize {
        self.in_flight.len()
    }

    /// Batches this primary cut that lack f+1 acks (its own included).
    pub fn unconfirmed_batches(&self) -> usize {
        self.in_flight
            .values()
            .filter(|b| b.batch.id().primary == self.cfg.party && !self.confirmed(b))
            .count()
    }

    /// Whether the request with this digest is pending, in flight or recently ordered.
    pub fn knows(&self, digest: &RequestDigest) -> bool {
        self.mempool.contains(digest)
            || self.in_flight_digests.contains_key(digest)
            || self.ordered.contains(digest)
    }

    pub(crate) fn confirmed(&self, b: &InFlight) -> bool {
        b.acks.len() >= self.quorum.baf_threshold()
    }

    fn on_request(&mut self, request: Request) {
        let (digest, admitted) = self.admit(request, None);
        let answer = match admitted {
            Ok(()) => Output::Admitted { digest },
            Err(reason) => Output::Refused { digest, reason },
        };
        self.out.push(answer);
    }

    fn on_forwarded(&mut self, from: PartyId, request: Request) {
        if self.is_primary() && from != self.cfg.party && self.cfg.keys.contains_key(&from) {
            // Each other party may hold at most its share of the pending queue with
            // forwards, so a Byzantine batcher flooding forwards cannot crowd out the
            // router's requests or the other parties' forwards.
            if self.mempool.forwarded_by(from) >= self.forward_quota() {
                return;
            }
            // A refused forward is dropped: the forwarder keeps the request and complains.
            let _ = self.admit(request, Some(from));
        }
    }

    /// How many pending requests one forwarding party may hold: its share of the
    /// mempool, `mempool_max_requests / parties` (at least one).
    pub(crate) fn forward_quota(&self) -> usize {
        // A validated config has at least one party; the share is at least one request.
        let parties = self.cfg.parties.len() as usize;
        let share = self.cfg.mempool_max_requests.get().checked_div(parties);
        share.filter(|s| *s > 0).unwrap_or(1)
    }

    /// Checks a request and appends it to the mempool; returns its digest and whether it
    /// was admitted. The bounds count the pending requests and those in unordered
    /// batches, so giving the latter back after a term change never overflows the
    /// mempool.
    fn admit(
        &mut self,
        request: Request,
        forwarder: Option<PartyId>,
    ) -> (RequestDigest, std::result::Result<(), RefuseReason>) {
        let (digest, shard) = arma::content::keys(&request, self.cfg.shards);
        (digest, self.admit_keyed(digest, shard.ok(), request, forwarder))
    }

    fn admit_keyed(
        &mut self,
        digest: RequestDigest,
        shard: Option<types::ShardId>,
        request: Request,
        forwarder: Option<PartyId>,
    ) -> std::result::Result<(), RefuseReason> {
        if request.len() > self.cfg.max_request_bytes.get() {
            return Err(RefuseReason::TooLarge);
        }
        if shard != Some(self.cfg.shard) {
            return Err(RefuseReason::WrongShard);
        }
        if self.knows(&digest) {
            return Err(RefuseReason::Duplicate);
        }
        let held = self.mempool.len().saturating_add(self.in_flight_requests);
        if held >= self.cfg.mempool_max_requests.get() {
            return Err(RefuseReason::MempoolFullRequests);
        }
        let bytes = self
            .mempool
            .bytes()
            .saturating_add(self.in_flight_bytes)
            .saturating_add(request.len() as u64);
        if bytes > self.cfg.mempool_max_bytes.get() {
            return Err(RefuseReason::MempoolFullBytes);
        }
        self.mempool.push_back(Entry {
            digest,
            request,
            arrival_ms: self.now,
            forwarder,
        });
        Ok(())
    }

    /// Records a batch of the term as in flight (its requests leave the pending queue).
    /// `digests` are the [`RequestDigest`]s of its requests, in order (the caller has
    /// them already: from the mempool when cutting, from verification when pulling).
    pub(crate) fn add_in_flight(&mut self, batch: Arc<SignedBatch>, digests: Vec<RequestDigest>) {
        let id = batch.id();
        debug_assert_eq!(digests.len(), batch.requests.len());
        let mut own = Vec::with_capacity(batch.requests.len());
        let mut bytes = 0u64;
        for (request, digest) in batch.requests.iter().zip(&digests) {
            own.push(self.mempool.remove(digest));
            self.in_flight_digests.entry(*digest).or_insert(id);
            bytes = bytes.saturating_add(request.len() as u64);
        }
        self.in_flight_requests = self.in_flight_requests.saturating_add(digests.len());
        self.in_flight_bytes = self.in_flight_bytes.saturating_add(bytes);
        self.out.push(Output::Persist(Arc::clone(&batch)));
        self.in_flight.insert(
            id,
            InFlight {
                batch,
                digests,
                own,
                bytes,
                persisted: false,
                acks: BTreeSet::new(),
            },
        );
    }

    /// Forgets a batch of the flight; its requests are no longer held.
    fn remove_in_flight(&mut self, id: BatchId) -> Option<InFlight> {
        let b = self.in_flight.remove(&id)?;
        for d in &b.digests {
            if self.in_flight_digests.get(d) == Some(&id) {
                self.in_flight_digests.remove(d);
            }
        }
        self.in_flight_requests = self.in_flight_requests.saturating_sub(b.digests.len());
        self.in_flight_bytes = self.in_flight_bytes.saturating_sub(b.bytes);
        Some(b)
    }

    /// An ordered batch: its requests leave the mempool (whether or not this batcher held
    /// the batch) and are remembered as ordered; a lagging secondary skips past it. A
    /// batch this batcher holds under the same id with another digest lost: the primary
    /// signed two versions. Its requests that were not ordered go back to the front of the
    /// mempool at once, so the censorship watch sees them again, and this batcher sends
    /// its BAF for the lost version as evidence (`Output::SendEvidence`): the consenters
    /// change the term once it is ordered (docs/consenter.md "Equivocation found late").
    fn on_ordered(&mut self, id: BatchId, requests: &[Request]) {
        if id.shard != self.cfg.shard {
            return;
        }
        let same = self.in_flight.get(&id).map(|b| {
            // The shell usually hands back the very batch it holds (the same shared
            // requests): equal without hashing them again.
            let shared = b.batch.requests.len() == requests.len()
                && b.batch
                    .requests
                    .iter()
                    .zip(requests)
                    .all(|(a, r)| Arc::ptr_eq(a, r));
            shared || b.batch.header.digest == batch_digest(requests)
        });
        let (held, lost) = match same {
            Some(true) => (self.remove_in_flight(id), None),
            Some(false) => (None, self.remove_in_flight(id)),
            None => (None, None),
        };
        // A batch held in flight has the same requests (same batch digest): reuse the
        // request digests computed when it entered the flight.
        let digests = match held {
            Some(b) => b.digests,
            None => requests.iter().map(|r| RequestDigest::of(r)).collect(),
        };
        for d in &digests {
            self.mempool.remove(d);
            self.ordered.insert(*d);
        }
        self.newly_ordered.extend(digests);
        if let Some(lost) = lost {
            let evidence = Baf::sign_at(self.config_seq, &lost.batch, self.cfg.party, &self.key);
            self.give_back(std::slice::from_ref(&lost));
            self.out.push(Output::SendEvidence(evidence));
        }
        let behind = self.next_seq.is_some_and(|next| next <= id.seq);
        if id.primary == self.primary && !self.is_primary() && behind {
            self.next_seq = id.seq.checked_add(1);
        }
    }

    fn on_persisted(&mut self, id: BatchId, digest: Digest32) {
        let party = self.cfg.party;
        let Some(b) = self.in_flight.get_mut(&id) else {
            return;
        };
        if b.persisted || b.batch.header.digest != digest {
            return;
        }
        b.persisted = true;
        let batch = Arc::clone(&b.batch);
        let baf = Baf::sign_at(self.config_seq, &batch, party, &self.key);
        if id.primary == party {
            b.acks.insert(party);
        }
        self.out.push(Output::Serve(batch));
        self.out.push(Output::SendBaf(baf.clone()));
        if id.primary != party {
            self.out.push(Output::AckPrimary { to: id.primary, baf });
        }
    }

    /// A new term: the batches of the old term that were not ordered are abandoned and
    /// their requests go back to the front of the mempool (docs/batcher.md "Terms").
    fn on_term_changed(&mut self, info: TermInfo) {
        if info.term <= self.term {
            return;
        }
        let abandoned: Vec<BatchId> = self.in_flight.keys().copied().collect();
        let mut returned = Vec::new();
        for id in abandoned {
            if let Some(b) = self.remove_in_flight(id) {
                returned.push(b);
            }
        }
        self.give_back(&returned);
        self.term = info.term;
        self.primary = self.cfg.primary_of(info.term);
        self.term_started_ms = self.now;
        self.next_seq = info.last_ordered_seq.checked_add(1);
        self.complained = false;
        self.forward_cursor = 0;
        self.forward_round_ms = self.now;
        self.pull = None;
    }

    /// Puts the requests of abandoned batches back at the front of the mempool, in batch
    /// order. The ones this batcher had admitted always fit (the bounds counted them while
    /// in flight); requests it only saw in a pulled batch come back while room remains.
    fn give_back(&mut self, returned: &[InFlight]) {
        let mut count = self.mempool.len();
        let mut bytes = self.mempool.bytes();
        let mut keep = Vec::new();
        for own_pass in [true, false] {
            for (bi, b) in returned.iter().enumerate() {
                for (ri, request) in b.batch.requests.iter().enumerate() {
                    let (Some(&own), Some(digest)) = (b.own.get(ri), b.digests.get(ri)) else {
                        continue;
                    };
                    let len = request.len() as u64;
                    let fits = count < self.cfg.mempool_max_requests.get()
                        && bytes.saturating_add(len) <= self.cfg.mempool_max_bytes.get();
                    if own != own_pass || !fits || self.knows(digest) {
                        continue;
                    }
                    count = count.saturating_add(1);
                    bytes = bytes.saturating_add(len);
                    keep.push((bi, ri));
                }
            }
        }
        keep.sort_unstable();
        for (bi, ri) in keep.into_iter().rev() {
            let Some(b) = returned.get(bi) else { continue };
            if let (Some(request), Some(digest)) = (b.batch.requests.get(ri), b.digests.get(ri))
                && !self.mempool.contains(digest)
            {
                self.mempool.push_front(Entry {
                    digest: *digest,
                    request: Arc::clone(request),
                    arrival_ms: self.now,
                    forwarder: None,
                });
            }
        }
    }

    pub(crate) fn complain(&mut self, reason: crate::ComplaintReason) {
        if self.complained || self.is_primary() {
            return;
        }
        self.complained = true;
        let complaint = Complaint::sign_at(
            self.config_seq,
            self.cfg.shard,
            self.term,
            self.cfg.party,
            reason,
            &self.key,
        );
        self.out.push(Output::Complain(complaint));
    }
}
