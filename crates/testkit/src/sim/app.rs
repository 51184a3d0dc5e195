//! The simulated application: a hash chain over decided proposals. Its metadata for
//! sequence `s` is the first 8 bytes of the digest of decision `s-1`, so followers
//! really verify proposals against application state that changes with decisions.
//!
//! It remembers every request it applied and refuses them again (in `verify_request`
//! and `verify_proposal`): the engine de-duplicates only within the decisions it keeps
//! after a checkpoint, and an application must recognise older repeats itself
//! (docs/bft.md "Checkpoints"). Its snapshot is `applied ‖ head ‖ sorted request
//! digests`, so checkpoints and state transfer are exercised by every simulation.

use std::collections::BTreeSet;
use std::sync::Arc;

use bft::crypto::TestKeys;
use bft::{Application, ChainId, Decision, Digest, Members, Membership, Proposal, ProposalContext, Seq};

/// One replica set of a reconfiguration scenario: its members' stable ids, keys from
/// `keys`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimSet {
    /// The members (a replica keeps its id in every set).
    pub members: Members,
    /// The secret the set's keys derive from ([`TestKeys::new`]).
    pub keys: u64,
}

impl SimSet {
    /// Replicas `0..n` with keys from `keys`.
    pub fn contiguous(n: u32, keys: u64) -> SimSet {
        SimSet {
            members: Members::contiguous(n),
            keys,
        }
    }
}

/// The cluster id of the set of `epoch` (epoch 0 is the engine's default id).
pub fn sim_chain(epoch: u64) -> ChainId {
    if epoch == 0 {
        return ChainId::default();
    }
    let mut c = [0x5e; 32];
    c[..8].copy_from_slice(&epoch.to_le_bytes());
    ChainId(c)
}

/// True iff `request` asks to move to the next replica set.
pub fn is_reconfiguration(request: &[u8]) -> bool {
    request.starts_with(b"reconf")
}

/// The set of `epoch` as replica `node` sees it.
pub fn sim_membership(node: u32, sets: &[SimSet], epoch: u64) -> Option<Membership> {
    let set = sets.get(usize::try_from(epoch).ok()?)?;
    let keys = TestKeys::new(set.keys);
    let member = set.members.contains(node);
    Some(Membership {
        epoch,
        chain: sim_chain(epoch),
        members: set.members.clone(),
        id: Some(node),
        verifier: Arc::new(keys.clone()),
        signer: member.then(|| Box::new(keys.signer(node)) as Box<dyn bft::Signer>),
        params: None,
    })
}

/// Application state of one simulated replica (its "ledger"; survives crashes).
#[derive(Clone, Debug, Default)]
pub struct SimApp {
    /// The replica (its index in every set) and the sets of a reconfiguration
    /// scenario: a decided request [`is_reconfiguration`] moves to the next set (none:
    /// the set never changes).
    node: u32,
    sets: Arc<Vec<SimSet>>,
    /// The installed snapshot's epoch.
    base_epoch: u64,
    /// The installed snapshot's sequence number (0: none).
    base: Seq,
    /// The installed snapshot's head.
    base_head: [u8; 8],
    /// Decisions applied after `base`: the head after each, its request digests and
    /// whether it moved to the next set.
    chain: Vec<([u8; 8], Vec<[u8; 32]>, bool)>,
    /// Every request applied (installed ones included).
    decided: BTreeSet<[u8; 32]>,
}

impl SimApp {
    /// The application of replica `node` in a cluster whose sets are `sets` (the
    /// first is the one it starts in).
    pub fn with_sets(node: u32, sets: Arc<Vec<SimSet>>) -> SimApp {
        SimApp {
            node,
            sets,
            ..SimApp::default()
        }
    }

    /// The head: the 8-byte digest prefix of the last applied decision (zeros before).
    pub fn head(&self) -> [u8; 8] {
        self.chain.last().map_or(self.base_head, |(h, _, _)| *h)
    }

    /// Whether applying `decision` moves from the set of `epoch` to the next one.
    fn switches(&self, decision: &Decision, epoch: u64) -> bool {
        usize::try_from(epoch).is_ok_and(|e| e + 1 < self.sets.len())
            && decision.proposal.requests.iter().any(|r| is_reconfiguration(r))
    }

    /// Forgets the last `k` applied decisions (not below an installed snapshot): a
    /// shell that lost its last few deliveries in a crash.
    pub fn forget_last(&mut self, k: usize) {
        for _ in 0..k {
            let Some((_, digests, _)) = self.chain.pop() else {
                return;
            };
            for d in digests {
                self.decided.remove(&d);
            }
        }
    }

    fn is_new(&self, request: &[u8]) -> bool {
        !self.decided.contains(&Digest::of_request(request).0)
    }
}

impl Application for SimApp {
    fn verify_request(&mut self, request: &[u8]) -> bool {
        !request.is_empty() && self.is_new(request)
    }

    fn assemble(&mut self, _ctx: ProposalContext, _requests: &[Vec<u8>]) -> Vec<u8> {
        self.head().to_vec()
    }

    fn verify_proposal(&mut self, proposal: &Proposal) -> bool {
        proposal.seq == self.applied() + 1
            && proposal.metadata == self.head()
            && proposal.requests.iter().all(|r| self.is_new(r))
    }

    fn apply(&mut self, decision: &Decision) {
        assert_eq!(decision.seq(), self.applied() + 1, "application fed out of order");
        let d = decision.proposal.digest();
        let digests: Vec<[u8; 32]> = decision
            .proposal
            .requests
            .iter()
            .map(|r| Digest::of_request(r).0)
            .collect();
        self.decided.extend(digests.iter().copied());
        let switched = self.switches(decision, self.epoch());
        self.chain
            .push((d.0[..8].try_into().expect("8 bytes"), digests, switched));
    }

    fn applied(&self) -> Seq {
        self.base + self.chain.len() as Seq
    }

    fn snapshot(&self) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(24 + 32 * self.decided.len());
        out.extend_from_slice(&self.applied().to_le_bytes());
        out.extend_from_slice(&self.head());
        if !self.sets.is_empty() {
            out.extend_from_slice(&self.epoch().to_le_bytes());
        }
        for d in &self.decided {
            out.extend_from_slice(d);
        }
        Some(out)
    }

    fn install_snapshot(&mut self, seq: Seq, snapshot: &[u8]) -> bool {
        let (Some(applied), Some(head)) = (snapshot.get(..8), snapshot.get(8..16)) else {
            return false;
        };
        // A reconfiguration scenario's snapshot carries the epoch after the head.
        let (epoch, rest) = if self.sets.is_empty() {
            (0, snapshot.get(16..))
        } else {
            match snapshot.get(16..24) {
                Some(e) => (
                    u64::from_le_bytes(e.try_into().expect("8 bytes")),
                    snapshot.get(24..),
                ),
                None => return false,
            }
        };
        let Some(rest) = rest else {
            return false;
        };
        let known_epoch = self.sets.is_empty() || usize::try_from(epoch).is_ok_and(|e| e < self.sets.len());
        if u64::from_le_bytes(applied.try_into().expect("8 bytes")) != seq
            || rest.len() % 32 != 0
            || !known_epoch
        {
            return false;
        }
        self.base = seq;
        self.base_head = head.try_into().expect("8 bytes");
        self.base_epoch = epoch;
        self.chain.clear();
        self.decided = rest
            .chunks_exact(32)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect();
        true
    }

    fn epoch(&self) -> u64 {
        self.base_epoch + self.chain.iter().filter(|(_, _, switched)| *switched).count() as u64
    }

    fn membership(&mut self) -> Option<Membership> {
        sim_membership(self.node, &self.sets, self.epoch())
    }

    fn membership_from(&mut self, decision: &Decision, epoch: u64) -> Option<Membership> {
        let before = epoch.checked_sub(1)?;
        self.switches(decision, before)
            .then(|| sim_membership(self.node, &self.sets, epoch))
            .flatten()
    }
}
