//! Scheme names, deterministic derivation (pinned) and public-key parsing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use crypto::{CryptoError, PublicKey, Scheme, Signature, SigningKey, derive_signing_key};
use proptest::prelude::*;
use rand::SeedableRng;

const SEED: &str = "fabrx-test-seed";

#[test]
fn scheme_names_are_stable_and_parse_back() {
    let names: Vec<_> = Scheme::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["ed25519", "ecdsa-p256", "bls12-381"]);
    for s in Scheme::ALL {
        assert_eq!(s.name().parse::<Scheme>().unwrap(), s);
        assert_eq!(s.to_string(), s.name());
    }
    assert_eq!(
        "ECDSA-P256".parse::<Scheme>(),
        Err(CryptoError::UnknownScheme {
            name: "ECDSA-P256".into()
        })
    );
}

#[test]
fn derivation_is_pinned() {
    // Cross-checked once against an independent Ed25519 / P-256 implementation.
    let expected = [
        (
            Scheme::Ed25519,
            "6a48ae60c3f4e9f56e4efcf91b372ce5363ccc57900c0fa17c7210ab09df04ca",
        ),
        (
            Scheme::EcdsaP256,
            "03b0afda11645c7d7f00259c494d9059aa6c6cdb23648b2486ddd4499224513e18",
        ),
        (
            Scheme::Bls12381,
            "9437bc78e0854aded12c26fd5b7697f04659df7adbd7a9f8fd915a314b346b7f\
             5ccb8c672ca9e8b3436bd65a1f54fa97",
        ),
    ];
    for (scheme, hex) in expected {
        let key = derive_signing_key(scheme, SEED);
        assert_eq!(key.scheme(), scheme);
        assert_eq!(key.public_key().to_hex(), hex, "{scheme}");
    }
}

#[test]
fn derivation_separates_seeds_and_schemes() {
    for s in Scheme::ALL {
        let a = derive_signing_key(s, "a");
        assert_eq!(a.to_bytes(), derive_signing_key(s, "a").to_bytes());
        assert_ne!(a.to_bytes(), derive_signing_key(s, "b").to_bytes());
    }
    let ed = derive_signing_key(Scheme::Ed25519, "a").to_bytes();
    let ec = derive_signing_key(Scheme::EcdsaP256, "a").to_bytes();
    assert_ne!(ed, ec);
}

#[test]
fn signing_keys_round_trip_through_bytes() {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
    for s in Scheme::ALL {
        let key = SigningKey::generate(s, &mut rng);
        let back = SigningKey::from_bytes(s, &key.to_bytes()).unwrap();
        assert_eq!(back.public_key(), key.public_key());
        assert!(SigningKey::from_bytes(s, &[1u8; 31]).is_err());
        // Debug never shows the secret.
        let shown = format!("{key:?}");
        assert!(!shown.contains(&hex::encode(key.to_bytes())), "{shown}");
    }
    // Zero and the group order are not valid scalars.
    for s in [Scheme::EcdsaP256, Scheme::Bls12381] {
        assert!(matches!(
            SigningKey::from_bytes(s, &[0u8; 32]),
            Err(CryptoError::MalformedSigningKey { .. })
        ));
        assert!(SigningKey::from_bytes(s, &[0xff; 32]).is_err());
    }
}

#[test]
fn public_keys_round_trip_and_compare() {
    for s in Scheme::ALL {
        let pk = derive_signing_key(s, SEED).public_key();
        let back = PublicKey::from_bytes(s, &pk.to_bytes()).unwrap();
        assert_eq!(back, pk);
        assert_eq!(PublicKey::from_hex(s, &pk.to_hex()).unwrap(), pk);
        assert_ne!(pk, derive_signing_key(s, "other").public_key());
    }
    let lens: Vec<_> = Scheme::ALL
        .iter()
        .map(|&s| derive_signing_key(s, SEED).public_key().to_bytes().len())
        .collect();
    assert_eq!(lens, [32, 33, 48]);
}

fn malformed_reason(scheme: Scheme, bytes: &[u8]) -> &'static str {
    match PublicKey::from_bytes(scheme, bytes) {
        Err(CryptoError::MalformedPublicKey { scheme: s, reason }) => {
            assert_eq!(s, scheme);
            reason
        }
        other => panic!("{scheme} {} parsed as {other:?}", hex::encode(bytes)),
    }
}

#[test]
fn wrong_lengths_are_rejected() {
    for s in Scheme::ALL {
        let good = derive_signing_key(s, SEED).public_key().to_bytes();
        malformed_reason(s, &[]);
        malformed_reason(s, &good[..good.len() - 1]);
        malformed_reason(s, &[good.clone(), vec![0]].concat());
    }
}

#[test]
fn ed25519_small_and_mixed_order_keys_are_rejected() {
    // The identity (y = 1) is a small-order point.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    assert_eq!(malformed_reason(Scheme::Ed25519, &identity), "small-order point");
    // A valid key plus an 8-torsion point: on the curve, not small-order, not torsion-free.
    let pk = derive_signing_key(Scheme::Ed25519, SEED).public_key();
    let point = curve25519_dalek::edwards::CompressedEdwardsY(pk.as_bytes().try_into().unwrap())
        .decompress()
        .unwrap();
    let mixed = point + curve25519_dalek::constants::EIGHT_TORSION[1];
    assert_eq!(
        malformed_reason(Scheme::Ed25519, mixed.compress().as_bytes()),
        "point has a torsion component"
    );
    // y = 2 has no x on edwards25519.
    let mut not_point = [0u8; 32];
    not_point[0] = 2;
    assert_eq!(malformed_reason(Scheme::Ed25519, &not_point), "not a curve point");
}

#[test]
fn p256_bad_points_and_der_are_rejected() {
    use p256::pkcs8::EncodePublicKey;
    // Identity encoding and a non-curve uncompressed point.
    malformed_reason(Scheme::EcdsaP256, &[0x00]);
    let mut off_curve = [0u8; 65];
    off_curve[0] = 0x04;
    off_curve[32] = 1;
    off_curve[64] = 1;
    malformed_reason(Scheme::EcdsaP256, &off_curve);
    malformed_reason(Scheme::EcdsaP256, &[0x30, 0x03, 0x01, 0x02, 0x03]);
    // DER SubjectPublicKeyInfo and uncompressed SEC1 parse to the same key.
    let pk = derive_signing_key(Scheme::EcdsaP256, SEED).public_key();
    let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(pk.as_bytes()).unwrap();
    let der = vk.to_public_key_der().unwrap();
    assert_eq!(
        PublicKey::from_bytes(Scheme::EcdsaP256, der.as_bytes()).unwrap(),
        pk
    );
    let uncompressed = vk.to_encoded_point(false);
    assert_eq!(
        PublicKey::from_bytes(Scheme::EcdsaP256, uncompressed.as_bytes()).unwrap(),
        pk
    );
    // Truncated DER is rejected.
    let truncated = &der.as_bytes()[..der.as_bytes().len() - 1];
    malformed_reason(Scheme::EcdsaP256, truncated);
}

#[test]
fn bls_identity_and_non_subgroup_keys_are_rejected() {
    let mut identity = [0u8; 48];
    identity[0] = 0xc0; // compressed + infinity flags
    assert_eq!(malformed_reason(Scheme::Bls12381, &identity), "identity point");
    // The first small x giving a curve point: almost surely outside the r-order subgroup.
    let on_curve_not_subgroup = (1u8..=255)
        .map(|x| {
            let mut enc = [0u8; 48];
            enc[0] = 0x80;
            enc[47] = x;
            enc
        })
        .find(|enc| blst::min_pk::PublicKey::from_bytes(enc).is_ok())
        .unwrap();
    assert_eq!(
        malformed_reason(Scheme::Bls12381, &on_curve_not_subgroup),
        "point not in the G1 subgroup"
    );
    malformed_reason(Scheme::Bls12381, &[0xff; 48]);
}

#[test]
fn signatures_serialize_as_hex() {
    let sig = Signature::from_bytes(vec![0xab, 0x01]);
    assert_eq!(sig.to_hex(), "ab01");
    assert_eq!(Signature::from_hex("ab01").unwrap(), sig);
    assert!(matches!(
        Signature::from_hex("zz"),
        Err(CryptoError::InvalidHex { .. })
    ));
    let text = serde_json::to_string(&(Scheme::Bls12381, sig.clone())).unwrap();
    assert_eq!(text, r#"["bls12-381","ab01"]"#);
    let back: (Scheme, Signature) = serde_json::from_str(&text).unwrap();
    assert_eq!(back, (Scheme::Bls12381, sig));
}

#[test]
fn public_keys_print_and_parse_as_scheme_colon_hex() {
    for s in Scheme::ALL {
        let pk = derive_signing_key(s, SEED).public_key();
        let text = pk.to_string();
        assert_eq!(text, format!("{}:{}", s.name(), pk.to_hex()));
        assert_eq!(text.parse::<PublicKey>().unwrap(), pk);
        let json = serde_json::to_string(&pk).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<PublicKey>(&json).unwrap(), pk);
    }
    assert!(matches!(
        "nocolon".parse::<PublicKey>(),
        Err(CryptoError::UnknownScheme { .. })
    ));
    assert!(matches!(
        "rsa:00".parse::<PublicKey>(),
        Err(CryptoError::UnknownScheme { .. })
    ));
    assert!(matches!(
        "ed25519:zz".parse::<PublicKey>(),
        Err(CryptoError::InvalidHex { .. })
    ));
    assert!(matches!(
        "ed25519:00".parse::<PublicKey>(),
        Err(CryptoError::MalformedPublicKey { .. })
    ));
    assert!(serde_json::from_str::<PublicKey>("\"bls12-381:00\"").is_err());
}

proptest! {
    #[test]
    fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        for s in Scheme::ALL {
            if let Ok(pk) = PublicKey::from_bytes(s, &bytes) {
                // Anything accepted re-parses from its canonical form.
                prop_assert_eq!(PublicKey::from_bytes(s, pk.as_bytes()).unwrap(), pk);
            }
            let _ = SigningKey::from_bytes(s, &bytes);
        }
    }
}

#[test]
fn key_types_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<PublicKey>();
    assert_send_sync::<SigningKey>();
    assert_send_sync::<Signature>();
    assert_send_sync::<crypto::ThresholdPublicKeys>();
    // Cloning a public key shares the parsed key instead of re-parsing it.
    let pk = derive_signing_key(Scheme::Bls12381, SEED).public_key();
    let clone = pk.clone();
    assert_eq!(pk.as_bytes().as_ptr(), clone.as_bytes().as_ptr());
}
