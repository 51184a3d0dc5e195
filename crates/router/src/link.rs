//! The seam between the router and a shard's batcher ([`BatcherLink`]) and its gRPC
//! implementation ([`GrpcLink`]): one persistent `BatcherIntake.Intake` stream per
//! batcher, answers matched by id, a bounded pending map, reconnection with
//! [`Backoff`]; a broken stream fails every pending request with [`Error::LinkDown`]
//! (`UNAVAILABLE`), and while it is down new requests fail at once the same way.

use crate::answer::BatcherAnswer;
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, warn};
use types::ShardId;
use wire::pb;
use wire::pb::batcher_intake_client::BatcherIntakeClient;

/// A link to the batcher of one shard.
#[async_trait::async_trait]
pub trait BatcherLink: Send + Sync {
    /// Forwards `request` under `id` (unique among the link's pending requests) and waits
    /// for the batcher's answer.
    async fn submit(&self, id: u64, request: Vec<u8>) -> Result<BatcherAnswer>;
}

/// Settings of a [`GrpcLink`].
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// The shard (for errors and logs).
    pub shard: ShardId,
    /// The batcher's `BatcherIntake` address, e.g. `http://127.0.0.1:7051`.
    pub uri: String,
    /// Most requests awaiting an answer on the link (and queued to be sent).
    pub max_pending: NonZeroUsize,
    /// Reconnect schedule.
    pub backoff: Backoff,
    /// Bound on establishing a connection and opening the stream.
    pub connect_timeout: Duration,
}

type Waiter = oneshot::Sender<Result<BatcherAnswer>>;

#[derive(Default)]
struct State {
    /// The request side of the open stream; `None` while down.
    sender: Option<mpsc::Sender<pb::IntakeRequest>>,
    /// Why the link is down (for errors), while it is.
    down_reason: String,
    pending: HashMap<u64, Waiter>,
}

struct Shared {
    shard: ShardId,
    max_pending: usize,
    state: Mutex<State>,
}

impl Shared {
    fn down(&self, reason: &str) -> Error {
        Error::LinkDown {
            shard: self.shard,
            reason: reason.to_string(),
        }
    }

    /// Marks the link down and fails every pending request.
    fn fail_all(&self, reason: &str) {
        let pending = {
            let mut st = self.state.lock();
            st.sender = None;
            st.down_reason = reason.to_string();
            std::mem::take(&mut st.pending)
        };
        if !pending.is_empty() {
            warn!(
                shard = self.shard,
                count = pending.len(),
                reason,
                "batcher link broke: pending requests fail"
            );
        }
        for (_, waiter) in pending {
            let _ = waiter.send(Err(self.down(reason)));
        }
    }

    fn deliver(&self, response: &pb::IntakeResponse) {
        let waiter = self.state.lock().pending.remove(&response.id);
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(BatcherAnswer::from_wire(response)));
            }
            None => debug!(
                shard = self.shard,
                id = response.id,
                "answer for no pending request"
            ),
        }
    }
}

/// Removes a pending entry when its submitter stops waiting (answered or dropped).
struct PendingGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.state.lock().pending.remove(&self.id);
    }
}

/// A [`BatcherLink`] over one persistent gRPC `Intake` stream. Dropping it stops its task.
pub struct GrpcLink {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for GrpcLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GrpcLink {
    /// Starts the link's task (connect, read answers, reconnect). Needs a tokio runtime.
    pub fn spawn(cfg: LinkConfig) -> GrpcLink {
        let shared = Arc::new(Shared {
            shard: cfg.shard,
            max_pending: cfg.max_pending.get(),
            state: Mutex::new(State {
                down_reason: "not connected yet".into(),
                ..State::default()
            }),
        });
        let task = tokio::spawn(run(cfg, shared.clone()));
        GrpcLink { shared, task }
    }

    /// Whether the stream to the batcher is open.
    pub fn is_up(&self) -> bool {
        self.shared.state.lock().sender.is_some()
    }

    /// Requests awaiting an answer.
    pub fn pending(&self) -> usize {
        self.shared.state.lock().pending.len()
    }
}

#[async_trait::async_trait]
impl BatcherLink for GrpcLink {
    async fn submit(&self, id: u64, request: Vec<u8>) -> Result<BatcherAnswer> {
        let shared = &*self.shared;
        let (sender, rx) = {
            let mut st = shared.state.lock();
            let Some(sender) = st.sender.clone() else {
                return Err(shared.down(&st.down_reason));
            };
            if st.pending.len() >= shared.max_pending {
                return Err(Error::LinkBusy {
                    shard: shared.shard,
                    max: shared.max_pending,
                });
            }
            if st.pending.contains_key(&id) {
                return Err(Error::DuplicateLinkId { id });
            }
            let (tx, rx) = oneshot::channel();
            st.pending.insert(id, tx);
            (sender, rx)
        };
        let _guard = PendingGuard { shared, id };
        sender
            .try_send(pb::IntakeRequest { id, request })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => Error::LinkBusy {
                    shard: shared.shard,
                    max: shared.max_pending,
                },
                mpsc::error::TrySendError::Closed(_) => shared.down("the stream closed"),
            })?;
        rx.await.unwrap_or_else(|_| Err(shared.down("the link stopped")))
    }
}

/// Connects, serves the stream until it breaks, fails what was pending, waits the backoff
/// delay, and again; the attempt count resets when a stream opens.
async fn run(cfg: LinkConfig, shared: Arc<Shared>) {
    let mut attempt = 0u32;
    loop {
        // A batcher that accepts the connection but never answers the stream's headers
        // must not stall the link: opening is bounded too.
        let opened = tokio::time::timeout(cfg.connect_timeout, open(&cfg))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "opening the intake stream took over {:?}",
                    cfg.connect_timeout
                ))
            });
        let reason = match opened {
            Ok((sender, responses)) => {
                attempt = 0;
                shared.state.lock().sender = Some(sender);
                debug!(shard = cfg.shard, uri = %cfg.uri, "batcher link up");
                read_answers(&shared, responses).await
            }
            Err(reason) => reason,
        };
        shared.fail_all(&reason);
        let delay = cfg.backoff.delay(attempt);
        debug!(
            shard = cfg.shard,
            attempt,
            delay_ms = delay.as_millis(),
            reason,
            "batcher link down"
        );
        attempt = attempt.saturating_add(1);
        tokio::time::sleep(delay).await;
    }
}

type Answers = tonic::Streaming<pb::IntakeResponse>;

async fn open(cfg: &LinkConfig) -> std::result::Result<(mpsc::Sender<pb::IntakeRequest>, Answers), String> {
    let endpoint = wire::server::client_endpoint(cfg.uri.clone())
        .map_err(|e| format!("bad batcher address {}: {e}", cfg.uri))?
        .connect_timeout(cfg.connect_timeout);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connect {}: {e}", cfg.uri))?;
    let mut client = BatcherIntakeClient::new(channel)
        .max_decoding_message_size(wire::limits::SMALL_REQUEST)
        .max_encoding_message_size(wire::limits::BATCHER_INTAKE_MAX_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel(cfg.max_pending.get());
    let responses = client
        .intake(ReceiverStream::new(rx))
        .await
        .map_err(|s| format!("open intake stream: {}", s.message()))?
        .into_inner();
    Ok((tx, responses))
}

/// Delivers answers until the stream ends; returns why it ended.
async fn read_answers(shared: &Shared, mut responses: Answers) -> String {
    loop {
        match responses.message().await {
            Ok(Some(r)) => shared.deliver(&r),
            Ok(None) => return "the batcher ended the stream".into(),
            Err(s) => return format!("stream broke: {:?}: {}", s.code(), s.message()),
        }
    }
}
