//! The client-facing `Router` service: one task per `Submit` stream reads requests while
//! fewer than `stream_max_in_flight` await their answer, checks each one
//! ([`check_request`]), takes room for it in its shard's in-flight bounds, forwards it on
//! the shard's [`BatcherLink`] and answers the client with the outcome: `OK` only once
//! the batcher admitted the request.
//!
//! Back-pressure: answers go out through a bounded queue, so a client that does not read
//! its answers stops the reading of its requests; a slow or dead batcher fills the
//! shard's bounds and further requests are answered `RESOURCE_EXHAUSTED` at once; a
//! broken link answers `UNAVAILABLE`. A message that does not decode ends the stream with
//! an error status, never `OK`.

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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    next_link_id: AtomicU64,
    metrics: Metrics,
}

impl Shared {
    /// Publishes `shard`'s in-flight load `load` to the metrics, if any.
    fn publish(&self, shard: ShardId, load: (usize, u64)) {
        self.metrics.set_in_flight(shard, load);
    }
}

/// Room taken in a shard's in-flight bounds, given back on drop.
struct Permit<'a> {
    shared: &'a Shared,
    shard: ShardId,
    bytes: u64,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let load = {
            let mut in_flight = self.shared.in_flight.lock();
            in_flight.release(self.shard, self.bytes);
            in_flight.load(self.shard)
        };
        self.shared.publish(self.shard, load);
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
                next_link_id: AtomicU64::new(0),
                metrics,
            }),
        })
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
        let began = std::time::Instant::now();
        let result = self.forward(request.envelope).await;
        self.shared.metrics.on_answer(&result, began.elapsed());
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
                    reason: e.to_string(),
                }
            }
        }
    }

    async fn forward(&self, envelope: Vec<u8>) -> Result<()> {
        let shared = &*self.shared;
        let admitted = check_request(&envelope, &shared.cfg)?;
        let shard = admitted.shard;
        let bytes = u64::try_from(envelope.len()).unwrap_or(u64::MAX);
        let load = {
            let mut in_flight = shared.in_flight.lock();
            in_flight.try_admit(shard, bytes)?;
            in_flight.load(shard)
        };
        shared.publish(shard, load);
        let _permit = Permit { shared, shard, bytes };
        let shards = shared.cfg.shards.get();
        let link = usize::try_from(shard)
            .ok()
            .and_then(|i| shared.links.get(i))
            .ok_or(Error::UnknownShard { shard, shards })?;
        let link_id = shared.next_link_id.fetch_add(1, Ordering::Relaxed);
        let timeout = shared.cfg.answer_timeout;
        let answer = tokio::time::timeout(timeout, link.submit(link_id, envelope))
            .await
            .map_err(|_| Error::NoAnswer {
                shard,
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            })??;
        match answer {
            BatcherAnswer::Admitted => Ok(()),
            BatcherAnswer::Refused(reason) => Err(Error::BatcherRefused { reason }),
        }
    }
}

type Answers = ReceiverStream<std::result::Result<pb::SubmitResponse, Status>>;

#[tonic::async_trait]
impl pb::router_server::Router for RouterService {
    type SubmitStream = Answers;

    async fn submit(
        &self,
        request: Request<Streaming<pb::SubmitRequest>>,
    ) -> std::result::Result<Response<Answers>, Status> {
        let (tx, rx) = mpsc::channel(self.shared.cfg.stream_max_in_flight.get());
        let open = StreamOpen::new(&self.shared.metrics.streams);
        let svc = self.clone();
        tokio::spawn(async move {
            run_stream(svc, request.into_inner(), tx).await;
            drop(open);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// One open client stream in the `streams` gauge, taken out on drop.
struct StreamOpen(prometheus::IntGauge);

impl StreamOpen {
    fn new(gauge: &prometheus::IntGauge) -> StreamOpen {
        gauge.inc();
        StreamOpen(gauge.clone())
    }
}

impl Drop for StreamOpen {
    fn drop(&mut self) {
        self.0.dec();
    }
}

type AnswerTx = mpsc::Sender<std::result::Result<pb::SubmitResponse, Status>>;

/// Serves one client stream until it ends, breaks, or the client stops listening.
async fn run_stream(svc: RouterService, mut inbound: Streaming<pb::SubmitRequest>, tx: AnswerTx) {
    let max = svc.shared.cfg.stream_max_in_flight.get();
    let mut waiting = FuturesUnordered::new();
    loop {
        tokio::select! {
            Some(answer) = waiting.next(), if !waiting.is_empty() => {
                if tx.send(Ok(answer)).await.is_err() {
                    return;
                }
            }
            message = inbound.message(), if waiting.len() < max => match message {
                Ok(Some(request)) => {
                    let svc = svc.clone();
                    waiting.push(async move { svc.answer(request).await });
                }
                Ok(None) => break,
                Err(status) => {
                    // Garbage or an over-limit message: end the stream with its error.
                    debug!(code = ?status.code(), "client stream ended with an error");
                    let _ = tx.send(Err(status)).await;
                    return;
                }
            },
            () = tx.closed() => return,
        }
    }
    while let Some(answer) = waiting.next().await {
        if tx.send(Ok(answer)).await.is_err() {
            return;
        }
    }
}
