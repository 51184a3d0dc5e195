//! The invariants checked after every simulation step.

use std::collections::{BTreeSet, HashMap, HashSet};

use bft::crypto::TestKeys;
use bft::{Decision, Digest, ReplicaId, Seq, verify_decision};

use super::app::{SimSet, is_reconfiguration, sim_chain};

/// Tracks what correct replicas decided and what clients submitted.
#[derive(Debug, Default)]
pub struct Checker {
    /// First digest decided at each sequence by any correct replica.
    decided: HashMap<Seq, Digest>,
    /// Sequence at which each request was decided.
    request_seq: HashMap<Digest, Seq>,
    /// Requests submitted by clients.
    submitted: HashSet<Digest>,
    /// Highest sequence delivered by each correct replica.
    delivered: HashMap<ReplicaId, Seq>,
    /// Reconfiguration: the replica sets in order (empty: one set, not checked here).
    pub sets: Vec<SimSet>,
    /// The decisions that switched sets, as the decided ledger says.
    switch_seqs: BTreeSet<Seq>,
}

impl Checker {
    /// Records a client submission.
    pub fn submitted(&mut self, request: &[u8]) {
        self.submitted.insert(Digest::of_request(request));
    }

    /// Number of distinct submitted requests.
    pub fn submitted_count(&self) -> usize {
        self.submitted.len()
    }

    /// Highest sequence delivered by `replica`.
    pub fn delivered(&self, replica: ReplicaId) -> Seq {
        self.delivered.get(&replica).copied().unwrap_or(0)
    }

    /// Submitted requests that `replica` has not delivered yet.
    pub fn undecided_at(&self, replica: ReplicaId) -> usize {
        let height = self.delivered(replica);
        self.submitted
            .iter()
            .filter(|d| self.request_seq.get(d).is_none_or(|s| *s > height))
            .count()
    }

    /// Requests not decided by anyone yet.
    pub fn undecided(&self) -> Vec<Digest> {
        self.submitted
            .iter()
            .filter(|d| !self.request_seq.contains_key(d))
            .copied()
            .collect()
    }

    /// Checks a snapshot installed by correct replica `replica` after decision `seq`
    /// (state transfer): its head must be the decision a correct replica delivered at
    /// `seq`. The replica then counts as having delivered up to `seq`.
    pub fn on_install(&mut self, replica: ReplicaId, seq: Seq, head: [u8; 8]) -> Result<(), String> {
        if let Some(d) = self.decided.get(&seq)
            && d.0[..8] != head
        {
            return Err(format!(
                "AGREEMENT violated: replica {replica} installed a snapshot at seq {seq} whose head is not the decided proposal"
            ));
        }
        let prev = self.delivered(replica);
        self.delivered.insert(replica, prev.max(seq));
        Ok(())
    }

    /// The epoch of the set in force after the last decision (a decision switches at
    /// most once, so the cluster may end before the last set).
    pub fn current_epoch(&self) -> usize {
        self.switch_seqs.len()
    }

    /// The epoch of the set in force for decision `seq` (the switches before it).
    fn epoch_at(&self, seq: Seq) -> usize {
        self.switch_seqs.range(..seq).count()
    }

    /// Checks that correct replica `replica`, whose last decision is `last`, works in
    /// the set the ledger says is in force after it and switched where the ledger did.
    pub fn check_set(&self, replica: ReplicaId, epoch: u64, start: Seq, last: Seq) -> Result<(), String> {
        let expected = self.switch_seqs.range(..=last).count() as u64;
        let expected_start = self.switch_seqs.range(..=last).next_back().copied().unwrap_or(0);
        if epoch != expected || start != expected_start {
            return Err(format!(
                "SET: replica {replica} after decision {last} is in epoch {epoch} since {start}; \
                 the decisions say epoch {expected} since {expected_start}"
            ));
        }
        Ok(())
    }

    /// Checks a decision delivered by correct replica `replica`: agreement,
    /// validity (submitted, decided once), in-order delivery and, with several replica
    /// sets, a certificate of the set in force at its sequence.
    pub fn on_deliver(&mut self, replica: ReplicaId, d: &Decision) -> Result<(), String> {
        let seq = d.seq();
        let digest = d.proposal.digest();
        if !self.sets.is_empty() {
            let e = self.epoch_at(seq);
            let set = &self.sets[e];
            if let Some((id, _)) = d
                .certificate
                .signatures
                .iter()
                .find(|(id, _)| !set.members.contains(*id))
            {
                return Err(format!(
                    "REMOVED: replica {replica} delivered decision {seq} whose certificate counts replica {id}, \
                     not a member of set {e} {:?}",
                    set.members
                ));
            }
            let chain = bft::set_chain(sim_chain(e as u64), e as u64);
            if let Err(err) = verify_decision(d, &chain, &TestKeys::new(set.keys), &set.members) {
                return Err(format!(
                    "CERTIFICATE: replica {replica} delivered decision {seq} not certified by set {e}: {err}"
                ));
            }
        }
        let prev = self.delivered(replica);
        if seq > prev + 1 {
            return Err(format!("replica {replica} delivered seq {seq} after {prev}"));
        }
        match self.decided.get(&seq) {
            Some(first) if *first != digest => {
                return Err(format!(
                    "AGREEMENT violated at seq {seq}: replica {replica} decided {digest:?}, another correct replica {first:?}"
                ));
            }
            Some(_) => {}
            None => {
                self.decided.insert(seq, digest);
                let mut in_batch = HashSet::new();
                for r in &d.proposal.requests {
                    let rd = Digest::of_request(r);
                    if !self.submitted.contains(&rd) {
                        return Err(format!("VALIDITY: seq {seq} holds a request no client submitted"));
                    }
                    if !in_batch.insert(rd) {
                        return Err(format!("VALIDITY: seq {seq} holds a request twice"));
                    }
                    if let Some(other) = self.request_seq.insert(rd, seq) {
                        return Err(format!(
                            "VALIDITY: request decided at seq {other} and again at {seq}"
                        ));
                    }
                }
                if self.switch_seqs.len() + 1 < self.sets.len()
                    && d.proposal.requests.iter().any(|r| is_reconfiguration(r))
                {
                    self.switch_seqs.insert(seq);
                }
            }
        }
        if seq == prev + 1 {
            self.delivered.insert(replica, seq);
        }
        Ok(())
    }
}

/// `None` if `leader` is the `view mod len`-th member of the set of one of `epochs` (the
/// set before or after an input: an input may install a view and then switch; without
/// sets, `0..first_n`), computed from the scenario's sets, not by the engine; otherwise
/// what is wrong.
pub fn view_leader_error(
    sets: &[SimSet],
    first_n: u32,
    view: bft::View,
    leader: ReplicaId,
    epochs: [u64; 2],
) -> Option<String> {
    let expected = |epoch: u64| -> ReplicaId {
        let ids: Vec<ReplicaId> = match sets.get(epoch as usize) {
            Some(set) => set.members.ids().to_vec(),
            None => (0..first_n.max(1)).collect(),
        };
        ids[(view % ids.len() as u64) as usize]
    };
    epochs.iter().all(|e| expected(*e) != leader).then(|| {
        format!(
            "installed view {view} led by r{leader}; the set's rotation says r{}",
            expected(epochs[1])
        )
    })
}
