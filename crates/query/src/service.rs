//! The gRPC shell of the query service (`fabrx.v1.Query`): checks a request, waits for
//! one of a bounded number of permits, and forwards it to the party's vcservices.

use crate::check;
use crate::metrics::Metrics;
use crate::upstream::VcUpstream;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{Request, Response, Status};
use tracing::instrument;
use wire::pb;
use wire::pb::query_server::{Query, QueryServer};

/// Largest request accepted (`wire::limits::TOKEN_SERVICE_MAX_MESSAGE_BYTES`).
pub const MAX_REQUEST_BYTES: usize = wire::limits::TOKEN_SERVICE_MAX_MESSAGE_BYTES;

/// Largest answer sent: rows (`wire::limits::ROWS_RESULT`) or statuses
/// (`wire::limits::TX_STATUS_BATCH`), as large as the vcservice sends them.
pub const MAX_ANSWER_BYTES: usize = wire::limits::COMMITTER_MAX_ANSWER_BYTES;

/// The tonic service. Cheap to clone.
#[derive(Debug, Clone)]
pub struct QueryService {
    upstream: Arc<VcUpstream>,
    permits: Arc<Semaphore>,
    queue_timeout: Duration,
    metrics: Metrics,
    reads: Arc<crate::reads::ReadPolicy>,
    limiter: Arc<std::sync::Mutex<crate::limiter::Limiter>>,
}

impl QueryService {
    /// A service over `upstream` serving at most `max_concurrent` requests at once; a
    /// request that waits longer than `queue_timeout` for its turn is refused
    /// `RESOURCE_EXHAUSTED`. It records into `metrics`.
    pub fn new(
        upstream: Arc<VcUpstream>,
        max_concurrent: std::num::NonZeroUsize,
        queue_timeout: Duration,
        metrics: Metrics,
    ) -> QueryService {
        QueryService {
            upstream,
            permits: Arc::new(Semaphore::new(max_concurrent.get())),
            queue_timeout,
            metrics,
            reads: Arc::new(crate::reads::ReadPolicy::default()),
            limiter: Arc::new(std::sync::Mutex::new(crate::limiter::Limiter::new(
                crate::reads::ReadPolicy::default().per_reader_per_second,
                crate::reads::ReadPolicy::default().per_service_per_second,
            ))),
        }
    }

    /// The service enforcing `reads` on `GetOwned`.
    pub fn with_reads(mut self, reads: crate::reads::ReadPolicy) -> QueryService {
        self.limiter = Arc::new(std::sync::Mutex::new(crate::limiter::Limiter::new(
            reads.per_reader_per_second,
            reads.per_service_per_second,
        )));
        self.reads = Arc::new(reads);
        self
    }

    /// Whether the caller of `q` may read its owner's tokens now.
    fn authorize(&self, q: &pb::OwnedQuery) -> Result<(), Status> {
        if !self.reads.signed {
            return Ok(());
        }
        let reader = token::read::check_read(q, &self.reads.auditors, token::request::unix_now())
            .map_err(|e| Status::permission_denied(e.to_string()))?;
        let verdict = self
            .limiter
            .lock()
            .map_err(|_| Status::internal("the read limiter failed"))?
            .allow(&reader, std::time::Instant::now());
        match verdict {
            Ok(()) => Ok(()),
            Err(crate::limiter::Limited::Reader) => Err(Status::resource_exhausted(format!(
                "this reader made more than {} reads per second",
                self.reads.per_reader_per_second
            ))),
            Err(crate::limiter::Limited::Service) => Err(Status::resource_exhausted(format!(
                "the query service serves at most {} signed reads per second; retry later",
                self.reads.per_service_per_second
            ))),
        }
    }

    /// Runs `answer` for RPC `rpc`, recording its outcome and latency.
    async fn measured<T>(
        &self,
        rpc: &str,
        answer: impl std::future::Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let m = &self.metrics;
        let started = std::time::Instant::now();
        m.in_flight.inc();
        let outcome = answer.await;
        m.in_flight.dec();
        m.observe(rpc, started.elapsed().as_secs_f64(), &outcome);
        outcome
    }

    /// The tonic server wrapper, with the message limits.
    pub fn into_server(self) -> QueryServer<QueryService> {
        QueryServer::new(self)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .max_encoding_message_size(MAX_ANSWER_BYTES)
    }

    async fn permit(&self) -> Result<OwnedSemaphorePermit, Status> {
        match tokio::time::timeout(self.queue_timeout, self.permits.clone().acquire_owned()).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(Status::unavailable("query service shutting down")),
            Err(_) => Err(Status::resource_exhausted(format!(
                "query service busy: no turn within {:?}",
                self.queue_timeout
            ))),
        }
    }
}

#[tonic::async_trait]
impl Query for QueryService {
    #[instrument(skip_all)]
    async fn get_rows(&self, request: Request<pb::RowsQuery>) -> Result<Response<pb::RowsResult>, Status> {
        self.measured("rows", async {
            let q = request.into_inner();
            check::rows_query(&q)?;
            let _permit = self.permit().await?;
            self.upstream.read_rows(q).await.map(Response::new)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn get_owned(&self, request: Request<pb::OwnedQuery>) -> Result<Response<pb::RowsResult>, Status> {
        self.measured("owned", async {
            let q = request.into_inner();
            // The signature covers the request as sent, so it is checked before the page
            // size is clamped.
            self.authorize(&q)?;
            let q = check::owned_query(q)?;
            let _permit = self.permit().await?;
            self.upstream.owned_rows(q).await.map(Response::new)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn get_tx_status(
        &self,
        request: Request<pb::StatusQuery>,
    ) -> Result<Response<pb::TxStatusBatch>, Status> {
        self.measured("status", async {
            let q = request.into_inner();
            check::status_query(&q)?;
            let _permit = self.permit().await?;
            self.upstream.statuses(q).await.map(Response::new)
        })
        .await
    }
}
