//! Deterministic fault simulation of the BFT engine (`bft`).
//!
//! `n` replicas run in one process under a discrete-event scheduler driven by one
//! seeded `ChaCha8Rng`: messages are delayed, reordered, duplicated and lost;
//! partitions come and heal; replicas crash — also in the middle of executing one
//! batch of outputs — and restart from their WAL; up to `f` replicas are Byzantine
//! (equivocating leader, conflicting votes, silence, invalid proposals). At the global
//! stabilisation time (GST) faults stop: partitions heal, crashed replicas restart,
//! losses end, delays become bounded, and clients re-submit what is not yet decided.
//!
//! After every step the [`Checker`] verifies agreement and validity; liveness is
//! checked at the end: every submitted request must be decided by every correct
//! replica within a bounded virtual time after GST. Everything derives from the seed,
//! so a failing seed reproduces exactly:
//! `SIM_SEED=<seed> cargo test -p testkit --test sim reproduce -- --nocapture`.

mod app;
mod byzantine;
mod checker;
pub mod kernel;
mod links;
mod world;

pub use app::{SimApp, SimSet, is_reconfiguration, sim_chain, sim_membership};
pub use byzantine::{ByzMode, corrupt};
pub use checker::Checker;
pub use world::World;

use bft::{Config, Members, ReplicaId};
use kernel::Faults;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The bounds of the network faults a scenario draws.
const FAULTS: Faults = Faults {
    loss: 0.25,
    duplicate: 0.1,
    max_delay_ms: 60,
    max_delay_after_gst_ms: 20,
    partition: 0.002,
};

/// The fault schedule and network of one simulation run, derived from a seed.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed everything derives from.
    pub seed: u64,
    /// Number of replicas.
    pub n: u32,
    /// Byzantine replicas and their behaviour.
    pub byzantine: Vec<(u32, ByzMode)>,
    /// A replica that crashes at GST and never returns (counts against `f`).
    pub crashed_forever: Option<u32>,
    /// Number of client requests.
    pub requests: usize,
    /// Leader batch size limit.
    pub max_batch: usize,
    /// Virtual time (ms) at which faults stop.
    pub gst_ms: u64,
    /// The network's loss, duplication, delays and partitions (the partition probability
    /// is per tick).
    pub faults: Faults,
    /// Probability per tick of crashing a random correct replica before GST.
    pub crash: f64,
    /// Probability of a crash in the middle of executing a batch of outputs.
    pub crash_mid_batch: f64,
    /// Liveness bound: all requests decided within this long after GST (ms).
    pub liveness_ms: u64,
    /// A Byzantine replica that also sends, with every heartbeat, a validly signed
    /// prepare vote for a digest nobody proposed (a junk vote).
    pub junk_voter: Option<u32>,
    /// After everything is decided, the cluster idles this long (ms) and no correct
    /// replica may change views if the view's leader is correct.
    pub idle_ms: u64,
    /// Links carry this many bytes per ms (each link sends one message at a time, and
    /// a message whose copy is still queued on the link is not queued again, as in the
    /// consenter's transport); `None`: messages are independent of their size.
    pub bandwidth: Option<u64>,
    /// Bytes of padding per client request (large proposals).
    pub request_padding: usize,
    /// The network replays, every 100 ms, a state-transfer answer captured from
    /// another chain that uses the same keys (a decision no client submitted).
    pub foreign_replays: bool,
    /// Reconfiguration: the replica sets the cluster goes through, the first the one
    /// it starts in (none: one set of `n` replicas, keys from the seed). With sets, `n`
    /// is the number of replicas in the world (the largest set); a client request
    /// `reconf-…` moves to the next set when it is decided.
    pub sets: Vec<SimSet>,
    /// Replicas crashed at a given virtual time (ms, before GST; they restart from
    /// their WAL later): a replica crashing around its removal.
    pub crash_at: Vec<(u64, ReplicaId)>,
}

impl Scenario {
    /// Derives a scenario from `seed`.
    pub fn from_seed(seed: u64) -> Scenario {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fab2);
        let n = [4, 4, 4, 4, 4, 1, 2, 3, 5, 7][rng.gen_range(0..10)];
        let f = (n - 1) / 3;
        let mut ids: Vec<u32> = (0..n).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.gen_range(0..=i));
        }
        let byz_count = if f > 0 && rng.gen_bool(0.6) {
            rng.gen_range(1..=f)
        } else {
            0
        };
        let byzantine = ids[..byz_count as usize]
            .iter()
            .map(|&id| (id, ByzMode::random(&mut rng)))
            .collect();
        let crashed_forever = (byz_count < f && rng.gen_bool(0.3)).then(|| ids[byz_count as usize]);
        let calm = rng.gen_bool(0.1);
        let requests = rng.gen_range(4..30);
        let max_batch = rng.gen_range(1..8);
        let gst_ms = rng.gen_range(300..2500);
        let (faults, (crash, crash_mid_batch)) =
            Faults::draw(&mut rng, calm, &FAULTS, |p| (p(0.004), p(0.01)));
        Scenario {
            seed,
            n,
            byzantine,
            crashed_forever,
            requests,
            max_batch,
            gst_ms,
            faults,
            crash,
            crash_mid_batch,
            liveness_ms: 60_000,
            junk_voter: None,
            idle_ms: 0,
            bandwidth: None,
            request_padding: 0,
            foreign_replays: false,
            sets: Vec::new(),
            crash_at: Vec::new(),
        }
        .hardening(&mut rng, &ids[..byz_count as usize])
    }

    /// A reconfiguration scenario: [`Scenario::from_seed`]'s faults and clients, and
    /// one to three switches among sets of 4 to 7 members, each rotating every key,
    /// adding a replica (the next id, never a reused one), removing one, or both at
    /// once. A removal takes a random member, weighted towards the adversary's
    /// favourites: a Byzantine member, the replica crashed for good, or the leader of
    /// the set's view 0; in 30% of removals the removed replica also crashes at a random
    /// time before GST (and restarts from its WAL). Half of the changes of members keep
    /// the keys, so a removed replica still holds a key the new set uses for its id and
    /// (if Byzantine) keeps signing for the new set. Byzantine and crashed replicas are
    /// members of the first set, at most `f` of the smallest set.
    pub fn reconfiguration(seed: u64) -> Scenario {
        let mut sc = Scenario::from_seed(seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x00c0_ffee_5e75);
        let n0: u32 = [4, 4, 5, 7][rng.gen_range(0..4)];
        let changes = plan_changes(&mut rng, n0);
        let min_len = changes
            .iter()
            .scan(n0, |len, c| {
                *len = c.len_after(*len);
                Some(*len)
            })
            .fold(n0, u32::min);
        let f = (min_len - 1) / 3;
        let mut ids: Vec<u32> = (0..n0).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.gen_range(0..=i));
        }
        let byz_count = if rng.gen_bool(0.6) {
            rng.gen_range(1..=f)
        } else {
            0
        };
        sc.byzantine = ids[..byz_count as usize]
            .iter()
            .map(|&id| (id, ByzMode::random(&mut rng)))
            .collect();
        sc.crashed_forever = (byz_count < f && rng.gen_bool(0.3)).then(|| ids[byz_count as usize]);
        sc.junk_voter = sc
            .byzantine
            .first()
            .map(|(id, _)| *id)
            .filter(|_| rng.gen_bool(0.4));
        let mut members: Vec<u32> = (0..n0).collect();
        let mut next_id = n0;
        let mut keys = seed;
        let mut sets = vec![SimSet::contiguous(n0, keys)];
        for (k, change) in (1u64..).zip(changes) {
            if change.removes() {
                let gone = sc.removal_target(&mut rng, &members);
                members.retain(|m| *m != gone);
                if rng.gen_bool(0.3) {
                    let at = rng.gen_range(0..sc.gst_ms);
                    sc.crash_at.push((at, gone));
                }
            }
            if change.adds() {
                members.push(next_id);
                next_id += 1;
            }
            if change == Change::Rotate || rng.gen_bool(0.5) {
                keys = seed.wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            }
            sets.push(SimSet {
                members: Members::new(members.clone()).unwrap_or_else(|_| Members::contiguous(n0)),
                keys,
            });
        }
        sc.n = next_id;
        sc.sets = sets;
        sc
    }

    /// The member a removal takes out of `members`: a Byzantine one (25%), the one
    /// crashed for good (15%), the leader of view 0 of the set (25%), or any.
    fn removal_target(&self, rng: &mut ChaCha8Rng, members: &[u32]) -> u32 {
        let byz: Vec<u32> = self
            .byzantine
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| members.contains(id))
            .collect();
        let crashed = self.crashed_forever.filter(|id| members.contains(id));
        let pick = rng.gen_range(0..100);
        match (pick, byz.is_empty(), crashed) {
            (0..25, false, _) => byz[rng.gen_range(0..byz.len())],
            (25..40, _, Some(c)) => c,
            (40..65, _, _) => members[0],
            _ => members[rng.gen_range(0..members.len())],
        }
    }

    /// The number of replicas of the set the cluster starts in.
    pub fn first_n(&self) -> u32 {
        self.sets.first().map_or(self.n, |s| s.members.len())
    }

    /// Draws the hardening knobs after every older field, so the scenarios of older
    /// seeds keep their earlier fields.
    fn hardening(mut self, rng: &mut ChaCha8Rng, byzantine: &[u32]) -> Scenario {
        if let Some(&b) = byzantine.first()
            && rng.gen_bool(0.4)
        {
            self.junk_voter = Some(b);
        }
        if rng.gen_bool(0.3) {
            self.idle_ms = 1_500;
        }
        if rng.gen_bool(0.08) {
            // Up to 7 requests of up to 32 KiB per proposal over 0.5–2 KiB/ms: a
            // proposal can take longer to cross a link than the request timeout.
            self.bandwidth = Some(rng.gen_range(512..2048));
            self.request_padding = rng.gen_range(4_096..32_768);
        }
        self.foreign_replays = rng.gen_bool(0.1);
        self
    }
}

/// What one switch of a reconfiguration scenario changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// New keys for every member.
    Rotate,
    /// A replica joins with the next id.
    Add,
    /// A member leaves.
    Remove,
    /// A member leaves and a replica joins with the next id, in one switch.
    Replace,
}

impl Change {
    fn removes(self) -> bool {
        matches!(self, Change::Remove | Change::Replace)
    }

    fn adds(self) -> bool {
        matches!(self, Change::Add | Change::Replace)
    }

    fn len_after(self, len: u32) -> u32 {
        match self {
            Change::Rotate | Change::Replace => len,
            Change::Add => len + 1,
            Change::Remove => len - 1,
        }
    }
}

/// One to three changes that keep every set at 4 to 7 members; removals are the most
/// likely (a removal from 4 members is a replacement).
fn plan_changes(rng: &mut ChaCha8Rng, n0: u32) -> Vec<Change> {
    let mut len = n0;
    let mut changes = Vec::new();
    for _ in 0..rng.gen_range(1..=3) {
        let change = match rng.gen_range(0..10) {
            0..2 => Change::Rotate,
            2..4 if len < 7 => Change::Add,
            2..4 => Change::Replace,
            4..6 => Change::Replace,
            _ if len > 4 => Change::Remove,
            _ => Change::Replace,
        };
        len = change.len_after(len);
        changes.push(change);
    }
    changes
}

/// What a successful run observed.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Steps (events) executed.
    pub steps: u64,
    /// Virtual time at the end (ms).
    pub end_ms: u64,
    /// Virtual time after GST until every correct replica decided everything (ms).
    pub settle_ms: u64,
    /// Highest decided sequence.
    pub decided: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Highest view reached by a correct replica.
    pub max_view: u64,
    /// Foreign-chain decisions injected (all must be rejected).
    pub foreign_injected: u64,
    /// Snapshots installed by state transfer (correct replicas).
    pub installed: u64,
    /// Replica-set switches made by correct replicas (reconfiguration scenarios).
    pub switches: u64,
    /// Replicas removed by the switches the cluster decided, and among them Byzantine
    /// ones, the one crashed for good, and the leader of the old set's view 0.
    pub removed: Removed,
    /// Requests clients re-submitted after GST because no member held them.
    pub retried: u64,
}

/// Replicas the decided switches of a run removed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Removed {
    /// Every removed replica.
    pub any: u64,
    /// Byzantine ones.
    pub byzantine: u64,
    /// The replica crashed for good.
    pub crashed: u64,
    /// The leader of the old set's view 0.
    pub leader: u64,
}

impl Removed {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Removed) {
        self.any += other.any;
        self.byzantine += other.byzantine;
        self.crashed += other.crashed;
        self.leader += other.leader;
    }
}

/// The engine configuration of a replica in either simulation: short timers, so that
/// view changes happen within a run, and a checkpoint interval and a retention that vary
/// by seed, so that checkpoints, pruning and snapshot transfer happen often. Each world
/// sets its batch size and request timeout.
pub fn engine_config(id: ReplicaId, n: u32, seed: u64) -> Config {
    let mut c = Config::new(id, n);
    c.batch_interval_ms = 5;
    c.heartbeat_interval_ms = 50;
    c.heartbeat_timeout_ms = 250;
    c.view_change_timeout_ms = 250;
    c.sync_batch = std::num::NonZeroUsize::new(8).unwrap_or(std::num::NonZeroUsize::MIN);
    c.checkpoint_interval = [3, 5, 8][(seed % 3) as usize];
    c.retain_decisions = [0, 2, 6][(seed / 3 % 3) as usize];
    c
}

/// Runs one seed; `Err` describes the violated property (and names the seed).
pub fn run_seed(seed: u64, trace: bool) -> Result<Report, String> {
    run_scenario(Scenario::from_seed(seed), trace)
}

/// Runs one reconfiguration seed ([`Scenario::reconfiguration`]).
pub fn run_reconfiguration_seed(seed: u64, trace: bool) -> Result<Report, String> {
    run_scenario(Scenario::reconfiguration(seed), trace)
}

fn run_scenario(scenario: Scenario, trace: bool) -> Result<Report, String> {
    let seed = scenario.seed;
    World::new(scenario.clone(), trace)
        .run()
        .map_err(|e| format!("seed {seed} FAILED: {e}\n  scenario: {scenario:?}"))
}
