//! Per-reader rate limits: a token bucket per reader key, in a table of bounded size.
//! Pure: the caller passes the time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most readers tracked at once; when full, readers idle for a minute are forgotten, and
/// while it stays full new readers are refused (never unbounded memory).
pub const MAX_READERS: usize = 100_000;

/// Token buckets by reader.
#[derive(Debug)]
pub struct Limiter {
    per_second: f64,
    burst: f64,
    buckets: HashMap<[u8; 32], (f64, Instant)>,
}

impl Limiter {
    /// `per_second` reads per reader, bursts of twice as many (0: unlimited).
    pub fn new(per_second: u32) -> Limiter {
        let per_second = f64::from(per_second);
        Limiter {
            per_second,
            burst: per_second * 2.0,
            buckets: HashMap::new(),
        }
    }

    /// Whether `reader` may read at `now` (and takes one read from its bucket).
    pub fn allow(&mut self, reader: &[u8; 32], now: Instant) -> bool {
        if self.per_second <= 0.0 {
            return true;
        }
        if !self.buckets.contains_key(reader) && self.buckets.len() >= MAX_READERS {
            self.buckets
                .retain(|_, (_, last)| now.saturating_duration_since(*last) < Duration::from_secs(60));
            if self.buckets.len() >= MAX_READERS {
                return false;
            }
        }
        let (level, last) = self.buckets.entry(*reader).or_insert((self.burst, now));
        let refill = now.saturating_duration_since(*last).as_secs_f64() * self.per_second;
        *level = (*level + refill).min(self.burst);
        *last = now;
        if *level >= 1.0 {
            *level -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_its_burst_then_its_rate_and_others_are_not_affected() {
        let mut l = Limiter::new(5);
        let t0 = Instant::now();
        let a = [1; 32];
        let allowed = (0..20).filter(|_| l.allow(&a, t0)).count();
        assert_eq!(allowed, 10, "a burst of twice the rate");
        assert!(l.allow(&[2; 32], t0), "another reader has its own bucket");
        assert!(l.allow(&a, t0 + Duration::from_millis(250)), "refilled at 5 per second");
        assert!(!l.allow(&a, t0 + Duration::from_millis(250)));
        assert!(Limiter::new(0).allow(&a, t0), "0 is unlimited");
    }
}
