//! [`ArmaApp`]: the Arma state machine as the BFT engine's application.
//!
//! * `verify_request` — a request enters a consenter's pool only if it decodes and its
//!   signatures verify under the network's batcher keys;
//! * `assemble` (leader) — the metadata of a proposal is the [`Outcome::metadata`] of
//!   executing its requests on a copy of the state;
//! * `verify_proposal` (followers) — recomputes it byte for byte; a difference is a
//!   faulty leader (view change);
//! * `apply` — executes the decision on the state and queues its [`Applied`] outcome for
//!   the shell, which persists and serves it.
//!
//! A reconfigurable application ([`ArmaApp::reconfigurable`]) also orders network config
//! updates (ADR 0018): an update enters the pool only if the config rules accept it
//! against the config in force; the first valid update of a decision puts its config in
//! force at the end of that decision (every other item of the decision counts under the
//! config before it), moves every shard to its next term and the consenter set to the
//! next epoch, which the engine switches to at that decision.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use bft::{Application, ChainId, Decision, Membership, Proposal, ProposalContext, Seq};
use sha2::{Digest as _, Sha256};

use super::config::ArmaConfig;
use super::error::{ArmaError, ArmaResult};
use super::request::{Item, PrimarySignatures, decode, decode_verified_with};
use super::state::ArmaState;
use crate::keys::{EngineSigner, EngineVerifier};
use ::arma::{ConfigChange, ConfigRules, ConfigView, Metadata, Outcome};

/// What makes an [`ArmaApp`] order config updates.
#[derive(Clone)]
pub struct Reconfig {
    /// The network's config rules.
    pub rules: Arc<dyn ConfigRules>,
    /// The genesis config's canonical bytes: in force while the state holds no other.
    pub genesis: Arc<Vec<u8>>,
    /// The engine's chain id (each set signs under `bft::set_chain(chain, epoch)`).
    pub chain: ChainId,
    /// The consenter signing keys this node holds: its key in each set it is a member
    /// of. A node whose key a config update rotates holds both across the switch.
    pub keys: Vec<crypto::SigningKey>,
    /// This node's party: its replica slot in every set is `party − 1` (a party keeps
    /// its slot; a party that joins takes the next one).
    pub party: types::PartyId,
}

impl fmt::Debug for Reconfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reconfig")
            .field("rules", &self.rules)
            .field("genesis_bytes", &self.genesis.len())
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

/// One applied decision: its number and outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The decision's BFT sequence number.
    pub decision: Seq,
    /// Its view (for the proof served with it).
    pub view: u64,
    /// The root of its requests (for the proof).
    pub requests_root: [u8; 32],
    /// The metadata the certificate signs.
    pub metadata: Vec<u8>,
    /// The headers and term changes.
    pub outcome: Outcome,
}

/// Requests whose signatures verified, remembered so a request is verified once when it
/// enters the pool and not again when a proposal carries it: two generations of at most
/// [`VERIFIED_CACHE`] digests each (bounded; the older generation is dropped whole).
#[derive(Clone, Debug, Default)]
struct Verified {
    current: HashSet<[u8; 32]>,
    previous: HashSet<[u8; 32]>,
}

/// Request digests per generation of the verification cache.
const VERIFIED_CACHE: usize = 16_384;

impl Verified {
    fn contains(&self, d: &[u8; 32]) -> bool {
        self.current.contains(d) || self.previous.contains(d)
    }

    fn insert(&mut self, d: [u8; 32]) {
        if self.current.len() >= VERIFIED_CACHE {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(d);
    }
}

/// The Arma consenter application.
#[derive(Clone, Debug)]
pub struct ArmaApp {
    cfg: ArmaConfig,
    state: ArmaState,
    applied: Vec<Applied>,
    verified: Verified,
    /// Primary signatures that verified (see [`PrimarySignatures`]); the node shares it
    /// with its Submit handler.
    primaries: Arc<PrimarySignatures>,
    /// Decisions whose metadata differed from what this replica computes (should stay 0;
    /// a non-zero value means diverged state, for tests and metrics).
    pub diverged: u64,
    /// The config rules and keys (none: config updates are refused).
    reconfig: Option<Reconfig>,
    /// The config in force (canonical bytes), when reconfigurable.
    current: Arc<Vec<u8>>,
}

impl ArmaApp {
    /// An application starting from `state` (genesis or a persisted snapshot).
    pub fn new(cfg: ArmaConfig, state: ArmaState) -> ArmaApp {
        ArmaApp {
            cfg,
            state,
            applied: Vec::new(),
            verified: Verified::default(),
            primaries: Arc::default(),
            diverged: 0,
            reconfig: None,
            current: Arc::default(),
        }
    }

    /// An application that orders config updates, starting from `state` (genesis or a
    /// persisted snapshot, whose config in force, if any, replaces `cfg`'s network).
    pub fn reconfigurable(cfg: ArmaConfig, state: ArmaState, reconfig: Reconfig) -> ArmaResult<ArmaApp> {
        let mut app = ArmaApp::new(cfg, state);
        app.current = Arc::clone(&reconfig.genesis);
        app.reconfig = Some(reconfig);
        app.adopt_state_config()?;
        Ok(app)
    }

    /// Makes the config the state holds (or the genesis config) the one in force.
    fn adopt_state_config(&mut self) -> ArmaResult<()> {
        let Some(r) = &self.reconfig else {
            return Ok(());
        };
        let config = match self.state.config_bytes()? {
            Some(c) => Arc::new(c),
            None => Arc::clone(&r.genesis),
        };
        let view = r.rules.view(&config).map_err(|reason| ArmaError::Config {
            reason: format!("the config in force: {reason}"),
        })?;
        self.cfg = self.cfg.with_view(&view)?;
        r.rules.in_force(&config);
        self.current = config;
        self.verified = Verified::default();
        Ok(())
    }

    /// Checks a config update against the config in force: the next config's bytes and
    /// view, or why it is refused.
    pub fn check_update(&self, update: &[u8]) -> ArmaResult<(Vec<u8>, ConfigView)> {
        let refused = |reason: String| ArmaError::ConfigUpdate { reason };
        let Some(r) = &self.reconfig else {
            return Err(refused("this network does not order config updates".into()));
        };
        let next = r.rules.next(&self.current, update).map_err(refused)?;
        let view = r.rules.view(&next).map_err(refused)?;
        if view.shards != self.cfg.shards {
            return Err(refused(format!(
                "the next config has {} shards, the network {}",
                view.shards, self.cfg.shards
            )));
        }
        self.cfg.with_view(&view).map_err(|e| refused(e.to_string()))?;
        Ok((next, view))
    }

    /// The config in force (canonical bytes; empty for an application that does not
    /// order config updates).
    pub fn config_in_force(&self) -> &[u8] {
        &self.current
    }

    /// The engine's view of a replica set: its members' keys, and this node's id and
    /// signer if it holds the key the set names for this node's slot (`party − 1`). A
    /// set without that slot (the node's party joins later) leaves it a non-member; a
    /// key it holds that the set names for another slot (a key it rotated out, given to
    /// another party by a careless update) is not taken.
    fn membership_of(&self, epoch: u64, view: &ConfigView) -> Option<Membership> {
        let r = self.reconfig.as_ref()?;
        let holds = |c: &crypto::PublicKey| r.keys.iter().find(|k| k.public_key() == *c);
        // Party `p` runs replica `p − 1` in every set (stable ids, ADR 0018).
        let slot = r.party.checked_sub(1);
        let mine = slot.and_then(|id| Some((id, holds(view.consenters.get(&id)?)?)));
        let keys = view.consenter_keys();
        Some(Membership {
            epoch,
            chain: r.chain,
            members: view.replicas().ok()?,
            id: mine.map(|(id, _)| id),
            verifier: Arc::new(EngineVerifier::new(keys)),
            signer: mine.map(|(_, k)| Box::new(EngineSigner::new(k.clone())) as Box<dyn bft::Signer>),
            params: view.engine,
        })
    }

    /// This node's party, for an application that orders updates.
    pub fn reconfig_party(&self) -> Option<types::PartyId> {
        self.reconfig.as_ref().map(|r| r.party)
    }

    /// Holds one more consenter signing key (a next key the shell read from a file when
    /// a config in force named a key for this node it did not hold); a key held already
    /// changes nothing. `false` for an application that orders no updates.
    pub fn hold_key(&mut self, key: crypto::SigningKey) -> bool {
        let Some(r) = self.reconfig.as_mut() else {
            return false;
        };
        if !r.keys.iter().any(|k| k.public_key() == key.public_key()) {
            r.keys.push(key);
        }
        true
    }

    /// The state (after the last applied decision).
    pub fn state(&self) -> &ArmaState {
        &self.state
    }

    /// The cache of verified primary signatures, to share with other verifiers.
    pub fn primaries(&self) -> Arc<PrimarySignatures> {
        Arc::clone(&self.primaries)
    }

    /// The config.
    pub fn config(&self) -> &ArmaConfig {
        &self.cfg
    }

    /// Takes the decisions applied since the last call, in order. The shell calls it after
    /// every engine step and persists them before serving them.
    pub fn take_applied(&mut self) -> Vec<Applied> {
        std::mem::take(&mut self.applied)
    }

    /// The items of `requests` that decode (signatures not checked: the engine checked
    /// each with `verify_request`, or a quorum did for a decision).
    fn items(&self, requests: &[Vec<u8>]) -> Vec<Item> {
        requests
            .iter()
            .filter_map(|r| decode(&self.cfg, r).ok())
            .collect()
    }

    /// The outcome of `requests` as decision `seq` on a copy of the state.
    fn dry_run(&self, seq: Seq, requests: &[Vec<u8>]) -> Outcome {
        let mut copy = self.state.clone();
        self.run(&mut copy, seq, &self.items(requests))
    }

    /// Executes a decision's items on `state` (this application's state before the
    /// decision, or a copy of it): the BAFs and complaints under the config in force,
    /// then the first config update that config's rules accept.
    fn run(&self, state: &mut ArmaState, seq: Seq, items: &[Item]) -> Outcome {
        let mut outcome = state.execute(&self.cfg, seq, items);
        let next = items.iter().find_map(|item| match item {
            Item::ConfigUpdate(u) => self.check_update(u).ok(),
            _ => None,
        });
        if let Some((config, view)) = next {
            outcome.terms.extend(state.switch(&config));
            let index = u32::try_from(outcome.headers.len()).unwrap_or(u32::MAX);
            let block = state.append_config_block(&config, seq, index);
            outcome.headers.push(block);
            outcome.config = Some(ConfigChange {
                epoch: state.epoch,
                sequence: view.sequence,
                config,
            });
        }
        outcome
    }
}

impl Application for ArmaApp {
    fn verify_request(&mut self, request: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(request).into();
        if self.verified.contains(&digest) {
            return true;
        }
        // A config update is checked in full against the config in force: the pool
        // admits, and proposals carry, only updates that would be put in force now, so a
        // faulty consenter cannot fill the pools and the proposals with junk updates.
        // Every replica checks a proposal under the config of the decision before it
        // (`verify_proposal` needs it applied), so correct replicas agree; at a switch
        // the verdicts are forgotten and the engine checks its pool again, dropping the
        // copies the switch made stale, which would otherwise be refused in every
        // proposal holding them. It is checked again when its decision is executed
        // (`run`), where the first valid update of a decision wins and the others change
        // nothing. (An application without config rules orders none: static, so every
        // replica of the network answers alike.)
        let ok = match decode_verified_with(&self.cfg, request, &self.primaries) {
            Ok(Item::ConfigUpdate(update)) => self.reconfig.is_some() && self.check_update(&update).is_ok(),
            Ok(_) => true,
            Err(_) => false,
        };
        if ok {
            self.verified.insert(digest);
        }
        ok
    }

    fn assemble(&mut self, ctx: ProposalContext, requests: &[Vec<u8>]) -> Vec<u8> {
        let mut outcome = self.dry_run(ctx.seq, requests);
        if self.cfg.knobs().lie_in_metadata
            && let Some(h) = outcome.headers.first_mut()
        {
            h.tx_count = h.tx_count.wrapping_add(1);
        }
        outcome.metadata()
    }

    fn verify_proposal(&mut self, proposal: &Proposal) -> bool {
        if self.cfg.knobs().accept_any_metadata {
            return true;
        }
        proposal.seq == self.state.applied.saturating_add(1)
            && self.dry_run(proposal.seq, &proposal.requests).metadata() == proposal.metadata
    }

    fn apply(&mut self, decision: &Decision) {
        let proposal = &decision.proposal;
        let items = self.items(&proposal.requests);
        let mut state = std::mem::replace(&mut self.state, ArmaState::genesis(0));
        let outcome = self.run(&mut state, proposal.seq, &items);
        self.state = state;
        let metadata = outcome.metadata();
        if metadata != proposal.metadata {
            self.diverged = self.diverged.saturating_add(1);
        }
        if let Some(change) = &outcome.config
            && let Some(r) = &self.reconfig
            && let Ok(view) = r.rules.view(&change.config)
            && let Ok(cfg) = self.cfg.with_view(&view)
        {
            // `run` checked both already; the state moved to the next epoch with them.
            // Requests verified under the old config are verified again.
            self.cfg = cfg;
            r.rules.in_force(&change.config);
            self.current = Arc::new(change.config.clone());
            self.verified = Verified::default();
        }
        self.state.applied = proposal.seq;
        self.applied.push(Applied {
            decision: proposal.seq,
            view: decision.certificate.view,
            requests_root: proposal.requests_root(),
            metadata: proposal.metadata.clone(),
            outcome,
        });
    }

    fn applied(&self) -> Seq {
        self.state.applied
    }

    fn snapshot(&self) -> Option<Vec<u8>> {
        Some(self.state.encode())
    }

    /// Installs a certified [`ArmaState`] after decision `seq`; outcomes not yet taken
    /// belong to decisions the snapshot replaces and are dropped.
    fn install_snapshot(&mut self, seq: Seq, snapshot: &[u8]) -> bool {
        match ArmaState::decode(snapshot, self.cfg.shards) {
            Ok(state) if state.applied == seq => {
                let before = std::mem::replace(&mut self.state, state);
                if self.adopt_state_config().is_err() {
                    self.state = before;
                    return false;
                }
                self.applied.clear();
                true
            }
            _ => false,
        }
    }

    fn epoch(&self) -> u64 {
        self.state.epoch
    }

    fn membership(&mut self) -> Option<Membership> {
        let r = self.reconfig.as_ref()?;
        let view = r.rules.view(&self.current).ok()?;
        self.membership_of(self.state.epoch, &view)
    }

    /// The set a certified decision put in force: the update in it whose next config
    /// the decision's metadata certifies.
    fn membership_from(&mut self, decision: &Decision, epoch: u64) -> Option<Membership> {
        let r = self.reconfig.as_ref()?;
        let certified = Metadata::decode(&decision.proposal.metadata).ok()?.config?;
        if certified.epoch != epoch {
            return None;
        }
        let view = decision.proposal.requests.iter().find_map(|request| {
            let Ok(Item::ConfigUpdate(u)) = decode(&self.cfg, request) else {
                return None;
            };
            let next = r.rules.carried(&u).ok()?;
            let digest: [u8; 32] = Sha256::digest(&next).into();
            (digest == certified.digest)
                .then(|| r.rules.view(&next).ok())
                .flatten()
        })?;
        self.membership_of(epoch, &view)
    }
}
