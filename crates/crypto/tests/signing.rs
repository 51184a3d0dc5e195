//! Purpose-named sign/verify for every scheme, cross-purpose rejection, batch verdicts.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use crypto::*;

type SignFn = fn(&SigningKey, &[u8]) -> Signature;
type VerifyFn = fn(&PublicKey, &[u8], &Signature) -> Result<()>;

/// Every purpose with its public sign/verify pair.
const API: [(Purpose, SignFn, VerifyFn); 7] = [
    (
        Purpose::NamespaceEndorsement,
        sign_namespace_endorsement,
        verify_namespace_endorsement,
    ),
    (Purpose::ClientRequest, sign_client_request, verify_client_request),
    (
        Purpose::BatchAttestation,
        sign_batch_attestation,
        verify_batch_attestation,
    ),
    (
        Purpose::ConsensusMessage,
        sign_consensus_message,
        verify_consensus_message,
    ),
    (
        Purpose::DecisionCertificate,
        sign_decision_certificate,
        verify_decision_certificate,
    ),
    (Purpose::BlockHeader, sign_block_header, verify_block_header),
    (Purpose::ConfigUpdate, sign_config_update, verify_config_update),
];

fn keys() -> Vec<SigningKey> {
    Scheme::ALL
        .iter()
        .map(|&s| derive_signing_key(s, "signer"))
        .collect()
}

#[test]
fn every_scheme_signs_and_verifies_every_purpose() {
    for key in keys() {
        let pk = key.public_key();
        for (purpose, sign, verify) in API {
            let sig = sign(&key, b"payload");
            let expected_len = match key.scheme() {
                Scheme::Ed25519 | Scheme::EcdsaP256 => 64,
                Scheme::Bls12381 => 96,
            };
            assert_eq!(sig.as_bytes().len(), expected_len);
            assert_eq!(
                verify(&pk, b"payload", &sig),
                Ok(()),
                "{} {purpose:?}",
                key.scheme()
            );
            assert_eq!(
                verify(&pk, b"payloaD", &sig),
                Err(CryptoError::VerificationFailed {
                    scheme: key.scheme(),
                    purpose
                })
            );
        }
    }
}

#[test]
fn a_signature_for_one_purpose_never_verifies_for_another() {
    for key in keys() {
        let pk = key.public_key();
        for (signed_for, sign, _) in API {
            let sig = sign(&key, b"same bytes");
            for (checked_for, _, verify) in API {
                let outcome = verify(&pk, b"same bytes", &sig);
                assert_eq!(
                    outcome.is_ok(),
                    signed_for == checked_for,
                    "{} {signed_for:?} as {checked_for:?}",
                    key.scheme()
                );
            }
        }
    }
}

#[test]
fn signatures_are_bound_to_the_key() {
    for key in keys() {
        let other = derive_signing_key(key.scheme(), "someone else").public_key();
        let sig = sign_client_request(&key, b"m");
        assert!(matches!(
            verify_client_request(&other, b"m", &sig),
            Err(CryptoError::VerificationFailed { .. })
        ));
    }
}

#[test]
fn signing_is_deterministic() {
    for key in keys() {
        assert_eq!(sign_block_header(&key, b"h"), sign_block_header(&key, b"h"));
    }
}

#[test]
fn malformed_signatures_are_typed_errors() {
    for key in keys() {
        let pk = key.public_key();
        let good = sign_block_header(&key, b"m");
        let cases = [
            Signature::from_bytes(vec![]),
            Signature::from_bytes(good.as_bytes()[1..].to_vec()),
            Signature::from_bytes([good.as_bytes(), &[0]].concat()),
        ];
        for bad in cases {
            assert!(
                matches!(
                    verify_block_header(&pk, b"m", &bad),
                    Err(CryptoError::MalformedSignature { .. })
                ),
                "{}",
                key.scheme()
            );
        }
        // A signature of another scheme is rejected, never panics.
        for other in keys() {
            if other.scheme() != key.scheme() {
                assert!(verify_block_header(&pk, b"m", &sign_block_header(&other, b"m")).is_err());
            }
        }
    }
    // P-256: zero r and s; BLS: garbage that is not a G2 point.
    let p256 = derive_signing_key(Scheme::EcdsaP256, "signer").public_key();
    assert!(matches!(
        verify_block_header(&p256, b"m", &Signature::from_bytes(vec![0u8; 64])),
        Err(CryptoError::MalformedSignature { .. })
    ));
    let bls = derive_signing_key(Scheme::Bls12381, "signer").public_key();
    assert!(matches!(
        verify_block_header(&bls, b"m", &Signature::from_bytes(vec![0xffu8; 96])),
        Err(CryptoError::MalformedSignature { .. })
    ));
}

#[test]
fn ecdsa_high_s_twin_is_rejected() {
    let key = derive_signing_key(Scheme::EcdsaP256, "signer");
    let pk = key.public_key();
    let sig = sign_client_request(&key, b"m");
    let parsed = p256::ecdsa::Signature::from_slice(sig.as_bytes()).unwrap();
    assert!(parsed.normalize_s().is_none(), "we sign low-S");
    // (r, n - s) is the mathematically valid twin; it must not verify.
    let (r, s) = parsed.split_scalars();
    let twin = p256::ecdsa::Signature::from_scalars(r, -*s).unwrap();
    let twin = Signature::from_bytes(twin.to_bytes().to_vec());
    assert_eq!(
        verify_client_request(&pk, b"m", &twin),
        Err(CryptoError::MalformedSignature {
            scheme: Scheme::EcdsaP256,
            reason: "high-S signature"
        })
    );
}

#[test]
fn ed25519_non_canonical_s_is_rejected() {
    let key = derive_signing_key(Scheme::Ed25519, "signer");
    let sig = sign_client_request(&key, b"m");
    let mut bytes = sig.into_bytes();
    // Add the group order l to S: same value mod l, non-canonical encoding.
    let l: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];
    let mut carry = 0u16;
    for i in 0..32 {
        let sum = u16::from(bytes[32 + i]) + u16::from(l[i]) + carry;
        bytes[32 + i] = sum as u8;
        carry = sum >> 8;
    }
    assert!(verify_client_request(&key.public_key(), b"m", &Signature::from_bytes(bytes)).is_err());
}

fn batch_fixture(
    n: usize,
    scheme_of: impl Fn(usize) -> Scheme,
) -> (Vec<PublicKey>, Vec<Vec<u8>>, Vec<Signature>) {
    let mut pks = Vec::new();
    let mut msgs = Vec::new();
    let mut sigs = Vec::new();
    for i in 0..n {
        let key = derive_signing_key(scheme_of(i), &format!("batch-{i}"));
        let msg = format!("tx-{i}").into_bytes();
        sigs.push(sign_namespace_endorsement(&key, &msg));
        pks.push(key.public_key());
        msgs.push(msg);
    }
    (pks, msgs, sigs)
}

fn items<'a>(pks: &'a [PublicKey], msgs: &'a [Vec<u8>], sigs: &'a [Signature]) -> Vec<SignedMessage<'a>> {
    (0..pks.len())
        .map(|i| SignedMessage {
            public_key: &pks[i],
            message: &msgs[i],
            signature: &sigs[i],
        })
        .collect()
}

#[test]
fn batch_verification_matches_single_verification() {
    for scheme in Scheme::ALL {
        let (pks, msgs, mut sigs) = batch_fixture(40, |_| scheme);
        assert_eq!(
            verify_namespace_endorsements(&items(&pks, &msgs, &sigs)),
            vec![true; 40]
        );
        // Break three: wrong message's signature, wrong purpose, garbage bytes.
        sigs[3] = sigs[4].clone();
        sigs[17] = {
            let key = derive_signing_key(scheme, "batch-17");
            sign_client_request(&key, &msgs[17])
        };
        sigs[39] = Signature::from_bytes(vec![1, 2, 3]);
        let verdicts = verify_namespace_endorsements(&items(&pks, &msgs, &sigs));
        let singles: Vec<bool> = (0..40)
            .map(|i| verify_namespace_endorsement(&pks[i], &msgs[i], &sigs[i]).is_ok())
            .collect();
        assert_eq!(verdicts, singles, "{scheme}");
        let bad: Vec<usize> = (0..40).filter(|&i| !verdicts[i]).collect();
        assert_eq!(bad, vec![3, 17, 39], "{scheme}");
        // Under the client-request purpose only the client-request signature verifies.
        let as_requests = verify_client_requests(&items(&pks, &msgs, &sigs));
        let good: Vec<usize> = (0..40).filter(|&i| as_requests[i]).collect();
        assert_eq!(good, vec![17], "{scheme}");
    }
}

#[test]
fn mixed_scheme_batches_keep_order() {
    let (pks, msgs, mut sigs) = batch_fixture(30, |i| Scheme::ALL[i % 3]);
    sigs[10] = sigs[13].clone(); // Ed25519 slot, wrong message
    sigs[20] = sigs[23].clone(); // ECDSA slot
    sigs[5] = sigs[8].clone(); // BLS slot
    let verdicts = verify_namespace_endorsements(&items(&pks, &msgs, &sigs));
    let expected: Vec<bool> = (0..30).map(|i| ![5, 10, 20].contains(&i)).collect();
    assert_eq!(verdicts, expected);
    assert!(verify_batch_attestations(&[]).is_empty());
}

#[test]
fn grouped_verification_matches_single_verification_for_every_group_size() {
    let (pks, msgs, mut sigs) = batch_fixture(45, |i| Scheme::ALL[i % 3]);
    // Bad ones of each scheme, two adjacent Ed25519 ones, and garbage bytes.
    for (bad, from) in [(0, 3), (3, 6), (4, 7), (8, 11), (10, 13), (20, 23), (44, 41)] {
        sigs[bad] = sigs[from].clone();
    }
    sigs[30] = Signature::from_bytes(vec![7; 9]);
    let all = items(&pks, &msgs, &sigs);
    let singles: Vec<bool> = (0..45)
        .map(|i| verify_namespace_endorsement(&pks[i], &msgs[i], &sigs[i]).is_ok())
        .collect();
    assert_eq!(singles.iter().filter(|ok| !**ok).count(), 8);
    for group in 0..=46 {
        assert_eq!(
            verify_namespace_endorsements_in_groups(&all, group),
            singles,
            "group {group}"
        );
    }
    assert!(verify_namespace_endorsements_in_groups(&[], 8).is_empty());
}

/// Self-certified creators: the key comes as raw bytes with the claim. Valid claims
/// verify; a bad signature, a signature by another key, and bytes that are no Ed25519 key
/// do not; each verdict stays at its position.
#[test]
fn client_requests_by_raw_ed25519_key() {
    let alice = derive_signing_key(Scheme::Ed25519, "raw-key/alice");
    let bob = derive_signing_key(Scheme::Ed25519, "raw-key/bob");
    let a = alice.public_key().as_bytes().to_vec();
    let good = sign_client_request(&alice, b"payload").into_bytes();
    let by_bob = sign_client_request(&bob, b"payload").into_bytes();
    let not_a_key = vec![0xffu8; 31];
    let items: Vec<(&[u8], &[u8], &[u8])> = vec![
        (&a, b"payload", &good),
        (&a, b"other payload", &good),
        (&a, b"payload", &by_bob),
        (&not_a_key, b"payload", &good),
        (&a, b"payload", &good),
    ];
    assert_eq!(
        verify_client_requests_by_ed25519_key(&items),
        vec![true, false, false, false, true]
    );
    assert!(verify_client_requests_by_ed25519_key(&[]).is_empty());
}
