//! A network config update (ADR 0018, docs/reconfiguration.md): the **whole next config**
//! and the parties' admin signatures on it. Pure: nothing here reads a file or a clock,
//! so every node that checks one update against one config in force reaches the same
//! verdict ([`validate`]).
//!
//! * [`propose`] makes the unsigned update from the config in force and the edited next
//!   config; [`sign`] adds one party's signature; [`merge`] joins the signatures of two
//!   copies of one update; [`validate`] says whether an update may replace the config in
//!   force, and gives the next config when it may.
//! * [`diff`] lists what the update changes, for the people who sign it.
//! * The file form is JSON ([`ConfigUpdate::to_json`], [`ConfigUpdate::from_json`]).
//!
//! An admin signs, under the crypto purpose `ConfigUpdate`,
//! `"fabrx/config/v1/update" ‖ chain ‖ u64le(sequence) ‖ SHA-256(config)`
//! ([`ConfigUpdate::signed_bytes`]). The tag has a fixed length and the last 40 bytes
//! are fixed-size fields, so the chain name is the bytes between them: two different
//! updates never sign the same bytes.

mod diff;
mod error;
mod followed;
mod joining;
mod leaving;
mod rules;
mod tls;

pub use diff::diff;
pub use error::{Result, UpdateError};
pub use joining::endpoints_in_use;
pub use leaving::without_party;
pub use rules::{NetworkRules, config_bytes};

use crate::config::NetworkConfig;
use crate::file::NetworkFile;
use crypto::{Signature, SigningKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use types::PartyId;

/// The update file format version this build writes and reads.
pub const VERSION: u32 = 1;

/// A config update: the next config in full, for the config of `sequence` on `chain`,
/// and the admin signatures collected so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigUpdate {
    /// The chain name of the network (the config in force's and the next config's).
    pub chain: String,
    /// The sequence of the config this update replaces (the next config has one more).
    pub sequence: u64,
    /// The next network config as canonical JSON text ([`canonical_json`]); its UTF-8
    /// bytes are what the signatures cover (through their SHA-256).
    pub config: String,
    /// The parties' admin signatures, each party once (kept in party order by [`sign`] and
    /// [`merge`]).
    pub signatures: Vec<UpdateSignature>,
    /// Proofs that the node keys the update brings in are held ([`prove`]): one for each
    /// consenter and batcher key the next config names and the config in force does not.
    /// Not covered by the admins' signatures: each proves itself.
    pub proofs: Vec<KeyProof>,
}

/// A node key's proof that it is held: its signature over
/// `"fabrx/config/v1/key-proof" ‖ chain ‖ the key's text` ([`key_proof_bytes`]), under
/// the crypto purpose `ConfigUpdate`. It binds the chain, not the update: made once when
/// the key is made, it serves whichever update brings the key in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyProof {
    /// The public key (`scheme:hex`, as the config names it).
    pub key: crypto::PublicKey,
    /// Its signature over [`key_proof_bytes`] (hex in the file).
    pub signature: Signature,
}

/// What a node key signs to prove it is held on `chain`.
pub fn key_proof_bytes(chain: &str, key: &crypto::PublicKey) -> Vec<u8> {
    let tag = types::tags::config::KEY_PROOF;
    let text = key.to_string();
    let mut out = Vec::with_capacity(tag.len() + chain.len() + 1 + text.len());
    out.extend_from_slice(tag);
    out.extend_from_slice(chain.as_bytes());
    // The chain name is printable ASCII without spaces: a space ends it.
    out.push(b' ');
    out.extend_from_slice(text.as_bytes());
    out
}

/// One party admin's signature on an update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateSignature {
    /// The signing party (of the config in force).
    pub party: PartyId,
    /// Its admin key's signature over [`ConfigUpdate::signed_bytes`] (hex in the file).
    pub signature: Signature,
}

/// The JSON form of an update file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateFile {
    version: u32,
    chain: String,
    sequence: u64,
    config: String,
    #[serde(default)]
    signatures: Vec<UpdateSignature>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    key_proofs: Vec<KeyProof>,
}

/// The canonical JSON text of a network config: compact, fields in their declared order,
/// absent optional sections left out. The same config always gives the same text.
pub fn canonical_json(file: &NetworkFile) -> String {
    serde_json::to_string(file).unwrap_or_default()
}

impl ConfigUpdate {
    /// The file form: pretty JSON ending with a newline (`version`, `chain`, `sequence`,
    /// `config` as a JSON string, `signatures` as `[{"party", "signature"}]`).
    pub fn to_json(&self) -> String {
        let file = UpdateFile {
            version: VERSION,
            chain: self.chain.clone(),
            sequence: self.sequence,
            config: self.config.clone(),
            signatures: self.signatures.clone(),
            key_proofs: self.proofs.clone(),
        };
        let mut text = serde_json::to_string_pretty(&file).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Parses the file form (unknown fields refused). Nothing is validated beyond the
    /// shape: [`validate`] does that.
    pub fn from_json(text: &str) -> Result<ConfigUpdate> {
        let file: UpdateFile = serde_json::from_str(text).map_err(|e| UpdateError::Parse {
            reason: e.to_string(),
        })?;
        if file.version != VERSION {
            return Err(UpdateError::UnsupportedVersion {
                version: file.version,
                supported: VERSION,
            });
        }
        Ok(ConfigUpdate {
            chain: file.chain,
            sequence: file.sequence,
            config: file.config,
            signatures: file.signatures,
            proofs: file.key_proofs,
        })
    }

    /// SHA-256 of the config text.
    pub fn config_digest(&self) -> [u8; 32] {
        Sha256::digest(self.config.as_bytes()).into()
    }

    /// What an admin signs: `"fabrx/config/v1/update" ‖ chain ‖ u64le(sequence) ‖
    /// SHA-256(config)`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let tag = types::tags::config::UPDATE;
        let mut out = Vec::with_capacity(tag.len() + self.chain.len() + 8 + 32);
        out.extend_from_slice(tag);
        out.extend_from_slice(self.chain.as_bytes());
        out.extend_from_slice(&self.sequence.to_le_bytes());
        out.extend_from_slice(&self.config_digest());
        out
    }

    /// The parties listed as signers, in list order.
    pub fn signers(&self) -> Vec<PartyId> {
        self.signatures.iter().map(|s| s.party).collect()
    }

    /// The next config's file, parsed; its text must be canonical ([`canonical_json`]) so
    /// that one next config has one update text. Not validated.
    pub fn next_file(&self) -> Result<NetworkFile> {
        let file: NetworkFile = serde_json::from_str(&self.config).map_err(|e| UpdateError::BadConfig {
            source: crate::Error::Parse {
                reason: e.to_string(),
            },
        })?;
        if canonical_json(&file) != self.config {
            return Err(UpdateError::NotCanonical);
        }
        Ok(file)
    }
}

/// The unsigned update that replaces `current` with `next`: `next` must be a valid config
/// of the same chain and shards with sequence `current.sequence() + 1`, and the network in
/// force must have enough parties with admin keys for its update policy.
pub fn propose(current: &NetworkConfig, next: &NetworkFile) -> Result<ConfigUpdate> {
    // `retired_keys` as the rules want it: the keys retired before and those the next
    // config no longer names.
    let mut next = next.clone();
    let unretired = NetworkFile {
        retired_keys: Vec::new(),
        ..next.clone()
    };
    if let Ok(parsed) = NetworkConfig::from_file(unretired) {
        next.retired_keys = retired_after(current, &parsed)
            .iter()
            .map(ToString::to_string)
            .collect();
    }
    let update = ConfigUpdate {
        chain: current.chain().to_string(),
        sequence: current.sequence(),
        config: canonical_json(&next),
        signatures: Vec::new(),
        proofs: Vec::new(),
    };
    validate_unsigned(current, &update)?;
    Ok(update)
}

/// Adds `party`'s signature made with `key` (its admin key), replacing any signature the
/// party already has on the update; signatures stay in party order.
pub fn sign(update: &mut ConfigUpdate, party: PartyId, key: &SigningKey) {
    let signature = crypto::sign_config_update(key, &update.signed_bytes());
    update.signatures.retain(|s| s.party != party);
    let at = update.signatures.partition_point(|s| s.party < party);
    update.signatures.insert(at, UpdateSignature { party, signature });
}

/// Adds the proof that `key` is held (a node key the update brings in), replacing any
/// proof of the same public key.
pub fn prove(update: &mut ConfigUpdate, key: &SigningKey) {
    let public = key.public_key();
    let signature = crypto::sign_config_update(key, &key_proof_bytes(&update.chain, &public));
    update.proofs.retain(|p| p.key != public);
    update.proofs.push(KeyProof {
        key: public,
        signature,
    });
}

/// The node keys (consenter and batcher) `next` names and `current` does not, with their
/// holders: the keys an update from `current` to `next` must prove held.
pub fn new_node_keys(current: &NetworkConfig, next: &NetworkConfig) -> Vec<(String, crypto::PublicKey)> {
    let before: Vec<&crypto::PublicKey> = crate::config::named_keys(current.parties())
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    crate::config::node_keys(next.parties())
        .into_iter()
        .filter(|(_, k)| !before.contains(k))
        .map(|(holder, k)| (holder, k.clone()))
        .collect()
}

/// Every node key the update brings in is proven held, and the proofs are exactly those:
/// one per new key, none of another key (so their number is bounded by the config's
/// node keys, and a stuffed list costs nothing to refuse); the first that does not
/// verify is the error.
fn check_proofs(current: &NetworkConfig, next: &NetworkConfig, update: &ConfigUpdate) -> Result<()> {
    let needed = new_node_keys(current, next);
    let mut seen = BTreeSet::new();
    for proof in &update.proofs {
        let text = proof.key.to_string();
        if !needed.iter().any(|(_, k)| *k == proof.key) || !seen.insert(text.clone()) {
            return Err(UpdateError::KeyProofNotNeeded { key: text });
        }
    }
    for (holder, key) in &needed {
        let proof =
            update
                .proofs
                .iter()
                .find(|p| p.key == *key)
                .ok_or_else(|| UpdateError::KeyNotProven {
                    holder: holder.clone(),
                    key: key.to_string(),
                })?;
        crypto::verify_config_update(key, &key_proof_bytes(&update.chain, key), &proof.signature).map_err(
            |_| UpdateError::BadKeyProof {
                holder: holder.clone(),
                key: key.to_string(),
            },
        )?;
    }
    Ok(())
}

/// The signatures of `a` and `b`, two copies of one update (same chain, sequence and
/// config, else [`UpdateError::DifferentUpdates`]), in party order. A party with
/// different signatures in the two is refused ([`UpdateError::ConflictingSignatures`]).
pub fn merge(a: &ConfigUpdate, b: &ConfigUpdate) -> Result<ConfigUpdate> {
    let what = if a.chain != b.chain {
        Some("chain")
    } else if a.sequence != b.sequence {
        Some("sequence")
    } else if a.config != b.config {
        Some("config")
    } else {
        None
    };
    if let Some(what) = what {
        return Err(UpdateError::DifferentUpdates { what });
    }
    let mut merged = a.clone();
    for s in &b.signatures {
        match merged.signatures.iter().find(|m| m.party == s.party) {
            Some(m) if m.signature == s.signature => {}
            Some(_) => return Err(UpdateError::ConflictingSignatures { party: s.party }),
            None => merged.signatures.push(s.clone()),
        }
    }
    merged.signatures.sort_by_key(|s| s.party);
    // A key proven in both copies keeps `a`'s proof (either verifies, or neither).
    for p in &b.proofs {
        if !merged.proofs.iter().any(|m| m.key == p.key) {
            merged.proofs.push(p.clone());
        }
    }
    Ok(merged)
}

/// Whether `update` may replace `current`, the config in force, and the next config when
/// it may. Deterministic; in this order, cheapest first (the consenters run it on what
/// anyone submits, so an unsigned update is refused before its config is parsed): the
/// chain is the network's; the update replaces exactly the config in force
/// ([`UpdateError::StaleSequence`], [`UpdateError::FutureSequence`]); the network has
/// enough admin keys for its policy; every listed signature is by a distinct current
/// party with an admin key and verifies (the first that does not is the error, named by
/// party); at least K parties signed; its config is canonical, valid
/// (`NetworkConfig::from_file`), of the same chain and shards, with the next sequence;
/// and every node key it brings in is proven held ([`prove`]).
pub fn validate(current: &NetworkConfig, update: &ConfigUpdate) -> Result<NetworkConfig> {
    check_header(current, update)?;
    check_updatable(current)?;
    // The first bad signature refuses the update (the verdicts are made one at a time):
    // no more verifications than that for an update filled with forged ones.
    for (_, verdict) in signature_verdicts(current, update) {
        verdict?;
    }
    let signed = update.signers().into_iter().collect::<BTreeSet<_>>().len();
    let signatures = u32::try_from(signed).unwrap_or(u32::MAX);
    let needed = current.update_signatures();
    if signatures < needed {
        return Err(UpdateError::NotEnoughSignatures { signatures, needed });
    }
    let next = check_next(current, update)?;
    check_proofs(current, &next, update)?;
    Ok(next)
}

/// Everything [`validate`] checks but the signatures: what an update must be before anyone
/// signs it ([`propose`] makes only such updates). Gives the next config.
pub fn validate_unsigned(current: &NetworkConfig, update: &ConfigUpdate) -> Result<NetworkConfig> {
    check_header(current, update)?;
    check_updatable(current)?;
    check_next(current, update)
}

/// Each listed signature's verdict against `current`, in list order, made as the
/// iterator is read: a party not in the network, without an admin key, listed a second
/// time, or whose signature does not verify is an error naming it.
pub fn signature_verdicts<'a>(
    current: &'a NetworkConfig,
    update: &'a ConfigUpdate,
) -> impl Iterator<Item = (PartyId, Result<()>)> + 'a {
    let message = update.signed_bytes();
    let mut seen = BTreeSet::new();
    update.signatures.iter().map(move |s| {
        let verdict = if seen.insert(s.party) {
            check_signature(current, &message, s)
        } else {
            Err(UpdateError::DuplicateSigner { party: s.party })
        };
        (s.party, verdict)
    })
}

fn check_signature(current: &NetworkConfig, message: &[u8], s: &UpdateSignature) -> Result<()> {
    let party = current.party(s.party).map_err(|_| UpdateError::UnknownSigner {
        party: s.party,
        parties: current.party_list(),
    })?;
    let key = party
        .admin_key
        .as_ref()
        .ok_or(UpdateError::SignerWithoutKey { party: s.party })?;
    crypto::verify_config_update(key, message, &s.signature)
        .map_err(|_| UpdateError::BadSignature { party: s.party })
}

/// The keys retired after `next` replaces `current`: those `current` lists as retired and
/// those it names that `next` does not, ordered by their text.
fn retired_after(current: &NetworkConfig, next: &NetworkConfig) -> Vec<crypto::PublicKey> {
    let mut out = crate::config::retired_keys(current.file()).unwrap_or_default();
    let named: Vec<&crypto::PublicKey> = crate::config::named_keys(next.parties())
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    for (_, k) in crate::config::named_keys(current.parties()) {
        if !named.contains(&k) && !out.contains(k) {
            out.push(k.clone());
        }
    }
    out.sort_by_key(ToString::to_string);
    out
}

/// Keys across an update: no key passes from one holder to another (a node or admin that
/// held it would then sign as the other), and `retired_keys` lists exactly the keys
/// retired before and those the update retires (the next config refuses to name a
/// retired key itself).
fn check_keys(current: &NetworkConfig, next: &NetworkConfig) -> Result<()> {
    let before = crate::config::named_keys(current.parties());
    for (holder, key) in crate::config::named_keys(next.parties()) {
        if let Some((was, _)) = before.iter().find(|(_, k)| *k == key)
            && *was != holder
        {
            return Err(UpdateError::KeyMoved {
                key: key.to_string(),
                from: was.clone(),
                to: holder,
            });
        }
    }
    let expected = retired_after(current, next);
    let listed = crate::config::retired_keys(next.file()).unwrap_or_default();
    let missing: Vec<String> = expected
        .iter()
        .filter(|k| !listed.contains(k))
        .map(ToString::to_string)
        .collect();
    let extra: Vec<String> = listed
        .iter()
        .filter(|k| !expected.contains(k))
        .map(ToString::to_string)
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        return Err(UpdateError::RetiredKeys { missing, extra });
    }
    Ok(())
}

/// The network in force has at least K parties with admin keys.
fn check_updatable(current: &NetworkConfig) -> Result<()> {
    let admins = current.parties().iter().filter(|p| p.admin_key.is_some()).count();
    let admins = u32::try_from(admins).unwrap_or(u32::MAX);
    let needed = current.update_signatures();
    if admins < needed {
        return Err(UpdateError::NotUpdatable {
            sequence: current.sequence(),
            admins,
            needed,
        });
    }
    Ok(())
}

/// The update replaces the config in force on its chain (its own fields only: cheap).
fn check_header(current: &NetworkConfig, update: &ConfigUpdate) -> Result<()> {
    if update.chain != current.chain() {
        return Err(UpdateError::WrongChain {
            update: update.chain.clone(),
            current: current.chain().to_string(),
        });
    }
    let at = current.sequence();
    if update.sequence < at {
        return Err(UpdateError::StaleSequence {
            update: update.sequence,
            current: at,
        });
    }
    if update.sequence > at {
        return Err(UpdateError::FutureSequence {
            update: update.sequence,
            current: at,
        });
    }
    Ok(())
}

/// The update's config is a valid next config (canonical, same chain and shards, next
/// sequence, only changes the roles follow, at most one party joining under `joining`'s
/// rules or one leaving under `leaving`'s). Gives the next config.
fn check_next(current: &NetworkConfig, update: &ConfigUpdate) -> Result<NetworkConfig> {
    let at = current.sequence();
    let expected = at
        .checked_add(1)
        .ok_or(UpdateError::SequenceOverflow { current: at })?;
    let file = update.next_file()?;
    if file.sequence != expected {
        return Err(UpdateError::NextSequence {
            next: file.sequence,
            expected,
        });
    }
    if file.chain != current.chain() {
        return Err(UpdateError::ChainChanged {
            current: current.chain().to_string(),
            next: file.chain,
        });
    }
    if file.shards != current.shards().get() {
        return Err(UpdateError::ShardsChanged {
            current: current.shards().get(),
            next: file.shards,
        });
    }
    let leaving = leaving::check(current, &file)?;
    let joining = joining::check(current, &file)?;
    let changes = followed::not_followed(current.file(), &file, joining, leaving);
    if !changes.is_empty() {
        return Err(UpdateError::NotFollowed { changes });
    }
    // More than f new consenter keys at once: if their nodes lack them, the new set can
    // never decide, and no later update could repair it. A joining party's consenter is a
    // new key too (its node may not run, or not have caught up).
    let rotated: Vec<PartyId> = file
        .parties
        .iter()
        .filter(|p| {
            current
                .file()
                .parties
                .iter()
                .any(|c| c.id == p.id && c.consenter.public_key != p.consenter.public_key)
        })
        .map(|p| p.id)
        .chain(joining)
        .collect();
    // Over the smaller of the two sets: a party leaving lowers f at once.
    let n = current
        .n()
        .min(u32::try_from(file.parties.len()).unwrap_or(u32::MAX));
    let f = n.saturating_sub(1) / 3;
    if rotated.len() > f as usize {
        return Err(UpdateError::TooManyConsenterKeys { parties: rotated, f });
    }
    let next = NetworkConfig::from_file(file).map_err(|source| UpdateError::BadConfig { source })?;
    // The next config must itself be updatable, or it is the last one the network gets.
    check_updatable(&next).map_err(|e| match e {
        UpdateError::NotUpdatable { admins, needed, .. } => UpdateError::NextNotUpdatable { admins, needed },
        other => other,
    })?;
    check_keys(current, &next)?;
    tls::check_tls(current.file(), next.file())?;
    Ok(next)
}
