//! The router's checks of one request (Arma §4.2; `docs/router.md` "Checks"): not empty,
//! not over the configured size, an envelope that decodes and passes the structural
//! checks of `types::check`, the signature of a self-certified creator
//! (`wire::SELF_CERTIFIED_MSP`) over the payload, and, when the network requires it, the
//! client's signature over the payload. An admitted request gets its shard
//! (`arma::content::shard_of`: over its content, the bytes without the client signature;
//! what the batcher checks). The router does not hash a request: its batcher does, for
//! its dedup key.

use crate::config::RouterConfig;
pub use crate::refusal::Refusal;
use types::ShardId;

/// The digest a batcher dedups a request by (the batchers' own type).
pub use arma::RequestDigest;

/// A request that passed the router's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Its shard.
    pub shard: ShardId,
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
    cfg.requests.check(bytes)?;
    // `shards` is non-zero, so `shard_of` cannot fail; fall back to shard 0 regardless.
    let shard = arma::content::shard_of(bytes, cfg.shards.get()).unwrap_or(0);
    Ok(Admitted { shard })
}
