//! The replica state machine: `handle(Input) -> Vec<Output>`, no I/O inside.
//!
//! * `normal.rs` — requests, batching, pre-prepare / prepare / commit (PBFT §4.2).
//! * `view_change.rs` — complaints, view change, new view (PBFT §4.4, §4.5.2).
//! * `sync.rs` — heartbeats and state transfer by certified decisions.
//! * `restore.rs` — rebuilding a replica from its WAL.

mod normal;
mod pending;
mod restore;
mod sync;
mod view_change;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::app::Application;
use crate::certificate::{Decision, Phase, Prepared, vote_bytes};
use crate::crypto::{Signature, Signer, Verifier};
use crate::messages::{Carry, Message, NewView, ViewChange, Vote};
use crate::types::{Config, Digest, Proposed, Quorum, ReplicaId, Seq, View};
use crate::wal::WalEntry;

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
    /// The replica installed a new view.
    ViewInstalled {
        /// The view.
        view: View,
        /// Its leader.
        leader: ReplicaId,
    },
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

/// Votes and proposal for the sequence number being decided, in the current view.
#[derive(Debug, Default)]
struct Slot {
    accepted: Option<Proposed>,
    votes: BTreeMap<(Phase, Digest), BTreeMap<ReplicaId, Signature>>,
    my_votes: Vec<Vote>,
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
    /// Obligations of the current view.
    carry: Carry,
    vc_attempts: u32,
    vc_deadline: Option<u64>,
    /// Latest verified view change of each replica (including this one).
    view_changes: BTreeMap<ReplicaId, Arc<ViewChange>>,
    decisions: Vec<Arc<Decision>>,
    decided_requests: HashSet<Digest>,
    slot: Slot,
    /// Highest prepared certificate for the next sequence, kept across views.
    prepared: Option<Prepared>,
    future: VecDeque<(ReplicaId, Message)>,
    pending: Pending,
    last_leader_heard: u64,
    next_heartbeat: u64,
    sync: SyncState,
    clock_started: bool,
    out: Vec<Output>,
}

impl<A: Application> Replica<A> {
    /// A fresh replica (empty WAL) in view 0.
    pub fn new(cfg: Config, app: A, signer: Box<dyn Signer>, verifier: Arc<dyn Verifier>) -> Self {
        let quorum = cfg.quorum();
        Replica {
            quorum,
            app,
            signer,
            verifier,
            now: 0,
            view: 0,
            status: Status::Normal,
            new_view_proof: None,
            carry: Carry {
                decided: 0,
                proposal: None,
            },
            vc_attempts: 0,
            vc_deadline: None,
            view_changes: BTreeMap::new(),
            decisions: Vec::new(),
            decided_requests: HashSet::new(),
            slot: Slot::default(),
            prepared: None,
            future: VecDeque::new(),
            pending: Pending::default(),
            last_leader_heard: 0,
            next_heartbeat: 0,
            sync: SyncState::default(),
            clock_started: false,
            out: Vec::new(),
            cfg,
        }
    }

    /// Feeds one input and returns the outputs to execute in order.
    pub fn handle(&mut self, input: Input) -> Vec<Output> {
        match input {
            Input::Tick(now) => self.on_tick(now),
            Input::Request(request) => self.on_request(request, true),
            Input::Message { from, msg } => self.on_message(from, msg),
        }
        std::mem::take(&mut self.out)
    }

    fn on_message(&mut self, from: ReplicaId, msg: Message) {
        if from >= self.cfg.n || from == self.cfg.id || msg.instance() != self.cfg.instance {
            return;
        }
        match msg {
            Message::Forward { request, .. } => self.on_request(request, false),
            Message::PrePrepare { view, proposal } => self.on_pre_prepare(from, view, proposal),
            Message::Vote(vote) => self.on_vote(from, vote),
            Message::ViewChange(vc) => self.on_view_change(from, vc),
            Message::NewView(nv) => self.on_new_view(from, nv),
            Message::Heartbeat {
                view, last_decided, ..
            } => self.on_heartbeat(from, view, last_decided),
            Message::SyncRequest { from_seq, .. } => self.on_sync_request(from, from_seq),
            Message::SyncResponse { decisions, .. } => self.on_sync_response(from, decisions),
        }
    }

    fn on_tick(&mut self, now: u64) {
        if !self.clock_started {
            // The first tick starts the clocks: nobody is suspected for time spent
            // before the replica ran.
            self.clock_started = true;
            self.last_leader_heard = now;
            self.pending.rebase(now);
        }
        self.now = self.now.max(now);
        if self.now >= self.next_heartbeat {
            self.next_heartbeat = self.now + self.cfg.heartbeat_interval_ms;
            self.send_heartbeat();
        }
        match self.status {
            Status::Normal => self.check_normal_timers(),
            Status::ViewChanging { target } => {
                if self.vc_deadline.is_some_and(|d| self.now >= d) {
                    self.start_view_change(target + 1);
                }
            }
        }
        self.maybe_propose();
        self.maybe_sync();
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
        self.decisions.len() as Seq
    }

    /// The decision at `seq`, if held.
    pub fn decision(&self, seq: Seq) -> Option<&Arc<Decision>> {
        seq.checked_sub(1).and_then(|i| self.decisions.get(i as usize))
    }

    /// Number of requests waiting to be ordered.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// True iff this replica leads its current view.
    pub fn is_leader(&self) -> bool {
        self.cfg.leader(self.view) == self.cfg.id
    }

    fn next_seq(&self) -> Seq {
        self.decisions.len() as Seq + 1
    }

    fn persist(&mut self, e: WalEntry) {
        self.out.push(Output::Persist(e));
    }

    fn broadcast(&mut self, msg: Message) {
        if self.cfg.n > 1 {
            self.out.push(Output::Broadcast(msg));
        }
    }

    fn send(&mut self, to: ReplicaId, msg: Message) {
        if to != self.cfg.id {
            self.out.push(Output::Send { to, msg });
        }
    }

    fn sign_vote(&self, phase: Phase, seq: Seq, digest: Digest) -> Vote {
        let bytes = vote_bytes(phase, self.cfg.instance, self.view, seq, &digest);
        Vote {
            phase,
            instance: self.cfg.instance,
            view: self.view,
            seq,
            digest,
            signature: self.signer.sign(&bytes),
        }
    }

    /// Keeps a message that is ahead of this replica to replay it later (bounded).
    fn buffer_future(&mut self, from: ReplicaId, msg: Message) {
        let cap = 16 * self.cfg.n as usize;
        if self.future.len() >= cap {
            self.future.pop_front();
        }
        self.future.push_back((from, msg));
    }

    fn replay_future(&mut self) {
        let buffered = std::mem::take(&mut self.future);
        for (from, msg) in buffered {
            self.on_message(from, msg);
        }
    }
}
