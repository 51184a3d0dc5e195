//! The party's validator-committers, called with failover. Every vcservice of a party
//! reads the same state database, so any one answers for all: a call goes to the endpoint
//! that answered last, and on a transport failure or timeout to the next, each endpoint
//! at most once per call. When none answers the call fails `UNAVAILABLE`, naming each
//! endpoint and why.

use crate::{Error, Result};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tracing::{debug, warn};
use wire::pb;
use wire::pb::vc_service_client::VcServiceClient;

/// How the upstream calls behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// A call without an answer within this time counts as failed; the next endpoint is
    /// tried.
    pub call_timeout: Duration,
    /// Time allowed to open a connection to an endpoint.
    pub connect_timeout: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            call_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

/// The vcservices of one party, with failover. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct VcUpstream {
    endpoints: Vec<(String, VcServiceClient<Channel>)>,
    /// The endpoint that answered last: tried first.
    preferred: AtomicUsize,
    call_timeout: Duration,
}

/// Whether a failed call may succeed on another endpoint: the endpoint is down, slow or
/// its store failed. Answers about the request itself (`INVALID_ARGUMENT`, …) are final.
fn worth_another_endpoint(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown
            | Code::Aborted
            | Code::Internal
    )
}

impl VcUpstream {
    /// Clients of `endpoints` (`host:port` or `http://host:port`); connections open lazily,
    /// on the first call.
    pub fn new(endpoints: &[String], config: UpstreamConfig) -> Result<VcUpstream> {
        if endpoints.is_empty() {
            return Err(Error::Config {
                detail: "no vcservice endpoints configured".into(),
            });
        }
        let endpoints = endpoints
            .iter()
            .map(|e| {
                let uri = if e.contains("://") {
                    e.clone()
                } else {
                    format!("http://{e}")
                };
                let channel = wire::server::client_endpoint(uri)
                    .map_err(|err| Error::Config {
                        detail: format!("vcservice endpoint {e:?}: {err}"),
                    })?
                    .connect_timeout(config.connect_timeout)
                    .connect_lazy();
                let client = VcServiceClient::new(channel)
                    .max_decoding_message_size(wire::limits::COMMITTER_MAX_ANSWER_BYTES)
                    .max_encoding_message_size(wire::limits::VCSERVICE_MAX_MESSAGE_BYTES);
                Ok((e.clone(), client))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(VcUpstream {
            endpoints,
            preferred: AtomicUsize::new(0),
            call_timeout: config.call_timeout,
        })
    }

    /// The endpoints, in configuration order.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.endpoints.iter().map(|(e, _)| e.as_str())
    }

    /// `VcService.ReadRows`.
    pub async fn read_rows(&self, q: pb::RowsQuery) -> std::result::Result<pb::RowsResult, Status> {
        self.call("ReadRows", |mut c| {
            let q = q.clone();
            async move { c.read_rows(q).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    /// `VcService.OwnedRows`.
    pub async fn owned_rows(&self, q: pb::OwnedQuery) -> std::result::Result<pb::RowsResult, Status> {
        self.call("OwnedRows", |mut c| {
            let q = q.clone();
            async move { c.owned_rows(q).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    /// `VcService.GetStatuses`.
    pub async fn statuses(&self, q: pb::StatusQuery) -> std::result::Result<pb::TxStatusBatch, Status> {
        self.call("GetStatuses", |mut c| {
            let q = q.clone();
            async move { c.get_statuses(q).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    async fn call<T, F, Fut>(&self, method: &'static str, f: F) -> std::result::Result<T, Status>
    where
        F: Fn(VcServiceClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        let n = self.endpoints.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        for i in (0..n).map(|k| (first + k) % n) {
            let (endpoint, client) = &self.endpoints[i];
            let reason = match tokio::time::timeout(self.call_timeout, f(client.clone())).await {
                Ok(Ok(answer)) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(answer);
                }
                Ok(Err(s)) if !worth_another_endpoint(&s) => return Err(s),
                Ok(Err(s)) => format!("{:?}: {}", s.code(), s.message()),
                Err(_) => format!("no answer within {:?}", self.call_timeout),
            };
            debug!(endpoint = %endpoint, method, reason = %reason, "vcservice failed; trying the next");
            failures.push(format!("{endpoint}: {reason}"));
        }
        warn!(method, endpoints = n, "no vcservice answered");
        Err(Status::unavailable(format!(
            "no vcservice of this party answered {method}: {}",
            failures.join("; ")
        )))
    }
}
