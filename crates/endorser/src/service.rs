//! `Endorser.Endorse` over gRPC: decode, check, read the inputs through a query service
//! at one snapshot, sign.

use crate::core::EndorserCore;
use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};
use token::{Reason, Rejection, Request};
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
    pub max_in_flight: std::num::NonZeroUsize,
    /// How long one request may take, state read included.
    pub timeout: Duration,
    /// Connection, stream and idle limits of the server.
    pub server: wire::server::ServerLimits,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            max_in_flight: std::num::NonZeroUsize::new(64).unwrap_or(std::num::NonZeroUsize::MIN),
            timeout: Duration::from_secs(10),
            server: wire::server::ServerLimits::default(),
        }
    }
}

/// Reads the inputs' committed rows through the query services, trusting none of them:
/// a row counts only when it is an unspent token that hashes to the key it was read for
/// (`token::value::verified`), so a lying service can neither give an input another owner
/// nor more value. An input without such a row at one service is asked of the next, so
/// one service that hides or denies a token cannot block a payment either; what the
/// first service said is kept for inputs that no service proves (the refusal then names
/// it). The services are asked in the configured order (the endorser's own party's
/// first), starting from the one that answered last.
#[derive(Debug, Clone)]
pub struct StateReader {
    channels: Arc<Vec<(String, Channel)>>,
    call_timeout: Duration,
    /// The service that answered last: asked first (a service that is down is not
    /// waited for on every request; the order above is the order until one answers).
    preferred: Arc<std::sync::atomic::AtomicUsize>,
}

/// Largest answer of a query service an endorser decodes (a request's at most 64 inputs).
pub const MAX_ROWS_ANSWER_BYTES: usize = 1 << 20;

/// One input's row as a service answered it (`None`: absent).
pub type Row = Option<(Vec<u8>, u64)>;

/// Whether `row` proves that `key` is an unspent token.
fn proves(key: &[u8], row: &Row) -> bool {
    matches!(row, Some((value, 0)) if token::value::verified(key, value).is_some())
}

/// Merges one service's answer for the inputs at `asked` into `best` (`None`: no
/// service answered for that input yet): a proving row replaces anything; otherwise the
/// first answer stays.
pub fn merge_rows(keys: &[Vec<u8>], asked: &[usize], answer: &[Row], best: &mut [Option<Row>]) {
    for (&i, row) in asked.iter().zip(answer) {
        let (Some(key), Some(slot)) = (keys.get(i), best.get_mut(i)) else {
            continue;
        };
        let proven = slot.as_ref().is_some_and(|r| proves(key, r));
        if !proven && (slot.is_none() || proves(key, row)) {
            *slot = Some(row.clone());
        }
    }
}

impl StateReader {
    /// A reader over `endpoints` (`http://host:port`, in the order they are asked;
    /// connected lazily, reconnected by the transport).
    pub fn new(endpoints: &[String]) -> Result<StateReader, String> {
        if endpoints.is_empty() {
            return Err("no query service endpoint".into());
        }
        let channels = endpoints
            .iter()
            .map(|e| {
                let channel =
                    clients::channel::lazy(e, Duration::from_secs(2)).map_err(|err| err.to_string())?;
                Ok((e.clone(), channel))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(StateReader {
            channels: Arc::new(channels),
            call_timeout: Duration::from_secs(3),
            preferred: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        })
    }

    async fn ask(&self, at: usize, namespace: &str, keys: Vec<Vec<u8>>) -> Result<Vec<Row>, String> {
        let (name, channel) = &self.channels[at];
        // At most 64 inputs of a few hundred bytes each: an answer much larger is not one
        // the endorser needs to hold.
        let mut client = QueryClient::new(channel.clone())
            .max_decoding_message_size(MAX_ROWS_ANSWER_BYTES)
            .max_encoding_message_size(wire::limits::ROWS_QUERY.max_bytes);
        let query = pb::RowsQuery {
            namespace: namespace.into(),
            keys: keys.clone(),
        };
        let reply = match tokio::time::timeout(self.call_timeout, client.get_rows(query)).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(s)) => return Err(format!("{name}: {}", s.message())),
            Err(_) => return Err(format!("{name}: no answer within {:?}", self.call_timeout)),
        };
        Ok(keys
            .iter()
            .map(|k| {
                reply
                    .rows
                    .iter()
                    .find(|r| &r.key == k)
                    .map(|r| (r.value.clone(), r.version))
            })
            .collect())
    }

    /// The rows of `keys` of `namespace`, in key order of the request (`None`: absent).
    pub async fn read(&self, namespace: &str, keys: &[Vec<u8>]) -> Result<Vec<Row>, String> {
        let mut best: Vec<Option<Row>> = vec![None; keys.len()];
        let mut errors = Vec::new();
        let n = self.channels.len();
        let first = self.preferred.load(std::sync::atomic::Ordering::Relaxed) % n;
        let mut answered = false;
        for at in (0..n).map(|k| (first + k) % n) {
            let asked: Vec<usize> = (0..keys.len())
                .filter(|&i| !best[i].as_ref().is_some_and(|r| proves(&keys[i], r)))
                .collect();
            if asked.is_empty() {
                break;
            }
            let wanted = asked.iter().map(|&i| keys[i].clone()).collect();
            match self.ask(at, namespace, wanted).await {
                Ok(answer) => {
                    if !answered {
                        answered = true;
                        self.preferred.store(at, std::sync::atomic::Ordering::Relaxed);
                    }
                    merge_rows(keys, &asked, &answer, &mut best);
                }
                Err(e) => errors.push(e),
            }
        }
        if best.iter().any(Option::is_none) {
            return Err(format!("no query service answered: {}", errors.join("; ")));
        }
        Ok(best.into_iter().map(Option::unwrap_or_default).collect())
    }
}

/// The gRPC endorser.
#[derive(Clone)]
pub struct EndorserService {
    core: Arc<EndorserCore>,
    state: StateReader,
    permits: Arc<Semaphore>,
    config: ServiceConfig,
    metrics: Metrics,
}

impl EndorserService {
    /// A service of `core` reading through `state`.
    pub fn new(core: EndorserCore, state: StateReader, config: ServiceConfig, metrics: Metrics) -> Self {
        EndorserService {
            core: Arc::new(core),
            state,
            permits: Arc::new(Semaphore::new(config.max_in_flight.get())),
            config,
            metrics,
        }
    }

    /// The gRPC service with its message bounds.
    pub fn into_server(self) -> pb::endorser_server::EndorserServer<EndorserService> {
        pb::endorser_server::EndorserServer::new(self)
            .max_decoding_message_size(wire::limits::ENDORSE_REQUEST.max_bytes)
            .max_encoding_message_size(wire::limits::ENDORSE_RESPONSE.max_bytes)
    }

    async fn decide(&self, request: &Request) -> Result<crate::Endorsement, Rejection> {
        let prepared = self.core.prepare(request, token::request::unix_now())?;
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
        self.metrics.sign_seconds.observe(started.elapsed().as_secs_f64());
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
                self.metrics.requests.with_label_values(&["endorsed"]).inc();
                self.metrics.latency.observe(arrived.elapsed().as_secs_f64());
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
                self.metrics.requests.with_label_values(&[r.reason.name()]).inc();
                rejected(&r)
            }
        };
        Ok(Response::new(reply))
    }
}
