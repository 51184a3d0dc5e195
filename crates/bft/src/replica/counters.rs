//! What a replica spends: messages, signatures and WAL writes, counted by the engine
//! itself so that tests can hold the cost of a decision to a number and a node can
//! export it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::crypto::{Signature, Signer, Verifier};
use crate::types::ReplicaId;

/// Work a replica did since it was built or restored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Peer messages handed to [`crate::Replica::handle`] (`Input::Message`).
    pub messages_in: u64,
    /// Messages sent, one per addressee: a broadcast counts once per other member.
    pub messages_out: u64,
    /// Signatures this replica made (votes, view changes, checkpoint votes).
    pub signatures_made: u64,
    /// Signature verifications this replica ran (votes, certificates, view changes,
    /// new-view proofs, checkpoints, state transfer).
    pub signatures_verified: u64,
    /// `Output::Persist` entries.
    pub wal_entries: u64,
    /// Runs of consecutive `Output::Persist` entries: the shell appends and syncs each
    /// run once, so this is the number of WAL syncs the replica asked for.
    pub wal_syncs: u64,
    /// Decisions delivered (`Output::Deliver`).
    pub decisions: u64,
}

/// The signature counts, shared with the signer and verifier wrappers (they are
/// replaced when the replica set changes; the counts go on).
#[derive(Debug, Default)]
pub(super) struct SignatureTally {
    made: AtomicU64,
    verified: AtomicU64,
}

impl SignatureTally {
    pub(super) fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    pub(super) fn verified(&self) -> u64 {
        self.verified.load(Ordering::Relaxed)
    }
}

/// A signer that counts what it signs.
pub(super) struct CountingSigner {
    inner: Box<dyn Signer>,
    tally: Arc<SignatureTally>,
}

impl CountingSigner {
    pub(super) fn wrap(inner: Box<dyn Signer>, tally: &Arc<SignatureTally>) -> Box<dyn Signer> {
        Box::new(CountingSigner {
            inner,
            tally: tally.clone(),
        })
    }
}

impl Signer for CountingSigner {
    fn sign(&self, msg: &[u8]) -> Signature {
        self.tally.made.fetch_add(1, Ordering::Relaxed);
        self.inner.sign(msg)
    }
}

/// A verifier that counts what it verifies.
pub(super) struct CountingVerifier {
    inner: Arc<dyn Verifier>,
    tally: Arc<SignatureTally>,
}

impl CountingVerifier {
    pub(super) fn wrap(inner: Arc<dyn Verifier>, tally: &Arc<SignatureTally>) -> Arc<dyn Verifier> {
        Arc::new(CountingVerifier {
            inner,
            tally: tally.clone(),
        })
    }
}

impl Verifier for CountingVerifier {
    fn verify(&self, replica: ReplicaId, msg: &[u8], sig: &Signature) -> bool {
        self.tally.verified.fetch_add(1, Ordering::Relaxed);
        self.inner.verify(replica, msg, sig)
    }
}
