//! What a client request must be to be ordered, as every Arma role checks it (docs/router.md
//! "Checks", docs/ordering-faults.md): an envelope that decodes and passes the structural
//! checks the committer makes (`types::check`), the signature of a self-certified creator
//! (`wire::SELF_CERTIFIED_MSP`) over the payload, and, when the network requires it, the
//! client's signature over the payload.
//!
//! A router checks it before it forwards a request; a batcher checks every request of a
//! batch it pulls and of a forward it receives, since a Byzantine primary or peer may send
//! anything. Sizes and shards are each role's own checks (they depend on its config).

mod plain;

use prost::Message;
use std::collections::HashMap;
use wire::pb;

/// The public keys of the network's clients, by serialized `Identity` (the protobuf
/// encoding of the envelope's `identity` field, the "creator" of the tx id rule).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientKeys {
    keys: HashMap<Vec<u8>, crypto::PublicKey>,
}

impl ClientKeys {
    /// No clients.
    pub fn new() -> ClientKeys {
        ClientKeys::default()
    }

    /// Adds (or replaces) the key of the client whose serialized identity is `creator`.
    pub fn insert(&mut self, creator: Vec<u8>, key: crypto::PublicKey) {
        self.keys.insert(creator, key);
    }

    /// The key of `creator`.
    pub fn get(&self, creator: &[u8]) -> Option<&crypto::PublicKey> {
        self.keys.get(creator)
    }

    /// Number of clients.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// Whether the network requires client signatures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// Any client may submit; `Envelope.signature` is not checked (a self-certified
    /// creator's still is).
    #[default]
    Open,
    /// `Envelope.signature` must be the client-request signature
    /// (`crypto::verify_client_request`) over `Envelope.payload` by the key of the
    /// envelope's identity, which must be one of these.
    Signed(ClientKeys),
}

/// Why a request's content is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    /// The envelope does not decode or fails a structural check.
    #[error("malformed envelope: {status}")]
    Malformed {
        /// The status the committer would give it (`MALFORMED_*`).
        status: types::Status,
    },
    /// Signatures are required and the envelope names no identity of the network.
    #[error("the envelope's identity is not a client of the network")]
    UnknownClient,
    /// The signature over the payload does not verify with the client's key.
    #[error("the client signature over the payload does not verify")]
    BadSignature,
    /// A Fabric envelope is refused (docs/fabric.md).
    #[error(transparent)]
    Fabric(#[from] crate::fabric::FabricError),
    /// The request is in a format the network does not order.
    #[error("the network orders {takes} envelopes only; this request is a {got} envelope")]
    WrongFormat {
        /// The format the network orders.
        takes: &'static str,
        /// The format of the request.
        got: &'static str,
    },
}

/// How every role checks a request's content: the network's format and its client
/// policies (docs/router.md "Checks", docs/fabric.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestPolicy {
    /// The envelopes the network orders.
    pub format: crate::fabric::RequestFormat,
    /// The signatures fabrx envelopes need.
    pub client_auth: ClientAuth,
    /// The signatures Fabric envelopes need.
    pub fabric_auth: crate::fabric::FabricAuth,
}

impl From<ClientAuth> for RequestPolicy {
    fn from(client_auth: ClientAuth) -> RequestPolicy {
        RequestPolicy {
            client_auth,
            ..RequestPolicy::default()
        }
    }
}

impl RequestPolicy {
    /// Checks one request: a fabrx envelope by [`check_envelope`], a Fabric envelope by
    /// `fabric::check_envelope`. With both formats, a request whose top-level field 4 (a
    /// fabrx tx id) is present is a fabrx envelope and any other a Fabric one.
    pub fn check(&self, bytes: &[u8]) -> Result<(), ContentError> {
        use crate::fabric::RequestFormat;
        match self.format {
            RequestFormat::Fabrx => check_envelope(bytes, &self.client_auth),
            RequestFormat::Fabric => Ok(crate::fabric::check_envelope(bytes, &self.fabric_auth)?),
            RequestFormat::Both => {
                if has_fabrx_tx_id(bytes) {
                    check_envelope(bytes, &self.client_auth)
                } else {
                    Ok(crate::fabric::check_envelope(bytes, &self.fabric_auth)?)
                }
            }
        }
    }

    /// The first request of `requests` whose content is refused, with its index.
    pub fn first_refused<'a>(
        &self,
        requests: impl IntoIterator<Item = &'a [u8]>,
    ) -> Option<(usize, ContentError)> {
        requests
            .into_iter()
            .enumerate()
            .find_map(|(i, r)| self.check(r).err().map(|e| (i, e)))
    }
}

/// Whether a top-level length-delimited field 4 (`Envelope.tx_id`) is present, walking
/// the fields without decoding them as the content rule does (false for bytes that are
/// not protobuf).
fn has_fabrx_tx_id(bytes: &[u8]) -> bool {
    crate::content::has_field(bytes, 4, 2)
}

/// Checks the content of one request (see the module doc). On an open network the
/// common request is accepted by an in-place walk of its bytes (`plain`, which accepts
/// only what the full check accepts); anything else takes the full check.
pub fn check_envelope(bytes: &[u8], auth: &ClientAuth) -> Result<(), ContentError> {
    if matches!(auth, ClientAuth::Open) && plain::plainly_valid(bytes) {
        return Ok(());
    }
    check_envelope_fully(bytes, auth)
}

/// [`check_envelope`] without its fast path: decodes the envelope and its tx and checks
/// them (`wire::check_decoded_envelope`), then the signatures the network requires.
pub fn check_envelope_fully(bytes: &[u8], auth: &ClientAuth) -> Result<(), ContentError> {
    let env = pb::Envelope::decode(bytes).map_err(|_| ContentError::Malformed {
        status: types::Status::MalformedBadEnvelope,
    })?;
    wire::check_decoded_envelope(&env, &wire::ProstDecoder::default())
        .map_err(|status| ContentError::Malformed { status })?;
    // A self-certified creator (its identity is its key) signs every envelope, whatever
    // the network's client policy: the committer refuses an unsigned one anyway.
    if let Some(key) = wire::self_certified_key(&env) {
        let claim = [(key, env.payload.as_slice(), env.signature.as_slice())];
        if crypto::verify_client_requests_by_ed25519_key(&claim) != [true] {
            return Err(ContentError::BadSignature);
        }
    }
    if let ClientAuth::Signed(keys) = auth {
        let creator = env
            .identity
            .as_ref()
            .map(Message::encode_to_vec)
            .ok_or(ContentError::UnknownClient)?;
        let key = keys.get(&creator).ok_or(ContentError::UnknownClient)?;
        let sig = crypto::Signature::from_bytes(env.signature.as_slice());
        crypto::verify_client_request(key, &env.payload, &sig).map_err(|_| ContentError::BadSignature)?;
    }
    Ok(())
}

/// The first request of `requests` whose content is refused, with its index.
pub fn first_refused<'a>(
    requests: impl IntoIterator<Item = &'a [u8]>,
    auth: &ClientAuth,
) -> Option<(usize, ContentError)> {
    requests
        .into_iter()
        .enumerate()
        .find_map(|(i, r)| check_envelope(r, auth).err().map(|e| (i, e)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn payload(n: u64) -> Vec<u8> {
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

    fn envelope(name: &str, signer: &crypto::SigningKey, n: u64) -> Vec<u8> {
        let payload = payload(n);
        pb::Envelope {
            signature: crypto::sign_client_request(signer, &payload).as_bytes().to_vec(),
            payload,
            identity: Some(identity(name)),
            tx_id: format!("tx-{n:08}"),
            nonce: vec![],
            payload_type: pb::PayloadType::Tx as i32,
        }
        .encode_to_vec()
    }

    fn identity(name: &str) -> pb::Identity {
        pb::Identity {
            msp_id: "org1".into(),
            creator: Some(pb::identity::Creator::CertificateId(name.into())),
        }
    }

    fn key(name: &str) -> crypto::SigningKey {
        crypto::derive_signing_key(crypto::Scheme::Ed25519, &format!("admission-test/{name}"))
    }

    #[test]
    fn content_is_checked_as_a_router_checks_it() {
        let alice = key("alice");
        let good = envelope("alice", &alice, 1);
        let mut keys = ClientKeys::new();
        keys.insert(identity("alice").encode_to_vec(), alice.public_key());
        let signed = ClientAuth::Signed(keys);
        // Well formed and signed: fine under either policy.
        assert_eq!(check_envelope(&good, &ClientAuth::Open), Ok(()));
        assert_eq!(check_envelope(&good, &signed), Ok(()));
        // Bytes that are not an envelope.
        assert!(matches!(
            check_envelope(b"\xff\xffnot an envelope", &ClientAuth::Open),
            Err(ContentError::Malformed { .. })
        ));
        // Signed by another key, or by a client the network does not know.
        let forged = envelope("alice", &key("mallory"), 2);
        assert_eq!(check_envelope(&forged, &ClientAuth::Open), Ok(()));
        assert_eq!(check_envelope(&forged, &signed), Err(ContentError::BadSignature));
        let stranger = envelope("mallory", &key("mallory"), 3);
        assert_eq!(
            check_envelope(&stranger, &signed),
            Err(ContentError::UnknownClient)
        );
        // The first refused request of a batch, with its index.
        let batch = [good.as_slice(), forged.as_slice(), stranger.as_slice()];
        assert_eq!(
            first_refused(batch, &signed),
            Some((1, ContentError::BadSignature))
        );
        assert_eq!(first_refused([good.as_slice()], &signed), None);
    }
}
