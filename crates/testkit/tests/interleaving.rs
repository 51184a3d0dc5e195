//! Property: any interleaving of message deliveries, drops, duplicates, clock ticks,
//! client submissions and crash-restarts keeps agreement and validity. Proptest picks
//! the schedule step by step (and shrinks a failing one to a minimal schedule).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::sync::Arc;

use bft::crypto::TestKeys;
use bft::{Config, Input, Message, Output, Replica, ReplicaId, WalEntry};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use testkit::sim::{ByzMode, Checker, SimApp, corrupt};

struct Harness {
    n: u32,
    keys: TestKeys,
    replicas: Vec<Replica<SimApp>>,
    wals: Vec<Vec<WalEntry>>,
    ledgers: Vec<SimApp>,
    clocks: Vec<u64>,
    pool: Vec<(ReplicaId, ReplicaId, Message)>,
    byz: Option<ByzMode>,
    rng: ChaCha8Rng,
    checker: Checker,
}

fn config(id: ReplicaId, n: u32) -> Config {
    let mut c = Config::new(id, n);
    c.max_batch_count = 2;
    c.batch_interval_ms = 5;
    c.request_timeout_ms = 300;
    c.heartbeat_interval_ms = 60;
    c.heartbeat_timeout_ms = 200;
    c.view_change_timeout_ms = 200;
    c
}

impl Harness {
    fn new(n: u32, byz: Option<ByzMode>, seed: u64) -> Harness {
        let keys = TestKeys::new(seed);
        let replicas = (0..n)
            .map(|i| {
                Replica::new(
                    config(i, n),
                    SimApp::default(),
                    Box::new(keys.signer(i)),
                    Arc::new(keys.clone()),
                )
            })
            .collect();
        Harness {
            n,
            replicas,
            wals: vec![Vec::new(); n as usize],
            ledgers: vec![SimApp::default(); n as usize],
            clocks: vec![0; n as usize],
            pool: Vec::new(),
            byz,
            rng: ChaCha8Rng::seed_from_u64(seed),
            checker: Checker::default(),
            keys,
        }
    }

    fn input(&mut self, id: ReplicaId, input: Input) -> Result<(), String> {
        let outputs = self.replicas[id as usize].handle(input);
        self.execute(id, outputs)
    }

    fn execute(&mut self, id: ReplicaId, outputs: Vec<Output>) -> Result<(), String> {
        let byzantine = id == 0 && self.byz.is_some();
        for o in outputs {
            match o {
                Output::Persist(e) => self.wals[id as usize].push(e),
                Output::Send { to, msg } => self.post(id, to, msg),
                Output::Broadcast(msg) => {
                    for to in (0..self.n).filter(|t| *t != id) {
                        self.post(id, to, msg.clone());
                    }
                }
                Output::Deliver(d) if !byzantine => {
                    let ledger = &mut self.ledgers[id as usize];
                    if d.seq() == bft::Application::applied(ledger) + 1 {
                        bft::Application::apply(ledger, &d);
                    }
                    self.checker.on_deliver(id, &d)?;
                }
                Output::Installed { seq, snapshot } if !byzantine => {
                    let ledger = &mut self.ledgers[id as usize];
                    if !bft::Application::install_snapshot(ledger, seq, &snapshot) {
                        return Err(format!("r{id}: the ledger refuses the installed snapshot"));
                    }
                    self.checker.on_install(id, seq, ledger.head())?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn post(&mut self, from: ReplicaId, to: ReplicaId, msg: Message) {
        match self.byz.filter(|_| from == 0) {
            Some(mode) => {
                let signer = self.keys.signer(0);
                for m in corrupt(mode, 0, &signer, bft::ChainId::default(), to, msg, &mut self.rng) {
                    self.pool.push((from, to, m));
                }
            }
            None => self.pool.push((from, to, msg)),
        }
    }

    fn restart(&mut self, id: ReplicaId) -> Result<(), String> {
        let (r, outputs) = Replica::restore(
            config(id, self.n),
            self.ledgers[id as usize].clone(),
            Box::new(self.keys.signer(id)),
            Arc::new(self.keys.clone()),
            &self.wals[id as usize],
        )
        .map_err(|e| e.to_string())?;
        self.replicas[id as usize] = r;
        self.execute(id, outputs)
    }

    /// One scheduling choice.
    fn step(&mut self, choice: u32) -> Result<(), String> {
        let arg = choice / 16;
        match choice % 16 {
            0..=8 if !self.pool.is_empty() => {
                let i = arg as usize % self.pool.len();
                let (from, to, msg) = self.pool.swap_remove(i);
                self.input(to, Input::Message { from, msg })
            }
            9 if !self.pool.is_empty() => {
                let i = arg as usize % self.pool.len();
                let dup = self.pool[i].clone();
                self.pool.push(dup); // duplicate
                Ok(())
            }
            10 if !self.pool.is_empty() => {
                let i = arg as usize % self.pool.len();
                self.pool.swap_remove(i); // loss
                Ok(())
            }
            11..=12 => {
                let id = arg % self.n;
                self.clocks[id as usize] += u64::from(arg % 25);
                self.input(id, Input::Tick(self.clocks[id as usize]))
            }
            13..=14 => {
                // a client sends its request to every replica (as Arma clients do)
                let request = format!("req-{}", arg % 24).into_bytes();
                self.checker.submitted(&request);
                (0..self.n).try_for_each(|id| self.input(id, Input::Request(request.clone())))
            }
            15 => self.restart(arg % self.n),
            _ => Ok(()),
        }
    }
}

fn byz_mode() -> impl Strategy<Value = Option<ByzMode>> {
    prop_oneof![
        Just(None),
        Just(Some(ByzMode::Equivocate)),
        Just(Some(ByzMode::ConflictingVotes)),
        Just(Some(ByzMode::Silent)),
        Just(Some(ByzMode::BadProposal)),
        Just(Some(ByzMode::LyingSync)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_keeps_agreement(
        n in prop::sample::select(vec![4u32, 4, 5, 7]),
        byz in byz_mode(),
        seed in any::<u64>(),
        choices in prop::collection::vec(any::<u32>(), 100..4000),
    ) {
        let mut h = Harness::new(n, byz, seed);
        for (i, c) in choices.iter().enumerate() {
            if let Err(e) = h.step(*c) {
                prop_assert!(false, "step {i}: {e}");
            }
        }
    }
}
