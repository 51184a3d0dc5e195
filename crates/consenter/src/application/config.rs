//! What the Arma application knows of the network (a leaf of the application: the
//! request decoding and the state both read it).

use std::collections::BTreeMap;

use arma::Parties;
use crypto::PublicKey;
use types::{PartyId, ShardId};

use super::error::{ArmaError, ArmaResult};

/// What the Arma application knows of the network.
#[derive(Clone, Debug)]
pub struct ArmaConfig {
    /// The parties in force (ids increasing; a party that left leaves a gap).
    pub parties: Parties,
    /// Number of shards S (shards are `0..S`).
    pub shards: u32,
    /// How far ahead of a shard's last ordered seq BAFs are counted (older or further
    /// ones are ignored): bounds the state at `shards × max_seqs_ahead × parties` votes.
    pub max_seqs_ahead: u64,
    /// The sequence of the network config in force (0 at genesis): BAFs and complaints
    /// must name it.
    pub sequence: u64,
    batcher_keys: BTreeMap<(PartyId, ShardId), PublicKey>,
    knobs: Knobs,
}

/// Defences the ordering simulation turns off to show that its invariants catch the
/// attack each one stops (feature `testing` only; every production config has the
/// default: all defences on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// Order a batch with this many BAFs instead of f+1.
    pub threshold: Option<usize>,
    /// Do not take two primary-signed digests for one seq as equivocation.
    pub ignore_equivocation: bool,
    /// Followers accept any proposal metadata (no recomputation).
    pub accept_any_metadata: bool,
    /// As leader, put a wrong header hash into the metadata (a lying consenter).
    pub lie_in_metadata: bool,
}

impl ArmaConfig {
    /// A config for `parties` × `shards` with the batcher public key of every
    /// `(party, shard)`; refuses a missing key, a key of a party not in force or an
    /// empty network.
    pub fn new(
        parties: Parties,
        shards: u32,
        max_seqs_ahead: u64,
        batcher_keys: BTreeMap<(PartyId, ShardId), PublicKey>,
    ) -> ArmaResult<ArmaConfig> {
        let bad = |reason: String| Err(ArmaError::Config { reason });
        if shards == 0 || max_seqs_ahead == 0 {
            return bad(format!(
                "shards ({shards}) and max_seqs_ahead ({max_seqs_ahead}) must be positive"
            ));
        }
        for &party in parties.ids() {
            for shard in 0..shards {
                if !batcher_keys.contains_key(&(party, shard)) {
                    return bad(format!("no batcher key for party {party}, shard {shard}"));
                }
            }
        }
        if batcher_keys.len() as u64 != u64::from(parties.len()) * u64::from(shards) {
            return bad("batcher keys for parties or shards outside the network".into());
        }
        Ok(ArmaConfig {
            parties,
            shards,
            max_seqs_ahead,
            sequence: 0,
            batcher_keys,
            knobs: Knobs::default(),
        })
    }

    /// The config of the network `view` describes, with this config's defences.
    pub fn with_view(&self, view: &arma::ConfigView) -> ArmaResult<ArmaConfig> {
        let mut next = ArmaConfig::new(
            view.parties.clone(),
            view.shards,
            view.max_seqs_ahead,
            view.batcher_keys.clone(),
        )?;
        next.knobs = self.knobs;
        next.sequence = view.sequence;
        Ok(next)
    }

    /// The same config with some defences off (the simulation's negative tests).
    #[cfg(feature = "testing")]
    pub fn with_knobs(mut self, knobs: Knobs) -> ArmaConfig {
        self.knobs = knobs;
        self
    }

    /// The defences in force.
    pub fn knobs(&self) -> Knobs {
        self.knobs
    }

    /// The batcher key of `party` for `shard`.
    pub fn batcher_key(&self, party: PartyId, shard: ShardId) -> Option<&PublicKey> {
        self.batcher_keys.get(&(party, shard))
    }

    /// BAFs that make a batch attestation, and complaints that change a term: f+1.
    pub fn threshold(&self) -> usize {
        self.knobs.threshold.unwrap_or(self.parties.threshold())
    }

    /// The primary of `shard` in `term` (docs/contracts.md: the `((s + t) mod N)`-th
    /// party in force).
    pub fn primary_of(&self, shard: ShardId, term: u64) -> PartyId {
        self.parties.primary_of(shard, term)
    }

    pub(super) fn check_shard(&self, shard: ShardId) -> ArmaResult<()> {
        if shard < self.shards {
            Ok(())
        } else {
            Err(ArmaError::UnknownShard {
                shard,
                shards: self.shards,
            })
        }
    }

    /// A BAF or complaint of `party` naming config sequence `got` is of the config in force.
    pub(super) fn check_sequence(&self, which: &'static str, party: PartyId, got: u64) -> ArmaResult<()> {
        if got == self.sequence {
            Ok(())
        } else {
            Err(ArmaError::StaleConfig {
                which,
                party,
                got,
                current: self.sequence,
            })
        }
    }

    pub(super) fn check_party(&self, party: PartyId) -> ArmaResult<()> {
        if self.parties.contains(party) {
            Ok(())
        } else {
            Err(ArmaError::UnknownParty {
                party,
                parties: self.parties.clone(),
            })
        }
    }
}
