//! The in-process committer: the sidecar's pipeline with the signature verifier and the
//! validator-committer in the same process. A composition crate: it wires role crates
//! (sidecar, vcservice, policy) and holds no protocol logic of its own.
//!
//! Used by `fabrx committer apply`, the sidecar node's in-process stages, the load
//! generator's committer target and the committer's integration tests. The JSON Lines
//! block format that `fabrx committer apply` reads lives here too ([`blockfile`]): it is
//! the format of this tool, not of any role.

pub mod blockfile;

use sidecar::pipeline::{Pipeline, PipelineConfig};
use sidecar::stages::{CommitStage, VerifyBatch, VerifyStage};
use std::sync::{Arc, RwLock};
use types::{NamespacePolicy, Status, TxOutcome, VcTx};
use vcservice::Engine;

/// Errors of the in-process committer and its block-file tool.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A line of a block file is not valid.
    #[error("line {line}: {detail}")]
    BlockFile {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
    /// The pipeline failed.
    #[error(transparent)]
    Sidecar(#[from] sidecar::Error),
}

/// Result alias of the in-process committer.
pub type Result<T> = std::result::Result<T, Error>;

/// A pipeline over `engine` in this process, with the policy that endorses `_meta` txs
/// and the policies already committed in the state (loaded from `_meta` rows).
pub async fn in_process(
    engine: Engine,
    meta_policy: &NamespacePolicy,
    config: PipelineConfig,
) -> sidecar::Result<Pipeline> {
    Pipeline::with_stages(
        Arc::new(LocalVerifier::new()),
        Arc::new(LocalCommitter::new(engine)),
        meta_policy,
        config,
        sidecar::metrics::Metrics::unexported()?,
    )
    .await
}

/// In-process verification with a copy-on-write policy cache, batched and parallel, off
/// the async workers; batch sizes follow the share of bad signatures it sees.
pub struct LocalVerifier {
    policies: RwLock<Arc<policy::Policies>>,
    adaptive: Arc<policy::batch::Adaptive>,
}

impl Default for LocalVerifier {
    fn default() -> LocalVerifier {
        LocalVerifier {
            policies: RwLock::default(),
            adaptive: Arc::new(policy::batch::Adaptive::new(policy::batch::Chunks::default())),
        }
    }
}

impl LocalVerifier {
    /// A verifier with no policies.
    pub fn new() -> LocalVerifier {
        LocalVerifier::default()
    }

    fn snapshot(&self) -> Arc<policy::Policies> {
        match self.policies.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

#[tonic::async_trait]
impl VerifyStage for LocalVerifier {
    async fn verify(&self, batch: VerifyBatch) -> sidecar::Result<Vec<Option<Status>>> {
        let policies = self.snapshot();
        // Batched (Ed25519 and BLS batch equations) and parallel over the rayon pool;
        // equal to `verify_tx` per tx (crates/sigverifier/tests/equivalence.rs).
        let adaptive = self.adaptive.clone();
        tokio::task::spawn_blocking(move || {
            policy::batch::verify_batch_adaptive(&policies, &batch, &adaptive)
        })
        .await
        .map_err(|e| sidecar::Error::Stage {
            stage: "verify",
            detail: e.to_string(),
        })
    }

    async fn set_policy(&self, ns: &str, policy: &NamespacePolicy) -> sidecar::Result<()> {
        let mut guard = match self.policies.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        Arc::make_mut(&mut guard).set(ns, policy)?;
        Ok(())
    }
}

/// The validator-committer in this process, as the pipeline's commit stage.
pub struct LocalCommitter {
    engine: Engine,
}

impl LocalCommitter {
    /// The commit stage over `engine`.
    pub fn new(engine: Engine) -> LocalCommitter {
        LocalCommitter { engine }
    }
}

fn commit_error(e: vcservice::Error) -> sidecar::Error {
    sidecar::Error::Commit { source: Box::new(e) }
}

#[tonic::async_trait]
impl CommitStage for LocalCommitter {
    async fn process(&self, batch: Vec<VcTx>) -> sidecar::Result<Vec<TxOutcome>> {
        self.engine.process(batch).await.map_err(commit_error)
    }

    async fn set_last_committed(&self, block: u64) -> sidecar::Result<()> {
        self.engine
            .backend()
            .set_last_committed_block(block)
            .await
            .map_err(commit_error)
    }

    async fn last_committed(&self) -> sidecar::Result<Option<u64>> {
        self.engine
            .backend()
            .last_committed_block()
            .await
            .map_err(commit_error)
    }

    async fn policies(&self) -> sidecar::Result<Vec<(String, Vec<u8>)>> {
        let rows = self
            .engine
            .backend()
            .scan(types::META_NAMESPACE)
            .await
            .map_err(commit_error)?;
        Ok(rows
            .into_iter()
            .filter_map(|r| String::from_utf8(r.key).ok().map(|ns| (ns, r.value)))
            .collect())
    }
}
