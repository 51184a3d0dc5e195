//! An Arma consenter node (`fabrx node consenter`): the replica of [`crate::replica`] running
//! the Arma application ([`ArmaApp`]) instead of `bft::NullApp`, with the Arma
//! decisions log, the state snapshot and the `Consenter.Decisions` stream
//! (docs/consenter.md).
//!
//! The engine applies decisions inside its shell task; [`NodeApp`] wraps the
//! application, drains [`ArmaApp::take_applied`] after every apply and hands each
//! outcome, with a snapshot of the state after it, to the decisions writer thread
//! through a queue that the bounded decisions channel bounds (the shell waits when the
//! writer is behind). The writer pairs each outcome with the decision the engine
//! delivered (same number, else [`Error::Diverged`]), appends what is served — headers,
//! term changes, view, requests root, metadata and the commit certificate's signatures
//! — to the log, and from time to time syncs the log and then replaces the snapshot.
//! On restart the application starts from the snapshot, the engine re-applies the
//! WAL's decisions above it, and every re-derived decision the log already holds must
//! be the one it holds: the node never serves another header for a number it served.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bft::{
    Application, Decision, Digest, FileWal, Output, Proposal, ProposalContext, Replica, Seq, WalEntry,
};
use crypto::{PublicKey, Scheme};
use tracing::info;
use types::{PartyId, ShardId};
use wire::pb;

use crate::application::{
    Applied, ArmaApp, ArmaConfig, ArmaState, Item, PrimarySignatures, Reconfig, decode_verified_with,
};
use crate::arma_log::{ArmaLog, load_snapshot, write_snapshot};
use crate::decision_wire::to_pb_decision;
use crate::decisions_service::{DecisionsService, StreamLimits};
use crate::keys::{ClusterKeys, EngineSigner, EngineVerifier};
use crate::metrics::Metrics;
use crate::peers::Peers;
pub use crate::replica::Handle;
use crate::replica::{DecisionSink, Launch, ReplicaConfig, checked, launch};
use crate::{Error, Result};

/// Everything an Arma consenter needs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The replica (engine, peers, keys, chain, WAL); `node.decisions` is the Arma
    /// decisions log directory.
    pub node: ReplicaConfig,
    /// The network as the application sees it (parties, shards, batcher keys).
    pub arma: ArmaConfig,
    /// The state snapshot file.
    pub state: PathBuf,
    /// Bind here instead of this replica's `peers` entry (e.g. `0.0.0.0:port`; the
    /// entry may then be a host name the others dial).
    pub listen: Option<SocketAddr>,
    /// Bounds of the Decisions streams.
    pub streams: StreamLimits,
    /// How often the state snapshot is replaced while decisions flow (it is also
    /// replaced every 256 decisions); `Duration::ZERO` replaces it whenever the
    /// decisions writer runs idle.
    pub snapshot_interval: Duration,
    /// Decisions the Arma decisions log keeps (the newest; older ones are pruned by
    /// whole segments when the state snapshot is replaced).
    pub retain_decisions: std::num::NonZeroU64,
    /// The network's config rules, genesis config and this node's consenter keys: the
    /// consenters then order config updates (ADR 0018). `None`: updates are refused.
    pub reconfig: Option<Reconfig>,
    /// Files a next consenter key may be in (docs/reconfiguration.md "Rotating a
    /// consenter's signing key"): read when a set puts in force a key for this node's
    /// slot that it does not hold, so an operator may write the file while the node runs.
    pub next_key_files: Vec<PathBuf>,
}

/// The layout of an Arma consenter's data directory, in one place for every way a node
/// is configured: `wal/replica.wal` (the engine's WAL), `decisions/` (the decisions log)
/// and `state.json` (the application's snapshot).
#[derive(Debug, Clone, Copy)]
pub struct DataDir<'a>(pub &'a Path);

impl DataDir<'_> {
    /// The engine's WAL.
    pub fn wal(&self) -> PathBuf {
        self.0.join("wal").join("replica.wal")
    }

    /// The decisions log.
    pub fn decisions(&self) -> PathBuf {
        self.0.join("decisions")
    }

    /// The application's state snapshot.
    pub fn state(&self) -> PathBuf {
        self.0.join("state.json")
    }

    /// Creates the directories the node writes into.
    pub fn create(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(self.0.join("wal"))
    }
}

/// What an Arma consenter may be handed besides its config.
#[derive(Debug, Clone)]
pub struct Deps {
    /// Where the node makes its metrics (a detached registry unless the binary serves
    /// one).
    pub registry: telemetry::Registry,
}

impl Default for Deps {
    fn default() -> Deps {
        Deps {
            registry: telemetry::Registry::detached("consenter"),
        }
    }
}

/// Decisions an Arma decisions log keeps by default: days of decisions at a few per
/// second, about a kilobyte each.
pub const DEFAULT_RETAIN_DECISIONS: std::num::NonZeroU64 = std::num::NonZeroU64::new(1_000_000).unwrap();

/// What the engine's application hands to the decisions writer, in order.
enum Handoff {
    /// One applied decision and the encoded state after it.
    Applied { applied: Applied, snapshot: Vec<u8> },
    /// A state-transfer snapshot installed after decision `seq` (the decisions up to it
    /// will not be delivered here).
    Installed { seq: u64, snapshot: Vec<u8> },
}

/// Applied outcomes waiting for the writer thread. Bounded by the decisions channel:
/// every entry's decision is in that channel or about to be sent into it.
type HandoffQueue = Arc<Mutex<VecDeque<Handoff>>>;

/// Request digests whose signatures verified (FIFO, at most `cap`), shared by the Submit
/// handler and the engine's application: a BAF that a batcher submitted here is not
/// verified again when the engine admits it, when a peer forwards it or when a proposal
/// carries it (`ArmaApp` keeps its own cache for requests that reach it otherwise).
struct Verified {
    set: HashSet<Digest>,
    order: VecDeque<Digest>,
    cap: usize,
    /// The primary signatures that verified (shared with the application), so the BAFs
    /// of one batch cost one primary-signature check between them.
    primaries: Arc<PrimarySignatures>,
    /// The network as the config in force describes it (what the Submit handler checks
    /// against), and that config's epoch.
    arma: Arc<ArmaConfig>,
    epoch: u64,
    /// The config rules and the config in force (none when updates are not ordered):
    /// a config update is checked against them to answer with the reason.
    config: Option<RulesInForce>,
    /// The verdicts on the last config updates checked under the config in force
    /// ([`UPDATE_VERDICTS`] at most; cleared at a switch): a client that submits one
    /// update again and again costs one check, not one per submission.
    updates: VecDeque<(Digest, std::result::Result<(), String>)>,
}

/// How many config update verdicts the Submit handler keeps.
const UPDATE_VERDICTS: usize = 16;

/// The config rules and the canonical bytes of the config in force.
type RulesInForce = (Arc<dyn ::arma::ConfigRules>, Arc<Vec<u8>>);

impl Verified {
    fn contains(&self, d: &Digest) -> bool {
        self.set.contains(d)
    }

    fn insert(&mut self, d: Digest) {
        if self.cap == 0 || !self.set.insert(d) {
            return;
        }
        self.order.push_back(d);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

/// Shared cache of verified requests.
type VerifiedCache = Arc<Mutex<Verified>>;

/// How many request digests the verified cache keeps.
const VERIFIED_CACHE: usize = 1 << 16;

/// How a Submit caller hears that its request is refused: `INVALID_ARGUMENT` with the
/// reason, except for a BAF or complaint of a config this consenter has not applied yet
/// (it is behind, not the request): `UNAVAILABLE`, so that the batcher retries it here or
/// counts another consenter's answer instead.
fn refusal(e: &crate::application::ArmaError) -> tonic::Status {
    match e {
        crate::application::ArmaError::StaleConfig { got, current, .. } if got > current => {
            tonic::Status::unavailable(format!(
                "{e}: this consenter has not applied config {got} yet; retry, or ask another consenter"
            ))
        }
        _ => tonic::Status::invalid_argument(format!("invalid request: {e}")),
    }
}

/// Checks one request with the Arma application's rules for the config in force,
/// through the cache.
fn check_request(cache: &VerifiedCache, request: &[u8]) -> std::result::Result<(), tonic::Status> {
    check_cached(cache, request).map_err(|e| match e {
        Checked::Refused(status) => status,
        Checked::Update(reason) => tonic::Status::invalid_argument(format!("invalid request: {reason}")),
    })
}

/// Why [`check_cached`] refuses a request.
enum Checked {
    /// A BAF or complaint (or a malformed request): its status.
    Refused(tonic::Status),
    /// A config update the config in force refuses (its verdict is cached).
    Update(String),
}

fn check_cached(cache: &VerifiedCache, request: &[u8]) -> std::result::Result<(), Checked> {
    let digest = Digest::of_request(request);
    let (primaries, cfg, config, epoch) = {
        let c = cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.contains(&digest) {
            return Ok(());
        }
        if let Some((_, verdict)) = c.updates.iter().find(|(d, _)| *d == digest) {
            return verdict.clone().map_err(Checked::Update);
        }
        (
            Arc::clone(&c.primaries),
            Arc::clone(&c.arma),
            c.config.clone(),
            c.epoch,
        )
    };
    if let Item::ConfigUpdate(update) =
        decode_verified_with(&cfg, request, &primaries).map_err(|e| Checked::Refused(refusal(&e)))?
    {
        // Its verdict is kept apart, for the config in force only (the application checks
        // it again when it enters the pool): an update valid now is stale once another
        // is applied.
        let Some((rules, current)) = config else {
            return Err(Checked::Update(
                "this network does not order config updates".into(),
            ));
        };
        let verdict = rules
            .next(&current, &update)
            .map(|_| ())
            .map_err(|reason| format!("config update refused: {reason}"));
        let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.epoch == epoch {
            if c.updates.len() >= UPDATE_VERDICTS {
                c.updates.pop_front();
            }
            c.updates.push_back((digest, verdict.clone()));
        }
        return verdict.map_err(Checked::Update);
    }
    // Cached only under the config it was checked against: a switch while it was being
    // checked cleared the cache, and a verdict of the old config must not enter the new
    // one's (the engine would admit an old-key BAF into its pool again).
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.epoch == epoch {
        c.insert(digest);
    }
    Ok(())
}

/// The engine's application: [`ArmaApp`] plus the hand-off of applied outcomes.
pub struct NodeApp {
    app: ArmaApp,
    queue: HandoffQueue,
    verified: VerifiedCache,
    peers: Arc<Peers>,
    next_key_files: Vec<PathBuf>,
}

impl NodeApp {
    /// `found`, or — when it names this node's slot without a signer (the set names a
    /// key the node does not hold) — the set again after the next key files were read.
    fn with_next_keys(
        &mut self,
        found: Option<bft::Membership>,
        again: impl FnOnce(&mut ArmaApp) -> Option<bft::Membership>,
    ) -> Option<bft::Membership> {
        let m = found?;
        let slot = self.app.reconfig_party().and_then(|p| p.checked_sub(1));
        let missing = m.id.is_none() && slot.is_some_and(|s| m.members.contains(s));
        if !missing || self.next_key_files.is_empty() {
            return Some(m);
        }
        let mut read = 0;
        for path in &self.next_key_files {
            match crypto::read_key_file(path) {
                Ok(k) => {
                    self.app.hold_key(k);
                    read += 1;
                }
                Err(e) => tracing::debug!(path = %path.display(), error = %e, "no next consenter key here"),
            }
        }
        if read == 0 {
            tracing::error!(
                epoch = m.epoch,
                "the consenter set in force names a key for this node that it does not hold (write it to a next key file): it does not vote in this set"
            );
            return Some(m);
        }
        let again = again(&mut self.app);
        match &again {
            Some(a) if a.id.is_some() => {
                tracing::info!(
                    epoch = a.epoch,
                    "this consenter signs with its next key from now on"
                )
            }
            _ => tracing::error!(
                epoch = m.epoch,
                "no next key file holds the key the consenter set in force names for this node: it does not vote in this set"
            ),
        }
        again.or(Some(m))
    }
}

impl NodeApp {
    /// After a decision or a snapshot put another config in force: the Submit handler
    /// checks against it, and requests verified under the old one are checked again.
    fn follow_config(&mut self) {
        let epoch = self.app.state().epoch;
        let mut v = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if v.epoch != epoch {
            v.epoch = epoch;
            v.arma = Arc::new(self.app.config().clone());
            if let Some((_, current)) = v.config.as_mut() {
                *current = Arc::new(self.app.config_in_force().to_vec());
            }
            v.set.clear();
            v.order.clear();
            v.updates.clear();
            if let Some((rules, current)) = &v.config {
                follow_peers(&self.peers, rules.as_ref(), current, self.app.reconfig_party());
            }
        }
    }
}

/// Grows the transport's replica set to the consenters of `config` (a party joined); a
/// config that removed this node's party `party` stops the node.
fn follow_peers(peers: &Peers, rules: &dyn arma::ConfigRules, config: &[u8], party: Option<types::PartyId>) {
    match rules.view(config) {
        Ok(view) => {
            if let Some(p) = party.filter(|p| view.has_left(*p)) {
                peers.party_left(p);
                return;
            }
            // The transport's queues are still by position: it follows the replicas in
            // id order, which is right while no party has left (ADR 0018, step 7).
            let keys: Vec<_> = view.consenters.values().cloned().collect();
            let endpoints: Vec<_> = view.consenter_endpoints.values().cloned().collect();
            if let Err(e) = peers.follow(&keys, &endpoints) {
                tracing::error!(error = %e, "the consenter set in force grew but its new replicas cannot be linked");
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "the config in force does not parse: the consenter links do not follow it")
        }
    }
}

impl Application for NodeApp {
    fn verify_request(&mut self, request: &[u8]) -> bool {
        let digest = Digest::of_request(request);
        if self
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&digest)
        {
            return true; // checked by the Submit handler
        }
        let ok = self.app.verify_request(request);
        // A config update is not cached, as in the Submit handler: it is valid only
        // against the config in force, and a cached one would pass the handler's check
        // once stale (the engine verifies its pool again at a switch, update copies
        // included).
        if ok && !crate::service::is_config_update(request) {
            self.verified
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(digest);
        }
        ok
    }

    fn assemble(&mut self, ctx: ProposalContext, requests: &[Vec<u8>]) -> Vec<u8> {
        self.app.assemble(ctx, requests)
    }

    fn verify_proposal(&mut self, proposal: &Proposal) -> bool {
        self.app.verify_proposal(proposal)
    }

    fn apply(&mut self, decision: &Decision) {
        self.app.apply(decision);
        self.follow_config();
        let applied = self.app.take_applied();
        if applied.is_empty() {
            return;
        }
        let snapshot = self.app.state().encode();
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        for a in applied {
            queue.push_back(Handoff::Applied {
                applied: a,
                snapshot: snapshot.clone(),
            });
        }
    }

    fn applied(&self) -> Seq {
        self.app.applied()
    }

    fn snapshot(&self) -> Option<Vec<u8>> {
        self.app.snapshot()
    }

    fn epoch(&self) -> u64 {
        self.app.epoch()
    }

    fn membership(&mut self) -> Option<bft::Membership> {
        let found = self.app.membership();
        self.with_next_keys(found, ArmaApp::membership)
    }

    fn membership_from(&mut self, decision: &Decision, epoch: u64) -> Option<bft::Membership> {
        let found = self.app.membership_from(decision, epoch);
        self.with_next_keys(found, |app| app.membership_from(decision, epoch))
    }

    fn install_snapshot(&mut self, seq: Seq, snapshot: &[u8]) -> bool {
        if !self.app.install_snapshot(seq, snapshot) {
            return false;
        }
        self.follow_config();
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Handoff::Installed {
                seq,
                snapshot: snapshot.to_vec(),
            });
        true
    }
}

/// Snapshots are written after this many decisions (or at `snapshot_interval`).
const SNAPSHOT_DECISIONS: u64 = 256;

/// The decisions writer's side: the log, the snapshot, the hand-off queue.
struct ArmaSink {
    log: ArmaLog,
    queue: HandoffQueue,
    state_path: PathBuf,
    /// The newest snapshot not written yet, with its decision.
    pending: Option<(u64, Vec<u8>)>,
    /// Decisions recorded since the last snapshot.
    unsnapshotted: u64,
    written: Instant,
    interval: Duration,
    retain: std::num::NonZeroU64,
    metrics: Metrics,
}

impl ArmaSink {
    /// Appends decision `d` (or checks it against the log's record) and keeps its snapshot.
    fn record(&mut self, d: &Decision) -> Result<()> {
        self.take_installs()?;
        let handoff = self.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        let Some(Handoff::Applied { applied, snapshot }) = handoff else {
            return Err(Error::Diverged {
                decision: d.seq(),
                reason: "delivered without an applied outcome".into(),
            });
        };
        if applied.decision != d.seq() {
            return Err(Error::Diverged {
                decision: d.seq(),
                reason: format!(
                    "delivered while the application's next outcome is {}",
                    applied.decision
                ),
            });
        }
        if applied.outcome.metadata() != applied.metadata {
            // The certified metadata is not what this state computes (a decision obtained
            // by state transfer on a diverged state): its headers would not be proven.
            return Err(Error::Diverged {
                decision: d.seq(),
                reason: "the certified metadata differs from the outcome this consenter computes".into(),
            });
        }
        let served = to_pb_decision(&applied, d);
        if served.number < self.log.first() {
            // Pruned from the log (or before a restart point): nothing to compare with.
        } else if served.number <= self.log.last() {
            self.check_logged(&served)?;
        } else {
            self.log.append(&served)?;
        }
        self.metrics.on_decision(&served);
        self.pending = Some((served.number, snapshot));
        self.unsnapshotted = self.unsnapshotted.saturating_add(1);
        Ok(())
    }

    /// Handles the state-transfer snapshots at the head of the hand-off queue: the state
    /// file is replaced first, then a log that ends before the snapshot restarts after it
    /// (a crash in between is finished on restart: a state ahead of the log restarts it).
    fn take_installs(&mut self) -> Result<()> {
        loop {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let Some(Handoff::Installed { .. }) = queue.front() else {
                return Ok(());
            };
            let Some(Handoff::Installed { seq, snapshot }) = queue.pop_front() else {
                return Ok(());
            };
            drop(queue);
            self.log.sync()?;
            write_snapshot(&self.state_path, &snapshot)?;
            if self.log.last() < seq {
                self.log.restart_at(seq)?;
            }
            self.pending = None;
            self.unsnapshotted = 0;
            self.written = Instant::now();
            info!(
                decision = seq,
                "installed a state-transfer snapshot; the decisions log restarts after it"
            );
        }
    }

    /// A re-derived decision must be the logged one (headers, terms, root, metadata).
    fn check_logged(&self, served: &pb::Decision) -> Result<()> {
        let logged = self.log.reader().read(served.number)?;
        let same = logged.is_some_and(|l| {
            l.headers == served.headers
                && l.terms == served.terms
                && l.requests_root == served.requests_root
                && l.metadata == served.metadata
        });
        if same {
            Ok(())
        } else {
            Err(Error::Diverged {
                decision: served.number,
                reason: "re-applied from the WAL, it differs from the decisions log".into(),
            })
        }
    }

    /// Syncs the log, then replaces the snapshot with the newest one.
    fn write_snapshot(&mut self) -> Result<()> {
        self.take_installs()?;
        let Some((decision, bytes)) = self.pending.take() else {
            return Ok(());
        };
        self.log.sync()?;
        write_snapshot(&self.state_path, &bytes)?;
        self.log.prune(self.retain)?;
        self.written = Instant::now();
        self.unsnapshotted = 0;
        tracing::debug!(decision, "state snapshot written");
        Ok(())
    }
}

impl DecisionSink for ArmaSink {
    fn decided(&mut self, d: &Arc<Decision>) -> Result<()> {
        self.record(d)?;
        if self.unsnapshotted >= SNAPSHOT_DECISIONS {
            self.write_snapshot()?;
        }
        Ok(())
    }

    fn installed(&mut self, _seq: u64) -> Result<()> {
        self.take_installs()
    }

    fn idle(&mut self) -> Result<()> {
        if self.written.elapsed() >= self.interval {
            self.write_snapshot()?;
        }
        Ok(())
    }

    fn durable(&mut self) -> Result<()> {
        self.log.sync()
    }
}

/// A state snapshot ahead of the decisions log is the trace of a snapshot install that
/// stopped before the log restarted (the WAL then holds a checkpoint at or above it):
/// finish it. Any other state ahead of the log is refused.
fn reconcile_log(
    entries: &[WalEntry],
    state: &ArmaState,
    log: &mut ArmaLog,
    state_path: &Path,
) -> Result<()> {
    let checkpointed = entries
        .iter()
        .filter_map(|e| match e {
            WalEntry::Checkpoint { checkpoint, .. } => Some(checkpoint.seq),
            _ => None,
        })
        .max();
    if state.applied > log.last() && checkpointed.is_some_and(|c| c >= state.applied) {
        // A state-transfer install wrote the state and stopped before the log restarted.
        info!(
            decision = state.applied,
            "finishing an interrupted snapshot install"
        );
        log.restart_at(state.applied)?;
    }
    if state.applied > log.last() {
        return Err(Error::Config {
            reason: format!(
                "the state snapshot {} is at decision {} but the decisions log ends at {}",
                state_path.display(),
                state.applied,
                log.last()
            ),
        });
    }
    Ok(())
}

/// The Submit handler's cache of verified requests, for `app`'s config in force.
fn verified_cache(app: &ArmaApp, reconfig: Option<&Reconfig>) -> VerifiedCache {
    Arc::new(Mutex::new(Verified {
        set: HashSet::new(),
        order: VecDeque::new(),
        cap: VERIFIED_CACHE,
        primaries: app.primaries(),
        arma: Arc::new(app.config().clone()),
        epoch: app.state().epoch,
        config: reconfig.map(|r| (Arc::clone(&r.rules), Arc::new(app.config_in_force().to_vec()))),
        updates: VecDeque::new(),
    }))
}

/// Restores the replica, the application (from the snapshot) and the sink, and brings
/// the log up to the WAL.
fn restore(
    cfg: &Config,
    key: crypto::SigningKey,
    keys: ClusterKeys,
    peers: Arc<Peers>,
    metrics: Metrics,
) -> Result<(Replica<NodeApp>, FileWal, ArmaSink, VerifiedCache)> {
    let node = &cfg.node;
    let (mut wal, entries) = FileWal::open(&node.wal)?;
    let mut log = ArmaLog::open(&node.decisions)?;
    if entries.is_empty() && log.last() > 0 {
        return Err(Error::Config {
            reason: format!(
                "the WAL {} is missing or empty but the decisions log {} holds decisions up to {}: \
                 restore the WAL (or remove the WAL, the log and the state to rejoin as a new replica)",
                node.wal.display(),
                node.decisions.display(),
                log.last()
            ),
        });
    }
    let state =
        load_snapshot(&cfg.state, cfg.arma.shards)?.unwrap_or_else(|| ArmaState::genesis(cfg.arma.shards));
    reconcile_log(&entries, &state, &mut log, &cfg.state)?;
    let queue = HandoffQueue::default();
    let app = match &cfg.reconfig {
        Some(r) => ArmaApp::reconfigurable(cfg.arma.clone(), state, r.clone())?,
        None => ArmaApp::new(cfg.arma.clone(), state),
    };
    let verified = verified_cache(&app, cfg.reconfig.as_ref());
    if let Some(r) = &cfg.reconfig {
        follow_peers(
            &peers,
            r.rules.as_ref(),
            app.config_in_force(),
            app.reconfig_party(),
        );
    }
    let app = NodeApp {
        app,
        queue: queue.clone(),
        verified: verified.clone(),
        peers,
        next_key_files: cfg.next_key_files.clone(),
    };
    let verifier = Arc::new(EngineVerifier::new(keys));
    let (replica, replayed) = Replica::restore(
        node.engine.clone(),
        app,
        Box::new(EngineSigner::new(key)),
        verifier,
        &entries,
    )?;
    let mut sink = ArmaSink {
        log,
        queue,
        state_path: cfg.state.clone(),
        pending: None,
        unsnapshotted: 0,
        written: Instant::now(),
        interval: cfg.snapshot_interval,
        retain: cfg.retain_decisions,
        metrics,
    };
    for out in &replayed {
        match out {
            // A replica-set switch the replay made is durable before what follows it.
            Output::Persist(e) => bft::Wal::append(&mut wal, std::slice::from_ref(e))?,
            Output::Deliver(d) => sink.record(d)?,
            Output::Installed { .. } => sink.take_installs()?,
            _ => {}
        }
    }
    sink.write_snapshot()?;
    info!(
        id = node.engine.id,
        wal_entries = entries.len(),
        decided = replica.last_decided(),
        logged = sink.log.last(),
        "Arma consenter restored"
    );
    Ok((replica, wal, sink, verified))
}

/// Validates the config, restores the node from its data, binds its server and starts it.
pub async fn spawn(cfg: Config, deps: Deps) -> Result<Handle> {
    let mut node = cfg.node.clone();
    if let Some(listen) = cfg.listen {
        // Its own peers entry may be a name others dial (the transport never dials it).
        if let Some(own) = node.peers.get_mut(node.engine.id as usize) {
            *own = listen.to_string();
        }
    }
    let (node, listen, key, keys) = checked(node)?;
    let cfg = Config { node, ..cfg };
    let metrics = Metrics::register(&deps.registry)?;
    let peers = Peers::new(keys.clone(), cfg.node.peers.clone())
        .persisted(cfg.state.with_file_name("peers-joined.json"))
        .map_err(|reason| Error::Config {
            reason: format!("the joined consenters: {reason}"),
        })?;
    let peers = Arc::new(peers);
    let (replica, wal, sink, verified) = restore(
        &cfg,
        key.clone(),
        keys.clone(),
        Arc::clone(&peers),
        metrics.clone(),
    )?;
    let decisions = DecisionsService::new(sink.log.reader(), cfg.streams).into_server();
    let config_source: crate::service::ConfigSource = {
        let verified = Arc::clone(&verified);
        Arc::new(move || {
            let c = verified.lock().unwrap_or_else(|e| e.into_inner());
            c.config.as_ref().map(|(_, current)| Arc::clone(current))
        })
    };
    let check: crate::service::RequestCheck = Arc::new(move |r: &[u8]| check_request(&verified, r));
    launch(Launch {
        listen,
        cfg: cfg.node,
        key,
        keys,
        peers,
        replica,
        wal,
        sink,
        decisions: Some(decisions),
        request_check: Some(check),
        config_source: Some(config_source),
        metrics,
    })
    .await
}

/// Parses a batcher-keys file (docs/consenter.md "Batcher keys"): one line per
/// `(party, shard)`, `<party> <shard> <hex>` (Ed25519) or `<party> <shard> <scheme> <hex>`;
/// blank lines and `#` comments are ignored.
pub fn parse_batcher_keys(
    text: &str,
) -> std::result::Result<BTreeMap<(PartyId, ShardId), PublicKey>, String> {
    let mut keys = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", i + 1);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (party, shard, scheme, hex) = match fields.as_slice() {
            [p, s, h] => (*p, *s, Scheme::Ed25519, *h),
            [p, s, scheme, h] => (*p, *s, scheme.parse().map_err(|e| at(format!("{e}")))?, *h),
            _ => return Err(at("expected \"<party> <shard> [<scheme>] <hex>\"".into())),
        };
        let party: PartyId = party.parse().map_err(|_| at(format!("party {party:?}")))?;
        let shard: ShardId = shard.parse().map_err(|_| at(format!("shard {shard:?}")))?;
        let key = PublicKey::from_hex(scheme, hex).map_err(|e| at(e.to_string()))?;
        if keys.insert((party, shard), key).is_some() {
            return Err(at(format!("a second key for party {party}, shard {shard}")));
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BAF of a config this consenter has not applied yet is "retry" (it is behind);
    /// one of an older config, or a bad signature, is a refusal.
    #[test]
    fn a_baf_of_a_later_config_is_unavailable_not_invalid() {
        use crate::application::ArmaError;
        let stale = |got, current| ArmaError::StaleConfig {
            which: "BAF",
            party: 2,
            got,
            current,
        };
        let ahead = refusal(&stale(4, 3));
        assert_eq!(ahead.code(), tonic::Code::Unavailable);
        assert!(ahead.message().contains("has not applied config 4"), "{ahead}");
        assert_eq!(refusal(&stale(2, 3)).code(), tonic::Code::InvalidArgument);
        let bad = ArmaError::BadSignature {
            which: "BAF",
            party: 2,
            shard: 0,
        };
        assert_eq!(refusal(&bad).code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn batcher_keys_parse_with_or_without_scheme_and_refuse_mistakes() {
        let k = crypto::derive_signing_key(Scheme::Ed25519, "k").public_key();
        let text = format!("# comment\n\n1 0 {hex}\n 2 0 ed25519 {hex} \n", hex = k.to_hex());
        let keys = parse_batcher_keys(&text).expect("parses");
        assert_eq!(keys.len(), 2);
        assert_eq!(keys.get(&(2, 0)), Some(&k));
        let twice = format!("1 0 {hex}\n1 0 {hex}\n", hex = k.to_hex());
        assert!(parse_batcher_keys(&twice).unwrap_err().contains("line 2"));
        assert!(parse_batcher_keys("1 0").is_err(), "no key");
        assert!(
            parse_batcher_keys(&format!("x 0 {}", k.to_hex())).is_err(),
            "party"
        );
        assert!(parse_batcher_keys("1 0 ed25519 zz").is_err(), "hex");
        assert!(
            parse_batcher_keys(&format!("1 0 rsa {}", k.to_hex())).is_err(),
            "scheme"
        );
    }

    #[test]
    fn the_verified_cache_is_bounded() {
        let mut v = Verified {
            set: HashSet::new(),
            order: VecDeque::new(),
            cap: 2,
            updates: VecDeque::new(),
            primaries: Arc::default(),
            arma: Arc::new(
                ArmaConfig::new(
                    arma::Parties::contiguous(1),
                    1,
                    1,
                    BTreeMap::from([(
                        (1, 0),
                        crypto::derive_signing_key(Scheme::Ed25519, "b").public_key(),
                    )]),
                )
                .unwrap(),
            ),
            epoch: 0,
            config: None,
        };
        let d = |i: u8| Digest::of_request(&[i]);
        for i in 0..3 {
            v.insert(d(i));
        }
        v.insert(d(2));
        assert!(!v.contains(&d(0)) && v.contains(&d(1)) && v.contains(&d(2)));
        assert_eq!(v.order.len(), 2);
    }
}
