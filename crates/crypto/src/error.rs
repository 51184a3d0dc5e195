//! The crate's one error type.

use crate::{Purpose, Scheme};

/// Everything that can go wrong when parsing keys or signatures, signing or verifying.
///
/// Parsing untrusted bytes never panics: every malformed input maps to one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// A scheme name that is not one of "ed25519", "ecdsa-p256", "bls12-381".
    #[error("unknown signature scheme {name:?}")]
    UnknownScheme {
        /// The name that was given.
        name: String,
    },
    /// A key file that cannot be written, read or trusted.
    #[error("key file {path}: {detail}")]
    KeyFile {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// Public-key bytes that do not encode a valid key of the scheme.
    #[error("malformed {scheme} public key: {reason}")]
    MalformedPublicKey {
        /// The scheme the bytes were parsed as.
        scheme: Scheme,
        /// What is wrong with them.
        reason: &'static str,
    },
    /// Secret-key bytes that do not encode a valid key of the scheme.
    #[error("malformed {scheme} signing key: {reason}")]
    MalformedSigningKey {
        /// The scheme the bytes were parsed as.
        scheme: Scheme,
        /// What is wrong with them.
        reason: &'static str,
    },
    /// Signature bytes that cannot be a signature of the scheme (length, encoding, point).
    #[error("malformed {scheme} signature: {reason}")]
    MalformedSignature {
        /// The scheme of the key the signature was checked against.
        scheme: Scheme,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A well-formed signature that does not verify for this key, purpose and message.
    #[error("{scheme} signature for {purpose} does not verify")]
    VerificationFailed {
        /// The scheme of the key.
        scheme: Scheme,
        /// The purpose the signature was checked for.
        purpose: Purpose,
    },
    /// An operation that exists only for one scheme was given a key of another.
    #[error("operation needs a {expected} key, got a {got} key")]
    SchemeMismatch {
        /// The scheme the operation needs.
        expected: Scheme,
        /// The scheme of the key that was given.
        got: Scheme,
    },
    /// Aggregating or verifying an aggregate of zero signatures or keys.
    #[error("cannot aggregate an empty set of {what}")]
    EmptyAggregate {
        /// "signatures" or "public keys".
        what: &'static str,
    },
    /// A BLS proof of possession that does not verify for its public key.
    #[error("proof of possession does not verify")]
    PossessionProofInvalid,
    /// Threshold parameters outside 1 <= threshold <= shares (or shares beyond the limit).
    #[error("invalid threshold {threshold}-of-{shares}")]
    InvalidThreshold {
        /// The requested threshold t.
        threshold: u32,
        /// The requested number of shares n.
        shares: u32,
    },
    /// Fewer partial signatures than the threshold.
    #[error("need {needed} partial signatures, got {got}")]
    NotEnoughPartials {
        /// The threshold t.
        needed: u32,
        /// How many distinct partials were given.
        got: u32,
    },
    /// Two partial signatures (or shares) with the same index.
    #[error("share index {index} appears more than once")]
    DuplicateShareIndex {
        /// The repeated index.
        index: u32,
    },
    /// A share index of 0 or above the number of shares.
    #[error("share index {index} is outside 1..={shares}")]
    ShareIndexOutOfRange {
        /// The offending index.
        index: u32,
        /// The number of shares n.
        shares: u32,
    },
    /// Share public keys that do not lie on one polynomial with the group public key.
    #[error("share public key {index} is inconsistent with the group public key")]
    InconsistentShares {
        /// The first share index found inconsistent.
        index: u32,
    },
    /// Hex text that does not decode.
    #[error("invalid hex: {reason}")]
    InvalidHex {
        /// The decoder's complaint.
        reason: String,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, CryptoError>;
