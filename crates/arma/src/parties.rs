//! The parties in force: a sorted list of party ids, not a count (ADR 0018 "A party
//! leaving"). A party keeps its id for the network's life and an id is never given
//! again, so after a party leaves the list has a gap: `[1, 3, 4, 5]`.
//!
//! What every role derives from it, alike: the primary of a shard in a term, the
//! threshold of BAFs and complaints (f + 1), and the consenters' replica set (party `p`
//! runs replica `p − 1`).

use std::fmt;
use std::sync::Arc;

use types::{PartyId, ShardId};

/// Most parties a network may have (the consensus engine's bound on a replica set).
pub const MAX_PARTIES: usize = bft::MAX_MEMBERS;

/// How long the nodes of a party that left go on serving what they hold after the
/// decision that removed it (a batcher its batches, an assembler its blocks, a consenter
/// its decisions and state transfer, its last votes sent) before they stop: the others
/// may still need a batch only it and a faulty party attested, or its commit vote for
/// that very decision (docs/reconfiguration.md "Removing a party").
pub const LEAVE_GRACE_MS: u64 = 20_000;

/// Why a list of party ids is not a set of parties.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PartiesError {
    /// No party at all.
    #[error("a network needs at least one party")]
    Empty,
    /// Party ids start at 1.
    #[error("party ids start at 1; 0 is not a party")]
    Zero,
    /// Ids out of order or repeated.
    #[error("party ids must be increasing: {after} follows {before}")]
    NotIncreasing {
        /// The earlier id.
        before: PartyId,
        /// The id that does not follow it.
        after: PartyId,
    },
    /// More than [`MAX_PARTIES`].
    #[error("{len} parties, at most {max} allowed")]
    TooMany {
        /// Parties in the list.
        len: usize,
        /// [`MAX_PARTIES`].
        max: usize,
    },
}

/// The parties in force: ids strictly increasing, each at least 1, non-empty.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Parties(Arc<[PartyId]>);

impl fmt::Debug for Parties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl Parties {
    /// The parties `ids`: refused unless strictly increasing, non-zero, non-empty and at
    /// most [`MAX_PARTIES`] long.
    pub fn new(ids: Vec<PartyId>) -> Result<Parties, PartiesError> {
        if ids.is_empty() {
            return Err(PartiesError::Empty);
        }
        if ids.len() > MAX_PARTIES {
            return Err(PartiesError::TooMany {
                len: ids.len(),
                max: MAX_PARTIES,
            });
        }
        if ids[0] == 0 {
            return Err(PartiesError::Zero);
        }
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            return Err(PartiesError::NotIncreasing {
                before: w[0],
                after: w[1],
            });
        }
        Ok(Parties(ids.into()))
    }

    /// Parties `1..=n` (a network none has left; `n = 0` is taken as 1).
    pub fn contiguous(n: u32) -> Parties {
        let n = n.clamp(1, MAX_PARTIES as u32);
        Parties((1..=n).collect())
    }

    /// The ids, increasing.
    pub fn ids(&self) -> &[PartyId] {
        &self.0
    }

    /// How many parties (N).
    pub fn len(&self) -> u32 {
        // At most MAX_PARTIES (4,096) by construction.
        self.0.len() as u32
    }

    /// Never: a set of parties is not empty (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `party` is in force.
    pub fn contains(&self, party: PartyId) -> bool {
        self.0.binary_search(&party).is_ok()
    }

    /// The highest id in force.
    pub fn max_id(&self) -> PartyId {
        self.0.last().copied().unwrap_or(1)
    }

    /// f, the parties that may be faulty: `(N − 1) / 3`.
    pub fn faults(&self) -> u32 {
        self.len().saturating_sub(1) / 3
    }

    /// f + 1: BAFs that attest a batch, complaints that change a term.
    pub fn threshold(&self) -> usize {
        self.faults() as usize + 1
    }

    /// The primary of `shard` in `term`: the `((shard + term) mod N)`-th party in id
    /// order. With parties `1..=N` that is party `((shard + term) mod N) + 1`.
    pub fn primary_of(&self, shard: ShardId, term: u64) -> PartyId {
        let n = self.0.len() as u64;
        let index = (u64::from(shard) % n + term % n) % n;
        // index < n = len, so the conversion fits and the index is in bounds.
        self.0[index as usize]
    }

    /// The consenters' replica set: party `p` runs replica `p − 1`.
    pub fn replicas(&self) -> bft::Members {
        let ids = self.0.iter().map(|p| p - 1).collect();
        // The ids are increasing and at least 1, so `p − 1` are increasing, distinct and
        // as many as the parties (non-empty, at most MAX_MEMBERS).
        bft::Members::new(ids).unwrap_or_else(|_| bft::Members::contiguous(1))
    }

    /// The parties that run the replicas `members` (replica `r` is party `r + 1`).
    pub fn of_replicas(members: &bft::Members) -> Parties {
        Parties(members.ids().iter().map(|r| r.saturating_add(1)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_that_are_not_parties_are_refused() {
        assert_eq!(Parties::new(vec![]), Err(PartiesError::Empty));
        assert_eq!(Parties::new(vec![0, 1]), Err(PartiesError::Zero));
        assert_eq!(
            Parties::new(vec![1, 3, 3]),
            Err(PartiesError::NotIncreasing { before: 3, after: 3 })
        );
        assert_eq!(
            Parties::new(vec![2, 1]),
            Err(PartiesError::NotIncreasing { before: 2, after: 1 })
        );
        assert!(matches!(
            Parties::new((1..=5000).collect()),
            Err(PartiesError::TooMany { len: 5000, .. })
        ));
        assert_eq!(Parties::new(vec![1, 3, 4]).unwrap().ids(), &[1, 3, 4]);
    }

    #[test]
    fn contiguous_parties_keep_the_formula_of_a_count() {
        for n in 1..=9u32 {
            let parties = Parties::contiguous(n);
            assert_eq!(parties.len(), n);
            for shard in 0..5 {
                for term in [0, 1, 2, 7, u64::MAX - 1, u64::MAX] {
                    let want = ((u64::from(shard) + term % u64::from(n)) % u64::from(n)) as u32 + 1;
                    assert_eq!(
                        parties.primary_of(shard, term),
                        want,
                        "n {n} shard {shard} term {term}"
                    );
                }
            }
        }
        assert_eq!(Parties::contiguous(0).ids(), &[1]);
    }

    #[test]
    fn after_a_party_leaves_the_rotation_and_quorums_skip_it() {
        let parties = Parties::new(vec![1, 3, 4, 5]).unwrap();
        let primaries: Vec<_> = (0..8).map(|t| parties.primary_of(0, t)).collect();
        assert_eq!(primaries, [1, 3, 4, 5, 1, 3, 4, 5]);
        assert_eq!(parties.primary_of(1, 0), 3);
        assert!(!parties.contains(2));
        assert!(parties.contains(5));
        assert_eq!((parties.faults(), parties.threshold()), (1, 2));
        assert_eq!(parties.replicas().ids(), &[0, 2, 3, 4]);
        assert_eq!(Parties::of_replicas(&parties.replicas()), parties);
        assert_eq!(parties.max_id(), 5);
        // Three parties tolerate no fault: one BAF attests.
        assert_eq!(Parties::new(vec![1, 3, 4]).unwrap().threshold(), 1);
    }
}
