//! Structural checks of a transaction (the `MALFORMED_*` statuses and 102), as pure
//! functions. Decoding of bytes is behind [`PayloadDecoder`] so the protobuf layer
//! (crate `wire`) stays at the edge; these functions decide, they do not parse.
//!
//! Order of checks (the first failing one decides the status):
//! 1. envelope: id missing (102) or not well formed (101); a reserved self-certified id
//!    (`txid::SELF_CERTIFIED_ID_PREFIX`) not derived from this envelope's nonce by a
//!    self-certified creator, or a self-certified creator without such an id (101: never
//!    stored, so the id stays its creator's); payload type unsupported (103); id not
//!    derived from nonce and creator (105); payload undecodable (104 for a tx, 115 for a
//!    config update);
//! 2. transaction: no namespaces (106); then per namespace in order: id invalid (108),
//!    duplicate (107), blind writes in `_meta` (109), no writes (110), empty key (111),
//!    duplicate key (112), key or value over the size limit (104), invalid `_meta`
//!    entry (114); then a namespace without an endorsement (113).

use crate::policy::NamespacePolicy;
use crate::status::Status;
use crate::tx::{Tx, TxId, TxNamespace};
use crate::{META_NAMESPACE, txid};
use std::collections::HashSet;

/// Longest key accepted, in bytes (fits a PostgreSQL btree index entry).
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value accepted, in bytes.
pub const MAX_VALUE_LEN: usize = 1 << 20;
/// Longest namespace id.
pub const MAX_NAMESPACE_ID_LEN: usize = 60;

/// What an envelope's payload holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind {
    /// A serialized transaction.
    Tx,
    /// A serialized configuration update.
    Config,
    /// Any other payload type number.
    Unsupported(i32),
}

/// The fields of a decoded envelope that the checks look at.
#[derive(Debug, Clone, Copy)]
pub struct EnvelopeParts<'a> {
    /// The payload type.
    pub kind: PayloadKind,
    /// The tx id carried by the envelope.
    pub tx_id: &'a str,
    /// The nonce (empty: free-form id).
    pub nonce: &'a [u8],
    /// The serialized creator identity.
    pub creator: &'a [u8],
    /// The payload bytes.
    pub payload: &'a [u8],
    /// Whether the creator is self-certified (its identity is its key; the committer's
    /// intake checks its signature over the payload).
    pub self_certified: bool,
}

/// A payload that passed the structural checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckedPayload {
    /// A data or `_meta` transaction.
    Tx(Tx),
    /// A configuration update: the new policy for `_meta` transactions.
    Config(NamespacePolicy),
}

/// Decodes payload bytes; implemented over protobuf by crate `wire`.
pub trait PayloadDecoder {
    /// Decodes a serialized transaction.
    fn decode_tx(&self, payload: &[u8]) -> Option<Tx>;
    /// Decodes a `_meta` value into a policy whose key is usable.
    fn decode_policy(&self, value: &[u8]) -> Option<NamespacePolicy>;
    /// Decodes a configuration update into the new `_meta` policy.
    fn decode_config(&self, payload: &[u8]) -> Option<NamespacePolicy>;
}

/// Whether `id` matches `^[a-z0-9_]{1,60}$`.
pub fn is_valid_namespace_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_NAMESPACE_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Checks a tx id alone: missing (102) or not well formed (101).
pub fn check_tx_id(id: &str) -> Result<(), Status> {
    if id.is_empty() {
        return Err(Status::MalformedMissingTxId);
    }
    if !txid::is_well_formed(id) {
        return Err(Status::MalformedBadEnvelope);
    }
    Ok(())
}

/// Checks a decoded envelope and its payload.
pub fn check_envelope(env: &EnvelopeParts<'_>, dec: &dyn PayloadDecoder) -> Result<CheckedPayload, Status> {
    check_tx_id(env.tx_id)?;
    let reserved = env.tx_id.starts_with(txid::SELF_CERTIFIED_ID_PREFIX);
    if reserved || env.self_certified {
        // Only the creator's own nonce-derived envelope may carry a reserved id, and a
        // self-certified creator uses only those; anything else is never stored.
        let derived =
            !env.nonce.is_empty() && txid::derive_self_certified_tx_id(env.nonce, env.creator) == env.tx_id;
        if !(reserved && env.self_certified && derived) {
            return Err(Status::MalformedBadEnvelope);
        }
    }
    if let PayloadKind::Unsupported(_) = env.kind {
        return Err(Status::MalformedUnsupportedEnvelopePayload);
    }
    if !reserved && !env.nonce.is_empty() && txid::derive_tx_id(env.nonce, env.creator) != env.tx_id {
        return Err(Status::MalformedTxIdConflict);
    }
    match env.kind {
        PayloadKind::Tx => {
            let tx = dec
                .decode_tx(env.payload)
                .ok_or(Status::MalformedBadEnvelopePayload)?;
            check_tx(&TxId(env.tx_id.to_string()), &tx, dec)?;
            Ok(CheckedPayload::Tx(tx))
        }
        PayloadKind::Config => dec
            .decode_config(env.payload)
            .map(CheckedPayload::Config)
            .ok_or(Status::MalformedConfigTxInvalid),
        PayloadKind::Unsupported(_) => Err(Status::MalformedUnsupportedEnvelopePayload),
    }
}

/// Checks a decoded transaction (everything after the envelope).
pub fn check_tx(id: &TxId, tx: &Tx, dec: &dyn PayloadDecoder) -> Result<(), Status> {
    check_tx_id(id.as_str())?;
    if tx.namespaces.is_empty() {
        return Err(Status::MalformedEmptyNamespaces);
    }
    let mut seen = Seen::new(tx.namespaces.len());
    for (i, ns) in tx.namespaces.iter().enumerate() {
        if !is_valid_namespace_id(&ns.ns_id) {
            return Err(Status::MalformedNamespaceIdInvalid);
        }
        if seen.repeats(ns.ns_id.as_str(), || {
            tx.namespaces[..i].iter().map(|n| n.ns_id.as_str())
        }) {
            return Err(Status::MalformedDuplicateNamespace);
        }
        check_namespace(ns, dec)?;
    }
    check_endorsements_present(tx)
}

/// Up to this many items, a repeat is found by comparing with the earlier items (no
/// set to allocate and hash into); above, with a hash set.
const FEW: usize = 16;

/// Finds the first item equal to an earlier one, for `n` items checked in order.
enum Seen<'a, T: ?Sized> {
    Few,
    Many(HashSet<&'a T>),
}

impl<'a, T: ?Sized + Eq + std::hash::Hash> Seen<'a, T> {
    fn new(n: usize) -> Seen<'a, T> {
        if n <= FEW {
            Seen::Few
        } else {
            Seen::Many(HashSet::with_capacity(n))
        }
    }

    /// Whether `item` equals one of the items checked before it (`earlier` lists them,
    /// used while there are few).
    fn repeats<I: Iterator<Item = &'a T>>(&mut self, item: &'a T, earlier: impl FnOnce() -> I) -> bool {
        match self {
            Seen::Few => earlier().any(|e| e == item),
            Seen::Many(set) => !set.insert(item),
        }
    }
}

fn check_namespace(ns: &TxNamespace, dec: &dyn PayloadDecoder) -> Result<(), Status> {
    let is_meta = ns.ns_id == META_NAMESPACE;
    if is_meta && !ns.blind_writes.is_empty() {
        return Err(Status::MalformedBlindWritesNotAllowed);
    }
    if !ns.has_writes() {
        return Err(Status::MalformedNoWrites);
    }
    let mut keys = Seen::new(ns.reads_only.len() + ns.read_writes.len() + ns.blind_writes.len());
    for (i, key) in ns.keys().enumerate() {
        if key.is_empty() {
            return Err(Status::MalformedEmptyKey);
        }
        if keys.repeats(key, || ns.keys().take(i)) {
            return Err(Status::MalformedDuplicateKeyInReadWriteSet);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(Status::MalformedBadEnvelopePayload);
        }
    }
    let values = ns
        .read_writes
        .iter()
        .map(|rw| &rw.value)
        .chain(ns.blind_writes.iter().map(|w| &w.value));
    for value in values {
        if value.len() > MAX_VALUE_LEN {
            return Err(Status::MalformedBadEnvelopePayload);
        }
    }
    if is_meta {
        check_meta_writes(ns, dec)?;
    }
    Ok(())
}

/// A `_meta` write names a user namespace and holds a usable policy.
fn check_meta_writes(ns: &TxNamespace, dec: &dyn PayloadDecoder) -> Result<(), Status> {
    for rw in &ns.read_writes {
        let target = std::str::from_utf8(&rw.key).unwrap_or("");
        let names_user_ns = is_valid_namespace_id(target) && target != META_NAMESPACE;
        if !names_user_ns || dec.decode_policy(&rw.value).is_none() {
            return Err(Status::MalformedNamespacePolicyInvalid);
        }
    }
    Ok(())
}

fn check_endorsements_present(tx: &Tx) -> Result<(), Status> {
    if tx.endorsements.len() != tx.namespaces.len() {
        return Err(Status::MalformedMissingSignature);
    }
    for set in &tx.endorsements {
        if set.is_empty() || set.iter().any(|e| e.signature.is_empty()) {
            return Err(Status::MalformedMissingSignature);
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
