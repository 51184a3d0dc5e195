//! The seam between the router and a shard's batcher ([`BatcherLink`]) and its gRPC
//! implementation ([`GrpcLink`]): one persistent `BatcherIntake.Intake` stream per
//! batcher carrying groups of requests, answers matched by id, a bounded pending map,
//! reconnection with [`Backoff`]; a broken stream fails every pending group with
//! [`Error::LinkDown`] (`UNAVAILABLE`), and while it is down new groups fail at once the
//! same way.
//!
//! A group is what one client message brought for one shard (one request from
//! `Submit`, many from `SubmitMany`). Its requests get the ids `group << 16 | index`, so
//! an answer finds its group with one lookup, and the group's submitter wakes once, when
//! the last of its answers came. Groups queued while the stream is busy go out merged
//! into one `IntakeBatch` message (up to [`MERGE_REQUESTS`] requests or
//! [`MERGE_BYTES`]): many clients' requests share a message and a wake-up of the
//! batcher.

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
use tracing::{debug, warn};
use types::ShardId;
use wire::pb;
use wire::pb::batcher_intake_client::BatcherIntakeClient;

/// Most requests in one group: an id keeps the index in its low 16 bits.
pub const MAX_GROUP: usize = 1 << 16;

/// Queued groups are merged into one message up to this many requests…
pub const MERGE_REQUESTS: usize = 4096;
/// …or this many bytes of requests (a single group may be larger: it goes alone).
pub const MERGE_BYTES: usize = 1 << 20;

/// A link to the batcher of one shard.
#[async_trait::async_trait]
pub trait BatcherLink: Send + Sync {
    /// Forwards a group of requests (at most [`MAX_GROUP`]) and waits for the batcher's
    /// answer to each, returned in the order given. An error is the whole group's (the
    /// link is down or full).
    async fn submit(&self, requests: Vec<Vec<u8>>) -> Result<Vec<BatcherAnswer>>;
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

type Waiter = oneshot::Sender<Result<Vec<BatcherAnswer>>>;

/// A group awaiting its answers.
struct Group {
    answers: Vec<Option<BatcherAnswer>>,
    remaining: usize,
    waiter: Waiter,
}

#[derive(Default)]
struct State {
    /// The request side of the open stream; `None` while down.
    sender: Option<mpsc::Sender<Vec<pb::IntakeRequest>>>,
    /// Why the link is down (for errors), while it is.
    down_reason: String,
    pending: HashMap<u64, Group>,
    /// Requests of the pending groups.
    pending_requests: usize,
    next_group: u64,
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

    /// Marks the link down and fails every pending group.
    fn fail_all(&self, reason: &str) {
        let pending = {
            let mut st = self.state.lock();
            st.sender = None;
            st.down_reason = reason.to_string();
            st.pending_requests = 0;
            std::mem::take(&mut st.pending)
        };
        if !pending.is_empty() {
            warn!(
                shard = self.shard,
                groups = pending.len(),
                reason,
                "batcher link broke: pending requests fail"
            );
        }
        for (_, group) in pending {
            let _ = group.waiter.send(Err(self.down(reason)));
        }
    }

    /// Takes the answers of one message; wakes each group whose last answer came.
    fn deliver(&self, answers: &[pb::IntakeResponse]) {
        let mut done = Vec::new();
        {
            let mut st = self.state.lock();
            for a in answers {
                let (group, index) = (a.id >> 16, (a.id & 0xFFFF) as usize);
                let Some(g) = st.pending.get_mut(&group) else {
                    debug!(shard = self.shard, id = a.id, "answer for no pending request");
                    continue;
                };
                let Some(slot) = g.answers.get_mut(index) else {
                    debug!(
                        shard = self.shard,
                        id = a.id,
                        "answer for no request of its group"
                    );
                    continue;
                };
                if slot.replace(BatcherAnswer::from_wire(a)).is_none() {
                    g.remaining -= 1;
                }
                if g.remaining == 0
                    && let Some(g) = st.pending.remove(&group)
                {
                    st.pending_requests = st.pending_requests.saturating_sub(g.answers.len());
                    done.push(g);
                }
            }
        }
        for g in done {
            let answers = g.answers.into_iter().flatten().collect();
            let _ = g.waiter.send(Ok(answers));
        }
    }
}

/// Removes a pending group when its submitter stops waiting (answered or dropped).
struct PendingGuard<'a> {
    shared: &'a Shared,
    group: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        if let Some(g) = st.pending.remove(&self.group) {
            st.pending_requests = st.pending_requests.saturating_sub(g.answers.len());
        }
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
        self.shared.state.lock().pending_requests
    }
}

#[async_trait::async_trait]
impl BatcherLink for GrpcLink {
    async fn submit(&self, requests: Vec<Vec<u8>>) -> Result<Vec<BatcherAnswer>> {
        let shared = &*self.shared;
        let n = requests.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        if n > MAX_GROUP {
            return Err(Error::LinkBusy {
                shard: shared.shard,
                max: MAX_GROUP,
            });
        }
        let (sender, group, rx) = {
            let mut st = shared.state.lock();
            let Some(sender) = st.sender.clone() else {
                return Err(shared.down(&st.down_reason));
            };
            if st.pending_requests.saturating_add(n) > shared.max_pending {
                return Err(Error::LinkBusy {
                    shard: shared.shard,
                    max: shared.max_pending,
                });
            }
            // Group numbers wrap after 2^48 groups; one still pending is skipped.
            let mut group = st.next_group & 0xFFFF_FFFF_FFFF;
            while st.pending.contains_key(&group) {
                group = (group + 1) & 0xFFFF_FFFF_FFFF;
            }
            st.next_group = group + 1;
            let (tx, rx) = oneshot::channel();
            st.pending.insert(
                group,
                Group {
                    answers: vec![None; n],
                    remaining: n,
                    waiter: tx,
                },
            );
            st.pending_requests += n;
            (sender, group, rx)
        };
        let _guard = PendingGuard { shared, group };
        let messages = requests
            .into_iter()
            .enumerate()
            .map(|(i, request)| pb::IntakeRequest {
                id: group << 16 | i as u64,
                request,
            })
            .collect();
        sender.try_send(messages).map_err(|e| match e {
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

type Answers = tonic::Streaming<pb::IntakeAnswers>;

/// The stream of `IntakeBatch` messages: each takes the next queued group and whatever
/// else is queued, up to [`MERGE_REQUESTS`] and [`MERGE_BYTES`].
fn merged(rx: mpsc::Receiver<Vec<pb::IntakeRequest>>) -> impl tokio_stream::Stream<Item = pb::IntakeBatch> {
    futures::stream::unfold(rx, |mut rx| async move {
        let mut requests = rx.recv().await?;
        let mut bytes: usize = requests.iter().map(|r| r.request.len()).sum();
        while requests.len() < MERGE_REQUESTS && bytes < MERGE_BYTES {
            let Ok(more) = rx.try_recv() else { break };
            bytes = bytes.saturating_add(more.iter().map(|r| r.request.len()).sum());
            requests.extend(more);
        }
        Some((pb::IntakeBatch { requests }, rx))
    })
}

async fn open(
    cfg: &LinkConfig,
) -> std::result::Result<(mpsc::Sender<Vec<pb::IntakeRequest>>, Answers), String> {
    let endpoint = wire::server::client_endpoint(cfg.uri.clone())
        .map_err(|e| format!("bad batcher address {}: {e}", cfg.uri))?
        .connect_timeout(cfg.connect_timeout);
    let channel = wire::server::connect(&endpoint)
        .await
        .map_err(|e| format!("connect {}: {e}", cfg.uri))?;
    let mut client = BatcherIntakeClient::new(channel)
        .max_decoding_message_size(wire::limits::INTAKE_ANSWERS.max_bytes)
        .max_encoding_message_size(wire::limits::BATCHER_INTAKE_MAX_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel(cfg.max_pending.get());
    let responses = client
        .intake(merged(rx))
        .await
        .map_err(|s| format!("open intake stream: {}", s.message()))?
        .into_inner();
    Ok((tx, responses))
}

/// Delivers answers until the stream ends; returns why it ended.
async fn read_answers(shared: &Shared, mut responses: Answers) -> String {
    loop {
        match responses.message().await {
            Ok(Some(r)) => shared.deliver(&r.answers),
            Ok(None) => return "the batcher ended the stream".into(),
            Err(s) => return format!("stream broke: {:?}: {}", s.code(), s.message()),
        }
    }
}
