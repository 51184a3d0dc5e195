//! The invariants of the ordering simulation, checked on every decision a correct
//! consenter delivers and at the end of a run.

mod switches;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use batcher::SignedBatch;
use bft::Decision;
use consenter::application::{ArmaConfig, Item, OrderedHeader, Outcome};
use types::digest::{Digest32, shard_of};
use wire::pb;

pub use switches::Switches;

/// `(shard, term, primary, seq)`.
type Slot = (u32, u64, u32, u64);

/// The checker's view of the run.
pub struct Checker {
    cfg: ArmaConfig,
    /// The Byzantine party, if any: only its primary may ever sign two batches for a slot.
    byzantine: Option<u32>,
    /// f+1, whatever the knobs say.
    f1: usize,
    /// The decisions as first delivered by a correct consenter, with their outcome.
    decisions: Vec<(bft::Digest, Outcome)>,
    /// Decided BAF signers per slot and digest.
    bafs: HashMap<(Slot, Digest32), BTreeSet<u32>>,
    /// Digests seen in decided BAFs per slot.
    digests: HashMap<Slot, BTreeSet<Digest32>>,
    /// Ordered `(shard, primary, seq)` → digest.
    ordered: HashMap<(u32, u32, u64), Digest32>,
    /// Each shard's term and last ordered seq after the last decision.
    terms: Vec<(u64, u64)>,
    /// Slots proven equivocated and the term that must be left.
    flagged: BTreeSet<Slot>,
    /// Client requests: bytes → times ordered.
    pub requests: HashMap<Arc<[u8]>, u32>,
    /// Requests a Byzantine party made (its flood): bytes → times ordered. They may be
    /// ordered; nothing requires it.
    pub injected: HashMap<Arc<[u8]>, u32>,
    /// Blocks in the chain.
    pub blocks: u64,
    /// Term changes decided.
    pub term_changes: u64,
    /// Decided complaints: their signers per (shard, term).
    complainers: HashMap<(u32, u64), BTreeSet<u32>>,
    /// Per block: its header hash and when a correct consenter first decided it (ms).
    chain: Vec<(Digest32, u64)>,
    /// The configs and consenter sets (reconfiguration scenarios).
    pub switches: Option<Switches>,
    /// Per ordered request, the epoch it was first ordered in (reconfiguration scenarios).
    first_epoch: HashMap<Arc<[u8]>, u64>,
    /// Requests ordered again in a later epoch than their first ordering.
    pub duplicates_across_switch: u64,
    /// The highest party id of the genesis config: a BAF signed by a party above it is
    /// a joined party's.
    genesis_parties: u32,
    /// BAFs of a joined party in decisions.
    pub joined_bafs: u64,
    /// The parties in force after the last decision checked, as the ledger's configs
    /// name them (read from the config itself, not through the view the consenters
    /// use), and those that left.
    in_force: Vec<u32>,
    left: Vec<u32>,
    /// Headers ordered after a switch that removed a party.
    pub headers_after_leave: u64,
}

/// The primary of `shard` in `term` among the parties `ids` (increasing): the
/// `((shard + term) mod N)`-th (Arma §4.3.4 primary rotation), computed here on its own so
/// that the checker does not take the rotation from the code it checks.
pub(crate) fn primary_of(ids: &[u32], shard: u32, term: u64) -> u32 {
    let n = ids.len().max(1) as u64;
    let index = (u64::from(shard) + term) % n;
    ids.get(index as usize).copied().unwrap_or(0)
}

/// f + 1 among `n` parties.
fn threshold(n: usize) -> usize {
    n.saturating_sub(1) / 3 + 1
}

impl Checker {
    /// A checker for a network described by `cfg`.
    pub fn new(cfg: ArmaConfig, byzantine: Option<u32>) -> Checker {
        let in_force = cfg.parties.ids().to_vec();
        let f1 = threshold(in_force.len());
        let terms = vec![(0, 0); cfg.shards as usize];
        Checker {
            in_force,
            left: Vec::new(),
            headers_after_leave: 0,
            genesis_parties: cfg.parties.max_id(),
            joined_bafs: 0,
            byzantine,
            cfg,
            f1,
            decisions: Vec::new(),
            bafs: HashMap::new(),
            digests: HashMap::new(),
            ordered: HashMap::new(),
            terms,
            flagged: BTreeSet::new(),
            requests: HashMap::new(),
            injected: HashMap::new(),
            blocks: 0,
            term_changes: 0,
            chain: Vec::new(),
            complainers: HashMap::new(),
            switches: None,
            first_epoch: HashMap::new(),
            duplicates_across_switch: 0,
        }
    }

    /// A Byzantine party made `request` (valid, but nobody needs it ordered).
    pub fn injected(&mut self, request: Arc<[u8]>) {
        self.injected.entry(request).or_insert(0);
    }

    /// A client submitted `request`.
    pub fn submitted(&mut self, request: Arc<[u8]>) {
        self.requests.entry(request).or_insert(0);
    }

    /// Correct consenter `party` delivered `decision` with `outcome` (served as `wire`
    /// when the consenters reconfigure); `batch` finds a persisted batch by header.
    pub fn on_deliver(
        &mut self,
        party: u32,
        decision: &Decision,
        outcome: &Outcome,
        wire: Option<&pb::Decision>,
        batch: &dyn Fn(&OrderedHeader) -> Option<Arc<SignedBatch>>,
        now: u64,
    ) -> Result<(), String> {
        let seq = decision.seq();
        let index = usize::try_from(seq).unwrap_or(usize::MAX).wrapping_sub(1);
        if let Some((digest, reference)) = self.decisions.get(index) {
            if *digest != decision.certificate.digest || reference != outcome {
                let switch = match (&reference.config, &outcome.config) {
                    (Some(_), None) => " (it did not switch where the others did)",
                    (None, Some(_)) => " (it switched where the others did not)",
                    _ => "",
                };
                return Err(format!(
                    "agreement: consenter {party} decided/computed something else at decision {seq}{switch}"
                ));
            }
            if let (Some(switches), Some(wire)) = (&self.switches, wire) {
                switches.check_delivered(party, seq, wire)?;
            }
            return Ok(());
        }
        if index != self.decisions.len() {
            return Err(format!("decision {seq} delivered before decision {}", index));
        }
        if let Some(switches) = self.switches.as_mut() {
            let wire = wire.ok_or("a reconfiguring consenter delivered no served decision")?;
            switches.on_decision(&self.cfg, decision, outcome, wire)?;
        }
        self.decisions
            .push((decision.certificate.digest, outcome.clone()));
        self.chain.extend(outcome.headers.iter().map(|h| (h.hash(), now)));
        self.on_new_decision(decision, outcome, batch)?;
        // From the next decision on, requests are read under the config this one put in
        // force (a party that joined signs BAFs, the primaries rotate over the new parties).
        if let Some(change) = &outcome.config {
            let config = crate::reconfig::SimConfig::decode(&change.config)
                .map_err(|e| format!("decision {seq}: the config it put in force: {e}"))?;
            self.cfg = self.cfg.with_view(&config.view()).map_err(|e| e.to_string())?;
            // A batch of a later decision needs f + 1 BAFs of the parties now in force.
            self.in_force = config.ids();
            self.left = config.left;
            self.f1 = threshold(self.in_force.len());
        }
        Ok(())
    }

    fn on_new_decision(
        &mut self,
        decision: &Decision,
        outcome: &Outcome,
        batch: &dyn Fn(&OrderedHeader) -> Option<Arc<SignedBatch>>,
    ) -> Result<(), String> {
        let before = self.terms.clone();
        let mut conflicts = Vec::new();
        for request in &decision.proposal.requests {
            let baf = match consenter::application::decode(&self.cfg, request) {
                Ok(Item::Baf(baf)) => baf,
                Ok(Item::Complaint(c)) => {
                    // Only a party in force has a say (a removed party's never counts).
                    if self.in_force.contains(&c.signer) {
                        self.complainers
                            .entry((c.shard, c.term))
                            .or_default()
                            .insert(c.signer);
                    }
                    continue;
                }
                // Config updates: `Switches` checks them.
                Ok(Item::ConfigUpdate(_)) | Err(_) => continue,
            };
            let h = baf.header;
            let slot = (h.id.shard, h.term, h.id.primary, h.id.seq);
            if !self.in_force.contains(&baf.signer) {
                continue; // a removed party's BAF attests nothing
            }
            if baf.signer > self.genesis_parties {
                self.joined_bafs += 1;
            }
            self.bafs.entry((slot, h.digest)).or_default().insert(baf.signer);
            let set = self.digests.entry(slot).or_default();
            if set.insert(h.digest) && set.len() == 2 {
                if Some(h.id.primary) != self.byzantine {
                    return Err(format!(
                        "correct primary {} signed two batches for {slot:?} (a restart reused a seq?)",
                        h.id.primary
                    ));
                }
                conflicts.push(slot);
            }
        }
        for header in &outcome.headers {
            self.on_header(header, batch)?;
        }
        // A switch moves every shard to its next term at the end of its decision (the
        // oracle checked those are the last term changes, one per shard in order).
        let switched = if outcome.config.is_some() {
            self.cfg.shards as usize
        } else {
            0
        };
        let (regular, switch) = outcome
            .terms
            .split_at(outcome.terms.len().saturating_sub(switched));
        for t in regular {
            self.on_regular_term(t)?;
        }
        self.on_switch_terms(decision.seq(), switch)?;
        self.check_equivocations(&before, conflicts)
    }

    /// A term change not made by a switch: it needs a cause a correct party stands
    /// behind (invariant 7), and f+1 complaints of parties in force or a proven
    /// equivocation.
    fn on_regular_term(&mut self, t: &arma::TermChange) -> Result<(), String> {
        self.term_changes += 1;
        let entry = self
            .terms
            .get_mut(t.shard as usize)
            .ok_or("term change of an unknown shard")?;
        if t.term <= entry.0 {
            return Err(format!(
                "shard {} went back from term {} to {}",
                t.shard, entry.0, t.term
            ));
        }
        let old = entry.0;
        let equivocated = self
            .digests
            .iter()
            .any(|((shard, term, _, _), set)| *shard == t.shard && *term == old && set.len() >= 2);
        let correct_complaint = self
            .complainers
            .get(&(t.shard, old))
            .is_some_and(|signers| signers.iter().any(|p| Some(*p) != self.byzantine));
        if !equivocated && !correct_complaint {
            return Err(format!(
                "shard {} left term {old} with neither a proven equivocation nor a correct party's \
                 complaint: the Byzantine party's complaints alone changed it",
                t.shard
            ));
        }
        let complaints = self.complainers.get(&(t.shard, old)).map_or(0, BTreeSet::len);
        if self.switches.is_some() && !equivocated && complaints < self.f1 {
            return Err(format!(
                "shard {} left term {old} on {complaints} complaints of parties in force {:?}, f+1 = {}",
                t.shard, self.in_force, self.f1
            ));
        }
        if let Some(entry) = self.terms.get_mut(t.shard as usize) {
            *entry = (t.term, t.last_ordered_seq);
        }
        Ok(())
    }

    /// The term changes a switch made at decision `seq`: every shard to its next term,
    /// from its last ordered seq.
    fn on_switch_terms(&mut self, seq: u64, terms: &[arma::TermChange]) -> Result<(), String> {
        for t in terms {
            self.term_changes += 1;
            let entry = self
                .terms
                .get_mut(t.shard as usize)
                .ok_or("term change of an unknown shard")?;
            if t.term != entry.0 + 1 || t.last_ordered_seq != entry.1 {
                return Err(format!(
                    "reconfiguration: the switch at decision {} moved shard {} from (term, last seq) {:?} to ({}, {})",
                    seq, t.shard, entry, t.term, t.last_ordered_seq
                ));
            }
            *entry = (t.term, t.last_ordered_seq);
        }
        Ok(())
    }

    fn on_header(
        &mut self,
        header: &OrderedHeader,
        batch: &dyn Fn(&OrderedHeader) -> Option<Arc<SignedBatch>>,
    ) -> Result<(), String> {
        if header.is_config() {
            // A config block: the oracle checked it (`Switches`); no batch, no BAFs.
            if self.switches.is_none() {
                return Err(format!(
                    "block {}: a config block in a network without updates",
                    header.number
                ));
            }
            if header.number != self.blocks {
                return Err(format!(
                    "block number {} after {} blocks",
                    header.number, self.blocks
                ));
            }
            self.blocks += 1;
            return Ok(());
        }
        let slot = (header.shard, header.term, header.primary, header.seq);
        self.check_attested(header, slot)?;
        let id = (header.shard, header.primary, header.seq);
        if let Some(d) = self.ordered.insert(id, header.digest) {
            return Err(format!(
                "batch {id:?} ordered twice (digests {} and {})",
                hex(&d),
                hex(&header.digest)
            ));
        }
        if header.number != self.blocks {
            return Err(format!(
                "block number {} after {} blocks",
                header.number, self.blocks
            ));
        }
        self.blocks += 1;
        let Some(b) = batch(header) else {
            return Err(format!(
                "block {}: no batcher persisted batch {slot:?}",
                header.number
            ));
        };
        let epoch = self.switches.as_ref().map_or(0, |s| s.switched.len() as u64);
        for r in &b.requests {
            let times = self.requests.get_mut(r).or_else(|| self.injected.get_mut(r));
            match times {
                Some(times) if shard_of(r, self.cfg.shards).ok() == Some(header.shard) => {
                    *times += 1;
                    if self.switches.is_some() {
                        let first = *self.first_epoch.entry(Arc::clone(r)).or_insert(epoch);
                        if *times > 1 && first != epoch {
                            self.duplicates_across_switch += 1;
                        }
                    }
                }
                _ => {
                    return Err(format!(
                        "block {}: a request no client sent to shard {}",
                        header.number, header.shard
                    ));
                }
            }
        }
        if let Some(t) = self.terms.get_mut(header.shard as usize) {
            t.1 = header.seq;
        }
        Ok(())
    }

    /// An ordered header names the term's primary over the parties in force
    /// (invariant 15) and has f+1 BAFs of parties in force (invariants 2 and 16).
    fn check_attested(&mut self, header: &OrderedHeader, slot: Slot) -> Result<(), String> {
        let primary = primary_of(&self.in_force, header.shard, header.term);
        if header.primary != primary {
            return Err(format!(
                "block {} ({slot:?}): primary {} ordered, the term's primary over the parties in force {:?} is {primary}",
                header.number, header.primary, self.in_force
            ));
        }
        if !self.left.is_empty() {
            self.headers_after_leave += 1;
        }
        let signers = self
            .bafs
            .get(&(slot, header.digest))
            .map_or(0, |s| s.iter().filter(|p| self.in_force.contains(p)).count());
        if signers < self.f1 {
            return Err(format!(
                "block {} ({slot:?}) ordered with {signers} BAFs of parties in force {:?}, f+1 = {}",
                header.number, self.in_force, self.f1
            ));
        }
        Ok(())
    }

    /// A slot with two primary-signed digests, of the shard's term and primary at the
    /// start of the decision and still unordered after it, must have moved the term on.
    fn check_equivocations(&mut self, before: &[(u64, u64)], conflicts: Vec<Slot>) -> Result<(), String> {
        for slot in conflicts {
            let (shard, term, primary, seq) = slot;
            let Some(&(t0, last0)) = before.get(shard as usize) else {
                continue;
            };
            let live = term == t0
                && primary == self.cfg.primary_of(shard, t0)
                && seq > last0
                && seq - last0 <= self.cfg.max_seqs_ahead;
            if !live || self.ordered.contains_key(&(shard, primary, seq)) || !self.flagged.insert(slot) {
                continue;
            }
            let now = self.terms.get(shard as usize).map_or(0, |t| t.0);
            if now <= term {
                return Err(format!(
                    "primary {primary} equivocated at {slot:?} and shard {shard} stayed in term {now}"
                ));
            }
        }
        Ok(())
    }

    /// Whether `request` was ordered.
    pub fn is_ordered(&self, request: &Arc<[u8]>) -> bool {
        self.requests.get(request).is_some_and(|n| *n > 0)
    }

    /// The requests never ordered, and the number of extra orderings.
    pub fn unordered_and_duplicates(&self) -> (Vec<Arc<[u8]>>, u64) {
        // Sorted: the caller schedules events in this order, and a seed must replay exactly
        // (a HashMap's iteration order differs from process to process).
        let mut missing: Vec<Arc<[u8]>> = self
            .requests
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(r, _)| Arc::clone(r))
            .collect();
        missing.sort();
        let dups = self
            .requests
            .values()
            .map(|n| u64::from(n.saturating_sub(1)))
            .sum();
        (missing, dups)
    }

    /// When block `number` was first decided, if it was.
    pub fn ordered_at(&self, number: u64) -> Option<u64> {
        usize::try_from(number)
            .ok()
            .and_then(|n| self.chain.get(n))
            .map(|(_, at)| *at)
    }

    /// A correct assembler of `party` appended `block`: it must be the header the
    /// consenters ordered at that number, and its requests must hash to the ordered digest
    /// (so every correct assembler holds the same blocks).
    pub fn on_block(&mut self, party: u32, block: &assembler::core::Block) -> Result<(), String> {
        let n = block.header.number;
        let Some((hash, _)) = usize::try_from(n).ok().and_then(|i| self.chain.get(i)) else {
            return Err(format!(
                "assembler {party}: block {n} appended before a correct consenter ordered it"
            ));
        };
        if block.header.hash() != *hash {
            return Err(format!(
                "assembler {party}: block {n}'s header is not the one the consenters ordered"
            ));
        }
        if types::digest::batch_digest(&block.requests) != block.header.digest {
            return Err(format!(
                "assembler {party}: block {n}'s requests do not hash to the ordered digest"
            ));
        }
        if block.header.is_config() {
            let config = self.switches.as_ref().and_then(|s| s.config_of(block.header.seq));
            if config.is_none_or(|c| block.requests.len() != 1 || block.requests[0].as_ref() != c) {
                return Err(format!(
                    "assembler {party}: config block {n} does not hold the config of epoch {}",
                    block.header.seq
                ));
            }
        }
        Ok(())
    }

    /// Whether every client request is ordered.
    pub fn all_ordered(&self) -> bool {
        self.requests.values().all(|n| *n > 0)
    }

    /// Decisions seen.
    pub fn decided(&self) -> usize {
        self.decisions.len()
    }

    /// Terms per shard (for reports).
    pub fn terms(&self) -> BTreeMap<u32, u64> {
        (0u32..).zip(self.terms.iter().map(|t| t.0)).collect()
    }
}

fn hex(d: &Digest32) -> String {
    d.iter().take(6).map(|b| format!("{b:02x}")).collect()
}
