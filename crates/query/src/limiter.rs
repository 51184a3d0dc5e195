//! Rate limits of signed reads: a token bucket per reader key, in a table of bounded
//! size, and one bucket for the whole service. Pure: the caller passes the time.
//!
//! Reader keys cost nothing to make, so the per-reader buckets alone do not bound the
//! service: an attacker with fresh keys gets a fresh burst each. The service bucket does.
//! When the table is full, readers idle for a minute are forgotten; if it is still full,
//! every reader is (each starts again with a full bucket): a flood of fresh keys can
//! make the table forget, never lock a reader out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most readers tracked at once.
pub const MAX_READERS: usize = 100_000;

/// One token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: f64,
    last: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket {
            level: burst,
            last: now,
        }
    }

    /// Refills at `rate` up to `burst`, then takes one read if there is one.
    fn take(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * rate;
        self.level = (self.level + refill).min(burst);
        self.last = now;
        if self.level >= 1.0 {
            self.level -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Why a read is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// This reader is over its rate.
    Reader,
    /// The service is over its rate.
    Service,
}

/// Token buckets by reader, and the service's.
#[derive(Debug)]
pub struct Limiter {
    per_reader: f64,
    per_service: f64,
    buckets: HashMap<[u8; 32], Bucket>,
    service: Option<Bucket>,
}

impl Limiter {
    /// `per_reader` reads a second per reader and `per_service` for all readers, each
    /// with bursts of twice as many (0: unlimited).
    pub fn new(per_reader: u32, per_service: u32) -> Limiter {
        Limiter {
            per_reader: f64::from(per_reader),
            per_service: f64::from(per_service),
            buckets: HashMap::new(),
            service: None,
        }
    }

    /// Whether `reader` may read at `now` (and takes one read from its bucket and the
    /// service's).
    pub fn allow(&mut self, reader: &[u8; 32], now: Instant) -> Result<(), Limited> {
        if self.per_reader > 0.0 {
            if !self.buckets.contains_key(reader) && self.buckets.len() >= MAX_READERS {
                self.buckets
                    .retain(|_, b| now.saturating_duration_since(b.last) < Duration::from_secs(60));
                if self.buckets.len() >= MAX_READERS {
                    self.buckets.clear();
                }
            }
            let burst = self.per_reader * 2.0;
            let bucket = self
                .buckets
                .entry(*reader)
                .or_insert_with(|| Bucket::full(burst, now));
            if !bucket.take(self.per_reader, burst, now) {
                return Err(Limited::Reader);
            }
        }
        if self.per_service > 0.0 {
            let burst = self.per_service * 2.0;
            let service = self.service.get_or_insert_with(|| Bucket::full(burst, now));
            if !service.take(self.per_service, burst, now) {
                return Err(Limited::Service);
            }
        }
        Ok(())
    }

    /// Readers tracked now.
    pub fn readers(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_its_burst_then_its_rate_and_others_are_not_affected() {
        let mut l = Limiter::new(5, 0);
        let t0 = Instant::now();
        let a = [1; 32];
        let allowed = (0..20).filter(|_| l.allow(&a, t0).is_ok()).count();
        assert_eq!(allowed, 10, "a burst of twice the rate");
        assert!(l.allow(&[2; 32], t0).is_ok(), "another reader has its own bucket");
        assert!(
            l.allow(&a, t0 + Duration::from_millis(250)).is_ok(),
            "refilled at 5 per second"
        );
        assert_eq!(l.allow(&a, t0 + Duration::from_millis(250)), Err(Limited::Reader));
        assert!(Limiter::new(0, 0).allow(&a, t0).is_ok(), "0 is unlimited");
    }

    #[test]
    fn fresh_keys_hit_the_service_bound_and_never_lock_a_reader_out() {
        let mut l = Limiter::new(5, 100);
        let t0 = Instant::now();
        let fresh = |i: u32| {
            let mut k = [0u8; 32];
            k[..4].copy_from_slice(&i.to_be_bytes());
            k
        };
        let allowed = (0..1000).filter(|&i| l.allow(&fresh(i), t0).is_ok()).count();
        assert_eq!(allowed, 200, "the service's burst");
        // A full table: new readers still get in (the table forgets), it never grows past
        // its bound.
        let mut l = Limiter::new(5, 0);
        for i in 0..u32::try_from(MAX_READERS).unwrap() {
            assert!(l.allow(&fresh(i), t0).is_ok());
        }
        assert!(l.allow(&[0xff; 32], t0).is_ok(), "a new reader is not locked out");
        assert!(l.readers() <= MAX_READERS);
    }
}
