//! The reconnect schedule of a batcher link: exponential with a cap, as a pure function
//! of the number of failed attempts since the last success (the shell resets it to 0 when
//! a stream opens).

use std::time::Duration;

/// Exponential backoff: `initial · 2^attempt`, at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure (attempt 0). Must be positive.
    pub initial: Duration,
    /// The cap. At least `initial`.
    pub max: Duration,
}

/// 50 ms doubling up to 1 s: a router links only to its own party's batchers (one per
/// shard), so retrying each second costs nothing, and an outage — a batcher restarting,
/// or a TLS certificate switch the router learns within its 2 s poll of the config in
/// force — ends within a second of its cause rather than after a long backoff.
impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(1),
        }
    }
}

impl Backoff {
    /// The delay before reconnect attempt `attempt + 1`, after `attempt` earlier failures
    /// in a row: `min(initial · 2^attempt, max)`, without overflow for any `attempt`.
    pub fn delay(&self, attempt: u32) -> Duration {
        1u32.checked_shl(attempt)
            .and_then(|factor| self.initial.checked_mul(factor))
            .map_or(self.max, |d| d.min(self.max))
    }
}
