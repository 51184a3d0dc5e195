//! The two stages the pipeline hands released txs to — signature verification and
//! validate-and-commit — as traits. Remote implementations with failover live in
//! [`crate::remote`]; in-process implementations (the verifier and the validator-committer
//! in the sidecar's process) are wired by the `committer` composition crate.

use crate::Result;
use std::sync::Arc;
use types::{NamespacePolicy, Status, Tx, TxId, TxOutcome, VcTx};
use wire::encode::TxBody;

/// A batch of txs to verify.
pub type VerifyBatch = Vec<(TxId, Arc<Tx>)>;

/// Signature verification: `None` = every namespace endorsement verifies, else the status.
#[tonic::async_trait]
pub trait VerifyStage: Send + Sync {
    /// Verifies a batch under every policy set before the call.
    async fn verify(&self, batch: VerifyBatch) -> Result<Vec<Option<Status>>>;
    /// [`VerifyStage::verify`] of a borrowed batch, given each tx's encoded body too
    /// (`bodies[i]` is `batch[i]`'s): a stage that sends the txs splices the bodies
    /// instead of encoding the txs again. By default the bodies are not used (and the
    /// batch is copied for `verify`).
    async fn verify_encoded(&self, batch: &VerifyBatch, bodies: Vec<TxBody>) -> Result<Vec<Option<Status>>> {
        drop(bodies);
        self.verify(batch.clone()).await
    }
    /// Sets a namespace policy; returns once every later `verify` sees it.
    async fn set_policy(&self, ns: &str, policy: &NamespacePolicy) -> Result<()>;
}

/// Validate and commit, plus the committer's persistent progress.
#[tonic::async_trait]
pub trait CommitStage: Send + Sync {
    /// Validates and commits a batch; resubmission of a tx answers its stored status.
    async fn process(&self, batch: Vec<VcTx>) -> Result<Vec<TxOutcome>>;
    /// [`CommitStage::process`], given each tx's encoded body too (`bodies[i]` is
    /// `batch[i]`'s), as for [`VerifyStage::verify_encoded`]. By default the bodies are
    /// not used.
    async fn process_encoded(&self, batch: Vec<VcTx>, bodies: Vec<TxBody>) -> Result<Vec<TxOutcome>> {
        drop(bodies);
        self.process(batch).await
    }
    /// Records `block` as the last fully committed block.
    async fn set_last_committed(&self, block: u64) -> Result<()>;
    /// The last fully committed block, if any.
    async fn last_committed(&self) -> Result<Option<u64>>;
    /// Committed namespace policies (`_meta` rows: namespace, encoded policy).
    async fn policies(&self) -> Result<Vec<(String, Vec<u8>)>>;
}
