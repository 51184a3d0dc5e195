//! The gRPC shell of the vcservice: a stream of tx batches in, a stream of status batches
//! out, pipelined as prepare/validate → bounded queue → several commit workers, so that
//! validation of batch n+1 overlaps the commit of batch n.

use crate::engine::{Engine, Prepared};
use crate::metrics::Metrics;
use crate::model::{TxOutcome, VcTx};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status as GrpcStatus, Streaming};
use tracing::{error, instrument};
use types::TxId;
use wire::pb;

/// Pipeline sizes.
#[derive(Debug, Clone, Copy)]
pub struct PipelineConfig {
    /// Concurrent commit workers per stream.
    pub workers: std::num::NonZeroUsize,
    /// Depth of each bounded queue.
    pub queue: std::num::NonZeroUsize,
    /// Batches of all streams together decoded, queued or being committed at once; a
    /// stream does not read its next batch until it holds a permit, so batches in memory
    /// are bounded by this times the batch limit (`docs/limits.md`).
    pub max_in_flight: std::num::NonZeroUsize,
}

/// The tonic service.
pub struct VcGrpc {
    engine: Engine,
    in_flight: Arc<Semaphore>,
    /// Reads (`ReadRows`, `OwnedRows`) served at once; more wait for a permit.
    reads: Arc<Semaphore>,
    pipeline: PipelineConfig,
    metrics: Arc<Metrics>,
}

impl VcGrpc {
    /// A service over `engine`.
    pub fn new(engine: Engine, pipeline: PipelineConfig, metrics: Arc<Metrics>) -> VcGrpc {
        VcGrpc {
            engine,
            in_flight: Arc::new(Semaphore::new(pipeline.max_in_flight.get())),
            reads: Arc::new(Semaphore::new(crate::reads::MAX_CONCURRENT_READS)),
            pipeline,
            metrics,
        }
    }

    /// The tonic server wrapper.
    pub fn into_server(self) -> pb::vc_service_server::VcServiceServer<VcGrpc> {
        pb::vc_service_server::VcServiceServer::new(self)
            .max_decoding_message_size(wire::limits::VCSERVICE_MAX_MESSAGE_BYTES)
            .max_encoding_message_size(wire::limits::COMMITTER_MAX_ANSWER_BYTES)
    }
}

impl VcGrpc {
    async fn read_permit(&self) -> Result<OwnedSemaphorePermit, GrpcStatus> {
        self.reads
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| GrpcStatus::unavailable("shutting down"))
    }
}

/// Converts and checks a wire tx (see [`crate::intake`]).
pub fn vc_tx_from_wire(t: pb::VcTx) -> Result<VcTx, GrpcStatus> {
    crate::intake::admit_tx(t)
}

pub use wire::convert::outcomes_to_wire;

fn internal(e: crate::Error) -> GrpcStatus {
    GrpcStatus::unavailable(e.to_string())
}

type StatusStream = Pin<Box<dyn Stream<Item = Result<pb::TxStatusBatch, GrpcStatus>> + Send>>;

#[tonic::async_trait]
impl pb::vc_service_server::VcService for VcGrpc {
    type CommitStream = StatusStream;

    #[instrument(skip_all)]
    async fn commit(
        &self,
        request: Request<Streaming<pb::VcBatch>>,
    ) -> Result<Response<Self::CommitStream>, GrpcStatus> {
        let mut incoming = request.into_inner();
        let (tx_prepared, rx_prepared) =
            mpsc::channel::<(Prepared, OwnedSemaphorePermit)>(self.pipeline.queue.get());
        let in_flight = self.in_flight.clone();
        let (tx_out, rx_out) = mpsc::channel(self.pipeline.queue.get());
        let engine = self.engine.clone();
        let metrics = self.metrics.clone();
        let tx_err = tx_out.clone();
        // Stage 1: decode, precheck, read and validate.
        tokio::spawn(async move {
            loop {
                // Room first: a batch is read and decoded only when the service can hold it.
                let Ok(permit) = in_flight.clone().acquire_owned().await else {
                    break;
                };
                let batch = match incoming.message().await {
                    Ok(Some(b)) => b,
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx_err.send(Err(e)).await;
                        break;
                    }
                };
                let txs = match crate::intake::admit_batch(batch) {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = tx_err.send(Err(e)).await;
                        break;
                    }
                };
                let prepared = engine.prepare(txs).await;
                metrics.queue_depth.with_label_values(&["commit"]).inc();
                if tx_prepared.send((prepared, permit)).await.is_err() {
                    break;
                }
            }
        });
        // Stage 2: commit workers sharing the queue.
        let rx_prepared = Arc::new(Mutex::new(rx_prepared));
        for _ in 0..self.pipeline.workers.get() {
            let rx = rx_prepared.clone();
            let tx_out = tx_out.clone();
            let engine = self.engine.clone();
            let metrics = self.metrics.clone();
            tokio::spawn(async move {
                loop {
                    let next = rx.lock().await.recv().await;
                    let Some((prepared, permit)) = next else { break };
                    metrics.queue_depth.with_label_values(&["commit"]).dec();
                    let reply = engine
                        .finish(prepared)
                        .await
                        .map(|o| outcomes_to_wire(&o))
                        .map_err(|e| {
                            error!(error = %e, "batch failed; no status decided");
                            internal(e)
                        });
                    let sent = tx_out.send(reply).await;
                    drop(permit);
                    if sent.is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx_out))))
    }

    async fn get_next_block(
        &self,
        _request: Request<pb::LastCommittedRequest>,
    ) -> Result<Response<pb::NextBlock>, GrpcStatus> {
        let last = self
            .engine
            .backend()
            .last_committed_block()
            .await
            .map_err(internal)?;
        // Checked: a stored number at the top of the range must never panic a handler.
        let number = match last {
            None => 0,
            Some(b) => b.checked_add(1).ok_or_else(|| {
                GrpcStatus::failed_precondition(format!("last committed block {b} has no successor"))
            })?,
        };
        Ok(Response::new(pb::NextBlock { number }))
    }

    async fn set_last_committed(
        &self,
        request: Request<pb::SetLastCommittedRequest>,
    ) -> Result<Response<pb::Ack>, GrpcStatus> {
        let n = request.into_inner().number;
        // Both backends store block numbers as signed 64-bit values (PostgreSQL INT8).
        if n > crate::MAX_BLOCK_NUMBER {
            return Err(GrpcStatus::invalid_argument(format!(
                "block number {n} is above the largest storable block number {}",
                crate::MAX_BLOCK_NUMBER
            )));
        }
        self.engine
            .backend()
            .set_last_committed_block(n)
            .await
            .map_err(internal)?;
        Ok(Response::new(pb::Ack {}))
    }

    async fn get_statuses(
        &self,
        request: Request<pb::StatusQuery>,
    ) -> Result<Response<pb::TxStatusBatch>, GrpcStatus> {
        // An id that is not well formed is never stored: it has no status to look up (and a
        // NUL byte would only make the database refuse the query).
        let ids: Vec<TxId> = request
            .into_inner()
            .tx_ids
            .into_iter()
            .filter(|id| types::txid::is_well_formed(id))
            .map(TxId)
            .collect();
        let found = self.engine.backend().statuses(&ids).await.map_err(internal)?;
        let outcomes: Vec<TxOutcome> = ids
            .into_iter()
            .filter_map(|id| {
                found
                    .get(&id)
                    .map(|&(status, height)| TxOutcome { id, status, height })
            })
            .collect();
        Ok(Response::new(outcomes_to_wire(&outcomes)))
    }

    async fn get_policies(
        &self,
        _request: Request<pb::PoliciesRequest>,
    ) -> Result<Response<pb::PolicyList>, GrpcStatus> {
        let rows = self
            .engine
            .backend()
            .scan(types::META_NAMESPACE)
            .await
            .map_err(internal)?;
        let policies = rows
            .into_iter()
            .filter_map(|r| {
                String::from_utf8(r.key).ok().map(|namespace| pb::PolicyUpdate {
                    namespace,
                    policy: r.value,
                })
            })
            .collect();
        Ok(Response::new(pb::PolicyList { policies }))
    }

    #[instrument(skip_all)]
    async fn read_rows(
        &self,
        request: Request<pb::RowsQuery>,
    ) -> Result<Response<pb::RowsResult>, GrpcStatus> {
        let q = crate::reads::rows_request(request.into_inner())?;
        let _permit = self.read_permit().await?;
        let snapshot = self
            .engine
            .backend()
            .read_rows(&q.namespace, &q.keys, crate::reads::READ_MAX_BYTES)
            .await
            .map_err(internal)?;
        Ok(Response::new(crate::reads::snapshot_to_wire(snapshot)))
    }

    #[instrument(skip_all)]
    async fn owned_rows(
        &self,
        request: Request<pb::OwnedQuery>,
    ) -> Result<Response<pb::RowsResult>, GrpcStatus> {
        let q = crate::reads::owned_request(request.into_inner())?;
        let _permit = self.read_permit().await?;
        let snapshot = self
            .engine
            .backend()
            .owned_rows(&q.namespace, &q.owner, &q.page)
            .await
            .map_err(internal)?;
        Ok(Response::new(crate::reads::snapshot_to_wire(snapshot)))
    }
}
