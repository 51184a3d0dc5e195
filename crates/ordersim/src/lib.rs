//! Deterministic fault simulation of the Arma ordering core (docs/ordering-sim.md).
//!
//! N parties × S shards in one process under one seeded scheduler: per party a router
//! (the shard mapping: every client request goes to every party's batcher of its shard),
//! one batcher core per shard (`batcher::Batcher`) with its own batch store, a consenter
//! (`bft::Replica` running `consenter::application::ArmaApp`) and an assembler
//! (`assembler::core::Core`, fetching batches from the batchers' stores). Shells are
//! simulated: fsyncs, pulls, acks, forwards, BAF
//! and complaint submissions, the decision stream to the party's batchers, each message
//! delayed, lost, duplicated and reordered before GST; partitions; consenters and
//! secondary batchers crash and restart from their persisted state. Byzantine variants: a
//! censoring primary, an equivocating primary, a primary sending bogus requests, a
//! lying or corrupting consenter, batchers lying to fetches, a late equivocation with
//! different request sets, noisy secondaries.
//!
//! After every step the [`checker`] verifies agreement of the header chains, f+1 BAFs per
//! ordered batch, one digest per batch id, validity of ordered requests, the
//! equivocation rule, that no term changes on Byzantine complaints alone, and that every
//! correct assembler appends the ordered blocks within a bound; at the end, that every
//! client request was ordered after GST.
//! A failing seed reproduces: `ARMA_SEED=<seed> cargo test -p ordersim --test arma_sim
//! reproduce -- --nocapture`.
//!
//! Reconfiguration scenarios ([`ArmaScenario::reconfiguration`]) add config updates that
//! rotate consenter and batcher keys, add a party or remove one at random points, under
//! the simulation's own rules ([`reconfig::SimRules`]), and check that every correct
//! consenter switches at the same decision, that every certificate verifies under the set
//! in force for it and not under the set before nor with a removed replica's signature,
//! that a removed party's BAFs and complaints never count, and that no acknowledged
//! request is lost across a switch
//! (`ARMA_RECONF_SEED=<seed> cargo test -p ordersim --test reconfiguration
//! reproduce_reconfiguration -- --nocapture`).

mod checker;
pub mod reconfig;
mod world;

pub use world::follow::StreamLie;
pub use world::{ASSEMBLER_BOUND_MS, FETCH_RETRY_MS, FETCH_TIMEOUT_MS, World};

use consenter::application::Knobs;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use testkit::sim::kernel::Faults;

/// A Byzantine party's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Byzantine {
    /// Its batcher of shard 0 drops every request and forward (it batches nothing).
    CensoringPrimary,
    /// Its batcher of shard 0 serves the secondaries of even and odd parties two
    /// different batches (same requests, other order) under each id.
    EquivocatingPrimary,
    /// Its batcher of shard 0 cuts batches holding a request of another shard.
    BogusPrimary,
    /// Its consenter corrupts its BFT messages (the engine's Byzantine modes).
    CorruptConsenter(testkit::sim::ByzMode),
    /// Its consenter, as leader, puts a wrong header hash into the proposal metadata.
    LyingConsenter,
    /// Its batchers answer assemblers' fetches by forging requests under the ordered
    /// header, by hanging or by refusing (a random one of the three per answer), and
    /// otherwise follow the protocol.
    FetchLiar,
    /// Its batcher of shard 0, as primary, serves one batch in two versions with different
    /// request sets: version A, without a victim request, to itself and f correct
    /// secondaries (so A can be ordered), and version B, with the victim, to the others
    /// only once A has its f+1 attestations. The victim's client sent it after GST to every
    /// router but those of the f secondaries that get A (2f+1 routers acknowledged it, so
    /// the client does not send it again). The primary then forgets the victim.
    LateEquivocator,
    /// Its batchers, whenever they are secondaries, complain against the primary at once
    /// in every term of every shard, submit a BAF fabricated over a header the primary
    /// never signed, flood the primary with forwarded requests, and never send a BAF or
    /// an ack of a real batch (attestations withheld).
    NoisySecondary,
    /// Its batcher of shard 0, as primary, lies in every compact pull answer: two digests
    /// swapped, one replaced by the digest of a request it never batched, one dropped or
    /// one repeated (a random one per answer); it answers the full-batch fetch that may
    /// follow honestly two times in three, and never otherwise. Its batchers lie to
    /// fetches as a `FetchLiar`'s do, so an ordered batch is available only from the
    /// correct secondaries that attested it.
    CompactLiar,
}

/// The bounds of the network faults a scenario draws.
const FAULTS: Faults = Faults {
    loss: 0.2,
    duplicate: 0.1,
    max_delay_ms: 40,
    max_delay_after_gst_ms: 15,
    partition: 0.002,
};

/// The fault schedule and network of one run, derived from a seed.
#[derive(Clone, Debug)]
pub struct ArmaScenario {
    /// The seed everything derives from.
    pub seed: u64,
    /// Parties.
    pub n: u32,
    /// Shards.
    pub shards: u32,
    /// Client requests.
    pub requests: usize,
    /// The Byzantine party (its batchers and consenter) and what it does.
    pub byzantine: Option<(u32, Byzantine)>,
    /// Virtual time (ms) at which faults stop.
    pub gst_ms: u64,
    /// The network's loss, duplication, delays and partitions between parties (the
    /// partition probability is per batcher tick; clients are outside every partition).
    pub faults: Faults,
    /// Probability per tick of crashing a correct consenter before GST.
    pub crash_consenter: f64,
    /// Probability per tick of crashing a correct secondary batcher before GST.
    pub crash_batcher: f64,
    /// Every request is ordered within this long after GST (ms).
    pub liveness_ms: u64,
    /// Defences turned off (negative tests only).
    pub knobs: Knobs,
    /// Secondaries' complaints are dropped (negative test of the censorship defence).
    pub drop_complaints: bool,
    /// A restarted batcher does not re-adopt its stored batches (negative test of
    /// `Batcher::restore`: a restarted primary then signs a second batch for a seq).
    pub skip_restore: bool,
    /// The Byzantine party's batchers also lie to fetches, whatever else they do.
    pub lies: bool,
    /// Correct batchers drop the requests of a version that lost to another one ordered
    /// under its id, instead of returning them to the pending queue (negative test of the
    /// give-back; the simulation's shell undoes it, the core cannot be told not to).
    pub drop_lost_requests: bool,
    /// Assemblers fetch as before the fix: one batcher at a time without a timeout, the
    /// first answer whose header fields match taken (negative test of the fetch).
    pub trusting_assemblers: bool,
    /// Probability, before GST, that a correct consenter crashes right after its engine
    /// logged a decision and before its shell recorded the outcome (decisions log and
    /// state), and that a correct batcher crashes after it wrote a batch and before the
    /// write was durable (the batch is lost; its BAF is signed only once it is durable).
    pub crash_points: f64,
    /// The consenter shell writes a checkpoint without waiting for its record of the
    /// decisions below it to be durable (negative test of `Delivery::Durable`).
    pub checkpoint_before_record: bool,
    /// The batcher shell tells its core a batch is persisted (so it signs its BAF) before
    /// the write is durable (negative test of the batcher's write-then-attest order).
    pub ack_before_fsync: bool,
    /// What a Byzantine consenter does with the decision stream of a correct follower
    /// that follows it (lured by true answers to its probes).
    pub stream_lie: StreamLie,
    /// Followers switch consenter only when a stream ends, never on a probe (negative
    /// test of the follower's check).
    pub sticky_followers: bool,
    /// Clients stop sending a request once 2f+1 routers acknowledged it (they send it again
    /// after a status timeout), and f+1 correct batchers of shard 0 crash at once before
    /// GST (the variant test; never drawn).
    pub correlated_restart: bool,
    /// Config updates submitted during the run (the reconfiguration scenarios): the
    /// consenters run the reconfigurable application with real consenter keys.
    pub reconfig: Option<Reconfiguration>,
}

/// A valid config update an admin submits: it rotates the consenter keys of `rotate`
/// and the batcher keys of `rotate_batchers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedUpdate {
    /// When it is first submitted (ms); later if the one before is not in force yet.
    pub at_ms: u64,
    /// The replicas whose consenter key it rotates to the next generation.
    pub rotate: Vec<u32>,
    /// The parties whose batcher key (one for all their shards) it rotates to the next
    /// generation.
    pub rotate_batchers: Vec<u32>,
}

/// An update the rules must refuse: it changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadUpdate {
    /// Approved by one party fewer than a majority.
    TooFewApprovals,
    /// A majority listed, one signature made with another party's admin key.
    ForgedApproval,
    /// A majority-approved update of a config that was replaced already.
    Stale,
    /// The exact bytes of the last update put in force, again.
    Replayed,
}

/// A consenter cut off from the other consenters for a while (before GST).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The replica (party − 1).
    pub consenter: u32,
    /// From (ms).
    pub from_ms: u64,
    /// Until (ms).
    pub until_ms: u64,
}

/// The config updates of a reconfiguration scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconfiguration {
    /// Valid updates, in submission order (each built against the config in force when
    /// it is submitted, and re-sent until it is in force or another replaced its base).
    pub updates: Vec<PlannedUpdate>,
    /// A second valid update of the first one's base, submitted with it (rotating other
    /// keys): one of the two is put in force, the other is stale from then on.
    pub competing: bool,
    /// Updates the rules must refuse, and when they are submitted (ms; a stale or
    /// replayed one waits for a switch).
    pub bad: Vec<(u64, BadUpdate)>,
    /// A correct consenter partitioned from the other consenters around the first update.
    pub partition: Option<Partition>,
    /// Probability that a correct consenter crashes as it switches (before GST): before
    /// its switch is in its WAL, or after and before its shell recorded the decision.
    pub crash_at_switch: f64,
    /// Probability that a correct batcher crashes once it was fed a switch (before GST).
    pub crash_batcher_at_switch: f64,
    /// Every consenter's rules accept any approvals (negative test).
    pub lax_rules: bool,
    /// This replica's rules refuse every update, so it never switches (negative test).
    pub stubborn: Option<u32>,
    /// A party joins (party n + 1): its nodes run from the start outside the network,
    /// and the first update (or whichever of its base is put in force) adds it.
    pub join: bool,
    /// A party leaves: planned update `leave.update` (after the join, if any) removes
    /// the party its kind names.
    pub leave: Option<Leave>,
}

/// Which party a leaving update removes (docs/ordering-sim.md "A party leaving").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaveKind {
    /// The Byzantine party (its nodes keep misbehaving after they are removed, and its
    /// batchers attest and complain under the new config).
    Byzantine,
    /// A correct party whose nodes crashed for good shortly before the update is
    /// submitted (no Byzantine party in these seeds: it is the one fault).
    CrashedForGood,
    /// The primary of a shard in its current term when the update is submitted.
    Primary,
    /// The leader of the view a correct consenter is in when the update is submitted.
    Leader,
    /// A correct party drawn at random.
    Honest,
}

/// A party leaving through a config update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leave {
    /// The planned update that removes it (only the party leaves in it: its keys
    /// rotate as drawn for the others).
    pub update: usize,
    /// Which party.
    pub kind: LeaveKind,
    /// For `Primary`, the shard.
    pub shard: u32,
}

impl ArmaScenario {
    /// Derives a scenario from `seed`.
    pub fn from_seed(seed: u64) -> ArmaScenario {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xa7a_5eed);
        let n = [4, 4, 4, 4, 1, 7][rng.gen_range(0..6)];
        let f = (n - 1) / 3;
        let byzantine = (f > 0 && rng.gen_bool(0.6)).then(|| {
            let party = rng.gen_range(1..=n);
            let kind = match rng.gen_range(0..5) {
                0 => Byzantine::CensoringPrimary,
                1 => Byzantine::EquivocatingPrimary,
                2 => Byzantine::BogusPrimary,
                3 => Byzantine::CorruptConsenter(testkit::sim::ByzMode::random(&mut rng)),
                _ => Byzantine::LyingConsenter,
            };
            (party, kind)
        });
        let calm = rng.gen_bool(0.15);
        let shards = rng.gen_range(1..=2);
        let requests = rng.gen_range(4..40);
        let gst_ms = rng.gen_range(300..2500);
        let (faults, (crash_consenter, crash_batcher)) =
            Faults::draw(&mut rng, calm, &FAULTS, |p| (p(0.003), p(0.002)));
        // Drawn after everything older seeds drew, so that their scenarios stay as they were.
        let byzantine = byzantine.map(|(party, kind)| match rng.gen_range(0..10) {
            0 | 1 => (party, Byzantine::FetchLiar),
            2 | 3 => (party, Byzantine::LateEquivocator),
            4 => (party, Byzantine::NoisySecondary),
            5 => (party, Byzantine::CompactLiar),
            _ => (party, kind),
        });
        let lies = rng.gen_bool(0.5);
        let stream_lie = [StreamLie::Silent, StreamLie::Trickle, StreamLie::Replay][rng.gen_range(0..3)];
        let crash_points = if calm || rng.gen_bool(0.5) {
            0.0
        } else {
            rng.gen_range(0.0..0.05)
        };
        ArmaScenario {
            seed,
            n,
            shards,
            requests,
            byzantine,
            gst_ms,
            faults,
            crash_consenter,
            crash_batcher,
            liveness_ms: 60_000,
            knobs: Knobs::default(),
            drop_complaints: false,
            skip_restore: false,
            lies,
            drop_lost_requests: false,
            trusting_assemblers: false,
            crash_points,
            checkpoint_before_record: false,
            ack_before_fsync: false,
            stream_lie,
            sticky_followers: false,
            correlated_restart: false,
            reconfig: None,
        }
    }

    /// The reconfiguration scenario of `seed`: [`ArmaScenario::from_seed`] with one to
    /// three config updates at random times (rotating consenter and batcher keys), refused updates,
    /// maybe a competing update, a partitioned consenter and crashes at the switch.
    pub fn reconfiguration(seed: u64) -> ArmaScenario {
        let mut sc = ArmaScenario::from_seed(seed);
        // Whether a party joins, from a stream of its own. In half of those without a
        // Byzantine party, the network starts one party smaller (3 or 6), so that the
        // join moves f and every f + 1 threshold (0 → 1, 1 → 2), not only the quorum.
        let mut join_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x701e_5eed);
        let join = join_rng.gen_bool(0.4);
        if join && sc.byzantine.is_none() && matches!(sc.n, 4 | 7) && join_rng.gen_bool(0.5) {
            sc.n -= 1;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x2ec0_f16e);
        let n = sc.n;
        let until = sc.gst_ms + 1_500;
        let mut updates: Vec<PlannedUpdate> = (0..rng.gen_range(1..=3))
            .map(|_| {
                let mut rotate: Vec<u32> = (0..n).filter(|_| rng.gen_bool(0.5)).collect();
                if rotate.is_empty() {
                    rotate.push(rng.gen_range(0..n));
                }
                PlannedUpdate {
                    at_ms: rng.gen_range(20..until),
                    rotate,
                    rotate_batchers: Vec::new(),
                }
            })
            .collect();
        updates.sort_by_key(|u| u.at_ms);
        // Batcher key rotations from a stream of their own, so the rest of the plan stays
        // what it was for every seed: in about half of the updates, each party's with
        // probability ⅓ (the Byzantine party's too).
        let mut keys_rng = ChaCha8Rng::seed_from_u64(seed ^ 0xba7c_4e55);
        for u in &mut updates {
            if keys_rng.gen_bool(0.5) {
                u.rotate_batchers = (1..=n).filter(|_| keys_rng.gen_bool(1.0 / 3.0)).collect();
            }
        }
        let competing = rng.gen_bool(0.25);
        let kinds = [
            BadUpdate::TooFewApprovals,
            BadUpdate::ForgedApproval,
            BadUpdate::Stale,
            BadUpdate::Replayed,
        ];
        let mut bad = Vec::new();
        for kind in kinds {
            if rng.gen_bool(0.5) {
                bad.push((rng.gen_range(20..until + 500), kind));
            }
        }
        let first = updates.first().map_or(0, |u| u.at_ms);
        let byzantine = sc.byzantine.map(|(p, _)| p - 1);
        let correct: Vec<u32> = (0..n).filter(|c| Some(*c) != byzantine).collect();
        let partition = (n > 1 && rng.gen_bool(0.4)).then(|| {
            let from_ms = first.saturating_sub(rng.gen_range(0..200));
            Partition {
                consenter: correct[rng.gen_range(0..correct.len())],
                from_ms,
                until_ms: from_ms + rng.gen_range(200..1_500),
            }
        });
        let crash_at_switch = if rng.gen_bool(0.5) {
            rng.gen_range(0.1..0.5)
        } else {
            0.0
        };
        let crash_batcher_at_switch = if rng.gen_bool(0.3) {
            rng.gen_range(0.05..0.3)
        } else {
            0.0
        };
        sc.reconfig = Some(Reconfiguration {
            updates,
            competing,
            bad,
            partition,
            crash_at_switch,
            crash_batcher_at_switch,
            lax_rules: false,
            stubborn: None,
            join,
            leave: None,
        });
        sc.plan_leave();
        sc
    }

    /// Whether a party leaves, which and when, from a stream of its own (so that every
    /// draw above stays what it was). Half the seeds that can have one do. The network
    /// keeps f ≥ 1 after the removal in most of them: a 4-party network without a join
    /// starts with 5 instead, and one with a join removes a party after the join. A
    /// network of 4 goes down to 3 (f = 0) only when no Byzantine party stays after it
    /// (no Byzantine party, or the Byzantine one leaves), so that every remaining node is
    /// correct after GST and liveness is owed. A 1-party network leaves only after a join
    /// (2 → 1: then the genesis party may go, and the network is the joiner alone).
    fn plan_leave(&mut self) {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x1ea7_e5ed);
        if !rng.gen_bool(0.5) {
            return;
        }
        let byzantine = self.byzantine.is_some();
        let (n, shards) = (self.n, self.shards);
        let Some(r) = self.reconfig.as_mut() else {
            return;
        };
        if n == 1 && !r.join {
            return;
        }
        let mut kinds = vec![LeaveKind::Primary, LeaveKind::Leader, LeaveKind::Honest];
        if byzantine {
            kinds.push(LeaveKind::Byzantine);
            kinds.push(LeaveKind::Byzantine);
        } else {
            kinds.push(LeaveKind::CrashedForGood);
            kinds.push(LeaveKind::CrashedForGood);
        }
        let kind = kinds[rng.gen_range(0..kinds.len())];
        let after = n + u32::from(r.join) - 1;
        let f_after = after.saturating_sub(1) / 3;
        let mut grow = false;
        if f_after == 0 && n == 4 && !r.join {
            // 4 → 3: only with no Byzantine party left after it, and even then mostly
            // from 5 instead.
            grow = (byzantine && kind != LeaveKind::Byzantine) || rng.gen_bool(0.75);
        }
        // A party down for good is one fault: the others must still make a quorum of
        // the set it leaves (not so for 2 parties), and the network must have had f ≥ 1
        // all along — with f = 0 one BAF ordered a batch, and the party going down may
        // hold the only copy of it (seed 468 before this rule: a network of 3 that grew
        // to 4 lost a batch of its 3-party days with its primary).
        if kind == LeaveKind::CrashedForGood && (byzantine || after < 2 || n < 4) {
            return;
        }
        // The join is update 0; the leave comes in a later one (never with the join).
        let first = usize::from(r.join);
        while r.updates.len() <= first {
            let last = r.updates.last().map_or(20, |u| u.at_ms);
            r.updates.push(PlannedUpdate {
                at_ms: last + rng.gen_range(50..600),
                rotate: vec![rng.gen_range(0..n)],
                rotate_batchers: Vec::new(),
            });
        }
        let update = rng.gen_range(first..r.updates.len());
        r.leave = Some(Leave {
            update,
            kind,
            shard: rng.gen_range(0..shards),
        });
        if grow {
            self.n = 5;
        }
    }

    /// The same reconfiguration scenario with a party of kind `kind` leaving in its last
    /// planned update (the variant tests): at least 5 parties (4 after the leave) unless a
    /// party joins first, and no Byzantine party when the one leaving crashed for good.
    pub fn with_leave(mut self, kind: LeaveKind) -> ArmaScenario {
        if kind == LeaveKind::CrashedForGood {
            self.byzantine = None;
        }
        let join = self.reconfig.as_ref().is_some_and(|r| r.join);
        if self.n < 4 || (!join && self.n == 4) {
            self.n = 5;
        }
        let (n, shards, seed) = (self.n, self.shards, self.seed);
        if let Some(r) = self.reconfig.as_mut() {
            let first = usize::from(r.join);
            while r.updates.len() <= first {
                let last = r.updates.last().map_or(20, |u| u.at_ms);
                r.updates.push(PlannedUpdate {
                    at_ms: last + 200,
                    rotate: vec![(seed % u64::from(n)) as u32],
                    rotate_batchers: Vec::new(),
                });
            }
            r.leave = Some(Leave {
                update: r.updates.len() - 1,
                kind,
                shard: (seed % u64::from(shards)) as u32,
            });
        }
        self
    }

    /// Parties whose nodes run: the genesis parties, and one joining in the scenarios
    /// that add a party.
    pub fn total_parties(&self) -> u32 {
        self.n + u32::from(self.reconfig.as_ref().is_some_and(|r| r.join))
    }

    /// Whether clients stop sending a request once 2f+1 routers acknowledged it (and
    /// send it again only after a status timeout).
    pub fn acked_clients(&self) -> bool {
        self.correlated_restart || self.reconfig.is_some()
    }

    /// The same scenario with the given Byzantine party forced (the variant tests).
    pub fn with_byzantine(mut self, party: u32, kind: Byzantine) -> ArmaScenario {
        if self.n < 4 {
            self.n = 4;
        }
        self.byzantine = Some((party, kind));
        self
    }
}

/// What a successful run observed.
#[derive(Clone, Debug, Default)]
pub struct ArmaReport {
    /// Events executed.
    pub steps: u64,
    /// Virtual time at the end (ms).
    pub end_ms: u64,
    /// Blocks ordered.
    pub blocks: u64,
    /// Client requests ordered more than once (after term changes).
    pub duplicates: u64,
    /// Term changes decided.
    pub term_changes: u64,
    /// Equivocations the consenters proved.
    pub equivocations: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Snapshots consenters installed by state transfer (checkpoints let the others
    /// prune the decisions they would otherwise have sent).
    pub installed: u64,
    /// Blocks the correct assemblers appended (all of them together).
    pub assembled: u64,
    /// The longest an assembler took after GST to append a block, counted from the later
    /// of GST and the block's ordering (ms).
    pub assembler_lag_ms: u64,
    /// Fetch answers a lying batcher forged, withheld or refused.
    pub fetch_lies: u64,
    /// Times a correct batcher found a version it held lost to another ordered under its
    /// id (it returned the lost version's requests and sent evidence).
    pub lost_versions: u64,
    /// Crash points that fired (a consenter between a decision and its record, a batcher
    /// between a write and its fsync).
    pub crash_points: u64,
    /// Batches a crash lost before they were durable.
    pub lost_writes: u64,
    /// Requests a noisy secondary forwarded to flood a primary.
    pub flooded: u64,
    /// Of those, the ones ordered.
    pub flood_ordered: u64,
    /// BAFs a noisy secondary fabricated over headers the primary never signed.
    pub fabricated_bafs: u64,
    /// Compact pull answers a lying primary falsified.
    pub compact_lies: u64,
    /// Full-batch fetches after a compact answer that the lying primary left unanswered.
    pub full_withheld: u64,
    /// Times a correct follower switched to the Byzantine consenter's decision stream.
    pub lured: u64,
    /// Requests acknowledged by 2f+1 routers and not yet ordered when f+1 batchers
    /// crashed at once (`correlated_restart`).
    pub correlated_acked: u64,
    /// Acknowledged requests still unordered at the clients' status timeout, sent again.
    pub lost_after_ack: u64,
    /// Config updates put in force (consenter set switches).
    pub switches: u64,
    /// Batchers of a joining party that started in the network (shards × 1 when a
    /// party joined).
    pub joined_batchers: u64,
    /// BAFs of a joined party in decisions (its acknowledgements counted).
    pub joined_bafs: u64,
    /// Times a batcher took a rotated key of its own at a switch.
    pub batcher_keys_rotated: u64,
    /// Valid updates that lost to a competing one of the same base.
    pub superseded: u64,
    /// Submissions of updates the rules must refuse (each changed nothing).
    pub bad_updates: u64,
    /// Requests acknowledged by 2f+1 routers and not yet ordered at a switch.
    pub acked_at_switch: u64,
    /// Crashes of correct nodes at a switch (consenters switching, batchers fed one).
    pub crashes_at_switch: u64,
    /// Consenter messages a partition dropped.
    pub partitioned: u64,
    /// Crashes of correct batchers (any cause).
    pub batcher_crashes: u64,
    /// Certificates checked not to verify under the set before their own.
    pub wrong_set_checked: u64,
    /// Switches consenters crossed by installing a snapshot of a later set.
    pub switches_by_snapshot: u64,
    /// Messages a corrupting consenter sent (rewritten, signed with its key) in a set
    /// after the genesis set.
    pub byz_sent_after_switch: u64,
    /// Of the duplicate orderings, those in a later epoch than the request's first.
    pub duplicates_across_switch: u64,
    /// The party a leaving update removed (chosen), and which kind it was.
    pub left: Option<(u32, LeaveKind)>,
    /// Parties removed by a switch.
    pub parties_left: u64,
    /// Requests whose acknowledgements fell below 2f+1 of the parties in force when a
    /// party left, sent again by their clients.
    pub acks_lost_at_leave: u64,
    /// BAFs and complaints a removed Byzantine party's batchers sent under the config
    /// that removed it.
    pub removed_sent: u64,
    /// Certificates checked not to verify with a removed replica's signature standing in
    /// for a member's.
    pub removed_signer_refused: u64,
    /// Headers ordered after a switch that removed a party (their primaries checked to
    /// rotate over the parties in force, their BAFs counted over them).
    pub headers_after_leave: u64,
}

/// Runs one seed.
pub fn run_seed(seed: u64) -> Result<ArmaReport, String> {
    run(ArmaScenario::from_seed(seed), false)
}

/// Runs one reconfiguration seed ([`ArmaScenario::reconfiguration`]).
pub fn run_reconfiguration_seed(seed: u64) -> Result<ArmaReport, String> {
    run(ArmaScenario::reconfiguration(seed), false)
}

/// Runs a scenario; `Err` names the seed and the violated property.
pub fn run(scenario: ArmaScenario, trace: bool) -> Result<ArmaReport, String> {
    World::new(scenario.clone(), trace)
        .and_then(World::run)
        .map_err(|e| format!("seed {} FAILED: {e}\n  scenario: {scenario:?}", scenario.seed))
}
