//! Purpose-named signing and verification: Ed25519, ECDSA P-256, BLS12-381 and t-of-n
//! threshold BLS.
//!
//! Every signature is bound to a [`Purpose`] (see [`purpose`]): the public API is
//! `sign_<purpose>` / `verify_<purpose>`, never a bare `sign(bytes)`. Public keys are
//! parsed and validated once ([`PublicKey::from_bytes`]) and are cheap to clone and cache.
//! `docs/crypto.md` documents schemes, tags, encodings and key derivation.

mod bls;
mod ecdsa;
mod ed25519;
mod error;
mod keyfile;
mod keys;
mod multisig;
pub mod purpose;
mod sign;
mod threshold;

pub use error::{CryptoError, Result};
pub use keyfile::{read_key_file, write_key_file};
pub use keys::{PublicKey, Scheme, Signature, SigningKey, derive_signing_key};
pub use multisig::{
    aggregate_signatures, prove_possession, verify_aggregate_batch_attestation,
    verify_aggregate_block_header, verify_aggregate_decision_certificate, verify_possession,
};
pub use purpose::Purpose;
pub use sign::{
    SignedMessage, sign_batch_attestation, sign_block_header, sign_client_request, sign_config_update,
    sign_consensus_message, sign_decision_certificate, sign_namespace_endorsement, verify_batch_attestation,
    verify_batch_attestations, verify_block_header, verify_client_request, verify_client_requests,
    verify_client_requests_by_ed25519_key, verify_config_update, verify_consensus_message,
    verify_decision_certificate, verify_namespace_endorsement, verify_namespace_endorsements,
    verify_namespace_endorsements_in_groups,
};
pub use threshold::{
    KeyShare, MAX_SHARES, PartialSignature, ThresholdKeySet, ThresholdPublicKeys, aggregate_partials,
    deal_threshold_keys, deal_threshold_keys_with_rng, sign_namespace_endorsement_partial,
    verify_namespace_endorsement_partial,
};
