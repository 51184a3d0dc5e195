//! Identifiers, quorum math, configuration and the proposal type.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::tags;

/// A replica's stable id: it keeps it for the life of the network, whichever sets it is
/// a member of ([`Members`]); an id is never given to another replica.
pub type ReplicaId = u32;
/// A view number; the leader of view `v` is `members[(v + instance) mod len]`.
pub type View = u64;
/// A sequence number inside one instance; the first decision has sequence 1.
pub type Seq = u64;

/// Identifies one independent consensus instance. Several instances can run side by
/// side on disjoint sequence spaces: the id is part of every message and every signed
/// byte string, so votes of one instance can never count in another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct InstanceId(pub u32);

/// Identifies one consenter cluster (network). It is the first field after the domain
/// tag of every byte string the engine signs (votes, view changes, hence certificates
/// and new-view proofs), so two clusters that share keys never accept each other's
/// messages or certificates. The consenter derives it from the configured chain name
/// and the cluster's public keys.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ChainId(pub [u8; 32]);

impl fmt::Debug for ChainId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chain(")?;
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Digest(pub [u8; 32]);

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl Digest {
    /// Digest of one opaque client request (its identity for de-duplication).
    pub fn of_request(request: &[u8]) -> Digest {
        let mut h = Sha256::new();
        h.update(tags::REQUEST);
        h.update(request);
        Digest(h.finalize().into())
    }

    /// Digest of an application snapshot (what checkpoint votes sign).
    pub fn of_snapshot(snapshot: &[u8]) -> Digest {
        let mut h = Sha256::new();
        h.update(tags::SNAPSHOT);
        h.update(snapshot);
        Digest(h.finalize().into())
    }
}

/// Quorum arithmetic for `n` replicas (Arma §4, PBFT §4): `f = ⌊(n−1)/3⌋`,
/// `q = ⌈(n+f+1)/2⌉`. Any two quorums intersect in at least `f+1` replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quorum {
    /// Number of replicas.
    pub n: u32,
    /// Number of Byzantine replicas tolerated.
    pub f: u32,
    /// Votes needed for a prepare/commit/view-change quorum.
    pub q: u32,
}

impl Quorum {
    /// Quorum math for `n ≥ 1` replicas.
    pub fn new(n: u32) -> Quorum {
        let n = n.max(1);
        let f = (n - 1) / 3;
        let q = (n + f + 1).div_ceil(2);
        Quorum { n, f, q }
    }
}

/// The most members a replica set may have.
pub const MAX_MEMBERS: usize = 4096;

/// Why a list of replica ids is not a replica set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembersError {
    /// The list is empty.
    #[error("a replica set needs at least one member")]
    Empty,
    /// Two ids out of order or repeated.
    #[error("member ids must be sorted and distinct: {before} is followed by {after}")]
    NotSortedOrRepeated {
        /// The earlier id in the list.
        before: ReplicaId,
        /// The id that follows it.
        after: ReplicaId,
    },
    /// More members than [`MAX_MEMBERS`].
    #[error("{len} members, at most {max} allowed")]
    TooMany {
        /// Members in the list.
        len: usize,
        /// [`MAX_MEMBERS`].
        max: usize,
    },
}

/// The members of a replica set: their stable ids, sorted, distinct and non-empty
/// (checked once, by [`Members::new`]). Quorum and `f` are over their number, the
/// leader of view `v` is the `(v + instance) mod len`-th, and only their votes count.
/// Ids may have gaps: replica 1 leaving `[0, 1, 2, 3, 4]` leaves `[0, 2, 3, 4]`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Members(Arc<[ReplicaId]>);

impl fmt::Debug for Members {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl Members {
    /// The set of `ids`: refused unless sorted, distinct, non-empty and at most
    /// [`MAX_MEMBERS`] long.
    pub fn new(ids: Vec<ReplicaId>) -> Result<Members, MembersError> {
        if ids.is_empty() {
            return Err(MembersError::Empty);
        }
        if ids.len() > MAX_MEMBERS {
            return Err(MembersError::TooMany {
                len: ids.len(),
                max: MAX_MEMBERS,
            });
        }
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            return Err(MembersError::NotSortedOrRepeated {
                before: w[0],
                after: w[1],
            });
        }
        Ok(Members(ids.into()))
    }

    /// Replicas `0..n` (a set built from a configuration of `n` replicas; `n = 0` is
    /// taken as 1, as [`Quorum::new`] does).
    pub fn contiguous(n: u32) -> Members {
        let n = n.clamp(1, MAX_MEMBERS as u32);
        Members((0..n).collect())
    }

    /// The ids, sorted.
    pub fn ids(&self) -> &[ReplicaId] {
        &self.0
    }

    /// Number of members (at least 1).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u32 {
        self.0.len() as u32
    }

    /// True iff `id` is a member.
    pub fn contains(&self, id: ReplicaId) -> bool {
        self.0.binary_search(&id).is_ok()
    }

    /// The highest member id (a joiner takes an id above it).
    pub fn max_id(&self) -> ReplicaId {
        self.0.last().copied().unwrap_or(0)
    }

    /// The quorum math over the members' number.
    pub fn quorum(&self) -> Quorum {
        Quorum::new(self.len())
    }

    /// The leader of `view` in `instance`: the `(view + instance) mod len`-th member.
    pub fn leader(&self, instance: InstanceId, view: View) -> ReplicaId {
        let len = self.0.len().max(1) as u64;
        let i = view.wrapping_add(u64::from(instance.0)) % len;
        self.0.get(i as usize).copied().unwrap_or(0)
    }

    /// The members in round-robin order starting with the first one after `id` (ids
    /// wrap around), each once.
    pub fn after(&self, id: ReplicaId) -> impl Iterator<Item = ReplicaId> + '_ {
        let start = self.0.partition_point(|m| *m <= id);
        self.0[start..].iter().chain(self.0[..start].iter()).copied()
    }
}

/// Engine configuration. Times are milliseconds of the clock delivered by `Input::Tick`.
#[derive(Clone, Debug)]
pub struct Config {
    /// This replica.
    pub id: ReplicaId,
    /// The cluster this replica belongs to; bound into every signed byte string.
    pub chain: ChainId,
    /// The members of the replica set in force (the first set: `0..n`).
    pub members: Members,
    /// The consensus instance this replica belongs to.
    pub instance: InstanceId,
    /// The leader cuts a batch when this many requests are pending.
    pub max_batch_count: usize,
    /// The leader cuts a batch when the pending requests reach this many bytes.
    pub max_batch_bytes: usize,
    /// The leader cuts a non-empty batch when its oldest request waited this long.
    pub batch_interval_ms: u64,
    /// A request not ordered within this time makes the replica complain (view change).
    pub request_timeout_ms: u64,
    /// Interval between heartbeats (leader liveness and decided-height gossip).
    pub heartbeat_interval_ms: u64,
    /// A follower that hears nothing from the leader for this long starts a view change.
    pub heartbeat_timeout_ms: u64,
    /// Base time to wait for a new view once a quorum asked for it (doubles per attempt).
    pub view_change_timeout_ms: u64,
    /// Maximum number of pending requests; further requests are refused.
    pub max_pending: usize,
    /// Maximum bytes of pending requests (client and forwarded); further requests are
    /// refused ([`crate::Refusal::PoolFull`] for client requests).
    pub max_pending_bytes: usize,
    /// Largest accepted request, in bytes.
    pub max_request_bytes: usize,
    /// Most decisions returned in one state-transfer response.
    pub sync_batch: std::num::NonZeroUsize,
    /// Most bytes of decisions (requests, metadata and signatures) in one state-transfer
    /// response; a response always carries at least one decision. Keep it below the
    /// transport's message limit.
    pub sync_max_bytes: usize,
    /// Most bytes of messages kept per sender while they wait for a later sequence or
    /// view (pre-prepares and verified votes); the oldest are dropped beyond it.
    pub max_future_bytes_per_peer: usize,
    /// Consecutive view changes without a decision double the timeouts (heartbeat,
    /// request, stuck slot, view change) up to `2^max_backoff_exponent` times.
    pub max_backoff_exponent: u32,
    /// Every this many decisions the replica checkpoints its application state (when the
    /// application can snapshot it, [`crate::Application::snapshot`]); a quorum of equal
    /// checkpoint votes makes it stable and lets the WAL, the decisions kept for state
    /// transfer and the de-duplication set be pruned. 0 turns checkpoints off.
    pub checkpoint_interval: u64,
    /// Decisions kept in memory below the last stable checkpoint, so a replica that is
    /// only a little behind catches up by decisions rather than by snapshot.
    pub retain_decisions: u64,
}

impl Config {
    /// A configuration with defaults suitable for a LAN deployment, in the set of
    /// replicas `0..n`.
    pub fn new(id: ReplicaId, n: u32) -> Config {
        Config {
            id,
            chain: ChainId::default(),
            members: Members::contiguous(n),
            instance: InstanceId(0),
            max_batch_count: 1000,
            max_batch_bytes: 4 << 20,
            batch_interval_ms: 50,
            request_timeout_ms: 2_000,
            heartbeat_interval_ms: 500,
            heartbeat_timeout_ms: 2_000,
            view_change_timeout_ms: 2_000,
            max_pending: 100_000,
            max_pending_bytes: 64 << 20,
            max_request_bytes: 1 << 20,
            sync_batch: std::num::NonZeroUsize::new(64).unwrap_or(std::num::NonZeroUsize::MIN),
            sync_max_bytes: 16 << 20,
            max_future_bytes_per_peer: 16 << 20,
            max_backoff_exponent: 5,
            checkpoint_interval: 128,
            retain_decisions: 128,
        }
    }

    /// The limits and timing a network config sets for every replica of a set.
    pub fn params(&self) -> EngineParams {
        EngineParams {
            max_batch_count: self.max_batch_count,
            max_batch_bytes: self.max_batch_bytes,
            batch_interval_ms: self.batch_interval_ms,
            request_timeout_ms: self.request_timeout_ms,
            heartbeat_interval_ms: self.heartbeat_interval_ms,
            heartbeat_timeout_ms: self.heartbeat_timeout_ms,
            view_change_timeout_ms: self.view_change_timeout_ms,
            max_request_bytes: self.max_request_bytes,
            max_pending: self.max_pending,
            max_pending_bytes: self.max_pending_bytes,
        }
    }

    /// Puts `p` in force (at a replica-set switch: every replica of the set at the same
    /// decision).
    pub fn set_params(&mut self, p: EngineParams) {
        self.max_batch_count = p.max_batch_count;
        self.max_batch_bytes = p.max_batch_bytes;
        self.batch_interval_ms = p.batch_interval_ms;
        self.request_timeout_ms = p.request_timeout_ms;
        self.heartbeat_interval_ms = p.heartbeat_interval_ms;
        self.heartbeat_timeout_ms = p.heartbeat_timeout_ms;
        self.view_change_timeout_ms = p.view_change_timeout_ms;
        self.max_request_bytes = p.max_request_bytes;
        self.max_pending = p.max_pending;
        self.max_pending_bytes = p.max_pending_bytes;
    }

    /// Number of members of the set in force.
    pub fn n(&self) -> u32 {
        self.members.len()
    }

    /// The quorum math for this configuration.
    pub fn quorum(&self) -> Quorum {
        self.members.quorum()
    }

    /// The leader of `view` in this instance (round robin over the members, offset by
    /// the instance id so that parallel instances start with different leaders).
    pub fn leader(&self, view: View) -> ReplicaId {
        self.members.leader(self.instance, view)
    }
}

/// The engine's limits and timing that a network config sets (ADR 0018): a replica-set
/// switch ([`crate::Membership::params`]) may change them, for every replica of the set
/// at the same decision. Proposal limits (`max_batch_count`, `max_batch_bytes`,
/// `max_request_bytes`) decide which proposals are valid, so they must switch together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineParams {
    /// Most requests in a proposal.
    pub max_batch_count: usize,
    /// Most request bytes in a proposal.
    pub max_batch_bytes: usize,
    /// The leader proposes a non-full batch after this long.
    pub batch_interval_ms: u64,
    /// A request not decided within this time makes a replica complain.
    pub request_timeout_ms: u64,
    /// The leader's heartbeat interval.
    pub heartbeat_interval_ms: u64,
    /// A follower that hears nothing from the leader this long starts a view change.
    pub heartbeat_timeout_ms: u64,
    /// Base time to wait for a new view.
    pub view_change_timeout_ms: u64,
    /// Largest request.
    pub max_request_bytes: usize,
    /// Most pending requests.
    pub max_pending: usize,
    /// Most bytes of pending requests.
    pub max_pending_bytes: usize,
}

/// The leader of `view` for `instance` among the `n` replicas `0..n`
/// ([`Members::leader`] for any set).
pub fn leader_of(instance: InstanceId, view: View, n: u32) -> ReplicaId {
    ((view + u64::from(instance.0)) % u64::from(n.max(1))) as ReplicaId
}

/// What the leader proposes for one sequence number: a batch of opaque requests and
/// application metadata (for Arma: the block header fields). The view is deliberately
/// not part of a proposal so that a proposal carried into a new view keeps its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// Instance the proposal belongs to.
    pub instance: InstanceId,
    /// Sequence number it is proposed for.
    pub seq: Seq,
    /// Opaque client requests, in order.
    pub requests: Vec<Vec<u8>>,
    /// Application-defined bytes assembled by the leader's application.
    pub metadata: Vec<u8>,
}

impl Proposal {
    /// The digest that votes and certificates sign (length-prefixed, domain separated):
    /// `SHA-256(tag ‖ instance ‖ seq ‖ requests_root ‖ len(metadata) ‖ metadata)`.
    ///
    /// The requests enter through their root, so a third party holding only the root
    /// and the metadata (for Arma: the block header hashes of the decision) can check a
    /// commit certificate without the requests (docs/consenter.md, ADR 0009).
    pub fn digest(&self) -> Digest {
        proposal_digest(self.instance, self.seq, &self.requests_root(), &self.metadata)
    }

    /// `SHA-256(len(requests) ‖ (len(r) ‖ r)…)`, little-endian u64 lengths.
    pub fn requests_root(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update((self.requests.len() as u64).to_le_bytes());
        for r in &self.requests {
            h.update((r.len() as u64).to_le_bytes());
            h.update(r);
        }
        h.finalize().into()
    }

    /// Total size of the requests in bytes.
    pub fn request_bytes(&self) -> usize {
        self.requests.iter().map(Vec::len).sum()
    }
}

/// The digest of a proposal from its parts ([`Proposal::digest`]).
pub fn proposal_digest(instance: InstanceId, seq: Seq, requests_root: &[u8; 32], metadata: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update(tags::PROPOSAL);
    h.update(instance.0.to_le_bytes());
    h.update(seq.to_le_bytes());
    h.update(requests_root);
    h.update((metadata.len() as u64).to_le_bytes());
    h.update(metadata);
    Digest(h.finalize().into())
}

/// A proposal with its digest computed once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposed {
    /// The proposal.
    pub proposal: Arc<Proposal>,
    /// `proposal.digest()`.
    pub digest: Digest,
}

impl Proposed {
    /// Wraps a proposal and computes its digest.
    pub fn new(proposal: Proposal) -> Proposed {
        let digest = proposal.digest();
        Proposed {
            proposal: Arc::new(proposal),
            digest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_math() {
        let cases = [
            (1, 0, 1),
            (2, 0, 2),
            (3, 0, 2),
            (4, 1, 3),
            (5, 1, 4),
            (7, 2, 5),
            (10, 3, 7),
        ];
        for (n, f, q) in cases {
            assert_eq!(Quorum::new(n), Quorum { n, f, q }, "n={n}");
            // two quorums intersect in at least f+1 replicas
            assert!(2 * q > n + f, "n={n}");
        }
    }

    #[test]
    fn member_lists_are_checked_and_rotate_over_their_ids() {
        assert_eq!(Members::new(vec![]), Err(MembersError::Empty));
        assert_eq!(
            Members::new(vec![0, 2, 2]),
            Err(MembersError::NotSortedOrRepeated { before: 2, after: 2 })
        );
        assert_eq!(
            Members::new(vec![3, 1]),
            Err(MembersError::NotSortedOrRepeated { before: 3, after: 1 })
        );
        assert!(matches!(
            Members::new((0..=MAX_MEMBERS as u32).collect()),
            Err(MembersError::TooMany { .. })
        ));
        let m = Members::new(vec![0, 2, 3, 4]).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m.quorum(), Quorum::new(4));
        assert!(m.contains(2) && !m.contains(1) && !m.contains(5));
        let leaders: Vec<ReplicaId> = (0..6).map(|v| m.leader(InstanceId(0), v)).collect();
        assert_eq!(leaders, vec![0, 2, 3, 4, 0, 2]);
        assert_eq!(m.leader(InstanceId(1), 0), 2);
        assert_eq!(
            m.leader(InstanceId(0), u64::MAX),
            m.ids()[(u64::MAX % 4) as usize]
        );
        assert_eq!(m.after(1).collect::<Vec<_>>(), vec![2, 3, 4, 0]);
        assert_eq!(m.after(4).collect::<Vec<_>>(), vec![0, 2, 3, 4]);
        assert_eq!(m.after(0).collect::<Vec<_>>(), vec![2, 3, 4, 0]);
        assert_eq!(m.max_id(), 4);
        assert_eq!(Members::contiguous(0).ids(), &[0]);
        assert_eq!(Members::contiguous(3).ids(), &[0, 1, 2]);
    }

    #[test]
    fn digest_binds_instance_seq_and_payload() {
        let p = Proposal {
            instance: InstanceId(0),
            seq: 1,
            requests: vec![b"ab".to_vec(), b"c".to_vec()],
            metadata: vec![],
        };
        let mut q = p.clone();
        q.requests = vec![b"a".to_vec(), b"bc".to_vec()];
        assert_ne!(p.digest(), q.digest());
        let mut r = p.clone();
        r.instance = InstanceId(1);
        assert_ne!(p.digest(), r.digest());
        let mut s = p.clone();
        s.seq = 2;
        assert_ne!(p.digest(), s.digest());
    }
}
