//! The tx id rule.
//!
//! A client derives its tx id from a fresh nonce and its serialized identity, as Fabric
//! does: `tx_id = hex(SHA-256("fabrx/txid/v1" ‖ u32be(|nonce|) ‖ nonce ‖ u32be(|creator|)
//! ‖ creator))`, lowercase. An envelope that carries a nonce must carry exactly that id
//! (else `MALFORMED_TX_ID_CONFLICT`). An envelope without a nonce carries a free-form id
//! (bridged Fabric-X ids, tools, tests); routers may be configured to refuse those.
//! Either way an id is 1..=[`MAX_TX_ID_LEN`] printable ASCII bytes.

use sha2::{Digest, Sha256};

/// Longest tx id accepted, in bytes.
pub const MAX_TX_ID_LEN: usize = 256;

/// Domain-separation tag of the tx id derivation.
pub const TX_ID_TAG: &[u8] = crate::tags::TX_ID;

/// Prefix reserved for the tx ids of self-certified creators (token wallets: the identity
/// is the creator's key). Such an id is `SELF_CERTIFIED_ID_PREFIX ‖ derive_tx_id(nonce,
/// creator)`; an envelope that carries one without being that creator's self-certified,
/// nonce-derived envelope is `MALFORMED_BAD_ENVELOPE`, which is never stored, so nobody
/// else can take or burn such an id (docs/wire.md "Who can take an id").
pub const SELF_CERTIFIED_ID_PREFIX: &str = "fxs1-";

/// The tx id of a self-certified creator's request (see [`SELF_CERTIFIED_ID_PREFIX`]).
pub fn derive_self_certified_tx_id(nonce: &[u8], creator: &[u8]) -> String {
    let mut id = String::with_capacity(SELF_CERTIFIED_ID_PREFIX.len() + 64);
    id.push_str(SELF_CERTIFIED_ID_PREFIX);
    id.push_str(&derive_tx_id(nonce, creator));
    id
}

/// Derives the tx id of a request from its nonce and serialized creator identity.
pub fn derive_tx_id(nonce: &[u8], creator: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(TX_ID_TAG);
    h.update((nonce.len() as u32).to_be_bytes());
    h.update(nonce);
    h.update((creator.len() as u32).to_be_bytes());
    h.update(creator);
    hex::encode(h.finalize())
}

/// Whether `id` is well formed: non-empty, at most [`MAX_TX_ID_LEN`] bytes, printable ASCII.
pub fn is_well_formed(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_TX_ID_LEN && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivation_is_stable_and_separates_fields() {
        let a = derive_tx_id(b"nonce", b"creator");
        assert_eq!(a.len(), 64);
        assert_eq!(a, derive_tx_id(b"nonce", b"creator"));
        // Moving a byte across the field boundary changes the id.
        assert_ne!(a, derive_tx_id(b"noncec", b"reator"));
        assert_ne!(a, derive_tx_id(b"nonce", b"creatoR"));
    }

    #[test]
    fn well_formed_ids() {
        assert!(is_well_formed("t1"));
        assert!(is_well_formed(&"a".repeat(MAX_TX_ID_LEN)));
        assert!(!is_well_formed(""));
        assert!(!is_well_formed(&"a".repeat(MAX_TX_ID_LEN + 1)));
        assert!(!is_well_formed("has space"));
        assert!(!is_well_formed("tab\t"));
        assert!(!is_well_formed("é"));
    }
}
