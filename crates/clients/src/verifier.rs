//! Client of `SigVerifier.Verify`: one stream per client, multiplexed by request id.
//!
//! [`VerifierClient`] is cheap to clone and usable from many tasks. Policy updates and
//! batches go down the same stream in the order their calls complete, so a batch sent
//! after [`VerifierClient::set_policy`] returned is verified under that policy. Answers
//! are matched to callers by request id. When the stream breaks (server gone, stream
//! ended with an error, keep-alive timeout), every pending and every later call returns
//! [`ClientError::Disconnected`] at once; the caller resubmits to another verifier
//! (answers are pure functions of policies and txs, so a resubmission is harmless).
//!
//! Requests are encoded by the caller's task before they are queued
//! ([`wire::encode::verify_batch_request`]: the bytes of the wire message, written
//! straight from the shared txs without copying them into protobuf messages first).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tracing::{debug, warn};
use types::{NamespacePolicy, Status, Tx, TxId};
use wire::encode::{Encoded, TxBody};
use wire::limits::SIGVERIFIER_MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES;
use wire::pb;

/// Errors of the verifier client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is not a valid URI.
    #[error("invalid endpoint {endpoint}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it was refused.
        reason: String,
    },
    /// The connection could not be established.
    #[error("connecting to {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The transport error.
        source: tonic::transport::Error,
    },
    /// The server refused to open the verify stream.
    #[error("opening the verify stream: {0}")]
    Open(#[from] tonic::Status),
    /// A policy the verifier would refuse (its key does not parse); nothing was sent.
    #[error("namespace {ns}: policy refused: {source}")]
    BadPolicy {
        /// The namespace.
        ns: String,
        /// Why the policy was refused.
        source: policy::Error,
    },
    /// The stream is broken: the call was not (or not entirely) answered. Resubmit
    /// elsewhere.
    #[error("verifier stream disconnected")]
    Disconnected,
    /// The server answered something that does not fit the request.
    #[error("request {request_id}: bad answer: {reason}")]
    Protocol {
        /// The request.
        request_id: u64,
        /// What was wrong.
        reason: String,
    },
}

/// Connection settings of a [`VerifierClient`].
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    /// Requests (policy updates and batches) buffered for the stream.
    pub queue: std::num::NonZeroUsize,
    /// Time allowed to establish the connection.
    pub connect_timeout: Duration,
    /// HTTP/2 keep-alive ping interval; a peer that does not answer a ping within
    /// `keep_alive_timeout` breaks the stream.
    pub keep_alive_interval: Duration,
    /// See `keep_alive_interval`.
    pub keep_alive_timeout: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            queue: std::num::NonZeroUsize::new(64).unwrap_or(std::num::NonZeroUsize::MIN),
            connect_timeout: Duration::from_secs(5),
            keep_alive_interval: Duration::from_secs(2),
            keep_alive_timeout: Duration::from_secs(5),
        }
    }
}

/// Callers waiting for answers; `None` once the stream broke.
type Pending = Mutex<Option<HashMap<u64, oneshot::Sender<Vec<u32>>>>>;

/// A multiplexed client of one signature verifier. Clones share the stream.
#[derive(Debug, Clone)]
pub struct VerifierClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoint: String,
    /// Encoded `VerifyStreamRequest`s, in the order they are to be sent.
    tx_req: mpsc::Sender<Encoded>,
    pending: Arc<Pending>,
    next_id: AtomicU64,
    /// Becomes `true` when the stream broke.
    rx_broken: watch::Receiver<bool>,
}

impl VerifierClient {
    /// Connects to the verifier at `endpoint` (`host:port` or `http://host:port`) and
    /// opens the verify stream.
    pub async fn connect(endpoint: &str) -> Result<VerifierClient, ClientError> {
        VerifierClient::connect_with(endpoint, ClientConfig::default()).await
    }

    /// [`VerifierClient::connect`] with explicit settings.
    pub async fn connect_with(endpoint: &str, config: ClientConfig) -> Result<VerifierClient, ClientError> {
        let uri = if endpoint.contains("://") {
            endpoint.to_string()
        } else {
            format!("http://{endpoint}")
        };
        let endpoint_config = wire::server::client_endpoint(uri)
            .map_err(|e| ClientError::InvalidEndpoint {
                endpoint: endpoint.to_string(),
                reason: e.to_string(),
            })?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(config.keep_alive_interval)
            .keep_alive_timeout(config.keep_alive_timeout)
            .keep_alive_while_idle(true);
        let channel =
            wire::server::connect(&endpoint_config)
                .await
                .map_err(|source| ClientError::Connect {
                    endpoint: endpoint.to_string(),
                    source,
                })?;
        let mut grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let (tx_req, rx_req) = mpsc::channel(config.queue.get());
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unknown(format!("service was not ready: {e}")))?;
        // `SigVerifier.Verify` as the generated client calls it, with requests that are
        // encoded already.
        let codec = wire::codec::BoundedCodec::<Encoded, pb::VerifyResult>::default();
        let path = tonic::codegen::http::uri::PathAndQuery::from_static("/fabrx.v1.SigVerifier/Verify");
        let mut req = tonic::Request::new(ReceiverStream::new(rx_req));
        req.extensions_mut()
            .insert(tonic::GrpcMethod::new("fabrx.v1.SigVerifier", "Verify"));
        let answers = grpc.streaming(req, path, codec).await?.into_inner();
        let pending: Arc<Pending> = Arc::new(Mutex::new(Some(HashMap::new())));
        let (tx_broken, rx_broken) = watch::channel(false);
        tokio::spawn(read_answers(
            answers,
            pending.clone(),
            tx_broken,
            endpoint.to_string(),
        ));
        Ok(VerifierClient {
            inner: Arc::new(Inner {
                endpoint: endpoint.to_string(),
                tx_req,
                pending,
                next_id: AtomicU64::new(1),
                rx_broken,
            }),
        })
    }

    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// Whether the stream is broken (every call returns [`ClientError::Disconnected`]).
    pub fn is_disconnected(&self) -> bool {
        lock(&self.inner.pending).is_none()
    }

    /// Sets the policy of namespace `ns` (`_meta` for the meta policy) for every batch
    /// sent after this returns. A policy whose key does not parse is refused here
    /// ([`ClientError::BadPolicy`]) instead of ending the stream for every caller.
    pub async fn set_policy(&self, ns: &str, policy: &NamespacePolicy) -> Result<(), ClientError> {
        if let Err(source) = policy::Policies::new().set(ns, policy) {
            return Err(ClientError::BadPolicy {
                ns: ns.to_string(),
                source,
            });
        }
        if self.is_disconnected() {
            return Err(ClientError::Disconnected);
        }
        let update = pb::VerifyStreamRequest {
            kind: Some(pb::verify_stream_request::Kind::Policy(pb::PolicyUpdate {
                namespace: ns.to_string(),
                policy: wire::encode_policy(policy),
            })),
        };
        self.send(Encoded::of(&update)).await
    }

    /// Verifies a batch: `result[i]` is `None` when `batch[i]` is valid, else its status
    /// (`ABORTED_SIGNATURE_INVALID`).
    ///
    /// The batch is only read (encoded), so a caller that may resubmit it elsewhere
    /// passes it by reference.
    pub async fn verify(
        &self,
        batch: impl AsRef<[(TxId, Arc<Tx>)]>,
    ) -> Result<Vec<Option<Status>>, ClientError> {
        self.verify_encoded(batch.as_ref(), &[]).await
    }

    /// [`VerifierClient::verify`], with `bodies[i]` (when given) the encoded body of
    /// `batch[i]`'s tx, sent as it is instead of encoding the tx again
    /// (`wire::encode::verify_batch_request_with_bodies`; the caller pairs them).
    pub async fn verify_encoded(
        &self,
        batch: &[(TxId, Arc<Tx>)],
        bodies: &[TxBody],
    ) -> Result<Vec<Option<Status>>, ClientError> {
        let request_id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx_answer, rx_answer) = oneshot::channel();
        match lock(&self.inner.pending).as_mut() {
            None => return Err(ClientError::Disconnected),
            Some(waiting) => waiting.insert(request_id, tx_answer),
        };
        // Forget the request if this future is dropped before its answer.
        let _guard = PendingGuard {
            pending: &self.inner.pending,
            request_id,
        };
        let request = wire::encode::verify_batch_request_with_bodies(request_id, batch, bodies);
        self.send(Encoded::from(request)).await?;
        let codes = rx_answer.await.map_err(|_| ClientError::Disconnected)?;
        decode_codes(request_id, batch.len(), &codes)
    }

    /// Queues a request for the stream; gives up as soon as the stream breaks, even
    /// while waiting for room in the queue.
    async fn send(&self, request: Encoded) -> Result<(), ClientError> {
        let mut rx_broken = self.inner.rx_broken.clone();
        tokio::select! {
            sent = self.inner.tx_req.send(request) => sent.map_err(|_| ClientError::Disconnected),
            _ = rx_broken.wait_for(|broken| *broken) => Err(ClientError::Disconnected),
        }
    }
}

fn lock(pending: &Pending) -> std::sync::MutexGuard<'_, Option<HashMap<u64, oneshot::Sender<Vec<u32>>>>> {
    // A poisoned lock only means a panic elsewhere while holding it; the map is intact.
    pending.lock().unwrap_or_else(|e| e.into_inner())
}

struct PendingGuard<'a> {
    pending: &'a Pending,
    request_id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if let Some(waiting) = lock(self.pending).as_mut() {
            waiting.remove(&self.request_id);
        }
    }
}

fn decode_codes(request_id: u64, expected: usize, codes: &[u32]) -> Result<Vec<Option<Status>>, ClientError> {
    if codes.len() != expected {
        return Err(ClientError::Protocol {
            request_id,
            reason: format!("{} codes for {expected} txs", codes.len()),
        });
    }
    codes
        .iter()
        .map(|&c| match c {
            0 => Ok(None),
            c => Status::from_code(c).map(Some).map_err(|e| ClientError::Protocol {
                request_id,
                reason: e.to_string(),
            }),
        })
        .collect()
}

/// Routes answers to their callers until the stream ends, then fails every caller.
async fn read_answers(
    mut answers: Streaming<pb::VerifyResult>,
    pending: Arc<Pending>,
    tx_broken: watch::Sender<bool>,
    endpoint: String,
) {
    loop {
        match answers.message().await {
            Ok(Some(answer)) => {
                let waiter = lock(&pending).as_mut().and_then(|w| w.remove(&answer.request_id));
                match waiter {
                    Some(w) => {
                        let _ = w.send(answer.codes);
                    }
                    None => debug!(request_id = answer.request_id, "answer for a forgotten request"),
                }
            }
            Ok(None) => {
                debug!(%endpoint, "verify stream ended");
                break;
            }
            Err(status) => {
                warn!(%endpoint, error = %status, "verify stream broke");
                break;
            }
        }
    }
    // Dropping the senders wakes every waiting caller with Disconnected.
    lock(&pending).take();
    tx_broken.send_replace(true);
}
