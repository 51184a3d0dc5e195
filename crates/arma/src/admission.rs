//! What a client request must be to be ordered, as every Arma role checks it (docs/router.md
//! "Checks", docs/ordering-faults.md): an envelope that decodes and passes the structural
//! checks the committer makes (`types::check`), the signature of a self-certified creator
//! (`wire::SELF_CERTIFIED_MSP`) over the payload, and, when the network requires it, the
//! client's signature over the payload.
//!
//! A router checks it before it forwards a request; a batcher checks every request of a
//! batch it pulls and of a forward it receives, since a Byzantine primary or peer may send
//! anything. Sizes and shards are each role's own checks (they depend on its config).

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
}

/// Checks the content of one request (see the module doc).
pub fn check_envelope(bytes: &[u8], auth: &ClientAuth) -> Result<(), ContentError> {
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
