//! The client-facing `Router` service. `Submit` carries one request per message,
//! `SubmitMany` many; both are answered per request, matched by `id`. A client message's
//! requests are checked ([`check_request`]), grouped by shard, given room in their
//! shard's in-flight bounds, and each shard's group is forwarded on the shard's
//! [`BatcherLink`] as one unit: one wait, one timeout and one answer message per group
//! instead of per request. A request is answered `OK` only once the batcher admitted it.
//!
//! Back-pressure: answers go out through a bounded queue, and a stream reads a message
//! only while fewer than `stream_max_in_flight` of its requests await their answer (one
//! `SubmitMany` message may take it over by its own size, at most the message limit), so
//! a client that does not read its answers stops the reading of its requests; a slow or
//! dead batcher fills the shard's bounds and further requests are answered
//! `RESOURCE_EXHAUSTED` at once; a broken link answers `UNAVAILABLE`. A message that does
//! not decode ends the stream with an error status, never `OK`.

use crate::admission::check_request;
use crate::answer::BatcherAnswer;
use crate::config::RouterConfig;
use crate::error::{Error, Result};
use crate::inflight::InFlight;
use crate::link::BatcherLink;
use crate::metrics::Metrics;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;
use types::ShardId;
use wire::pb;
use wire::pb::router_server::RouterServer;

struct Shared {
    cfg: RouterConfig,
    links: Vec<Arc<dyn BatcherLink>>,
    in_flight: Mutex<InFlight>,
    metrics: Metrics,
    /// Where config updates go (`Router.SubmitConfigUpdate`); unset: refused.
    config_updates: std::sync::OnceLock<crate::config_updates::ConfigUpdateGate>,
}

impl Shared {
    /// Publishes `shard`'s in-flight load `load` to the metrics, if any.
    fn publish(&self, shard: ShardId, load: (usize, u64)) {
        self.metrics.set_in_flight(shard, load);
    }
}

/// Room taken in a shard's in-flight bounds by a group, given back on drop.
struct Permit {
    shared: Arc<Shared>,
    shard: ShardId,
    requests: usize,
    bytes: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let load = {
            let mut in_flight = self.shared.in_flight.lock();
            in_flight.release_many(self.shard, self.requests, self.bytes);
            in_flight.load(self.shard)
        };
        self.shared.publish(self.shard, load);
    }
}

/// The requests of one client message for one shard, with room in its bounds.
struct ShardGroup {
    permit: Permit,
    ids: Vec<u64>,
    envelopes: Vec<Vec<u8>>,
}

/// The answers to a part of a client message, and how many requests they answer.
type Answered = Pin<Box<dyn Future<Output = Vec<pb::SubmitResponse>> + Send>>;

/// The outcomes of a part of a group of requests, by the id each request was given.
pub(crate) type Outcomes = Pin<Box<dyn Future<Output = Vec<(u64, Result<()>)>> + Send>>;

/// `reason` cut to at most [`MAX_REASON_BYTES`] bytes, on a character boundary.
pub(crate) fn cut_reason(mut reason: String) -> String {
    if reason.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

fn response(id: u64, result: &Result<()>) -> pb::SubmitResponse {
    match result {
        Ok(()) => pb::SubmitResponse {
            id,
            code: tonic::Code::Ok as u32,
            reason: String::new(),
        },
        Err(e) => {
            debug!(id, code = ?e.code(), error = %e, "request not acked");
            pb::SubmitResponse {
                id,
                code: e.code() as u32,
                reason: cut_reason(e.to_string()),
            }
        }
    }
}

/// The `Router` gRPC service.
#[derive(Clone)]
pub struct RouterService {
    shared: Arc<Shared>,
}

impl RouterService {
    /// A service over one link per shard (`links[s]` is shard `s`'s batcher).
    pub fn new(cfg: RouterConfig, links: Vec<Arc<dyn BatcherLink>>) -> Result<RouterService> {
        RouterService::with_metrics(cfg, links, &telemetry::Registry::detached("router"))
    }

    /// [`RouterService::new`], with its metrics in `registry`.
    pub fn with_metrics(
        cfg: RouterConfig,
        links: Vec<Arc<dyn BatcherLink>>,
        registry: &telemetry::Registry,
    ) -> Result<RouterService> {
        cfg.validate()?;
        if u32::try_from(links.len()).ok() != Some(cfg.shards.get()) {
            return Err(Error::InvalidConfig {
                field: "links",
                problem: format!("{} links for {} shards", links.len(), cfg.shards),
            });
        }
        let metrics = Metrics::register(registry).map_err(|e| Error::Metrics(e.to_string()))?;
        for shard in 0..cfg.shards.get() {
            metrics.set_in_flight(shard, (0, 0));
        }
        let in_flight = InFlight::new(
            cfg.shards.get(),
            cfg.shard_max_in_flight.get(),
            cfg.shard_max_in_flight_bytes.get(),
        );
        Ok(RouterService {
            shared: Arc::new(Shared {
                cfg,
                links,
                in_flight: Mutex::new(in_flight),
                metrics,
                config_updates: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Hands the config updates clients submit to `updates` (once; a second call changes
    /// nothing). Without it `SubmitConfigUpdate` is answered `UNIMPLEMENTED`.
    pub fn set_config_updates(&self, updates: Arc<dyn crate::config_updates::ConfigUpdates>) {
        let _ = self
            .shared
            .config_updates
            .set(crate::config_updates::ConfigUpdateGate::new(updates));
    }

    /// Its metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// The tonic server of this service, with the router's message limits.
    pub fn into_server(self) -> RouterServer<RouterService> {
        RouterServer::new(self)
            .max_decoding_message_size(wire::limits::ROUTER_MAX_MESSAGE_BYTES)
            .max_encoding_message_size(wire::limits::SUBMIT_RESPONSE.max_bytes)
    }

    /// Requests and bytes awaiting the answer of `shard`'s batcher.
    pub fn in_flight(&self, shard: ShardId) -> (usize, u64) {
        self.shared.in_flight.lock().load(shard)
    }

    /// Checks, forwards and answers one request.
    pub async fn answer(&self, request: pb::SubmitRequest) -> pb::SubmitResponse {
        let id = request.id;
        let mut answers = self.answer_many(vec![request]).await;
        answers
            .pop()
            .unwrap_or_else(|| response(id, &Err(Error::Internal("no answer".into()))))
    }

    /// Checks, forwards and answers the requests of one client message (answers in any
    /// order).
    pub async fn answer_many(&self, requests: Vec<pb::SubmitRequest>) -> Vec<pb::SubmitResponse> {
        let mut parts = self.take(requests);
        let mut answers = Vec::new();
        while let Some(part) = parts.next().await {
            answers.extend(part);
        }
        answers
    }

    /// Takes one client message: the requests refused at once are answered by the first
    /// part, each shard's group by a part that waits for its batcher. Each answer is
    /// recorded in the metrics.
    fn take(&self, requests: Vec<pb::SubmitRequest>) -> FuturesUnordered<Answered> {
        let began = std::time::Instant::now();
        self.take_outcomes(requests.into_iter().map(|r| (r.id, r.envelope)).collect())
            .into_iter()
            .map(|part| {
                let metrics = self.shared.metrics.clone();
                Box::pin(async move {
                    let outcomes = part.await;
                    let took = began.elapsed();
                    outcomes
                        .into_iter()
                        .map(|(id, result)| {
                            metrics.on_answer(&result, took);
                            response(id, &result)
                        })
                        .collect()
                }) as Answered
            })
            .collect()
    }

    /// Checks, groups by shard, admits and forwards `requests` (`(id, envelope)`): the
    /// requests refused at once come out of the first part, each shard's group out of a
    /// part that waits for its batcher. Records no answer in the metrics: the caller
    /// does, once it knows a request's final answer.
    pub(crate) fn take_outcomes(&self, requests: Vec<(u64, Vec<u8>)>) -> FuturesUnordered<Outcomes> {
        let shared = &self.shared;
        let shards = shared.cfg.shards.get();
        let mut refused = Vec::new();
        let mut by_shard: Vec<(Vec<u64>, Vec<Vec<u8>>)> =
            (0..shards).map(|_| (Vec::new(), Vec::new())).collect();
        for (id, envelope) in requests {
            match check_request(&envelope, &shared.cfg) {
                Ok(admitted) => {
                    let Some(g) = usize::try_from(admitted.shard)
                        .ok()
                        .and_then(|i| by_shard.get_mut(i))
                    else {
                        let shard = admitted.shard;
                        refused.push((id, Err(Error::UnknownShard { shard, shards })));
                        continue;
                    };
                    g.0.push(id);
                    g.1.push(envelope);
                }
                Err(e) => refused.push((id, Err(e.into()))),
            }
        }
        let parts = FuturesUnordered::new();
        for (shard, (ids, envelopes)) in (0..shards).zip(by_shard) {
            if ids.is_empty() {
                continue;
            }
            let (group, over) = self.admit(shard, ids, envelopes);
            refused.extend(over);
            if let Some(group) = group {
                let svc = self.clone();
                let ids = group.ids.clone();
                // Its own task: the group is forwarded and answered by the batcher (and gives
                // back its room in the shard) even while its stream waits for the client to
                // read the answers before it; aborted when the stream is gone.
                let task =
                    crate::spawned::Spawned(tokio::spawn(async move { svc.forward(shard, group).await }));
                parts.push(Box::pin(async move {
                    task.await.unwrap_or_else(|e| {
                        debug!(error = %e, "a forwarded group's task failed");
                        ids.into_iter()
                            .map(|id| {
                                (
                                    id,
                                    Err(Error::Internal("the router failed to answer this request".into())),
                                )
                            })
                            .collect()
                    })
                }) as Outcomes);
            }
        }
        if !refused.is_empty() {
            parts.push(Box::pin(std::future::ready(refused)) as Outcomes);
        }
        parts
    }

    /// Takes room in `shard`'s bounds for as many of the requests as fit (in order);
    /// the rest are refused.
    #[allow(clippy::type_complexity)]
    fn admit(
        &self,
        shard: ShardId,
        ids: Vec<u64>,
        envelopes: Vec<Vec<u8>>,
    ) -> (Option<ShardGroup>, Vec<(u64, Result<()>)>) {
        let shared = &self.shared;
        let mut over = Vec::new();
        let mut taken = (Vec::new(), Vec::new(), 0u64);
        let load = {
            let mut in_flight = shared.in_flight.lock();
            for (id, envelope) in ids.into_iter().zip(envelopes) {
                let bytes = u64::try_from(envelope.len()).unwrap_or(u64::MAX);
                match in_flight.try_admit(shard, bytes) {
                    Ok(()) => {
                        taken.0.push(id);
                        taken.1.push(envelope);
                        taken.2 = taken.2.saturating_add(bytes);
                    }
                    Err(e) => over.push((id, Err(e))),
                }
            }
            in_flight.load(shard)
        };
        shared.publish(shard, load);
        let (ids, envelopes, bytes) = taken;
        let group = (!ids.is_empty()).then(|| ShardGroup {
            permit: Permit {
                shared: self.shared.clone(),
                shard,
                requests: ids.len(),
                bytes,
            },
            ids,
            envelopes,
        });
        (group, over)
    }

    /// Forwards one shard's group; the outcome of each of its requests.
    async fn forward(&self, shard: ShardId, group: ShardGroup) -> Vec<(u64, Result<()>)> {
        let shared = &*self.shared;
        let ShardGroup {
            permit,
            ids,
            envelopes,
        } = group;
        let n = ids.len();
        let result = match usize::try_from(shard).ok().and_then(|i| shared.links.get(i)) {
            Some(link) => {
                let timeout = shared.cfg.answer_timeout;
                tokio::time::timeout(timeout, link.submit(envelopes))
                    .await
                    .unwrap_or_else(|_| {
                        Err(Error::NoAnswer {
                            shard,
                            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        })
                    })
                    .and_then(|answers| {
                        if answers.len() == n {
                            Ok(answers)
                        } else {
                            Err(Error::Internal(format!(
                                "{} answers for {n} requests",
                                answers.len()
                            )))
                        }
                    })
            }
            None => Err(Error::UnknownShard {
                shard,
                shards: shared.cfg.shards.get(),
            }),
        };
        drop(permit);
        match result {
            Ok(answers) => ids
                .into_iter()
                .zip(answers)
                .map(|(id, answer)| {
                    let result = match answer {
                        BatcherAnswer::Admitted => Ok(()),
                        BatcherAnswer::Refused(reason) => Err(Error::BatcherRefused { reason }),
                    };
                    (id, result)
                })
                .collect(),
            Err(e) => ids.into_iter().map(|id| (id, Err(e.clone()))).collect(),
        }
    }

    /// The service's config.
    pub(crate) fn config(&self) -> &RouterConfig {
        &self.shared.cfg
    }
}

type Answers = ReceiverStream<std::result::Result<pb::SubmitResponse, Status>>;
type ManyAnswers = ReceiverStream<std::result::Result<pb::SubmitAnswers, Status>>;

/// Most answers in one `SubmitAnswers` message (the message limit's item count).
const MAX_ANSWERS: usize = 16 * 1024;

/// A refusal's reason is cut to this many bytes, so that a message of answers stays
/// within its limit (`wire::limits::SUBMIT_ANSWERS`).
pub const MAX_REASON_BYTES: usize = 256;

#[tonic::async_trait]
impl pb::router_server::Router for RouterService {
    type SubmitStream = Answers;
    type SubmitManyStream = ManyAnswers;

    async fn submit(
        &self,
        request: Request<Streaming<pb::SubmitRequest>>,
    ) -> std::result::Result<Response<Answers>, Status> {
        Ok(self.serve(
            request.into_inner(),
            |r| vec![r],
            |answers, more| answers.into_iter().chain(more.into_iter().flatten()).collect(),
        ))
    }

    async fn submit_config_update(
        &self,
        request: Request<pb::BftSubmitRequest>,
    ) -> std::result::Result<Response<pb::BftSubmitResponse>, Status> {
        let Some(gate) = self.shared.config_updates.get() else {
            return Err(Status::unimplemented(
                "this router does not hand on config updates",
            ));
        };
        gate.submit(request.into_inner().request).await.map(Response::new)
    }

    async fn submit_many(
        &self,
        request: Request<Streaming<pb::SubmitBatch>>,
    ) -> std::result::Result<Response<ManyAnswers>, Status> {
        Ok(self.serve(
            request.into_inner(),
            |b| b.requests,
            |answers, more| {
                let mut all = answers;
                for part in more {
                    all.extend(part);
                }
                let mut messages = Vec::new();
                while all.len() > MAX_ANSWERS {
                    let rest = all.split_off(MAX_ANSWERS);
                    messages.push(pb::SubmitAnswers { answers: all });
                    all = rest;
                }
                messages.push(pb::SubmitAnswers { answers: all });
                messages
            },
        ))
    }
}

impl RouterService {
    /// Serves one client stream in its own task: its messages' requests (`split`), its
    /// answers in messages (`emit`). Each answer message answers at least one request,
    /// so the queue of `stream_max_in_flight` messages holds every answer in flight.
    fn serve<M: Send + 'static, A: Send + 'static>(
        &self,
        inbound: Streaming<M>,
        split: fn(M) -> Vec<pb::SubmitRequest>,
        emit: fn(Vec<pb::SubmitResponse>, Vec<Vec<pb::SubmitResponse>>) -> Vec<A>,
    ) -> Response<ReceiverStream<std::result::Result<A, Status>>> {
        let (tx, rx) = mpsc::channel(self.shared.cfg.stream_max_in_flight.get());
        let open = StreamOpen::new(&self.shared.metrics.streams);
        let stream = ClientStream {
            svc: self.clone(),
            tx,
            split,
            emit,
        };
        tokio::spawn(async move {
            stream.run(inbound).await;
            drop(open);
        });
        Response::new(ReceiverStream::new(rx))
    }
}

/// One open client stream in the `streams` gauge, taken out on drop.
pub(crate) struct StreamOpen(prometheus::IntGauge);

impl StreamOpen {
    /// Counts one more open stream in `gauge`.
    pub(crate) fn new(gauge: &prometheus::IntGauge) -> StreamOpen {
        gauge.inc();
        StreamOpen(gauge.clone())
    }
}

impl Drop for StreamOpen {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One client stream of messages `M` (one request, or many) answered with messages `A`.
struct ClientStream<M, A> {
    svc: RouterService,
    tx: mpsc::Sender<std::result::Result<A, Status>>,
    /// A message's requests.
    split: fn(M) -> Vec<pb::SubmitRequest>,
    /// The messages that carry a part's answers and the other parts ready with it.
    emit: fn(Vec<pb::SubmitResponse>, Vec<Vec<pb::SubmitResponse>>) -> Vec<A>,
}

impl<M: Send + 'static, A: Send + 'static> ClientStream<M, A> {
    /// Serves the stream until it ends, breaks, or the client stops listening.
    async fn run(self, mut inbound: Streaming<M>) {
        let max = self.svc.shared.cfg.stream_max_in_flight.get();
        let mut waiting: FuturesUnordered<Answered> = FuturesUnordered::new();
        let mut in_flight = 0usize;
        loop {
            tokio::select! {
                Some(part) = waiting.next(), if !waiting.is_empty() => {
                    in_flight = in_flight.saturating_sub(part.len());
                    // The other parts already answered go in the same message.
                    let mut more = Vec::new();
                    let mut count = part.len();
                    while count < MAX_ANSWERS {
                        let Some(Some(p)) = futures::FutureExt::now_or_never(waiting.next()) else { break };
                        in_flight = in_flight.saturating_sub(p.len());
                        count += p.len();
                        more.push(p);
                    }
                    if !self.send(part, more).await {
                        return;
                    }
                }
                message = inbound.message(), if in_flight < max => match message {
                    Ok(Some(m)) => {
                        let requests = (self.split)(m);
                        let metrics = &self.svc.shared.metrics;
                        metrics.client_messages.inc();
                        metrics.client_requests.inc_by(requests.len() as u64);
                        in_flight = in_flight.saturating_add(requests.len());
                        waiting.extend(self.svc.take(requests));
                    }
                    Ok(None) => break,
                    Err(status) => {
                        // Garbage or an over-limit message: end the stream with its error.
                        debug!(code = ?status.code(), "client stream ended with an error");
                        let _ = self.tx.send(Err(status)).await;
                        return;
                    }
                },
                () = self.tx.closed() => return,
            }
        }
        while let Some(part) = waiting.next().await {
            if !self.send(part, Vec::new()).await {
                return;
            }
        }
    }

    /// Sends the answers; false when the client stopped listening.
    async fn send(&self, part: Vec<pb::SubmitResponse>, more: Vec<Vec<pb::SubmitResponse>>) -> bool {
        for message in (self.emit)(part, more) {
            if self.tx.send(Ok(message)).await.is_err() {
                return false;
            }
        }
        true
    }
}
