//! t-of-n threshold BLS: dealing, partial signatures, aggregation.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use crypto::*;
use proptest::prelude::*;
use rand::SeedableRng;

const MSG: &[u8] = b"namespace rw-set digest";

fn partials(set: &ThresholdKeySet, indices: &[u32], msg: &[u8]) -> Vec<PartialSignature> {
    indices
        .iter()
        .map(|&i| sign_namespace_endorsement_partial(&set.shares[i as usize - 1], msg))
        .collect()
}

#[test]
fn any_threshold_of_partials_gives_a_plain_bls_signature() {
    for (t, n) in [(1, 1), (1, 3), (2, 3), (3, 5), (5, 5), (10, 13)] {
        let set = deal_threshold_keys(t, n, "committee").unwrap();
        assert_eq!(set.shares.len(), n as usize);
        assert_eq!((set.public.threshold(), set.public.share_count()), (t, n));
        let first: Vec<u32> = (1..=t).collect();
        let last: Vec<u32> = (n - t + 1..=n).rev().collect();
        let a = aggregate_partials(&set.public, &partials(&set, &first, MSG)).unwrap();
        let b = aggregate_partials(&set.public, &partials(&set, &last, MSG)).unwrap();
        assert_eq!(a, b, "{t}-of-{n}");
        assert_eq!(
            verify_namespace_endorsement(set.public.group_public_key(), MSG, &a),
            Ok(())
        );
        assert!(verify_namespace_endorsement(set.public.group_public_key(), b"other", &a).is_err());
        // Bound to its purpose like any other BLS signature.
        assert!(verify_block_header(set.public.group_public_key(), MSG, &a).is_err());
    }
}

#[test]
fn a_single_share_is_not_the_group_key() {
    let set = deal_threshold_keys(2, 3, "committee").unwrap();
    let p = sign_namespace_endorsement_partial(&set.shares[0], MSG);
    assert!(verify_namespace_endorsement(set.public.group_public_key(), MSG, &p.signature).is_err());
}

#[test]
fn dealing_is_deterministic_and_pinned() {
    let a = deal_threshold_keys(3, 5, "fabrx-test-seed").unwrap();
    assert_eq!(
        a.public.group_public_key().to_hex(),
        "854bad1f2ca23e683f9cfb8637c76368f07dd8abbd0f3bc04e9514ceddac1f32\
         3ed301aa2962d28e6c639185ae9e8bb7"
    );
    let b = deal_threshold_keys(3, 5, "fabrx-test-seed").unwrap();
    assert_eq!(a.public, b.public);
    assert_ne!(deal_threshold_keys(3, 5, "other").unwrap().public, a.public);
    assert_ne!(
        deal_threshold_keys(3, 6, "fabrx-test-seed")
            .unwrap()
            .public
            .group_public_key(),
        a.public.group_public_key()
    );
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
    let c = deal_threshold_keys_with_rng(3, 5, &mut rng).unwrap();
    assert_ne!(c.public, a.public);
}

#[test]
fn partials_verify_against_their_share_key_only() {
    let set = deal_threshold_keys(3, 5, "committee").unwrap();
    for share in &set.shares {
        let p = sign_namespace_endorsement_partial(share, MSG);
        assert_eq!(p.index, share.index());
        assert_eq!(set.public.share_public_key(p.index).unwrap(), &share.public_key());
        assert_eq!(verify_namespace_endorsement_partial(&set.public, MSG, &p), Ok(()));
        assert!(verify_namespace_endorsement_partial(&set.public, b"other", &p).is_err());
        let relabelled = PartialSignature {
            index: p.index % 5 + 1,
            ..p.clone()
        };
        assert!(verify_namespace_endorsement_partial(&set.public, MSG, &relabelled).is_err());
    }
    let out_of_range = PartialSignature {
        index: 6,
        signature: Signature::from_bytes(vec![0; 96]),
    };
    assert_eq!(
        verify_namespace_endorsement_partial(&set.public, MSG, &out_of_range),
        Err(CryptoError::ShareIndexOutOfRange { index: 6, shares: 5 })
    );
}

#[test]
fn too_few_duplicate_or_out_of_range_partials_are_rejected() {
    let set = deal_threshold_keys(3, 5, "committee").unwrap();
    let ps = partials(&set, &[1, 2, 3, 4, 5], MSG);
    assert_eq!(
        aggregate_partials(&set.public, &ps[..2]),
        Err(CryptoError::NotEnoughPartials { needed: 3, got: 2 })
    );
    assert_eq!(
        aggregate_partials(&set.public, &[]),
        Err(CryptoError::NotEnoughPartials { needed: 3, got: 0 })
    );
    let dup = vec![ps[0].clone(), ps[1].clone(), ps[0].clone()];
    assert_eq!(
        aggregate_partials(&set.public, &dup),
        Err(CryptoError::DuplicateShareIndex { index: 1 })
    );
    // A duplicate after the first t still rejects the list.
    let late_dup = vec![ps[0].clone(), ps[1].clone(), ps[2].clone(), ps[1].clone()];
    assert_eq!(
        aggregate_partials(&set.public, &late_dup),
        Err(CryptoError::DuplicateShareIndex { index: 2 })
    );
    for index in [0, 6, u32::MAX] {
        let mut bad = ps[..3].to_vec();
        bad[2].index = index;
        assert_eq!(
            aggregate_partials(&set.public, &bad),
            Err(CryptoError::ShareIndexOutOfRange { index, shares: 5 })
        );
    }
    // Garbage signature bytes are a typed error.
    let mut garbage = ps[..3].to_vec();
    garbage[1].signature = Signature::from_bytes(vec![7; 95]);
    assert!(matches!(
        aggregate_partials(&set.public, &garbage),
        Err(CryptoError::MalformedSignature { .. })
    ));
}

#[test]
fn a_tampered_or_foreign_partial_spoils_the_aggregate() {
    let set = deal_threshold_keys(3, 5, "committee").unwrap();
    let group = set.public.group_public_key();
    // A partial on another message.
    let mut ps = partials(&set, &[1, 2, 3], MSG);
    ps[1] = sign_namespace_endorsement_partial(&set.shares[1], b"other message");
    let agg = aggregate_partials(&set.public, &ps).unwrap();
    assert!(verify_namespace_endorsement(group, MSG, &agg).is_err());
    assert!(verify_namespace_endorsement_partial(&set.public, MSG, &ps[1]).is_err());
    // A partial from share 4 labelled as share 2.
    let mut ps = partials(&set, &[1, 2, 3], MSG);
    ps[1].signature = partials(&set, &[4], MSG)[0].signature.clone();
    let agg = aggregate_partials(&set.public, &ps).unwrap();
    assert!(verify_namespace_endorsement(group, MSG, &agg).is_err());
    // A share of another dealing.
    let foreign = deal_threshold_keys(3, 5, "someone else").unwrap();
    let mut ps = partials(&set, &[1, 2, 3], MSG);
    ps[2] = partials(&foreign, &[3], MSG)[0].clone();
    let agg = aggregate_partials(&set.public, &ps).unwrap();
    assert!(verify_namespace_endorsement(group, MSG, &agg).is_err());
}

#[test]
fn dealer_parameters_are_checked() {
    for (t, n) in [(0, 3), (4, 3), (0, 0), (1, MAX_SHARES + 1)] {
        assert_eq!(
            deal_threshold_keys(t, n, "x").map(|_| ()),
            Err(CryptoError::InvalidThreshold {
                threshold: t,
                shares: n
            })
        );
    }
}

#[test]
fn public_key_sets_are_checked_for_consistency() {
    let set = deal_threshold_keys(3, 6, "committee").unwrap();
    let group = set.public.group_public_key().clone();
    let shares: Vec<PublicKey> = (1..=6)
        .map(|i| set.public.share_public_key(i).unwrap().clone())
        .collect();
    let rebuilt = ThresholdPublicKeys::new(3, group.clone(), shares.clone()).unwrap();
    assert_eq!(rebuilt, set.public);
    // Swapping two keys beyond the interpolation basis is caught at the first bad index.
    let mut swapped = shares.clone();
    swapped.swap(3, 4);
    assert_eq!(
        ThresholdPublicKeys::new(3, group.clone(), swapped),
        Err(CryptoError::InconsistentShares { index: 4 })
    );
    // A wrong group key, or a basis key replaced, is caught against the group key.
    let other_group = derive_signing_key(Scheme::Bls12381, "g").public_key();
    assert_eq!(
        ThresholdPublicKeys::new(3, other_group, shares.clone()),
        Err(CryptoError::InconsistentShares { index: 0 })
    );
    // The same polynomial cannot pass as a lower threshold.
    assert!(ThresholdPublicKeys::new(2, group.clone(), shares.clone()).is_err());
    assert_eq!(
        ThresholdPublicKeys::new(7, group.clone(), shares.clone()),
        Err(CryptoError::InvalidThreshold {
            threshold: 7,
            shares: 6
        })
    );
    let ed = derive_signing_key(Scheme::Ed25519, "e").public_key();
    assert!(matches!(
        ThresholdPublicKeys::new(1, ed, shares),
        Err(CryptoError::SchemeMismatch { .. })
    ));
}

#[test]
fn key_shares_round_trip_through_bytes() {
    let set = deal_threshold_keys(2, 3, "committee").unwrap();
    let share = &set.shares[2];
    let bytes = share.signing_key().to_bytes();
    let back = KeyShare::new(3, SigningKey::from_bytes(Scheme::Bls12381, &bytes).unwrap()).unwrap();
    assert_eq!(back.public_key(), share.public_key());
    assert!(KeyShare::new(0, back.signing_key().clone()).is_err());
    assert!(KeyShare::new(1, derive_signing_key(Scheme::Ed25519, "e")).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any t-subset of the n shares, in any order, yields the same signature.
    #[test]
    fn every_t_subset_aggregates_to_the_same_signature(
        t in 1u32..=5,
        extra in 0u32..=4,
        picks in proptest::collection::vec(any::<proptest::sample::Index>(), 10),
        msg in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let n = t + extra;
        let set = deal_threshold_keys(t, n, "prop").unwrap();
        let reference = aggregate_partials(&set.public, &partials(&set, &(1..=t).collect::<Vec<_>>(), &msg)).unwrap();
        // Choose a random t-subset (random order) by removing picks from the pool.
        let mut pool: Vec<u32> = (1..=n).collect();
        let mut subset = Vec::new();
        for pick in picks.iter().take(t as usize) {
            subset.push(pool.remove(pick.index(pool.len())));
        }
        let agg = aggregate_partials(&set.public, &partials(&set, &subset, &msg)).unwrap();
        prop_assert_eq!(&agg, &reference);
        prop_assert!(verify_namespace_endorsement(set.public.group_public_key(), &msg, &agg).is_ok());
    }
}
