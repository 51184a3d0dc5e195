//! Config updates in the simulated network (docs/ordering-sim.md "Reconfiguration").
//!
//! The consenters run the reconfigurable Arma application ([`ArmaApp::reconfigurable`])
//! under the simulation's rules ([`SimRules`]) with real Ed25519 consenter keys: each
//! replica holds its key of every generation (genesis, and one more per rotation of its
//! key), so it signs in every set it is in. An admin submits the scenario's updates to
//! every consenter at their times, each built against the config in force then (the
//! ledger's), re-sent until it is in force or another update replaced its base; and the
//! updates the rules must refuse. Faults around a switch: a consenter partitioned from
//! the others, a consenter crashing as it switches, a batcher crashing once fed a switch.
//!
//! After every consenter step the world checks that each correct consenter is in the
//! set the ledger says for the decisions it applied, switched at the decision that
//! changed it.

use std::collections::BTreeMap;
use std::sync::Arc;

use arma::ClusterKeys;
use bft::{Application as _, ChainId, Output, WalEntry};
use consenter::application::{ArmaApp, ArmaConfig, ArmaState, Reconfig, encode_config_update};
use consenter::keys::{EngineSigner, EngineVerifier};
use crypto::{PublicKey, SigningKey};
use rand::Rng;
use rand::seq::SliceRandom;
use types::PartyId;

use super::{Ev, World};
use crate::reconfig::{
    SimConfig, SimParty, SimRules, SimUpdate, admin_key, batcher_key, consenter_key, majority, rogue_key,
};
use crate::{BadUpdate, Reconfiguration};

/// Key generations each replica holds: genesis and up to three rotations.
const GENERATIONS: u32 = 4;

/// How often the admin re-sends an update (ms), and how many times a refused one is sent.
const ADMIN_RESEND_MS: u64 = 300;
const BAD_SENDS: u32 = 3;

/// A consenter's application, its genesis signer and the genesis set's verifier.
pub(super) type Engine = (ArmaApp, Box<dyn bft::Signer>, Arc<dyn bft::Verifier>);

/// The generation of party `party`'s batcher key `key`, if it is one of those a batcher
/// holds.
fn batcher_generation(party: u32, key: &PublicKey) -> Option<u32> {
    (0..GENERATIONS).find(|g| batcher_key(party, *g).public_key() == *key)
}

/// An admin's step.
pub enum Admin {
    /// Submits planned update `i` (index `updates.len()` is the competing one).
    Submit(usize),
    /// Re-sends update `i` unless it is resolved.
    Resend(usize),
    /// Submits (again) an update the rules must refuse.
    Bad {
        /// Which one.
        kind: BadUpdate,
        /// Sends left.
        sends: u32,
        /// Its bytes, once built.
        bytes: Option<Vec<u8>>,
    },
}

/// A submitted valid update.
struct Submission {
    base: u64,
    bytes: Vec<u8>,
    next: Vec<u8>,
    resolved: bool,
}

/// The reconfiguration state of a run.
pub(super) struct Reconf {
    pub(super) plan: Reconfiguration,
    pub(super) genesis: Arc<Vec<u8>>,
    pub(super) genesis_keys: ClusterKeys,
    pub(super) chain: ChainId,
    /// Each replica's consenter keys by generation.
    keys: Vec<Vec<SigningKey>>,
    admins: Vec<SigningKey>,
    /// The planned updates (then the competing one), once submitted.
    submitted: Vec<Option<Submission>>,
    /// Refused updates not sent in full yet.
    bad_left: usize,
    /// The Byzantine consenter's key in its current set: (epoch, key).
    byz_key: Option<(u64, SigningKey)>,
    /// The party the leaving update removes, once chosen (at its first submission).
    pub(super) leaving: Option<u32>,
}

impl Reconf {
    /// The genesis config of `n` parties with batcher keys `batchers`; the keys of
    /// `total` parties (those that join later too).
    pub(super) fn new(
        plan: Reconfiguration,
        n: u32,
        total: u32,
        shards: u32,
        batchers: Vec<crypto::PublicKey>,
    ) -> Reconf {
        let keys: Vec<Vec<SigningKey>> = (0..total)
            .map(|r| (0..GENERATIONS).map(|g| consenter_key(r, g)).collect())
            .collect();
        let admins: Vec<SigningKey> = (1..=total).map(admin_key).collect();
        let parties = (1..=n)
            .zip(keys.iter().zip(batchers).zip(&admins))
            .map(|(id, ((k, batcher), admin))| SimParty {
                id,
                consenter: k[0].public_key(),
                batcher,
                admin: admin.public_key(),
            })
            .collect();
        let genesis = SimConfig {
            sequence: 0,
            shards,
            parties,
            left: Vec::new(),
        };
        let genesis_keys = ClusterKeys::new(genesis.parties.iter().map(|p| p.consenter.clone()).collect());
        let slots = plan.updates.len() + usize::from(plan.competing);
        Reconf {
            bad_left: plan.bad.len(),
            submitted: (0..slots).map(|_| None).collect(),
            chain: genesis_keys.chain_id(),
            genesis: Arc::new(genesis.encode()),
            genesis_keys,
            keys,
            admins,
            byz_key: None,
            leaving: None,
            plan,
        }
    }

    /// Whether every valid update is in force or replaced, and every refused one sent.
    pub(super) fn settled(&self) -> bool {
        self.bad_left == 0
            && self
                .submitted
                .iter()
                .all(|s| s.as_ref().is_some_and(|s| s.resolved))
    }

    /// What is still open (for a liveness report).
    pub(super) fn open(&self) -> String {
        let open: Vec<usize> = (0..self.submitted.len())
            .filter(|i| self.submitted[*i].as_ref().is_none_or(|s| !s.resolved))
            .collect();
        format!(
            "config updates not in force: {open:?}, refused updates unsent: {}",
            self.bad_left
        )
    }
}

impl World {
    /// A consenter's application and engine keys: the reconfigurable application with
    /// this replica's keys of every generation, its genesis signer and the genesis set.
    pub(super) fn reconf_app(&self, c: u32, cfg: ArmaConfig, state: ArmaState) -> Option<Engine> {
        let r = self.reconf.as_ref()?;
        let rules = SimRules {
            lax: r.plan.lax_rules,
            stubborn: r.plan.stubborn == Some(c),
        };
        let keys = r.keys.get(c as usize)?.clone();
        let signer = Box::new(EngineSigner::new(keys.first()?.clone()));
        let reconfig = Reconfig {
            rules: Arc::new(rules),
            genesis: Arc::clone(&r.genesis),
            chain: r.chain,
            keys,
            party: c + 1,
        };
        let app = ArmaApp::reconfigurable(cfg, state, reconfig).ok()?;
        Some((app, signer, Arc::new(EngineVerifier::new(r.genesis_keys.clone()))))
    }

    /// The Byzantine consenter `c`'s signer and cluster id in the set it is in now, and
    /// that set's epoch.
    pub(super) fn byz_identity(&mut self, c: u32) -> Option<(EngineSigner, ChainId, u64)> {
        let replica = self.consenters[c as usize].replica.as_ref()?;
        let (epoch, chain) = (replica.epoch(), replica.config().chain);
        let r = self.reconf.as_ref()?;
        if let Some((e, key)) = &r.byz_key
            && *e == epoch
        {
            return Some((EngineSigner::new(key.clone()), chain, epoch));
        }
        let config = SimConfig::decode(replica.app().config_in_force()).ok()?;
        let key = match config.party(c + 1) {
            Some(p) => r
                .keys
                .get(c as usize)?
                .iter()
                .find(|k| k.public_key() == p.consenter)?
                .clone(),
            // Removed: it signs with the last key it had, for the set it is in now (every
            // member refuses what a non-member says).
            None => r.byz_key.as_ref()?.1.clone(),
        };
        if let Some(r) = self.reconf.as_mut() {
            r.byz_key = Some((epoch, key.clone()));
        }
        Some((EngineSigner::new(key), chain, epoch))
    }

    /// Whether the partition of the scenario cuts a message between consenters `a` and `b` now.
    pub(super) fn partitioned(&mut self, a: u32, b: u32) -> bool {
        let Some(p) = self.reconf.as_ref().and_then(|r| r.plan.partition) else {
            return false;
        };
        let now = self.k.now();
        let cut = (a == p.consenter || b == p.consenter)
            && a != b
            && !self.k.after_gst()
            && (p.from_ms..p.until_ms).contains(&now);
        if cut {
            self.report.partitioned += 1;
        }
        cut
    }

    /// Schedules the admin's submissions.
    pub(super) fn build_reconf(&mut self) {
        let Some(r) = self.reconf.as_ref() else {
            return;
        };
        let planned: Vec<u64> = r.plan.updates.iter().map(|u| u.at_ms).collect();
        let bad = r.plan.bad.clone();
        for (i, at) in planned.into_iter().enumerate() {
            self.k.schedule(at, Ev::Admin(Admin::Submit(i)));
        }
        for (at, kind) in bad {
            self.k.schedule(
                at,
                Ev::Admin(Admin::Bad {
                    kind,
                    sends: BAD_SENDS,
                    bytes: None,
                }),
            );
        }
    }

    /// The config in force as the ledger says (the checker's).
    fn config_in_force(&self) -> Option<SimConfig> {
        self.checker.switches.as_ref().map(|s| s.config().clone())
    }

    /// Sends a config update to every consenter (the admin is a client: its sends are lost
    /// before GST, never partitioned).
    fn send_update(&mut self, bytes: &[u8]) {
        let request = encode_config_update(bytes);
        for to in 0..self.sc.total_parties() {
            if self.k.lossy() {
                continue;
            }
            let at = self.k.arrival(self.k.now());
            self.k.schedule(
                at,
                Ev::ToConsenter {
                    to,
                    request: request.clone(),
                },
            );
        }
    }

    /// Approvals by `count` random parties among `parties` (those of the config in force).
    fn approve(&mut self, update: &mut SimUpdate, parties: &[u32], count: usize) {
        let mut parties = parties.to_vec();
        parties.shuffle(self.k.rng());
        parties.truncate(count);
        parties.sort_unstable();
        let Some(r) = self.reconf.as_ref() else {
            return;
        };
        for p in parties {
            if let Some(key) = r.admins.get(p as usize - 1) {
                update.approve(p, key);
            }
        }
    }

    /// `current` with the consenter keys of replicas `rotate` and the batcher keys of
    /// parties `batchers` at their next generation (those not in force skipped), the
    /// joining party added (the plan's join, while it has not joined), or party `leave`
    /// removed.
    fn rotated(
        &self,
        current: &SimConfig,
        rotate: &[u32],
        batchers: &[u32],
        leave: Option<u32>,
    ) -> Option<SimConfig> {
        let r = self.reconf.as_ref()?;
        let mut next = current.clone();
        next.sequence = current.sequence.checked_add(1)?;
        let joiner = self.sc.n + 1;
        if r.plan.join && current.highest_id() < joiner {
            // The joining party takes the next id with its genesis keys.
            next.parties.push(SimParty {
                id: joiner,
                consenter: r.keys.get(joiner as usize - 1)?.first()?.public_key(),
                batcher: batcher_key(joiner, 0).public_key(),
                admin: r.admins.get(joiner as usize - 1)?.public_key(),
            });
        }
        for &c in rotate {
            let Some(party) = next.party_mut(c + 1) else {
                continue;
            };
            let held = r.keys.get(c as usize)?;
            let now = held.iter().position(|k| k.public_key() == party.consenter)?;
            party.consenter = held.get(now + 1)?.public_key();
        }
        for &p in batchers {
            let Some(party) = next.party_mut(p) else {
                continue;
            };
            let now = batcher_generation(p, &party.batcher)?;
            let next_key = (now + 1 < GENERATIONS).then(|| batcher_key(p, now + 1))?;
            party.batcher = next_key.public_key();
        }
        if let Some(p) = leave {
            next.parties.retain(|q| q.id != p);
            next.left.push(p);
            next.left.sort_unstable();
        }
        Some(next)
    }

    pub(super) fn on_admin(&mut self, step: Admin) -> Result<(), String> {
        match step {
            Admin::Submit(i) => self.submit_update(i),
            Admin::Resend(i) => {
                self.resend_update(i);
                Ok(())
            }
            Admin::Bad { kind, sends, bytes } => {
                self.bad_update(kind, sends, bytes);
                Ok(())
            }
        }
    }

    /// Submits planned update `i` once the one before is resolved (an admin waits for
    /// its update to be in force before it proposes the next).
    fn submit_update(&mut self, i: usize) -> Result<(), String> {
        let Some(r) = self.reconf.as_ref() else {
            return Ok(());
        };
        let waiting = i > 0
            && r.submitted
                .get(i - 1)
                .is_none_or(|s| s.as_ref().is_none_or(|s| !s.resolved));
        if waiting {
            self.k.schedule_in(100, Ev::Admin(Admin::Submit(i)));
            return Ok(());
        }
        let competing = i == 0 && r.plan.competing;
        let (rotate, batchers) = r
            .plan
            .updates
            .get(i)
            .map(|u| (u.rotate.clone(), u.rotate_batchers.clone()))
            .unwrap_or_default();
        let slot = r.plan.updates.len();
        let leaves = r.plan.leave.filter(|l| l.update == i);
        let current = self.config_in_force().ok_or("no config in force")?;
        let leave = match leaves {
            Some(l) => Some(self.leaving_party(l, &current)?),
            None => None,
        };
        self.submit_valid(i, &current, &rotate, &batchers, leave)?;
        if competing {
            // Rotates the keys update 0 leaves (or all): a different next config (that
            // removes the same party, if update 0 removes one).
            let ids: Vec<u32> = current.ids().iter().map(|p| p - 1).collect();
            let others: Vec<u32> = ids.iter().copied().filter(|c| !rotate.contains(c)).collect();
            let others = if others.is_empty() { ids } else { others };
            self.submit_valid(slot, &current, &others, &[], leave)?;
        }
        Ok(())
    }

    fn submit_valid(
        &mut self,
        i: usize,
        current: &SimConfig,
        rotate: &[u32],
        batchers: &[u32],
        leave: Option<u32>,
    ) -> Result<(), String> {
        let next = self.rotated(current, rotate, batchers, leave).ok_or_else(|| {
            format!("update {i}: no key generation left for consenters {rotate:?}, batchers {batchers:?}")
        })?;
        let mut update = SimUpdate::new(current.sequence, &next);
        let n = current.count();
        let count = self.k.rng().gen_range(majority(n)..=n as usize);
        self.approve(&mut update, &current.ids(), count);
        let bytes = update.encode();
        self.trace_line(|| {
            format!(
                "admin submits update {i}: {} → {}, rotating consenters {rotate:?}, batchers {batchers:?}, parties {:?} → {:?}",
                current.sequence,
                next.sequence,
                current.ids(),
                next.ids()
            )
        });
        self.send_update(&bytes);
        if let Some(slot) = self.reconf.as_mut().and_then(|r| r.submitted.get_mut(i)) {
            *slot = Some(Submission {
                base: current.sequence,
                bytes,
                next: update.next,
                resolved: false,
            });
        }
        self.k.schedule_in(ADMIN_RESEND_MS, Ev::Admin(Admin::Resend(i)));
        Ok(())
    }

    fn resend_update(&mut self, i: usize) {
        let Some(s) = self
            .reconf
            .as_ref()
            .and_then(|r| r.submitted.get(i))
            .and_then(Option::as_ref)
        else {
            return;
        };
        let (base, bytes, next) = (s.base, s.bytes.clone(), s.next.clone());
        let Some(switches) = self.checker.switches.as_ref() else {
            return;
        };
        if switches.config().sequence > base {
            // In force, or another update of its base won (sequence = epoch here).
            let applied = switches.config_of(base + 1) == Some(next.as_slice());
            if !applied {
                self.report.superseded += 1;
            }
            if let Some(s) = self
                .reconf
                .as_mut()
                .and_then(|r| r.submitted.get_mut(i))
                .and_then(Option::as_mut)
            {
                s.resolved = true;
            }
            return;
        }
        self.send_update(&bytes);
        self.k.schedule_in(ADMIN_RESEND_MS, Ev::Admin(Admin::Resend(i)));
    }

    /// Builds (once) and sends an update the rules must refuse; a stale or replayed one
    /// waits for a switch.
    fn bad_update(&mut self, kind: BadUpdate, sends: u32, bytes: Option<Vec<u8>>) {
        let bytes = match bytes {
            Some(b) => Some(b),
            None => self.build_bad(kind),
        };
        let Some(bytes) = bytes else {
            self.k.schedule_in(
                200,
                Ev::Admin(Admin::Bad {
                    kind,
                    sends,
                    bytes: None,
                }),
            );
            return;
        };
        self.trace_line(|| format!("admin submits a {kind:?} update"));
        self.report.bad_updates += 1;
        self.send_update(&bytes);
        if sends > 1 {
            self.k.schedule_in(
                ADMIN_RESEND_MS,
                Ev::Admin(Admin::Bad {
                    kind,
                    sends: sends - 1,
                    bytes: Some(bytes),
                }),
            );
        } else if let Some(r) = self.reconf.as_mut() {
            r.bad_left = r.bad_left.saturating_sub(1);
        }
    }

    fn build_bad(&mut self, kind: BadUpdate) -> Option<Vec<u8>> {
        let switches = self.checker.switches.as_ref()?;
        let current = switches.config().clone();
        if kind == BadUpdate::Replayed {
            return switches.switched.last().map(|s| s.update.clone());
        }
        let base = match kind {
            BadUpdate::Stale => {
                let base = current.sequence.checked_sub(1)?;
                match base {
                    0 => SimConfig::decode(&self.reconf.as_ref()?.genesis).ok()?,
                    b => SimConfig::decode(switches.config_of(b)?).ok()?,
                }
            }
            _ => current,
        };
        let ids = base.ids();
        let victim = ids[self.k.rng().gen_range(0..ids.len())];
        let mut rogue = base.clone();
        rogue.sequence = base.sequence + 1;
        rogue.party_mut(victim)?.consenter = rogue_key(victim - 1).public_key();
        let mut update = SimUpdate::new(base.sequence, &rogue);
        let needed = majority(base.count());
        match kind {
            BadUpdate::TooFewApprovals => self.approve(&mut update, &ids, needed - 1),
            BadUpdate::ForgedApproval => {
                self.approve(&mut update, &ids, needed - 1);
                let listed: Vec<u32> = update.approvals.iter().map(|(p, _)| *p).collect();
                let forger = ids.iter().copied().find(|p| !listed.contains(p))?;
                // Signed with the admin key of another party (one that exists or not).
                let other = ids.iter().copied().find(|p| *p != forger).unwrap_or(forger + 1);
                update.approve(forger, &admin_key(other));
            }
            BadUpdate::Stale | BadUpdate::Replayed => self.approve(&mut update, &ids, needed),
        }
        Some(update.encode())
    }

    /// The key batcher `b` signs with now (its core's: the genesis key, or the one of
    /// the newest config it was fed); Byzantine batchers sign their lies with it too.
    pub(super) fn signing_key(&self, b: usize) -> Option<SigningKey> {
        let node = self.batchers.get(b)?;
        match &node.core {
            Some(core) => Some(core.signing_key().clone()),
            None => self.bkeys.get(&node.party).cloned(),
        }
    }

    /// Batcher `b` is fed a decision that put `config` in force: as the node does, before
    /// the decision's term changes it verifies the shard's batches with the config's
    /// batcher keys and signs with its own key of that config (the generation it holds
    /// that matches), or keeps its key when it holds none that matches.
    pub(super) fn batcher_switch_keys(&mut self, b: usize, config: &[u8]) {
        let Ok(config) = SimConfig::decode(config) else {
            return;
        };
        let party = self.batchers[b].party;
        let keys: BTreeMap<PartyId, PublicKey> = config.batcher_keys();
        if !keys.contains_key(&party) {
            // Its party left (the core refuses such a key set): see `batcher_left`.
            return;
        }
        let Some(node) = self.batchers.get_mut(b) else {
            return;
        };
        let Some(core) = node.core.as_mut() else {
            return;
        };
        let key = keys
            .get(&party)
            .and_then(|own| batcher_generation(party, own))
            .map_or_else(|| core.signing_key().clone(), |g| batcher_key(party, g));
        let rotated = core.signing_key().public_key() != key.public_key();
        if core.set_keys(keys.clone(), key.clone()).is_ok() {
            // The config's sequence goes with its keys, as in the node.
            core.set_config_sequence(config.sequence);
            node.config_seq = config.sequence;
            node.keys = Some((keys, key));
            if rotated {
                self.report.batcher_keys_rotated += 1;
                self.trace_line(|| format!("batcher {b}: signs with its next key from now on"));
            }
        }
    }

    /// A joining party's batcher `b` before its party is in the network: it reads the
    /// decisions as a batcher does (from its party's consenter, which catches up as a
    /// non-member, or another), tracking its shard's term, and starts its core at the
    /// decision that put a config naming its party in force, in the term that decision
    /// moved its shard to, with an empty mempool (docs/reconfiguration.md "Adding a party").
    pub(super) fn feed_joining(&mut self, b: usize) -> Result<(), String> {
        let (party, shard) = (self.batchers[b].party, self.batchers[b].shard);
        loop {
            let fed = self.batchers[b].fed;
            let mut follow = self.batchers[b].follow;
            let outcome = self.follow(&mut follow, fed);
            self.batchers[b].follow = follow;
            let Some(logged) = outcome else {
                return Ok(());
            };
            let outcome = &logged.outcome;
            for t in outcome.terms.iter().filter(|t| t.shard == shard) {
                self.batchers[b].info = batcher::TermInfo {
                    term: t.term,
                    last_ordered_seq: t.last_ordered_seq,
                };
            }
            for h in outcome.headers.iter().filter(|h| h.shard == shard) {
                self.batchers[b].info.last_ordered_seq = h.seq;
            }
            self.batchers[b].fed += 1;
            let Some(change) = &outcome.config else {
                continue;
            };
            let Ok(config) = SimConfig::decode(&change.config) else {
                continue;
            };
            if config.party(party).is_none() {
                continue;
            }
            let keys: BTreeMap<PartyId, PublicKey> = config.batcher_keys();
            let own = keys
                .get(&party)
                .and_then(|k| batcher_generation(party, k))
                .map_or_else(|| batcher_key(party, 0), |g| batcher_key(party, g));
            let node = &mut self.batchers[b];
            node.keys = Some((keys, own));
            node.config_seq = config.sequence;
            node.joined = true;
            let info = node.info;
            self.start_batcher(b);
            if self.batchers[b].core.is_none() {
                return Err(format!(
                    "join: batcher of party {party}, shard {shard} does not start at decision {} (term {})",
                    fed + 1,
                    info.term
                ));
            }
            self.report.joined_batchers += 1;
            self.trace_line(|| {
                format!(
                    "batcher {b} (party {party}, shard {shard}) joins at decision {} in term {}",
                    fed + 1,
                    info.term
                )
            });
            return Ok(());
        }
    }

    /// A correct batcher verifies with the batcher keys of the newest config it was fed
    /// (also after a restart) and signs with the key that config names for it.
    pub(super) fn check_batcher_keys(&self, b: usize) -> Result<(), String> {
        let node = &self.batchers[b];
        let Some(core) = node.core.as_ref() else {
            return Ok(());
        };
        if self.reconf.is_none() || self.byz(node.party).is_some() {
            return Ok(());
        }
        let (party, shard) = (node.party, node.shard);
        if !core.is_own_key(&core.signing_key().public_key()) {
            return Err(format!(
                "batcher keys: batcher of party {party}, shard {shard} signs with a key its config does not name for it"
            ));
        }
        if let Some((keys, _)) = &node.keys
            && core.config().keys != *keys
        {
            return Err(format!(
                "batcher keys: batcher of party {party}, shard {shard} verifies with other keys than those of the newest config it was fed"
            ));
        }
        Ok(())
    }

    /// A correct consenter crashes as it switches (a crash point, before GST): `Switched`
    /// is the WAL entry that records the switch, after the decision's own entries.
    pub(super) fn crash_at_switch(&mut self, c: u32) -> bool {
        let p = self.reconf.as_ref().map_or(0.0, |r| r.plan.crash_at_switch);
        p > 0.0 && self.is_correct_consenter(c) && !self.k.after_gst() && self.k.rng().gen_bool(p)
    }

    /// Consenter `c` crashes at its `Switched` entry: before it is written, or after it
    /// and before the shell recorded the decision.
    pub(super) fn crash_switching(&mut self, c: u32, entry: WalEntry, rest: impl Iterator<Item = Output>) {
        self.report.crashes_at_switch += 1;
        if self.k.rng().gen_bool(0.5) {
            self.trace_line(|| format!("consenter {c}: crash before its switch is in the WAL"));
            self.crash_consenter(c);
        } else {
            let _ = bft::Wal::append(&mut self.consenters[c as usize].wal, &[entry]);
            self.crash_before_record(c, rest);
        }
    }

    /// A correct batcher crashes once fed a switch (before GST).
    pub(super) fn maybe_crash_batcher_at_switch(&mut self, b: usize) -> bool {
        let p = self
            .reconf
            .as_ref()
            .map_or(0.0, |r| r.plan.crash_batcher_at_switch);
        let party = self.batchers[b].party;
        if p > 0.0 && self.byz(party).is_none() && !self.k.after_gst() && self.k.rng().gen_bool(p) {
            self.report.crashes_at_switch += 1;
            self.crash_batcher(b);
            return true;
        }
        false
    }

    /// After consenter `c`'s step: if correct and up, it is in the set the ledger says for
    /// the decisions it applied, switched at the decision that changed it.
    pub(super) fn check_switch_state(&self, c: u32) -> Result<(), String> {
        let (Some(switches), Some(r)) = (self.checker.switches.as_ref(), self.reconf.as_ref()) else {
            return Ok(());
        };
        let Some(replica) = self.consenters[c as usize].replica.as_ref() else {
            return Ok(());
        };
        let applied = replica.app().state().applied;
        if !self.is_correct_consenter(c) || applied > self.checker.decided() as u64 {
            return Ok(());
        }
        let expected = switches.epoch_after(applied);
        let start = switches.start_of(expected);
        let chain = bft::set_chain(r.chain, expected);
        // A member exactly when the set has its slot: a joining party's is not before
        // the switch that adds it, a leaving party's is not from the switch that
        // removes it on.
        let parties = switches.parties_of(expected).unwrap_or_default();
        if replica.epoch() != expected
            || replica.app().epoch() != expected
            || Some(replica.epoch_start()) != start
            || replica.config().chain != chain
            || replica.is_member() != parties.contains(&(c + 1))
        {
            return Err(format!(
                "switch: consenter {c} applied decision {applied} and is in set {} from decision {} \
                 (application at {}, member {}), the ledger says set {expected} from decision {start:?}",
                replica.epoch(),
                replica.epoch_start(),
                replica.app().epoch(),
                replica.is_member()
            ));
        }
        // The application counts BAFs and complaints of the parties in force only (its
        // party check): those of the ledger's config, never a party that left.
        let counted = replica.app().config().parties.ids();
        if counted != parties {
            return Err(format!(
                "leave: consenter {c} applied decision {applied} and counts BAFs and complaints of parties \
                 {counted:?}, the ledger's config {expected} has parties {parties:?}"
            ));
        }
        Ok(())
    }

    /// Counts the acknowledged requests not ordered yet when a switch is decided; at the
    /// switch that adds a party, clients send a second wave of requests over the next
    /// 600 ms, so that the joined party's routers and batchers take part (its batchers
    /// admit, pull, acknowledge and sign BAFs that count).
    pub(super) fn on_switch_decided(&mut self) {
        self.on_parties_changed();
        let joined = self.sc.total_parties() > self.sc.n
            && self
                .checker
                .switches
                .as_ref()
                .is_some_and(|s| s.switched.len() == 1);
        if joined {
            let wave = (self.sc.requests / 2).max(4);
            for i in 0..wave {
                let request: Arc<[u8]> = Arc::from(format!("req-{}-joined-{i}", self.sc.seed).into_bytes());
                self.requests.push(Arc::clone(&request));
                self.checker.submitted(Arc::clone(&request));
                self.by_digest
                    .insert(batcher::RequestDigest::of(&request), Arc::clone(&request));
                let at = self.k.rng().gen_range(1..600);
                self.k.schedule_in(at, Ev::Client(request));
            }
        }
        if !self.sc.acked_clients() {
            return;
        }
        let pending = self
            .requests
            .iter()
            .filter(|q| self.acknowledged(q) && !self.checker.is_ordered(q))
            .count();
        self.report.acked_at_switch += pending as u64;
    }
}
