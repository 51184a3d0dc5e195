//! `Endorser.Endorse` over gRPC: decode, check, read the inputs through a query service
//! at one snapshot, sign.

use crate::core::EndorserCore;
use crate::metrics::Metrics;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use token::{Reason, Rejection, Request};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tonic::transport::Channel;
use tonic::{Request as GrpcRequest, Response, Status};
use tracing::debug;
use wire::pb;
use wire::pb::query_client::QueryClient;

/// How an endorser serves.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Requests checked and signed at once (more wait; a request waits at most
    /// `timeout`).
    pub max_in_flight: usize,
    /// How long one request may take, state read included.
    pub timeout: Duration,
    /// Connection, stream and idle limits of the server.
    pub server: wire::server::ServerLimits,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            max_in_flight: 64,
            timeout: Duration::from_secs(10),
            server: wire::server::ServerLimits::default(),
        }
    }
}

/// Reads committed rows from the first query service that answers.
#[derive(Debug, Clone)]
pub struct StateReader {
    channels: Arc<Vec<(String, Channel)>>,
    next: Arc<AtomicUsize>,
}

impl StateReader {
    /// A reader over `endpoints` (`http://host:port`; connected lazily, reconnected by
    /// the transport).
    pub fn new(endpoints: &[String]) -> Result<StateReader, String> {
        if endpoints.is_empty() {
            return Err("no query service endpoint".into());
        }
        let channels = endpoints
            .iter()
            .map(|e| {
                let ep = wire::server::client_endpoint(e.clone()).map_err(|err| format!("{e}: {err}"))?;
                Ok((
                    e.clone(),
                    ep.connect_timeout(Duration::from_secs(2)).connect_lazy(),
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(StateReader {
            channels: Arc::new(channels),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The rows of `keys` of `namespace`, in key order of the request (`None`: absent).
    pub async fn read(
        &self,
        namespace: &str,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<(Vec<u8>, u64)>>, String> {
        let n = self.channels.len();
        let start = self.next.load(Ordering::Relaxed);
        let mut errors = Vec::new();
        for i in 0..n {
            let at = (start + i) % n;
            let (name, channel) = &self.channels[at];
            let mut client = QueryClient::new(channel.clone())
                .max_decoding_message_size(wire::limits::ROWS_RESULT.max_bytes)
                .max_encoding_message_size(wire::limits::ROWS_QUERY.max_bytes);
            let query = pb::RowsQuery {
                namespace: namespace.into(),
                keys: keys.to_vec(),
            };
            match client.get_rows(query).await {
                Ok(reply) => {
                    self.next.store(at, Ordering::Relaxed);
                    let rows = reply.into_inner().rows;
                    return Ok(keys
                        .iter()
                        .map(|k| {
                            rows.iter()
                                .find(|r| &r.key == k)
                                .map(|r| (r.value.clone(), r.version))
                        })
                        .collect());
                }
                Err(s) => errors.push(format!("{name}: {}", s.message())),
            }
        }
        Err(format!("no query service answered: {}", errors.join("; ")))
    }
}

/// The gRPC endorser.
#[derive(Clone)]
pub struct EndorserService {
    core: Arc<EndorserCore>,
    state: StateReader,
    permits: Arc<Semaphore>,
    config: ServiceConfig,
    metrics: Option<Metrics>,
}

impl EndorserService {
    /// A service of `core` reading through `state`.
    pub fn new(
        core: EndorserCore,
        state: StateReader,
        config: ServiceConfig,
        metrics: Option<Metrics>,
    ) -> Self {
        EndorserService {
            core: Arc::new(core),
            state,
            permits: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
            config,
            metrics,
        }
    }

    /// Serves on `listener` until `shutdown` completes.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> crate::Result<()> {
        let limits = self.config.server;
        let (incoming, _stats) = wire::server::incoming(listener, &limits);
        let server = pb::endorser_server::EndorserServer::new(self)
            .max_decoding_message_size(wire::limits::ENDORSE_REQUEST.max_bytes)
            .max_encoding_message_size(wire::limits::ENDORSE_RESPONSE.max_bytes);
        wire::server::builder(&limits)
            .add_service(server)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await?;
        Ok(())
    }

    async fn decide(&self, request: &Request) -> Result<crate::Endorsement, Rejection> {
        let prepared = self.core.prepare(request)?;
        let rows = if prepared.keys().is_empty() {
            Vec::new()
        } else {
            self.state
                .read(self.core.namespace(), prepared.keys())
                .await
                .map_err(|e| Rejection::new(Reason::StateUnavailable, e))?
        };
        let core = self.core.clone();
        let started = Instant::now();
        let signed = tokio::task::spawn_blocking(move || {
            let rows: Vec<token::check::InputRow<'_>> = rows
                .iter()
                .map(|r| r.as_ref().map(|(v, ver)| (v.as_slice(), *ver)))
                .collect();
            core.endorse(&prepared, &rows)
        })
        .await
        .map_err(|e| Rejection::new(Reason::StateUnavailable, format!("signing task: {e}")))?;
        if let Some(m) = &self.metrics {
            m.sign_seconds.observe(started.elapsed().as_secs_f64());
        }
        signed
    }
}

fn rejected(r: &Rejection) -> pb::EndorseResponse {
    pb::EndorseResponse {
        reject: r.reason.to_pb() as i32,
        reject_detail: r.detail.chars().take(1000).collect(),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl pb::endorser_server::Endorser for EndorserService {
    async fn endorse(
        &self,
        request: GrpcRequest<pb::EndorseRequest>,
    ) -> Result<Response<pb::EndorseResponse>, Status> {
        let arrived = Instant::now();
        let Some(raw) = request.into_inner().request else {
            return Err(Status::invalid_argument("no token request"));
        };
        let req = match Request::from_pb(&raw) {
            Ok(r) => r,
            Err(r) => return Ok(Response::new(rejected(&r))),
        };
        let _permit = tokio::time::timeout(self.config.timeout, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| Status::resource_exhausted("endorser busy: every slot is taken; retry later"))?
            .map_err(|_| Status::unavailable("endorser stopping"))?;
        let outcome = tokio::time::timeout(self.config.timeout, self.decide(&req))
            .await
            .unwrap_or_else(|_| Err(Rejection::new(Reason::StateUnavailable, "timed out")));
        let reply = match outcome {
            Ok(e) => {
                if let Some(m) = &self.metrics {
                    m.requests.with_label_values(&["endorsed"]).inc();
                    m.latency.observe(arrived.elapsed().as_secs_f64());
                }
                pb::EndorseResponse {
                    tx_id: e.tx_id,
                    share_index: e.partial.index,
                    partial_signature: e.partial.signature.into_bytes(),
                    reject: 0,
                    reject_detail: String::new(),
                }
            }
            Err(r) => {
                debug!(reason = r.reason.name(), detail = %r.detail, "request refused");
                if let Some(m) = &self.metrics {
                    m.requests.with_label_values(&[r.reason.name()]).inc();
                }
                rejected(&r)
            }
        };
        Ok(Response::new(reply))
    }
}
