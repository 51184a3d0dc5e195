//! The simulation's network config and its update rules (docs/ordering-sim.md
//! "Reconfiguration"): a small [`ConfigRules`] of its own, since this crate may not
//! depend on `netconfig`.
//!
//! A config ([`SimConfig`]) is `tag ‖ u64 sequence ‖ u32 count ‖ u32 shards`, then per
//! party in increasing id order `u32 id ‖` its consenter, batcher and admin Ed25519
//! public keys (32 bytes each), then `u32 count ‖ (u32 id)*`: the parties that left,
//! increasing (big-endian integers). Ids are stable: party `p` runs replica `p − 1` in
//! every set, a party that leaves leaves a gap, and no id is ever given again. An update
//! ([`SimUpdate`]) is `tag ‖ u64 base ‖ u32 len ‖ next config ‖ u32 count ‖ (u32 party ‖
//! 64-byte signature)*`: it replaces the config of sequence `base` with `next`, approved
//! by the listed parties' admins, each signing `APPROVAL_TAG ‖ base ‖ SHA-256(next)`
//! (crypto purpose `ConfigUpdate`).
//!
//! [`SimRules::next`] accepts an update exactly when: it decodes; `base` is the sequence
//! in force; the next config decodes, has sequence `base + 1`, the same shards, and the
//! same parties, or one more (a party joining under an id above every id used, the
//! parties that left included), or one fewer (a party leaving: its id joins the list of
//! those that left, and at least one party stays) — never a join and a leave at once;
//! the admin keys of the parties that stay unchanged; distinct admin, consenter and
//! batcher keys; every approval is by a distinct party of the config in force and
//! verifies under its admin key; and a majority of the parties in force (⌊n/2⌋ + 1)
//! approved. The first failing check is the reason. Consenter and batcher keys may
//! change.

use std::collections::BTreeMap;
use std::fmt;

use arma::{BatchingView, ConfigRules, ConfigView};
use crypto::{PublicKey, Scheme, Signature, SigningKey, derive_signing_key};
use sha2::{Digest as _, Sha256};

const CONFIG_TAG: &[u8] = b"fabrx/ordersim/config/v2";
const UPDATE_TAG: &[u8] = b"fabrx/ordersim/update/v1";
const APPROVAL_TAG: &[u8] = b"fabrx/ordersim/approve/v1";
const KEY: usize = 32;
const SIGNATURE: usize = 64;

/// How far ahead of a shard's last ordered seq the consenters count BAFs (not in the
/// config: no update changes it).
pub const MAX_SEQS_AHEAD: u64 = 64;

/// The batchers' parameters (not in the config: no update changes them; the batchers of
/// the simulation are built with them).
pub const BATCHING: BatchingView = BatchingView {
    max_batch_requests: 4,
    max_batch_bytes: 256,
    batch_timeout_ms: 20,
    forward_timeout_ms: 300,
    complain_timeout_ms: 900,
};

/// Why an update is refused, or a config or update does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The bytes are not a config or an update.
    #[error("malformed {what}")]
    Malformed {
        /// Which part.
        what: &'static str,
    },
    /// The update replaces another config than the one in force.
    #[error("stale sequence {base}, the network is at {current}")]
    Stale {
        /// The sequence it replaces.
        base: u64,
        /// The sequence in force.
        current: u64,
    },
    /// The next config's sequence is not the next one.
    #[error("the next config has sequence {got}, expected {expected}")]
    Sequence {
        /// Expected.
        expected: u64,
        /// Carried.
        got: u64,
    },
    /// The next config changes what the simulation keeps fixed.
    #[error("the next config changes the {what}")]
    Changes {
        /// What it changes.
        what: &'static str,
    },
    /// An approval by a party outside the network, or listed twice.
    #[error("approval by party {party}: not a party of the config in force, or listed twice")]
    Approver {
        /// The party.
        party: u32,
    },
    /// An approval that does not verify.
    #[error("approval by party {party} does not verify")]
    Signature {
        /// The party.
        party: u32,
    },
    /// Too few approvals.
    #[error("{got} approvals, the rules need {needed}")]
    TooFew {
        /// Approvals listed.
        got: usize,
        /// A majority of the parties.
        needed: usize,
    },
    /// The rules of this replica refuse every update (negative test).
    #[error("this replica refuses every update")]
    Stubborn,
}

/// One party of a config: its stable id and its keys.
#[derive(Clone, PartialEq, Eq)]
pub struct SimParty {
    /// Its id (its consenter is replica `id − 1`).
    pub id: u32,
    /// Its consenter key.
    pub consenter: PublicKey,
    /// Its batcher key (one key for all its shards).
    pub batcher: PublicKey,
    /// Its admin key.
    pub admin: PublicKey,
}

/// A network config as the simulation writes it.
#[derive(Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// One more per update (genesis: 0).
    pub sequence: u64,
    /// Shards.
    pub shards: u32,
    /// The parties in force, ids increasing (a party that left leaves a gap).
    pub parties: Vec<SimParty>,
    /// The parties that left, ids increasing: never given again.
    pub left: Vec<u32>,
}

impl fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimConfig")
            .field("sequence", &self.sequence)
            .field("parties", &self.ids())
            .field("left", &self.left)
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

/// Reads `N` bytes from the front of `rest`.
fn take<'a>(rest: &mut &'a [u8], n: usize, what: &'static str) -> Result<&'a [u8], Refused> {
    let (head, tail) = rest.split_at_checked(n).ok_or(Refused::Malformed { what })?;
    *rest = tail;
    Ok(head)
}

fn take_u64(rest: &mut &[u8], what: &'static str) -> Result<u64, Refused> {
    let b = take(rest, 8, what)?;
    Ok(u64::from_be_bytes(
        b.try_into().map_err(|_| Refused::Malformed { what })?,
    ))
}

fn take_u32(rest: &mut &[u8], what: &'static str) -> Result<u32, Refused> {
    let b = take(rest, 4, what)?;
    Ok(u32::from_be_bytes(
        b.try_into().map_err(|_| Refused::Malformed { what })?,
    ))
}

fn len_u32(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes()
}

impl SimConfig {
    /// The config's bytes (canonical: one config has one encoding).
    pub fn encode(&self) -> Vec<u8> {
        let n = self.parties.len();
        let mut out = Vec::with_capacity(CONFIG_TAG.len() + 20 + (4 + 3 * KEY) * n + 4 * self.left.len());
        out.extend_from_slice(CONFIG_TAG);
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&len_u32(n));
        out.extend_from_slice(&self.shards.to_be_bytes());
        for p in &self.parties {
            out.extend_from_slice(&p.id.to_be_bytes());
            for k in [&p.consenter, &p.batcher, &p.admin] {
                out.extend_from_slice(k.as_bytes());
            }
        }
        out.extend_from_slice(&len_u32(self.left.len()));
        for id in &self.left {
            out.extend_from_slice(&id.to_be_bytes());
        }
        out
    }

    /// Reads [`SimConfig::encode`]'s bytes: ids increasing and non-zero, the parties that
    /// left increasing and none of them in force.
    pub fn decode(bytes: &[u8]) -> Result<SimConfig, Refused> {
        let mut rest = bytes
            .strip_prefix(CONFIG_TAG)
            .ok_or(Refused::Malformed { what: "config tag" })?;
        let sequence = take_u64(&mut rest, "config sequence")?;
        let n = take_u32(&mut rest, "config parties")? as usize;
        let shards = take_u32(&mut rest, "config shards")?;
        if n == 0 || shards == 0 || rest.len() < (4 + 3 * KEY).saturating_mul(n) {
            return Err(Refused::Malformed { what: "config size" });
        }
        let key = |rest: &mut &[u8]| {
            let bytes = take(rest, KEY, "config key")?;
            PublicKey::from_bytes(Scheme::Ed25519, bytes)
                .map_err(|_| Refused::Malformed { what: "config key" })
        };
        let mut parties: Vec<SimParty> = Vec::with_capacity(n);
        for _ in 0..n {
            let id = take_u32(&mut rest, "party id")?;
            if id == 0 || parties.last().is_some_and(|p| p.id >= id) {
                return Err(Refused::Malformed { what: "party ids" });
            }
            parties.push(SimParty {
                id,
                consenter: key(&mut rest)?,
                batcher: key(&mut rest)?,
                admin: key(&mut rest)?,
            });
        }
        let count = take_u32(&mut rest, "parties that left")? as usize;
        if rest.len() != count.saturating_mul(4) {
            return Err(Refused::Malformed { what: "config size" });
        }
        let mut left: Vec<u32> = Vec::with_capacity(count);
        for _ in 0..count {
            let id = take_u32(&mut rest, "party that left")?;
            let in_force = parties.iter().any(|p| p.id == id);
            if id == 0 || in_force || left.last().is_some_and(|l| *l >= id) {
                return Err(Refused::Malformed {
                    what: "parties that left",
                });
            }
            left.push(id);
        }
        Ok(SimConfig {
            sequence,
            shards,
            parties,
            left,
        })
    }

    /// Number of parties in force.
    pub fn count(&self) -> u32 {
        u32::try_from(self.parties.len()).unwrap_or(u32::MAX)
    }

    /// The ids of the parties in force, increasing.
    pub fn ids(&self) -> Vec<u32> {
        self.parties.iter().map(|p| p.id).collect()
    }

    /// Party `id`, if in force.
    pub fn party(&self, id: u32) -> Option<&SimParty> {
        self.parties.iter().find(|p| p.id == id)
    }

    /// Party `id`, if in force, to change its keys.
    pub fn party_mut(&mut self, id: u32) -> Option<&mut SimParty> {
        self.parties.iter_mut().find(|p| p.id == id)
    }

    /// The highest id ever used (in force or left): a joining party takes one above it.
    pub fn highest_id(&self) -> u32 {
        let in_force = self.parties.last().map_or(0, |p| p.id);
        in_force.max(self.left.last().copied().unwrap_or(0))
    }

    /// The batcher keys by party (one for all its shards).
    pub fn batcher_keys(&self) -> BTreeMap<u32, PublicKey> {
        self.parties.iter().map(|p| (p.id, p.batcher.clone())).collect()
    }

    /// What the ordering reads of it: the parties in force by id, the consenter keys by
    /// replica id (`id − 1`), the batcher keys by (party, shard).
    pub fn view(&self) -> ConfigView {
        let batcher_keys = self
            .parties
            .iter()
            .flat_map(|p| (0..self.shards).map(move |s| ((p.id, s), p.batcher.clone())))
            .collect::<BTreeMap<_, _>>();
        let parties = arma::Parties::new(self.ids()).unwrap_or_else(|_| arma::Parties::contiguous(1));
        ConfigView {
            sequence: self.sequence,
            parties,
            left_parties: {
                let mut left = self.left.clone();
                left.sort_unstable();
                left
            },
            shards: self.shards,
            batcher_keys,
            consenters: self
                .parties
                .iter()
                .map(|p| (p.id - 1, p.consenter.clone()))
                .collect(),
            // The simulation's links are its kernel's, not dialled endpoints.
            consenter_endpoints: BTreeMap::new(),
            batcher_endpoints: BTreeMap::new(),
            max_seqs_ahead: MAX_SEQS_AHEAD,
            batching: BATCHING,
            // The simulation's engine timing stays its own.
            engine: None,
        }
    }
}

/// A config update as the simulation's admins write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimUpdate {
    /// The sequence of the config it replaces.
    pub base: u64,
    /// The next config's bytes.
    pub next: Vec<u8>,
    /// `(party, admin signature)`, in the order listed.
    pub approvals: Vec<(u32, Vec<u8>)>,
}

impl SimUpdate {
    /// An update of `base` to `next` with no approval yet.
    pub fn new(base: u64, next: &SimConfig) -> SimUpdate {
        SimUpdate {
            base,
            next: next.encode(),
            approvals: Vec::new(),
        }
    }

    /// What an admin signs: `APPROVAL_TAG ‖ base ‖ SHA-256(next)`.
    pub fn approval_bytes(&self) -> Vec<u8> {
        let mut out = APPROVAL_TAG.to_vec();
        out.extend_from_slice(&self.base.to_be_bytes());
        out.extend_from_slice(&Sha256::digest(&self.next));
        out
    }

    /// Adds `party`'s approval signed with `key`.
    pub fn approve(&mut self, party: u32, key: &SigningKey) {
        let signature = crypto::sign_config_update(key, &self.approval_bytes());
        self.approvals.push((party, signature.into_bytes()));
    }

    /// The update's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = UPDATE_TAG.to_vec();
        out.extend_from_slice(&self.base.to_be_bytes());
        out.extend_from_slice(&len_u32(self.next.len()));
        out.extend_from_slice(&self.next);
        out.extend_from_slice(&len_u32(self.approvals.len()));
        for (party, signature) in &self.approvals {
            out.extend_from_slice(&party.to_be_bytes());
            out.extend_from_slice(signature);
        }
        out
    }

    /// Reads [`SimUpdate::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<SimUpdate, Refused> {
        let mut rest = bytes
            .strip_prefix(UPDATE_TAG)
            .ok_or(Refused::Malformed { what: "update tag" })?;
        let base = take_u64(&mut rest, "update base")?;
        let len = take_u32(&mut rest, "update config length")? as usize;
        let next = take(&mut rest, len, "update config")?.to_vec();
        let count = take_u32(&mut rest, "approval count")? as usize;
        if rest.len() != count.saturating_mul(4 + SIGNATURE) {
            return Err(Refused::Malformed { what: "approvals" });
        }
        let mut approvals = Vec::with_capacity(count);
        for _ in 0..count {
            let party = take_u32(&mut rest, "approver")?;
            approvals.push((party, take(&mut rest, SIGNATURE, "approval")?.to_vec()));
        }
        Ok(SimUpdate {
            base,
            next,
            approvals,
        })
    }
}

/// The simulation's config rules. The knobs exist for the negative tests only.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimRules {
    /// Accepts an update whatever its approvals say (a rules bug the checker must see).
    pub lax: bool,
    /// Refuses every update (a replica that never switches).
    pub stubborn: bool,
}

impl SimRules {
    /// The strict rules (the checker's).
    pub const STRICT: SimRules = SimRules {
        lax: false,
        stubborn: false,
    };

    /// Checks `update` against `current` (see the module docs): the next config, or why not.
    pub fn check(&self, current: &SimConfig, update: &SimUpdate) -> Result<SimConfig, Refused> {
        let distinct = |keys: &[PublicKey]| {
            keys.iter()
                .map(PublicKey::as_bytes)
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                == keys.len()
        };
        if self.stubborn {
            return Err(Refused::Stubborn);
        }
        if update.base != current.sequence {
            return Err(Refused::Stale {
                base: update.base,
                current: current.sequence,
            });
        }
        let next = SimConfig::decode(&update.next)?;
        let expected = current.sequence.saturating_add(1);
        if next.sequence != expected {
            return Err(Refused::Sequence {
                expected,
                got: next.sequence,
            });
        }
        let changes = |what| Err(Refused::Changes { what });
        if !parties_may_become(current, &next) {
            return changes("parties by more than one joining or leaving");
        }
        if next.shards != current.shards {
            return changes("number of shards");
        }
        let kept_admins = current
            .parties
            .iter()
            .all(|p| next.party(p.id).is_none_or(|q| q.admin == p.admin));
        if !kept_admins {
            return changes("admin keys");
        }
        let keys = |k: fn(&SimParty) -> &PublicKey| next.parties.iter().map(k).cloned().collect::<Vec<_>>();
        if !distinct(&keys(|p| &p.admin)) {
            return changes("admin keys into duplicates");
        }
        if !distinct(&keys(|p| &p.consenter)) {
            return changes("consenter keys into duplicates");
        }
        if !distinct(&keys(|p| &p.batcher)) {
            return changes("batcher keys into duplicates");
        }
        if self.lax {
            return Ok(next);
        }
        let message = update.approval_bytes();
        let mut seen = std::collections::BTreeSet::new();
        for (party, signature) in &update.approvals {
            let admin = current
                .party(*party)
                .map(|p| &p.admin)
                .filter(|_| seen.insert(*party))
                .ok_or(Refused::Approver { party: *party })?;
            let signature = Signature::from_bytes(signature.clone());
            crypto::verify_config_update(admin, &message, &signature)
                .map_err(|_| Refused::Signature { party: *party })?;
        }
        let needed = majority(current.count());
        if seen.len() < needed {
            return Err(Refused::TooFew {
                got: seen.len(),
                needed,
            });
        }
        Ok(next)
    }
}

/// Whether `current`'s parties may become `next`'s: the same (and the same that left),
/// one more under an id above every id used, or one fewer whose id joins those that left.
fn parties_may_become(current: &SimConfig, next: &SimConfig) -> bool {
    let (now, then) = (current.ids(), next.ids());
    let same = now == then && next.left == current.left;
    // One party joins under an id above every id used, or one leaves (its id goes to
    // those that left); never both, and at least one party stays.
    let joins = then.len() == now.len() + 1
        && then.get(..now.len()) == Some(now.as_slice())
        && then.last().is_some_and(|j| *j > current.highest_id())
        && next.left == current.left;
    let leaves = then.len() + 1 == now.len()
        && now.iter().filter(|p| !then.contains(p)).count() == 1
        && then.iter().all(|p| now.contains(p))
        && {
            let mut left = current.left.clone();
            left.extend(now.iter().filter(|p| !then.contains(p)));
            left.sort_unstable();
            next.left == left
        };
    same || joins || leaves
}

/// A majority of `parties`: ⌊n/2⌋ + 1.
pub fn majority(parties: u32) -> usize {
    parties as usize / 2 + 1
}

impl ConfigRules for SimRules {
    fn next(&self, current: &[u8], update: &[u8]) -> Result<Vec<u8>, String> {
        let current = SimConfig::decode(current).map_err(|e| e.to_string())?;
        let update = SimUpdate::decode(update).map_err(|e| e.to_string())?;
        self.check(&current, &update)
            .map(|next| next.encode())
            .map_err(|e| e.to_string())
    }

    fn carried(&self, update: &[u8]) -> Result<Vec<u8>, String> {
        SimUpdate::decode(update)
            .map(|u| u.next)
            .map_err(|e| e.to_string())
    }

    fn view(&self, config: &[u8]) -> Result<ConfigView, String> {
        SimConfig::decode(config)
            .map(|c| c.view())
            .map_err(|e| e.to_string())
    }
}

/// Replica `replica`'s consenter key of generation `generation` (0 at genesis, one more
/// per rotation of its key).
pub fn consenter_key(replica: u32, generation: u32) -> SigningKey {
    derive_signing_key(
        Scheme::Ed25519,
        &format!("fabrx-arma-sim/consenter/{replica}/{generation}"),
    )
}

/// Party `party`'s batcher key (for all its shards) of generation `generation` (0 at
/// genesis, one more per rotation of it).
pub fn batcher_key(party: u32, generation: u32) -> SigningKey {
    let name = match generation {
        0 => format!("fabrx-arma-sim/batcher/{party}"),
        g => format!("fabrx-arma-sim/batcher/{party}/{g}"),
    };
    derive_signing_key(Scheme::Ed25519, &name)
}

/// Party `party`'s admin key.
pub fn admin_key(party: u32) -> SigningKey {
    derive_signing_key(Scheme::Ed25519, &format!("fabrx-arma-sim/admin/{party}"))
}

/// A consenter key nobody holds (what the refused updates would put in force).
pub fn rogue_key(replica: u32) -> SigningKey {
    derive_signing_key(Scheme::Ed25519, &format!("fabrx-arma-sim/rogue/{replica}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn party(id: u32) -> SimParty {
        SimParty {
            id,
            consenter: consenter_key(id - 1, 0).public_key(),
            batcher: derive_signing_key(Scheme::Ed25519, &format!("b{id}")).public_key(),
            admin: admin_key(id).public_key(),
        }
    }

    fn genesis(n: u32) -> SimConfig {
        SimConfig {
            sequence: 0,
            shards: 2,
            parties: (1..=n).map(party).collect(),
            left: Vec::new(),
        }
    }

    fn rotated(c: &SimConfig) -> SimConfig {
        let mut next = c.clone();
        next.sequence += 1;
        next.parties[0].consenter = consenter_key(0, 1).public_key();
        next
    }

    fn signed(c: &SimConfig, by: &[u32]) -> SimUpdate {
        let mut u = SimUpdate::new(c.sequence, &rotated(c));
        for p in by {
            u.approve(*p, &admin_key(*p));
        }
        u
    }

    fn approved(base: &SimConfig, next: &SimConfig, by: &[u32]) -> SimUpdate {
        let mut u = SimUpdate::new(base.sequence, next);
        for p in by {
            u.approve(*p, &admin_key(*p));
        }
        u
    }

    /// `c` without party `id`, one sequence on.
    fn without(c: &SimConfig, id: u32) -> SimConfig {
        let mut next = c.clone();
        next.sequence += 1;
        next.parties.retain(|p| p.id != id);
        next.left.push(id);
        next.left.sort_unstable();
        next
    }

    #[test]
    fn configs_and_updates_read_back() {
        let c = genesis(4);
        assert_eq!(SimConfig::decode(&c.encode()).unwrap(), c);
        let gap = without(&c, 2);
        assert_eq!(SimConfig::decode(&gap.encode()).unwrap(), gap);
        let u = signed(&c, &[1, 3, 4]);
        assert_eq!(SimUpdate::decode(&u.encode()).unwrap(), u);
        assert!(SimConfig::decode(&c.encode()[1..]).is_err());
        assert!(SimUpdate::decode(&u.encode()[..20]).is_err());
        // Ids out of order, or a party both in force and gone, do not read.
        let mut swapped = c.clone();
        swapped.parties.swap(0, 1);
        assert!(SimConfig::decode(&swapped.encode()).is_err());
        let mut both = gap.clone();
        both.left = vec![3];
        assert!(SimConfig::decode(&both.encode()).is_err());
    }

    #[test]
    fn the_rules_accept_a_majority_and_refuse_everything_else() {
        let c = genesis(4);
        let strict = SimRules::STRICT;
        assert_eq!(strict.check(&c, &signed(&c, &[1, 2, 3])).unwrap(), rotated(&c));
        assert_eq!(
            strict.check(&c, &signed(&c, &[1, 2])),
            Err(Refused::TooFew { got: 2, needed: 3 })
        );
        assert_eq!(
            strict.check(&c, &signed(&c, &[1, 2, 2])),
            Err(Refused::Approver { party: 2 })
        );
        assert_eq!(
            strict.check(&c, &signed(&c, &[1, 2, 5])),
            Err(Refused::Approver { party: 5 })
        );
        let mut forged = signed(&c, &[1, 2]);
        forged.approve(3, &admin_key(4));
        assert_eq!(strict.check(&c, &forged), Err(Refused::Signature { party: 3 }));
        let next = rotated(&c);
        assert_eq!(
            strict.check(&next, &signed(&c, &[1, 2, 3])),
            Err(Refused::Stale { base: 0, current: 1 })
        );
        let mut more = rotated(&c);
        more.shards = 3;
        assert_eq!(
            strict.check(&c, &approved(&c, &more, &[1, 2, 3])),
            Err(Refused::Changes {
                what: "number of shards"
            })
        );
        // Batcher keys rotate; two parties on one key do not.
        let mut keys = rotated(&c);
        keys.parties[1].batcher = batcher_key(2, 1).public_key();
        assert_eq!(strict.check(&c, &approved(&c, &keys, &[1, 2, 3])).unwrap(), keys);
        keys.parties[1].batcher = keys.parties[0].batcher.clone();
        assert_eq!(
            strict.check(&c, &approved(&c, &keys, &[1, 2, 3])),
            Err(Refused::Changes {
                what: "batcher keys into duplicates"
            })
        );
        let lax = SimRules {
            lax: true,
            stubborn: false,
        };
        assert!(lax.check(&c, &signed(&c, &[])).is_ok());
        let stubborn = SimRules {
            lax: false,
            stubborn: true,
        };
        assert_eq!(
            stubborn.check(&c, &signed(&c, &[1, 2, 3])),
            Err(Refused::Stubborn)
        );
    }

    #[test]
    fn one_party_may_join_or_leave_and_its_id_is_never_given_again() {
        let c = genesis(4);
        let strict = SimRules::STRICT;
        let refused = |base: &SimConfig, next: &SimConfig, what: &'static str| {
            let by: Vec<u32> = base.ids().into_iter().take(majority(base.count())).collect();
            assert_eq!(
                strict.check(base, &approved(base, next, &by)),
                Err(Refused::Changes { what }),
                "{what}"
            );
        };
        let mut joined = genesis(5);
        joined.sequence = 1;
        assert_eq!(
            strict.check(&c, &approved(&c, &joined, &[1, 2, 3])).unwrap(),
            joined
        );
        assert_eq!(SimRules::STRICT.view(&joined.encode()).unwrap().parties.len(), 5);
        // The joiner's approval does not count: it is not a party of the config in force.
        assert_eq!(
            strict.check(&c, &approved(&c, &joined, &[1, 2, 5])),
            Err(Refused::Approver { party: 5 })
        );
        let mut two = genesis(6);
        two.sequence = 1;
        refused(&c, &two, "parties by more than one joining or leaving");
        // Party 2 leaves: a gap, and 2 among those that left.
        let left = without(&c, 2);
        assert_eq!(strict.check(&c, &approved(&c, &left, &[2, 3, 4])).unwrap(), left);
        let view = strict.view(&left.encode()).unwrap();
        assert_eq!(view.parties.ids(), &[1, 3, 4]);
        assert_eq!(view.consenters.keys().copied().collect::<Vec<_>>(), vec![0, 2, 3]);
        assert!(view.batcher_keys.keys().all(|(p, _)| *p != 2));
        // Leaving without being listed as gone, or two at once, is refused.
        let mut unlisted = left.clone();
        unlisted.left.clear();
        refused(&c, &unlisted, "parties by more than one joining or leaving");
        let both = without(&without(&c, 2), 3);
        let mut both = both;
        both.sequence = 1;
        refused(&c, &both, "parties by more than one joining or leaving");
        // Nor a join with a leave, nor a joiner under the id of a party that left.
        let mut swap = left.clone();
        swap.parties.push(party(5));
        refused(&c, &swap, "parties by more than one joining or leaving");
        let mut again = left.clone();
        again.sequence = 2;
        again.parties.insert(1, party(2));
        assert_eq!(
            SimConfig::decode(&again.encode()),
            Err(Refused::Malformed {
                what: "parties that left"
            })
        );
        again.left.clear();
        refused(&left, &again, "parties by more than one joining or leaving");
        let mut fresh = left.clone();
        fresh.sequence = 2;
        fresh.parties.push(party(5));
        assert_eq!(
            strict.check(&left, &approved(&left, &fresh, &[1, 3])).unwrap(),
            fresh
        );
        // The last party does not leave.
        let alone = genesis(1);
        let mut empty = without(&alone, 1);
        empty.sequence = 1;
        assert!(SimConfig::decode(&empty.encode()).is_err());
        let mut replaced = joined.clone();
        replaced.parties[1].admin = admin_key(9).public_key();
        refused(&c, &replaced, "admin keys");
        let mut twin = joined.clone();
        twin.parties[4].admin = twin.parties[0].admin.clone();
        refused(&c, &twin, "admin keys into duplicates");
    }

    #[test]
    fn the_view_names_every_key() {
        let c = genesis(4);
        let v = SimRules::STRICT.view(&c.encode()).unwrap();
        let keys: Vec<PublicKey> = c.parties.iter().map(|p| p.consenter.clone()).collect();
        assert_eq!(v.consenters.values().cloned().collect::<Vec<_>>(), keys);
        assert_eq!(v.batcher_keys.len(), 8);
        assert_eq!((v.parties.len(), v.shards, v.sequence), (4, 2, 0));
    }
}
