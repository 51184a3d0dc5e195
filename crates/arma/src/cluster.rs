//! The consenter set as its clients see it: the public keys (index = replica id), the
//! chain id derived from them and the chain name, and a verifier of commit votes, the
//! signatures of a decision certificate (docs/consenter.md "Header signatures").

use std::sync::Arc;

use crypto::PublicKey;
use sha2::{Digest as _, Sha256};

/// Domain tag of the cluster id hash.
const CLUSTER_TAG: &[u8] = types::tags::consenter::CLUSTER;

/// The chain name used when none is configured (`fabrx node bft --chain-id`). Two
/// clusters that share keys must use different names.
pub const DEFAULT_CHAIN: &str = "fabrx";

/// Public keys of the consenter set (index = replica id) and the chain id derived
/// from them and the chain name.
#[derive(Clone)]
pub struct ClusterKeys {
    keys: Arc<Vec<PublicKey>>,
    /// How many of `keys` the cluster id covers: the genesis set's. Replicas that joined
    /// later ([`ClusterKeys::joined`]) are listed after them and change no id.
    genesis: usize,
    cluster: [u8; 32],
}

impl ClusterKeys {
    /// The set of `keys` (index = replica id) on chain [`DEFAULT_CHAIN`].
    pub fn new(keys: Vec<PublicKey>) -> ClusterKeys {
        ClusterKeys::for_chain(DEFAULT_CHAIN, keys)
    }

    /// The set of `keys` on chain `chain`: the id is
    /// `SHA-256(CLUSTER_TAG ‖ n ‖ (len ‖ key)* ‖ len ‖ chain)`.
    pub fn for_chain(chain: &str, keys: Vec<PublicKey>) -> ClusterKeys {
        let mut h = Sha256::new();
        h.update(CLUSTER_TAG);
        h.update((keys.len() as u64).to_le_bytes());
        for k in &keys {
            let b = k.to_bytes();
            h.update((b.len() as u64).to_le_bytes());
            h.update(&b);
        }
        h.update((chain.len() as u64).to_le_bytes());
        h.update(chain.as_bytes());
        ClusterKeys {
            genesis: keys.len(),
            keys: Arc::new(keys),
            cluster: h.finalize().into(),
        }
    }

    /// The same keys on chain `chain` (the id covers the genesis keys only).
    pub fn with_chain(&self, chain: &str) -> ClusterKeys {
        let genesis = self.keys.get(..self.genesis).unwrap_or_default().to_vec();
        ClusterKeys::for_chain(chain, genesis).joined(self.joined_keys())
    }

    /// These keys and `more`, the keys of replicas that joined after the genesis set
    /// (replica ids `n()..`), under the same cluster and chain id: the envelopes of a
    /// network keep the id of its genesis set across every config update.
    pub fn joined(&self, more: &[PublicKey]) -> ClusterKeys {
        let mut keys = self.keys.as_ref().clone();
        keys.extend_from_slice(more);
        ClusterKeys {
            keys: Arc::new(keys),
            genesis: self.genesis,
            cluster: self.cluster,
        }
    }

    /// Every replica's key, in replica order.
    pub fn keys_list(&self) -> Vec<PublicKey> {
        self.keys.as_ref().clone()
    }

    /// The keys of the replicas that joined after the genesis set.
    pub fn joined_keys(&self) -> &[PublicKey] {
        self.keys.get(self.genesis..).unwrap_or_default()
    }

    /// The chain id the engine binds into its signed bytes (`bft::Config::chain`).
    pub fn chain_id(&self) -> bft::ChainId {
        bft::ChainId(self.cluster)
    }

    /// Number of replicas.
    pub fn n(&self) -> u32 {
        self.keys.len() as u32
    }

    /// Hash of the key set; envelopes carry it so two clusters never mix.
    pub fn cluster_id(&self) -> [u8; 32] {
        self.cluster
    }

    /// Replica `id`'s public key.
    pub fn key(&self, id: bft::ReplicaId) -> Option<&PublicKey> {
        self.keys.get(id as usize)
    }
}

/// Verifies commit votes (the signatures of a decision certificate, crypto purpose
/// `DecisionCertificate`) of the consenters in `keys`; every other engine message is
/// refused. What a batcher or an assembler needs to check a served decision.
pub struct CertificateVerifier {
    keys: ClusterKeys,
}

impl CertificateVerifier {
    /// Verifies against `keys`.
    pub fn new(keys: ClusterKeys) -> CertificateVerifier {
        CertificateVerifier { keys }
    }
}

impl bft::Verifier for CertificateVerifier {
    fn verify(&self, replica: bft::ReplicaId, msg: &[u8], sig: &bft::Signature) -> bool {
        let Some(key) = self.keys.key(replica) else {
            return false;
        };
        msg.starts_with(bft::tags::COMMIT)
            && crypto::verify_decision_certificate(key, msg, &crypto::Signature::from_bytes(sig.0.clone()))
                .is_ok()
    }
}
