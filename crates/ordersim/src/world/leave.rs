//! A party leaving through a config update (docs/ordering-sim.md "A party leaving"):
//! which party the leaving update removes, a party crashed for good, what its nodes do
//! from the switch on, and the clients' acknowledgements across it.

use std::sync::Arc;

use rand::Rng;

use super::{Ev, Gone, World};
use crate::LeaveKind;
use crate::reconfig::SimConfig;

impl World {
    /// The party the leaving update `leave` removes from `current`, chosen at its first
    /// submission (and kept for the re-sends and a competing update); a party crashed for
    /// good goes down now.
    pub(super) fn leaving_party(&mut self, leave: crate::Leave, current: &SimConfig) -> Result<u32, String> {
        if let Some(p) = self.reconf.as_ref().and_then(|r| r.leaving) {
            return Ok(p);
        }
        let ids = current.ids();
        let byzantine = self.sc.byzantine.map(|(p, _)| p);
        let correct: Vec<u32> = ids.iter().copied().filter(|p| Some(*p) != byzantine).collect();
        let random =
            |w: &mut World, among: &[u32]| among.get(w.k.rng().gen_range(0..among.len().max(1))).copied();
        let party = match leave.kind {
            LeaveKind::Byzantine => byzantine.filter(|p| ids.contains(p)),
            LeaveKind::CrashedForGood | LeaveKind::Honest => random(self, &correct),
            LeaveKind::Primary => {
                let term = self.checker.terms().get(&leave.shard).copied().unwrap_or(0);
                Some(crate::checker::primary_of(&ids, leave.shard, term))
            }
            LeaveKind::Leader => {
                let leader = (0..self.sc.total_parties())
                    .filter(|c| self.is_correct_consenter(*c))
                    .filter_map(|c| self.consenters[c as usize].replica.as_ref())
                    .find(|r| r.is_member())
                    .map(|r| r.config().leader(r.view()) + 1)
                    .filter(|p| ids.contains(p));
                // No correct member up to ask (all crashed now): a correct party.
                leader.or_else(|| random(self, &correct))
            }
        };
        let party =
            party.ok_or_else(|| format!("leave: no party of {ids:?} is a {:?} to remove", leave.kind))?;
        if let Some(r) = self.reconf.as_mut() {
            r.leaving = Some(party);
        }
        self.report.left = Some((party, leave.kind));
        self.trace_line(|| format!("party {party} ({:?}) is to leave", leave.kind));
        if leave.kind == LeaveKind::CrashedForGood {
            self.down_for_good(party);
        }
        Ok(party)
    }

    /// Party `party`'s nodes crash and never come back: its consenter, its batchers
    /// (their stores with them) and its assembler.
    fn down_for_good(&mut self, party: u32) {
        self.trace_line(|| format!("party {party}: every node down for good"));
        let c = party - 1;
        self.consenters[c as usize].replica = None;
        self.consenters[c as usize].dead = true;
        for shard in 0..self.sc.shards {
            let b = self.b_index(party, shard);
            let node = &mut self.batchers[b];
            node.core = None;
            node.gone = Some(Gone::Down);
        }
        if let Some(a) = self.assemblers.get_mut(c as usize) {
            *a = None;
        }
    }

    /// At a switch: the parties in force change for the clients. A request whose
    /// acknowledgements came from routers of a party that left, and no longer reach 2f+1
    /// of the parties in force, counts as not acknowledged: its client sends it again to
    /// the routers in force (docs/ordering-sim.md "A party leaving"). A party that left
    /// has its assembler stop.
    pub(super) fn on_parties_changed(&mut self) {
        let Some(config) = self.checker.switches.as_ref().map(|s| s.config().clone()) else {
            return;
        };
        let gone: Vec<u32> = self
            .in_force
            .iter()
            .copied()
            .filter(|p| config.party(*p).is_none())
            .collect();
        self.in_force = config.ids();
        self.left.clone_from(&config.left);
        if gone.is_empty() {
            return;
        }
        for &p in &gone {
            self.report.parties_left += 1;
            if let Some(a) = self.assemblers.get_mut(p as usize - 1) {
                *a = None;
            }
        }
        if !self.sc.acked_clients() {
            return;
        }
        let quorum = types::quorum::client_acks(self.in_force.len());
        let mut again: Vec<Arc<[u8]>> = self
            .acked
            .iter()
            .filter(|r| !self.checker.is_ordered(r))
            .filter(|r| self.acks_in_force(r) < quorum)
            .cloned()
            .collect();
        again.sort();
        for request in again {
            self.acked.remove(&request);
            self.report.acks_lost_at_leave += 1;
            let at = self.k.rng().gen_range(1..50);
            self.k.schedule_in(at, Ev::Client(request));
        }
    }

    /// Batcher `b` was fed the decision that removed its party: a correct one stops for
    /// good (as a removed party's nodes stop themselves at the switch) and its store
    /// stays readable for fetches of what it holds (it drains); a Byzantine one goes on
    /// under the config it had, and from now on also attests and complains under the new
    /// config (every consenter must refuse both).
    pub(super) fn batcher_left(&mut self, b: usize, config: &[u8]) {
        let Ok(config) = SimConfig::decode(config) else {
            return;
        };
        let node = &self.batchers[b];
        if config.party(node.party).is_some() || node.gone.is_some() {
            return;
        }
        let (party, shard) = (node.party, node.shard);
        self.trace_line(|| {
            format!(
                "batcher {b} (party {party}, shard {shard}) left at config {}",
                config.sequence
            )
        });
        if self.byz(party).is_some() {
            self.batchers[b].gone = Some(Gone::Zombie {
                config: config.sequence,
                parties: config.ids(),
            });
            return;
        }
        let node = &mut self.batchers[b];
        node.core = None;
        node.gone = Some(Gone::Drains);
    }

    /// A removed Byzantine party's batcher, every resend period: attests under the config
    /// that removed it every batch the shard's primary (over the parties in force) serves
    /// in its current term, and complains against that primary.
    pub(super) fn zombie(&mut self, b: usize) {
        let Some(Gone::Zombie { config, parties }) = self.batchers[b].gone.clone() else {
            return;
        };
        let (party, shard) = (self.batchers[b].party, self.batchers[b].shard);
        let Some(key) = self.signing_key(b) else {
            return;
        };
        let term = self.checker.terms().get(&shard).copied().unwrap_or(0);
        let primary = crate::checker::primary_of(&parties, shard, term);
        let p = self.b_index(primary, shard);
        let mut served: Vec<Arc<batcher::SignedBatch>> = self.batchers[p]
            .served
            .iter()
            .filter(|((_, t), _)| *t == term)
            .map(|(_, batch)| Arc::clone(batch))
            .collect();
        served.sort_by_key(|batch| batch.id().seq);
        served.truncate(4);
        for batch in served {
            let baf = batcher::Baf::sign_at(config, &batch, party, &key);
            self.report.removed_sent += 1;
            let seq = batch.id().seq;
            self.submit(b, term, seq, consenter::application::encode_baf(&baf));
        }
        let complaint = batcher::Complaint::sign_at(
            config,
            shard,
            term,
            party,
            batcher::ComplaintReason::Censorship,
            &key,
        );
        self.report.removed_sent += 1;
        self.submit(b, term, 0, consenter::application::encode_complaint(&complaint));
    }
}
