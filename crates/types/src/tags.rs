//! Every domain-separation tag of fabrx, in one place. Every hashed or signed byte string
//! starts with one of these (or, for BLS, is hashed to the curve under one), so a hash or
//! signature made for one purpose can never be taken for another. A new tag goes here, and
//! the test below checks that no two are equal and none is a prefix of another within a
//! family. Changing a value changes the protocol: ids, keys and signatures stop matching.

/// Transaction ids: `hex(SHA-256(TX_ID ‖ u32be(|nonce|) ‖ nonce ‖ u32be(|creator|) ‖ creator))`.
pub const TX_ID: &[u8] = b"fabrx/txid/v1";

/// The token application: the key of a token is `hex SHA-256(TOKEN_KEY ‖ value)`, a hash
/// of the whole stored token (ADR 0013), so a row cannot claim another owner or quantity
/// under a token's key.
pub const TOKEN_KEY: &[u8] = b"fabrx/token/v2";

/// The token application: the bytes a wallet signs for a token request start with this
/// tag (signed under the crypto purpose `ClientRequest`; docs/token.md).
pub const TOKEN_REQUEST: &[u8] = b"fabrx/token-request/v2";

/// The token application: the checksum of an address as people write it is the first 4
/// bytes of `SHA-256(ADDRESS ‖ key)` (docs/token.md "Addresses").
pub const ADDRESS: &[u8] = b"fabrx/address/v1";

/// The token application: the bytes an owner signs to read its own tokens from a query
/// service (docs/token.md "Who may read what").
pub const TOKEN_READ: &[u8] = b"fabrx/token-read/v1";

/// Tags of the BFT engine's hashes and signatures.
pub mod bft {
    /// Prefix shared by all tags of the engine.
    pub const PREFIX: &[u8] = b"fabrx/bft/v1/";
    /// Digest of one client request.
    pub const REQUEST: &[u8] = b"fabrx/bft/v1/request";
    /// Digest of a proposal.
    pub const PROPOSAL: &[u8] = b"fabrx/bft/v1/proposal";
    /// Signed prepare vote.
    pub const PREPARE: &[u8] = b"fabrx/bft/v1/prepare";
    /// Signed commit vote (the votes a decision certificate is made of).
    pub const COMMIT: &[u8] = b"fabrx/bft/v1/commit";
    /// Signed view-change message.
    pub const VIEW_CHANGE: &[u8] = b"fabrx/bft/v1/view-change";
    /// Signed checkpoint vote: "after decision s my application state has this digest".
    pub const CHECKPOINT: &[u8] = b"fabrx/bft/v1/checkpoint";
    /// Digest of an application snapshot.
    pub const SNAPSHOT: &[u8] = b"fabrx/bft/v1/snapshot";
    /// The cluster id a replica set signs under: its application's id bound to its epoch.
    pub const SET_CHAIN: &[u8] = b"fabrx/bft/v1/set-chain";
    /// Seed hash of the engine's deterministic test keys (feature `testing` only).
    pub const TEST_KEY: &[u8] = b"fabrx/bft/v1/test-key";
}

/// Tags of the consenters' transport.
pub mod consenter {
    /// Start of an envelope's signed bytes.
    pub const ENVELOPE: &[u8] = b"fabrx/consenter/v1/envelope";
    /// The cluster id: a hash of the consenter set's keys.
    pub const CLUSTER: &[u8] = b"fabrx/consenter/v1/cluster";
    /// An ordered block header; its hash is the block hash (docs/consenter.md).
    pub const HEADER: &[u8] = b"fabrx/consenter/v1/header";
    /// A decision's metadata: its header hashes and term changes.
    pub const METADATA: &[u8] = b"fabrx/consenter/v1/metadata";
}

/// Tags of the Arma batcher (crates/batcher, docs/batcher.md). The signed ones are signed
/// under the crypto purpose `BatchAttestation`, so these tags separate the three statements
/// a batcher signs from one another.
pub mod batcher {
    /// Digest of one client request (mempool dedup): `SHA-256(REQUEST ‖ request bytes)`.
    pub const REQUEST: &[u8] = b"fabrx/batcher/v1/request";
    /// A primary's signed batch header: "I cut this batch".
    pub const BATCH_HEADER: &[u8] = b"fabrx/batcher/v1/batch-header";
    /// A batch attestation fragment: "I persisted and checked this batch".
    pub const BAF: &[u8] = b"fabrx/batcher/v1/baf";
    /// A complaint against a shard's primary for one term.
    pub const COMPLAINT: &[u8] = b"fabrx/batcher/v1/complaint";
}

/// Tags of network configuration updates (crates/netconfig `update`, docs/reconfiguration.md).
pub mod config {
    /// Start of the bytes a party's admin signs for a config update (under the crypto
    /// purpose `ConfigUpdate`): `UPDATE ‖ chain ‖ u64le(sequence) ‖ SHA-256(config)`.
    pub const UPDATE: &[u8] = b"fabrx/config/v1/update";
    /// Start of the bytes a node key signs to prove it is held, before an update names it
    /// (under the crypto purpose `ConfigUpdate`; no prefix of [`UPDATE`] or the other way
    /// round): `KEY_PROOF ‖ chain ‖ the public key's text`.
    pub const KEY_PROOF: &[u8] = b"fabrx/config/v1/key-proof";
}

/// Tags of crates/crypto: signature purposes and key derivation.
pub mod crypto {
    /// Prefix of the hash input of deterministic key derivation (tests and demos).
    pub const KEYGEN_PREFIX: &[u8] = b"fabrx/keygen/v1/";
    /// Prefix of the seed hash of deterministic threshold dealing (tests and demos).
    pub const THRESHOLD_DEAL_PREFIX: &[u8] = b"fabrx/threshold-deal/v1/";

    /// Message-prefix tag of namespace endorsements (Ed25519, ECDSA P-256).
    pub const NAMESPACE_ENDORSEMENT: &str = "fabrx/v1/namespace-endorsement";
    /// Message-prefix tag of client requests.
    pub const CLIENT_REQUEST: &str = "fabrx/v1/client-request";
    /// Message-prefix tag of batch attestation fragments.
    pub const BATCH_ATTESTATION: &str = "fabrx/v1/batch-attestation";
    /// Message-prefix tag of consensus messages.
    pub const CONSENSUS_MESSAGE: &str = "fabrx/v1/consensus-message";
    /// Message-prefix tag of decision certificates (commit votes).
    pub const DECISION_CERTIFICATE: &str = "fabrx/v1/decision-certificate";
    /// Message-prefix tag of block headers signed by consenters.
    pub const BLOCK_HEADER: &str = "fabrx/v1/block-header";
    /// Message-prefix tag of parties' admin signatures on network config updates.
    pub const CONFIG_UPDATE: &str = "fabrx/v1/config-update";

    /// BLS hash-to-curve DST of namespace endorsements (RFC 9380).
    pub const BLS_NAMESPACE_ENDORSEMENT: &[u8] =
        b"FABRX-V1-NAMESPACE-ENDORSEMENT-with-BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";
    /// BLS DST of client requests.
    pub const BLS_CLIENT_REQUEST: &[u8] = b"FABRX-V1-CLIENT-REQUEST-with-BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";
    /// BLS DST of batch attestation fragments.
    pub const BLS_BATCH_ATTESTATION: &[u8] =
        b"FABRX-V1-BATCH-ATTESTATION-with-BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";
    /// BLS DST of consensus messages.
    pub const BLS_CONSENSUS_MESSAGE: &[u8] =
        b"FABRX-V1-CONSENSUS-MESSAGE-with-BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";
    /// BLS DST of decision certificates.
    pub const BLS_DECISION_CERTIFICATE: &[u8] =
        b"FABRX-V1-DECISION-CERTIFICATE-with-BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";
    /// BLS DST of block headers.
    pub const BLS_BLOCK_HEADER: &[u8] = b"FABRX-V1-BLOCK-HEADER-with-BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";
    /// BLS DST of config updates.
    pub const BLS_CONFIG_UPDATE: &[u8] = b"FABRX-V1-CONFIG-UPDATE-with-BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";
    /// BLS DST of proofs of possession (the message is the 48-byte compressed public key).
    pub const BLS_POP: &[u8] = b"FABRX-V1-PROOF-OF-POSSESSION-with-BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";
}

/// Every byte-string tag above (for the uniqueness check).
pub fn all() -> Vec<&'static [u8]> {
    vec![
        TX_ID,
        TOKEN_KEY,
        TOKEN_REQUEST,
        TOKEN_READ,
        ADDRESS,
        bft::REQUEST,
        bft::PROPOSAL,
        bft::PREPARE,
        bft::COMMIT,
        bft::VIEW_CHANGE,
        bft::SET_CHAIN,
        bft::TEST_KEY,
        consenter::ENVELOPE,
        consenter::CLUSTER,
        consenter::HEADER,
        consenter::METADATA,
        batcher::REQUEST,
        batcher::BATCH_HEADER,
        batcher::BAF,
        batcher::COMPLAINT,
        config::UPDATE,
        crypto::KEYGEN_PREFIX,
        crypto::THRESHOLD_DEAL_PREFIX,
        crypto::NAMESPACE_ENDORSEMENT.as_bytes(),
        crypto::CLIENT_REQUEST.as_bytes(),
        crypto::BATCH_ATTESTATION.as_bytes(),
        crypto::CONSENSUS_MESSAGE.as_bytes(),
        crypto::DECISION_CERTIFICATE.as_bytes(),
        crypto::BLOCK_HEADER.as_bytes(),
        crypto::CONFIG_UPDATE.as_bytes(),
        crypto::BLS_NAMESPACE_ENDORSEMENT,
        crypto::BLS_CLIENT_REQUEST,
        crypto::BLS_BATCH_ATTESTATION,
        crypto::BLS_CONSENSUS_MESSAGE,
        crypto::BLS_DECISION_CERTIFICATE,
        crypto::BLS_BLOCK_HEADER,
        crypto::BLS_CONFIG_UPDATE,
        crypto::BLS_POP,
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn tags_are_distinct_and_none_is_a_prefix_of_another() {
        let all = super::all();
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                if i != j {
                    assert!(
                        !b.starts_with(a),
                        "{:?} is a prefix of {:?}",
                        String::from_utf8_lossy(a),
                        String::from_utf8_lossy(b)
                    );
                }
            }
        }
        for t in super::all() {
            assert!(t.starts_with(b"fabrx/") || t.starts_with(b"FABRX-V1-"), "{t:?}");
        }
    }
}
