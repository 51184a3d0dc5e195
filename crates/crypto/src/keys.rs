//! Schemes, signing keys, parsed public keys and signature bytes.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rand::{CryptoRng, RngCore};
use sha2::{Digest, Sha256};

use crate::purpose::KEYGEN_PREFIX;
use crate::{CryptoError, Result, bls, ecdsa, ed25519};

/// A signature scheme. The string names are stable: they appear in configs and JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Ed25519 (RFC 8032), strict verification.
    Ed25519,
    /// ECDSA over NIST P-256 with SHA-256, low-S signatures.
    EcdsaP256,
    /// BLS signatures over BLS12-381, min_pk variant (G1 keys, G2 signatures).
    Bls12381,
}

impl Scheme {
    /// Every scheme.
    pub const ALL: [Scheme; 3] = [Scheme::Ed25519, Scheme::EcdsaP256, Scheme::Bls12381];

    /// The stable name: "ed25519", "ecdsa-p256" or "bls12-381".
    pub const fn name(self) -> &'static str {
        match self {
            Scheme::Ed25519 => "ed25519",
            Scheme::EcdsaP256 => "ecdsa-p256",
            Scheme::Bls12381 => "bls12-381",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheme {
    type Err = CryptoError;

    fn from_str(s: &str) -> Result<Self> {
        Scheme::ALL
            .into_iter()
            .find(|scheme| scheme.name() == s)
            .ok_or_else(|| CryptoError::UnknownScheme { name: s.to_owned() })
    }
}

impl serde::Serialize for Scheme {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Scheme {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// A secret signing key of one scheme. `Debug` never prints secret material.
#[derive(Clone)]
pub struct SigningKey(pub(crate) SecretInner);

#[derive(Clone)]
pub(crate) enum SecretInner {
    Ed25519(ed25519_dalek::SigningKey),
    EcdsaP256(p256::ecdsa::SigningKey),
    Bls12381(blst::min_pk::SecretKey),
}

impl SigningKey {
    /// A fresh random key from a cryptographic RNG.
    pub fn generate<R: RngCore + CryptoRng>(scheme: Scheme, rng: &mut R) -> SigningKey {
        let mut secret = [0u8; 32];
        rng.fill_bytes(&mut secret);
        from_secret_material(scheme, secret)
    }

    /// The scheme of this key.
    pub fn scheme(&self) -> Scheme {
        match &self.0 {
            SecretInner::Ed25519(_) => Scheme::Ed25519,
            SecretInner::EcdsaP256(_) => Scheme::EcdsaP256,
            SecretInner::Bls12381(_) => Scheme::Bls12381,
        }
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        match &self.0 {
            SecretInner::Ed25519(k) => PublicKey::from_inner(PublicInner::Ed25519(k.verifying_key())),
            SecretInner::EcdsaP256(k) => PublicKey::from_inner(PublicInner::EcdsaP256(*k.verifying_key())),
            SecretInner::Bls12381(k) => PublicKey::from_inner(PublicInner::Bls12381(k.sk_to_pk())),
        }
    }

    /// The 32-byte secret: Ed25519 seed, P-256 scalar or BLS scalar (both big-endian).
    pub fn to_bytes(&self) -> [u8; 32] {
        match &self.0 {
            SecretInner::Ed25519(k) => k.to_bytes(),
            SecretInner::EcdsaP256(k) => k.to_bytes().into(),
            SecretInner::Bls12381(k) => k.to_bytes(),
        }
    }

    /// Parses the output of [`SigningKey::to_bytes`]; rejects zero or out-of-range scalars.
    pub fn from_bytes(scheme: Scheme, bytes: &[u8]) -> Result<SigningKey> {
        let bad = |reason| CryptoError::MalformedSigningKey { scheme, reason };
        let arr: [u8; 32] = bytes.try_into().map_err(|_| bad("expected 32 bytes"))?;
        let inner = match scheme {
            Scheme::Ed25519 => SecretInner::Ed25519(ed25519_dalek::SigningKey::from_bytes(&arr)),
            Scheme::EcdsaP256 => SecretInner::EcdsaP256(
                p256::ecdsa::SigningKey::from_bytes(&arr.into())
                    .map_err(|_| bad("scalar is zero or not below the group order"))?,
            ),
            Scheme::Bls12381 => SecretInner::Bls12381(
                blst::min_pk::SecretKey::from_bytes(&arr)
                    .map_err(|_| bad("scalar is zero or not below the group order"))?,
            ),
        };
        Ok(SigningKey(inner))
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("scheme", &self.scheme())
            .field("public_key", &self.public_key().to_hex())
            .finish_non_exhaustive()
    }
}

/// Derives a key deterministically from a seed string: for tests, demos and JSON fixtures.
///
/// `secret = SHA-256("fabrx/keygen/v1/" ‖ scheme name ‖ "/" ‖ seed)`, then per scheme:
/// Ed25519 uses `secret` as the RFC 8032 seed; P-256 uses it as a big-endian scalar,
/// replacing it by `SHA-256(secret)` until it lies in `1..n`; BLS12-381 runs the
/// IETF `KeyGen` (blst `key_gen`) with `secret` as IKM and empty key info.
/// The same scheme and seed give the same key forever (pinned by tests).
pub fn derive_signing_key(scheme: Scheme, seed: &str) -> SigningKey {
    let mut hasher = Sha256::new();
    hasher.update(KEYGEN_PREFIX);
    hasher.update(scheme.name().as_bytes());
    hasher.update(b"/");
    hasher.update(seed.as_bytes());
    from_secret_material(scheme, hasher.finalize().into())
}

/// Maps 32 bytes of secret material to a key (shared by derivation and generation).
fn from_secret_material(scheme: Scheme, mut secret: [u8; 32]) -> SigningKey {
    let inner = match scheme {
        Scheme::Ed25519 => SecretInner::Ed25519(ed25519_dalek::SigningKey::from_bytes(&secret)),
        Scheme::EcdsaP256 => loop {
            // Rejection sampling: a miss has probability about 2^-32.
            match p256::ecdsa::SigningKey::from_bytes(&secret.into()) {
                Ok(key) => break SecretInner::EcdsaP256(key),
                Err(_) => secret = Sha256::digest(secret).into(),
            }
        },
        Scheme::Bls12381 => SecretInner::Bls12381(bls::key_gen(&secret)),
    };
    SigningKey(inner)
}

/// A parsed, validated public key. Cloning is an `Arc` bump, so parse once and cache.
///
/// Equality and hashing are over (scheme, canonical bytes).
#[derive(Clone)]
pub struct PublicKey(Arc<PublicKeyData>);

pub(crate) struct PublicKeyData {
    pub(crate) inner: PublicInner,
    canonical: Box<[u8]>,
}

pub(crate) enum PublicInner {
    Ed25519(ed25519_dalek::VerifyingKey),
    EcdsaP256(p256::ecdsa::VerifyingKey),
    Bls12381(blst::min_pk::PublicKey),
}

impl PublicKey {
    pub(crate) fn from_inner(inner: PublicInner) -> PublicKey {
        let canonical: Box<[u8]> = match &inner {
            PublicInner::Ed25519(k) => Box::new(k.to_bytes()),
            PublicInner::EcdsaP256(k) => k.to_encoded_point(true).as_bytes().into(),
            PublicInner::Bls12381(k) => Box::new(k.compress()),
        };
        PublicKey(Arc::new(PublicKeyData { inner, canonical }))
    }

    pub(crate) fn inner(&self) -> &PublicInner {
        &self.0.inner
    }

    /// The scheme of this key.
    pub fn scheme(&self) -> Scheme {
        match self.inner() {
            PublicInner::Ed25519(_) => Scheme::Ed25519,
            PublicInner::EcdsaP256(_) => Scheme::EcdsaP256,
            PublicInner::Bls12381(_) => Scheme::Bls12381,
        }
    }

    /// Canonical encoding: Ed25519 32 bytes; P-256 33-byte compressed SEC1;
    /// BLS12-381 48-byte compressed G1 point.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.canonical.to_vec()
    }

    /// The canonical encoding, borrowed.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0.canonical
    }

    /// Lower-case hex of [`PublicKey::to_bytes`].
    pub fn to_hex(&self) -> String {
        hex::encode(self.as_bytes())
    }

    /// Parses and validates a public key. Never panics on bad input.
    ///
    /// Accepted encodings: Ed25519 32 bytes (rejects non-points, small-order and
    /// mixed-order points); P-256 SEC1 compressed (33) or uncompressed (65), or a DER
    /// SubjectPublicKeyInfo (rejects the identity and points off the curve); BLS12-381
    /// 48-byte compressed G1 (rejects the identity, non-curve and non-subgroup points).
    pub fn from_bytes(scheme: Scheme, bytes: &[u8]) -> Result<PublicKey> {
        let inner = match scheme {
            Scheme::Ed25519 => PublicInner::Ed25519(ed25519::parse_public_key(bytes)?),
            Scheme::EcdsaP256 => PublicInner::EcdsaP256(ecdsa::parse_public_key(bytes)?),
            Scheme::Bls12381 => PublicInner::Bls12381(bls::parse_public_key(bytes)?),
        };
        Ok(PublicKey::from_inner(inner))
    }

    /// Parses a hex-encoded public key (see [`PublicKey::from_bytes`]).
    pub fn from_hex(scheme: Scheme, text: &str) -> Result<PublicKey> {
        PublicKey::from_bytes(scheme, &decode_hex(text)?)
    }
}

/// `scheme:hex`, e.g. `ed25519:6a48…`; the form used by serde and configs.
impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.scheme(), self.to_hex())
    }
}

/// Parses the `scheme:hex` form written by `Display`.
impl FromStr for PublicKey {
    type Err = CryptoError;

    fn from_str(s: &str) -> Result<Self> {
        let (scheme, hex) = s.split_once(':').ok_or_else(|| CryptoError::UnknownScheme {
            name: s.chars().take(16).collect(),
        })?;
        PublicKey::from_hex(scheme.parse()?, hex)
    }
}

impl serde::Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl PartialEq for PublicKey {
    fn eq(&self, other: &Self) -> bool {
        self.scheme() == other.scheme() && self.as_bytes() == other.as_bytes()
    }
}

impl Eq for PublicKey {}

impl std::hash::Hash for PublicKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.scheme().hash(state);
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({}:{})", self.scheme(), self.to_hex())
    }
}

/// Signature bytes, as produced by the signing functions. Parsed only when verified.
///
/// Encodings: Ed25519 64 bytes (R ‖ S); P-256 64 bytes (r ‖ s, big-endian, low-S);
/// BLS12-381 96-byte compressed G2 point. Serde uses lower-case hex.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Signature(Vec<u8>);

impl Signature {
    /// Wraps raw signature bytes (e.g. from the wire). No validation happens here.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Signature {
        Signature(bytes.into())
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Consumes the signature, returning its bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// Lower-case hex of the bytes.
    pub fn to_hex(&self) -> String {
        hex::encode(&self.0)
    }

    /// Decodes hex text into signature bytes.
    pub fn from_hex(text: &str) -> Result<Signature> {
        decode_hex(text).map(Signature)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({})", self.to_hex())
    }
}

impl serde::Serialize for Signature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for Signature {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Signature::from_hex(&text).map_err(serde::de::Error::custom)
    }
}

fn decode_hex(text: &str) -> Result<Vec<u8>> {
    hex::decode(text).map_err(|e| CryptoError::InvalidHex {
        reason: e.to_string(),
    })
}
