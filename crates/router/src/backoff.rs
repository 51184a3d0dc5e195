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

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(5),
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
