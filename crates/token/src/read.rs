//! Who may read whose tokens (docs/token.md "Who may read what").
//!
//! A query service answers the tokens of an owner only to a signed read: the owner's
//! own key (or an auditor's) signs, under the crypto purpose `ClientRequest`,
//!
//! ```text
//! "fabrx/token-read/v1" ‖ bytes(namespace) ‖ owner (32) ‖ bytes(after_key)
//!   ‖ u32be(limit) ‖ u64be(issued_at) ‖ bytes(reader)
//! ```
//! where `bytes(x) = u32be(len x) ‖ x` and `issued_at` is in seconds since the Unix
//! epoch, within [`MAX_SKEW_SECS`] of the service's clock (a read cannot be replayed
//! for long). Pure: the caller passes the time.

use crate::{Address, KEY_LEN};
use wire::pb;

/// How far a signed read's `issued_at` may be from the service's clock.
pub const MAX_SKEW_SECS: u64 = 300;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(b);
}

/// The bytes a reader signs for `q` (its signature field aside).
pub fn signing_bytes(q: &pb::OwnedQuery) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + q.namespace.len() + q.after_key.len() + q.reader.len());
    out.extend_from_slice(types::tags::TOKEN_READ);
    put_bytes(&mut out, q.namespace.as_bytes());
    put_bytes(&mut out, &q.owner);
    put_bytes(&mut out, &q.after_key);
    out.extend_from_slice(&q.limit.to_be_bytes());
    out.extend_from_slice(&q.issued_at.to_be_bytes());
    put_bytes(&mut out, &q.reader);
    out
}

/// A read of `key`'s own tokens in `namespace` after `after_key`, signed at `now`.
pub fn signed_owned_query(
    key: &crypto::SigningKey,
    namespace: &str,
    after_key: &[u8],
    limit: u32,
    now: u64,
) -> pb::OwnedQuery {
    let mut q = pb::OwnedQuery {
        namespace: namespace.into(),
        owner: key.public_key().as_bytes().to_vec(),
        after_key: after_key.to_vec(),
        limit,
        issued_at: now,
        reader: Vec::new(),
        signature: Vec::new(),
    };
    q.signature = crypto::sign_client_request(key, &signing_bytes(&q)).into_bytes();
    q
}

/// An auditor's read of `owner`'s tokens, signed at `now` by the auditor's `key`.
pub fn signed_audit_query(
    key: &crypto::SigningKey,
    namespace: &str,
    owner: &Address,
    after_key: &[u8],
    now: u64,
) -> pb::OwnedQuery {
    let mut q = pb::OwnedQuery {
        namespace: namespace.into(),
        owner: owner.to_vec(),
        after_key: after_key.to_vec(),
        limit: 0,
        issued_at: now,
        reader: key.public_key().as_bytes().to_vec(),
        signature: Vec::new(),
    };
    q.signature = crypto::sign_client_request(key, &signing_bytes(&q)).into_bytes();
    q
}

/// Why a read is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadRefusal {
    /// No signature, or one that does not verify.
    #[error("a read of an owner's tokens must be signed by the owner (or an auditor): {0}")]
    Unsigned(String),
    /// Signed too long ago, or in the future.
    #[error(
        "the read was signed at {issued_at}, more than {MAX_SKEW_SECS} s from the service's clock ({now})"
    )]
    Stale {
        /// When it says it was signed.
        issued_at: u64,
        /// The service's time.
        now: u64,
    },
    /// The signer is neither the owner nor an auditor.
    #[error("the reader may read only its own tokens")]
    NotAllowed,
}

/// Who signed `q`, when it is a read this service answers at `now` for readers that are
/// the owner or one of `auditors`.
pub fn check_read(q: &pb::OwnedQuery, auditors: &[Address], now: u64) -> Result<Address, ReadRefusal> {
    let reader_bytes = if q.reader.is_empty() { &q.owner } else { &q.reader };
    let reader: Address = reader_bytes.as_slice().try_into().map_err(|_| {
        ReadRefusal::Unsigned(format!(
            "a reader key of {} bytes, not {KEY_LEN}",
            reader_bytes.len()
        ))
    })?;
    if !q.reader.is_empty() && q.reader != q.owner && !auditors.contains(&reader) {
        return Err(ReadRefusal::NotAllowed);
    }
    if now.abs_diff(q.issued_at) > MAX_SKEW_SECS {
        return Err(ReadRefusal::Stale {
            issued_at: q.issued_at,
            now,
        });
    }
    let key = crypto::PublicKey::from_bytes(crypto::Scheme::Ed25519, &reader)
        .map_err(|e| ReadRefusal::Unsigned(format!("reader key: {e}")))?;
    let sig = crypto::Signature::from_bytes(q.signature.as_slice());
    crypto::verify_client_request(&key, &signing_bytes(q), &sig)
        .map_err(|_| ReadRefusal::Unsigned("the signature does not verify".into()))?;
    Ok(reader)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> crypto::SigningKey {
        crypto::derive_signing_key(crypto::Scheme::Ed25519, name)
    }

    fn addr(k: &crypto::SigningKey) -> Address {
        k.public_key().as_bytes().try_into().unwrap()
    }

    #[test]
    fn an_owner_reads_its_own_tokens_and_nobody_else_does() {
        let (alice, mallory, auditor) = (key("alice"), key("mallory"), key("auditor"));
        let now = 1_000_000;
        let auditors = [addr(&auditor)];
        let q = signed_owned_query(&alice, "token", b"", 0, now);
        assert_eq!(check_read(&q, &auditors, now), Ok(addr(&alice)));
        // Mallory asks for alice's tokens: signed by herself as the reader.
        let mut theft = signed_audit_query(&mallory, "token", &addr(&alice), b"", now);
        assert_eq!(check_read(&theft, &auditors, now), Err(ReadRefusal::NotAllowed));
        // ... or alice's query with the owner changed, or no signature.
        theft = q.clone();
        theft.owner = addr(&mallory).to_vec();
        assert!(matches!(
            check_read(&theft, &auditors, now),
            Err(ReadRefusal::Unsigned(_))
        ));
        let mut unsigned = q.clone();
        unsigned.signature.clear();
        assert!(matches!(
            check_read(&unsigned, &auditors, now),
            Err(ReadRefusal::Unsigned(_))
        ));
        // A changed page is another read.
        let mut later = q.clone();
        later.after_key = b"k".to_vec();
        assert!(check_read(&later, &auditors, now).is_err());
        // Replayed too late.
        assert!(matches!(
            check_read(&q, &auditors, now + MAX_SKEW_SECS + 1),
            Err(ReadRefusal::Stale { .. })
        ));
        // An auditor reads anyone's.
        let audit = signed_audit_query(&auditor, "token", &addr(&alice), b"", now);
        assert_eq!(check_read(&audit, &auditors, now), Ok(addr(&auditor)));
    }
}
