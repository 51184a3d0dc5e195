//! The Arma state machine (Arma §4.4; docs/consenter.md "State"): per shard its term, its
//! last ordered seq, the BAFs counted for its unordered seqs and the complaints of its
//! term; one chain of block headers over all shards.
//!
//! [`ArmaState::execute`] is a pure function of the state and a decision's items, so
//! every correct consenter computes the same headers and terms.

use std::collections::{BTreeMap, BTreeSet};

use arma::{Baf, Complaint};
use serde::{Deserialize, Serialize};
use types::digest::Digest32;
use types::{PartyId, ShardId};

use super::config::ArmaConfig;
use super::error::{ArmaError, ArmaResult};
use super::request::Item;
use ::arma::{OrderedHeader, Outcome, TermChange};

/// The BAFs counted for one seq of a shard's current primary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct SeqVotes {
    digest: Digest32,
    tx_count: u32,
    signers: BTreeSet<PartyId>,
}

/// One shard's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardState {
    /// The current term.
    pub term: u64,
    /// The seq of the last ordered batch (0: none).
    pub last_ordered_seq: u64,
    votes: BTreeMap<u64, SeqVotes>,
    complaints: BTreeSet<PartyId>,
    /// The digests (hex) and tx counts of the last [`ORDERED_WINDOW`] seqs ordered in
    /// this term: a BAF for one of them with another primary-signed digest is a late
    /// equivocation (the primary served one version to some and another to the others).
    /// `None` in a state read from a snapshot written before this was kept: the check
    /// starts for that shard at its next term change, at the same decision on every
    /// consenter (replaying the log from different snapshots cannot make them differ).
    #[serde(default)]
    ordered: Option<BTreeMap<u64, (String, u32)>>,
}

/// How many ordered seqs of a term a shard remembers for the late-equivocation check.
/// The evidence (a correct secondary's BAF for the other version) is submitted as soon as
/// that secondary learns the seq was ordered, a few decisions later.
pub const ORDERED_WINDOW: usize = 64;

impl ShardState {
    /// Seqs with counted BAFs (unordered).
    pub fn pending_seqs(&self) -> usize {
        self.votes.len()
    }

    /// Complaints counted in the current term.
    pub fn complaints(&self) -> usize {
        self.complaints.len()
    }

    fn next_term(&mut self, shard: ShardId) -> TermChange {
        self.term = self.term.saturating_add(1);
        self.votes.clear();
        self.complaints.clear();
        self.ordered = Some(BTreeMap::new());
        TermChange {
            shard,
            term: self.term,
            last_ordered_seq: self.last_ordered_seq,
        }
    }
}

/// The whole application state: what safety needs to be persisted (docs/consenter.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmaState {
    /// Per shard.
    pub shards: Vec<ShardState>,
    /// The number of the next block.
    pub next_block: u64,
    /// The hash of the last block's header (zeros before the first).
    pub previous_hash: Digest32,
    /// The last applied decision (0: none).
    pub applied: u64,
    /// Equivocations proven so far (for metrics and tests).
    pub equivocations: u64,
    /// The consenter set's epoch: config updates applied since the genesis config.
    #[serde(default)]
    pub epoch: u64,
    /// The config in force (hex of its canonical bytes) once an update replaced the
    /// genesis config; `None` while the genesis config is in force.
    #[serde(default)]
    pub config: Option<String>,
}

impl ArmaState {
    /// The state at genesis: every shard in term 0 with nothing ordered.
    pub fn genesis(shards: u32) -> ArmaState {
        ArmaState {
            shards: vec![
                ShardState {
                    ordered: Some(BTreeMap::new()),
                    ..ShardState::default()
                };
                shards as usize
            ],
            next_block: 0,
            previous_hash: [0; 32],
            applied: 0,
            equivocations: 0,
            epoch: 0,
            config: None,
        }
    }

    /// The config in force after an update (`None`: the genesis config; a stored value
    /// that is not hex is refused).
    pub fn config_bytes(&self) -> ArmaResult<Option<Vec<u8>>> {
        self.config
            .as_deref()
            .map(|h| {
                hex::decode(h).map_err(|_| ArmaError::Config {
                    reason: "the Arma state's config is not hex".into(),
                })
            })
            .transpose()
    }

    /// Appends the config block of `config` (epoch [`ArmaState::epoch`]) as header
    /// `index` of decision `decision` ([`arma::CONFIG_SHARD`]).
    pub fn append_config_block(&mut self, config: &[u8], decision: u64, index: u32) -> OrderedHeader {
        let header = OrderedHeader {
            number: self.next_block,
            previous_hash: self.previous_hash,
            digest: OrderedHeader::config_digest(config),
            shard: ::arma::CONFIG_SHARD,
            term: 0,
            primary: 0,
            seq: self.epoch,
            decision,
            index,
            tx_count: 0,
        };
        self.next_block = self.next_block.saturating_add(1);
        self.previous_hash = header.hash();
        header
    }

    /// Puts `config` in force at the end of a decision: the next epoch, and the next term
    /// in every shard (votes and complaints of the old config are dropped; the batchers
    /// follow the new primaries, under the new config, from this decision on). Gives
    /// the term changes.
    pub fn switch(&mut self, config: &[u8]) -> Vec<TermChange> {
        self.epoch = self.epoch.saturating_add(1);
        self.config = Some(hex::encode(config));
        self.shards
            .iter_mut()
            .zip(0..)
            .map(|(state, shard)| state.next_term(shard))
            .collect()
    }

    /// Applies the items of decision `decision` in order and returns what it ordered and
    /// which terms it changed. Items of another term, of a primary that is not the
    /// shard's current one, or of seqs already ordered are ignored.
    pub fn execute(&mut self, cfg: &ArmaConfig, decision: u64, items: &[Item]) -> Outcome {
        let mut out = Outcome::default();
        for item in items {
            match item {
                Item::Baf(baf) => self.on_baf(cfg, decision, baf, &mut out),
                Item::Complaint(c) => self.on_complaint(cfg, c, &mut out),
                // The application checks and applies it at the end of the decision.
                Item::ConfigUpdate(_) => {}
            }
        }
        out
    }

    fn on_baf(&mut self, cfg: &ArmaConfig, decision: u64, baf: &Baf, out: &mut Outcome) {
        let h = &baf.header;
        let shard = h.id.shard;
        let Some(state) = self.shards.get_mut(shard as usize) else {
            return;
        };
        let seq = h.id.seq;
        let current = h.term == state.term && h.id.primary == cfg.primary_of(shard, state.term);
        let ahead = seq.saturating_sub(state.last_ordered_seq);
        if !current || ahead > cfg.max_seqs_ahead {
            return;
        }
        if ahead == 0 {
            // A seq already ordered: the same digest is a late BAF; another digest the
            // primary signed for it is an equivocation found late, and changes the term
            // like one found early (the other version's requests go back to the
            // batchers' mempools then, so the primary cannot censor with it).
            let differs = state
                .ordered
                .as_ref()
                .and_then(|o| o.get(&seq))
                .is_some_and(|(d, c)| *d != hex::encode(h.digest) || *c != h.tx_count);
            if differs && !cfg.knobs().ignore_equivocation {
                self.equivocations = self.equivocations.saturating_add(1);
                out.terms.push(state.next_term(shard));
            }
            return;
        }
        match state.votes.get_mut(&seq) {
            None => {
                let signers = BTreeSet::from([baf.signer]);
                let votes = SeqVotes {
                    digest: h.digest,
                    tx_count: h.tx_count,
                    signers,
                };
                state.votes.insert(seq, votes);
            }
            Some(v)
                if (v.digest != h.digest || v.tx_count != h.tx_count) && !cfg.knobs().ignore_equivocation =>
            {
                // Two headers the primary signed for one (shard, term, primary, seq).
                self.equivocations = self.equivocations.saturating_add(1);
                out.terms.push(state.next_term(shard));
                return;
            }
            Some(v) => {
                if v.digest == h.digest {
                    v.signers.insert(baf.signer);
                }
            }
        }
        self.order_ready(cfg, shard, decision, out);
    }

    /// Orders the shard's consecutive seqs from `last_ordered_seq + 1` that hold f+1 BAFs.
    fn order_ready(&mut self, cfg: &ArmaConfig, shard: ShardId, decision: u64, out: &mut Outcome) {
        let threshold = cfg.threshold();
        loop {
            let Some(state) = self.shards.get_mut(shard as usize) else {
                return;
            };
            let Some(next) = state.last_ordered_seq.checked_add(1) else {
                return;
            };
            let ready = state
                .votes
                .get(&next)
                .is_some_and(|v| v.signers.len() >= threshold);
            let Some(votes) = ready.then(|| state.votes.remove(&next)).flatten() else {
                return;
            };
            state.last_ordered_seq = next;
            if let Some(ordered) = state.ordered.as_mut() {
                ordered.insert(next, (hex::encode(votes.digest), votes.tx_count));
                while ordered.len() > ORDERED_WINDOW {
                    ordered.pop_first();
                }
            }
            let header = OrderedHeader {
                number: self.next_block,
                previous_hash: self.previous_hash,
                digest: votes.digest,
                shard,
                term: state.term,
                primary: cfg.primary_of(shard, state.term),
                seq: next,
                decision,
                index: u32::try_from(out.headers.len()).unwrap_or(u32::MAX),
                tx_count: votes.tx_count,
            };
            self.next_block = self.next_block.saturating_add(1);
            self.previous_hash = header.hash();
            out.headers.push(header);
        }
    }

    fn on_complaint(&mut self, cfg: &ArmaConfig, c: &Complaint, out: &mut Outcome) {
        let Some(state) = self.shards.get_mut(c.shard as usize) else {
            return;
        };
        if c.term != state.term {
            return;
        }
        state.complaints.insert(c.signer);
        if state.complaints.len() >= cfg.threshold() {
            out.terms.push(state.next_term(c.shard));
        }
    }

    /// The snapshot persisted after each applied decision.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a snapshot written by [`ArmaState::encode`] for a network of `shards` shards.
    pub fn decode(bytes: &[u8], shards: u32) -> ArmaResult<ArmaState> {
        let state: ArmaState = serde_json::from_slice(bytes).map_err(|e| ArmaError::Config {
            reason: format!("the Arma state snapshot does not decode: {e}"),
        })?;
        if state.shards.len() != shards as usize {
            return Err(ArmaError::Config {
                reason: format!(
                    "the Arma state snapshot has {} shards, the network {shards}",
                    state.shards.len()
                ),
            });
        }
        Ok(state)
    }
}
