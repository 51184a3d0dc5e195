//! The gRPC shell of the signature verifier: `SigVerifier.Verify` (FX §3.2).
//!
//! One task per stream reads the requests in order. A `PolicyUpdate` is applied to the
//! stream's policy snapshot copy-on-write (`Arc::make_mut`): batches already handed to
//! the pool keep the snapshot they started with, every batch read after the update sees
//! it. Each batch takes a permit of a per-stream semaphore (`max_in_flight`), is verified
//! on the [`Verifier`]'s rayon pool, and its `VerifyResult` goes to a bounded output
//! channel; the permit is released once the answer is queued, so a slow reader of the
//! answers slows the writer of the batches. Answers carry the batch's `request_id` and
//! may come out of order.
//!
//! Errors: a policy that does not decode or whose key does not parse, or a request
//! without content, ends the stream with `InvalidArgument` after the batches received
//! before it have been answered. A `VerifyTx` without a tx body is answered
//! `ABORTED_SIGNATURE_INVALID` (it carries no endorsement that could verify): upstream
//! intake never produces one, and ending the stream would make the caller resubmit every
//! other batch in flight for one bad entry.

use crate::metrics::Metrics;
use crate::{Policies, Verifier};
use prost::Message;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status as GrpcStatus, Streaming};
use tracing::{debug, instrument, warn};
use types::{NamespacePolicy, Status, Tx, TxId};
use wire::pb;
use wire::pb::verify_stream_request::Kind;

/// Largest gRPC message accepted or sent (a batch of txs).
pub use wire::limits::SIGVERIFIER_MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES;

/// Per-stream limits of the service.
#[derive(Debug, Clone, Copy)]
pub struct ServiceConfig {
    /// Batches of one stream verified or waiting for the pool at once; the reader stops
    /// reading the stream while this many are unanswered.
    pub max_in_flight: NonZeroUsize,
    /// Answers buffered for the client before verification pauses.
    pub out_queue: NonZeroUsize,
    /// Batches of all streams together verified or waiting at once; a stream does not
    /// read its next message until it holds a permit, so decoded batches in memory are
    /// bounded by this times the decoded-batch limit (`docs/limits.md`).
    pub max_in_flight_total: NonZeroUsize,
    /// Connection-level limits of the server.
    pub server: wire::server::ServerLimits,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        let n = |v: usize| NonZeroUsize::new(v).unwrap_or(NonZeroUsize::MIN);
        ServiceConfig {
            max_in_flight: n(8),
            out_queue: n(16),
            max_in_flight_total: n(8),
            server: wire::server::ServerLimits::default(),
        }
    }
}

/// The tonic service.
#[derive(Debug, Clone)]
pub struct VerifierService {
    verifier: Verifier,
    total: Arc<Semaphore>,
    config: ServiceConfig,
    metrics: Arc<Metrics>,
}

type Answer = Result<pb::VerifyResult, GrpcStatus>;

impl VerifierService {
    /// A service verifying on `verifier`'s pool.
    pub fn new(verifier: Verifier, config: ServiceConfig, metrics: Arc<Metrics>) -> VerifierService {
        VerifierService {
            verifier,
            total: Arc::new(Semaphore::new(config.max_in_flight_total.get())),
            config,
            metrics,
        }
    }

    /// The tonic server wrapper.
    pub fn into_server(self) -> pb::sig_verifier_server::SigVerifierServer<VerifierService> {
        pb::sig_verifier_server::SigVerifierServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

type ResultStream = Pin<Box<dyn Stream<Item = Answer> + Send>>;

#[tonic::async_trait]
impl pb::sig_verifier_server::SigVerifier for VerifierService {
    type VerifyStream = ResultStream;

    #[instrument(skip_all)]
    async fn verify(
        &self,
        request: Request<Streaming<pb::VerifyStreamRequest>>,
    ) -> Result<Response<Self::VerifyStream>, GrpcStatus> {
        let (tx_out, rx_out) = mpsc::channel(self.config.out_queue.get());
        let stream = StreamTask {
            verifier: self.verifier.clone(),
            max_in_flight: self.config.max_in_flight.get(),
            in_flight: Arc::new(Semaphore::new(self.config.max_in_flight.get())),
            total: self.total.clone(),
            policies: Arc::new(Policies::new()),
            metrics: self.metrics.clone(),
            tx_out,
        };
        tokio::spawn(stream.run(request.into_inner()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx_out))))
    }
}

/// A batch's room in its stream and in the whole service, released once it is answered.
struct Permits {
    _total: OwnedSemaphorePermit,
    _stream: OwnedSemaphorePermit,
}

/// The state of one verify stream.
struct StreamTask {
    verifier: Verifier,
    max_in_flight: usize,
    in_flight: Arc<Semaphore>,
    total: Arc<Semaphore>,
    policies: Arc<Policies>,
    metrics: Arc<Metrics>,
    tx_out: mpsc::Sender<Answer>,
}

impl StreamTask {
    async fn run(mut self, mut incoming: Streaming<pb::VerifyStreamRequest>) {
        self.metrics.streams.inc();
        loop {
            // Hold the permits before reading: a batch is decoded only when there is room.
            let Ok(permits) = self.permits().await else { break };
            let outcome = match incoming.message().await {
                Ok(Some(req)) => Ok(req.kind),
                Ok(None) => break,
                // Bytes that do not decode, or a message over its limit: the client learns
                // why (never a silent OK).
                Err(e) => Err(e),
            };
            let outcome = match outcome {
                Err(e) => {
                    drop(permits);
                    Err(e)
                }
                Ok(kind) => self.on_message(kind, permits).await,
            };
            if let Err(status) = outcome {
                warn!(code = ?status.code(), error = %status.message(), "ending verify stream");
                // Answer what came before, then end the stream with the error.
                let _ = self.in_flight.acquire_many(self.max_in_flight as u32).await;
                let _ = self.tx_out.send(Err(status)).await;
                break;
            }
        }
        self.metrics.streams.dec();
    }

    async fn permits(&self) -> Result<Permits, tokio::sync::AcquireError> {
        let total = self.total.clone().acquire_owned().await?;
        let stream = self.in_flight.clone().acquire_owned().await?;
        Ok(Permits {
            _total: total,
            _stream: stream,
        })
    }

    async fn on_message(&mut self, kind: Option<Kind>, permits: Permits) -> Result<(), GrpcStatus> {
        match kind {
            Some(Kind::Policy(update)) => self.on_policy(update),
            Some(Kind::Batch(batch)) => {
                self.on_batch(batch, permits);
                Ok(())
            }
            None => Err(GrpcStatus::invalid_argument(
                "VerifyStreamRequest carries neither a policy nor a batch",
            )),
        }
    }

    fn on_policy(&mut self, update: pb::PolicyUpdate) -> Result<(), GrpcStatus> {
        let policy = decode_policy(&update)?;
        Arc::make_mut(&mut self.policies)
            .set(&update.namespace, &policy)
            .map_err(|e| GrpcStatus::invalid_argument(e.to_string()))?;
        debug!(ns = %update.namespace, "policy updated");
        self.metrics.policy_updates.inc();
        Ok(())
    }

    fn on_batch(&mut self, batch: pb::VerifyBatch, permit: Permits) {
        let request_id = batch.request_id;
        let mut missing = Vec::new();
        let txs: Vec<(TxId, Arc<Tx>)> = batch
            .txs
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let tx = t.tx.map(Tx::from).unwrap_or_else(|| {
                    missing.push(i);
                    Tx::default()
                });
                (TxId(t.tx_id), Arc::new(tx))
            })
            .collect();
        if !missing.is_empty() {
            warn!(
                request_id,
                count = missing.len(),
                "txs without body; answered invalid"
            );
        }
        self.metrics.in_flight.inc();
        let (tx_done, rx_done) = oneshot::channel();
        let metrics = self.metrics.clone();
        self.verifier
            .spawn(self.policies.clone(), txs, move |mut verdicts| {
                for i in missing {
                    verdicts[i] = Some(Status::AbortedSignatureInvalid);
                }
                let _ = tx_done.send(verdicts);
            });
        let started = Instant::now();
        tokio::spawn(answer(
            request_id,
            rx_done,
            self.tx_out.clone(),
            permit,
            metrics,
            started,
        ));
    }
}

/// Sends the verdicts of one batch when the pool is done with it.
async fn answer(
    request_id: u64,
    rx_done: oneshot::Receiver<Vec<Option<Status>>>,
    tx_out: mpsc::Sender<Answer>,
    _permit: Permits,
    metrics: Arc<Metrics>,
    started: Instant,
) {
    let Ok(verdicts) = rx_done.await else {
        return; // the pool dropped the job: only at shutdown
    };
    let invalid = verdicts.iter().filter(|v| v.is_some()).count() as u64;
    metrics.batch_seconds.observe(started.elapsed().as_secs_f64());
    metrics.batches.inc();
    metrics.txs.with_label_values(&["invalid"]).inc_by(invalid);
    metrics
        .txs
        .with_label_values(&["valid"])
        .inc_by(verdicts.len() as u64 - invalid);
    metrics.in_flight.dec();
    let codes = verdicts.iter().map(|v| v.map_or(0, Status::code)).collect();
    let _ = tx_out.send(Ok(pb::VerifyResult { request_id, codes })).await;
}

/// Decodes the policy of an update (`InvalidArgument` when it does not).
pub fn decode_policy(update: &pb::PolicyUpdate) -> Result<NamespacePolicy, GrpcStatus> {
    if update.namespace.is_empty() {
        return Err(GrpcStatus::invalid_argument("policy update without a namespace"));
    }
    let raw = pb::NamespacePolicy::decode(update.policy.as_slice()).map_err(|e| {
        GrpcStatus::invalid_argument(format!(
            "namespace {}: policy does not decode: {e}",
            update.namespace
        ))
    })?;
    NamespacePolicy::try_from(raw)
        .map_err(|e| GrpcStatus::invalid_argument(format!("namespace {}: bad policy: {e}", update.namespace)))
}
