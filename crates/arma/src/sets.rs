//! The consenter sets a reader of decisions or blocks follows across config updates
//! (ADR 0018, docs/reconfiguration.md).
//!
//! Decision `d` is certified by the set in force before it: the genesis set until the
//! first config update, then each update's set from the decision after the one that
//! put it in force. Set `e` signs under `bft::set_chain(genesis chain, e)`, so a
//! certificate of one set never verifies as another's. A reader verifies each decision
//! (or block) with the set in force for it and learns the next set from a verified
//! decision that put a config in force (the config's bytes travel with the decision,
//! and form the data of its config block), reading the new consenter keys through the
//! network's [`ConfigRules`].
//!
//! The sets learned are small (keys), and kept whole: a reader may be asked to verify
//! any old block. [`ConsenterSets::encode`] gives what a reader persists to come back
//! after a restart with the sets it had learned.

use std::sync::Arc;

use bft::{ChainId, Members, Verifier};
use sha2::{Digest as _, Sha256};
use types::digest::Digest32;
use wire::pb;

use crate::block::{BlockError, VerifiedBlock, verify_pb_block};
use crate::cluster::{CertificateVerifier, ClusterKeys};
use crate::decision::{DecisionWireError, VerifiedDecision, verify_pb_decision};
use crate::header::{CertifiedConfig, Metadata};
use crate::reconfig::{ConfigRules, ConfigView};

/// Why a decision or block could not be followed.
#[derive(Debug, thiserror::Error)]
pub enum SetsError {
    /// The decision does not verify under the set in force for it.
    #[error(transparent)]
    Decision(#[from] DecisionWireError),
    /// The block does not verify under the set in force for its decision.
    #[error(transparent)]
    Block(#[from] BlockError),
    /// A config update's epoch is not the next one, or comes before a switch already
    /// learned.
    #[error(
        "decision {decision} puts consenter set {epoch} in force, but this reader is at set {current} (from decision {from})"
    )]
    OutOfOrder {
        /// The decision.
        decision: u64,
        /// The epoch it puts in force.
        epoch: u64,
        /// The newest epoch learned.
        current: u64,
        /// The first decision that set certifies.
        from: u64,
    },
    /// The reader cannot read configs (built without config rules).
    #[error(
        "decision {decision} puts a new network config in force, and this reader has no config rules to follow it"
    )]
    NoRules {
        /// The decision.
        decision: u64,
    },
    /// The config does not read, or is not the one the certificate names.
    #[error("decision {decision}: the config it put in force is unusable: {reason}")]
    BadConfig {
        /// The decision.
        decision: u64,
        /// Why.
        reason: String,
    },
    /// A persisted form that does not decode.
    #[error("the persisted consenter sets do not decode: {reason}")]
    Encoding {
        /// Why.
        reason: String,
    },
}

/// One consenter set: from which decision it certifies, and its keys.
#[derive(Clone)]
struct KnownSet {
    epoch: u64,
    /// The first decision it certifies.
    from: u64,
    chain: ChainId,
    members: Members,
    verifier: Arc<CertificateVerifier>,
    /// The switch that put it in force: the decision and the config (none for genesis).
    switch: Option<(u64, CertifiedConfig, Arc<Vec<u8>>)>,
    /// What the rules read of that config (none for genesis).
    view: Option<Arc<ConfigView>>,
}

/// The sets a reader follows (see the module docs).
#[derive(Clone)]
pub struct ConsenterSets {
    genesis_chain: ChainId,
    rules: Option<Arc<dyn ConfigRules>>,
    sets: Vec<KnownSet>,
}

impl std::fmt::Debug for ConsenterSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsenterSets")
            .field("epoch", &self.epoch())
            .field("sets", &self.sets.len())
            .finish_non_exhaustive()
    }
}

impl ConsenterSets {
    /// A reader at the genesis set `genesis`; `rules` read the configs of updates (a
    /// reader without them refuses to go past the first update).
    pub fn new(genesis: &ClusterKeys, rules: Option<Arc<dyn ConfigRules>>) -> ConsenterSets {
        ConsenterSets {
            genesis_chain: genesis.chain_id(),
            rules,
            sets: vec![KnownSet {
                epoch: 0,
                from: 0,
                chain: genesis.chain_id(),
                members: genesis.members(),
                verifier: Arc::new(CertificateVerifier::new(genesis.clone())),
                switch: None,
                view: None,
            }],
        }
    }

    /// The newest set's epoch.
    pub fn epoch(&self) -> u64 {
        self.newest().epoch
    }

    /// What the rules read of the newest config learned (none at the genesis set).
    pub fn newest_view(&self) -> Option<&ConfigView> {
        self.newest().view.as_deref()
    }

    fn newest(&self) -> &KnownSet {
        // `sets` is never empty: it starts with the genesis set and only grows.
        &self.sets[self.sets.len() - 1]
    }

    fn for_decision(&self, decision: u64) -> &KnownSet {
        self.sets
            .iter()
            .rev()
            .find(|s| s.from <= decision)
            .unwrap_or(&self.sets[0])
    }

    /// The chain id, verifier and members of the set that certifies `decision`.
    pub fn set_for(&self, decision: u64) -> (ChainId, Arc<dyn Verifier>, Members) {
        let s = self.for_decision(decision);
        (s.chain, s.verifier.clone(), s.members.clone())
    }

    /// Verifies a served decision under the set in force for it, learning nothing from
    /// it (what a follower checks of another consenter's decisions it only probes).
    pub fn check_decision(&self, d: &pb::Decision) -> Result<VerifiedDecision, DecisionWireError> {
        let s = self.for_decision(d.number);
        verify_pb_decision(d, &s.chain, s.verifier.as_ref(), &s.members)
    }

    /// Verifies a served decision under the set in force for it; a decision that put a
    /// config in force makes its set the next one.
    pub fn verify_decision(&mut self, d: &pb::Decision) -> Result<VerifiedDecision, SetsError> {
        let v = self.check_decision(d)?;
        if let Some((certified, config)) = &v.config {
            self.learn(v.number, certified, config)?;
        }
        Ok(v)
    }

    /// Verifies a served block under the set in force for its decision
    /// ([`verify_pb_block`]); a config block makes its config's set the next one.
    pub fn verify_block(
        &mut self,
        b: &pb::OrderedBlock,
        previous: Option<(u64, Digest32)>,
    ) -> Result<VerifiedBlock, SetsError> {
        let decision = b.proof.as_ref().map_or(0, |p| p.decision);
        let s = self.for_decision(decision);
        let v = verify_pb_block(b, previous, &s.chain, s.verifier.as_ref(), &s.members)?;
        self.learn_from_block(b, &v)?;
        Ok(v)
    }

    /// After `b` verified as `v` under the set [`ConsenterSets::set_for`] its decision:
    /// a config block makes its config's set the next one; any other block is left.
    pub fn learn_from_block(&mut self, b: &pb::OrderedBlock, v: &VerifiedBlock) -> Result<(), SetsError> {
        let decision = v.header.decision;
        if v.header.is_config() {
            let bad = |reason: &str| SetsError::BadConfig {
                decision,
                reason: reason.to_string(),
            };
            let [config] = b.requests.as_slice() else {
                return Err(bad("a config block carries its config as its one request"));
            };
            let metadata = b.proof.as_ref().map(|p| Metadata::decode(&p.metadata));
            let Some(Ok(Metadata {
                config: Some(certified),
                ..
            })) = metadata
            else {
                return Err(bad("its certificate names no config"));
            };
            self.learn(decision, &certified, config)?;
        }
        Ok(())
    }

    /// Learns the set of the config `config` that verified decision `decision` put in
    /// force (as `certified` says); learning one already known is a no-op.
    pub fn learn(
        &mut self,
        decision: u64,
        certified: &CertifiedConfig,
        config: &[u8],
    ) -> Result<(), SetsError> {
        let digest: [u8; 32] = Sha256::digest(config).into();
        if digest != certified.digest {
            return Err(SetsError::BadConfig {
                decision,
                reason: "its bytes do not have the certified hash".into(),
            });
        }
        let newest = self.newest();
        if let Some(known) = self.sets.iter().find(|s| s.epoch == certified.epoch) {
            if known.from == decision.saturating_add(1)
                && known.switch.as_ref().is_some_and(|w| w.1 == *certified)
            {
                return Ok(());
            }
        } else if certified.epoch == newest.epoch.saturating_add(1) && decision >= newest.from {
            let rules = self.rules.as_ref().ok_or(SetsError::NoRules { decision })?;
            let view = rules
                .view(config)
                .map_err(|reason| SetsError::BadConfig { decision, reason })?;
            if view.consenters.is_empty() {
                return Err(SetsError::BadConfig {
                    decision,
                    reason: "no consenters".into(),
                });
            }
            let keys = view.consenter_keys();
            let set = KnownSet {
                epoch: certified.epoch,
                from: decision.saturating_add(1),
                chain: bft::set_chain(self.genesis_chain, certified.epoch),
                members: keys.members(),
                verifier: Arc::new(CertificateVerifier::new(keys)),
                switch: Some((decision, *certified, Arc::new(config.to_vec()))),
                view: Some(Arc::new(view)),
            };
            self.sets.push(set);
            rules.in_force(config);
            return Ok(());
        }
        Err(SetsError::OutOfOrder {
            decision,
            epoch: certified.epoch,
            current: newest.epoch,
            from: newest.from,
        })
    }

    /// The switches learned, to persist: `u32 count ‖ (u64 decision ‖ u64 epoch ‖
    /// u64 sequence ‖ u32 len ‖ config)*` (big-endian).
    pub fn encode(&self) -> Vec<u8> {
        let switches: Vec<_> = self.sets.iter().filter_map(|s| s.switch.as_ref()).collect();
        let mut out = Vec::new();
        out.extend_from_slice(&u32::try_from(switches.len()).unwrap_or(u32::MAX).to_be_bytes());
        for (decision, c, config) in switches {
            out.extend_from_slice(&decision.to_be_bytes());
            out.extend_from_slice(&c.epoch.to_be_bytes());
            out.extend_from_slice(&c.sequence.to_be_bytes());
            out.extend_from_slice(&u32::try_from(config.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(config);
        }
        out
    }

    /// Learns again the switches of [`ConsenterSets::encode`]'s bytes, in order.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<(), SetsError> {
        let bad = |what: &str| SetsError::Encoding {
            reason: what.to_string(),
        };
        let mut rest = bytes;
        let mut take = |n: usize| -> Result<Vec<u8>, SetsError> {
            let (head, tail) = rest.split_at_checked(n).ok_or_else(|| bad("truncated"))?;
            rest = tail;
            Ok(head.to_vec())
        };
        let u64_of = |b: Vec<u8>| {
            <[u8; 8]>::try_from(b)
                .map(u64::from_be_bytes)
                .map_err(|_| bad("field"))
        };
        let u32_of = |b: Vec<u8>| {
            <[u8; 4]>::try_from(b)
                .map(u32::from_be_bytes)
                .map_err(|_| bad("field"))
        };
        let count = u32_of(take(4)?)?;
        let mut switches = Vec::new();
        for _ in 0..count {
            let decision = u64_of(take(8)?)?;
            let epoch = u64_of(take(8)?)?;
            let sequence = u64_of(take(8)?)?;
            let len = u32_of(take(4)?)? as usize;
            let config = take(len)?;
            switches.push((decision, epoch, sequence, config));
        }
        if !rest.is_empty() {
            return Err(bad("trailing bytes"));
        }
        for (decision, epoch, sequence, config) in switches {
            let certified = CertifiedConfig {
                epoch,
                sequence,
                digest: Sha256::digest(&config).into(),
            };
            self.learn(decision, &certified, &config)?;
        }
        Ok(())
    }
}
