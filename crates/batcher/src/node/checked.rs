//! The requests this batcher took in from its own party's router, remembered by a keyed
//! fingerprint so that a secondary does not check their content a second time when the
//! primary's batch brings them back.
//!
//! A router admits a request only after the checks of `arma::admission` (envelope
//! structure, client and self-certified signatures), and the intake service accepts
//! requests only from this party's router (mutual TLS authorizes no one else). Clients
//! send each request to every party's router, so nearly every request of an honest
//! primary's batch already passed this party's own router: checking its content again
//! costs a protobuf decode (and, on a signed network, a signature) per request per
//! secondary for nothing. A pulled request is skipped only if its **whole bytes** have the
//! fingerprint of one that came through the intake; every other request is checked as
//! before, so a Byzantine primary still cannot get a request the routers would refuse
//! attested.
//!
//! The fingerprint is 128 bits of SipHash under two keys drawn at random when the node
//! starts: a primary cannot see the keys, so it cannot build a refused request that
//! collides with an admitted one. Memory is bounded: two generations of at most
//! `per_generation` fingerprints each (16 bytes plus the table's overhead per entry); a
//! request older than two generations is checked again, which costs time, never
//! correctness.

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::Mutex;

/// A request's keyed fingerprint.
type Fingerprint = u128;

/// Hashes a fingerprint by its low 64 bits: they are already uniformly random.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

type Set = HashSet<Fingerprint, BuildHasherDefault<PassThrough>>;

/// Fingerprints of the requests the intake took in (see the module doc).
pub struct CheckedRequests {
    keys: (RandomState, RandomState),
    per_generation: usize,
    sets: Mutex<(Set, Set)>,
}

impl std::fmt::Debug for CheckedRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("CheckedRequests")
            .field("per_generation", &self.per_generation)
            .field("current", &sets.0.len())
            .field("previous", &sets.1.len())
            .finish()
    }
}

impl CheckedRequests {
    /// An empty set keeping at most `2 × per_generation` fingerprints (at least 1 each).
    pub fn new(per_generation: usize) -> CheckedRequests {
        CheckedRequests {
            keys: (RandomState::new(), RandomState::new()),
            per_generation: per_generation.max(1),
            sets: Mutex::new((Set::default(), Set::default())),
        }
    }

    fn fingerprint(&self, request: &[u8]) -> Fingerprint {
        let hi = self.keys.0.hash_one(request);
        let lo = self.keys.1.hash_one(request);
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// Remembers `requests` as checked by this party's router.
    pub fn record<'a>(&self, requests: impl IntoIterator<Item = &'a [u8]>) {
        let prints: Vec<Fingerprint> = requests.into_iter().map(|r| self.fingerprint(r)).collect();
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        for p in prints {
            if sets.0.len() >= self.per_generation {
                sets.1 = std::mem::take(&mut sets.0);
            }
            sets.0.insert(p);
        }
    }

    /// The indices of `requests` that did not come through the intake (recently): the
    /// ones whose content must still be checked.
    pub fn unknown<'a>(&self, requests: impl IntoIterator<Item = &'a [u8]>) -> Vec<usize> {
        let prints: Vec<Fingerprint> = requests.into_iter().map(|r| self.fingerprint(r)).collect();
        let sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        prints
            .iter()
            .enumerate()
            .filter(|(_, p)| !sets.0.contains(p) && !sets.1.contains(p))
            .map(|(i, _)| i)
            .collect()
    }

    /// Fingerprints held (both generations).
    pub fn len(&self) -> usize {
        let sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        sets.0.len() + sets.1.len()
    }

    /// Whether it holds no fingerprint.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(i: u32) -> Vec<u8> {
        let mut r = vec![7u8; 300];
        r[..4].copy_from_slice(&i.to_le_bytes());
        r
    }

    #[test]
    fn only_the_exact_bytes_that_came_through_the_intake_are_known() {
        let checked = CheckedRequests::new(100);
        let a = req(1);
        checked.record([a.as_slice()]);
        let mut flipped = a.clone();
        flipped[299] ^= 1;
        let longer = [a.as_slice(), &[0]].concat();
        let b = req(2);
        let batch = [
            a.as_slice(),
            flipped.as_slice(),
            longer.as_slice(),
            b.as_slice(),
            a.as_slice(),
        ];
        assert_eq!(checked.unknown(batch), vec![1, 2, 3]);
        // Another node's keys: its fingerprints say nothing about this one's.
        assert_eq!(CheckedRequests::new(100).unknown([a.as_slice()]), vec![0]);
    }

    #[test]
    fn memory_is_two_generations_and_old_requests_are_checked_again() {
        let checked = CheckedRequests::new(10);
        let all: Vec<Vec<u8>> = (0..1000).map(req).collect();
        checked.record(all.iter().map(Vec::as_slice));
        assert!(checked.len() <= 20, "holds {}", checked.len());
        let unknown = checked.unknown(all.iter().map(Vec::as_slice));
        // The last generation is known; everything before the previous one is not.
        assert!(unknown.contains(&0));
        assert!(!unknown.contains(&999));
        assert!(unknown.len() >= 980, "{} unknown", unknown.len());
    }
}
