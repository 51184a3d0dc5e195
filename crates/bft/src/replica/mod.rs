//! The replica state machine: `handle(Input) -> Vec<Output>`, no I/O inside.
//!
//! * `normal.rs` — requests, batching, pre-prepare / prepare / commit (PBFT §4.2).
//! * `view_change.rs` — complaints, view change, new view (PBFT §4.4, §4.5.2).
//! * `sync.rs` — heartbeats and state transfer by certified decisions.
//! * `checkpoint.rs` — checkpoints, pruning, and state transfer by snapshot.
//! * `restore.rs` — rebuilding a replica from its WAL.
//! * `membership.rs` — switching replica sets at a decision (reconfiguration).

mod checkpoint;
mod counters;
mod membership;
mod normal;
mod pending;
mod restore;
mod sync;
mod view_change;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::app::Application;
use crate::certificate::{Certificate, Decision, Phase, Prepared, vote_bytes};
use crate::crypto::{Signature, Signer, Verifier};
use crate::messages::{Carry, Message, NewView, ViewChange, Vote};
use crate::types::{Config, Digest, Proposed, Quorum, ReplicaId, Seq, View};
use crate::wal::WalEntry;

pub use counters::Counters;
pub use membership::MAX_SWITCH_PROOFS;
use pending::Pending;

/// What drives the replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The clock advanced to `now` milliseconds (monotonic; only differences matter).
    Tick(u64),
    /// A client request submitted to this replica.
    Request(Vec<u8>),
    /// A message from peer `from` (authenticated by the transport).
    Message {
        /// Sender.
        from: ReplicaId,
        /// The message.
        msg: Message,
    },
}

/// What the replica asks its shell to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Make this entry durable before executing any later output of the same batch.
    Persist(WalEntry),
    /// Send `msg` to replica `to`.
    Send {
        /// Destination.
        to: ReplicaId,
        /// The message.
        msg: Message,
    },
    /// Send `msg` to every other replica.
    Broadcast(Message),
    /// A decision, in sequence order; already applied to the [`Application`].
    Deliver(Arc<Decision>),
    /// A client request (`Input::Request`) was not taken into the pending pool. A
    /// request that is already pending is not refused: it will be decided once.
    Refused {
        /// `Digest::of_request` of the request.
        request: Digest,
        /// Why.
        reason: Refusal,
    },
    /// The replica replaced its application state by a stable checkpoint's snapshot
    /// (state transfer): decisions up to `seq` will not be delivered here. The shell
    /// persists the application's new state (the WAL already holds the checkpoint).
    Installed {
        /// The decision the snapshot follows.
        seq: Seq,
        /// The snapshot the application installed.
        snapshot: Arc<Vec<u8>>,
    },
    /// The replica installed a new view.
    ViewInstalled {
        /// The view.
        view: View,
        /// Its leader.
        leader: ReplicaId,
    },
}

/// Why a client request was not taken into the pending pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Larger than `Config::max_request_bytes`.
    TooLarge,
    /// The pool holds `max_pending` requests or `max_pending_bytes` bytes.
    PoolFull,
    /// The application's `verify_request` refused it.
    Invalid,
    /// It is already decided (not an error: the client may treat it as ordered).
    AlreadyDecided,
    /// This replica is not a member of the replica set in force (it left, or joins
    /// later): submit to a member.
    NotMember,
}

/// Why a replica asked for a new view (the last complaint, for logs and status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Complaint {
    /// The leader was not heard from within the (backed-off) heartbeat timeout.
    LeaderSilent,
    /// A pending request waited past the (backed-off) request timeout.
    RequestTimeout,
    /// The accepted proposal did not decide within the (backed-off) request timeout.
    SlotStuck,
    /// The leader's proposal failed verification.
    BadProposal,
    /// The leader sent two proposals for one `(view, seq)`.
    Equivocation,
    /// `f+1` other replicas asked for a higher view (join rule).
    Joined,
    /// A quorum asked for the target view but no new view came in time.
    NewViewTimeout,
}

/// Whether the replica works in a view or is changing views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Working in the current view.
    Normal,
    /// Sent a view change for `target` and waits for its new view.
    ViewChanging {
        /// The view asked for.
        target: View,
    },
}

/// A vote held in the slot. Its signature is checked only when the vote is needed for
/// a certificate (docs/bft.md "What a decision costs").
#[derive(Clone, Debug)]
struct HeldVote {
    signature: Signature,
    /// The signature was checked (or is this replica's own).
    verified: bool,
}

/// Votes and proposal for the sequence number being decided, in the current view.
#[derive(Debug, Default)]
struct Slot {
    accepted: Option<Proposed>,
    votes: BTreeMap<(Phase, Digest), BTreeMap<ReplicaId, HeldVote>>,
    my_votes: Vec<Vote>,
    /// The phases each replica voted in (a replica's first vote of a phase counts; a
    /// second one for another digest is ignored, so junk votes cannot grow the slot).
    voted: BTreeMap<(ReplicaId, Phase), Digest>,
    sent_commit: bool,
    started_ms: Option<u64>,
    /// Digests of the accepted proposal's requests, when already computed.
    request_digests: Vec<Digest>,
}

/// State-transfer bookkeeping.
#[derive(Debug, Default)]
struct SyncState {
    /// Highest decided sequence number each peer claims or proved.
    peer_heights: BTreeMap<ReplicaId, Seq>,
    /// The peer asked last and when the request expires.
    outstanding: Option<(ReplicaId, u64)>,
    last_asked: ReplicaId,
    /// Peers asked whose answer has not come: a snapshot answer is read only from
    /// them, once each, however late (at most one per member).
    unanswered: std::collections::BTreeSet<ReplicaId>,
}

/// One BFT replica of one instance.
pub struct Replica<A: Application> {
    cfg: Config,
    quorum: Quorum,
    app: A,
    signer: Box<dyn Signer>,
    verifier: Arc<dyn Verifier>,
    now: u64,
    view: View,
    status: Status,
    /// Proof of the current view (none for view 0 or after a restart).
    new_view_proof: Option<Arc<NewView>>,
    /// When the proof was last sent to each straggler.
    nv_sent: BTreeMap<ReplicaId, u64>,
    /// Obligations of the current view.
    carry: Carry,
    vc_deadline: Option<u64>,
    /// View changes since the last decision: every timeout is doubled this many times
    /// (capped by `Config::max_backoff_exponent`); a decision resets it.
    backoff: u32,
    /// When the current view was installed (or the clock started).
    view_since: u64,
    /// The target and reason of the last view change this replica started.
    last_complaint: Option<(View, Complaint)>,
    /// Latest verified view change of each replica (including this one).
    view_changes: BTreeMap<ReplicaId, Arc<ViewChange>>,
    /// Decisions kept for state transfer: consecutive, the last one is `last_decided`
    /// (pruned below the stable checkpoint minus `retain_decisions`).
    decisions: VecDeque<Arc<Decision>>,
    /// The highest decided sequence number (a stable checkpoint may stand for it).
    last_decided: Seq,
    /// Commit certificate of decision `last_decided` (reported in view changes).
    last_commit: Option<Certificate>,
    /// Request digests of the kept decisions (de-duplication within that window; an
    /// older request proposed again is the application's to recognise, see docs/bft.md).
    decided_requests: HashSet<Digest>,
    /// Whether followers refuse a proposal that repeats a request they know decided:
    /// only when nothing is ever pruned (no checkpoints), so that every replica at a
    /// sequence knows the same decided requests. With pruning, what each replica still
    /// knows differs, and refusing on that local knowledge can stall the cluster in
    /// view changes (the leader's pool re-admitted a request whose digest it pruned);
    /// the application then decides what a repeat means (docs/bft.md "Checkpoints").
    dedup_proposals: bool,
    checkpoints: checkpoint::Checkpoints,
    slot: Slot,
    /// Highest prepared certificate for the next sequence, kept across views.
    prepared: Option<Prepared>,
    /// Messages ahead of this replica, per sender (bounded in count and bytes each).
    future: BTreeMap<ReplicaId, FutureQueue>,
    pending: Pending,
    last_leader_heard: u64,
    next_heartbeat: u64,
    sync: SyncState,
    clock_started: bool,
    /// The epoch of the replica set in force ([`crate::Membership`]).
    epoch: u64,
    /// The decision that switched to it (0 for the first set).
    epoch_start: Seq,
    /// The latest decisions that switched sets (proofs for replicas of older sets).
    switches: VecDeque<SwitchProof>,
    /// When each peer that showed it is behind the switch was last told our height.
    told: BTreeMap<ReplicaId, u64>,
    /// While changing views: the highest lower view a member's heartbeat showed it in
    /// (the others may have settled there without this replica).
    heard_view: Option<View>,
    /// Messages, WAL writes and decisions so far ([`Replica::counters`]).
    counters: Counters,
    /// Signatures made and verified so far (shared with the wrapped signer and verifier).
    signatures: Arc<counters::SignatureTally>,
    out: Vec<Output>,
}

/// A decision that switched sets, with the set it switched to (kept as a proof for
/// replicas of older sets, and restated in every checkpoint entry of the WAL).
#[derive(Clone, Debug)]
struct SwitchProof {
    /// The epoch of the set it switched to.
    epoch: u64,
    /// That set's members.
    members: crate::types::Members,
    /// The switching decision, certified by the set before.
    decision: Arc<Decision>,
}

impl<A: Application> Replica<A> {
    /// A fresh replica (empty WAL) in view 0.
    pub fn new(cfg: Config, app: A, signer: Box<dyn Signer>, verifier: Arc<dyn Verifier>) -> Self {
        let quorum = cfg.quorum();
        let dedup_proposals = cfg.checkpoint_interval == 0 || app.snapshot().is_none();
        let signatures = Arc::new(counters::SignatureTally::default());
        Replica {
            quorum,
            app,
            signer: counters::CountingSigner::wrap(signer, &signatures),
            verifier: counters::CountingVerifier::wrap(verifier, &signatures),
            signatures,
            counters: Counters::default(),
            now: 0,
            view: 0,
            status: Status::Normal,
            new_view_proof: None,
            nv_sent: BTreeMap::new(),
            carry: Carry {
                decided: 0,
                proposal: None,
            },
            vc_deadline: None,
            backoff: 0,
            view_since: 0,
            last_complaint: None,
            view_changes: BTreeMap::new(),
            decisions: VecDeque::new(),
            last_decided: 0,
            last_commit: None,
            decided_requests: HashSet::new(),
            dedup_proposals,
            checkpoints: checkpoint::Checkpoints::default(),
            slot: Slot::default(),
            prepared: None,
            future: BTreeMap::new(),
            pending: Pending::default(),
            last_leader_heard: 0,
            next_heartbeat: 0,
            sync: SyncState::default(),
            clock_started: false,
            epoch: 0,
            epoch_start: 0,
            switches: VecDeque::new(),
            told: BTreeMap::new(),
            heard_view: None,
            out: Vec::new(),
            cfg,
        }
    }

    /// Feeds one input and returns the outputs to execute in order.
    pub fn handle(&mut self, input: Input) -> Vec<Output> {
        match input {
            Input::Tick(now) => self.on_tick(now),
            Input::Request(request) => self.on_request(request, true),
            Input::Message { from, msg } => {
                self.counters.messages_in += 1;
                self.on_message(from, msg);
            }
        }
        let out = std::mem::take(&mut self.out);
        self.count_outputs(&out);
        out
    }

    /// Counts the WAL entries, WAL syncs (runs of consecutive entries, which the shell
    /// appends and syncs together) and deliveries of one batch of outputs.
    fn count_outputs(&mut self, out: &[Output]) {
        let mut in_run = false;
        for o in out {
            let persist = matches!(o, Output::Persist(_));
            if persist {
                self.counters.wal_entries += 1;
                if !in_run {
                    self.counters.wal_syncs += 1;
                }
            }
            if matches!(o, Output::Deliver(_)) {
                self.counters.decisions += 1;
            }
            in_run = persist;
        }
    }

    /// What this replica spent since it was built or restored: messages in and out,
    /// signatures made and verified, WAL entries and syncs, decisions.
    pub fn counters(&self) -> Counters {
        Counters {
            signatures_made: self.signatures.made(),
            signatures_verified: self.signatures.verified(),
            ..self.counters
        }
    }

    fn on_message(&mut self, from: ReplicaId, msg: Message) {
        if from == self.cfg.id || msg.instance() != self.cfg.instance {
            return;
        }
        if !self.cfg.members.contains(from) {
            // Not in this set: a replica a switch removed, which may not have decided
            // that switch yet. It is told this replica's height and its requests for
            // decisions are served, so that it learns it was removed (and stops taking
            // requests); nothing it says counts here.
            if self.epoch_start > 0 {
                match &msg {
                    Message::Heartbeat { .. } | Message::Vote(_) | Message::ViewChange(_) => {
                        self.tell_straggler(from, &msg);
                    }
                    Message::SyncRequest { from_seq, .. } => self.on_sync_request(from, *from_seq),
                    _ => {}
                }
            }
            return;
        }
        if !self.is_member() {
            // A follower: state transfer only (a replica that left still helps those
            // of the old set catch up to the switch).
            self.tell_straggler(from, &msg);
            match msg {
                Message::Heartbeat { last_decided, .. } => self.note_height(from, last_decided),
                Message::Vote(vote) => self.note_height(from, vote.seq.saturating_sub(1)),
                Message::SyncRequest { from_seq, .. } => self.on_sync_request(from, from_seq),
                Message::SyncResponse { decisions, .. } => self.on_sync_response(from, decisions),
                Message::SyncSnapshot { checkpoint, switches } => {
                    self.on_sync_snapshot(from, checkpoint, &switches);
                }
                _ => {}
            }
            return;
        }
        self.tell_straggler(from, &msg);
        match msg {
            Message::Forward { request, .. } => self.on_request(request, false),
            Message::PrePrepare { view, proposal } => self.on_pre_prepare(from, view, proposal),
            Message::Vote(vote) => {
                self.on_vote_heard(from, &vote);
                self.on_vote(from, vote);
            }
            Message::ViewChange(vc) => self.on_view_change(from, vc),
            Message::NewView(nv) => self.on_new_view(from, nv),
            Message::Heartbeat {
                view, last_decided, ..
            } => self.on_heartbeat(from, view, last_decided),
            Message::SyncRequest { from_seq, .. } => self.on_sync_request(from, from_seq),
            Message::SyncResponse { decisions, .. } => self.on_sync_response(from, decisions),
            Message::Checkpoint(vote) => self.on_checkpoint(from, vote),
            Message::SyncSnapshot { checkpoint, switches } => {
                self.on_sync_snapshot(from, checkpoint, &switches);
            }
        }
    }

    fn on_tick(&mut self, now: u64) {
        if !self.clock_started {
            // The first tick starts the clocks: nobody is suspected for time spent
            // before the replica ran.
            self.clock_started = true;
            self.last_leader_heard = now;
            self.view_since = now;
            self.pending.rebase(now);
        }
        self.now = self.now.max(now);
        if !self.is_member() {
            self.poll_as_follower();
            return;
        }
        if self.now >= self.next_heartbeat {
            self.next_heartbeat = self.now + self.cfg.heartbeat_interval_ms;
            self.send_heartbeat();
        }
        match self.status {
            Status::Normal => self.check_normal_timers(),
            Status::ViewChanging { target } => {
                if self.vc_deadline.is_some_and(|d| self.now >= d) {
                    self.start_view_change(target + 1, Complaint::NewViewTimeout);
                }
            }
        }
        self.maybe_propose();
        self.maybe_sync();
    }

    /// Moves the clock forward to `now` (ms, the clock of `Input::Tick`) without acting
    /// on it; before the first tick it does nothing (that tick starts the clocks). A
    /// shell calls it before each input so that what an input records (a heartbeat
    /// heard, a request's arrival) carries the time it came, and ticks only at
    /// [`Replica::next_deadline`].
    pub fn advance_clock(&mut self, now: u64) {
        if self.clock_started {
            self.now = self.now.max(now);
        }
    }

    /// The earliest time (ms, the clock of `Input::Tick`) at which a `Tick` may make this
    /// replica act (a heartbeat, a timeout, a proposal whose batch interval ran out, a
    /// sync request or its retry), given its state now. Never later than the first tick
    /// that would act, possibly earlier (a tick before it does nothing): a shell may
    /// sleep until then instead of ticking at a fixed rate.
    pub fn next_deadline(&self) -> u64 {
        if !self.clock_started {
            return 0;
        }
        let mut due = self.next_heartbeat;
        let mut at = |t: u64| due = due.min(t);
        match self.sync.outstanding {
            Some((_, deadline)) => at(deadline),
            None => {
                let next = self.next_seq();
                if self.sync.peer_heights.values().any(|h| *h >= next) {
                    at(self.now);
                }
            }
        }
        if !self.is_member() {
            return due;
        }
        match self.status {
            Status::ViewChanging { .. } => {
                if let Some(d) = self.vc_deadline {
                    at(d);
                }
            }
            Status::Normal => {
                let heartbeat_timeout = self.backed_off(self.cfg.heartbeat_timeout_ms);
                let request_timeout = self.backed_off(self.cfg.request_timeout_ms);
                let leader = self.is_leader();
                if !leader {
                    at(self
                        .last_leader_heard
                        .saturating_add(heartbeat_timeout)
                        .saturating_add(1));
                }
                if let Some((start, arrived)) = self.pending.timer_start() {
                    let cap = self
                        .cfg
                        .request_timeout_ms
                        .saturating_mul(1 << self.cfg.max_backoff_exponent.min(20))
                        .max(request_timeout);
                    at(start.saturating_add(request_timeout).saturating_add(1));
                    at(arrived.saturating_add(cap).saturating_add(1));
                    if !leader {
                        at(start.saturating_add(request_timeout / 2));
                    }
                }
                if let Some(started) = self.slot.started_ms {
                    at(started.saturating_add(request_timeout).saturating_add(1));
                }
                if let Some(forward) = self.pending.next_forward() {
                    at(forward);
                }
                if leader && self.slot.accepted.is_none() {
                    if self.carry.proposal.is_some() {
                        at(self.now);
                    } else if let Some(oldest) = self.pending.oldest_ms() {
                        at(oldest.saturating_add(self.cfg.batch_interval_ms));
                    }
                }
            }
        }
        due
    }

    /// This replica's id.
    pub fn id(&self) -> ReplicaId {
        self.cfg.id
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// The application, mutably: a shell drains what `apply` produced (the Arma
    /// application's applied outcomes). It must not change the state `apply` builds.
    pub fn app_mut(&mut self) -> &mut A {
        &mut self.app
    }

    /// The current view (the last installed one).
    pub fn view(&self) -> View {
        self.view
    }

    /// Normal or view-changing.
    pub fn status(&self) -> Status {
        self.status
    }

    /// Highest decided sequence number (0 if none).
    pub fn last_decided(&self) -> Seq {
        self.last_decided
    }

    /// The decision at `seq`, if held.
    pub fn decision(&self, seq: Seq) -> Option<&Arc<Decision>> {
        let first = self.decisions.front()?.seq();
        let i = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.decisions.get(i)
    }

    /// The target view and reason of the last view change this replica started.
    pub fn last_complaint(&self) -> Option<(View, Complaint)> {
        self.last_complaint
    }

    /// View changes since the last decision (the exponent of the timeout backoff).
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// `base_ms` doubled once per view change since the last decision (capped).
    fn backed_off(&self, base_ms: u64) -> u64 {
        let exp = self.backoff.min(self.cfg.max_backoff_exponent).min(20);
        base_ms.saturating_mul(1u64 << exp)
    }

    /// Number of requests waiting to be ordered.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// True iff the request of digest `request` ([`Digest::of_request`]) waits here to
    /// be ordered.
    pub fn is_pending(&self, request: &Digest) -> bool {
        self.pending.contains(request)
    }

    /// True iff this replica leads its current view.
    pub fn is_leader(&self) -> bool {
        self.cfg.leader(self.view) == self.cfg.id
    }

    fn next_seq(&self) -> Seq {
        self.last_decided.saturating_add(1)
    }

    fn persist(&mut self, e: WalEntry) {
        self.out.push(Output::Persist(e));
    }

    fn broadcast(&mut self, msg: Message) {
        if self.cfg.members.len() > 1 {
            let others = self.cfg.members.len() - u32::from(self.is_member());
            self.counters.messages_out += u64::from(others);
            self.out.push(Output::Broadcast(msg));
        }
    }

    fn send(&mut self, to: ReplicaId, msg: Message) {
        if to != self.cfg.id {
            self.counters.messages_out += 1;
            self.out.push(Output::Send { to, msg });
        }
    }

    fn sign_vote(&self, phase: Phase, seq: Seq, digest: Digest) -> Vote {
        let bytes = vote_bytes(&self.cfg.chain, phase, self.cfg.instance, self.view, seq, &digest);
        Vote {
            phase,
            instance: self.cfg.instance,
            view: self.view,
            seq,
            digest,
            signature: self.signer.sign(&bytes),
        }
    }

    /// Keeps a message that is ahead of this replica to replay it later. Each sender
    /// has its own queue, bounded in count and bytes (oldest dropped first), so one
    /// peer cannot crowd out the others; votes are verified before they get here.
    fn buffer_future(&mut self, from: ReplicaId, msg: Message) {
        let size = approx_bytes(&msg);
        let max_bytes = self.cfg.max_future_bytes_per_peer;
        let q = self.future.entry(from).or_default();
        while !q.items.is_empty()
            && (q.items.len() >= FUTURE_PER_PEER || q.bytes.saturating_add(size) > max_bytes)
        {
            if let Some((_, dropped)) = q.items.pop_front() {
                q.bytes = q.bytes.saturating_sub(dropped);
            }
        }
        if size <= max_bytes {
            q.bytes = q.bytes.saturating_add(size);
            q.items.push_back((msg, size));
        }
    }

    fn replay_future(&mut self) {
        let buffered = std::mem::take(&mut self.future);
        for (from, q) in buffered {
            for (msg, _) in q.items {
                self.on_message(from, msg);
            }
        }
    }

    /// Bytes held in the future buffer of `from` (tests and metrics).
    pub fn future_bytes(&self, from: ReplicaId) -> usize {
        self.future.get(&from).map_or(0, |q| q.bytes)
    }
}

/// Most messages kept per sender in the future buffer.
const FUTURE_PER_PEER: usize = 32;

/// One sender's buffered messages with their approximate sizes.
#[derive(Debug, Default)]
struct FutureQueue {
    items: VecDeque<(Message, usize)>,
    bytes: usize,
}

/// Approximate memory held by a message: payload bytes plus a fixed overhead per
/// request and signature.
pub(crate) fn approx_bytes(msg: &Message) -> usize {
    const OVERHEAD: usize = 128;
    match msg {
        Message::Forward { request, .. } => request.len() + OVERHEAD,
        Message::PrePrepare { proposal, .. } => proposal_bytes(proposal),
        Message::Vote(v) => v.signature.0.len() + OVERHEAD,
        Message::ViewChange(vc) => view_change_bytes(vc),
        Message::NewView(nv) => {
            nv.view_changes
                .iter()
                .map(|vc| view_change_bytes(vc))
                .sum::<usize>()
                + OVERHEAD
        }
        Message::Heartbeat { .. } | Message::SyncRequest { .. } => OVERHEAD,
        Message::SyncResponse { decisions, .. } => {
            decisions.iter().map(|d| decision_bytes(d)).sum::<usize>() + OVERHEAD
        }
        Message::Checkpoint(c) => c.signature.0.len() + OVERHEAD,
        Message::SyncSnapshot { checkpoint, switches } => {
            checkpoint.approx_bytes() + switches.iter().map(|d| decision_bytes(d)).sum::<usize>()
        }
    }
}

fn proposal_bytes(p: &crate::Proposal) -> usize {
    p.request_bytes() + p.requests.len() * 8 + p.metadata.len() + 128
}

fn certificate_bytes(c: &crate::Certificate) -> usize {
    c.signatures.iter().map(|(_, s)| s.0.len() + 8).sum::<usize>() + 128
}

/// Approximate encoded size of a decision (state-transfer budgets).
pub(crate) fn decision_bytes(d: &Decision) -> usize {
    proposal_bytes(&d.proposal) + certificate_bytes(&d.certificate)
}

fn view_change_bytes(vc: &ViewChange) -> usize {
    vc.last_decided.as_ref().map_or(0, certificate_bytes)
        + vc.prepared.as_ref().map_or(0, |p| {
            proposal_bytes(&p.proposal) + certificate_bytes(&p.certificate)
        })
        + 128
}
