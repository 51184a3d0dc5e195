//! Envelopes and configs shared by the router's tests.
#![allow(dead_code)]

use crypto::{Scheme, SigningKey, derive_signing_key, sign_client_request};
use prost::Message;
use router::{ClientAuth, ClientKeys, RouterConfig};
use std::num::NonZeroU32;
use wire::pb;

/// A client of the test network.
pub struct Client {
    pub identity: pb::Identity,
    pub key: SigningKey,
}

impl Client {
    pub fn new(name: &str) -> Client {
        Client {
            identity: pb::Identity {
                msp_id: "org1".into(),
                creator: Some(pb::identity::Creator::CertificateId(name.into())),
            },
            key: derive_signing_key(Scheme::Ed25519, &format!("router-test/{name}")),
        }
    }

    pub fn creator(&self) -> Vec<u8> {
        self.identity.encode_to_vec()
    }
}

/// A structurally valid tx payload (one namespace, one blind write, one endorsement).
pub fn payload(n: u64) -> Vec<u8> {
    pb::Tx {
        namespaces: vec![pb::TxNamespace {
            ns_id: "token".into(),
            ns_version: 0,
            reads_only: vec![],
            read_writes: vec![],
            blind_writes: vec![pb::Write {
                key: format!("key-{n}").into_bytes(),
                value: vec![7; 16],
            }],
        }],
        endorsements: vec![pb::Endorsements {
            endorsements_with_identity: vec![pb::EndorsementWithIdentity {
                endorsement: vec![1; 64],
                identity: None,
            }],
        }],
        metadata: vec![],
    }
    .encode_to_vec()
}

/// An envelope of tx `n` by `client`, signed over the payload by `signer`.
pub fn envelope_signed_by(client: &Client, signer: &SigningKey, n: u64) -> pb::Envelope {
    let payload = payload(n);
    pb::Envelope {
        signature: sign_client_request(signer, &payload).as_bytes().to_vec(),
        payload,
        identity: Some(client.identity.clone()),
        tx_id: format!("tx-{n:08}"),
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
}

/// The bytes of a correctly signed envelope of tx `n` by `client`.
pub fn signed(client: &Client, n: u64) -> Vec<u8> {
    envelope_signed_by(client, &client.key, n).encode_to_vec()
}

/// A router config of `shards` shards; signed when `clients` is non-empty.
pub fn config(shards: u32, clients: &[&Client]) -> RouterConfig {
    let mut cfg = RouterConfig::new(1, NonZeroU32::new(shards).unwrap());
    if !clients.is_empty() {
        let mut keys = ClientKeys::new();
        for c in clients {
            keys.insert(c.creator(), c.key.public_key());
        }
        cfg.requests.client_auth = ClientAuth::Signed(keys);
    }
    cfg
}
