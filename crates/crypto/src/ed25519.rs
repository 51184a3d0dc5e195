//! Ed25519: RFC 8032 signing (ed25519-dalek), cofactored verification.
//!
//! Single and batch verification use the same *cofactored* equation
//! `[8]·(R + k·A − s·B) = 0` (as in ZIP-215), so a batch accepts exactly the signatures
//! that single verification accepts, whatever else is in the batch (up to 2^-128).
//! The cofactorless equation used by ed25519-dalek's `verify_batch` differs from its
//! `verify_strict` on crafted signatures whose R has a torsion component, which would let
//! a malicious signer make validity depend on how a verifier batches: unacceptable when
//! every party's committer must reach the same verdict. Encodings stay strict: S must be
//! canonical, R must be a canonically encoded point of large order, and public keys must
//! be torsion-free (checked at parse).

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{IsIdentity, VartimeMultiscalarMul};
use ed25519_dalek::{Signer, VerifyingKey};
use rand::RngCore;
use sha2::{Digest, Sha512};

use crate::{CryptoError, Purpose, Result, Scheme, Signature};

/// Parses a 32-byte key, rejecting non-points and any point with a torsion component
/// (small-order keys allow signatures that verify for many messages).
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

/// A signature decoded against its key and message: `R`, `S` and `k = H(R ‖ A ‖ M)`.
struct Decoded {
    r: EdwardsPoint,
    s: Scalar,
    k: Scalar,
}

fn decode(key: &VerifyingKey, purpose: Purpose, message: &[u8], sig: &Signature) -> Result<Decoded> {
    let bad = |reason| CryptoError::MalformedSignature {
        scheme: Scheme::Ed25519,
        reason,
    };
    let bytes: &[u8; 64] = sig.as_bytes().try_into().map_err(|_| bad("expected 64 bytes"))?;
    let (r_bytes, s_bytes) = bytes.split_at(32);
    let r_bytes: [u8; 32] = r_bytes.try_into().map_err(|_| bad("expected 64 bytes"))?;
    let s_bytes: [u8; 32] = s_bytes.try_into().map_err(|_| bad("expected 64 bytes"))?;
    let s = Option::<Scalar>::from(Scalar::from_canonical_bytes(s_bytes))
        .ok_or_else(|| bad("S is not canonical"))?;
    let r = CompressedEdwardsY(r_bytes)
        .decompress()
        .ok_or_else(|| bad("R is not a curve point"))?;
    if r.compress().to_bytes() != r_bytes {
        return Err(bad("R is not canonically encoded"));
    }
    if r.is_small_order() {
        return Err(bad("R has small order"));
    }
    let hash = Sha512::new()
        .chain_update(r_bytes)
        .chain_update(key.as_bytes())
        .chain_update(purpose.tag().as_bytes())
        .chain_update([0u8])
        .chain_update(message)
        .finalize();
    let k = Scalar::from_bytes_mod_order_wide(&hash.into());
    Ok(Decoded { r, s, k })
}

/// Cofactored verification of one signature.
pub(crate) fn verify(key: &VerifyingKey, purpose: Purpose, message: &[u8], sig: &Signature) -> Result<()> {
    let d = decode(key, purpose, message, sig)?;
    let minus_a = -key.to_edwards();
    // s·B − k·A, then compare with R up to small-order components.
    let expected_r = EdwardsPoint::vartime_double_scalar_mul_basepoint(&d.k, &minus_a, &d.s);
    if (d.r - expected_r).mul_by_cofactor().is_identity() {
        Ok(())
    } else {
        Err(CryptoError::VerificationFailed {
            scheme: Scheme::Ed25519,
            purpose,
        })
    }
}

/// Batch verification: `[8]·Σ zᵢ·(Rᵢ + kᵢ·Aᵢ − sᵢ·B) = 0` with random 128-bit `zᵢ`,
/// one multi-scalar multiplication. `true` means every triple is valid; `false` means at
/// least one is not (or is malformed) and the caller must check them one by one.
pub(crate) fn verify_batch(purpose: Purpose, items: &[(&VerifyingKey, &[u8], &Signature)]) -> bool {
    let mut rng = rand::thread_rng();
    let mut b_coefficient = Scalar::ZERO;
    let mut scalars = Vec::with_capacity(2 * items.len() + 1);
    let mut points = Vec::with_capacity(2 * items.len() + 1);
    for (key, message, sig) in items {
        let Ok(d) = decode(key, purpose, message, sig) else {
            return false;
        };
        let z = Scalar::from(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()));
        b_coefficient -= z * d.s;
        scalars.push(z);
        points.push(d.r);
        scalars.push(z * d.k);
        points.push(key.to_edwards());
    }
    scalars.push(b_coefficient);
    points.push(ED25519_BASEPOINT_POINT);
    EdwardsPoint::vartime_multiscalar_mul(&scalars, &points)
        .mul_by_cofactor()
        .is_identity()
}
