//! Namespace policies (FX §3.5): which key endorses a namespace, and the rule that checks
//! a tx's endorsements against them. The pure core of signature verification, shared by the
//! sigverifier service, the sidecar's structural checks (an unusable policy is malformed,
//! 114), the in-process committer, the serial oracle and the load generator.
//!
//! A namespace policy is one public key of a scheme (`ed25519`, `ecdsa-p256`, or
//! `bls12-381` — the group key of a t-of-n threshold sharing, so "t of n endorsers" is one
//! aggregated signature). A namespace is endorsed when at least one of its endorsements is
//! a valid signature by that key over the namespace's canonical bytes
//! (`types::endorsement::namespace_signing_bytes`). `_meta` txs are endorsed under the
//! meta policy (genesis or configuration). Parsed keys are cached per namespace.
//!
//! [`batch`] verifies whole batches with batch signature verification, with the same
//! verdicts as [`Policies::verify_tx`] tx by tx.

pub mod batch;

use std::collections::HashMap;
use std::sync::Arc;
use types::endorsement::namespace_signing_bytes;
use types::{META_NAMESPACE, NamespacePolicy, PolicyScheme, Status, Tx, TxId};

/// Errors of namespace policies.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A policy's public key does not parse for its scheme.
    #[error("namespace {ns}: unusable policy key: {source}")]
    BadPolicyKey {
        /// The namespace.
        ns: String,
        /// Why the key was refused.
        source: crypto::CryptoError,
    },
}

/// Result alias of the policy crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The crypto scheme of a policy scheme.
pub fn scheme_of(s: PolicyScheme) -> crypto::Scheme {
    match s {
        PolicyScheme::Ed25519 => crypto::Scheme::Ed25519,
        PolicyScheme::EcdsaP256 => crypto::Scheme::EcdsaP256,
        PolicyScheme::Bls12381 => crypto::Scheme::Bls12381,
    }
}

/// The policy scheme of a crypto scheme (the inverse of [`scheme_of`]).
pub fn policy_scheme_of(s: crypto::Scheme) -> PolicyScheme {
    match s {
        crypto::Scheme::Ed25519 => PolicyScheme::Ed25519,
        crypto::Scheme::EcdsaP256 => PolicyScheme::EcdsaP256,
        crypto::Scheme::Bls12381 => PolicyScheme::Bls12381,
    }
}

/// The namespace policy satisfied by signatures of `key` (for a threshold group: its
/// group key).
pub fn policy_of(key: &crypto::PublicKey) -> NamespacePolicy {
    NamespacePolicy {
        scheme: policy_scheme_of(key.scheme()),
        public_key: key.to_bytes(),
    }
}

/// Parses a policy's key (used to reject unusable policies structurally, 114).
pub fn parse_policy_key(p: &NamespacePolicy) -> Option<crypto::PublicKey> {
    crypto::PublicKey::from_bytes(scheme_of(p.scheme), &p.public_key).ok()
}

/// Parsed namespace policies, keyed by namespace id.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    keys: HashMap<String, crypto::PublicKey>,
}

impl Policies {
    /// No policies: every tx fails verification.
    pub fn new() -> Policies {
        Policies::default()
    }

    /// Sets the policy of namespace `ns` (`_meta` for the meta policy).
    pub fn set(&mut self, ns: &str, policy: &NamespacePolicy) -> Result<()> {
        let key = crypto::PublicKey::from_bytes(scheme_of(policy.scheme), &policy.public_key).map_err(
            |source| Error::BadPolicyKey {
                ns: ns.to_string(),
                source,
            },
        )?;
        self.keys.insert(ns.to_string(), key);
        Ok(())
    }

    /// Whether namespace `ns` has a policy.
    pub fn contains(&self, ns: &str) -> bool {
        self.keys.contains_key(ns)
    }

    /// The parsed key of namespace `ns`.
    pub fn key(&self, ns: &str) -> Option<&crypto::PublicKey> {
        self.keys.get(ns)
    }

    /// Number of namespaces with a policy.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no namespace has a policy.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Verifies `txs` with batch signature verification on the current rayon pool; the
    /// same verdicts as [`Policies::verify_tx`] per tx (`None` = valid). A
    /// sigverifier uses a dedicated pool.
    pub fn verify_batch(&self, txs: &[(TxId, Arc<Tx>)]) -> Vec<Option<Status>> {
        batch::verify_batch(self, txs, batch::Chunks::default())
    }

    /// Verifies every namespace endorsement of `tx`: `Ok` when all verify, else
    /// `ABORTED_SIGNATURE_INVALID` (a missing policy counts as a failure, and so does a tx
    /// without namespaces: it carries no endorsement, so nothing vouches for it).
    pub fn verify_tx(&self, id: &TxId, tx: &Tx) -> std::result::Result<(), Status> {
        if tx.namespaces.is_empty() {
            return Err(Status::AbortedSignatureInvalid);
        }
        for (i, ns) in tx.namespaces.iter().enumerate() {
            let key = self.keys.get(&ns.ns_id).ok_or(Status::AbortedSignatureInvalid)?;
            let endorsements = tx.endorsements.get(i).ok_or(Status::AbortedSignatureInvalid)?;
            let msg = namespace_signing_bytes(id, ns, &tx.metadata);
            let ok = endorsements.iter().any(|e| {
                crypto::verify_namespace_endorsement(
                    key,
                    &msg,
                    &crypto::Signature::from_bytes(e.signature.clone()),
                )
                .is_ok()
            });
            if !ok {
                return Err(Status::AbortedSignatureInvalid);
            }
        }
        Ok(())
    }

    /// Applies the `_meta` writes of a committed tx to the cache (policy updates must
    /// reach the verifier before txs that depend on them are verified).
    pub fn apply_committed_meta(&mut self, tx: &Tx, decode: impl Fn(&[u8]) -> Option<NamespacePolicy>) {
        for ns in tx.namespaces.iter().filter(|n| n.ns_id == META_NAMESPACE) {
            for rw in &ns.read_writes {
                if let (Ok(name), Some(p)) = (std::str::from_utf8(&rw.key), decode(&rw.value)) {
                    // A policy that passed the structural checks parses; ignore otherwise.
                    let _ = self.set(name, &p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use types::{Endorsement, TxNamespace, Write};

    fn policy(scheme: crypto::Scheme, seed: &str) -> (crypto::SigningKey, NamespacePolicy) {
        let sk = crypto::derive_signing_key(scheme, seed);
        let p = policy_of(&sk.public_key());
        (sk, p)
    }

    fn signed_tx(id: &TxId, ns: &str, sk: &crypto::SigningKey) -> Tx {
        let n = TxNamespace {
            ns_id: ns.into(),
            blind_writes: vec![Write {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            }],
            ..Default::default()
        };
        let sig = crypto::sign_namespace_endorsement(sk, &namespace_signing_bytes(id, &n, &[]));
        Tx {
            namespaces: vec![n],
            endorsements: vec![vec![Endorsement {
                signature: sig.into_bytes(),
                ..Default::default()
            }]],
            metadata: vec![],
        }
    }

    #[test]
    fn a_tx_without_namespaces_is_invalid() {
        // Found by the hostile-input review: nothing endorses such a tx, yet it was
        // judged valid.
        let (_, p) = policy(crypto::Scheme::Ed25519, "owner");
        let mut policies = Policies::new();
        policies.set("token", &p).unwrap();
        let id = TxId("t-empty".into());
        let empty = Tx::default();
        assert_eq!(
            policies.verify_tx(&id, &empty),
            Err(Status::AbortedSignatureInvalid)
        );
        let batch = vec![(id, Arc::new(empty))];
        assert_eq!(
            policies.verify_batch(&batch),
            vec![Some(Status::AbortedSignatureInvalid)]
        );
    }

    #[test]
    fn every_scheme_verifies_and_rejects() {
        for scheme in crypto::Scheme::ALL {
            let (sk, p) = policy(scheme, "owner");
            let (other, _) = policy(scheme, "mallory");
            let mut policies = Policies::new();
            policies.set("token", &p).unwrap();
            let id = TxId("t1".into());
            assert_eq!(
                policies.verify_tx(&id, &signed_tx(&id, "token", &sk)),
                Ok(()),
                "{scheme:?}"
            );
            // Wrong signer, wrong tx id, tampered write, unknown namespace.
            let bad = Err(Status::AbortedSignatureInvalid);
            assert_eq!(policies.verify_tx(&id, &signed_tx(&id, "token", &other)), bad);
            assert_eq!(
                policies.verify_tx(&TxId("t2".into()), &signed_tx(&id, "token", &sk)),
                bad
            );
            let mut tampered = signed_tx(&id, "token", &sk);
            tampered.namespaces[0].blind_writes[0].value = b"w".to_vec();
            assert_eq!(policies.verify_tx(&id, &tampered), bad);
            assert_eq!(policies.verify_tx(&id, &signed_tx(&id, "cash", &sk)), bad);
        }
    }

    #[test]
    fn bad_policy_keys_are_refused() {
        let mut p = Policies::new();
        let bad = NamespacePolicy {
            scheme: PolicyScheme::Ed25519,
            public_key: vec![1, 2, 3],
        };
        assert!(p.set("token", &bad).is_err());
        assert!(!p.contains("token"));
        assert!(parse_policy_key(&bad).is_none());
    }
}
