//! The discrete-event world: replicas, network, clients, fault injection.

use std::sync::Arc;

use bft::crypto::{TestKeys, TestSigner};
use bft::{Application, Config, Input, MemWal, Message, Output, Replica, ReplicaId, Wal};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::byzantine::outsider_votes;
use super::checker::view_leader_error;
use super::kernel::{self, Kernel, Sim, Stop};
use super::links::{Links, foreign_sync_response, junk_vote};
use super::{ByzMode, Checker, Report, Scenario, SimApp, corrupt, engine_config};

/// How often clients check, after GST, for requests no member holds.
const RETRY_MS: u64 = 1_000;

/// The events of the BFT world.
pub enum Event {
    Tick(ReplicaId),
    Deliver {
        from: ReplicaId,
        to: ReplicaId,
        msg: Message,
    },
    Submit {
        request: Vec<u8>,
        targets: Vec<ReplicaId>,
    },
    Restart(ReplicaId),
    /// The scenario crashes a replica (one it removes, around its removal).
    Crash(ReplicaId),
    Gst,
    /// Clients whose requests no member of the set in force holds re-submit them.
    Retry,
    /// The network replays a foreign chain's state-transfer answer.
    Foreign,
}

struct Node {
    replica: Option<Replica<SimApp>>,
    wal: MemWal,
    /// Decisions the shell delivered: the durable application state.
    ledger: SimApp,
    byz: Option<ByzMode>,
    signer: TestSigner,
}

/// The simulated cluster.
pub struct World {
    sc: Scenario,
    /// Clock, event queue, random stream and network.
    k: Kernel<Event>,
    keys: TestKeys,
    nodes: Vec<Node>,
    checker: Checker,
    requests: Vec<Vec<u8>>,
    trace: bool,
    report: Report,
    links: Links,
    /// When the idle check started and the view it expects to stay in (`None`: the
    /// view's leader is not correct or the cluster was not settled, nothing to check).
    idle: Option<(u64, Option<bft::View>)>,
    settled: bool,
    /// Replicas hear a tick only once their `next_deadline` has come, and their clock
    /// moves before every input, as the node's shell does (odd seeds); otherwise every
    /// tick reaches them and only ticks move their clocks (even seeds).
    deadline_ticks: bool,
}

impl World {
    /// A world for `sc`; `trace` prints every event to stderr.
    pub fn new(sc: Scenario, trace: bool) -> World {
        let k = Kernel::new(ChaCha8Rng::seed_from_u64(sc.seed), sc.faults, sc.n as usize);
        let keys = TestKeys::new(sc.seed);
        let mut w = World {
            nodes: Vec::new(),
            k,
            keys,
            checker: Checker::default(),
            requests: Vec::new(),
            trace,
            report: Report::default(),
            links: Links::default(),
            idle: None,
            settled: false,
            deadline_ticks: sc.seed % 2 == 1,
            sc,
        };
        w.checker.sets = w.sc.sets.clone();
        for id in 0..w.sc.n {
            let byz = w.sc.byzantine.iter().find(|(b, _)| *b == id).map(|(_, m)| *m);
            let replica = Replica::new(
                w.config(id),
                w.app(id),
                Box::new(w.keys.signer(id)),
                Arc::new(w.keys.clone()),
            );
            w.nodes.push(Node {
                replica: Some(replica),
                wal: MemWal::default(),
                ledger: w.app(id),
                byz,
                signer: w.keys.signer(id),
            });
            w.k.first_tick(Event::Tick(id));
        }
        for (at, id) in w.sc.crash_at.clone() {
            w.k.schedule(at, Event::Crash(id));
        }
        w.schedule_clients();
        w.k.schedule(w.sc.gst_ms, Event::Gst);
        if w.sc.foreign_replays {
            w.k.schedule(100, Event::Foreign);
        }
        w
    }

    /// The engine configuration a replica starts with: that of the first set (a
    /// replica outside it starts as a non-member: its stable id is past every member).
    fn config(&self, id: ReplicaId) -> Config {
        let mut c = engine_config(id, self.sc.first_n(), self.sc.seed);
        c.max_batch_count = self.sc.max_batch;
        c.request_timeout_ms = 400;
        c
    }

    /// A fresh application of replica `id` (it knows the scenario's sets).
    fn app(&self, id: ReplicaId) -> SimApp {
        if self.sc.sets.is_empty() {
            SimApp::default()
        } else {
            SimApp::with_sets(id, Arc::new(self.sc.sets.clone()))
        }
    }

    fn schedule_clients(&mut self) {
        // One request per switch, among the clients' (the sets change while they run).
        for k in 1..self.sc.sets.len() {
            let request = format!("reconf-{}-{k}", self.sc.seed).into_bytes();
            let n = self.sc.n;
            let rng = self.k.rng();
            let at = rng.gen_range(0..self.sc.gst_ms);
            let targets = (0..rng.gen_range(1..=n)).map(|_| rng.gen_range(0..n)).collect();
            self.requests.push(request.clone());
            self.k.schedule(at, Event::Submit { request, targets });
        }
        for i in 0..self.sc.requests {
            let mut request = format!("tx-{}-{i}", self.sc.seed).into_bytes();
            request.resize(request.len() + self.sc.request_padding, b'.');
            let n = self.sc.n;
            let rng = self.k.rng();
            let at = rng.gen_range(0..self.sc.gst_ms);
            let k = rng.gen_range(1..=n);
            let targets = (0..k).map(|_| rng.gen_range(0..n)).collect();
            self.requests.push(request.clone());
            self.k.schedule(at, Event::Submit { request, targets });
        }
    }

    fn is_correct(&self, id: ReplicaId) -> bool {
        self.nodes[id as usize].byz.is_none() && self.sc.crashed_forever != Some(id)
    }

    /// Runs until every correct replica decided every request (Ok) or a property fails.
    pub fn run(mut self) -> Result<Report, String> {
        let deadline = self.sc.gst_ms + self.sc.liveness_ms;
        let outcome = kernel::run(&mut self, deadline);
        self.report.steps = self.k.steps();
        self.count_removed();
        match outcome {
            Ok(()) => Ok(self.report),
            Err(Stop::Deadline { .. }) => Err(self.liveness_failure()),
            Err(stop) => Err(stop.to_string()),
        }
    }

    /// Counts the replicas the decided switches removed.
    fn count_removed(&mut self) {
        let sets = &self.sc.sets;
        for e in 1..=self.checker.current_epoch().min(sets.len().saturating_sub(1)) {
            let (old, new) = (&sets[e - 1].members, &sets[e].members);
            for &id in old.ids().iter().filter(|id| !new.contains(**id)) {
                let r = &mut self.report.removed;
                r.any += 1;
                r.byzantine += u64::from(self.nodes[id as usize].byz.is_some());
                r.crashed += u64::from(self.sc.crashed_forever == Some(id));
                r.leader += u64::from(old.ids().first() == Some(&id));
            }
        }
    }

    /// Timers armed before GST (a leader not heard during a partition) may still fire
    /// right after it: the idle window starts once two (backed-off) heartbeat
    /// timeouts have passed since GST.
    fn idle_not_before(&self) -> u64 {
        let backoff = self
            .nodes
            .iter()
            .filter_map(|n| n.replica.as_ref())
            .map(Replica::backoff)
            .max()
            .unwrap_or(0)
            .min(5);
        self.sc.gst_ms + 2 * self.config(0).heartbeat_timeout_ms * (1 << backoff)
    }

    /// The view every correct replica works in, if they agree and its leader is
    /// correct (then an idle cluster has no reason to leave it).
    fn settled_view(&self) -> Option<bft::View> {
        let members: Vec<ReplicaId> = (0..self.sc.n).filter(|id| self.is_final_member(*id)).collect();
        let set = bft::Members::new(members.clone()).ok()?;
        let mut views = members.iter().filter(|id| self.is_correct(**id)).map(|&id| {
            self.nodes[id as usize]
                .replica
                .as_ref()
                .filter(|r| r.status() == bft::Status::Normal && r.is_member())
                .map(|r| (r.view(), r.epoch()))
        });
        let (first, epoch) = views.next()??;
        let leader = set.leader(bft::InstanceId(0), first);
        (views.all(|v| v == Some((first, epoch))) && self.is_correct(leader)).then_some(first)
    }

    /// True iff `id` is a member of the set in force (every replica without sets):
    /// the replicas that must decide everything.
    fn is_final_member(&self, id: ReplicaId) -> bool {
        self.sc
            .sets
            .get(self.checker.current_epoch())
            .is_none_or(|s| s.members.contains(id))
    }

    /// After the idle window: still in the settled view (no view change while idle).
    fn check_idle(&self, view: Option<bft::View>) -> Result<(), String> {
        let Some(view) = view else {
            return Ok(());
        };
        if self.settled_view() == Some(view) {
            return Ok(());
        }
        Err(format!(
            "IDLE: the cluster left view {view} while idle with a correct leader;{}",
            self.liveness_failure()
        ))
    }

    fn liveness_failure(&self) -> String {
        let mut s = format!(
            "LIVENESS: not all requests decided {} ms after GST;",
            self.sc.liveness_ms
        );
        for (id, node) in self.nodes.iter().enumerate() {
            if let Some(r) = &node.replica {
                s += &format!(
                    " [r{id} view={} {:?} decided={} pending={} undecided={}{}]",
                    r.view(),
                    r.status(),
                    r.last_decided(),
                    r.pending_len(),
                    self.checker.undecided_at(id as ReplicaId),
                    if node.byz.is_some() { " byz" } else { "" }
                );
            }
        }
        s
    }

    fn all_decided(&self) -> bool {
        (0..self.sc.n)
            .filter(|id| self.is_correct(*id) && self.is_final_member(*id))
            .all(|id| self.checker.undecided_at(id) == 0)
    }

    /// Delivers a foreign chain's decision for the next sequence to a random correct
    /// replica; every correct replica must reject it (the checker would see a request
    /// no client submitted).
    fn foreign(&mut self) -> Result<(), String> {
        self.k.schedule_in(100, Event::Foreign);
        let id = self.k.rng().gen_range(0..self.sc.n);
        let from = (id + 1) % self.sc.n;
        let Some(r) = self.nodes[id as usize].replica.as_ref() else {
            return Ok(());
        };
        if !self.is_correct(id) || from == id {
            return Ok(());
        }
        let msg = foreign_sync_response(&self.keys, self.sc.n, r.last_decided() + 1);
        self.report.foreign_injected += 1;
        self.input(id, Input::Message { from, msg })
    }

    fn input(&mut self, id: ReplicaId, input: Input) -> Result<(), String> {
        let correct = self.is_correct(id);
        let Some(replica) = self.nodes[id as usize].replica.as_mut() else {
            return Ok(());
        };
        if self.trace {
            eprintln!("t={} r{id} <- {input:?}", self.k.now());
        }
        let epoch = replica.epoch();
        let outsider = !replica.is_member();
        let outsider_msgs = match (&input, self.nodes[id as usize].byz.is_some() && outsider) {
            (Input::Message { msg, .. }, true) => {
                let (signer, chain) = self.identity(id);
                outsider_votes(&signer, chain, msg)
            }
            _ => Vec::new(),
        };
        let Some(replica) = self.nodes[id as usize].replica.as_mut() else {
            return Ok(());
        };
        let now = self.k.now();
        let early = matches!(input, Input::Tick(_)) && now < replica.next_deadline();
        if self.deadline_ticks {
            replica.advance_clock(now);
            if early {
                return Ok(());
            }
        }
        let outputs = replica.handle(input);
        if early && correct && !outputs.is_empty() {
            return Err(format!(
                "r{id}: a tick at {now} before its deadline {} gave {} outputs",
                replica.next_deadline(),
                outputs.len()
            ));
        }
        let after = replica.epoch();
        if correct {
            for o in &outputs {
                if let Output::ViewInstalled { view, leader } = o
                    && let Some(e) =
                        view_leader_error(&self.sc.sets, self.sc.first_n(), *view, *leader, [epoch, after])
                {
                    return Err(format!("LEADER: r{id} {e}"));
                }
            }
        }
        let Some(replica) = self.nodes[id as usize].replica.as_ref() else {
            return Ok(());
        };
        if correct {
            self.report.max_view = self.report.max_view.max(replica.view());
            self.report.decided = self.report.decided.max(replica.last_decided());
        }
        self.execute(id, outputs)?;
        for msg in outsider_msgs {
            for to in (0..self.sc.n).filter(|to| *to != id) {
                self.put(id, to, msg.clone());
            }
        }
        self.check_set(id, correct, epoch)
    }

    /// After replica `id` handled an input: a correct replica is in the set the decided
    /// ledger says is in force after its last decision, switched at the decision that
    /// changed it.
    fn check_set(&mut self, id: ReplicaId, correct: bool, before: u64) -> Result<(), String> {
        let Some(r) = self.nodes[id as usize].replica.as_ref() else {
            return Ok(());
        };
        let (epoch, start, last) = (r.epoch(), r.epoch_start(), r.last_decided());
        if epoch != before && correct {
            self.report.switches += 1;
        }
        if correct && !self.sc.sets.is_empty() {
            self.checker.check_set(id, epoch, start, last)?;
        }
        Ok(())
    }

    /// Executes outputs in order, as a shell would; may crash the replica midway.
    fn execute(&mut self, id: ReplicaId, outputs: Vec<Output>) -> Result<(), String> {
        let crash_at = (!self.k.after_gst()
            && self.nodes[id as usize].byz.is_none()
            && !outputs.is_empty()
            && self.k.rng().gen_bool(self.sc.crash_mid_batch))
        .then(|| self.k.rng().gen_range(0..outputs.len()));
        for (i, out) in outputs.into_iter().enumerate() {
            if crash_at == Some(i) {
                self.crash(id);
                return Ok(());
            }
            match out {
                Output::Persist(e) => {
                    if self.trace
                        && matches!(e, bft::WalEntry::Switched { .. } | bft::WalEntry::NewView { .. })
                    {
                        eprintln!("t={} r{id} PERSIST {e:?}", self.k.now());
                    }
                    self.nodes[id as usize]
                        .wal
                        .append(&[e])
                        .map_err(|e| e.to_string())?;
                }
                Output::Send { to, msg } => {
                    if self.trace {
                        eprintln!("t={} r{id} SEND -> r{to} {msg:?}", self.k.now());
                    }
                    self.transmit(id, to, msg);
                }
                Output::Broadcast(msg) => {
                    // Every replica of the world: those outside the sender's set follow.
                    for to in 0..self.sc.n {
                        if to != id {
                            self.transmit(id, to, msg.clone());
                        }
                    }
                }
                Output::Deliver(d) => {
                    if self.trace {
                        eprintln!(
                            "t={} r{id} DELIVER s{} v{} {:?} by {:?}",
                            self.k.now(),
                            d.seq(),
                            d.certificate.view,
                            d.proposal.digest(),
                            d.certificate
                                .signatures
                                .iter()
                                .map(|(i, _)| *i)
                                .collect::<Vec<_>>()
                        );
                    }
                    let node = &mut self.nodes[id as usize];
                    if node.byz.is_none() {
                        if d.seq() == node.ledger.applied() + 1 {
                            node.ledger.apply(&d);
                        }
                        self.checker.on_deliver(id, &d)?;
                    }
                }
                Output::Installed { seq, snapshot } => {
                    let node = &mut self.nodes[id as usize];
                    if node.byz.is_none() {
                        if !node.ledger.install_snapshot(seq, &snapshot) {
                            return Err(format!("r{id} installed a snapshot its ledger refuses"));
                        }
                        let head = node.ledger.head();
                        self.report.installed += 1;
                        self.checker.on_install(id, seq, head)?;
                    }
                }
                Output::ViewInstalled { .. } | Output::Refused { .. } => {}
            }
        }
        Ok(())
    }

    /// The key and cluster id replica `from` signs with now (those of its set).
    fn identity(&self, from: ReplicaId) -> (bft::crypto::TestSigner, bft::ChainId) {
        let r = self.nodes[from as usize].replica.as_ref();
        let epoch = r.map_or(0, Replica::epoch);
        let chain = r.map_or_else(bft::ChainId::default, |r| r.config().chain);
        let signer = match self.sc.sets.get(epoch as usize) {
            Some(set) if epoch > 0 => bft::crypto::TestKeys::new(set.keys).signer(from),
            _ => self.nodes[from as usize].signer.clone(),
        };
        (signer, chain)
    }

    fn transmit(&mut self, from: ReplicaId, to: ReplicaId, msg: Message) {
        let junk = match (&msg, self.sc.junk_voter == Some(from)) {
            (
                Message::Heartbeat {
                    view, last_decided, ..
                },
                true,
            ) => {
                let (signer, chain) = self.identity(from);
                Some(junk_vote(&signer, chain, *view, last_decided + 1))
            }
            _ => None,
        };
        let mut msgs = match self.nodes[from as usize].byz {
            Some(mode) => {
                // Lies signed for the set the sender is in now: a Byzantine replica keeps
                // its power across switches.
                let (signer, chain) = self.identity(from);
                corrupt(mode, from, &signer, chain, to, msg, self.k.rng())
            }
            None => vec![msg],
        };
        msgs.extend(junk);
        for msg in msgs {
            self.put(from, to, msg);
        }
    }

    /// Puts `msg` on the link from `from` to `to` as it is.
    fn put(&mut self, from: ReplicaId, to: ReplicaId, msg: Message) {
        let deliver = || Event::Deliver {
            from,
            to,
            msg: msg.clone(),
        };
        match self.sc.bandwidth {
            // A copy still queued on the link is not queued again.
            Some(bw) => {
                let links = &mut self.links;
                self.k
                    .send_over(from, to, |now| links.send(now, from, to, &msg, bw), deliver);
            }
            None => self.k.send(from, to, deliver),
        }
    }

    fn maybe_fault(&mut self) {
        if let Some(id) = self.k.maybe_crash(self.sc.crash, self.sc.n)
            && self.nodes[id as usize].byz.is_none()
            && self.nodes[id as usize].replica.is_some()
        {
            self.crash(id);
        }
        self.k.maybe_partition();
    }

    fn crash(&mut self, id: ReplicaId) {
        if self.trace {
            eprintln!("t={} r{id} CRASH", self.k.now());
        }
        self.report.crashes += 1;
        self.nodes[id as usize].replica = None;
        if !self.k.after_gst() {
            self.k.restart_later(Event::Restart(id));
        }
    }

    fn restart(&mut self, id: ReplicaId) -> Result<(), String> {
        if self.nodes[id as usize].replica.is_some() || (self.k.after_gst() && !self.is_correct(id)) {
            return Ok(());
        }
        if self.trace {
            eprintln!("t={} r{id} RESTART", self.k.now());
        }
        // The application may have lost its last few deliveries: the engine re-applies.
        let mut app = self.nodes[id as usize].ledger.clone();
        app.forget_last(self.k.rng().gen_range(0..3));
        self.nodes[id as usize].ledger = app.clone();
        let entries = self.nodes[id as usize].wal.entries.clone();
        let (replica, outputs) = Replica::restore(
            self.config(id),
            app,
            Box::new(self.keys.signer(id)),
            Arc::new(self.keys.clone()),
            &entries,
        )
        .map_err(|e| format!("restore of r{id} failed: {e}"))?;
        self.nodes[id as usize].replica = Some(replica);
        self.execute(id, outputs)?;
        let correct = self.is_correct(id);
        self.check_set(id, correct, 0)
    }

    /// After GST, a request that no correct member of the set in force holds and none
    /// decided (every replica that took it was removed before proposing it, or refused
    /// it as a non-member) is re-submitted to the members, as a client that timed out
    /// would. A request a member holds is left to the engine (its forwarding and
    /// complaints are what liveness checks).
    fn retry(&mut self) -> Result<(), String> {
        self.k.schedule_in(RETRY_MS, Event::Retry);
        let members: Vec<ReplicaId> = (0..self.sc.n)
            .filter(|id| self.is_final_member(*id) && self.is_correct(*id))
            .collect();
        let undecided = self.checker.undecided();
        for request in self.requests.clone() {
            let d = bft::Digest::of_request(&request);
            let held = members.iter().any(|id| {
                self.nodes[*id as usize]
                    .replica
                    .as_ref()
                    .is_some_and(|r| r.is_pending(&d))
            });
            if undecided.contains(&d) && !held {
                self.report.retried += 1;
                self.k.schedule_in(
                    1,
                    Event::Submit {
                        request,
                        targets: members.clone(),
                    },
                );
            }
        }
        Ok(())
    }

    fn gst(&mut self) -> Result<(), String> {
        self.k.stabilise();
        if let Some(id) = self.sc.crashed_forever {
            self.nodes[id as usize].replica = None;
        }
        for id in 0..self.sc.n {
            self.restart(id)?;
        }
        self.k.schedule_in(RETRY_MS, Event::Retry);
        // Clients re-submit everything not yet decided to every replica.
        let undecided = self.checker.undecided();
        let targets: Vec<ReplicaId> = (0..self.sc.n).collect();
        for request in self.requests.clone() {
            if undecided.contains(&bft::Digest::of_request(&request)) {
                self.k.schedule_in(
                    1,
                    Event::Submit {
                        request,
                        targets: targets.clone(),
                    },
                );
            }
        }
        Ok(())
    }
}

impl Sim for World {
    type Event = Event;
    type Error = String;

    /// After every step: done once every correct replica decided everything and, when
    /// the scenario idles, the idle window passed without a view change.
    fn done(&mut self) -> Result<bool, String> {
        if !(self.k.after_gst() && self.all_decided()) {
            return Ok(false);
        }
        let now = self.k.now();
        if !self.settled {
            self.settled = true;
            self.report.end_ms = now;
            self.report.settle_ms = now - self.sc.gst_ms;
        }
        if self.sc.idle_ms == 0 {
            return Ok(true);
        }
        // The idle window starts after the grace period; it checks the view only if the
        // links carry nothing but heartbeats then (a large message still crossing a slow
        // link is not idleness).
        if self.idle.is_none() && now >= self.idle_not_before() {
            let view = self.links.drained(now).then(|| self.settled_view()).flatten();
            self.idle = Some((now, view));
        }
        if let Some((start, view)) = self.idle
            && now >= start + self.sc.idle_ms
        {
            self.check_idle(view)?;
            return Ok(true);
        }
        Ok(false)
    }

    fn step(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Tick(id) => {
                self.k.next_tick(Event::Tick(id));
                self.maybe_fault();
                self.input(id, Input::Tick(self.k.now()))
            }
            Event::Deliver { from, to, msg } => self.input(to, Input::Message { from, msg }),
            Event::Submit { request, targets } => {
                self.checker.submitted(&request);
                for to in targets {
                    self.input(to, Input::Request(request.clone()))?;
                }
                Ok(())
            }
            Event::Restart(id) => self.restart(id),
            Event::Crash(id) => {
                let node = &self.nodes[id as usize];
                if !self.k.after_gst() && node.byz.is_none() && node.replica.is_some() {
                    self.crash(id);
                }
                Ok(())
            }
            Event::Gst => self.gst(),
            Event::Retry => self.retry(),
            Event::Foreign => self.foreign(),
        }
    }

    fn kernel(&mut self) -> &mut Kernel<Event> {
        &mut self.k
    }
}
