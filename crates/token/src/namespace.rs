//! The `_meta` tx that creates the token namespace with the group key as its policy,
//! endorsed by the network's administrator key.

use prost::Message as _;
use types::{Endorsement, META_NAMESPACE, NamespacePolicy, ReadWrite, Tx, TxId, TxNamespace};
use wire::pb;

/// The (free-form) tx id of the creation of namespace `ns`: one id per namespace, so a
/// second `fabrx up` that submits it again is answered with the first one's status.
pub fn create_tx_id(ns: &str) -> String {
    format!("fabrx-create-namespace-{ns}")
}

/// The envelope of the `_meta` tx that creates `ns` with `policy`, endorsed by `admin`.
pub fn create_envelope(ns: &str, policy: &NamespacePolicy, admin: &crypto::SigningKey) -> (String, Vec<u8>) {
    let id = create_tx_id(ns);
    let meta = TxNamespace {
        ns_id: META_NAMESPACE.into(),
        ns_version: 0,
        reads_only: vec![],
        read_writes: vec![ReadWrite {
            key: ns.as_bytes().to_vec(),
            version: None,
            value: wire::encode_policy(policy),
        }],
        blind_writes: vec![],
    };
    let bytes = types::endorsement::namespace_signing_bytes(&TxId(id.clone()), &meta, &[]);
    let signature = crypto::sign_namespace_endorsement(admin, &bytes).into_bytes();
    let tx = Tx {
        namespaces: vec![meta],
        endorsements: vec![vec![Endorsement {
            signature,
            msp_id: String::new(),
            identity: Vec::new(),
        }]],
        metadata: vec![],
    };
    let envelope = pb::Envelope {
        payload: pb::Tx::from(&tx).encode_to_vec(),
        signature: vec![],
        identity: Some(pb::Identity {
            msp_id: "admin".into(),
            creator: Some(pb::identity::Creator::CertificateId("admin".into())),
        }),
        tx_id: id.clone(),
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
    .encode_to_vec();
    (id, envelope)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_creation_passes_the_structural_checks() {
        let admin = crypto::derive_signing_key(crypto::Scheme::Ed25519, "admin");
        let group = crypto::deal_threshold_keys(2, 3, "ns-test").unwrap();
        let policy = types::NamespacePolicy {
            scheme: types::PolicyScheme::Bls12381,
            public_key: group.public.group_public_key().as_bytes().to_vec(),
        };
        let (id, env) = create_envelope("token", &policy, &admin);
        let (got, outcome) = wire::check_envelope_bytes(&env, &wire::ProstDecoder::default());
        assert_eq!(got, id);
        assert!(outcome.is_ok(), "{outcome:?}");
    }
}
