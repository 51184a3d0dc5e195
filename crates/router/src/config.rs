//! The router's configuration, validated once ([`RouterConfig::validate`]). The network
//! config file that will fill it is not written yet (`docs/router.md` "Not done").

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::time::Duration;
use types::PartyId;

/// One MiB: the default largest envelope.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1 << 20;

pub use arma::admission::{ClientAuth, ClientKeys, RequestPolicy};
pub use arma::fabric::{FabricAuth, FabricClients, RequestFormat};

/// What a router needs to know.
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// This router's party (for logs).
    pub party: PartyId,
    /// Number of shards of the network: the number of batcher links.
    pub shards: NonZeroU32,
    /// Largest envelope accepted (default 1 MiB, at most
    /// `wire::limits::ROUTER_MAX_ENVELOPE_BYTES`).
    pub max_request_bytes: NonZeroUsize,
    /// The envelopes the network orders and the client signatures they need
    /// (`requests.client_auth` for fabrx envelopes, `requests.fabric_auth` for Fabric
    /// ones; docs/fabric.md).
    pub requests: RequestPolicy,
    /// Most requests forwarded to one shard's batcher and not yet answered (default 1,024).
    pub shard_max_in_flight: NonZeroUsize,
    /// Most bytes of such requests per shard (default 64 MiB, at least `max_request_bytes`).
    pub shard_max_in_flight_bytes: NonZeroU64,
    /// Most requests of one client stream awaiting their answer; the stream is not read
    /// beyond it (default 256).
    pub stream_max_in_flight: NonZeroUsize,
    /// How long a forwarded request may wait for the batcher's answer before the client is
    /// answered `DEADLINE_EXCEEDED` (default 10 s; positive).
    pub answer_timeout: Duration,
    /// Reconnect schedule of the batcher links.
    pub backoff: Backoff,
}

impl RouterConfig {
    /// A config with the defaults above for a network of `shards` shards.
    pub fn new(party: PartyId, shards: NonZeroU32) -> RouterConfig {
        RouterConfig {
            party,
            shards,
            max_request_bytes: NonZeroUsize::MIN.saturating_add(DEFAULT_MAX_REQUEST_BYTES - 1),
            requests: RequestPolicy::default(),
            shard_max_in_flight: NonZeroUsize::MIN.saturating_add(1023),
            shard_max_in_flight_bytes: NonZeroU64::MIN.saturating_add((64 << 20) - 1),
            stream_max_in_flight: NonZeroUsize::MIN.saturating_add(255),
            answer_timeout: Duration::from_secs(10),
            backoff: Backoff::default(),
        }
    }

    /// Checks the ranges and the relations between fields.
    pub fn validate(&self) -> Result<()> {
        let invalid = |field, problem: String| Err(Error::InvalidConfig { field, problem });
        let max = wire::limits::ROUTER_MAX_ENVELOPE_BYTES;
        if self.max_request_bytes.get() > max {
            return invalid(
                "max_request_bytes",
                format!("= {} is over the wire limit {max}", self.max_request_bytes),
            );
        }
        let request = u64::try_from(self.max_request_bytes.get()).unwrap_or(u64::MAX);
        if self.shard_max_in_flight_bytes.get() < request {
            return invalid(
                "shard_max_in_flight_bytes",
                format!(
                    "= {} is below max_request_bytes = {request}",
                    self.shard_max_in_flight_bytes
                ),
            );
        }
        if self.answer_timeout.is_zero() {
            return invalid("answer_timeout", "must be positive".into());
        }
        if self.backoff.initial.is_zero() {
            return invalid("backoff.initial", "must be positive".into());
        }
        if self.backoff.max < self.backoff.initial {
            return invalid("backoff.max", "must be at least backoff.initial".into());
        }
        Ok(())
    }
}
