//! The requests batchers submit to the consenters: a `ConsenterRequest` holding one BAF or
//! one complaint (proto `fabrx/v1/orderer.proto`), decoded and checked against the
//! network's batcher keys.

use std::collections::HashSet;
use std::sync::Mutex;

use arma::{Baf, Complaint};
pub use arma::{encode_baf, encode_complaint};
use crypto::PublicKey;
use prost::Message as _;
use sha2::{Digest as _, Sha256};
use types::ShardId;
use wire::pb;

use super::config::ArmaConfig;
use super::error::{ArmaError, ArmaResult};

/// A decoded request: what the state machine counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A batch attestation fragment.
    Baf(Baf),
    /// A complaint against a shard's primary.
    Complaint(Complaint),
    /// A network config update (its file's bytes), checked by the config rules against
    /// the config in force when it is executed.
    ConfigUpdate(Vec<u8>),
}

impl Item {
    /// The shard the item is about (none for a config update).
    pub fn shard(&self) -> Option<ShardId> {
        match self {
            Item::Baf(b) => Some(b.header.id.shard),
            Item::Complaint(c) => Some(c.shard),
            Item::ConfigUpdate(_) => None,
        }
    }
}

/// A config update as a consenter request.
pub fn encode_config_update(update: &[u8]) -> Vec<u8> {
    pb::ConsenterRequest {
        kind: Some(pb::consenter_request::Kind::ConfigUpdate(update.to_vec())),
    }
    .encode_to_vec()
}

/// Decodes a request without checking signatures (for decisions a quorum already
/// checked): structure, shard and parties only.
pub fn decode(cfg: &ArmaConfig, bytes: &[u8]) -> ArmaResult<Item> {
    let bad = |what: &'static str| ArmaError::Decode { what };
    let request = pb::ConsenterRequest::decode(bytes).map_err(|_| bad("not a ConsenterRequest"))?;
    let item = match request.kind.ok_or(bad("empty request"))? {
        pb::consenter_request::Kind::Baf(b) => Item::Baf(Baf::try_from(b).map_err(|e| bad(e.what))?),
        pb::consenter_request::Kind::Complaint(c) => {
            Item::Complaint(Complaint::try_from(c).map_err(|e| bad(e.what))?)
        }
        pb::consenter_request::Kind::ConfigUpdate(u) => Item::ConfigUpdate(u),
    };
    if let Some(shard) = item.shard() {
        cfg.check_shard(shard)?;
    }
    match &item {
        Item::Baf(b) => {
            cfg.check_party(b.signer)?;
            cfg.check_party(b.header.id.primary)?;
        }
        Item::Complaint(c) => cfg.check_party(c.signer)?,
        Item::ConfigUpdate(_) => {}
    }
    Ok(item)
}

/// Decodes a request and checks it against the config in force: a BAF's or complaint's
/// config sequence must be the one in force, then its signatures must verify under the
/// network's batcher keys (a BAF's signer and primary signatures, a complaint's signer
/// signature). A config update is only decoded: the config rules check it (`ArmaApp`).
pub fn decode_verified(cfg: &ArmaConfig, bytes: &[u8]) -> ArmaResult<Item> {
    decode_verified_with(cfg, bytes, &PrimarySignatures::default())
}

/// [`decode_verified`], checking a BAF's primary signature only when `primaries` does
/// not hold it yet: the f+1 (up to N) BAFs of one batch carry the same primary signature
/// over the same header, so a consenter verifies it once per batch instead of once per
/// BAF. The signer's own signature is always checked.
pub fn decode_verified_with(
    cfg: &ArmaConfig,
    bytes: &[u8],
    primaries: &PrimarySignatures,
) -> ArmaResult<Item> {
    let item = decode(cfg, bytes)?;
    let bad = |which, party, shard| ArmaError::BadSignature { which, party, shard };
    match &item {
        Item::Baf(b) => {
            let shard = b.header.id.shard;
            let primary = b.header.id.primary;
            cfg.check_sequence("BAF", b.signer, b.config)?;
            if !cfg.batcher_key(b.signer, shard).is_some_and(|k| b.verifies(k)) {
                return Err(bad("BAF", b.signer, shard));
            }
            let Some(key) = cfg.batcher_key(primary, shard) else {
                return Err(bad("primary", primary, shard));
            };
            let seen = PrimarySignatures::key_of(b, key);
            if !primaries.contains(&seen) {
                if !b.primary_verifies(key) {
                    return Err(bad("primary", primary, shard));
                }
                primaries.insert(seen);
            }
        }
        Item::Complaint(c) => {
            cfg.check_sequence("complaint", c.signer, c.config)?;
            if !cfg.batcher_key(c.signer, c.shard).is_some_and(|k| c.verifies(k)) {
                return Err(bad("complaint", c.signer, c.shard));
            }
        }
        Item::ConfigUpdate(_) => {}
    }
    Ok(item)
}

/// Primary signatures over batch headers that verified, by
/// `SHA-256(key ‖ signed header ‖ signature)`: two generations of at most
/// [`PRIMARY_SIGNATURES`] entries each (bounded; the older generation is dropped whole).
/// Shared by the threads that verify requests; an entry only ever records a successful
/// verification, so a lost or dropped entry costs a verification, never safety.
#[derive(Debug, Default)]
pub struct PrimarySignatures {
    generations: Mutex<[HashSet<[u8; 32]>; 2]>,
}

/// Entries per generation of [`PrimarySignatures`]: far more batches than are in flight.
pub const PRIMARY_SIGNATURES: usize = 4_096;

impl PrimarySignatures {
    fn key_of(baf: &Baf, key: &PublicKey) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(key.as_bytes());
        h.update(baf.header.signed_bytes());
        h.update(baf.primary_signature.as_bytes());
        h.finalize().into()
    }

    fn contains(&self, d: &[u8; 32]) -> bool {
        let g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        g[0].contains(d) || g[1].contains(d)
    }

    fn insert(&self, d: [u8; 32]) {
        let mut g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        if g[0].len() >= PRIMARY_SIGNATURES {
            g[1] = std::mem::take(&mut g[0]);
        }
        g[0].insert(d);
    }

    /// Entries held (both generations).
    pub fn len(&self) -> usize {
        let g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        g[0].len() + g[1].len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
