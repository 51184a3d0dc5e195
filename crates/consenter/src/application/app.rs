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

use std::collections::HashSet;
use std::sync::Arc;

use bft::{Application, Decision, Proposal, ProposalContext, Seq};
use sha2::{Digest as _, Sha256};

use super::config::ArmaConfig;
use super::request::{Item, PrimarySignatures, decode, decode_verified_with};
use super::state::ArmaState;
use ::arma::Outcome;

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
        }
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
        copy.execute(&self.cfg, seq, &self.items(requests))
    }
}

impl Application for ArmaApp {
    fn verify_request(&mut self, request: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(request).into();
        if self.verified.contains(&digest) {
            return true;
        }
        let ok = decode_verified_with(&self.cfg, request, &self.primaries).is_ok();
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
        let outcome = self.state.execute(&self.cfg, proposal.seq, &items);
        let metadata = outcome.metadata();
        if metadata != proposal.metadata {
            self.diverged = self.diverged.saturating_add(1);
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
                self.state = state;
                self.applied.clear();
                true
            }
            _ => false,
        }
    }
}
