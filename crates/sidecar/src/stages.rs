//! The two stages the pipeline hands released txs to — signature verification and
//! validate-and-commit — as traits, with in-process implementations. Remote
//! implementations with failover live in [`crate::remote`].

use crate::{Error, Result};
use sigverifier::Policies;
use std::sync::{Arc, RwLock};
use types::{NamespacePolicy, Status, Tx, TxId};
use vcservice::{Engine, TxOutcome, VcTx};

/// A batch of txs to verify.
pub type VerifyBatch = Vec<(TxId, Arc<Tx>)>;

/// Signature verification: `None` = every namespace endorsement verifies, else the status.
#[tonic::async_trait]
pub trait VerifyStage: Send + Sync {
    /// Verifies a batch under every policy set before the call.
    async fn verify(&self, batch: VerifyBatch) -> Result<Vec<Option<Status>>>;
    /// Sets a namespace policy; returns once every later `verify` sees it.
    async fn set_policy(&self, ns: &str, policy: &NamespacePolicy) -> Result<()>;
}

/// Validate and commit, plus the committer's persistent progress.
#[tonic::async_trait]
pub trait CommitStage: Send + Sync {
    /// Validates and commits a batch; resubmission of a tx answers its stored status.
    async fn process(&self, batch: Vec<VcTx>) -> Result<Vec<TxOutcome>>;
    /// Records `block` as the last fully committed block.
    async fn set_last_committed(&self, block: u64) -> Result<()>;
    /// The last fully committed block, if any.
    async fn last_committed(&self) -> Result<Option<u64>>;
    /// Committed namespace policies (`_meta` rows: namespace, encoded policy).
    async fn policies(&self) -> Result<Vec<(String, Vec<u8>)>>;
}

/// In-process verification with a copy-on-write policy cache, batched and parallel, off
/// the async workers.
#[derive(Default)]
pub struct LocalVerifier {
    policies: RwLock<Arc<Policies>>,
}

impl LocalVerifier {
    /// A verifier with no policies.
    pub fn new() -> LocalVerifier {
        LocalVerifier::default()
    }

    fn snapshot(&self) -> Arc<Policies> {
        match self.policies.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

#[tonic::async_trait]
impl VerifyStage for LocalVerifier {
    async fn verify(&self, batch: VerifyBatch) -> Result<Vec<Option<Status>>> {
        let policies = self.snapshot();
        // Batched (Ed25519 and BLS batch equations) and parallel over the rayon pool;
        // equal to `verify_tx` per tx (crates/sigverifier/tests/equivalence.rs).
        tokio::task::spawn_blocking(move || policies.verify_batch(&batch))
            .await
            .map_err(|e| Error::Stage {
                stage: "verify",
                detail: e.to_string(),
            })
    }

    async fn set_policy(&self, ns: &str, policy: &NamespacePolicy) -> Result<()> {
        let mut guard = match self.policies.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        Arc::make_mut(&mut guard).set(ns, policy)?;
        Ok(())
    }
}

/// The in-process validator-committer.
#[tonic::async_trait]
impl CommitStage for Engine {
    async fn process(&self, batch: Vec<VcTx>) -> Result<Vec<TxOutcome>> {
        Ok(Engine::process(self, batch).await?)
    }

    async fn set_last_committed(&self, block: u64) -> Result<()> {
        Ok(self.backend().set_last_committed_block(block).await?)
    }

    async fn last_committed(&self) -> Result<Option<u64>> {
        Ok(self.backend().last_committed_block().await?)
    }

    async fn policies(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let rows = self.backend().scan(types::META_NAMESPACE).await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| String::from_utf8(r.key).ok().map(|ns| (ns, r.value)))
            .collect())
    }
}
