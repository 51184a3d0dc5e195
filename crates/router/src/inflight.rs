//! Per-shard accounting of requests forwarded to a batcher and not yet answered, bounded
//! by count and bytes. A request is forwarded only if [`InFlight::try_admit`] finds room;
//! its room is given back by [`InFlight::release`] when the batcher answers, the link
//! breaks, the answer times out or the client goes away (the shell's permit does it on
//! drop), so the bound holds whatever happens to the request.

use crate::error::{Error, Result};
use types::ShardId;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Load {
    requests: usize,
    bytes: u64,
}

/// The in-flight load of every shard.
#[derive(Debug, Clone)]
pub struct InFlight {
    shards: Vec<Load>,
    max_requests: usize,
    max_bytes: u64,
}

impl InFlight {
    /// Empty accounting for `shards` shards with the given per-shard bounds.
    pub fn new(shards: u32, max_requests: usize, max_bytes: u64) -> InFlight {
        InFlight {
            shards: vec![Load::default(); usize::try_from(shards).unwrap_or(0)],
            max_requests,
            max_bytes,
        }
    }

    fn load_mut(&mut self, shard: ShardId) -> Result<&mut Load> {
        let shards = u32::try_from(self.shards.len()).unwrap_or(u32::MAX);
        usize::try_from(shard)
            .ok()
            .and_then(|i| self.shards.get_mut(i))
            .ok_or(Error::UnknownShard { shard, shards })
    }

    /// Counts a request of `bytes` bytes to `shard` if both bounds leave room.
    pub fn try_admit(&mut self, shard: ShardId, bytes: u64) -> Result<()> {
        let (max_requests, max_bytes) = (self.max_requests, self.max_bytes);
        let load = self.load_mut(shard)?;
        if load.requests >= max_requests {
            return Err(Error::ShardFullRequests {
                shard,
                held: load.requests,
                max: max_requests,
            });
        }
        let total = load.bytes.checked_add(bytes).filter(|t| *t <= max_bytes);
        let Some(total) = total else {
            return Err(Error::ShardFullBytes {
                shard,
                held: load.bytes,
                size: bytes,
                max: max_bytes,
            });
        };
        load.requests += 1;
        load.bytes = total;
        Ok(())
    }

    /// Gives back the room of a request admitted with the same `shard` and `bytes`.
    pub fn release(&mut self, shard: ShardId, bytes: u64) {
        if let Ok(load) = self.load_mut(shard) {
            load.requests = load.requests.saturating_sub(1);
            load.bytes = load.bytes.saturating_sub(bytes);
        }
    }

    /// Gives back the room of `requests` requests of `bytes` bytes in all, admitted to
    /// `shard`.
    pub fn release_many(&mut self, shard: ShardId, requests: usize, bytes: u64) {
        if let Ok(load) = self.load_mut(shard) {
            load.requests = load.requests.saturating_sub(requests);
            load.bytes = load.bytes.saturating_sub(bytes);
        }
    }

    /// Requests and bytes in flight to `shard` (zero for an unknown shard).
    pub fn load(&self, shard: ShardId) -> (usize, u64) {
        usize::try_from(shard)
            .ok()
            .and_then(|i| self.shards.get(i))
            .map_or((0, 0), |l| (l.requests, l.bytes))
    }
}
