//! The reconfiguration invariants (docs/ordering-sim.md "Reconfiguration"), checked on
//! every decision a correct consenter delivers:
//!
//! * **Oracle** — a decision puts a config in force exactly when one of its config
//!   updates is valid under the strict rules against the config in force before it, and
//!   then the first such one's next config, as the next epoch and sequence; it appends
//!   that config's block after its other headers and moves every shard to its next term.
//! * **Certificates** — each delivered decision's certificate verifies under the set in
//!   force for it, as a reader learns the sets (`arma::ConsenterSets` from the genesis
//!   keys and the rules), and — for a decision after a switch — not under the set before.
//! * **Removed signers** — after a switch that removed a party, no certificate verifies
//!   with the removed replica's (genuine) commit signature standing in for a member's.

use std::sync::Arc;

use std::collections::BTreeMap;

use arma::{ClusterKeys, ConfigRules, ConsenterSets, DecisionProof, verify_pb_decision};
use bft::{Decision, Signer as _, Verifier as _};
use consenter::application::{ArmaConfig, Item, Outcome};
use consenter::keys::{EngineSigner, EngineVerifier};
use crypto::PublicKey;
use wire::pb;

use crate::reconfig::{SimConfig, SimRules, SimUpdate, consenter_key};

/// Key generations a removed replica's key is looked for among.
const GENERATIONS: u32 = 8;

/// One switch: the decision that made it, the config it put in force and the update.
pub struct Switch {
    /// The decision.
    pub decision: u64,
    /// The config's bytes.
    pub config: Vec<u8>,
    /// The update's bytes.
    pub update: Vec<u8>,
    /// The parties of the config it put in force.
    pub parties: Vec<u32>,
    /// The party it removed, if any, and that party's consenter key before.
    pub removed: Option<(u32, PublicKey)>,
}

/// The checker's view of the configs.
pub struct Switches {
    sets: ConsenterSets,
    /// The config in force after the last decision checked.
    config: SimConfig,
    /// The switch of epoch `e` at index `e − 1`.
    pub switched: Vec<Switch>,
    /// Certificates checked not to verify under the set before their own.
    pub wrong_set_checked: u64,
    /// Certificates checked not to verify with a removed replica's signature.
    pub removed_signer_refused: u64,
    /// The genesis config's parties.
    genesis_parties: Vec<u32>,
}

impl Switches {
    /// At the genesis config (`genesis`, its consenter keys `keys`).
    pub fn new(keys: &ClusterKeys, genesis: &[u8]) -> Result<Switches, String> {
        let rules: Arc<dyn ConfigRules> = Arc::new(SimRules::STRICT);
        let config = SimConfig::decode(genesis).map_err(|e| format!("genesis config: {e}"))?;
        Ok(Switches {
            sets: ConsenterSets::new(keys, Some(rules)),
            genesis_parties: config.ids(),
            config,
            switched: Vec::new(),
            wrong_set_checked: 0,
            removed_signer_refused: 0,
        })
    }

    /// The parties of the config of epoch `epoch`.
    pub fn parties_of(&self, epoch: u64) -> Option<Vec<u32>> {
        match epoch {
            0 => Some(self.genesis_parties.clone()),
            e => self
                .switched
                .get(usize::try_from(e - 1).ok()?)
                .map(|s| s.parties.clone()),
        }
    }

    /// The config in force after the decisions checked so far.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The epoch in force after decision `decision` (switches at or below it).
    pub fn epoch_after(&self, decision: u64) -> u64 {
        self.switched.iter().filter(|s| s.decision <= decision).count() as u64
    }

    /// The decision that started epoch `epoch` (0 for the genesis set).
    pub fn start_of(&self, epoch: u64) -> Option<u64> {
        match epoch {
            0 => Some(0),
            e => self
                .switched
                .get(usize::try_from(e - 1).ok()?)
                .map(|s| s.decision),
        }
    }

    /// The config of epoch `epoch`.
    pub fn config_of(&self, epoch: u64) -> Option<&[u8]> {
        let e = usize::try_from(epoch).ok()?.checked_sub(1)?;
        self.switched.get(e).map(|s| s.config.as_slice())
    }

    /// Checks a new decision (the first delivery of its number) and moves on with it.
    pub fn on_decision(
        &mut self,
        cfg: &ArmaConfig,
        decision: &Decision,
        outcome: &Outcome,
        wire: &pb::Decision,
    ) -> Result<(), String> {
        let seq = decision.seq();
        self.check_certificate(seq, wire)?;
        let valid =
            decision
                .proposal
                .requests
                .iter()
                .find_map(|r| match consenter::application::decode(cfg, r) {
                    Ok(Item::ConfigUpdate(u)) => {
                        let update = SimUpdate::decode(&u).ok()?;
                        let next = SimRules::STRICT.check(&self.config, &update).ok()?;
                        Some((u, next))
                    }
                    _ => None,
                });
        let epoch = self.switched.len() as u64;
        match (valid, &outcome.config) {
            (None, None) => Ok(()),
            (Some((update, next)), Some(change)) => {
                let bytes = next.encode();
                if change.epoch != epoch + 1 || change.sequence != next.sequence || change.config != bytes {
                    return Err(format!(
                        "reconfiguration: decision {seq} put config {} in force as epoch {}, the rules give \
                         sequence {} as epoch {}",
                        change.sequence,
                        change.epoch,
                        next.sequence,
                        epoch + 1
                    ));
                }
                self.check_switch_outcome(cfg, seq, outcome, &bytes)?;
                let removed = self
                    .config
                    .parties
                    .iter()
                    .find(|p| next.party(p.id).is_none())
                    .map(|p| (p.id, p.consenter.clone()));
                self.switched.push(Switch {
                    decision: seq,
                    config: bytes,
                    update,
                    parties: next.ids(),
                    removed,
                });
                self.config = next;
                Ok(())
            }
            (Some((_, next)), None) => Err(format!(
                "reconfiguration: decision {seq} holds an update valid against config {} (next {}) and \
                 switched nothing",
                self.config.sequence, next.sequence
            )),
            (None, Some(change)) => Err(format!(
                "reconfiguration: decision {seq} put config {} in force (epoch {}) though no update in it is \
                 valid under the rules against config {}",
                change.sequence, change.epoch, self.config.sequence
            )),
        }
    }

    /// A switch's outcome: its config block last among the headers, then every shard's
    /// next term last among the term changes (checked against the shard terms by the
    /// caller).
    fn check_switch_outcome(
        &self,
        cfg: &ArmaConfig,
        seq: u64,
        outcome: &Outcome,
        config: &[u8],
    ) -> Result<(), String> {
        let epoch = self.switched.len() as u64 + 1;
        let block = outcome.headers.last().filter(|h| h.is_config());
        let ok = block.is_some_and(|h| {
            h.digest == arma::OrderedHeader::config_digest(config) && h.seq == epoch && h.decision == seq
        }) && outcome.headers.iter().filter(|h| h.is_config()).count() == 1;
        if !ok {
            return Err(format!(
                "reconfiguration: switch decision {seq} has no config block of epoch {epoch} as its last header"
            ));
        }
        let shards = cfg.shards as usize;
        let tail = outcome
            .terms
            .len()
            .checked_sub(shards)
            .map(|i| &outcome.terms[i..]);
        if !tail.is_some_and(|t| t.iter().zip(0..).all(|(t, s)| t.shard == s)) {
            return Err(format!(
                "reconfiguration: switch decision {seq} does not end with a term change of every shard"
            ));
        }
        Ok(())
    }

    /// The certificate of new decision `seq` verifies under the set in force for it
    /// (learning the next set from a switch), and, after a switch, not under the set
    /// before.
    fn check_certificate(&mut self, seq: u64, wire: &pb::Decision) -> Result<(), String> {
        let epoch = self.epoch_after(seq.saturating_sub(1));
        if epoch > 0
            && let Some(start) = self.start_of(epoch)
        {
            // The set before: the one that certified the switch.
            let (chain, verifier, n) = self.sets.set_for(start);
            if verify_pb_decision(wire, &chain, verifier.as_ref(), &n).is_ok() {
                return Err(format!(
                    "certificates: decision {seq} of set {epoch} also verifies under set {} (the set before)",
                    epoch - 1
                ));
            }
            self.wrong_set_checked += 1;
        }
        self.sets.verify_decision(wire).map(|_| ()).map_err(|e| {
            format!("certificates: decision {seq} does not verify under the set in force for it (set {epoch}): {e}")
        })?;
        self.check_removed_signers(seq, epoch, wire)
    }

    /// For decision `seq` of set `epoch`, after a switch that removed a party: its
    /// certificate with one member's signature replaced by the removed replica's — a
    /// genuine commit signature over the same vote, by the key that replica held — must
    /// not verify (the quorum is of the members in force; the removed signer never
    /// counts).
    fn check_removed_signers(&mut self, seq: u64, epoch: u64, wire: &pb::Decision) -> Result<(), String> {
        let removed: Vec<(u32, PublicKey)> = self
            .switched
            .iter()
            .take(usize::try_from(epoch).unwrap_or(usize::MAX))
            .filter_map(|s| s.removed.clone())
            .collect();
        if removed.is_empty() {
            return Ok(());
        }
        let (chain, verifier, members) = self.sets.set_for(seq);
        let proof =
            DecisionProof::try_from(wire).map_err(|e| format!("certificates: decision {seq}: {e}"))?;
        let digest = bft::proposal_digest(
            proof.instance,
            proof.decision,
            &proof.requests_root,
            &proof.metadata,
        );
        let vote = bft::vote_bytes(
            &chain,
            bft::Phase::Commit,
            proof.instance,
            proof.view,
            proof.decision,
            &digest,
        );
        let q = members.quorum().q as usize;
        // q − 1 distinct members' valid signatures: one short of a quorum.
        let mut kept: Vec<pb::ConsenterSignature> = Vec::new();
        for s in &wire.signatures {
            let sig = bft::Signature(s.signature.clone());
            let fresh = !kept.iter().any(|k| k.signer == s.signer);
            if kept.len() + 1 < q
                && fresh
                && members.contains(s.signer)
                && verifier.verify(s.signer, &vote, &sig)
            {
                kept.push(s.clone());
            }
        }
        for (party, public) in removed {
            let replica = party - 1;
            let Some(key) = (0..GENERATIONS)
                .map(|g| consenter_key(replica, g))
                .find(|k| k.public_key() == public)
            else {
                continue;
            };
            let signature = EngineSigner::new(key).sign(&vote);
            let own = EngineVerifier::new(ClusterKeys::by_id(
                arma::DEFAULT_CHAIN,
                BTreeMap::from([(replica, public.clone())]),
            ));
            if !own.verify(replica, &vote, &signature) {
                return Err(format!(
                    "certificates: the removed replica {replica}'s signature over decision {seq} does not verify under its own key"
                ));
            }
            let mut forged = wire.clone();
            forged.signatures = kept.clone();
            forged.signatures.push(pb::ConsenterSignature {
                signer: replica,
                signature: signature.0,
            });
            if verify_pb_decision(&forged, &chain, verifier.as_ref(), &members).is_ok() {
                return Err(format!(
                    "certificates: decision {seq} of set {epoch} verifies with the signature of replica {replica} \
                     (party {party}, removed) standing in for a member's"
                ));
            }
            self.removed_signer_refused += 1;
        }
        Ok(())
    }

    /// Another correct consenter's certificate of decision `seq` (already checked once)
    /// verifies under the set in force for it.
    pub fn check_delivered(&self, party: u32, seq: u64, wire: &pb::Decision) -> Result<(), String> {
        let (chain, verifier, n) = self.sets.set_for(seq);
        verify_pb_decision(wire, &chain, verifier.as_ref(), &n)
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "certificates: consenter {party}'s decision {seq} does not verify under the set in force for it \
                     (set {}): {e}",
                    self.epoch_after(seq.saturating_sub(1))
                )
            })
    }
}
