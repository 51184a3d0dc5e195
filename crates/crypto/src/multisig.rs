//! BLS multi-signatures: many signers, one message, one 96-byte signature.
//!
//! Used for compact quorum certificates (decision certificates, block headers, batch
//! attestations). Plain aggregation is open to rogue-key attacks, so every BLS public
//! key that may appear in an aggregate MUST be registered together with a proof of
//! possession checked by [`verify_possession`] (the "proof of possession" scheme of the
//! IETF BLS draft). The verifier of an aggregate trusts the key set it is given.

use crate::keys::{PublicInner, SecretInner};
use crate::{CryptoError, PublicKey, Purpose, Result, Scheme, Signature, SigningKey, bls};

/// Adds BLS signatures made on the same message into one signature.
///
/// Rejects an empty list and malformed signatures; subgroup checks happen when the
/// aggregate is verified.
pub fn aggregate_signatures(signatures: &[Signature]) -> Result<Signature> {
    bls::aggregate(signatures)
}

fn bls_key(key: &PublicKey) -> Result<&blst::min_pk::PublicKey> {
    match key.inner() {
        PublicInner::Bls12381(k) => Ok(k),
        _ => Err(CryptoError::SchemeMismatch {
            expected: Scheme::Bls12381,
            got: key.scheme(),
        }),
    }
}

fn verify_aggregate(purpose: Purpose, message: &[u8], keys: &[PublicKey], agg: &Signature) -> Result<()> {
    let keys = keys.iter().map(bls_key).collect::<Result<Vec<_>>>()?;
    bls::verify_aggregate(&keys, purpose, message, agg)
}

/// Verifies an aggregate of decision-certificate signatures by exactly `keys` (each
/// signer once; keys must have been registered with a proof of possession).
pub fn verify_aggregate_decision_certificate(
    message: &[u8],
    keys: &[PublicKey],
    agg: &Signature,
) -> Result<()> {
    verify_aggregate(Purpose::DecisionCertificate, message, keys, agg)
}

/// Verifies an aggregate of block-header signatures by exactly `keys` (PoP required).
pub fn verify_aggregate_block_header(message: &[u8], keys: &[PublicKey], agg: &Signature) -> Result<()> {
    verify_aggregate(Purpose::BlockHeader, message, keys, agg)
}

/// Verifies an aggregate of batch-attestation signatures by exactly `keys` (PoP required).
pub fn verify_aggregate_batch_attestation(message: &[u8], keys: &[PublicKey], agg: &Signature) -> Result<()> {
    verify_aggregate(Purpose::BatchAttestation, message, keys, agg)
}

/// Makes the proof of possession of a BLS key: its signature over its own public key
/// under a dedicated DST. Fails with `SchemeMismatch` for non-BLS keys.
pub fn prove_possession(key: &SigningKey) -> Result<Signature> {
    match &key.0 {
        SecretInner::Bls12381(k) => Ok(bls::prove_possession(k)),
        _ => Err(CryptoError::SchemeMismatch {
            expected: Scheme::Bls12381,
            got: key.scheme(),
        }),
    }
}

/// Checks a proof of possession; call it once when a BLS key is registered.
pub fn verify_possession(key: &PublicKey, proof: &Signature) -> Result<()> {
    bls::verify_possession(bls_key(key)?, proof)
}
