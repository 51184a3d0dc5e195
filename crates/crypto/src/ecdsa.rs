//! ECDSA P-256 primitives: RFC 6979 deterministic signing over SHA-256, low-S only.

use p256::ecdsa::signature::{DigestSigner, DigestVerifier};
use p256::ecdsa::{SigningKey, VerifyingKey};
use p256::pkcs8::DecodePublicKey;
use sha2::{Digest, Sha256};

use crate::{CryptoError, Purpose, Result, Scheme, Signature};

/// Parses SEC1 (33 or 65 bytes) or DER SubjectPublicKeyInfo.
pub(crate) fn parse_public_key(bytes: &[u8]) -> Result<VerifyingKey> {
    let bad = |reason| CryptoError::MalformedPublicKey {
        scheme: Scheme::EcdsaP256,
        reason,
    };
    match bytes.first() {
        Some(0x02..=0x04) if bytes.len() == 33 || bytes.len() == 65 => {
            VerifyingKey::from_sec1_bytes(bytes).map_err(|_| bad("SEC1 bytes are not a curve point"))
        }
        Some(0x30) => VerifyingKey::from_public_key_der(bytes)
            .map_err(|_| bad("DER is not a P-256 SubjectPublicKeyInfo")),
        Some(_) => Err(bad("expected SEC1 (33 or 65 bytes) or DER SubjectPublicKeyInfo")),
        None => Err(bad("empty")),
    }
}

/// The SHA-256 state over `tag ‖ 0x00 ‖ message` (no copy of the message).
fn digest(purpose: Purpose, message: &[u8]) -> Sha256 {
    Sha256::new()
        .chain_update(purpose.tag().as_bytes())
        .chain_update([0u8])
        .chain_update(message)
}

/// Signs `tag ‖ 0x00 ‖ message`; the result is normalized to low-S.
pub(crate) fn sign(key: &SigningKey, purpose: Purpose, message: &[u8]) -> Signature {
    let sig: p256::ecdsa::Signature = key.sign_digest(digest(purpose, message));
    let sig = sig.normalize_s().unwrap_or(sig);
    Signature::from_bytes(sig.to_bytes().to_vec())
}

/// Verifies a 64-byte r ‖ s signature; high-S signatures are rejected (malleability).
pub(crate) fn verify(key: &VerifyingKey, purpose: Purpose, message: &[u8], sig: &Signature) -> Result<()> {
    let bad = |reason| CryptoError::MalformedSignature {
        scheme: Scheme::EcdsaP256,
        reason,
    };
    if sig.as_bytes().len() != 64 {
        return Err(bad("expected 64 bytes (r ‖ s)"));
    }
    let parsed = p256::ecdsa::Signature::from_slice(sig.as_bytes())
        .map_err(|_| bad("r or s is zero or not below the group order"))?;
    if parsed.normalize_s().is_some() {
        return Err(bad("high-S signature"));
    }
    key.verify_digest(digest(purpose, message), &parsed)
        .map_err(|_| CryptoError::VerificationFailed {
            scheme: Scheme::EcdsaP256,
            purpose,
        })
}
