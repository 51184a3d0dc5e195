//! Checkpoints (PBFT §4.3, "garbage collection"). Every `Config::checkpoint_interval`
//! decisions each replica takes a snapshot of its application state and signs
//! `(instance, seq, digest of the snapshot)`. A quorum of equal votes makes the
//! checkpoint *stable*: at least f+1 correct replicas hold that state after decision
//! `seq`, so the snapshot can stand in for every decision up to `seq`. The replica then
//! prunes its WAL, the decisions it keeps for state transfer and its de-duplication set,
//! and serves the snapshot ([`StableCheckpoint`]) to a replica too far behind for
//! decisions.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::certificate::{Certificate, Phase};
use crate::crypto::{Signature, Verifier};
use crate::tags;
use crate::types::{ChainId, Digest, InstanceId, Members, ReplicaId, Seq};
use crate::{Error, Result};

/// The byte string a replica signs for a checkpoint vote in cluster `chain`:
/// `tag ‖ chain ‖ instance ‖ seq ‖ digest`.
pub fn checkpoint_bytes(chain: &ChainId, instance: InstanceId, seq: Seq, digest: &Digest) -> Vec<u8> {
    let mut out = Vec::with_capacity(tags::CHECKPOINT.len() + 32 + 4 + 8 + 32);
    out.extend_from_slice(tags::CHECKPOINT);
    out.extend_from_slice(&chain.0);
    out.extend_from_slice(&instance.0.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&digest.0);
    out
}

/// "After decision `seq` my application state has snapshot digest `digest`."
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointVote {
    /// Instance.
    pub instance: InstanceId,
    /// The voter (bound by the signature).
    pub from: ReplicaId,
    /// The decision after which the snapshot was taken.
    pub seq: Seq,
    /// [`Digest::of_snapshot`] of the snapshot.
    pub digest: Digest,
    /// Signature over [`checkpoint_bytes`].
    pub signature: Signature,
}

impl CheckpointVote {
    /// Checks the voter's signature (for cluster `chain`; the voter must be one of
    /// `members`).
    pub fn verify(&self, chain: &ChainId, verifier: &dyn Verifier, members: &Members) -> bool {
        let bytes = checkpoint_bytes(chain, self.instance, self.seq, &self.digest);
        members.contains(self.from) && verifier.verify(self.from, &bytes, &self.signature)
    }
}

/// A checkpoint a quorum signed, with the snapshot and the commit certificate of the
/// decision it follows (a view change reports that certificate as the replica's last
/// decision).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StableCheckpoint {
    /// Instance.
    pub instance: InstanceId,
    /// The decision after which the snapshot was taken.
    pub seq: Seq,
    /// [`Digest::of_snapshot`] of `snapshot`.
    pub digest: Digest,
    /// Signatures of distinct replicas over [`checkpoint_bytes`], sorted by replica id.
    pub signatures: Vec<(ReplicaId, Signature)>,
    /// The application snapshot.
    pub snapshot: Arc<Vec<u8>>,
    /// Commit certificate of decision `seq`.
    pub last_commit: Certificate,
}

impl StableCheckpoint {
    /// Checks that a quorum of distinct `members` signed `(instance, seq, digest)`
    /// for cluster `chain`, that `snapshot` has that digest, and that `last_commit` is a
    /// valid commit certificate of decision `seq`.
    pub fn verify(&self, chain: &ChainId, verifier: &dyn Verifier, members: &Members) -> Result<()> {
        let bad = |reason: &str| Error::BadCheckpoint {
            seq: self.seq,
            reason: reason.to_string(),
        };
        if Digest::of_snapshot(&self.snapshot) != self.digest {
            return Err(bad("the snapshot does not have the signed digest"));
        }
        let c = &self.last_commit;
        if c.phase != Phase::Commit || c.seq != self.seq || c.instance != self.instance {
            return Err(bad(
                "the certificate is not the commit of the checkpoint's decision",
            ));
        }
        c.verify(chain, verifier, members)?;
        let bytes = checkpoint_bytes(chain, self.instance, self.seq, &self.digest);
        let mut signers = BTreeSet::new();
        for (id, sig) in &self.signatures {
            if !members.contains(*id) || !signers.insert(*id) || !verifier.verify(*id, &bytes, sig) {
                return Err(bad(&format!("signature of replica {id} is invalid or repeated")));
            }
        }
        if (signers.len() as u32) < members.quorum().q {
            return Err(bad(&format!("{} signatures, fewer than a quorum", signers.len())));
        }
        Ok(())
    }

    /// Approximate size in memory and on the wire.
    pub fn approx_bytes(&self) -> usize {
        let sigs: usize = self.signatures.iter().map(|(_, s)| s.0.len() + 8).sum();
        let cert: usize = self
            .last_commit
            .signatures
            .iter()
            .map(|(_, s)| s.0.len() + 8)
            .sum();
        self.snapshot.len() + sigs + cert + 128
    }
}
