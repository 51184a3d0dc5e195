//! The network as a wallet sees it.

use crate::{Error, Result};
use std::collections::HashMap;
use std::time::Duration;
use token::{Reason, Rejection, Request, Token};
use tokio_stream::StreamExt as _;
use tonic::transport::Channel;
use types::Status;
use wire::pb;
use wire::pb::endorser_client::EndorserClient;
use wire::pb::query_client::QueryClient;
use wire::pb::router_client::RouterClient;
use wire::pb::sidecar_client::SidecarClient;

/// Where the token application's services are and the keys it checks against.
#[derive(Debug, Clone)]
pub struct TokenNetwork {
    /// Every party's router (`http://host:port`).
    pub routers: Vec<String>,
    /// Committing parties' sidecars (notifications).
    pub sidecars: Vec<String>,
    /// Query services.
    pub query: Vec<String>,
    /// Endorsers, by share index order (endorser `i` holds share `i + 1`).
    pub endorsers: Vec<String>,
    /// The namespace's threshold key set.
    pub public: crypto::ThresholdPublicKeys,
    /// The token namespace.
    pub namespace: String,
    /// Its policy version.
    pub ns_version: u64,
    /// How long one call may take.
    pub call_timeout: Duration,
}

/// What the routers said to one envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submitted {
    /// Routers that accepted it.
    pub acks: usize,
    /// Routers needed (2f + 1).
    pub quorum: usize,
}

fn channel(uri: &str) -> Result<Channel> {
    let ep = wire::server::client_endpoint(uri.to_string())
        .map_err(|e| Error::Unreachable(format!("{uri}: {e}")))?;
    Ok(ep.connect_timeout(Duration::from_secs(3)).connect_lazy())
}

/// The quorum of `n` routers: 2f + 1.
pub fn quorum(n: usize) -> usize {
    2 * (n.saturating_sub(1) / 3) + 1
}

impl TokenNetwork {
    async fn timed<T>(
        &self,
        f: impl Future<Output = std::result::Result<T, tonic::Status>>,
    ) -> std::result::Result<T, String> {
        match tokio::time::timeout(self.call_timeout, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(s)) => Err(format!("{:?}: {}", s.code(), s.message())),
            Err(_) => Err("timed out".into()),
        }
    }

    /// Partial signatures of at least t endorsers over `message` (each verified against
    /// its share's key), or why not.
    pub async fn endorse(&self, request: &Request, message: &[u8]) -> Result<Vec<crypto::PartialSignature>> {
        let t = self.public.threshold() as usize;
        let pb_request = request.to_pb();
        let mut calls = futures::stream::FuturesUnordered::new();
        for (i, uri) in self.endorsers.iter().enumerate() {
            let req = pb::EndorseRequest {
                request: Some(pb_request.clone()),
            };
            let uri = uri.clone();
            calls.push(async move {
                let answer = match channel(&uri) {
                    Ok(ch) => {
                        let mut c = EndorserClient::new(ch);
                        self.timed(async { c.endorse(req).await.map(tonic::Response::into_inner) })
                            .await
                    }
                    Err(e) => Err(e.to_string()),
                };
                (i, answer)
            });
        }
        let mut partials = Vec::new();
        let mut refusals: Vec<Rejection> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        while let Some((i, answer)) = calls.next().await {
            match answer {
                Err(e) => failures.push(format!("endorser {}: {e}", i + 1)),
                Ok(r) if r.reject != 0 => {
                    let reason = Reason::from_pb(r.reject).unwrap_or(Reason::Malformed);
                    let rej = Rejection::new(reason, r.reject_detail);
                    failures.push(format!("endorser {}: {rej}", i + 1));
                    refusals.push(rej);
                }
                Ok(r) => {
                    let partial = crypto::PartialSignature {
                        index: r.share_index,
                        signature: crypto::Signature::from_bytes(r.partial_signature),
                    };
                    let ok = r.tx_id == request.tx_id()
                        && !partials
                            .iter()
                            .any(|p: &crypto::PartialSignature| p.index == partial.index)
                        && crypto::verify_namespace_endorsement_partial(&self.public, message, &partial)
                            .is_ok();
                    if ok {
                        partials.push(partial);
                        if partials.len() >= t {
                            return Ok(partials);
                        }
                    } else {
                        failures.push(format!(
                            "endorser {}: a partial signature that does not verify",
                            i + 1
                        ));
                    }
                }
            }
        }
        // A refusal for a reason of the request itself is what the payer needs to see.
        if let Some(r) = refusals
            .into_iter()
            .find(|r| r.reason != Reason::StateUnavailable)
        {
            return Err(Error::Refused(r));
        }
        Err(Error::BelowThreshold {
            endorsed: partials.len(),
            threshold: t,
            detail: failures.join("; "),
        })
    }

    /// Sends `envelope` to every router; counts who accepted it.
    pub async fn submit(&self, envelope: &[u8]) -> Submitted {
        let mut calls = futures::stream::FuturesUnordered::new();
        for uri in &self.routers {
            let env = envelope.to_vec();
            let uri = uri.clone();
            calls.push(async move {
                let Ok(ch) = channel(&uri) else { return false };
                let mut c = RouterClient::new(ch);
                let one = tokio_stream::iter(vec![pb::SubmitRequest { id: 0, envelope: env }]);
                let answer = self
                    .timed(async {
                        let mut responses = c.submit(one).await?.into_inner();
                        responses.message().await
                    })
                    .await;
                matches!(answer, Ok(Some(r)) if r.code == 0 || r.code == tonic::Code::AlreadyExists as u32)
            });
        }
        let mut acks = 0;
        while let Some(ok) = calls.next().await {
            acks += usize::from(ok);
        }
        Submitted {
            acks,
            quorum: quorum(self.routers.len()),
        }
    }

    fn query(&self) -> Result<Vec<QueryClient<Channel>>> {
        self.query
            .iter()
            .map(|u| {
                Ok(QueryClient::new(channel(u)?)
                    .max_decoding_message_size(wire::limits::ROWS_RESULT.max_bytes))
            })
            .collect()
    }

    /// Final statuses (and blocks) of `ids` that have one.
    pub async fn statuses(&self, ids: &[String]) -> Result<HashMap<String, (Status, u64)>> {
        let mut errors = Vec::new();
        for mut c in self.query()? {
            let q = pb::StatusQuery { tx_ids: ids.to_vec() };
            match self
                .timed(async { c.get_tx_status(q).await.map(tonic::Response::into_inner) })
                .await
            {
                Ok(batch) => {
                    return Ok(batch
                        .statuses
                        .into_iter()
                        .filter_map(|s| Some((s.tx_id, (Status::from_code(s.code).ok()?, s.block))))
                        .collect());
                }
                Err(e) => errors.push(e),
            }
        }
        Err(Error::Unreachable(format!(
            "no query service answered: {}",
            errors.join("; ")
        )))
    }

    /// Every unspent token `owner` holds, from the committer's owner index.
    pub async fn owned(&self, owner: &token::Address) -> Result<Vec<Token>> {
        let mut errors = Vec::new();
        'clients: for mut c in self.query()? {
            let mut tokens = Vec::new();
            let mut after = Vec::new();
            loop {
                let q = pb::OwnedQuery {
                    namespace: self.namespace.clone(),
                    owner: owner.to_vec(),
                    after_key: after.clone(),
                    limit: 0,
                };
                let page = match self
                    .timed(async { c.get_owned(q).await.map(tonic::Response::into_inner) })
                    .await
                {
                    Ok(p) => p,
                    Err(e) => {
                        errors.push(e);
                        continue 'clients;
                    }
                };
                for row in &page.rows {
                    if let Ok(t) = Token::decode(&row.value) {
                        tokens.push(t);
                    }
                }
                match page.rows.last() {
                    Some(last) if page.more => after = last.key.clone(),
                    _ => return Ok(tokens),
                }
            }
        }
        Err(Error::Unreachable(format!(
            "no query service answered: {}",
            errors.join("; ")
        )))
    }

    /// Waits up to `wait` for the final status of `tx_id`: from a sidecar's notification
    /// stream, and by asking the query service once a second (whichever says first).
    pub async fn wait_status(&self, tx_id: &str, wait: Duration) -> Result<Option<(Status, u64)>> {
        let deadline = tokio::time::Instant::now() + wait;
        let ids = vec![tx_id.to_string()];
        let notified = async {
            for uri in self.sidecars.iter().cycle() {
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
                let Ok(ch) = channel(uri) else { continue };
                let mut c = SidecarClient::new(ch);
                let sub = tokio_stream::iter(vec![pb::SubscribeRequest { tx_ids: ids.clone() }])
                    .chain(tokio_stream::pending());
                if let Ok(r) = c.subscribe(sub).await {
                    let mut events = r.into_inner();
                    while let Ok(Some(ev)) = events.message().await {
                        if let Some(st) = ev.status.filter(|s| s.tx_id == tx_id)
                            && let Ok(status) = Status::from_code(st.code)
                        {
                            return Some((status, st.block));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            None
        };
        let polled = async {
            loop {
                if let Ok(found) = self.statuses(&ids).await
                    && let Some(s) = found.get(tx_id)
                {
                    return Some(*s);
                }
                if tokio::time::Instant::now() >= deadline {
                    return None;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        let first = tokio::time::timeout_at(deadline, async {
            tokio::select! {
                Some(s) = notified => Some(s),
                Some(s) = polled => Some(s),
                else => None,
            }
        })
        .await;
        Ok(first.unwrap_or(None))
    }
}
