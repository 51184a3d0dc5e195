//! The simulation's network config and its update rules (docs/ordering-sim.md
//! "Reconfiguration"): a small [`ConfigRules`] of its own, since this crate may not
//! depend on `netconfig`.
//!
//! A config ([`SimConfig`]) is `tag ‖ u64 sequence ‖ u32 n ‖ u32 shards` and then, per
//! party in order, its consenter, batcher and admin Ed25519 public keys (32 bytes each;
//! big-endian integers). An update ([`SimUpdate`]) is `tag ‖ u64 base ‖ u32 len ‖ next
//! config ‖ u32 count ‖ (u32 party ‖ 64-byte signature)*`: it replaces the config of
//! sequence `base` with `next`, approved by the listed parties' admins, each signing
//! `APPROVAL_TAG ‖ base ‖ SHA-256(next)` (crypto purpose `ConfigUpdate`).
//!
//! [`SimRules::next`] accepts an update exactly when: it decodes; `base` is the sequence
//! in force; the next config decodes, has sequence `base + 1`, the same shards, the same
//! parties or one more (a party joining in the next slot), the current parties' admin
//! keys unchanged, distinct admin, consenter and batcher keys; every approval is by a
//! distinct party of the config in force and verifies under its admin key; and a
//! majority of the parties in force (⌊n/2⌋ + 1) approved. The first failing check is the
//! reason. Consenter and batcher keys may change and a party may join; none leaves.

use std::collections::BTreeMap;
use std::fmt;

use arma::{BatchingView, ConfigRules, ConfigView};
use crypto::{PublicKey, Scheme, Signature, SigningKey, derive_signing_key};
use sha2::{Digest as _, Sha256};

const CONFIG_TAG: &[u8] = b"fabrx/ordersim/config/v1";
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

/// A network config as the simulation writes it.
#[derive(Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// One more per update (genesis: 0).
    pub sequence: u64,
    /// Shards.
    pub shards: u32,
    /// Consenter keys, replica order (party `i + 1`).
    pub consenters: Vec<PublicKey>,
    /// Batcher keys per party (one key for all its shards).
    pub batchers: Vec<PublicKey>,
    /// Admin keys per party.
    pub admins: Vec<PublicKey>,
}

impl fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimConfig")
            .field("sequence", &self.sequence)
            .field("parties", &self.consenters.len())
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
        let n = self.consenters.len();
        let mut out = Vec::with_capacity(CONFIG_TAG.len() + 16 + 3 * KEY * n);
        out.extend_from_slice(CONFIG_TAG);
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&len_u32(n));
        out.extend_from_slice(&self.shards.to_be_bytes());
        for p in 0..n {
            for keys in [&self.consenters, &self.batchers, &self.admins] {
                if let Some(k) = keys.get(p) {
                    out.extend_from_slice(k.as_bytes());
                }
            }
        }
        out
    }

    /// Reads [`SimConfig::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<SimConfig, Refused> {
        let mut rest = bytes
            .strip_prefix(CONFIG_TAG)
            .ok_or(Refused::Malformed { what: "config tag" })?;
        let sequence = take_u64(&mut rest, "config sequence")?;
        let n = take_u32(&mut rest, "config parties")? as usize;
        let shards = take_u32(&mut rest, "config shards")?;
        if n == 0 || shards == 0 || rest.len() != 3 * KEY * n {
            return Err(Refused::Malformed { what: "config size" });
        }
        let key = |rest: &mut &[u8]| {
            let bytes = take(rest, KEY, "config key")?;
            PublicKey::from_bytes(Scheme::Ed25519, bytes)
                .map_err(|_| Refused::Malformed { what: "config key" })
        };
        let (mut consenters, mut batchers, mut admins) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            consenters.push(key(&mut rest)?);
            batchers.push(key(&mut rest)?);
            admins.push(key(&mut rest)?);
        }
        Ok(SimConfig {
            sequence,
            shards,
            consenters,
            batchers,
            admins,
        })
    }

    /// Number of parties.
    pub fn parties(&self) -> u32 {
        u32::try_from(self.consenters.len()).unwrap_or(u32::MAX)
    }

    /// What the ordering reads of it.
    pub fn view(&self) -> ConfigView {
        let batcher_keys = (1..=self.parties())
            .zip(&self.batchers)
            .flat_map(|(p, k)| (0..self.shards).map(move |s| ((p, s), k.clone())))
            .collect::<BTreeMap<_, _>>();
        ConfigView {
            sequence: self.sequence,
            parties: arma::Parties::contiguous(self.parties()),
            left_parties: Vec::new(),
            shards: self.shards,
            batcher_keys,
            consenters: (0u32..).zip(self.consenters.iter().cloned()).collect(),
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
        // One party may join (the next slot); none leaves.
        let joins = next.parties() == current.parties().saturating_add(1);
        if next.parties() != current.parties() && !joins {
            return changes("number of parties by more than one joining");
        }
        if next.shards != current.shards {
            return changes("number of shards");
        }
        if next.admins.get(..current.admins.len()) != Some(current.admins.as_slice()) {
            return changes("admin keys");
        }
        if !distinct(&next.admins) {
            return changes("admin keys into duplicates");
        }
        if !distinct(&next.consenters) {
            return changes("consenter keys into duplicates");
        }
        if !distinct(&next.batchers) {
            return changes("batcher keys into duplicates");
        }
        if self.lax {
            return Ok(next);
        }
        let message = update.approval_bytes();
        let mut seen = std::collections::BTreeSet::new();
        for (party, signature) in &update.approvals {
            let admin = party
                .checked_sub(1)
                .and_then(|i| current.admins.get(i as usize))
                .filter(|_| seen.insert(*party))
                .ok_or(Refused::Approver { party: *party })?;
            let signature = Signature::from_bytes(signature.clone());
            crypto::verify_config_update(admin, &message, &signature)
                .map_err(|_| Refused::Signature { party: *party })?;
        }
        let needed = majority(current.parties());
        if seen.len() < needed {
            return Err(Refused::TooFew {
                got: seen.len(),
                needed,
            });
        }
        Ok(next)
    }
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

    fn genesis(n: u32) -> SimConfig {
        SimConfig {
            sequence: 0,
            shards: 2,
            consenters: (0..n).map(|i| consenter_key(i, 0).public_key()).collect(),
            batchers: (1..=n)
                .map(|p| derive_signing_key(Scheme::Ed25519, &format!("b{p}")).public_key())
                .collect(),
            admins: (1..=n).map(|p| admin_key(p).public_key()).collect(),
        }
    }

    fn rotated(c: &SimConfig) -> SimConfig {
        let mut next = c.clone();
        next.sequence += 1;
        next.consenters[0] = consenter_key(0, 1).public_key();
        next
    }

    fn signed(c: &SimConfig, by: &[u32]) -> SimUpdate {
        let mut u = SimUpdate::new(c.sequence, &rotated(c));
        for p in by {
            u.approve(*p, &admin_key(*p));
        }
        u
    }

    #[test]
    fn configs_and_updates_read_back() {
        let c = genesis(4);
        assert_eq!(SimConfig::decode(&c.encode()).unwrap(), c);
        let u = signed(&c, &[1, 3, 4]);
        assert_eq!(SimUpdate::decode(&u.encode()).unwrap(), u);
        assert!(SimConfig::decode(&c.encode()[1..]).is_err());
        assert!(SimUpdate::decode(&u.encode()[..20]).is_err());
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
        let mut u = SimUpdate::new(0, &more);
        for p in 1..=3 {
            u.approve(p, &admin_key(p));
        }
        assert_eq!(
            strict.check(&c, &u),
            Err(Refused::Changes {
                what: "number of shards"
            })
        );
        // Batcher keys rotate; two parties on one key do not.
        let mut keys = rotated(&c);
        keys.batchers[1] = batcher_key(2, 1).public_key();
        let mut u = SimUpdate::new(0, &keys);
        for p in 1..=3 {
            u.approve(p, &admin_key(p));
        }
        assert_eq!(strict.check(&c, &u).unwrap(), keys);
        keys.batchers[1] = keys.batchers[0].clone();
        let mut u = SimUpdate::new(0, &keys);
        for p in 1..=3 {
            u.approve(p, &admin_key(p));
        }
        assert_eq!(
            strict.check(&c, &u),
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
    fn one_party_may_join_and_none_leave() {
        let c = genesis(4);
        let strict = SimRules::STRICT;
        let approved = |next: &SimConfig| {
            let mut u = SimUpdate::new(0, next);
            for p in 1..=3 {
                u.approve(p, &admin_key(p));
            }
            u
        };
        let mut joined = genesis(5);
        joined.sequence = 1;
        assert_eq!(strict.check(&c, &approved(&joined)).unwrap(), joined);
        assert_eq!(SimRules::STRICT.view(&joined.encode()).unwrap().parties.len(), 5);
        // The joiner's approval does not count: it is not a party of the config in force.
        let mut own = SimUpdate::new(0, &joined);
        for p in [1, 2, 5] {
            own.approve(p, &admin_key(p));
        }
        assert_eq!(strict.check(&c, &own), Err(Refused::Approver { party: 5 }));
        let refused = |next: &SimConfig, what: &'static str| {
            assert_eq!(
                strict.check(&c, &approved(next)),
                Err(Refused::Changes { what }),
                "{what}"
            );
        };
        let mut two = genesis(6);
        two.sequence = 1;
        refused(&two, "number of parties by more than one joining");
        let mut left = genesis(3);
        left.sequence = 1;
        refused(&left, "number of parties by more than one joining");
        let mut replaced = joined.clone();
        replaced.admins[1] = admin_key(9).public_key();
        refused(&replaced, "admin keys");
        let mut twin = joined.clone();
        twin.admins[4] = twin.admins[0].clone();
        refused(&twin, "admin keys into duplicates");
    }

    #[test]
    fn the_view_names_every_key() {
        let c = genesis(4);
        let v = SimRules::STRICT.view(&c.encode()).unwrap();
        assert_eq!(v.consenters.values().cloned().collect::<Vec<_>>(), c.consenters);
        assert_eq!(v.batcher_keys.len(), 8);
        assert_eq!((v.parties.len(), v.shards, v.sequence), (4, 2, 0));
    }
}
