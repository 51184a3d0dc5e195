//! The consenter set as its clients see it: the public keys by replica id, the
//! chain id derived from them and the chain name, and a verifier of commit votes, the
//! signatures of a decision certificate (docs/consenter.md "Header signatures").

use std::collections::BTreeMap;
use std::sync::Arc;

use crypto::PublicKey;
use sha2::{Digest as _, Sha256};

/// Domain tag of the cluster id hash.
const CLUSTER_TAG: &[u8] = types::tags::consenter::CLUSTER;

/// The chain name used when none is configured (`fabrx node bft --chain-id`). Two
/// clusters that share keys must use different names.
pub const DEFAULT_CHAIN: &str = "fabrx";

/// Public keys of the consenter set by replica id (party `p` runs replica `p − 1`) and
/// the chain id derived from the genesis set's keys and the chain name.
#[derive(Clone)]
pub struct ClusterKeys {
    keys: Arc<BTreeMap<bft::ReplicaId, PublicKey>>,
    /// The ids the cluster id covers: the genesis set's. Replicas that joined later
    /// ([`ClusterKeys::joined`]) have higher ids and change no id.
    genesis: Vec<bft::ReplicaId>,
    cluster: [u8; 32],
}

impl ClusterKeys {
    /// The set of `keys` (replica `i` holds `keys[i]`) on chain [`DEFAULT_CHAIN`].
    pub fn new(keys: Vec<PublicKey>) -> ClusterKeys {
        ClusterKeys::for_chain(DEFAULT_CHAIN, keys)
    }

    /// The set of `keys` (replica `i` holds `keys[i]`) on chain `chain`: the id is
    /// `SHA-256(CLUSTER_TAG ‖ n ‖ (len ‖ key)* ‖ len ‖ chain)`.
    pub fn for_chain(chain: &str, keys: Vec<PublicKey>) -> ClusterKeys {
        let by_id = (0u32..).zip(keys).collect();
        ClusterKeys::by_id(chain, by_id)
    }

    /// The set of `keys` by replica id on chain `chain`. Ids `0..n` give the id of
    /// [`ClusterKeys::for_chain`]; a set with gaps also binds each id
    /// (`SHA-256(CLUSTER_TAG ‖ n ‖ (id ‖ len ‖ key)* ‖ len ‖ chain)`), so two sets that
    /// give one key to different replicas never share an id.
    pub fn by_id(chain: &str, keys: BTreeMap<bft::ReplicaId, PublicKey>) -> ClusterKeys {
        let contiguous = keys.keys().zip(0u32..).all(|(id, i)| *id == i);
        let mut h = Sha256::new();
        h.update(CLUSTER_TAG);
        h.update((keys.len() as u64).to_le_bytes());
        for (id, k) in &keys {
            if !contiguous {
                h.update(id.to_le_bytes());
            }
            let b = k.to_bytes();
            h.update((b.len() as u64).to_le_bytes());
            h.update(&b);
        }
        h.update((chain.len() as u64).to_le_bytes());
        h.update(chain.as_bytes());
        ClusterKeys {
            genesis: keys.keys().copied().collect(),
            keys: Arc::new(keys),
            cluster: h.finalize().into(),
        }
    }

    /// The same keys on chain `chain` (the id covers the genesis keys only).
    pub fn with_chain(&self, chain: &str) -> ClusterKeys {
        let genesis = self
            .genesis
            .iter()
            .filter_map(|id| Some((*id, self.keys.get(id)?.clone())))
            .collect();
        let mut next = ClusterKeys::by_id(chain, genesis);
        next.add(self.joined_pairs());
        next
    }

    /// These keys and `more`, the keys of replicas that joined after the genesis set
    /// (replica ids above every id held, in order), under the same cluster and chain id:
    /// the envelopes of a network keep the id of its genesis set across every config
    /// update.
    pub fn joined(&self, more: &[PublicKey]) -> ClusterKeys {
        let first = self.keys.keys().next_back().map_or(0, |id| id.saturating_add(1));
        let mut next = self.clone();
        next.add((first..).zip(more.iter().cloned()).collect());
        next
    }

    fn add(&mut self, more: Vec<(bft::ReplicaId, PublicKey)>) {
        if more.is_empty() {
            return;
        }
        let mut keys = self.keys.as_ref().clone();
        keys.extend(more);
        self.keys = Arc::new(keys);
    }

    fn joined_pairs(&self) -> Vec<(bft::ReplicaId, PublicKey)> {
        self.keys
            .iter()
            .filter(|(id, _)| !self.genesis.contains(id))
            .map(|(id, k)| (*id, k.clone()))
            .collect()
    }

    /// Every replica's key, in replica id order.
    pub fn keys_list(&self) -> Vec<PublicKey> {
        self.keys.values().cloned().collect()
    }

    /// The keys by replica id.
    pub fn keys_by_id(&self) -> &BTreeMap<bft::ReplicaId, PublicKey> {
        &self.keys
    }

    /// The keys of the replicas that joined after the genesis set, in id order.
    pub fn joined_keys(&self) -> Vec<PublicKey> {
        self.joined_pairs().into_iter().map(|(_, k)| k).collect()
    }

    /// The replica ids that hold a key here: the set's members.
    pub fn members(&self) -> bft::Members {
        bft::Members::new(self.keys.keys().copied().collect()).unwrap_or_else(|_| bft::Members::contiguous(1))
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
        self.keys.get(&id)
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
