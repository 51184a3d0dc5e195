//! Ed25519 verification: agreement with RFC 8032 strict verification on honest and
//! tampered signatures, and batch/single agreement on crafted torsion signatures.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use crypto::*;
use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
use curve25519_dalek::edwards::EdwardsPoint;
use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::Verifier;
use proptest::prelude::*;
use sha2::{Digest, Sha512};

fn tagged(message: &[u8]) -> Vec<u8> {
    [Purpose::NamespaceEndorsement.tag().as_bytes(), &[0], message].concat()
}

/// Signs by hand with scalar `a`, nonce `r` and an extra point added to R.
fn craft(a: Scalar, r: Scalar, r_extra: EdwardsPoint, message: &[u8]) -> (PublicKey, Signature) {
    let big_a = a * ED25519_BASEPOINT_POINT;
    let big_r = r * ED25519_BASEPOINT_POINT + r_extra;
    let hash = Sha512::new()
        .chain_update(big_r.compress().as_bytes())
        .chain_update(big_a.compress().as_bytes())
        .chain_update(tagged(message))
        .finalize();
    let k = Scalar::from_bytes_mod_order_wide(&hash.into());
    let s = r + k * a;
    let sig = [big_r.compress().to_bytes(), s.to_bytes()].concat();
    let pk = PublicKey::from_bytes(Scheme::Ed25519, big_a.compress().as_bytes()).unwrap();
    (pk, Signature::from_bytes(sig))
}

fn scalar(n: u64) -> Scalar {
    Scalar::from_bytes_mod_order_wide(&Sha512::digest(n.to_le_bytes()).into())
}

fn honest_batch(n: usize) -> Vec<(PublicKey, Vec<u8>, Signature)> {
    (0..n)
        .map(|i| {
            let key = derive_signing_key(Scheme::Ed25519, &format!("b{i}"));
            let msg = format!("m{i}").into_bytes();
            let sig = sign_namespace_endorsement(&key, &msg);
            (key.public_key(), msg, sig)
        })
        .collect()
}

fn verdicts(items: &[(PublicKey, Vec<u8>, Signature)]) -> Vec<bool> {
    let refs: Vec<SignedMessage<'_>> = items
        .iter()
        .map(|(pk, m, s)| SignedMessage {
            public_key: pk,
            message: m,
            signature: s,
        })
        .collect();
    verify_namespace_endorsements(&refs)
}

#[test]
fn torsion_in_r_gets_the_same_verdict_in_every_batch() {
    // R = r·B + T with T of order 2, 4 and 8: valid under the cofactored rule, in every
    // batch composition and alone.
    for (t_index, msg) in [(4usize, b"order 2"), (2, b"order 4"), (1, b"order 8")] {
        let (pk, sig) = craft(scalar(1), scalar(2), EIGHT_TORSION[t_index], msg);
        assert_eq!(verify_namespace_endorsement(&pk, msg, &sig), Ok(()));
        // RFC 8032 strict verification refuses it: this really is the contested case.
        let vk = ed25519_dalek::VerifyingKey::from_bytes(pk.as_bytes().try_into().unwrap()).unwrap();
        let dalek_sig = ed25519_dalek::Signature::from_slice(sig.as_bytes()).unwrap();
        assert!(vk.verify_strict(&tagged(msg), &dalek_sig).is_err());
        for size in 0..12 {
            let mut items = honest_batch(size);
            items.insert(size / 2, (pk.clone(), msg.to_vec(), sig.clone()));
            assert_eq!(verdicts(&items), vec![true; size + 1], "batch of {}", size + 1);
        }
    }
}

#[test]
fn small_order_r_is_rejected_alone_and_in_batches() {
    // s = k·a and R = T: the torsion-free part is zero; both paths must refuse.
    let a = scalar(9);
    let big_a = a * ED25519_BASEPOINT_POINT;
    for t in [EIGHT_TORSION[4], EIGHT_TORSION[1], EdwardsPoint::default()] {
        let hash = Sha512::new()
            .chain_update(t.compress().as_bytes())
            .chain_update(big_a.compress().as_bytes())
            .chain_update(tagged(b"m"))
            .finalize();
        let k = Scalar::from_bytes_mod_order_wide(&hash.into());
        let sig = Signature::from_bytes([t.compress().to_bytes(), (k * a).to_bytes()].concat());
        let pk = PublicKey::from_bytes(Scheme::Ed25519, big_a.compress().as_bytes()).unwrap();
        assert!(matches!(
            verify_namespace_endorsement(&pk, b"m", &sig),
            Err(CryptoError::MalformedSignature {
                reason: "R has small order",
                ..
            })
        ));
        let mut items = honest_batch(5);
        items.push((pk, b"m".to_vec(), sig));
        assert_eq!(verdicts(&items), vec![true, true, true, true, true, false]);
    }
}

#[test]
fn non_canonical_r_is_rejected() {
    // Replace R by p + 1, a non-canonical encoding of y = 1.
    let key = derive_signing_key(Scheme::Ed25519, "nc");
    let sig = sign_namespace_endorsement(&key, b"m");
    let mut bytes = sig.into_bytes();
    // 2^255 - 19 + 1 = p + 1, little-endian, i.e. a non-canonical encoding of y = 1.
    let mut p_plus_one = [0xffu8; 32];
    p_plus_one[0] = 0xee;
    p_plus_one[31] = 0x7f;
    bytes[..32].copy_from_slice(&p_plus_one);
    let out = verify_namespace_endorsement(&key.public_key(), b"m", &Signature::from_bytes(bytes));
    assert!(
        matches!(out, Err(CryptoError::MalformedSignature { .. })),
        "{out:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// On honest signatures and on random corruptions of them, our verdict equals
    /// ed25519-dalek's RFC 8032 `verify_strict` (they differ only on torsion in R).
    #[test]
    fn agrees_with_strict_verification(
        seed in "[a-z]{1,8}",
        msg in proptest::collection::vec(any::<u8>(), 0..80),
        flip in proptest::option::of((0usize..64, 0u8..8)),
    ) {
        let key = derive_signing_key(Scheme::Ed25519, &seed);
        let mut sig = sign_namespace_endorsement(&key, &msg).into_bytes();
        if let Some((byte, bit)) = flip {
            sig[byte] ^= 1 << bit;
        }
        let ours = verify_namespace_endorsement(&key.public_key(), &msg, &Signature::from_bytes(sig.clone())).is_ok();
        let vk = ed25519_dalek::VerifyingKey::from_bytes(key.public_key().as_bytes().try_into().unwrap()).unwrap();
        let sig = ed25519_dalek::Signature::from_bytes(&sig.try_into().unwrap());
        let theirs = vk.verify_strict(&tagged(&msg), &sig).is_ok();
        prop_assert_eq!(ours, theirs);
        prop_assert_eq!(ours, flip.is_none());
        prop_assert_eq!(vk.verify(&tagged(&msg), &sig).is_ok(), theirs);
    }
}

#[test]
fn bad_signatures_anywhere_in_a_large_batch_get_their_own_verdicts() {
    // Large enough that a failing batch is split into halves several times, with one
    // key per item and with one key for all (its terms gathered into one point).
    let shared = derive_signing_key(Scheme::Ed25519, "policy");
    let one_key: Vec<_> = (0..70)
        .map(|i| {
            let msg = format!("m{i}").into_bytes();
            let sig = sign_namespace_endorsement(&shared, &msg);
            (shared.public_key(), msg, sig)
        })
        .collect();
    let bad = [0usize, 9, 33, 34, 69];
    for mut items in [honest_batch(70), one_key] {
        assert_eq!(verdicts(&items), vec![true; 70]);
        for &i in &bad {
            // The message no longer matches its signature.
            items[i].1.push(b'!');
        }
        let expected: Vec<bool> = (0..70).map(|i| !bad.contains(&i)).collect();
        assert_eq!(verdicts(&items), expected);
    }
}
