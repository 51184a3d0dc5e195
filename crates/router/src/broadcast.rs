//! Fabric's `orderer.AtomicBroadcast` on a router (docs/router.md "Fabric Broadcast"):
//! `Broadcast` takes a stream of Fabric envelopes and answers each with one
//! `BroadcastResponse`, in the order the envelopes came, over the router's own pipeline
//! (checks, shard groups, in-flight bounds, batcher links).
//!
//! A stream reads greedily: what is already there (up to [`MAX_GROUP`] envelopes) goes
//! to the pipeline as one group, without waiting for the answers of the groups before
//! it; the groups' answers leave in order as they complete. A request refused because a
//! bound behind the router is full is tried again after a short wait
//! ([`fabric_answer::retry_delay`]) until `answer_timeout` has passed since it was read,
//! then answered `SERVICE_UNAVAILABLE`. The stream is not read while
//! `stream_max_in_flight` envelopes or [`STREAM_MAX_BYTES`] await their answers, and its
//! answers leave through a queue of `stream_max_in_flight`. `Deliver` is not served here:
//! assemblers serve blocks.

use crate::error::{Error, Result};
use crate::fabric_answer::{self, broadcast_status, waits_for_room};
use crate::refusal::Refusal;
use crate::service::{RouterService, StreamOpen};
use arma::admission::ContentError;
use arma::fabric::RequestFormat;
use bytes::Bytes;
use futures::stream::{FuturesOrdered, FuturesUnordered};
use futures::{FutureExt, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;
use wire::fabric::RawEnvelope;
use wire::fabric::orderer::atomic_broadcast_server::{AtomicBroadcast, AtomicBroadcastServer};
use wire::fabric::orderer::{BroadcastResponse, DeliverResponse};

/// Most envelopes of one stream handed to the pipeline as one group.
pub const MAX_GROUP: usize = 512;

/// A stream is not read further while its envelopes awaiting their answers hold this
/// many bytes (it keeps each until answered, to try it again).
pub const STREAM_MAX_BYTES: u64 = 32 << 20;

/// Largest `BroadcastResponse` sent: a status and an info of at most
/// [`crate::service::MAX_REASON_BYTES`].
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024;

/// What `Deliver` on a router answers.
pub const DELIVER_UNIMPLEMENTED: &str = "a router does not serve blocks: call Deliver on an assembler";

/// The `orderer.AtomicBroadcast` service of a router.
#[derive(Clone)]
pub struct BroadcastService {
    svc: RouterService,
}

impl BroadcastService {
    /// `Broadcast` over `svc`'s pipeline (its config, links, bounds and metrics).
    pub fn new(svc: RouterService) -> BroadcastService {
        BroadcastService { svc }
    }

    /// The tonic server of this service: envelopes up to `wire::limits::FABRIC_ENVELOPE`.
    pub fn into_server(self) -> AtomicBroadcastServer<BroadcastService> {
        AtomicBroadcastServer::new(self)
            .max_decoding_message_size(wire::limits::FABRIC_ENVELOPE.max_bytes)
            .max_encoding_message_size(MAX_RESPONSE_BYTES)
    }
}

type Answers = ReceiverStream<std::result::Result<BroadcastResponse, Status>>;

#[tonic::async_trait]
impl AtomicBroadcast for BroadcastService {
    type BroadcastStream = Answers;
    type DeliverStream = tokio_stream::Empty<std::result::Result<DeliverResponse, Status>>;

    async fn broadcast(
        &self,
        request: Request<Streaming<RawEnvelope>>,
    ) -> std::result::Result<Response<Answers>, Status> {
        let (tx, rx) = mpsc::channel(self.svc.config().stream_max_in_flight.get());
        let open = StreamOpen::new(&self.svc.metrics().streams);
        let stream = BroadcastStream {
            svc: self.svc.clone(),
            tx,
        };
        let inbound = request.into_inner();
        tokio::spawn(async move {
            stream.run(inbound).await;
            drop(open);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn deliver(
        &self,
        _request: Request<Streaming<RawEnvelope>>,
    ) -> std::result::Result<Response<Self::DeliverStream>, Status> {
        Err(Status::unimplemented(DELIVER_UNIMPLEMENTED))
    }
}

/// How the reading of a stream ended.
enum Ended {
    /// The client closed its side.
    Closed,
    /// A message did not decode or was over the limit: the stream ends with this status
    /// once the envelopes before it are answered.
    Failed(Status),
}

/// The envelopes read at once, and their bytes.
struct Gathered {
    envelopes: Vec<Bytes>,
    bytes: u64,
}

/// A group's answers, in its order, and the bytes it held.
struct GroupDone {
    answers: Vec<BroadcastResponse>,
    bytes: u64,
}

type GroupAnswers = Pin<Box<dyn Future<Output = GroupDone> + Send>>;

/// One client `Broadcast` stream.
struct BroadcastStream {
    svc: RouterService,
    tx: mpsc::Sender<std::result::Result<BroadcastResponse, Status>>,
}

impl BroadcastStream {
    /// Serves the stream until it ends, breaks, or the client stops listening.
    async fn run(self, mut inbound: Streaming<RawEnvelope>) {
        let max = self.svc.config().stream_max_in_flight.get();
        let mut waiting: FuturesOrdered<GroupAnswers> = FuturesOrdered::new();
        let (mut held, mut held_bytes) = (0usize, 0u64);
        let ended = loop {
            let room = held < max && held_bytes < STREAM_MAX_BYTES;
            tokio::select! {
                biased;
                Some(done) = waiting.next(), if !waiting.is_empty() => {
                    held = held.saturating_sub(done.answers.len());
                    held_bytes = held_bytes.saturating_sub(done.bytes);
                    if !self.send(done.answers).await {
                        return;
                    }
                }
                first = inbound.message(), if room => match first {
                    Ok(Some(envelope)) => {
                        let limits = (max.saturating_sub(held), STREAM_MAX_BYTES.saturating_sub(held_bytes));
                        let (group, end) = gather(envelope, &mut inbound, limits).await;
                        held = held.saturating_add(group.envelopes.len());
                        held_bytes = held_bytes.saturating_add(group.bytes);
                        waiting.push_back(self.answer_group(group));
                        if let Some(end) = end {
                            break end;
                        }
                    }
                    Ok(None) => break Ended::Closed,
                    Err(status) => break Ended::Failed(status),
                },
                () = self.tx.closed() => return,
            }
        };
        while let Some(done) = waiting.next().await {
            if !self.send(done.answers).await {
                return;
            }
        }
        if let Ended::Failed(status) = ended {
            // Garbage or an over-limit message: the stream ends with its error.
            debug!(code = ?status.code(), "broadcast stream ended with an error");
            let _ = self.tx.send(Err(status)).await;
        }
    }

    /// Sends the answers; false when the client stopped listening.
    async fn send(&self, answers: Vec<BroadcastResponse>) -> bool {
        for answer in answers {
            if self.tx.send(Ok(answer)).await.is_err() {
                return false;
            }
        }
        true
    }

    /// The answers of a group read now, in order, recorded in the metrics.
    fn answer_group(&self, group: Gathered) -> GroupAnswers {
        let svc = self.svc.clone();
        let read_at = Instant::now();
        let metrics = svc.metrics();
        let n = u64::try_from(group.envelopes.len()).unwrap_or(u64::MAX);
        metrics.client_messages.inc_by(n);
        metrics.client_requests.inc_by(n);
        let (count, bytes) = (group.envelopes.len(), group.bytes);
        // Its own task: the group is forwarded, tried again and answered by the batcher
        // (and gives back its room in the shard) even while the stream waits for its
        // client to read the answers before it.
        let task = crate::spawned::Spawned(tokio::spawn(async move {
            let outcomes = outcomes(&svc, &group.envelopes, read_at).await;
            let metrics = svc.metrics();
            let took = read_at.elapsed();
            let answers = outcomes
                .into_iter()
                .map(|result| {
                    metrics.on_answer(&result, took);
                    let (status, info) = broadcast_status(&result);
                    if let Err(e) = &result {
                        debug!(status = status.as_str_name(), error = %e, "broadcast envelope not admitted");
                    }
                    metrics
                        .broadcast_answers
                        .with_label_values(&[status.as_str_name()])
                        .inc();
                    BroadcastResponse {
                        status: status as i32,
                        info,
                    }
                })
                .collect();
            GroupDone {
                answers,
                bytes: group.bytes,
            }
        }));
        Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                debug!(error = %e, "a broadcast group's task failed");
                let answer = BroadcastResponse {
                    status: wire::fabric::common::Status::InternalServerError as i32,
                    info: "the router failed to answer this envelope".into(),
                };
                GroupDone {
                    answers: vec![answer; count],
                    bytes,
                }
            })
        })
    }
}

/// `first` and the envelopes already read after it, within `(envelopes, bytes)` room
/// (and [`MAX_GROUP`]); with how the stream ended, if it did.
async fn gather(
    first: RawEnvelope,
    inbound: &mut Streaming<RawEnvelope>,
    (max, max_bytes): (usize, u64),
) -> (Gathered, Option<Ended>) {
    let size = |e: &RawEnvelope| u64::try_from(e.bytes.len()).unwrap_or(u64::MAX);
    let mut group = Gathered {
        bytes: size(&first),
        envelopes: vec![first.bytes],
    };
    let cap = max.min(MAX_GROUP);
    let mut yielded = false;
    while group.envelopes.len() < cap && group.bytes < max_bytes {
        match inbound.message().now_or_never() {
            Some(Ok(Some(e))) => {
                group.bytes = group.bytes.saturating_add(size(&e));
                group.envelopes.push(e.bytes);
            }
            Some(Ok(None)) => return (group, Some(Ended::Closed)),
            Some(Err(status)) => return (group, Some(Ended::Failed(status))),
            // Let the connection's task take in what the client already sent, once.
            None if !yielded => {
                yielded = true;
                tokio::task::yield_now().await;
            }
            None => break,
        }
    }
    (group, None)
}

/// The outcomes of one try: the ids (indexes in the group) it answers, with the try's
/// round.
type Try<'a> = Pin<Box<dyn Future<Output = (u32, Vec<(u64, Result<()>)>)> + Send + 'a>>;

/// The final outcome of each envelope of a group read at `read_at`, in order: refusals
/// that [`waits_for_room`] are tried again, after [`fabric_answer::retry_delay`], until
/// `answer_timeout` has passed since `read_at`.
async fn outcomes(svc: &RouterService, envelopes: &[Bytes], read_at: Instant) -> Vec<Result<()>> {
    let cfg = svc.config();
    let format = cfg.requests.format;
    if !format.takes_fabric() {
        let wrong = Error::Refused(Refusal::Content(ContentError::WrongFormat {
            takes: format.name(),
            got: RequestFormat::Fabric.name(),
        }));
        return vec![Err(wrong); envelopes.len()];
    }
    let deadline = read_at.checked_add(cfg.answer_timeout).unwrap_or(read_at);
    let mut results: Vec<Option<Result<()>>> = vec![None; envelopes.len()];
    let all = (0u64..).zip(envelopes.iter().map(|e| e.to_vec())).collect();
    let mut tries: FuturesUnordered<Try<'_>> = svc
        .take_outcomes(all)
        .into_iter()
        .map(|part| Box::pin(part.map(|outcomes| (0u32, outcomes))) as Try<'_>)
        .collect();
    while let Some((round, part)) = tries.next().await {
        let now = Instant::now();
        let mut again = Vec::new();
        for (id, result) in part {
            let Some(slot) = usize::try_from(id).ok().and_then(|i| results.get_mut(i)) else {
                continue;
            };
            match result {
                Err(e) if waits_for_room(&e) && now < deadline => again.push(id),
                result => *slot = Some(result),
            }
        }
        if !again.is_empty() {
            let count = u64::try_from(again.len()).unwrap_or(u64::MAX);
            svc.metrics().broadcast_retries.inc_by(count);
            let delay = fabric_answer::retry_delay(round).min(deadline.saturating_duration_since(now));
            tries.push(try_again(svc, envelopes, again, round.saturating_add(1), delay));
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::Internal("a broadcast envelope got no outcome".into()))))
        .collect()
}

/// Try `round` of the envelopes `ids` of a group, after `delay`.
fn try_again<'a>(
    svc: &'a RouterService,
    envelopes: &'a [Bytes],
    ids: Vec<u64>,
    round: u32,
    delay: Duration,
) -> Try<'a> {
    Box::pin(async move {
        tokio::time::sleep(delay).await;
        let requests = ids
            .into_iter()
            .filter_map(|id| {
                let e = usize::try_from(id).ok().and_then(|i| envelopes.get(i))?;
                Some((id, e.to_vec()))
            })
            .collect();
        let mut parts = svc.take_outcomes(requests);
        let mut outcomes = Vec::new();
        while let Some(part) = parts.next().await {
            outcomes.extend(part);
        }
        (round, outcomes)
    })
}
