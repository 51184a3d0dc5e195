//! Incoming side of the gRPC transport, the client submit endpoint and the status
//! endpoint: one tonic service per replica.
//!
//! * `Exchange`: every envelope is verified (chain, addressee, sender, signature, then
//!   its position against the [`ReplayGuard`]) before it is decoded. The first
//!   envelope that fails ends the stream with an error status (never OK) that names
//!   the reason and carries the stream's [`pb::BftExchangeSummary`] in its details. A
//!   verified message takes a share of its sender's inbound byte budget
//!   (`inbound_bytes_per_peer`) until the replica's input queue took it, so one peer
//!   cannot fill the node's memory or crowd out the others: a sender over its budget
//!   waits (its stream is slowed down), the others do not.
//! * `Submit`: answers once the request is decided, or with an error status
//!   (`submit` module; docs/adr/0007-bft-submit-answers-when-decided.md).
//! * `Status`: view, leader, height and transport counters.

use std::sync::Arc;
use std::time::Duration;

use bft::shell::ShellStatus;
use bft::{Digest, Message, Refusal, ReplicaId};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tonic::{Code, Request, Response, Status, Streaming};
use tracing::debug;
use wire::pb;
use wire::pb::bft_consensus_server::{BftConsensus, BftConsensusServer};

use crate::Error;
use crate::keys::{Link, ReplayGuard, open};
use crate::peers::Peers;
use crate::submit::{Full, Outcome, Waiters};
use crate::transport::{MAX_MESSAGE_BYTES, Stats};

/// A verified peer message with the share of its sender's inbound budget it holds.
pub type Inbound = (ReplicaId, Message, OwnedSemaphorePermit);

/// What the service feeds and reads.
pub struct ServiceDeps {
    /// This replica.
    pub me: ReplicaId,
    /// The consenter set's keys (and chain id), growing with the set in force.
    pub peers: Arc<Peers>,
    /// Verified peer messages for the replica.
    pub tx_inbound: mpsc::Sender<Inbound>,
    /// Client requests for the replica.
    pub tx_requests: mpsc::Sender<Vec<u8>>,
    /// The replica's published status.
    pub rx_status: watch::Receiver<ShellStatus>,
    /// Transport counters.
    pub stats: Arc<Stats>,
    /// Clients waiting for their requests.
    pub waiters: Arc<Waiters>,
    /// Service limits.
    pub limits: ServiceLimits,
}

/// Limits of the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceLimits {
    /// Largest accepted client request.
    pub max_request_bytes: usize,
    /// How long `Submit` waits for the decision before answering DEADLINE_EXCEEDED.
    pub submit_timeout: Duration,
    /// Bytes of verified messages per sender waiting for the replica.
    pub inbound_bytes_per_peer: std::num::NonZeroUsize,
}

/// The application's check of a submitted request (the Arma application decodes it and
/// verifies its batcher signatures): `Err(reason)` answers the client INVALID_ARGUMENT
/// with the reason at once, before the request is queued for the replica.
pub type RequestCheck = Arc<dyn Fn(&[u8]) -> std::result::Result<(), Status> + Send + Sync>;

/// The network config in force, for `Status` with `with_config` (none: the replica
/// orders no config updates).
pub type ConfigSource = Arc<dyn Fn() -> Option<Arc<Vec<u8>>> + Send + Sync>;

/// The `BftConsensus` gRPC service of one replica (clones share all state).
#[derive(Clone)]
pub struct ConsensusService {
    deps: Arc<ServiceDeps>,
    check: Option<RequestCheck>,
    config: Option<ConfigSource>,
    guard: Arc<ReplayGuard>,
    budgets: Arc<std::sync::Mutex<Vec<Arc<Semaphore>>>>,
}

/// Fixed cost charged per inbound message on top of its payload.
const INBOUND_OVERHEAD: usize = 256;

impl ConsensusService {
    /// The service over `deps`.
    pub fn new(deps: ServiceDeps) -> ConsensusService {
        let n = deps.peers.n();
        let budget = deps
            .limits
            .inbound_bytes_per_peer
            .get()
            .min(Semaphore::MAX_PERMITS);
        ConsensusService {
            check: None,
            config: None,
            guard: Arc::new(ReplayGuard::new(n)),
            budgets: Arc::new(std::sync::Mutex::new(
                (0..n).map(|_| Arc::new(Semaphore::new(budget))).collect(),
            )),
            deps: Arc::new(deps),
        }
    }

    /// Checks every submitted request with `check` before it is queued.
    pub fn with_request_check(mut self, check: RequestCheck) -> ConsensusService {
        self.check = Some(check);
        self
    }

    /// Answers `Status` with `with_config` from `source`.
    pub fn with_config_source(mut self, source: ConfigSource) -> ConsensusService {
        self.config = Some(source);
        self
    }

    /// Wraps it into a tonic server with per-call message size limits: `Exchange`
    /// envelopes up to `MAX_MESSAGE_BYTES`, `Submit` requests up to
    /// `max_request_bytes` plus 1 KiB of framing, `Status` 1 KiB (its answer, which may
    /// carry the config in force, up to the `Submit` bound). A larger message ends the
    /// call with `OUT_OF_RANGE` before it is decoded.
    pub fn into_server(self) -> PerCallLimits {
        let small = self.deps.limits.max_request_bytes.saturating_add(1 << 10);
        PerCallLimits {
            exchange: BftConsensusServer::new(self.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(1 << 10),
            submit: BftConsensusServer::new(self.clone())
                .max_decoding_message_size(small)
                .max_encoding_message_size(1 << 10),
            // An answer may carry the config in force, which fits a request.
            status: BftConsensusServer::new(self)
                .max_decoding_message_size(1 << 10)
                .max_encoding_message_size(small),
        }
    }

    /// Takes `size` bytes of `from`'s inbound budget (waits while it is spent).
    /// A replica that joined the set gets its budget at its first message.
    async fn reserve(&self, from: ReplicaId, size: usize) -> Result<OwnedSemaphorePermit, Status> {
        let per_peer = self.deps.limits.inbound_bytes_per_peer.get();
        let budget = {
            let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
            let known = self.deps.peers.n() as usize;
            while budgets.len() < known {
                budgets.push(Arc::new(Semaphore::new(per_peer.min(Semaphore::MAX_PERMITS))));
            }
            budgets
                .get(from as usize)
                .cloned()
                .ok_or_else(|| Status::permission_denied("unknown sender"))?
        };
        let want = size
            .saturating_add(INBOUND_OVERHEAD)
            .min(self.deps.limits.inbound_bytes_per_peer.get());
        let permits = u32::try_from(want).unwrap_or(u32::MAX);
        budget
            .clone()
            .acquire_many_owned(permits)
            .await
            .map_err(|_| Status::unavailable("replica stopped"))
    }
}

/// The `BftConsensus` service with a message size limit per call: tonic sets one
/// decoding limit per service, so each call is routed to a copy of the service
/// (sharing its state) configured with that call's limit.
#[derive(Clone)]
pub struct PerCallLimits {
    exchange: BftConsensusServer<ConsensusService>,
    submit: BftConsensusServer<ConsensusService>,
    status: BftConsensusServer<ConsensusService>,
}

type Inner = BftConsensusServer<ConsensusService>;
type HttpRequest = tonic::codegen::http::Request<tonic::body::Body>;

impl tonic::server::NamedService for PerCallLimits {
    const NAME: &'static str = <Inner as tonic::server::NamedService>::NAME;
}

impl tonic::codegen::Service<HttpRequest> for PerCallLimits {
    type Response = <Inner as tonic::codegen::Service<HttpRequest>>::Response;
    type Error = <Inner as tonic::codegen::Service<HttpRequest>>::Error;
    type Future = <Inner as tonic::codegen::Service<HttpRequest>>::Future;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: HttpRequest) -> Self::Future {
        let path = req.uri().path();
        if path.ends_with("/Exchange") {
            self.exchange.call(req)
        } else if path.ends_with("/Submit") {
            self.submit.call(req)
        } else {
            self.status.call(req)
        }
    }
}

/// How an `Exchange` stream proves its sender: without TLS, each envelope's signature;
/// with mutual TLS, the caller's certificate (consenter of party P is replica P − 1,
/// ADR 0017). The authorization layer admits only consenters to `Exchange`.
fn link_of(caller: Option<wire::tls::Peer>) -> Result<Link, Status> {
    match caller {
        None => Ok(Link::Plain),
        Some(peer) if peer.role == wire::tls::Role::Consenter && peer.party >= 1 => Ok(Link::Tls {
            replica: peer.party - 1,
        }),
        Some(peer) => Err(Status::permission_denied(format!("{peer} is not a consenter"))),
    }
}

/// The status that ends a stream at a rejected envelope, with the summary attached.
fn rejected_status(e: &Error, summary: &pb::BftExchangeSummary) -> Status {
    let code = match e {
        Error::Rejected { reason, .. } if reason.starts_with("replayed") => Code::Aborted,
        Error::Rejected { reason, .. } if reason.starts_with("undecodable") => Code::InvalidArgument,
        Error::Decode { .. } => Code::InvalidArgument,
        _ => Code::PermissionDenied,
    };
    let details = prost::Message::encode_to_vec(summary);
    Status::with_details(code, format!("stream ended: {e}"), details.into())
}

#[tonic::async_trait]
impl BftConsensus for ConsensusService {
    async fn exchange(
        &self,
        request: Request<Streaming<pb::BftEnvelope>>,
    ) -> Result<Response<pb::BftExchangeSummary>, Status> {
        let d = &self.deps;
        let link = link_of(wire::tls::caller(&request))?;
        let mut stream = request.into_inner();
        let mut summary = pb::BftExchangeSummary::default();
        while let Some(env) = stream.message().await? {
            let size = env.payload.len();
            match open(&d.peers.keys(), &self.guard, d.me, link, env) {
                Ok((from, msg)) => {
                    let permit = self.reserve(from, size).await?;
                    d.tx_inbound
                        .send((from, msg, permit))
                        .await
                        .map_err(|_| Status::unavailable("replica stopped"))?;
                    summary.accepted += 1;
                    Stats::bump_received(&d.stats);
                }
                Err(e) => {
                    summary.rejected += 1;
                    Stats::bump_rejected(&d.stats);
                    debug!(error = %e, "rejected envelope; ending the stream");
                    return Err(rejected_status(&e, &summary));
                }
            }
        }
        Ok(Response::new(summary))
    }

    async fn submit(
        &self,
        request: Request<pb::BftSubmitRequest>,
    ) -> Result<Response<pb::BftSubmitResponse>, Status> {
        let d = &self.deps;
        let from_client = wire::tls::caller(&request)
            .is_some_and(|p| matches!(p.role, wire::tls::Role::Client | wire::tls::Role::Router));
        let req = request.into_inner().request;
        if from_client && !is_config_update(&req) {
            return Err(Status::permission_denied(
                "a client or router may submit config updates only; BAFs and complaints come from batchers",
            ));
        }
        let max = d.limits.max_request_bytes;
        if req.is_empty() || req.len() > max {
            return Err(Status::invalid_argument(format!(
                "request must be 1..={max} bytes, got {}",
                req.len()
            )));
        }
        if let Some(check) = &self.check {
            check(&req)?;
        }
        let digest = Digest::of_request(&req);
        let mut ticket = d.waiters.register(digest, req.len()).map_err(|full| match full {
            Full::Bytes { limit } => Status::resource_exhausted(format!(
                "this replica holds {limit} bytes of undecided client requests; retry later or at another replica"
            )),
            Full::Waiting { limit } => Status::resource_exhausted(format!(
                "{limit} clients already wait for decisions at this replica; retry later"
            )),
        })?;
        d.tx_requests.try_send(req).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                Status::resource_exhausted("the replica's request queue is full; retry later")
            }
            mpsc::error::TrySendError::Closed(_) => Status::unavailable("replica stopped"),
        })?;
        let timeout = d.limits.submit_timeout;
        match tokio::time::timeout(timeout, ticket.outcome()).await {
            Ok(Some(Outcome::Decided { seq })) => Ok(Response::new(pb::BftSubmitResponse {
                accepted: true,
                decided_seq: seq,
            })),
            Ok(Some(Outcome::Refused(reason))) => refused(reason),
            Ok(Some(Outcome::Skipped { through })) => Err(Status::unavailable(format!(
                "this replica caught up by state transfer through decision {through} and dropped its \
                 pending requests; the request may be decided: submit it again, here or elsewhere"
            ))),
            Ok(None) => Err(Status::unavailable("replica stopped")),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "not decided within {} ms; it may still be decided: submit it again to learn the outcome \
                 (a decided request is answered at once)",
                timeout.as_millis()
            ))),
        }
    }

    async fn status(
        &self,
        request: Request<pb::BftStatusRequest>,
    ) -> Result<Response<pb::BftStatusResponse>, Status> {
        let d = &self.deps;
        let s = *d.rx_status.borrow();
        let config = if request.get_ref().with_config {
            self.config
                .as_ref()
                .and_then(|source| source())
                .map(|c| c.as_ref().clone())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        Ok(Response::new(pb::BftStatusResponse {
            id: d.me,
            view: s.view,
            leader: s.leader,
            last_decided: s.last_decided,
            view_changing: s.view_changing,
            received: Stats::get(&d.stats.received),
            rejected: Stats::get(&d.stats.rejected),
            dropped_outgoing: Stats::get(&d.stats.dropped_outgoing),
            epoch: s.epoch,
            members: s.members,
            member: s.member,
            config,
        }))
    }
}

/// The answer to a submission the replica refused.
/// Whether `request` is a `ConsenterRequest` holding a config update.
pub(crate) fn is_config_update(request: &[u8]) -> bool {
    matches!(
        <pb::ConsenterRequest as prost::Message>::decode(request).map(|r| r.kind),
        Ok(Some(pb::consenter_request::Kind::ConfigUpdate(_)))
    )
}

fn refused(reason: Refusal) -> Result<Response<pb::BftSubmitResponse>, Status> {
    match reason {
        Refusal::AlreadyDecided => Ok(Response::new(pb::BftSubmitResponse {
            accepted: true,
            decided_seq: 0,
        })),
        Refusal::PoolFull => Err(Status::resource_exhausted(
            "the replica's pending pool is full (max_pending_bytes); retry later",
        )),
        Refusal::TooLarge => Err(Status::invalid_argument("request larger than max_request_bytes")),
        Refusal::Invalid => Err(Status::invalid_argument("the application refused the request")),
        Refusal::NotMember => Err(Status::failed_precondition(
            "this consenter is not a member of the consenter set in force; submit to a member",
        )),
    }
}

/// Moves verified messages to the replica's input queue, releasing each one's share
/// of its sender's budget once the replica's queue took it.
pub async fn forward_inbound(mut rx: mpsc::Receiver<Inbound>, tx_net: mpsc::Sender<(ReplicaId, Message)>) {
    while let Some((from, msg, permit)) = rx.recv().await {
        if tx_net.send((from, msg)).await.is_err() {
            return;
        }
        drop(permit);
    }
}
