//! BLS multi-signature aggregation and proofs of possession.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use blst::min_pk::{AggregatePublicKey, PublicKey as BlsPublicKey};
use crypto::*;

fn consenters(n: usize) -> Vec<SigningKey> {
    (0..n)
        .map(|i| derive_signing_key(Scheme::Bls12381, &format!("consenter-{i}")))
        .collect()
}

#[test]
fn aggregate_of_a_quorum_verifies_under_exactly_that_quorum() {
    for n in [1, 4, 7] {
        let keys = consenters(n);
        let pks: Vec<PublicKey> = keys.iter().map(SigningKey::public_key).collect();
        let sigs: Vec<Signature> = keys
            .iter()
            .map(|k| sign_decision_certificate(k, b"decision"))
            .collect();
        let agg = aggregate_signatures(&sigs).unwrap();
        assert_eq!(agg.as_bytes().len(), 96);
        assert_eq!(
            verify_aggregate_decision_certificate(b"decision", &pks, &agg),
            Ok(())
        );
        // Order of keys does not matter.
        let reversed: Vec<PublicKey> = pks.iter().rev().cloned().collect();
        assert_eq!(
            verify_aggregate_decision_certificate(b"decision", &reversed, &agg),
            Ok(())
        );
        // Other message or purpose fails.
        assert!(verify_aggregate_decision_certificate(b"decisioN", &pks, &agg).is_err());
        assert!(verify_aggregate_block_header(b"decision", &pks, &agg).is_err());
        assert!(verify_aggregate_batch_attestation(b"decision", &pks, &agg).is_err());
        if n > 1 {
            // A missing signer or a claimed extra signer fails.
            assert!(verify_aggregate_decision_certificate(b"decision", &pks[1..], &agg).is_err());
            let short = aggregate_signatures(&sigs[1..]).unwrap();
            assert!(verify_aggregate_decision_certificate(b"decision", &pks, &short).is_err());
        }
    }
}

#[test]
fn block_header_and_batch_attestation_aggregates_verify() {
    let keys = consenters(4);
    let pks: Vec<PublicKey> = keys.iter().map(SigningKey::public_key).collect();
    let bh: Vec<Signature> = keys.iter().map(|k| sign_block_header(k, b"hdr")).collect();
    let ba: Vec<Signature> = keys.iter().map(|k| sign_batch_attestation(k, b"baf")).collect();
    let bh = aggregate_signatures(&bh).unwrap();
    let ba = aggregate_signatures(&ba).unwrap();
    assert_eq!(verify_aggregate_block_header(b"hdr", &pks, &bh), Ok(()));
    assert_eq!(verify_aggregate_batch_attestation(b"baf", &pks, &ba), Ok(()));
    assert!(verify_aggregate_block_header(b"baf", &pks, &ba).is_err());
}

#[test]
fn aggregation_rejects_empty_and_non_bls_inputs() {
    assert_eq!(
        aggregate_signatures(&[]),
        Err(CryptoError::EmptyAggregate { what: "signatures" })
    );
    let sig = sign_block_header(&consenters(1)[0], b"m");
    assert_eq!(
        verify_aggregate_block_header(b"m", &[], &sig),
        Err(CryptoError::EmptyAggregate { what: "public keys" })
    );
    let ed = derive_signing_key(Scheme::Ed25519, "e");
    assert!(matches!(
        aggregate_signatures(&[sign_block_header(&ed, b"m")]),
        Err(CryptoError::MalformedSignature { .. })
    ));
    assert_eq!(
        verify_aggregate_block_header(b"m", &[ed.public_key()], &sig),
        Err(CryptoError::SchemeMismatch {
            expected: Scheme::Bls12381,
            got: Scheme::Ed25519
        })
    );
    assert_eq!(
        prove_possession(&ed),
        Err(CryptoError::SchemeMismatch {
            expected: Scheme::Bls12381,
            got: Scheme::Ed25519
        })
    );
}

#[test]
fn proofs_of_possession_verify_only_for_their_key() {
    let keys = consenters(3);
    for k in &keys {
        let pop = prove_possession(k).unwrap();
        assert_eq!(verify_possession(&k.public_key(), &pop), Ok(()));
        let other = keys.iter().find(|o| o.public_key() != k.public_key()).unwrap();
        assert_eq!(
            verify_possession(&other.public_key(), &pop),
            Err(CryptoError::PossessionProofInvalid)
        );
        // A PoP is not a signature for any purpose, and vice versa.
        assert!(verify_block_header(&k.public_key(), &k.public_key().to_bytes(), &pop).is_err());
        let header_sig = sign_block_header(k, &k.public_key().to_bytes());
        assert_eq!(
            verify_possession(&k.public_key(), &header_sig),
            Err(CryptoError::PossessionProofInvalid)
        );
    }
}

#[test]
fn rogue_key_forges_an_aggregate_but_cannot_prove_possession() {
    let victim = derive_signing_key(Scheme::Bls12381, "victim");
    let attacker = derive_signing_key(Scheme::Bls12381, "attacker");
    // rogue = attacker_pk - victim_pk: the attacker knows no secret for it.
    let victim_pk = BlsPublicKey::from_bytes(victim.public_key().as_bytes()).unwrap();
    let attacker_pk = BlsPublicKey::from_bytes(attacker.public_key().as_bytes()).unwrap();
    let mut rogue = AggregatePublicKey::from_public_key(&attacker_pk);
    rogue.sub_aggregate(&AggregatePublicKey::from_public_key(&victim_pk));
    let rogue = PublicKey::from_bytes(Scheme::Bls12381, &rogue.to_public_key().compress()).unwrap();
    // Without PoP the "aggregate of victim and rogue" is forged from the attacker's key alone.
    let forged = sign_decision_certificate(&attacker, b"steal");
    assert_eq!(
        verify_aggregate_decision_certificate(b"steal", &[victim.public_key(), rogue.clone()], &forged),
        Ok(())
    );
    // Which is why registration demands a PoP: the attacker cannot make one for `rogue`.
    let attempt = prove_possession(&attacker).unwrap();
    assert_eq!(
        verify_possession(&rogue, &attempt),
        Err(CryptoError::PossessionProofInvalid)
    );
}
