//! The simulated ordering service: nodes, shells, network and fault schedule.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use batcher::{Baf, Batcher, Input as BInput, Output as BOutput, SignedBatch, TermInfo};
use bft::crypto::TestKeys;
use bft::{Config, Decision, Input, MemWal, Message, Output, Replica, Wal, WalEntry};
use consenter::application::{
    ArmaApp, ArmaConfig, ArmaState, Knobs, OrderedHeader, Outcome, encode_baf, encode_complaint,
};
use crypto::SigningKey;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use testkit::sim::engine_config;
use testkit::sim::kernel::{self, Kernel, Sim, Stop};
use types::digest::{Digest32, shard_of};
use types::{BatchId, PartyId};

use super::checker::{Checker, Switches};
use super::reconfig::{BATCHING, MAX_SEQS_AHEAD, batcher_key};
use super::{ArmaReport, ArmaScenario, Byzantine};

mod acked;
mod assemblers;
pub(crate) mod follow;
mod leave;
mod reconf;

use assemblers::ANode;
pub use assemblers::{ASSEMBLER_BOUND_MS, FETCH_RETRY_MS, FETCH_TIMEOUT_MS};

const PULL_MS: u64 = 30;
const RESEND_MS: u64 = 300;
const OUTBOX: usize = 64;
const MAX_REQUEST_BYTES: usize = 64;
/// Forwards a noisy secondary floods its primary with per tick, and in all (each of its
/// batchers): more than its quota of a primary's pending queue (a quarter of 1,000 with
/// four parties), and finite, so that a run ends.
const FLOOD: usize = 4;
const FLOOD_BUDGET: usize = 600;

/// The events of the ordering world.
pub enum Ev {
    BTick(usize),
    CTick(u32),
    Bft {
        from: u32,
        to: u32,
        msg: Message,
    },
    ToBatcher {
        b: usize,
        input: BInput,
    },
    ToConsenter {
        to: u32,
        request: Vec<u8>,
    },
    Client(Arc<[u8]>),
    RestartB(usize),
    RestartC(u32),
    /// A correct batcher crashes (a crash point between a write and its fsync).
    CrashB(usize),
    /// f+1 correct batchers of shard 0 crash at once (`correlated_restart`).
    CorrelatedCrash,
    /// Clients send again what 2f+1 routers acknowledged and is not ordered yet.
    StatusTimeout,
    /// Batcher `b`'s write of a batch is durable (its fsync returned).
    Synced {
        b: usize,
        id: BatchId,
        digest: Digest32,
        /// The batcher's incarnation that wrote it (a restarted one did not).
        incarnation: u32,
    },
    Gst,
    /// The late equivocation's victim and companions are sent (after GST).
    Victim,
    /// An assembler's clock (index `party - 1`).
    ATick(usize),
    /// The admin submits config updates (reconfiguration scenarios).
    Admin(reconf::Admin),
    /// An assembler asks batcher `b` for a batch (`Fetch`).
    FetchAsk {
        a: usize,
        b: usize,
        round: u32,
        want: assembler::core::Wanted,
    },
    /// A batcher's answer to an assembler's fetch (`None`: refused).
    Fetched {
        a: usize,
        round: u32,
        block: u64,
        answer: Option<assembler::core::OfferedBatch>,
    },
}

/// What became of a batcher whose party left, or that is down for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Gone {
    /// A correct batcher of a party that left: stopped at the switch, its store still
    /// answers fetches of what it holds.
    Drains,
    /// Crashed for good (its party leaves while it is down): it answers nothing.
    Down,
    /// A Byzantine batcher of a party that left: it goes on, and also attests and
    /// complains under config `config` (whose parties are `parties`).
    Zombie {
        /// The config that removed its party.
        config: u64,
        /// That config's parties.
        parties: Vec<u32>,
    },
}

/// One batcher: its core and its simulated shell's durable state.
struct BNode {
    party: u32,
    shard: u32,
    core: Option<Batcher>,
    served: HashMap<(BatchId, u64), Arc<SignedBatch>>,
    /// The other version an equivocating primary serves to odd parties.
    alt: HashMap<(BatchId, u64), Arc<SignedBatch>>,
    want: Option<BatchId>,
    last_pull: u64,
    /// Its batch store: every batch it persisted, by (term, primary, seq).
    own: BTreeMap<(u64, u32, u64), Arc<SignedBatch>>,
    /// The same store by (id, digest): what it answers fetches from (a batch is
    /// fetchable from a batcher only once that batcher persisted it).
    held: HashMap<(BatchId, Digest32), Arc<SignedBatch>>,
    /// Decisions of the party's consenter fed so far, and what they said of this shard.
    fed: usize,
    info: TermInfo,
    /// Submitted BAFs and complaints, resent until ordered or out of term: (term, seq, bytes).
    outbox: Vec<(u64, u64, Vec<u8>)>,
    last_resend: u64,
    /// A noisy secondary: the last term it complained in.
    noisy_term: Option<u64>,
    /// Batches written but not yet durable: a crash loses them.
    unsynced: HashSet<(BatchId, Digest32)>,
    /// Crashes so far (a write's fsync answers only the incarnation that wrote it).
    incarnation: u32,
    /// When the last write queued is durable.
    synced_until: u64,
    /// Requests it flooded its primaries with (a noisy secondary).
    flooded: usize,
    /// The consenter it reads decisions from.
    follow: follow::Follow,
    /// The batcher keys and its own signing key of the newest config it was fed (kept
    /// durable, as the node keeps its persisted sets): put back in force at a restart.
    keys: Option<(BTreeMap<PartyId, crypto::PublicKey>, SigningKey)>,
    /// Whether its party is in the network: a joining party's batchers follow the
    /// decisions without a core until one puts a config with their party in force.
    joined: bool,
    /// The sequence of the newest config it was fed (kept durable with `keys`): its
    /// BAFs and complaints name it.
    config_seq: u64,
    /// Whether its party left, or it is down for good.
    gone: Option<Gone>,
}

/// The late equivocation of a `LateEquivocator` primary.
struct Late {
    /// The request version A leaves out.
    victim: Arc<[u8]>,
    /// Requests of its shard sent with it, so that it shares a batch.
    companions: Vec<Arc<[u8]>>,
    /// The parties version A is served to (the primary and f correct secondaries); they
    /// never receive the victim.
    a_set: Vec<u32>,
    /// Whether the victim was sent.
    sent: bool,
    /// The equivocated batch, once cut.
    batch: Option<LateBatch>,
}

/// The batch a late equivocator serves in two versions.
struct LateBatch {
    id: BatchId,
    term: u64,
    /// Version A's digest.
    digest: Digest32,
    /// The secondaries that acked version A.
    acks: Vec<u32>,
    /// Version B, until it is released.
    pending: Option<Arc<SignedBatch>>,
}

/// One decision in a consenter's decisions log.
pub(crate) struct Logged {
    /// What it ordered.
    pub outcome: Outcome,
    /// The decision as the consenter serves it, certificate included (reconfiguration
    /// scenarios: their certificates are real signatures, so followers verify them).
    pub wire: Option<wire::pb::Decision>,
}

/// One consenter: the replica and its persisted state.
struct CNode {
    replica: Option<Replica<ArmaApp>>,
    wal: MemWal,
    snapshot: ArmaState,
    /// Its decisions, in order (its decisions log); `None` for decisions a
    /// state-transfer snapshot replaced (the log restarts after the snapshot).
    log: Vec<Option<Arc<Logged>>>,
    /// Snapshots installed by state transfer.
    installed: u64,
    /// Crashed for good (its party leaves while it is down): never restarts.
    dead: bool,
}

/// The world of one run.
pub struct World {
    sc: ArmaScenario,
    trace: bool,
    /// Clock, event queue, random stream and network (node `p` is party `p`).
    k: Kernel<Ev>,
    cfg: ArmaConfig,
    keys: TestKeys,
    bkeys: BTreeMap<u32, SigningKey>,
    batchers: Vec<BNode>,
    consenters: Vec<CNode>,
    /// One assembler per party (`None` for a Byzantine party's).
    assemblers: Vec<Option<ANode>>,
    /// Every batch any batcher persisted, for the checker only (validity of ordered
    /// requests); nobody fetches from it.
    persisted: HashMap<(BatchId, u64, Digest32), Arc<SignedBatch>>,
    requests: Vec<Arc<[u8]>>,
    /// The late equivocation (a `LateEquivocator` party), if any.
    late: Option<Late>,
    /// Flood requests made so far (their names).
    flooded: u64,
    /// Client requests by digest, and the parties whose batcher admitted each
    /// (`correlated_restart` only).
    by_digest: HashMap<batcher::RequestDigest, Arc<[u8]>>,
    acks: HashMap<Arc<[u8]>, std::collections::BTreeSet<u32>>,
    /// Config updates and their keys (reconfiguration scenarios).
    reconf: Option<reconf::Reconf>,
    /// The parties in force after the last switch decided, and those that left.
    in_force: Vec<u32>,
    left: Vec<u32>,
    /// Requests their clients count as acknowledged (2f+1 routers of the parties in
    /// force acknowledged them), and so stop sending.
    acked: HashSet<Arc<[u8]>>,
    checker: Checker,
    report: ArmaReport,
}

impl World {
    /// Builds the world of a scenario.
    pub fn new(sc: ArmaScenario, trace: bool) -> Result<World, String> {
        let rng = ChaCha8Rng::seed_from_u64(ChaCha8Rng::seed_from_u64(sc.seed).r#gen());
        let bkeys: BTreeMap<u32, SigningKey> = (1..=sc.n).map(|p| (p, batcher_key(p, 0))).collect();
        let pub_keys = (1..=sc.n)
            .flat_map(|p| (0..sc.shards).map(move |s| (p, s)))
            .filter_map(|(p, s)| bkeys.get(&p).map(|k| ((p, s), k.public_key())))
            .collect();
        let cfg = ArmaConfig::new(
            arma::Parties::contiguous(sc.n),
            sc.shards,
            MAX_SEQS_AHEAD,
            pub_keys,
        )
        .map_err(|e| e.to_string())?
        .with_knobs(sc.knobs);
        let keys = TestKeys::new(sc.seed ^ 0xc0ffee);
        let mut checker = Checker::new(cfg.clone(), sc.byzantine.map(|(p, _)| p));
        let reconf = sc.reconfig.clone().map(|plan| {
            let batchers = bkeys.values().map(SigningKey::public_key).collect();
            reconf::Reconf::new(plan, sc.n, sc.total_parties(), sc.shards, batchers)
        });
        if let Some(r) = &reconf {
            checker.switches = Some(Switches::new(&r.genesis_keys, &r.genesis)?);
        }
        let mut w = World {
            checker,
            reconf,
            batchers: Vec::new(),
            consenters: Vec::new(),
            assemblers: Vec::new(),
            trace,
            k: Kernel::new(rng, sc.faults, sc.total_parties() as usize + 1),
            keys,
            bkeys,
            persisted: HashMap::new(),
            requests: Vec::new(),
            late: None,
            flooded: 0,
            by_digest: HashMap::new(),
            acks: HashMap::new(),
            report: ArmaReport::default(),
            in_force: (1..=sc.n).collect(),
            left: Vec::new(),
            acked: HashSet::new(),
            cfg,
            sc,
        };
        w.build();
        Ok(w)
    }

    fn build(&mut self) {
        let start = TermInfo {
            term: 0,
            last_ordered_seq: 0,
        };
        for party in 1..=self.sc.total_parties() {
            for shard in 0..self.sc.shards {
                self.batchers.push(BNode {
                    party,
                    shard,
                    core: None,
                    served: HashMap::new(),
                    alt: HashMap::new(),
                    want: None,
                    last_pull: 0,
                    own: BTreeMap::new(),
                    held: HashMap::new(),
                    fed: 0,
                    info: start,
                    outbox: Vec::new(),
                    last_resend: 0,
                    noisy_term: None,
                    unsynced: HashSet::new(),
                    incarnation: 0,
                    synced_until: 0,
                    flooded: 0,
                    follow: follow::Follow::of(party),
                    keys: None,
                    joined: party <= self.sc.n,
                    config_seq: 0,
                    gone: None,
                });
            }
            self.consenters.push(CNode {
                replica: None,
                wal: MemWal::default(),
                snapshot: ArmaState::genesis(self.sc.shards),
                log: Vec::new(),
                installed: 0,
                dead: false,
            });
        }
        for b in 0..self.batchers.len() {
            self.start_batcher(b);
            self.k.first_tick(Ev::BTick(b));
        }
        for c in 0..self.sc.total_parties() {
            self.start_consenter(c);
            self.k.first_tick(Ev::CTick(c));
        }
        self.build_assemblers();
        for i in 0..self.sc.requests {
            let request: Arc<[u8]> = Arc::from(format!("req-{}-{i}", self.sc.seed).into_bytes());
            self.requests.push(Arc::clone(&request));
            self.by_digest
                .insert(batcher::RequestDigest::of(&request), Arc::clone(&request));
            let at = self.k.rng().gen_range(1..self.sc.gst_ms.max(2));
            self.k.schedule(at, Ev::Client(request));
        }
        self.k.schedule(self.sc.gst_ms, Ev::Gst);
        self.build_late();
        self.build_correlated();
        self.build_reconf();
    }

    /// Prepares a late equivocation: the victim, its companions and version A's parties.
    fn build_late(&mut self) {
        let Some((p, Byzantine::LateEquivocator)) = self.sc.byzantine else {
            return;
        };
        let f = ((self.sc.n - 1) / 3) as usize;
        let shards = self.sc.shards;
        let seed = self.sc.seed;
        let of_shard_0 = |name: &'static str| {
            (0..10_000u32)
                .map(move |k| Arc::<[u8]>::from(format!("{name}-{seed}-{k}").into_bytes()))
                .filter(move |r| shard_of(r, shards).ok() == Some(0))
        };
        let Some(victim) = of_shard_0("victim").next() else {
            return;
        };
        let companions: Vec<Arc<[u8]>> = of_shard_0("companion").take(3).collect();
        let mut honest: Vec<u32> = (1..=self.sc.n).filter(|q| *q != p).collect();
        let mut a_set = vec![p];
        for _ in 0..f {
            if honest.is_empty() {
                break;
            }
            let i = self.k.rng().gen_range(0..honest.len());
            a_set.push(honest.remove(i));
        }
        self.late = Some(Late {
            victim,
            companions,
            a_set,
            sent: false,
            batch: None,
        });
        self.k.schedule(self.sc.gst_ms.saturating_add(1), Ev::Victim);
    }

    /// The victim's client sends it to every router but those of version A's correct
    /// parties; the companions go to every router.
    fn send_victim(&mut self) {
        let Some(late) = self.late.as_mut() else {
            return;
        };
        late.sent = true;
        let (victim, companions, a_set) = (
            Arc::clone(&late.victim),
            late.companions.clone(),
            late.a_set.clone(),
        );
        let byzantine = self.sc.byzantine.map(|(p, _)| p);
        for request in companions {
            self.client(&request);
        }
        self.checker.submitted(Arc::clone(&victim));
        for party in (1..=self.sc.n).filter(|q| Some(*q) == byzantine || !a_set.contains(q)) {
            let b = self.b_index(party, 0);
            let at = self.k.arrival(self.k.now());
            self.k.schedule(
                at,
                Ev::ToBatcher {
                    b,
                    input: BInput::Request(Arc::clone(&victim)),
                },
            );
        }
    }

    /// Whether `(id, term)` is the late equivocation's batch and version B is not out yet.
    fn late_pending(&self, id: BatchId, term: u64) -> bool {
        self.late
            .as_ref()
            .and_then(|l| l.batch.as_ref())
            .is_some_and(|l| (l.id, l.term) == (id, term) && l.pending.is_some())
    }

    /// The late equivocator serves its first batch holding the victim and another request
    /// in two versions: A (without the victim) it attests and serves to version A's
    /// parties; B (the batch as cut) waits until A has f+1 attestations.
    fn late_serve(&mut self, b: usize, batch: &Arc<SignedBatch>) -> Option<Arc<SignedBatch>> {
        let late = self.late.as_ref()?;
        let own = batch.id().primary == self.batchers[b].party;
        if !own
            || !self.is_byz_primary(b, Byzantine::LateEquivocator)
            || late.batch.is_some()
            || batch.requests.len() < 2
            || !batch.requests.contains(&late.victim)
        {
            return None;
        }
        let victim = Arc::clone(&late.victim);
        let key = self.signing_key(b)?;
        let requests: Vec<Arc<[u8]>> = batch.requests.iter().filter(|r| **r != victim).cloned().collect();
        let a = Arc::new(SignedBatch::sign(batch.id(), batch.header.term, requests, &key));
        self.persisted
            .insert((a.id(), a.header.term, a.header.digest), Arc::clone(&a));
        self.batchers[b]
            .held
            .insert((a.id(), a.header.digest), Arc::clone(&a));
        if let Some(late) = self.late.as_mut() {
            late.batch = Some(LateBatch {
                id: batch.id(),
                term: batch.header.term,
                digest: a.header.digest,
                acks: Vec::new(),
                pending: Some(Arc::clone(batch)),
            });
        }
        self.trace_line(|| format!("late equivocation of {:?}: A without the victim", batch.id()));
        Some(a)
    }

    /// An ack of version A reached the late equivocator: with f of them (f+1 BAFs with
    /// its own) version B goes to the other parties, pushed and served to their pulls,
    /// and the primary forgets the victim.
    fn late_ack(&mut self, b: usize, baf: &Baf) {
        if !self.is_byz_primary(b, Byzantine::LateEquivocator) {
            return;
        }
        let f = ((self.sc.n - 1) / 3) as usize;
        let Some(late) = self.late.as_mut() else {
            return;
        };
        let Some(lb) = late.batch.as_mut() else {
            return;
        };
        if baf.header.digest != lb.digest || lb.acks.contains(&baf.signer) {
            return;
        }
        lb.acks.push(baf.signer);
        if lb.acks.len() < f {
            return;
        }
        let Some(version_b) = lb.pending.take() else {
            return;
        };
        let (id, term) = (lb.id, lb.term);
        let victim = Arc::clone(&late.victim);
        let others: Vec<u32> = (1..=self.sc.n).filter(|q| !late.a_set.contains(q)).collect();
        self.batchers[b].alt.insert((id, term), Arc::clone(&version_b));
        if let Some(core) = self.batchers[b].core.as_mut() {
            core.remember_ordered(batcher::RequestDigest::of(&victim));
        }
        self.trace_line(|| format!("late equivocation of {id:?}: B released"));
        let from = self.batchers[b].party;
        for to in others {
            let target = self.b_index(to, id.shard);
            self.k.send(from, to, || Ev::ToBatcher {
                b: target,
                input: BInput::Batch {
                    from,
                    batch: SignedBatch::clone(&version_b),
                },
            });
        }
    }

    /// Whether party `to` pulls the other version of an equivocating primary's batch.
    fn gets_other_version(&self, to: u32) -> bool {
        match &self.late {
            Some(late) => !late.a_set.contains(&to),
            None => to % 2 == 1,
        }
    }

    /// A batcher's config: the genesis network's, or that of the newest config it was fed
    /// (`keys`: its shard's batcher keys then; a joined party's batchers start from it).
    fn batcher_config(
        &self,
        party: u32,
        shard: u32,
        keys: Option<&BTreeMap<PartyId, crypto::PublicKey>>,
    ) -> batcher::Config {
        use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
        let nz = |v: usize| NonZeroUsize::new(v).unwrap_or(NonZeroUsize::MIN);
        let keys = keys
            .cloned()
            .unwrap_or_else(|| self.bkeys.iter().map(|(p, k)| (*p, k.public_key())).collect());
        batcher::Config {
            party,
            shard,
            parties: arma::Parties::new(keys.keys().copied().collect())
                .unwrap_or_else(|_| arma::Parties::contiguous(1)),
            shards: self.sc.shards,
            keys,
            max_request_bytes: nz(MAX_REQUEST_BYTES),
            max_batch_requests: NonZeroU32::new(BATCHING.max_batch_requests).unwrap_or(NonZeroU32::MIN),
            max_batch_bytes: NonZeroU64::new(BATCHING.max_batch_bytes).unwrap_or(NonZeroU64::MIN),
            batch_timeout_ms: BATCHING.batch_timeout_ms,
            window: NonZeroU32::new(2).unwrap_or(NonZeroU32::MIN),
            max_unordered_batches: NonZeroU32::new(4).unwrap_or(NonZeroU32::MIN),
            mempool_max_requests: nz(1000),
            mempool_max_bytes: NonZeroU64::new(1 << 20).unwrap_or(NonZeroU64::MIN),
            ordered_memory: nz(10_000),
            forward_timeout_ms: BATCHING.forward_timeout_ms,
            complain_timeout_ms: BATCHING.complain_timeout_ms,
        }
    }

    fn bft_config(&self, id: u32) -> Config {
        let mut c = engine_config(id, self.sc.n, self.sc.seed);
        c.max_batch_count = 16;
        c.request_timeout_ms = 600;
        if let Some(r) = &self.reconf {
            c.chain = r.chain;
        }
        c
    }

    fn b_index(&self, party: u32, shard: u32) -> usize {
        ((party - 1) * self.sc.shards + shard) as usize
    }

    fn byz(&self, party: u32) -> Option<Byzantine> {
        self.sc.byzantine.filter(|(p, _)| *p == party).map(|(_, k)| k)
    }

    fn is_correct_consenter(&self, c: u32) -> bool {
        !matches!(
            self.byz(c + 1),
            Some(Byzantine::CorruptConsenter(_) | Byzantine::LyingConsenter)
        )
    }

    fn start_batcher(&mut self, b: usize) {
        let node = &self.batchers[b];
        if !node.joined || matches!(node.gone, Some(Gone::Drains | Gone::Down)) {
            return;
        }
        let (party, shard, info) = (node.party, node.shard, node.info);
        let key = match &node.keys {
            Some((_, key)) if party > self.sc.n => key.clone(),
            _ => self
                .bkeys
                .get(&party)
                .cloned()
                .unwrap_or_else(|| batcher_key(party, 0)),
        };
        let keys = (party > self.sc.n)
            .then(|| node.keys.as_ref().map(|(k, _)| k))
            .flatten();
        let mut core = Batcher::new(self.batcher_config(party, shard, keys), key, info).ok();
        let node = &mut self.batchers[b];
        // The keys of the newest config it was fed, back in force before its batches are
        // restored (they were signed under them).
        if let (Some(core), Some((keys, key))) = (core.as_mut(), node.keys.clone()) {
            let _ = core.set_keys(keys, key);
        }
        if let Some(core) = core.as_mut() {
            core.set_config_sequence(node.config_seq);
        }
        node.core = core;
        node.want = None;
        if !self.sc.skip_restore {
            self.restore_batches(b);
        }
    }

    /// After a restart the shell re-adopts, in seq order, the batches of its store that
    /// belong to the current term and primary and are not ordered (`Batcher::restore`),
    /// so a restarted primary never signs a second batch under a seq it used.
    fn restore_batches(&mut self, b: usize) {
        let node = &self.batchers[b];
        let Some(core) = node.core.as_ref() else {
            return;
        };
        let (term, primary, last) = (core.term(), core.primary(), node.info.last_ordered_seq);
        let batches: Vec<Arc<SignedBatch>> = node
            .own
            .range((term, primary, last.saturating_add(1))..=(term, primary, u64::MAX))
            .map(|(_, batch)| Arc::clone(batch))
            .collect();
        for batch in batches {
            let Some(core) = self.batchers[b].core.as_mut() else {
                return;
            };
            for out in core.restore(batch) {
                self.b_output(b, out);
            }
        }
    }

    fn start_consenter(&mut self, c: u32) {
        if self.consenters[c as usize].dead {
            return;
        }
        let mut cfg = self.cfg.clone();
        if self.byz(c + 1) == Some(Byzantine::LyingConsenter) {
            cfg = cfg.with_knobs(Knobs {
                lie_in_metadata: true,
                ..self.sc.knobs
            });
        }
        let node = &self.consenters[c as usize];
        let snapshot = node.snapshot.clone();
        let entries = node.wal.entries.clone();
        let (app, signer, verifier): reconf::Engine = if self.reconf.is_some() {
            let Some(parts) = self.reconf_app(c, cfg, snapshot) else {
                self.trace_line(|| format!("consenter {c}: its state's config does not read"));
                return;
            };
            parts
        } else {
            (
                ArmaApp::new(cfg, snapshot),
                Box::new(self.keys.signer(c)),
                Arc::new(self.keys.clone()),
            )
        };
        let restored = Replica::restore(self.bft_config(c), app, signer, verifier, &entries);
        if let Err(e) = &restored {
            self.trace_line(|| format!("consenter {c} does not restart: {e}"));
        }
        if let Ok((replica, outputs)) = restored {
            self.trace_line(|| {
                format!(
                    "consenter {c} restarts at decision {} ({} outputs)",
                    replica.app().state().applied,
                    outputs.len()
                )
            });
            self.consenters[c as usize].replica = Some(replica);
            let _ = self.c_execute(c, outputs);
        }
    }

    /// Runs until every request is ordered after GST (then checks the end state).
    pub fn run(mut self) -> Result<ArmaReport, String> {
        let deadline = self.sc.gst_ms + self.sc.liveness_ms;
        let outcome = kernel::run(&mut self, deadline);
        self.report.steps = self.k.steps();
        match outcome {
            Ok(()) => self.finish(),
            Err(Stop::Deadline { .. }) => {
                let (missing, _) = self.checker.unordered_and_duplicates();
                let victim = match &self.late {
                    Some(l) if missing.contains(&l.victim) => {
                        ", the late equivocation's victim among them (acknowledged by 2f+1 routers)"
                    }
                    _ => "",
                };
                let mut reconf = self
                    .reconf
                    .as_ref()
                    .map_or_else(String::new, |r| format!("; {}", r.open()));
                if !self.joiner_is_member() {
                    reconf.push_str("; the joining party's consenter is not a member");
                }
                Err(format!(
                    "liveness: {} of {} requests not ordered {} ms after GST{victim} ({} decisions, terms {:?}{reconf})",
                    missing.len(),
                    self.requests.len(),
                    self.sc.liveness_ms,
                    self.checker.decided(),
                    self.checker.terms()
                ))
            }
            Err(stop) => Err(stop.to_string()),
        }
    }

    /// Whether the joining party's consenter (if the scenario has one) is a member of
    /// the set in force. The run goes on until it is: a join whose consenter never
    /// catches up leaves the network without its fault tolerance, which is a liveness
    /// failure, not a pass (the workload may well be ordered before it catches up).
    fn joiner_is_member(&self) -> bool {
        if self.sc.total_parties() <= self.sc.n || self.left.contains(&(self.sc.n + 1)) {
            return true; // no joiner, or it joined and left since
        }
        self.consenters[self.sc.n as usize]
            .replica
            .as_ref()
            .is_some_and(Replica::is_member)
    }

    fn finish(mut self) -> Result<ArmaReport, String> {
        for c in 0..self.sc.n {
            if !self.is_correct_consenter(c) {
                continue;
            }
            if let Some(r) = &self.consenters[c as usize].replica
                && r.app().diverged > 0
            {
                return Err(format!(
                    "consenter {c}: certified metadata differs from its outcome"
                ));
            }
        }
        let (_, dups) = self.checker.unordered_and_duplicates();
        if self.reconf.is_some() && dups > 0 && self.report.batcher_crashes == 0 {
            // Exactly once: only a restarted batcher (which forgets what was ordered
            // recently) orders a request again here.
            return Err(format!(
                "exactly once: {dups} duplicate orderings ({} of them in a later epoch than the first), and no \
                 correct batcher crashed",
                self.checker.duplicates_across_switch
            ));
        }
        if self.sc.total_parties() > self.sc.n {
            // The joined party takes part: its batchers run and its consenter is a member.
            let joiner = self.sc.n;
            let member = self.joiner_is_member();
            if self.report.joined_batchers != u64::from(self.sc.shards) || !member {
                return Err(format!(
                    "join: party {} joined with {} of {} batchers, its consenter a member: {member}",
                    joiner + 1,
                    self.report.joined_batchers,
                    self.sc.shards
                ));
            }
        }
        self.report.end_ms = self.k.now();
        self.report.duplicates = dups;
        self.report.blocks = self.checker.blocks;
        self.report.flood_ordered = self.checker.injected.values().map(|n| u64::from(*n)).sum();
        self.report.term_changes = self.checker.term_changes;
        self.report.installed = self.consenters.iter().map(|c| c.installed).sum();
        if let Some(s) = &self.checker.switches {
            self.report.switches = s.switched.len() as u64;
            self.report.wrong_set_checked = s.wrong_set_checked;
            self.report.removed_signer_refused = s.removed_signer_refused;
        }
        self.report.headers_after_leave = self.checker.headers_after_leave;
        let leaves = self.reconf.as_ref().is_some_and(|r| r.plan.leave.is_some());
        if leaves && self.report.parties_left == 0 {
            return Err("leave: the leaving update never put a config without its party in force".into());
        }
        self.report.duplicates_across_switch = self.checker.duplicates_across_switch;
        self.report.joined_bafs = self.checker.joined_bafs;
        self.report.equivocations = self
            .consenters
            .iter()
            .filter_map(|c| c.replica.as_ref())
            .map(|r| r.app().state().equivocations)
            .max()
            .unwrap_or(0);
        Ok(self.report)
    }

    /// A client sends the request to the router of every party; each router hands it to
    /// its party's batcher of the request's shard.
    fn client(&mut self, request: &Arc<[u8]>) {
        self.checker.submitted(Arc::clone(request));
        let shard = shard_of(request, self.sc.shards).unwrap_or(0);
        for party in 1..=self.sc.total_parties() {
            if self.left.contains(&party) {
                continue; // its routers are out of the config the clients read
            }
            let b = self.b_index(party, shard);
            if self.k.lossy() {
                continue;
            }
            let at = self.k.arrival(self.k.now());
            self.k.schedule(
                at,
                Ev::ToBatcher {
                    b,
                    input: BInput::Request(Arc::clone(request)),
                },
            );
        }
    }

    fn gst(&mut self) -> Result<(), String> {
        self.k.stabilise();
        for b in 0..self.batchers.len() {
            if self.batchers[b].core.is_none() {
                self.start_batcher(b);
            }
        }
        for c in 0..self.sc.total_parties() {
            if self.consenters[c as usize].replica.is_none() {
                self.start_consenter(c);
            }
        }
        // Clients re-submit what is not ordered yet (a client retries until 2f+1 routers ack).
        let (missing, _) = self.checker.unordered_and_duplicates();
        for request in missing {
            if self.sc.acked_clients() && self.acknowledged(&request) {
                continue; // its client waits for it to be ordered (`Ev::StatusTimeout`)
            }
            self.k.schedule_in(1, Ev::Client(request));
        }
        Ok(())
    }

    fn maybe_fault(&mut self) {
        if let Some(c) = self.k.maybe_crash(self.sc.crash_consenter, self.sc.n)
            && self.is_correct_consenter(c)
            && self.consenters[c as usize].replica.is_some()
        {
            self.crash_consenter(c);
        }
        let batchers = self.batchers.len();
        if let Some(b) = self.k.maybe_crash(self.sc.crash_batcher, batchers)
            && self.batchers[b].core.is_some()
            && self.byz(self.batchers[b].party).is_none()
        {
            self.crash_batcher(b);
        }
        self.k.maybe_partition();
    }

    /// A correct batcher crashes: what it wrote but had not made durable is lost.
    fn crash_batcher(&mut self, b: usize) {
        if self.batchers[b].core.is_none() {
            return;
        }
        self.trace_line(|| format!("batcher {b} CRASH"));
        self.report.crashes += 1;
        self.report.batcher_crashes += 1;
        let node = &mut self.batchers[b];
        node.core = None;
        node.incarnation = node.incarnation.wrapping_add(1);
        for key in std::mem::take(&mut node.unsynced) {
            if let Some(batch) = node.held.remove(&key) {
                let h = &batch.header;
                node.own.remove(&(h.term, h.id.primary, h.id.seq));
                self.report.lost_writes += 1;
            }
        }
        self.k.restart_later(Ev::RestartB(b));
    }

    /// A correct consenter crashes (its WAL and last recorded state survive).
    fn crash_consenter(&mut self, c: u32) {
        self.trace_line(|| format!("consenter {c} CRASH"));
        self.report.crashes += 1;
        self.consenters[c as usize].replica = None;
        self.k.restart_later(Ev::RestartC(c));
    }

    /// Whether a crash point fires now (before GST, by the scenario's probability).
    fn crash_point(&mut self) -> bool {
        self.sc.crash_points > 0.0 && !self.k.after_gst() && self.k.rng().gen_bool(self.sc.crash_points)
    }

    fn trace_line(&self, line: impl Fn() -> String) {
        if self.trace {
            eprintln!("t={} {}", self.k.now(), line());
        }
    }

    // ---- consenters ----

    fn c_input(&mut self, c: u32, input: Input) -> Result<(), String> {
        let Some(replica) = self.consenters[c as usize].replica.as_mut() else {
            return Ok(());
        };
        let outputs = replica.handle(input);
        self.c_execute(c, outputs)?;
        self.check_switch_state(c)
    }

    fn c_execute(&mut self, c: u32, outputs: Vec<Output>) -> Result<(), String> {
        let mut delivered = Vec::new();
        let mut rest = outputs.into_iter();
        while let Some(out) = rest.next() {
            match out {
                Output::Persist(e @ WalEntry::Switched { .. }) if self.crash_at_switch(c) => {
                    self.crash_switching(c, e, rest);
                    return Ok(());
                }
                Output::Persist(e) => {
                    let _ = self.consenters[c as usize].wal.append(&[e]);
                }
                Output::Send { to, msg } => self.c_transmit(c, to, msg),
                Output::Broadcast(msg) => {
                    for to in 0..self.sc.total_parties() {
                        if to != c {
                            self.c_transmit(c, to, msg.clone());
                        }
                    }
                }
                Output::Deliver(d) => {
                    if delivered.is_empty() && !self.sc.checkpoint_before_record && self.crash_at_record(c) {
                        self.crash_before_record(c, rest);
                        return Ok(());
                    }
                    delivered.push(d);
                }
                Output::Installed { seq, snapshot } => self.c_installed(c, seq, &snapshot)?,
                Output::ViewInstalled { view, leader } => {
                    self.trace_line(|| format!("consenter {c} installed view {view:?} (leader {leader:?})"));
                }
                Output::Refused { .. } => {}
            }
        }
        if self.sc.checkpoint_before_record && !delivered.is_empty() && self.crash_at_record(c) {
            // Negative test: the step's WAL entries, a checkpoint among them, are on
            // disk, and the shell's record of its decisions is lost.
            self.trace_line(|| format!("consenter {c}: crash point after a decision and its checkpoint"));
            self.report.crash_points += 1;
            self.crash_consenter(c);
            return Ok(());
        }
        let Some(replica) = self.consenters[c as usize].replica.as_mut() else {
            return Ok(());
        };
        let applied = replica.app_mut().take_applied();
        let snapshot = replica.app().state().clone();
        self.consenters[c as usize].snapshot = snapshot;
        let correct = self.is_correct_consenter(c);
        let reconfiguring = self.reconf.is_some();
        for (a, d) in applied.into_iter().zip(delivered) {
            let logged = Arc::new(Logged {
                outcome: a.outcome.clone(),
                wire: reconfiguring.then(|| consenter::decision_wire::to_pb_decision(&a, &d)),
            });
            let log = &mut self.consenters[c as usize].log;
            if a.decision as usize == log.len() + 1 {
                log.push(Some(Arc::clone(&logged)));
            }
            if correct {
                self.trace_line(|| {
                    let headers: Vec<_> =
                        a.outcome.headers.iter().map(|h| (h.shard, h.term, h.primary, h.seq)).collect();
                    format!("consenter {c} decided {}: headers (shard, term, primary, seq) {headers:?}, terms {:?}", a.decision, a.outcome.terms)
                });
                self.check_decision(c, &d, &logged)?;
            }
        }
        Ok(())
    }

    /// Whether correct consenter `c` crashes at a decision before the shell records it.
    fn crash_at_record(&mut self, c: u32) -> bool {
        self.is_correct_consenter(c) && self.crash_point()
    }

    /// Crash point: the engine logged a decision, the shell had not recorded it yet. The
    /// WAL entries that follow in this step are written all the same, up to a checkpoint:
    /// that one waits for the record (the shell's `Delivery::Durable`).
    fn crash_before_record(&mut self, c: u32, rest: impl Iterator<Item = Output>) {
        for later in rest {
            match later {
                Output::Persist(WalEntry::Checkpoint { .. }) => break,
                Output::Persist(e) => {
                    let _ = self.consenters[c as usize].wal.append(&[e]);
                }
                _ => {}
            }
        }
        self.trace_line(|| format!("consenter {c}: crash point after a decision"));
        self.report.crash_points += 1;
        self.crash_consenter(c);
    }

    /// The shell persists a state-transfer snapshot and restarts its log after it.
    fn c_installed(&mut self, c: u32, seq: u64, snapshot: &[u8]) -> Result<(), String> {
        let node = &mut self.consenters[c as usize];
        let Ok(state) = ArmaState::decode(snapshot, self.sc.shards) else {
            return Err(format!("consenter {c} installed a snapshot that does not decode"));
        };
        // Switches it crossed by the snapshot (their decisions it never applied).
        self.report.switches_by_snapshot += state.epoch.saturating_sub(node.snapshot.epoch);
        node.snapshot = state;
        let upto = usize::try_from(seq).unwrap_or(usize::MAX);
        if node.log.len() < upto {
            node.log.resize(upto, None);
        }
        node.installed += 1;
        Ok(())
    }

    fn check_decision(&mut self, c: u32, d: &Decision, logged: &Logged) -> Result<(), String> {
        let store = &self.persisted;
        let lookup = |h: &OrderedHeader| store.get(&(h.batch_id(), h.term, h.digest)).cloned();
        let now = self.k.now();
        let new = d.seq() > self.checker.decided() as u64;
        self.checker
            .on_deliver(c + 1, d, &logged.outcome, logged.wire.as_ref(), &lookup, now)?;
        if new && logged.outcome.config.is_some() {
            self.on_switch_decided();
        }
        Ok(())
    }

    fn c_transmit(&mut self, from: u32, to: u32, msg: Message) {
        if self.partitioned(from, to) {
            return;
        }
        let msgs = match self.byz(from + 1) {
            Some(Byzantine::CorruptConsenter(mode)) if self.reconf.is_some() => {
                // Lies signed with its key in the set it is in now, for that set's id.
                match self.byz_identity(from) {
                    Some((signer, chain, epoch)) => {
                        if epoch > 0 {
                            self.report.byz_sent_after_switch += 1;
                        }
                        testkit::sim::corrupt(mode, from, &signer, chain, to, msg, self.k.rng())
                    }
                    None => vec![msg],
                }
            }
            Some(Byzantine::CorruptConsenter(mode)) => {
                let signer = self.keys.signer(from);
                let chain = self.bft_config(from).chain;
                testkit::sim::corrupt(mode, from, &signer, chain, to, msg, self.k.rng())
            }
            _ => vec![msg],
        };
        for msg in msgs {
            self.k.send(from + 1, to + 1, || Ev::Bft {
                from,
                to,
                msg: msg.clone(),
            });
        }
    }

    // ---- batchers ----

    fn b_tick(&mut self, b: usize) -> Result<(), String> {
        if !self.batchers[b].joined {
            return self.feed_joining(b);
        }
        if self.batchers[b].core.is_none() {
            return Ok(());
        }
        self.feed_decisions(b)?;
        self.check_batcher_keys(b)?;
        let now = self.k.now();
        self.b_input(b, BInput::Tick(now))?;
        self.noisy_secondary(b);
        if now.saturating_sub(self.batchers[b].last_pull) >= PULL_MS {
            self.batchers[b].last_pull = now;
            self.try_pull(b);
        }
        if now.saturating_sub(self.batchers[b].last_resend) >= RESEND_MS {
            self.batchers[b].last_resend = now;
            self.resend(b);
            self.zombie(b);
        }
        Ok(())
    }

    /// Feeds the batcher the decisions of its party's consenter it has not seen: the
    /// ordered batches of its shard (with their requests, from any batcher that
    /// persisted them), then the shard's term changes.
    fn feed_decisions(&mut self, b: usize) -> Result<(), String> {
        let (party, shard) = (self.batchers[b].party, self.batchers[b].shard);
        let c = (party - 1) as usize;
        let byzantine = self.byz(party).is_some();
        loop {
            let fed = self.batchers[b].fed;
            let outcome = if byzantine {
                // A Byzantine party's batchers read their own consenter only.
                if self.consenters[c].replica.is_none() {
                    return Ok(());
                }
                self.consenters[c].log.get(fed).cloned().flatten()
            } else {
                let mut follow = self.batchers[b].follow;
                let outcome = self.follow(&mut follow, fed);
                self.batchers[b].follow = follow;
                outcome
            };
            let Some(logged) = outcome else {
                return Ok(()); // nobody serves it yet: retry next tick
            };
            let outcome = &logged.outcome;
            for h in outcome.headers.iter().filter(|h| h.shard == shard) {
                let Some(batch) = self.fetch_for_batcher(b, h) else {
                    return Ok(()); // not fetchable yet: retry next tick
                };
                self.batchers[b].info.last_ordered_seq = h.seq;
                self.b_input(
                    b,
                    BInput::Ordered {
                        id: h.batch_id(),
                        requests: batch.requests.clone(),
                    },
                )?;
            }
            if let Some(change) = &outcome.config {
                self.batcher_switch_keys(b, &change.config);
                self.batcher_left(b, &change.config);
                if self.batchers[b].core.is_none() {
                    return Ok(()); // its party left: it stopped
                }
            }
            for t in outcome.terms.iter().filter(|t| t.shard == shard) {
                let info = TermInfo {
                    term: t.term,
                    last_ordered_seq: t.last_ordered_seq,
                };
                self.batchers[b].info = info;
                self.b_input(b, BInput::TermChanged(info))?;
            }
            self.batchers[b].fed += 1;
            if outcome.config.is_some() && self.maybe_crash_batcher_at_switch(b) {
                return Ok(());
            }
        }
    }

    /// A noisy secondary floods the primary with forwards every tick and, once in every
    /// term, at once: complains against the primary and submits a BAF it fabricated over
    /// a header the primary never signed (for the primary's next seq, as if the primary
    /// had equivocated).
    fn noisy_secondary(&mut self, b: usize) {
        let node = &self.batchers[b];
        if self.byz(node.party) != Some(Byzantine::NoisySecondary) {
            return;
        }
        let Some(core) = node.core.as_ref() else {
            return;
        };
        let (term, primary) = (core.term(), core.primary());
        if core.is_primary() {
            return;
        }
        self.flood(b, primary);
        let node = &self.batchers[b];
        if node.noisy_term == Some(term) {
            return;
        }
        let Some(key) = self.signing_key(b) else {
            return;
        };
        let node = &self.batchers[b];
        let (party, shard) = (node.party, node.shard);
        let id = BatchId {
            shard,
            primary,
            seq: node.info.last_ordered_seq.saturating_add(1),
        };
        let junk: Arc<[u8]> = Arc::from(format!("fabricated-{party}-{term}").into_bytes());
        let fake = SignedBatch::sign(id, term, vec![junk], &key);
        let config = node.config_seq;
        let fabricated = Baf::sign_at(config, &fake, party, &key);
        self.report.fabricated_bafs += 1;
        self.submit(b, term, 0, encode_baf(&fabricated));
        let c = batcher::Complaint::sign_at(
            config,
            shard,
            term,
            party,
            batcher::ComplaintReason::Censorship,
            &key,
        );
        self.batchers[b].noisy_term = Some(term);
        self.submit(b, term, 0, encode_complaint(&c));
    }

    /// Forwards `FLOOD` new requests of the shard to the primary, up to `FLOOD_BUDGET` in
    /// all (a Byzantine party may
    /// make as many valid requests as it likes; each counts as a client's that need not
    /// be ordered).
    fn flood(&mut self, b: usize, primary: u32) {
        let (party, shard) = (self.batchers[b].party, self.batchers[b].shard);
        let target = self.b_index(primary, shard);
        let burst = FLOOD.min(FLOOD_BUDGET.saturating_sub(self.batchers[b].flooded));
        self.batchers[b].flooded += burst;
        for _ in 0..burst {
            let request = loop {
                self.flooded += 1;
                let r: Arc<[u8]> = Arc::from(format!("flood-{party}-{}", self.flooded).into_bytes());
                if shard_of(&r, self.sc.shards).unwrap_or(0) == shard {
                    break r;
                }
            };
            self.checker.injected(Arc::clone(&request));
            self.report.flooded += 1;
            self.k.send(party, primary, || Ev::ToBatcher {
                b: target,
                input: BInput::Forwarded {
                    from: party,
                    request: Arc::clone(&request),
                },
            });
        }
    }

    /// The batch of an ordered header, for batcher `b`: from its own store, else from a
    /// batcher of the shard that is up and holds it, checked by hashing its requests to
    /// the ordered digest as the real batcher's fetch does (its timing is not modelled;
    /// a party whose batchers lie to fetches is passed over).
    fn fetch_for_batcher(&self, b: usize, h: &OrderedHeader) -> Option<Arc<SignedBatch>> {
        let key = (h.batch_id(), h.digest);
        let shard = self.batchers[b].shard;
        std::iter::once(b)
            .chain((1..=self.sc.total_parties()).map(|p| self.b_index(p, shard)))
            .filter(|&o| o == b || (self.serves_fetches(o) && !self.lies_to_fetches(self.batchers[o].party)))
            .filter_map(|o| self.batchers[o].held.get(&key))
            .find(|batch| types::digest::batch_digest(&batch.requests) == h.digest)
            .cloned()
    }

    /// Whether batcher `o` answers fetches: it is up, or its party left and it drains.
    fn serves_fetches(&self, o: usize) -> bool {
        self.batchers[o].core.is_some() || self.batchers[o].gone == Some(Gone::Drains)
    }

    fn b_input(&mut self, b: usize, input: BInput) -> Result<(), String> {
        let party = self.batchers[b].party;
        let shard = self.batchers[b].shard;
        if self.byz(party) == Some(Byzantine::CensoringPrimary)
            && shard == 0
            && matches!(input, BInput::Request(_) | BInput::Forwarded { .. })
        {
            return Ok(());
        }
        if let BInput::Baf(baf) = &input {
            self.late_ack(b, baf);
        }
        let Some(core) = self.batchers[b].core.as_mut() else {
            return Ok(());
        };
        let outputs = core.handle(input);
        for out in outputs {
            self.b_output(b, out);
        }
        Ok(())
    }

    fn b_output(&mut self, b: usize, out: BOutput) {
        let (party, shard) = (self.batchers[b].party, self.batchers[b].shard);
        self.trace_line(|| format!("batcher {b} (party {party}, shard {shard}): {}", short(&out)));
        match out {
            BOutput::Persist(batch) => self.persist(b, &batch),
            BOutput::Serve(batch) => self.serve(b, batch),
            BOutput::SendBaf(_) | BOutput::AckPrimary { .. }
                if self.byz(party) == Some(Byzantine::NoisySecondary) => {} // withheld
            BOutput::SendBaf(baf) => {
                let baf = self.byzantine_baf(b, baf);
                let bytes = encode_baf(&baf);
                self.submit(b, baf.header.term, baf.header.id.seq, bytes);
            }
            BOutput::SendEvidence(baf) => {
                if self.byz(party).is_some() {
                    return; // a Byzantine batcher does not give evidence against its party
                }
                self.report.lost_versions += 1;
                if self.sc.drop_lost_requests {
                    self.drop_lost(b, &baf);
                }
                // Resent until the term changes (seq 0: not dropped once the id is ordered).
                let bytes = encode_baf(&baf);
                self.submit(b, baf.header.term, 0, bytes);
            }
            BOutput::AckPrimary { to, baf } => {
                let target = self.b_index(to, shard);
                self.k.send(party, to, || Ev::ToBatcher {
                    b: target,
                    input: BInput::Baf(baf.clone()),
                });
            }
            BOutput::ForwardToPrimary { to, request } => {
                let target = self.b_index(to, shard);
                self.k.send(party, to, || Ev::ToBatcher {
                    b: target,
                    input: BInput::Forwarded {
                        from: party,
                        request: Arc::clone(&request),
                    },
                });
            }
            BOutput::Complain(c) => {
                if !self.sc.drop_complaints {
                    self.submit(b, c.term, 0, encode_complaint(&c));
                }
            }
            BOutput::Pull(id) => {
                self.batchers[b].want = Some(id);
                self.try_pull(b);
            }
            BOutput::Admitted { digest } => self.on_admitted(b, digest),
            BOutput::NeedFullBatch { from, id, digest } => self.send_full(b, from, id, digest),
            BOutput::Refused { .. } | BOutput::BatchRejected { .. } => {}
        }
    }

    /// Negative test: the requests of the lost version go where they went before the
    /// give-back existed, nowhere. The core returned them to its pending queue; the
    /// shell takes them out again (the core's one way to drop a pending request is to
    /// remember it as ordered).
    fn drop_lost(&mut self, b: usize, evidence: &Baf) {
        let key = (evidence.header.id, evidence.header.digest);
        let Some(lost) = self.batchers[b].held.get(&key).cloned() else {
            return;
        };
        if let Some(core) = self.batchers[b].core.as_mut() {
            for r in &lost.requests {
                core.remember_ordered(batcher::RequestDigest::of(r));
            }
        }
    }

    /// The shell's write of a batch: visible to fetches at once, durable at its fsync
    /// (`Ev::Synced`), and only then `Persisted` for the core (which then signs its BAF).
    fn persist(&mut self, b: usize, batch: &Arc<SignedBatch>) {
        let h = &batch.header;
        let (id, digest) = (batch.id(), h.digest);
        // A batch already durable in the store (re-adopted after a restart) stays so.
        let durable = !self.batchers[b].unsynced.contains(&(id, digest))
            && self.batchers[b]
                .own
                .get(&(h.term, h.id.primary, h.id.seq))
                .is_some_and(|s| s.header.digest == digest);
        self.batchers[b]
            .own
            .insert((h.term, h.id.primary, h.id.seq), Arc::clone(batch));
        let stored = self.byzantine_version(b, batch);
        self.batchers[b]
            .held
            .insert((stored.id(), stored.header.digest), Arc::clone(&stored));
        self.persisted.insert(
            (stored.id(), stored.header.term, stored.header.digest),
            Arc::clone(&stored),
        );
        if !durable {
            self.batchers[b].unsynced.insert((id, digest));
        }
        let fsync = self.k.rng().gen_range(1..4);
        if self.byz(self.batchers[b].party).is_none() && self.crash_point() {
            // Crash point: the batch is written, not yet durable, no BAF signed.
            self.report.crash_points += 1;
            let at = self.k.rng().gen_range(0..fsync);
            self.k.schedule_in(at, Ev::CrashB(b));
        }
        if self.sc.ack_before_fsync {
            // Negative test: the core hears "persisted" (and signs its BAF) at once.
            self.k.schedule_in(
                0,
                Ev::ToBatcher {
                    b,
                    input: BInput::Persisted { id, digest },
                },
            );
        }
        // One persister writes in order: a write is durable no sooner than the one
        // before it.
        let at = self
            .k
            .now()
            .saturating_add(fsync)
            .max(self.batchers[b].synced_until);
        self.batchers[b].synced_until = at;
        let incarnation = self.batchers[b].incarnation;
        self.k.schedule(
            at,
            Ev::Synced {
                b,
                id,
                digest,
                incarnation,
            },
        );
    }

    fn serve(&mut self, b: usize, batch: Arc<SignedBatch>) {
        let key = (batch.id(), batch.header.term);
        let served = self
            .late_serve(b, &batch)
            .unwrap_or_else(|| self.byzantine_version(b, &batch));
        if self.is_byz_primary(b, Byzantine::EquivocatingPrimary) && batch.requests.len() >= 2 {
            let mut requests = batch.requests.clone();
            requests.reverse();
            if let Some(k) = self.signing_key(b) {
                let alt = Arc::new(SignedBatch::sign(batch.id(), batch.header.term, requests, &k));
                self.persisted
                    .insert((alt.id(), alt.header.term, alt.header.digest), Arc::clone(&alt));
                self.batchers[b]
                    .held
                    .insert((alt.id(), alt.header.digest), Arc::clone(&alt));
                self.batchers[b].alt.insert(key, alt);
            }
        }
        self.batchers[b].served.insert(key, served);
    }

    fn is_byz_primary(&self, b: usize, kind: Byzantine) -> bool {
        let node = &self.batchers[b];
        node.shard == 0 && self.byz(node.party) == Some(kind)
    }

    /// What a bogus primary persists and serves instead of its batch: the batch plus a
    /// request no client sent (too large for any batcher), signed.
    fn byzantine_version(&self, b: usize, batch: &Arc<SignedBatch>) -> Arc<SignedBatch> {
        let own = batch.id().primary == self.batchers[b].party;
        if !own || !self.is_byz_primary(b, Byzantine::BogusPrimary) {
            return Arc::clone(batch);
        }
        let Some(key) = self.signing_key(b) else {
            return Arc::clone(batch);
        };
        let mut requests = batch.requests.clone();
        requests.push(Arc::from(vec![0xb0; MAX_REQUEST_BYTES + 1].as_slice()));
        Arc::new(SignedBatch::sign(batch.id(), batch.header.term, requests, &key))
    }

    /// A bogus primary attests its bogus version.
    fn byzantine_baf(&self, b: usize, baf: Baf) -> Baf {
        let key = (baf.header.id, baf.header.term);
        match self.batchers[b].served.get(&key) {
            Some(served) if served.header.digest != baf.header.digest => {
                let party = self.batchers[b].party;
                let config = baf.config;
                self.signing_key(b)
                    .map_or(baf, |k| Baf::sign_at(config, served, party, &k))
            }
            _ => baf,
        }
    }

    /// Submits a BAF or complaint to every consenter and keeps it for resending.
    fn submit(&mut self, b: usize, term: u64, seq: u64, bytes: Vec<u8>) {
        let node = &mut self.batchers[b];
        node.outbox.push((term, seq, bytes.clone()));
        if node.outbox.len() > OUTBOX {
            node.outbox.remove(0);
        }
        let party = node.party;
        for to in 0..self.sc.total_parties() {
            self.k.send(party, to + 1, || Ev::ToConsenter {
                to,
                request: bytes.clone(),
            });
        }
    }

    fn resend(&mut self, b: usize) {
        let info = self.batchers[b].info;
        self.batchers[b].outbox.retain(|(term, seq, _)| {
            *term >= info.term && (*seq == 0 || *seq > info.last_ordered_seq || *term > info.term)
        });
        let party = self.batchers[b].party;
        let pending: Vec<Vec<u8>> = self.batchers[b]
            .outbox
            .iter()
            .map(|(_, _, r)| r.clone())
            .collect();
        for bytes in pending {
            for to in 0..self.sc.total_parties() {
                self.k.send(party, to + 1, || Ev::ToConsenter {
                    to,
                    request: bytes.clone(),
                });
            }
        }
    }

    /// Pulls the wanted batch from the primary's batcher, if it is up and serves it.
    fn try_pull(&mut self, b: usize) {
        let Some(id) = self.batchers[b].want else {
            return;
        };
        let Some(term) = self.batchers[b].core.as_ref().map(Batcher::term) else {
            return;
        };
        let party = self.batchers[b].party;
        let p = self.b_index(id.primary, id.shard);
        if self.batchers[p].core.is_none() {
            return;
        }
        let batch = if self.gets_other_version(party) && self.late_pending(id, term) {
            None // the late version is not out yet
        } else {
            let alt = self
                .gets_other_version(party)
                .then(|| self.batchers[p].alt.get(&(id, term)))
                .flatten();
            alt.or_else(|| self.batchers[p].served.get(&(id, term))).cloned()
        };
        let Some(batch) = batch else {
            return;
        };
        // Served compact, as the nodes do (docs/batcher.md "Compact pulls"): the secondary
        // rebuilds it from its pending requests or asks for the full batch
        // (`NeedFullBatch`, answered by `send_full`).
        let mut digests: Vec<batcher::RequestDigest> = batch
            .requests
            .iter()
            .map(|r| batcher::RequestDigest::of(r))
            .collect();
        if self.is_byz_primary(p, Byzantine::CompactLiar) && !digests.is_empty() {
            self.lie_in_compact(&mut digests);
        }
        let compact = batcher::CompactBatch::of(&batch, digests);
        self.k.send(id.primary, party, || Ev::ToBatcher {
            b,
            input: BInput::CompactBatch {
                from: id.primary,
                batch: compact.clone(),
            },
        });
    }

    /// A compact-liar primary's falsified digest list (never empty): two digests swapped,
    /// one replaced by a digest of a request nobody sent, one dropped, or one repeated.
    fn lie_in_compact(&mut self, digests: &mut Vec<batcher::RequestDigest>) {
        self.report.compact_lies += 1;
        let n = digests.len();
        let i = self.k.rng().gen_range(0..n);
        match self.k.rng().gen_range(0..4) {
            0 if n >= 2 => digests.swap(i, (i + 1) % n),
            0 | 1 => digests[i] = batcher::RequestDigest::of(format!("never-sent-{i}").as_bytes()),
            2 => {
                digests.remove(i);
            }
            _ => digests.push(digests[i]),
        }
    }

    /// The full batch `id` with `digest` from its primary `from`, to batcher `b` that
    /// could not rebuild its compact form: the version the primary served, or its other
    /// version.
    fn send_full(&mut self, b: usize, from: PartyId, id: BatchId, digest: Digest32) {
        let party = self.batchers[b].party;
        let p = self.b_index(from, id.shard);
        if self.is_byz_primary(p, Byzantine::CompactLiar) && self.k.rng().gen_range(0..3) == 0 {
            self.report.full_withheld += 1;
            return;
        }
        let found = self.batchers[p]
            .served
            .iter()
            .chain(self.batchers[p].alt.iter())
            .find(|((bid, _), batch)| *bid == id && batch.header.digest == digest)
            .map(|(_, batch)| Arc::clone(batch));
        let Some(batch) = found else {
            return;
        };
        self.k.send(from, party, || Ev::ToBatcher {
            b,
            input: BInput::Batch {
                from,
                batch: SignedBatch::clone(&batch),
            },
        });
    }
}

impl Sim for World {
    type Event = Ev;
    type Error = String;

    /// Done once every request is ordered after GST and every correct assembler holds
    /// every ordered block.
    fn done(&mut self) -> Result<bool, String> {
        let victim_sent = self.late.as_ref().is_none_or(|l| l.sent);
        let settled = self.reconf.as_ref().is_none_or(reconf::Reconf::settled);
        Ok(self.k.after_gst()
            && victim_sent
            && settled
            && self.joiner_is_member()
            && self.checker.all_ordered()
            && self.assembled())
    }

    fn step(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::BTick(b) => {
                self.k.next_tick(Ev::BTick(b));
                self.maybe_fault();
                self.b_tick(b)
            }
            Ev::CTick(c) => {
                self.k.next_tick(Ev::CTick(c));
                self.c_input(c, Input::Tick(self.k.now()))
            }
            Ev::Bft { from, to, msg } => self.c_input(to, Input::Message { from, msg }),
            Ev::Synced {
                b,
                id,
                digest,
                incarnation,
            } => {
                // The write became durable, unless a crash lost it first; then the core
                // that wrote it hears of it.
                self.batchers[b].unsynced.remove(&(id, digest));
                if self.batchers[b].incarnation == incarnation && !self.sc.ack_before_fsync {
                    self.b_input(b, BInput::Persisted { id, digest })
                } else {
                    Ok(())
                }
            }
            Ev::ToBatcher { b, input } => self.b_input(b, input),
            Ev::CorrelatedCrash => {
                self.correlated_crash();
                Ok(())
            }
            Ev::StatusTimeout => self.status_timeout(),
            Ev::Admin(step) => self.on_admin(step),
            Ev::CrashB(b) => {
                // Faults stop at GST: a crash point drawn just before it does not fire.
                if !self.k.after_gst() {
                    self.crash_batcher(b);
                }
                Ok(())
            }
            Ev::ToConsenter { to, request } => self.c_input(to, Input::Request(request)),
            Ev::Client(request) => {
                self.client(&request);
                Ok(())
            }
            Ev::RestartB(b) => {
                if self.batchers[b].core.is_none() {
                    self.start_batcher(b);
                }
                Ok(())
            }
            Ev::RestartC(c) => {
                if self.consenters[c as usize].replica.is_none() {
                    self.start_consenter(c);
                }
                Ok(())
            }
            Ev::Gst => self.gst(),
            Ev::Victim => {
                self.send_victim();
                Ok(())
            }
            Ev::ATick(a) => {
                self.k.next_tick(Ev::ATick(a));
                self.a_tick(a)
            }
            Ev::FetchAsk { a, b, round, want } => {
                self.answer_fetch(a, b, round, want);
                Ok(())
            }
            Ev::Fetched {
                a,
                round,
                block,
                answer,
            } => self.on_fetched(a, round, block, answer),
        }
    }

    fn kernel(&mut self) -> &mut Kernel<Ev> {
        &mut self.k
    }
}

/// One line of a batcher output for the trace.
fn short(out: &BOutput) -> String {
    match out {
        BOutput::Persist(b) => format!("Persist {:?} n={}", b.id(), b.requests.len()),
        BOutput::Serve(b) => format!("Serve {:?}", b.id()),
        BOutput::SendBaf(b) => format!("SendBaf {:?} t{}", b.header.id, b.header.term),
        BOutput::SendEvidence(b) => format!("Evidence {:?}", b.header.id),
        BOutput::AckPrimary { to, baf } => format!("Ack to {to} {:?}", baf.header.id),
        BOutput::ForwardToPrimary { to, .. } => format!("Forward to {to}"),
        BOutput::Complain(c) => format!("Complain t{}", c.term),
        BOutput::Pull(id) => format!("Pull {id:?}"),
        BOutput::Admitted { .. } => "admitted".into(),
        BOutput::Refused { reason, .. } => format!("refused ({reason:?})"),
        BOutput::BatchRejected { .. } => "batch rejected".into(),
        BOutput::NeedFullBatch { id, .. } => format!("needs the full batch {id}"),
    }
}
