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
use std::collections::HashMap;

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
    if !is_canonical_y(&r_bytes) {
        return Err(bad("R is not canonically encoded"));
    }
    let r = CompressedEdwardsY(r_bytes)
        .decompress()
        .ok_or_else(|| bad("R is not a curve point"))?;
    // The other non-canonical encodings (x = 0 with the sign bit set) are the identity
    // and the point of order 2, refused here as small-order.
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

/// Whether the y coordinate of a compressed point (the low 255 bits, little-endian) is
/// below p = 2^255 − 19. Cheaper than re-compressing the decoded point (a field
/// inversion) and equivalent for points that are not of small order.
fn is_canonical_y(bytes: &[u8; 32]) -> bool {
    // y ≥ p only for 2^255 − 19 ≤ y ≤ 2^255 − 1: top byte 0x7f (sign bit aside), the
    // 30 middle bytes 0xff, the low byte ≥ 0xed.
    let top = bytes[31] & 0x7f;
    !(top == 0x7f && bytes[1..31].iter().all(|&b| b == 0xff) && bytes[0] >= 0xed)
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
///
/// The terms of one key are gathered into one, `(Σ zᵢ·kᵢ)·A`: a namespace's txs are
/// usually endorsed by the one key of its policy, so the multiplication has about n + 2
/// points instead of 2n + 1, half of them with 128-bit scalars. The equation is the
/// same; only the order of the additions changes.
pub(crate) fn verify_batch(purpose: Purpose, items: &[(&VerifyingKey, &[u8], &Signature)]) -> bool {
    let mut rng = rand::thread_rng();
    let mut b_coefficient = Scalar::ZERO;
    let mut scalars = Vec::with_capacity(items.len() + 2);
    let mut points = Vec::with_capacity(items.len() + 2);
    // Distinct keys in order of appearance, with their gathered coefficient.
    let mut keys: Vec<(&VerifyingKey, Scalar)> = Vec::new();
    let mut key_slot: HashMap<&[u8; 32], usize> = HashMap::new();
    for (key, message, sig) in items {
        let Ok(d) = decode(key, purpose, message, sig) else {
            return false;
        };
        let z = Scalar::from(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()));
        b_coefficient -= z * d.s;
        scalars.push(z);
        points.push(d.r);
        let slot = *key_slot.entry(key.as_bytes()).or_insert_with(|| {
            keys.push((key, Scalar::ZERO));
            keys.len() - 1
        });
        keys[slot].1 += z * d.k;
    }
    for (key, coefficient) in keys {
        scalars.push(coefficient);
        points.push(key.to_edwards());
    }
    scalars.push(b_coefficient);
    points.push(ED25519_BASEPOINT_POINT);
    EdwardsPoint::vartime_multiscalar_mul(&scalars, &points)
        .mul_by_cofactor()
        .is_identity()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(seed: u8) -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
    }

    /// `n` signatures: by key `seed` when `shared`, else each by its own key.
    fn signed(n: usize, shared: bool) -> Vec<(VerifyingKey, Vec<u8>, Signature)> {
        (0..n)
            .map(|i| {
                let key = signer(if shared { 7 } else { i as u8 });
                let message = format!("tx {i}").into_bytes();
                let sig = sign(&key, Purpose::NamespaceEndorsement, &message);
                (key.verifying_key(), message, sig)
            })
            .collect()
    }

    fn batch(items: &[(VerifyingKey, Vec<u8>, Signature)]) -> bool {
        let refs: Vec<_> = items.iter().map(|(k, m, s)| (k, m.as_slice(), s)).collect();
        verify_batch(Purpose::NamespaceEndorsement, &refs)
    }

    #[test]
    fn gathered_key_terms_accept_valid_batches_and_refuse_a_bad_signature() {
        for shared in [true, false] {
            for n in [1, 2, 5, 64] {
                let mut items = signed(n, shared);
                assert!(batch(&items), "n {n}, shared key {shared}");
                // Mixing keys: half by the shared key, half by their own.
                items.extend(signed(n, !shared));
                assert!(batch(&items), "mixed, n {n}");
                // One signature over another message, by the right key: refused.
                let (key, _, sig) = items[n / 2].clone();
                items[n / 2] = (key, b"another message".to_vec(), sig);
                assert!(!batch(&items), "tampered, n {n}, shared key {shared}");
                // And the wrong purpose refuses the whole batch.
                let honest = signed(n, shared);
                let refs: Vec<_> = honest.iter().map(|(k, m, s)| (k, m.as_slice(), s)).collect();
                assert!(!verify_batch(Purpose::ClientRequest, &refs));
            }
        }
    }

    /// The canonical-y test equals "re-compressing the decoded point gives the same
    /// bytes" on every encoding around p and on ordinary points, whenever the point is
    /// not of small order (small-order R is refused anyway).
    #[test]
    fn canonical_y_agrees_with_recompression() {
        let mut encodings: Vec<[u8; 32]> = Vec::new();
        // y = p + j for j = 0..19 (non-canonical) and y = p − 1 − j (canonical), both signs.
        for j in 0u8..19 {
            for sign in [0u8, 0x80] {
                let mut hi = [0xffu8; 32];
                hi[0] = 0xed + j;
                hi[31] = 0x7f | sign;
                encodings.push(hi);
                let mut lo = [0xffu8; 32];
                lo[0] = 0xec - j;
                lo[31] = 0x7f | sign;
                encodings.push(lo);
                let mut small = [0u8; 32];
                small[0] = j;
                small[31] = sign;
                encodings.push(small);
            }
        }
        for i in 1u64..200 {
            let p = ED25519_BASEPOINT_POINT * Scalar::from(i);
            let mut bytes = p.compress().to_bytes();
            encodings.push(bytes);
            bytes[31] ^= 0x80;
            encodings.push(bytes);
        }
        let mut checked = 0;
        for bytes in encodings {
            let Some(point) = CompressedEdwardsY(bytes).decompress() else {
                continue;
            };
            let recompressed = point.compress().to_bytes() == bytes;
            if point.is_small_order() {
                continue;
            }
            assert_eq!(is_canonical_y(&bytes), recompressed, "{bytes:02x?}");
            checked += 1;
        }
        assert!(checked > 200, "only {checked} encodings were points");
    }
}
