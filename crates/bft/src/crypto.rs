//! The signing seam. The engine signs and verifies through two small traits so the
//! application can plug in its own key management; [`Ed25519Signer`] /
//! [`Ed25519Verifier`] are the production implementation and `TestKeys` (feature
//! `testing`) a cheap, deterministic (and insecure) one for simulations and tests.

use std::fmt;

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
#[cfg(any(test, feature = "testing"))]
use sha2::{Digest as _, Sha256};

use crate::types::ReplicaId;

/// An opaque signature.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Signature(pub Vec<u8>);

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sig(")?;
        for b in self.0.iter().take(4) {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Signs engine messages on behalf of this replica. The engine always passes
/// domain-separated bytes (see [`crate::tags`]).
pub trait Signer: Send {
    /// Signs `msg`.
    fn sign(&self, msg: &[u8]) -> Signature;
}

/// Verifies signatures of any replica of the consenter set.
pub trait Verifier: Send + Sync {
    /// True iff `sig` is `replica`'s valid signature over `msg`.
    fn verify(&self, replica: ReplicaId, msg: &[u8], sig: &Signature) -> bool;
}

/// Ed25519 signer (ed25519-dalek).
pub struct Ed25519Signer {
    key: SigningKey,
}

impl Ed25519Signer {
    /// A signer from a 32-byte secret seed.
    pub fn from_seed(seed: [u8; 32]) -> Ed25519Signer {
        Ed25519Signer {
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key to give to the verifiers.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }
}

impl Signer for Ed25519Signer {
    fn sign(&self, msg: &[u8]) -> Signature {
        Signature(self.key.sign(msg).to_bytes().to_vec())
    }
}

/// Ed25519 verifier holding the public keys of replicas `0..n`.
pub struct Ed25519Verifier {
    keys: Vec<Option<VerifyingKey>>,
}

impl Ed25519Verifier {
    /// A verifier for the given public keys (index = replica id). Keys that do not
    /// decode make every signature of that replica invalid.
    pub fn new(public_keys: &[[u8; 32]]) -> Ed25519Verifier {
        Ed25519Verifier {
            keys: public_keys
                .iter()
                .map(|k| VerifyingKey::from_bytes(k).ok())
                .collect(),
        }
    }
}

impl Verifier for Ed25519Verifier {
    fn verify(&self, replica: ReplicaId, msg: &[u8], sig: &Signature) -> bool {
        let Some(Some(key)) = self.keys.get(replica as usize) else {
            return false;
        };
        let Ok(bytes) = <[u8; 64]>::try_from(sig.0.as_slice()) else {
            return false;
        };
        key.verify_strict(msg, &ed25519_dalek::Signature::from_bytes(&bytes))
            .is_ok()
    }
}

/// Deterministic Ed25519 keys for replica `id` derived from a seed (tests, benches; only
/// with the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub fn ed25519_keys(seed: u64, n: u32) -> (Vec<Ed25519Signer>, Ed25519Verifier) {
    let signers: Vec<Ed25519Signer> = (0..n)
        .map(|i| {
            let mut h = Sha256::new();
            h.update(::types::tags::bft::TEST_KEY);
            h.update(seed.to_le_bytes());
            h.update(i.to_le_bytes());
            Ed25519Signer::from_seed(h.finalize().into())
        })
        .collect();
    let pks: Vec<[u8; 32]> = signers.iter().map(Ed25519Signer::public_key).collect();
    (signers, Ed25519Verifier::new(&pks))
}

/// INSECURE keyed-hash "signatures" for simulations: replica `i`'s signature over `m`
/// is the first 8 bytes of `SHA-256(secret ‖ i ‖ m)`. Whoever holds the secret can sign
/// for everyone, so this only models honest key ownership inside one test process:
/// a simulated Byzantine replica only ever gets its own [`TestSigner`]. Only with the
/// `testing` feature.
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Debug)]
pub struct TestKeys {
    secret: u64,
}

#[cfg(any(test, feature = "testing"))]
impl TestKeys {
    /// Keys derived from `secret`.
    pub fn new(secret: u64) -> TestKeys {
        TestKeys { secret }
    }

    /// The signer of replica `id`.
    pub fn signer(&self, id: ReplicaId) -> TestSigner {
        TestSigner {
            keys: self.clone(),
            id,
        }
    }

    fn mac(&self, id: ReplicaId, msg: &[u8]) -> Signature {
        let mut h = Sha256::new();
        h.update(self.secret.to_le_bytes());
        h.update(id.to_le_bytes());
        h.update(msg);
        Signature(h.finalize()[..8].to_vec())
    }
}

#[cfg(any(test, feature = "testing"))]
impl Verifier for TestKeys {
    fn verify(&self, replica: ReplicaId, msg: &[u8], sig: &Signature) -> bool {
        self.mac(replica, msg) == *sig
    }
}

/// The signer of one replica under [`TestKeys`].
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Debug)]
pub struct TestSigner {
    keys: TestKeys,
    id: ReplicaId,
}

#[cfg(any(test, feature = "testing"))]
impl Signer for TestSigner {
    fn sign(&self, msg: &[u8]) -> Signature {
        self.keys.mac(self.id, msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ed25519_round_trip_and_wrong_signer() {
        let (signers, verifier) = ed25519_keys(7, 4);
        let sig = signers[1].sign(b"fabrx/bft/v1/commit hello");
        assert!(verifier.verify(1, b"fabrx/bft/v1/commit hello", &sig));
        assert!(!verifier.verify(2, b"fabrx/bft/v1/commit hello", &sig));
        assert!(!verifier.verify(1, b"fabrx/bft/v1/commit hellO", &sig));
        assert!(!verifier.verify(9, b"fabrx/bft/v1/commit hello", &sig));
        assert!(!verifier.verify(1, b"x", &Signature(vec![1, 2])));
    }

    #[test]
    fn test_keys_are_per_replica() {
        let keys = TestKeys::new(3);
        let sig = keys.signer(0).sign(b"m");
        assert!(keys.verify(0, b"m", &sig));
        assert!(!keys.verify(1, b"m", &sig));
        assert!(!TestKeys::new(4).verify(0, b"m", &sig));
    }
}
