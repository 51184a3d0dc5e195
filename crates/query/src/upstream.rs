//! The party's validator-committers, called with failover (`clients::Failover`). Every
//! vcservice of a party reads the same state database, so any one answers for all: a call
//! goes to the endpoint that answered last, and on an answer the clients' retry
//! classification retries (`clients::retry`), or none within the call timeout, to the
//! next, each endpoint at most once per call. When none answers the call fails
//! `UNAVAILABLE`, naming each endpoint and why.

use crate::{Error, Result};
use std::future::Future;
use std::time::Duration;
use tonic::Status;
use tonic::transport::Channel;
use tracing::warn;
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

/// The vcservices of one party, with failover (`clients::Failover`). Cheap to share
/// (`Arc`).
#[derive(Debug)]
pub struct VcUpstream {
    inner: clients::Failover<VcServiceClient<Channel>>,
}

impl VcUpstream {
    /// Clients of `endpoints` (`host:port` or `http://host:port`); connections open lazily,
    /// on the first call.
    pub fn new(endpoints: &[String], config: UpstreamConfig) -> Result<VcUpstream> {
        let endpoints = endpoints
            .iter()
            .map(|e| {
                let channel =
                    clients::channel::lazy(e, config.connect_timeout).map_err(|err| Error::Config {
                        detail: format!("vcservice {err}"),
                    })?;
                let client = VcServiceClient::new(channel)
                    .max_decoding_message_size(wire::limits::COMMITTER_MAX_ANSWER_BYTES)
                    .max_encoding_message_size(wire::limits::VCSERVICE_MAX_MESSAGE_BYTES);
                Ok((e.clone(), client))
            })
            .collect::<Result<Vec<_>>>()?;
        let inner = clients::Failover::new("vcservice", endpoints, config.call_timeout).ok_or_else(|| {
            Error::Config {
                detail: "no vcservice endpoints configured".into(),
            }
        })?;
        Ok(VcUpstream { inner })
    }

    /// The endpoints, in configuration order.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.inner.endpoints()
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
        self.inner.call(f).await.map_err(|e| match e {
            clients::FailoverError::Final { code, message, .. } => Status::new(code, message),
            clients::FailoverError::NoneAnswered { reasons, .. } => {
                warn!(method, endpoints = reasons.len(), "no vcservice answered");
                Status::unavailable(format!(
                    "no vcservice of this party answered {method}: {}",
                    reasons.join("; ")
                ))
            }
        })
    }
}
