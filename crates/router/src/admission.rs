//! The router's checks of one request (Arma §4.2; `docs/router.md` "Checks"): not empty,
//! not over the configured size, an envelope that decodes and passes the structural
//! checks of `types::check`, the signature of a self-certified creator
//! (`wire::SELF_CERTIFIED_MSP`) over the payload, and, when the network requires it, the
//! client's signature over the payload. An admitted request gets its shard (`types::digest::shard_of` of the
//! request bytes, what the batcher checks) and its digest (the batcher's dedup key).

use crate::config::{ClientAuth, RouterConfig};
pub use crate::refusal::Refusal;
use prost::Message;
use sha2::{Digest as _, Sha256};
use types::ShardId;
use types::digest::Digest32;
use wire::pb;

/// The digest a batcher dedups a request by: `SHA-256("fabrx/batcher/v1/request" ‖ bytes)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestDigest(pub Digest32);

impl RequestDigest {
    /// The digest of `request`.
    pub fn of(request: &[u8]) -> RequestDigest {
        let mut h = Sha256::new();
        h.update(types::tags::batcher::REQUEST);
        h.update(request);
        RequestDigest(h.finalize().into())
    }
}

/// A request that passed the router's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Its shard.
    pub shard: ShardId,
    /// Its digest.
    pub digest: RequestDigest,
}

/// Checks one request against `cfg` (see the module doc); the cheap checks come first.
pub fn check_request(bytes: &[u8], cfg: &RouterConfig) -> Result<Admitted, Refusal> {
    if bytes.is_empty() {
        return Err(Refusal::Empty);
    }
    let max = cfg.max_request_bytes.get();
    if bytes.len() > max {
        return Err(Refusal::TooLarge {
            size: bytes.len(),
            max,
        });
    }
    let env = pb::Envelope::decode(bytes).map_err(|_| Refusal::Malformed {
        status: types::Status::MalformedBadEnvelope,
    })?;
    check_structure(&env)?;
    // A self-certified creator (its identity is its key) signs every envelope, whatever
    // the network's client policy: the committer refuses an unsigned one anyway, so it is
    // refused here before it costs ordering.
    if let Some(key) = wire::self_certified_key(&env) {
        let claim = [(key, env.payload.as_slice(), env.signature.as_slice())];
        if crypto::verify_client_requests_by_ed25519_key(&claim) != [true] {
            return Err(Refusal::BadSignature);
        }
    }
    if let ClientAuth::Signed(keys) = &cfg.client_auth {
        let creator = env
            .identity
            .as_ref()
            .map(Message::encode_to_vec)
            .ok_or(Refusal::UnknownClient)?;
        let key = keys.get(&creator).ok_or(Refusal::UnknownClient)?;
        let sig = crypto::Signature::from_bytes(env.signature.as_slice());
        crypto::verify_client_request(key, &env.payload, &sig).map_err(|_| Refusal::BadSignature)?;
    }
    // `shards` is non-zero, so `shard_of` cannot fail; fall back to shard 0 regardless.
    let shard = types::digest::shard_of(bytes, cfg.shards.get()).unwrap_or(0);
    Ok(Admitted {
        shard,
        digest: RequestDigest::of(bytes),
    })
}

/// The structural checks of `types::check` (those the committer's sidecar makes).
fn check_structure(env: &pb::Envelope) -> Result<(), Refusal> {
    wire::check_decoded_envelope(env, &wire::ProstDecoder::default())
        .map(|_| ())
        .map_err(|status| Refusal::Malformed { status })
}
