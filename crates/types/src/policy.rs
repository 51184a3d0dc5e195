//! Namespace policies: the values of `_meta` rows.
//!
//! A policy names a signature scheme and one public key; a namespace endorsement is valid
//! when it is a signature under that key over the namespace's canonical bytes
//! ([`crate::endorsement`]). For `bls12-381` the key is the group key of a t-of-n
//! threshold sharing, so "t of n endorsers" is one aggregated signature.

use crate::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// The signature scheme of a namespace policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyScheme {
    /// Ed25519 (RFC 8032).
    Ed25519,
    /// ECDSA over NIST P-256 with SHA-256.
    EcdsaP256,
    /// BLS12-381 (public keys in G1), typically a threshold group key.
    Bls12381,
}

impl PolicyScheme {
    /// The stable name used in policies and files.
    pub fn name(self) -> &'static str {
        match self {
            PolicyScheme::Ed25519 => "ed25519",
            PolicyScheme::EcdsaP256 => "ecdsa-p256",
            PolicyScheme::Bls12381 => "bls12-381",
        }
    }
}

impl FromStr for PolicyScheme {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ed25519" => Ok(PolicyScheme::Ed25519),
            "ecdsa-p256" => Ok(PolicyScheme::EcdsaP256),
            "bls12-381" => Ok(PolicyScheme::Bls12381),
            _ => Err(Error::UnknownScheme { name: s.to_string() }),
        }
    }
}

impl fmt::Display for PolicyScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The policy of one namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NamespacePolicy {
    /// Signature scheme.
    pub scheme: PolicyScheme,
    /// Encoded public key (format per scheme, see docs/crypto.md).
    pub public_key: Vec<u8>,
}
