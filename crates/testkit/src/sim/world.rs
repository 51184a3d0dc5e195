//! The discrete-event world: replicas, network, clients, fault injection.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;

use bft::crypto::{TestKeys, TestSigner};
use bft::{Application, Config, Input, MemWal, Message, Output, Replica, ReplicaId, Wal};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::links::{Links, foreign_sync_response, junk_vote};
use super::{ByzMode, Checker, Report, Scenario, SimApp, corrupt};

const TICK_MS: u64 = 10;

enum Event {
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
    Gst,
    /// The network replays a foreign chain's state-transfer answer.
    Foreign,
}

struct Scheduled {
    time: u64,
    id: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.id) == (o.time, o.id)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.time, self.id).cmp(&(o.time, o.id))
    }
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
    rng: ChaCha8Rng,
    keys: TestKeys,
    now: u64,
    next_id: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    nodes: Vec<Node>,
    checker: Checker,
    side: Vec<u8>,
    after_gst: bool,
    requests: Vec<Vec<u8>>,
    trace: bool,
    report: Report,
    links: Links,
    /// When the idle check started and the view it expects to stay in (`None`: the
    /// view's leader is not correct or the cluster was not settled, nothing to check).
    idle: Option<(u64, Option<bft::View>)>,
    settled: bool,
}

impl World {
    /// A world for `sc`; `trace` prints every event to stderr.
    pub fn new(sc: Scenario, trace: bool) -> World {
        let rng = ChaCha8Rng::seed_from_u64(sc.seed);
        let keys = TestKeys::new(sc.seed);
        let mut w = World {
            nodes: Vec::new(),
            side: vec![0; sc.n as usize],
            rng,
            keys,
            now: 0,
            next_id: 0,
            queue: BinaryHeap::new(),
            checker: Checker::default(),
            after_gst: false,
            requests: Vec::new(),
            trace,
            report: Report::default(),
            links: Links::default(),
            idle: None,
            settled: false,
            sc,
        };
        for id in 0..w.sc.n {
            let byz = w.sc.byzantine.iter().find(|(b, _)| *b == id).map(|(_, m)| *m);
            let replica = Replica::new(
                w.config(id),
                SimApp::default(),
                Box::new(w.keys.signer(id)),
                Arc::new(w.keys.clone()),
            );
            w.nodes.push(Node {
                replica: Some(replica),
                wal: MemWal::default(),
                ledger: SimApp::default(),
                byz,
                signer: w.keys.signer(id),
            });
            let offset = w.rng.gen_range(0..TICK_MS);
            w.schedule(offset, Event::Tick(id));
        }
        w.schedule_clients();
        w.schedule(w.sc.gst_ms, Event::Gst);
        if w.sc.foreign_replays {
            w.schedule(100, Event::Foreign);
        }
        w
    }

    fn config(&self, id: ReplicaId) -> Config {
        let mut c = Config::new(id, self.sc.n);
        c.max_batch_count = self.sc.max_batch;
        c.batch_interval_ms = 5;
        c.request_timeout_ms = 400;
        c.heartbeat_interval_ms = 50;
        c.heartbeat_timeout_ms = 250;
        c.view_change_timeout_ms = 250;
        c.sync_batch = std::num::NonZeroUsize::new(8).unwrap_or(std::num::NonZeroUsize::MIN);
        // Small and varied, so checkpoints, pruning and snapshot transfer happen often.
        c.checkpoint_interval = [3, 5, 8][(self.sc.seed % 3) as usize];
        c.retain_decisions = [0, 2, 6][(self.sc.seed / 3 % 3) as usize];
        c
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.next_id += 1;
        self.queue.push(Reverse(Scheduled {
            time: at,
            id: self.next_id,
            event,
        }));
    }

    fn schedule_clients(&mut self) {
        for i in 0..self.sc.requests {
            let mut request = format!("tx-{}-{i}", self.sc.seed).into_bytes();
            request.resize(request.len() + self.sc.request_padding, b'.');
            let at = self.rng.gen_range(0..self.sc.gst_ms);
            let k = self.rng.gen_range(1..=self.sc.n);
            let targets = (0..k).map(|_| self.rng.gen_range(0..self.sc.n)).collect();
            self.requests.push(request.clone());
            self.schedule(at, Event::Submit { request, targets });
        }
    }

    fn is_correct(&self, id: ReplicaId) -> bool {
        self.nodes[id as usize].byz.is_none() && self.sc.crashed_forever != Some(id)
    }

    /// Runs until every correct replica decided every request (Ok) or a property fails.
    pub fn run(mut self) -> Result<Report, String> {
        let deadline = self.sc.gst_ms + self.sc.liveness_ms;
        while let Some(Reverse(s)) = self.queue.pop() {
            self.now = s.time;
            self.report.steps += 1;
            if self.now > deadline {
                return Err(self.liveness_failure());
            }
            self.step(s.event)?;
            if self.after_gst && self.all_decided() {
                if !self.settled {
                    self.settled = true;
                    self.report.end_ms = self.now;
                    self.report.settle_ms = self.now - self.sc.gst_ms;
                }
                if self.sc.idle_ms == 0 {
                    return Ok(self.report);
                }
                // The idle window starts after the grace period; it checks the view
                // only if the links carry nothing but heartbeats then (a large message
                // still crossing a slow link is not idleness).
                if self.idle.is_none() && self.now >= self.idle_not_before() {
                    let view = self
                        .links
                        .drained(self.now)
                        .then(|| self.settled_view())
                        .flatten();
                    self.idle = Some((self.now, view));
                }
                if let Some((start, view)) = self.idle
                    && self.now >= start + self.sc.idle_ms
                {
                    self.check_idle(view)?;
                    return Ok(self.report);
                }
            }
        }
        Err("event queue ran dry".into())
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
        let mut views = (0..self.sc.n).filter(|id| self.is_correct(*id)).map(|id| {
            self.nodes[id as usize]
                .replica
                .as_ref()
                .filter(|r| r.status() == bft::Status::Normal)
                .map(Replica::view)
        });
        let first = views.next()??;
        let leader = bft::types::leader_of(bft::InstanceId(0), first, self.sc.n);
        (views.all(|v| v == Some(first)) && self.is_correct(leader)).then_some(first)
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
            .filter(|id| self.is_correct(*id))
            .all(|id| self.checker.undecided_at(id) == 0)
    }

    fn step(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Tick(id) => {
                self.schedule(self.now + TICK_MS, Event::Tick(id));
                self.maybe_fault();
                self.input(id, Input::Tick(self.now))
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
            Event::Gst => self.gst(),
            Event::Foreign => self.foreign(),
        }
    }

    /// Delivers a foreign chain's decision for the next sequence to a random correct
    /// replica; every correct replica must reject it (the checker would see a request
    /// no client submitted).
    fn foreign(&mut self) -> Result<(), String> {
        self.schedule(self.now + 100, Event::Foreign);
        let id = self.rng.gen_range(0..self.sc.n);
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
            eprintln!("t={} r{id} <- {input:?}", self.now);
        }
        let outputs = replica.handle(input);
        if correct {
            self.report.max_view = self.report.max_view.max(replica.view());
            self.report.decided = self.report.decided.max(replica.last_decided());
        }
        self.execute(id, outputs)
    }

    /// Executes outputs in order, as a shell would; may crash the replica midway.
    fn execute(&mut self, id: ReplicaId, outputs: Vec<Output>) -> Result<(), String> {
        let crash_at = (!self.after_gst
            && self.nodes[id as usize].byz.is_none()
            && !outputs.is_empty()
            && self.rng.gen_bool(self.sc.crash_mid_batch))
        .then(|| self.rng.gen_range(0..outputs.len()));
        for (i, out) in outputs.into_iter().enumerate() {
            if crash_at == Some(i) {
                self.crash(id);
                return Ok(());
            }
            match out {
                Output::Persist(e) => {
                    self.nodes[id as usize]
                        .wal
                        .append(&[e])
                        .map_err(|e| e.to_string())?;
                }
                Output::Send { to, msg } => self.transmit(id, to, msg),
                Output::Broadcast(msg) => {
                    for to in 0..self.sc.n {
                        if to != id {
                            self.transmit(id, to, msg.clone());
                        }
                    }
                }
                Output::Deliver(d) => {
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

    fn transmit(&mut self, from: ReplicaId, to: ReplicaId, msg: Message) {
        let junk = match (&msg, self.sc.junk_voter == Some(from)) {
            (
                Message::Heartbeat {
                    view, last_decided, ..
                },
                true,
            ) => Some(junk_vote(
                &self.nodes[from as usize].signer,
                *view,
                last_decided + 1,
            )),
            _ => None,
        };
        let mut msgs = match self.nodes[from as usize].byz {
            Some(mode) => {
                let signer = self.nodes[from as usize].signer.clone();
                corrupt(mode, from, &signer, to, msg, &mut self.rng)
            }
            None => vec![msg],
        };
        msgs.extend(junk);
        for msg in msgs {
            if !self.after_gst
                && (self.side[from as usize] != self.side[to as usize] || self.rng.gen_bool(self.sc.loss))
            {
                continue;
            }
            let copies = if !self.after_gst && self.rng.gen_bool(self.sc.duplicate) {
                2
            } else {
                1
            };
            let sent = match self.sc.bandwidth {
                Some(bw) => match self.links.send(self.now, from, to, &msg, bw) {
                    Some(done) => done,
                    None => continue, // its copy is still queued on the link
                },
                None => self.now,
            };
            for _ in 0..copies {
                let max = if self.after_gst {
                    self.sc.max_delay_after_gst_ms
                } else {
                    self.sc.max_delay_ms
                };
                let at = sent + self.rng.gen_range(1..=max);
                self.schedule(
                    at,
                    Event::Deliver {
                        from,
                        to,
                        msg: msg.clone(),
                    },
                );
            }
        }
    }

    fn maybe_fault(&mut self) {
        if self.after_gst {
            return;
        }
        if self.rng.gen_bool(self.sc.crash) {
            let id = self.rng.gen_range(0..self.sc.n);
            if self.nodes[id as usize].byz.is_none() && self.nodes[id as usize].replica.is_some() {
                self.crash(id);
            }
        }
        if self.rng.gen_bool(self.sc.partition) {
            for s in self.side.iter_mut() {
                *s = self.rng.gen_range(0..2);
            }
        }
    }

    fn crash(&mut self, id: ReplicaId) {
        if self.trace {
            eprintln!("t={} r{id} CRASH", self.now);
        }
        self.report.crashes += 1;
        self.nodes[id as usize].replica = None;
        if !self.after_gst {
            let down = self.rng.gen_range(20..600);
            self.schedule(self.now + down, Event::Restart(id));
        }
    }

    fn restart(&mut self, id: ReplicaId) -> Result<(), String> {
        if self.nodes[id as usize].replica.is_some() || (self.after_gst && !self.is_correct(id)) {
            return Ok(());
        }
        if self.trace {
            eprintln!("t={} r{id} RESTART", self.now);
        }
        // The application may have lost its last few deliveries: the engine re-applies.
        let mut app = self.nodes[id as usize].ledger.clone();
        app.forget_last(self.rng.gen_range(0..3));
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
        self.execute(id, outputs)
    }

    fn gst(&mut self) -> Result<(), String> {
        self.after_gst = true;
        self.side.iter_mut().for_each(|s| *s = 0);
        if let Some(id) = self.sc.crashed_forever {
            self.nodes[id as usize].replica = None;
        }
        for id in 0..self.sc.n {
            self.restart(id)?;
        }
        // Clients re-submit everything not yet decided to every replica.
        let undecided = self.checker.undecided();
        let targets: Vec<ReplicaId> = (0..self.sc.n).collect();
        for request in self.requests.clone() {
            if undecided.contains(&bft::Digest::of_request(&request)) {
                self.schedule(
                    self.now + 1,
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
