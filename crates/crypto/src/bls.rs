//! BLS12-381 primitives over blst, min_pk variant: 48-byte G1 public keys,
//! 96-byte G2 signatures, hash-to-G2 with a per-purpose DST.

use blst::BLST_ERROR;
use blst::min_pk::{AggregateSignature, PublicKey, SecretKey, Signature as BlsSignature};
use rand::RngCore;

use crate::purpose::POP_DST;
use crate::{CryptoError, Purpose, Result, Scheme, Signature};

/// Length of a compressed public key (G1).
pub(crate) const PUBLIC_KEY_LEN: usize = 48;
/// Length of a compressed signature (G2).
pub(crate) const SIGNATURE_LEN: usize = 96;

/// IETF BLS `KeyGen` with a 32-byte IKM and empty key info.
#[allow(
    clippy::expect_used,
    reason = "blst rejects only IKM shorter than 32 bytes; the type rules it out"
)]
pub(crate) fn key_gen(ikm: &[u8; 32]) -> SecretKey {
    // blst rejects only IKM shorter than 32 bytes.
    SecretKey::key_gen(ikm, &[]).expect("a 32-byte IKM is always accepted")
}

/// Parses a compressed G1 key; rejects non-points, non-subgroup points and the identity.
pub(crate) fn parse_public_key(bytes: &[u8]) -> Result<PublicKey> {
    let bad = |reason| CryptoError::MalformedPublicKey {
        scheme: Scheme::Bls12381,
        reason,
    };
    if bytes.len() != PUBLIC_KEY_LEN {
        return Err(bad("expected 48 bytes (compressed G1)"));
    }
    PublicKey::key_validate(bytes).map_err(|e| match e {
        BLST_ERROR::BLST_PK_IS_INFINITY => bad("identity point"),
        BLST_ERROR::BLST_POINT_NOT_IN_GROUP => bad("point not in the G1 subgroup"),
        _ => bad("not a compressed G1 point"),
    })
}

/// Parses a compressed G2 signature (curve membership only; the subgroup check is done
/// by verification).
pub(crate) fn parse_signature(sig: &Signature) -> Result<BlsSignature> {
    let bad = |reason| CryptoError::MalformedSignature {
        scheme: Scheme::Bls12381,
        reason,
    };
    if sig.as_bytes().len() != SIGNATURE_LEN {
        return Err(bad("expected 96 bytes (compressed G2)"));
    }
    BlsSignature::from_bytes(sig.as_bytes()).map_err(|_| bad("not a compressed G2 point"))
}

/// Wraps a blst signature into crate bytes.
pub(crate) fn to_signature(sig: &BlsSignature) -> Signature {
    Signature::from_bytes(sig.compress().to_vec())
}

/// Signs the raw message under the purpose's DST.
pub(crate) fn sign(key: &SecretKey, purpose: Purpose, message: &[u8]) -> Signature {
    to_signature(&key.sign(message, purpose.bls_dst(), &[]))
}

/// Verifies with the subgroup check on the signature (keys are validated at parse).
pub(crate) fn verify(key: &PublicKey, purpose: Purpose, message: &[u8], sig: &Signature) -> Result<()> {
    let parsed = parse_signature(sig)?;
    match parsed.verify(true, message, purpose.bls_dst(), &[], key, false) {
        BLST_ERROR::BLST_SUCCESS => Ok(()),
        _ => Err(CryptoError::VerificationFailed {
            scheme: Scheme::Bls12381,
            purpose,
        }),
    }
}

/// Random-linear-combination batch verification of distinct (key, message, signature)
/// triples: one multi-pairing instead of one pairing check per signature. `true` means
/// all are valid; `false` means at least one is not (or is malformed).
pub(crate) fn verify_batch(purpose: Purpose, items: &[(&PublicKey, &[u8], &Signature)]) -> bool {
    if items.is_empty() {
        return true;
    }
    let mut sigs = Vec::with_capacity(items.len());
    for (_, _, sig) in items {
        let Ok(parsed) = parse_signature(sig) else {
            return false;
        };
        sigs.push(parsed);
    }
    let keys: Vec<&PublicKey> = items.iter().map(|(k, _, _)| *k).collect();
    let messages: Vec<&[u8]> = items.iter().map(|(_, m, _)| *m).collect();
    let sig_refs: Vec<&BlsSignature> = sigs.iter().collect();
    // 64-bit random, nonzero coefficients: a forged batch passes with probability 2^-64.
    let mut rng = rand::thread_rng();
    let rands: Vec<blst::blst_scalar> = (0..items.len())
        .map(|_| {
            let mut b = [0u8; 32];
            b[..8].copy_from_slice(&(rng.next_u64() | 1).to_le_bytes());
            blst::blst_scalar { b }
        })
        .collect();
    let outcome = BlsSignature::verify_multiple_aggregate_signatures(
        &messages,
        purpose.bls_dst(),
        &keys,
        false,
        &sig_refs,
        true,
        &rands,
        64,
    );
    outcome == BLST_ERROR::BLST_SUCCESS
}

/// Adds signatures (on one message) into one G2 point. Group checks happen at verify.
pub(crate) fn aggregate(sigs: &[Signature]) -> Result<Signature> {
    if sigs.is_empty() {
        return Err(CryptoError::EmptyAggregate { what: "signatures" });
    }
    let parsed = sigs.iter().map(parse_signature).collect::<Result<Vec<_>>>()?;
    let refs: Vec<&BlsSignature> = parsed.iter().collect();
    let agg = AggregateSignature::aggregate(&refs, false).map_err(|_| CryptoError::MalformedSignature {
        scheme: Scheme::Bls12381,
        reason: "cannot aggregate",
    })?;
    Ok(to_signature(&agg.to_signature()))
}

/// Verifies an aggregate of signatures by `keys` on one message (keys must carry a
/// verified proof of possession, see [`verify_possession`]).
pub(crate) fn verify_aggregate(
    keys: &[&PublicKey],
    purpose: Purpose,
    message: &[u8],
    agg: &Signature,
) -> Result<()> {
    if keys.is_empty() {
        return Err(CryptoError::EmptyAggregate { what: "public keys" });
    }
    let parsed = parse_signature(agg)?;
    match parsed.fast_aggregate_verify(true, message, purpose.bls_dst(), keys) {
        BLST_ERROR::BLST_SUCCESS => Ok(()),
        _ => Err(CryptoError::VerificationFailed {
            scheme: Scheme::Bls12381,
            purpose,
        }),
    }
}

/// Proof of possession: a signature on the key's own compressed bytes under `POP_DST`.
pub(crate) fn prove_possession(key: &SecretKey) -> Signature {
    let public = key.sk_to_pk().compress();
    to_signature(&key.sign(&public, POP_DST, &[]))
}

/// Checks a proof of possession.
pub(crate) fn verify_possession(key: &PublicKey, proof: &Signature) -> Result<()> {
    let parsed = parse_signature(proof)?;
    match parsed.verify(true, &key.compress(), POP_DST, &[], key, false) {
        BLST_ERROR::BLST_SUCCESS => Ok(()),
        _ => Err(CryptoError::PossessionProofInvalid),
    }
}
