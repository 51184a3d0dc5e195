//! The assemblers' simulated shells around the real core (`assembler::core::Core`).
//!
//! One assembler per correct party follows the consenters' decisions as the node does
//! (its own party's consenter first, see `follow`), hands
//! each decision's headers to the core, and fetches the batch the core waits for from the
//! batchers of its shard as the node does: every batcher of the shard is asked at once
//! (its own party's first), each call bounded by a timeout that doubles per round; the
//! first answer whose header fields are the ordered ones *and* whose requests hash to the
//! ordered digest is handed to the core; when a round ends without one, the next starts
//! after a pause. A batcher answers from its own store only: a batch is fetchable from
//! the batchers that persisted it. A Byzantine party's batchers may forge requests under
//! the ordered header, hang or refuse.
//!
//! In a reconfiguration scenario an assembler verifies each decision as the node does,
//! under the consenter set in force for it (`arma::ConsenterSets`, learning the next set
//! from a switch), takes the headers the certificate proves, and appends a config block
//! with the config the decision carried as its data (`node::main_loop`).
//!
//! The trusting shell (negative test only) is the fetch as it was before it was fixed:
//! batchers asked one at a time in the same order, each call without a timeout, and the
//! first answer whose header fields match handed to the core and the fetch ended.

use std::sync::Arc;

use arma::{ConsenterSets, DecisionProof, OrderedHeader, TermChange};
use assembler::core::{Core, Limits, OfferedBatch, Wanted};
use rand::Rng;
use types::BatchId;
use types::digest::batch_digest;

use super::follow::Follow;
use super::{Byzantine, Ev, World};

/// How long one batcher may take to answer a fetch in the first round (ms); each later
/// round doubles it, up to 16 times.
pub const FETCH_TIMEOUT_MS: u64 = 100;

/// The pause between two fetch rounds of one block (ms).
pub const FETCH_RETRY_MS: u64 = 30;

/// The assemblers' liveness bound: after GST every correct assembler holds every
/// ordered block within this long (ms) of the later of GST and the block's first
/// decision by a correct consenter.
pub const ASSEMBLER_BOUND_MS: u64 = 5_000;

/// The fetch of one block's batch.
pub(super) struct Fetch {
    want: Wanted,
    round: u32,
    started: u64,
    asked: usize,
    answered: usize,
    /// When the round ended without the batch (the next one starts after a pause).
    over: Option<u64>,
    /// The trusting shell: the index (in the shard's batchers) of the one asked now.
    next: usize,
}

/// One assembler's shell.
pub(super) struct ANode {
    party: u32,
    core: Core,
    /// Decisions handed to the core (the index of the next one in the decisions log).
    fed: usize,
    /// Blocks appended to its ledger.
    height: u64,
    fetch: Option<Fetch>,
    /// The consenter it reads decisions from.
    follow: Follow,
    /// The consenter sets it verifies decisions with (reconfiguration scenarios).
    sets: Option<ConsenterSets>,
}

/// Hands the core one verified decision; a config block's data is the config the
/// decision carried (its hash certified), offered at once, as the node does.
fn feed_decision(
    node: &mut ANode,
    proof: Arc<DecisionProof>,
    headers: &[OrderedHeader],
    terms: &[TermChange],
    config: Option<Vec<u8>>,
) -> Result<(), String> {
    let party = node.party;
    node.core
        .on_decision(proof, headers, terms)
        .map_err(|e| format!("assembler {party}: {e}"))?;
    if let Some(config) = config
        && let Some(h) = headers.iter().find(|h| h.is_config())
    {
        node.core
            .offer(OfferedBatch {
                shard: h.shard,
                primary: h.primary,
                seq: h.seq,
                digest: h.digest,
                requests: vec![Arc::from(config.as_slice())],
            })
            .map_err(|e| format!("assembler {party}: its config block was refused: {e}"))?;
    }
    node.fed += 1;
    Ok(())
}

/// How a lying batcher answers one fetch.
#[derive(Clone, Copy)]
enum Lie {
    /// The ordered header fields with other requests.
    Forge,
    /// No answer at all.
    Hang,
    /// "Not held".
    Refuse,
}

fn fetch_timeout(round: u32) -> u64 {
    FETCH_TIMEOUT_MS.saturating_mul(1 << round.min(4))
}

fn same_header(w: &Wanted, b: &OfferedBatch) -> bool {
    (b.shard, b.primary, b.seq, b.digest) == (w.shard, w.primary, w.seq, w.digest)
}

/// The node's check: the ordered id and digest, and requests that hash to that digest
/// (a batcher's header fields alone are not trusted).
fn is_wanted(w: &Wanted, b: &OfferedBatch) -> bool {
    same_header(w, b) && batch_digest(&b.requests) == w.digest
}

fn offered(batch: &batcher::SignedBatch) -> OfferedBatch {
    let id = batch.id();
    OfferedBatch {
        shard: id.shard,
        primary: id.primary,
        seq: id.seq,
        digest: batch.header.digest,
        requests: batch.requests.clone(),
    }
}

impl World {
    /// Starts an assembler for every party whose nodes are all correct.
    pub(super) fn build_assemblers(&mut self) {
        let sets = self.reconf.as_ref().map(|r| {
            let rules: Arc<dyn arma::ConfigRules> = Arc::new(crate::reconfig::SimRules::STRICT);
            ConsenterSets::new(&r.genesis_keys, Some(rules))
        });
        for party in 1..=self.sc.total_parties() {
            let node = self.byz(party).is_none().then(|| ANode {
                party,
                core: Core::new(Limits::default(), 0, None),
                fed: 0,
                height: 0,
                fetch: None,
                follow: Follow::of(party),
                sets: sets.clone(),
            });
            self.assemblers.push(node);
            self.k.first_tick(Ev::ATick((party - 1) as usize));
        }
    }

    /// Whether a Byzantine party's batchers lie to fetches.
    pub(super) fn lies_to_fetches(&self, party: u32) -> bool {
        match self.byz(party) {
            Some(Byzantine::FetchLiar | Byzantine::CompactLiar) => true,
            Some(_) => self.sc.lies,
            None => false,
        }
    }

    /// Whether every correct assembler holds every ordered block.
    pub(super) fn assembled(&self) -> bool {
        self.assemblers
            .iter()
            .flatten()
            .all(|a| a.height == self.checker.blocks)
    }

    pub(super) fn a_tick(&mut self, a: usize) -> Result<(), String> {
        if self.assemblers.get(a).is_none_or(Option::is_none) {
            return Ok(());
        }
        self.feed_assembler(a)?;
        self.append_blocks(a)?;
        self.fetch_missing(a);
        self.check_assembler_lag(a)
    }

    /// Hands the core the decisions it has not seen, while it has room.
    fn feed_assembler(&mut self, a: usize) -> Result<(), String> {
        loop {
            let Some(node) = self.assemblers[a].as_ref() else {
                return Ok(());
            };
            if !node.core.has_room() {
                return Ok(());
            }
            let (party, index, mut follow) = (node.party, node.fed, node.follow);
            let outcome = self.follow(&mut follow, index);
            if let Some(node) = self.assemblers[a].as_mut() {
                node.follow = follow;
            }
            let Some(logged) = outcome else {
                return Ok(());
            };
            let Some(node) = self.assemblers[a].as_mut() else {
                return Ok(());
            };
            let decision = index as u64 + 1;
            let (proof, headers, terms, config) = match (node.sets.as_mut(), logged.wire.as_ref()) {
                (Some(sets), Some(wire)) => {
                    let v = sets.verify_decision(wire).map_err(|e| {
                        format!("assembler {party}: decision {decision} does not verify under the set in force for it: {e}")
                    })?;
                    let proof =
                        DecisionProof::try_from(wire).map_err(|e| format!("assembler {party}: {e}"))?;
                    (Arc::new(proof), v.headers, v.terms, v.config.map(|(_, c)| c))
                }
                _ => (
                    Arc::new(DecisionProof {
                        instance: bft::InstanceId(0),
                        decision,
                        view: 0,
                        requests_root: [0; 32],
                        metadata: Vec::new(),
                        signatures: Vec::new(),
                    }),
                    logged.outcome.headers.clone(),
                    logged.outcome.terms.clone(),
                    None,
                ),
            };
            feed_decision(node, proof, &headers, &terms, config)?;
        }
    }

    /// Appends the blocks the core completed, each checked against the ordered chain.
    fn append_blocks(&mut self, a: usize) -> Result<(), String> {
        let Some(node) = self.assemblers[a].as_mut() else {
            return Ok(());
        };
        let blocks = node.core.take_blocks();
        let party = node.party;
        for block in blocks {
            let Some(node) = self.assemblers[a].as_mut() else {
                return Ok(());
            };
            if block.header.number != node.height {
                return Err(format!(
                    "assembler {party}: block {} appended at height {}",
                    block.header.number, node.height
                ));
            }
            node.height += 1;
            if node.fetch.as_ref().is_some_and(|f| f.want.block < node.height) {
                node.fetch = None;
            }
            let now = self.k.now();
            let lag = self
                .checker
                .ordered_at(block.header.number)
                .map_or(0, |t| now.saturating_sub(t.max(self.sc.gst_ms)));
            if self.k.after_gst() {
                self.report.assembler_lag_ms = self.report.assembler_lag_ms.max(lag);
            }
            self.report.assembled += 1;
            self.checker.on_block(party, &block)?;
        }
        Ok(())
    }

    /// The shard's batchers in the order an assembler asks them: its own party's first.
    fn shard_batchers(&self, party: u32, shard: u32) -> Vec<usize> {
        std::iter::once(party)
            .chain((1..=self.sc.total_parties()).filter(|p| *p != party))
            .map(|p| self.b_index(p, shard))
            .collect()
    }

    /// Starts or continues the fetch of the batch the core waits for.
    fn fetch_missing(&mut self, a: usize) {
        let now = self.k.now();
        let trusting = self.sc.trusting_assemblers;
        let Some(node) = self.assemblers[a].as_mut() else {
            return;
        };
        let Some(w) = node.core.wanted().filter(|w| w.shard != arma::CONFIG_SHARD) else {
            // Nothing to fetch (a config block's data comes with its decision).
            node.fetch = None;
            return;
        };
        let next_round = match node.fetch.as_mut() {
            Some(f) if f.want == w => {
                if !trusting && f.over.is_none() && now >= f.started.saturating_add(fetch_timeout(f.round)) {
                    f.over = Some(now); // the calls still out timed out
                }
                match f.over {
                    Some(t) if now >= t.saturating_add(FETCH_RETRY_MS) => f.round.saturating_add(1),
                    _ => return,
                }
            }
            _ => 0,
        };
        self.start_round(a, w, next_round);
    }

    fn start_round(&mut self, a: usize, want: Wanted, round: u32) {
        let now = self.k.now();
        let trusting = self.sc.trusting_assemblers;
        let Some(party) = self.assemblers[a].as_ref().map(|n| n.party) else {
            return;
        };
        let list = self.shard_batchers(party, want.shard);
        let asked = if trusting {
            list.iter().take(1).copied().collect()
        } else {
            list
        };
        if let Some(node) = self.assemblers[a].as_mut() {
            node.fetch = Some(Fetch {
                want,
                round,
                started: now,
                asked: asked.len(),
                answered: 0,
                over: None,
                next: 0,
            });
        }
        for b in asked {
            self.ask(a, party, b, round, want);
        }
    }

    fn ask(&mut self, a: usize, party: u32, b: usize, round: u32, want: Wanted) {
        let to = self.batchers[b].party;
        self.k.send(party, to, || Ev::FetchAsk { a, b, round, want });
    }

    /// Batcher `b` answers a fetch from its own store: the batch with the ordered id and
    /// digest if it persisted one, else "not held"; a batcher that is down answers
    /// nothing (the call times out); a lying one forges, hangs or refuses.
    pub(super) fn answer_fetch(&mut self, a: usize, b: usize, round: u32, want: Wanted) {
        if !self.serves_fetches(b) {
            return;
        }
        let lie = self
            .lies_to_fetches(self.batchers[b].party)
            .then(|| match self.k.rng().gen_range(0..3) {
                0 => Lie::Forge,
                1 => Lie::Hang,
                _ => Lie::Refuse,
            });
        if lie.is_some() {
            self.report.fetch_lies += 1;
        }
        let answer = match lie {
            Some(Lie::Hang) => return,
            Some(Lie::Refuse) => None,
            Some(Lie::Forge) => Some(OfferedBatch {
                shard: want.shard,
                primary: want.primary,
                seq: want.seq,
                digest: want.digest,
                requests: vec![Arc::from(format!("forged-{}-{}", want.block, round).into_bytes())],
            }),
            None => {
                let id = BatchId::new(want.shard, want.primary, want.seq);
                self.batchers[b]
                    .held
                    .get(&(id, want.digest))
                    .map(|batch| offered(batch))
            }
        };
        let (from, Some(to)) = (
            self.batchers[b].party,
            self.assemblers.get(a).and_then(|n| n.as_ref()).map(|n| n.party),
        ) else {
            return;
        };
        let block = want.block;
        self.k.send(from, to, || Ev::Fetched {
            a,
            round,
            block,
            answer: answer.clone(),
        });
    }

    /// An answer to a fetch: the first wanted one goes to the core and ends the fetch;
    /// one of another round or block is stale (its call was dropped).
    pub(super) fn on_fetched(
        &mut self,
        a: usize,
        round: u32,
        block: u64,
        answer: Option<OfferedBatch>,
    ) -> Result<(), String> {
        let now = self.k.now();
        let trusting = self.sc.trusting_assemblers;
        let Some((party, shard)) = self
            .assemblers
            .get(a)
            .and_then(Option::as_ref)
            .and_then(|n| n.fetch.as_ref().map(|f| (n.party, f.want.shard)))
        else {
            return Ok(());
        };
        let list = self.shard_batchers(party, shard);
        let Some(node) = self.assemblers.get_mut(a).and_then(Option::as_mut) else {
            return Ok(());
        };
        let Some(f) = node.fetch.as_mut() else {
            return Ok(());
        };
        if f.want.block != block || f.round != round || f.over.is_some() {
            return Ok(());
        }
        f.answered += 1;
        let want = f.want;
        if trusting {
            // The first answer whose header fields match is taken and the fetch ends.
            match answer {
                Some(b) if same_header(&want, &b) => {
                    f.over = Some(now);
                    let _ = node.core.offer(b); // refused when forged: this fetch is over
                }
                _ => {
                    f.next += 1;
                    match list.get(f.next) {
                        Some(&b) => self.ask(a, party, b, round, want),
                        None => f.over = Some(now),
                    }
                }
            }
            return self.append_blocks(a);
        }
        match answer {
            Some(b) if is_wanted(&want, &b) => {
                node.core
                    .offer(b)
                    .map_err(|e| format!("assembler {party}: a wanted batch was refused: {e}"))?;
                node.fetch = None;
                self.append_blocks(a)
            }
            _ => {
                if f.answered >= f.asked {
                    f.over = Some(now);
                }
                Ok(())
            }
        }
    }

    /// After GST: the assembler holds every block ordered more than
    /// [`ASSEMBLER_BOUND_MS`] ago (or GST, if later).
    fn check_assembler_lag(&self, a: usize) -> Result<(), String> {
        let Some(node) = self.assemblers[a].as_ref() else {
            return Ok(());
        };
        if !self.k.after_gst() {
            return Ok(());
        }
        let Some(at) = self.checker.ordered_at(node.height) else {
            return Ok(());
        };
        let since = at.max(self.sc.gst_ms);
        let now = self.k.now();
        if now > since.saturating_add(ASSEMBLER_BOUND_MS) {
            let fetch = node.fetch.as_ref().map_or_else(
                || "no fetch".to_string(),
                |f| format!("fetch round {}, {} of {} answered", f.round, f.answered, f.asked),
            );
            return Err(format!(
                "assembler liveness: party {}'s assembler is at height {} of {}, {} ms after block {} was ordered \
                 (GST at {} ms, bound {ASSEMBLER_BOUND_MS} ms; {fetch})",
                node.party,
                node.height,
                self.checker.blocks,
                now - at,
                node.height,
                self.sc.gst_ms
            ));
        }
        Ok(())
    }
}
