//! Committer signature verifier (FX §3.2): checks each namespace endorsement of a tx
//! against the namespace's policy.
//!
//! - [`Policies`] (crate `policy`) is the pure core: the parsed namespace keys and the
//!   per-tx rule.
//! - [`Verifier`] verifies whole batches in parallel with batch signature verification
//!   (`policy::batch`), with the same verdicts as [`Policies::verify_tx`] tx by tx.
//! - [`service`] is the gRPC shell (`SigVerifier.Verify`), its client is `clients::VerifierClient`.
//!
//! A namespace policy is one public key of a scheme (`ed25519`, `ecdsa-p256`, or
//! `bls12-381` — the group key of a t-of-n threshold sharing, so "t of n endorsers" is one
//! aggregated signature). A namespace is endorsed when at least one of its endorsements is
//! a valid signature by that key over the namespace's canonical bytes
//! (`types::endorsement::namespace_signing_bytes`). `_meta` txs are endorsed under the
//! meta policy (genesis or configuration). Parsed keys are cached per namespace.

pub mod metrics;
pub mod node;
pub mod service;

pub use policy::{Policies, batch, parse_policy_key, policy_of, policy_scheme_of, scheme_of};
use std::sync::Arc;
use types::{Status, Tx, TxId};

/// Errors of the signature verifier.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A namespace policy is unusable.
    #[error(transparent)]
    Policy(#[from] policy::Error),
    /// The verification thread pool could not be started.
    #[error("starting {threads} verification threads: {reason}")]
    ThreadPool {
        /// The requested number of threads.
        threads: usize,
        /// Why the pool did not start.
        reason: String,
    },
    /// The listener could not be bound.
    #[error(transparent)]
    Listen(#[from] wire::node::ListenError),
    /// Its metrics could not be made.
    #[error("sigverifier metrics: {0}")]
    Metrics(#[from] telemetry::Error),
    /// The server stopped on its own.
    #[error(transparent)]
    Serve(#[from] wire::node::ServeError),
}

/// Result alias of the signature verifier.
pub type Result<T> = std::result::Result<T, Error>;

/// Batch verification on a dedicated rayon pool of a configured size. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Verifier {
    pool: Arc<rayon::ThreadPool>,
    /// Batch sizes following the bad-signature share of this verifier's calls.
    adaptive: Arc<batch::Adaptive>,
}

impl Verifier {
    /// A verifier with `threads` threads (0 = one per available core).
    pub fn new(threads: usize) -> Result<Verifier> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("sigverify-{i}"))
            .build()
            .map_err(|e| Error::ThreadPool {
                threads,
                reason: e.to_string(),
            })?;
        Ok(Verifier {
            pool: Arc::new(pool),
            adaptive: Arc::new(batch::Adaptive::new(batch::Chunks::default())),
        })
    }

    /// The same verifier with other chunk sizes (signatures per rayon task, and the
    /// largest batch equation), and a fresh bad-signature estimate.
    pub fn with_chunks(mut self, chunks: batch::Chunks) -> Verifier {
        self.adaptive = Arc::new(batch::Adaptive::new(chunks));
        self
    }

    /// Number of verification threads.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Verifies `txs` under `policies` on this verifier's threads, blocking the caller
    /// until done (run it off async worker threads, or use [`Verifier::spawn`]).
    /// `result[i]` is `policies.verify_tx(&txs[i].0, &txs[i].1).err()`.
    pub fn verify(&self, policies: &Policies, txs: &[(TxId, Arc<Tx>)]) -> Vec<Option<Status>> {
        self.pool
            .install(|| batch::verify_batch_adaptive(policies, txs, &self.adaptive))
    }

    /// [`Policies::verify_tx`] tx by tx, in parallel on this verifier's threads, without
    /// batch signature verification (a baseline for benchmarks; same verdicts).
    pub fn verify_each(&self, policies: &Policies, txs: &[(TxId, Arc<Tx>)]) -> Vec<Option<Status>> {
        use rayon::prelude::*;
        self.pool.install(|| {
            txs.par_iter()
                .map(|(id, tx)| policies.verify_tx(id, tx).err())
                .collect()
        })
    }

    /// Runs [`Verifier::verify`] on the pool without blocking the caller; `done` gets
    /// the verdicts.
    pub fn spawn(
        &self,
        policies: Arc<Policies>,
        txs: Vec<(TxId, Arc<Tx>)>,
        done: impl FnOnce(Vec<Option<Status>>) + Send + 'static,
    ) {
        let adaptive = self.adaptive.clone();
        self.pool
            .spawn(move || done(batch::verify_batch_adaptive(&policies, &txs, &adaptive)));
    }
}
