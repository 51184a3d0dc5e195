//! Ed25519 primitives (ed25519-dalek): strict single verification, batch fast path.

use ed25519_dalek::{Signer, VerifyingKey};

use crate::{CryptoError, Purpose, Result, Scheme, Signature};

/// Parses a 32-byte key, rejecting non-points and any point with a torsion component
/// (small-order keys allow signatures that verify for many messages; mixed-order keys
/// make single and batch verification disagree).
pub(crate) fn parse_public_key(bytes: &[u8]) -> Result<VerifyingKey> {
    let bad = |reason| CryptoError::MalformedPublicKey {
        scheme: Scheme::Ed25519,
        reason,
    };
    let arr: &[u8; 32] = bytes.try_into().map_err(|_| bad("expected 32 bytes"))?;
    let key = VerifyingKey::from_bytes(arr).map_err(|_| bad("not a curve point"))?;
    if key.is_weak() {
        return Err(bad("small-order point"));
    }
    if !key.to_edwards().is_torsion_free() {
        return Err(bad("point has a torsion component"));
    }
    Ok(key)
}

/// Signs `tag ‖ 0x00 ‖ message`.
pub(crate) fn sign(key: &ed25519_dalek::SigningKey, purpose: Purpose, message: &[u8]) -> Signature {
    Signature::from_bytes(key.sign(&purpose.prefixed(message)).to_bytes().to_vec())
}

fn parse_signature(sig: &Signature) -> Result<ed25519_dalek::Signature> {
    ed25519_dalek::Signature::from_slice(sig.as_bytes()).map_err(|_| CryptoError::MalformedSignature {
        scheme: Scheme::Ed25519,
        reason: "expected 64 bytes",
    })
}

/// Strict verification (rejects non-canonical S and small-order R).
pub(crate) fn verify(key: &VerifyingKey, purpose: Purpose, message: &[u8], sig: &Signature) -> Result<()> {
    let parsed = parse_signature(sig)?;
    key.verify_strict(&purpose.prefixed(message), &parsed)
        .map_err(|_| CryptoError::VerificationFailed {
            scheme: Scheme::Ed25519,
            purpose,
        })
}

/// Batch verification of many (key, message, signature) triples in one multi-scalar
/// multiplication. `true` means every triple is valid; `false` means at least one is
/// not (or is malformed) and the caller must check them one by one.
pub(crate) fn verify_batch(purpose: Purpose, items: &[(&VerifyingKey, &[u8], &Signature)]) -> bool {
    let mut keys = Vec::with_capacity(items.len());
    let mut messages = Vec::with_capacity(items.len());
    let mut sigs = Vec::with_capacity(items.len());
    for (key, message, sig) in items {
        let Ok(parsed) = parse_signature(sig) else {
            return false;
        };
        keys.push(**key);
        messages.push(purpose.prefixed(message));
        sigs.push(parsed);
    }
    let message_refs: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
    ed25519_dalek::verify_batch(&message_refs, &sigs, &keys).is_ok()
}
