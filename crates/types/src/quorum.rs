//! Quorum math of Arma §4 and of the BFT engine.

use crate::{Error, Result};

/// The thresholds of a network of `n` parties tolerating `f = ⌊(n−1)/3⌋` Byzantine ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quorum {
    n: usize,
    f: usize,
}

impl Quorum {
    /// The thresholds for `n ≥ 1` parties.
    pub fn new(n: usize) -> Result<Quorum> {
        if n == 0 {
            return Err(Error::NoParties { parties: n });
        }
        Ok(Quorum { n, f: (n - 1) / 3 })
    }

    /// Number of parties.
    pub fn parties(&self) -> usize {
        self.n
    }

    /// Faults tolerated, `⌊(n−1)/3⌋`.
    pub fn f(&self) -> usize {
        self.f
    }

    /// Batch attestation fragments that make a batch attestation: `f+1` (one is honest).
    pub fn baf_threshold(&self) -> usize {
        self.f + 1
    }

    /// Complaints that rotate a shard's primary: `f+1`.
    pub fn complaint_threshold(&self) -> usize {
        self.f + 1
    }

    /// BFT quorum `⌈(n+f+1)/2⌉`: any two quorums intersect in at least one honest party.
    pub fn bft_quorum(&self) -> usize {
        (self.n + self.f + 1).div_ceil(2)
    }

    /// Router acknowledgements after which a client's submission counts: `2f+1`.
    pub fn client_acks(&self) -> usize {
        2 * self.f + 1
    }
}

/// Router acknowledgements a client needs among `n` routers: `2f+1`
/// ([`Quorum::client_acks`]), and 1 for `n = 0` (no router: nothing will answer).
pub fn client_acks(n: usize) -> usize {
    Quorum::new(n).map_or(1, |q| q.client_acks())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        // (n, f, f+1, q, 2f+1)
        let rows = [
            (1, 0, 1, 1, 1),
            (4, 1, 2, 3, 3),
            (5, 1, 2, 4, 3),
            (7, 2, 3, 5, 5),
            (10, 3, 4, 7, 7),
        ];
        for (n, f, f1, q, acks) in rows {
            let qm = Quorum::new(n).unwrap();
            assert_eq!(qm.f(), f, "f for n={n}");
            assert_eq!(qm.baf_threshold(), f1, "baf for n={n}");
            assert_eq!(qm.complaint_threshold(), f1, "complaints for n={n}");
            assert_eq!(qm.bft_quorum(), q, "q for n={n}");
            assert_eq!(qm.client_acks(), acks, "acks for n={n}");
        }
        assert_eq!(Quorum::new(0), Err(Error::NoParties { parties: 0 }));
    }

    #[test]
    fn quorums_intersect_in_an_honest_party() {
        for n in 1..=64 {
            let q = Quorum::new(n).unwrap();
            // |Q1 ∩ Q2| ≥ 2q − n ≥ f + 1.
            assert!(2 * q.bft_quorum() > n + q.f(), "n={n}");
            // A quorum is reachable with f parties silent.
            assert!(q.bft_quorum() <= n - q.f(), "n={n}");
        }
    }
}
