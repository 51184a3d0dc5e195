//! Incoming side of the gRPC transport, the client submit endpoint and the status
//! endpoint: one tonic service per replica. Envelopes are verified (and dropped and
//! counted when they fail) on the handler task, then handed to the replica through a
//! bounded channel, so a slow replica slows its peers' streams down.

use std::sync::Arc;

use bft::shell::ShellStatus;
use bft::{Message, ReplicaId};
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;
use wire::pb;
use wire::pb::bft_consensus_server::{BftConsensus, BftConsensusServer};

use crate::keys::{ClusterKeys, open};
use crate::transport::{MAX_MESSAGE_BYTES, Stats};

/// What the service feeds and reads.
pub struct ServiceDeps {
    /// This replica.
    pub me: ReplicaId,
    /// The consenter set's keys.
    pub keys: ClusterKeys,
    /// Verified peer messages for the replica.
    pub tx_net: mpsc::Sender<(ReplicaId, Message)>,
    /// Client requests for the replica.
    pub tx_requests: mpsc::Sender<Vec<u8>>,
    /// The replica's published status.
    pub rx_status: watch::Receiver<ShellStatus>,
    /// Transport counters.
    pub stats: Arc<Stats>,
    /// Largest accepted client request.
    pub max_request_bytes: usize,
}

/// The `BftConsensus` gRPC service of one replica.
pub struct ConsensusService {
    deps: Arc<ServiceDeps>,
}

impl ConsensusService {
    /// The service over `deps`.
    pub fn new(deps: ServiceDeps) -> ConsensusService {
        ConsensusService { deps: Arc::new(deps) }
    }

    /// Wraps it into a tonic server with fabrx's message size limits.
    pub fn into_server(self) -> BftConsensusServer<ConsensusService> {
        BftConsensusServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

#[tonic::async_trait]
impl BftConsensus for ConsensusService {
    async fn exchange(
        &self,
        request: Request<Streaming<pb::BftEnvelope>>,
    ) -> Result<Response<pb::BftExchangeSummary>, Status> {
        let d = &self.deps;
        let mut stream = request.into_inner();
        let mut summary = pb::BftExchangeSummary::default();
        while let Some(env) = stream.message().await? {
            match open(&d.keys, d.me, env) {
                Ok(from_msg) => {
                    d.tx_net
                        .send(from_msg)
                        .await
                        .map_err(|_| Status::unavailable("replica stopped"))?;
                    summary.accepted += 1;
                    d.stats
                        .received
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => {
                    summary.rejected += 1;
                    d.stats
                        .rejected
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    debug!(error = %e, "dropped envelope");
                }
            }
        }
        Ok(Response::new(summary))
    }

    async fn submit(
        &self,
        request: Request<pb::BftSubmitRequest>,
    ) -> Result<Response<pb::BftSubmitResponse>, Status> {
        let req = request.into_inner().request;
        if req.is_empty() || req.len() > self.deps.max_request_bytes {
            return Err(Status::invalid_argument(format!(
                "request must be 1..={} bytes, got {}",
                self.deps.max_request_bytes,
                req.len()
            )));
        }
        self.deps
            .tx_requests
            .send(req)
            .await
            .map_err(|_| Status::unavailable("replica stopped"))?;
        Ok(Response::new(pb::BftSubmitResponse { accepted: true }))
    }

    async fn status(
        &self,
        _request: Request<pb::BftStatusRequest>,
    ) -> Result<Response<pb::BftStatusResponse>, Status> {
        let d = &self.deps;
        let s = *d.rx_status.borrow();
        Ok(Response::new(pb::BftStatusResponse {
            id: d.me,
            view: s.view,
            leader: s.leader,
            last_decided: s.last_decided,
            view_changing: s.view_changing,
            received: Stats::get(&d.stats.received),
            rejected: Stats::get(&d.stats.rejected),
            dropped_outgoing: Stats::get(&d.stats.dropped_outgoing),
        }))
    }
}
