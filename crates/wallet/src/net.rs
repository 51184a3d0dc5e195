//! The network as a wallet sees it, trusting no single party: a token counts only when
//! its row hashes to its key and names this wallet's owner, and a status or a token only
//! when [`TokenNetwork::confirmations`] query services (f + 1 of the committing parties'
//! by default) give it. A sidecar's notification only wakes the wallet up to ask them.

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
    /// How many query services must agree before a status or a token is believed
    /// (at least 1; [`confirmations`] of the number of query services by default).
    pub confirmations: std::num::NonZeroUsize,
}

/// Rows the wallet asks for per page of owned rows; a page with more is not believed.
pub const OWNED_PAGE_ROWS: u32 = 1000;

/// Most pages of owned rows read from one query service (100,000 tokens).
pub const MAX_OWNED_PAGES: usize = 100;

/// Largest answer the wallet decodes from a query service (a page of owned rows is well
/// under 1 MiB).
pub const MAX_QUERY_ANSWER_BYTES: usize = 4 << 20;

/// How long reading every page of one query service may take.
pub const OWNED_DEADLINE: Duration = Duration::from_secs(60);

/// The confirmations a wallet needs in a network of `parties` parties of which
/// `running` run a query service: f + 1 (f = ⌊(parties − 1)/3⌋), so that at least one of
/// them is honest when at most f parties are not — or every running one when fewer run
/// (with one committing party, that party is trusted by necessity).
pub fn confirmations(parties: usize, running: usize) -> std::num::NonZeroUsize {
    let f_plus_1 = std::num::NonZeroUsize::MIN.saturating_add(parties.saturating_sub(1) / 3);
    // With no query service running, one answer is still needed (and none will come).
    f_plus_1.min(std::num::NonZeroUsize::new(running).unwrap_or(std::num::NonZeroUsize::MIN))
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
    clients::channel::lazy(uri, clients::channel::DEFAULT_CONNECT_TIMEOUT)
        .map_err(|e| Error::Unreachable(e.to_string()))
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
        // A refusal for a reason of the request itself is what the payer needs to see, but
        // only when enough endorsers gave it that no t could have endorsed: one endorser
        // alone cannot make the wallet report a reason of its choosing.
        let n = self.endorsers.len();
        let decisive = n.saturating_sub(t) + 1;
        let mut counts: Vec<(Reason, usize)> = Vec::new();
        for r in refusals.iter().filter(|r| r.reason != Reason::StateUnavailable) {
            match counts.iter_mut().find(|(reason, _)| *reason == r.reason) {
                Some(c) => c.1 += 1,
                None => counts.push((r.reason, 1)),
            }
        }
        if let Some((reason, _)) = counts.iter().find(|(_, c)| *c >= decisive)
            && let Some(r) = refusals.into_iter().find(|r| r.reason == *reason)
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
            quorum: types::quorum::client_acks(self.routers.len()),
        }
    }

    /// The confirmations needed, when at least that many query services answered (else
    /// the network is unreachable, naming why the others did not).
    fn enough_answered(&self, answered: usize, errors: &[String]) -> Result<usize> {
        let need = self.confirmations.get();
        if answered < need {
            return Err(Error::Unreachable(format!(
                "{answered} query services answered, {need} needed: {}",
                errors.join("; ")
            )));
        }
        Ok(need)
    }

    fn query(&self) -> Result<Vec<QueryClient<Channel>>> {
        self.query
            .iter()
            .map(|u| Ok(QueryClient::new(channel(u)?).max_decoding_message_size(MAX_QUERY_ANSWER_BYTES)))
            .collect()
    }

    /// Final statuses (and blocks) of `ids` that [`TokenNetwork::confirmations`] query
    /// services agree on. Statuses that are never stored (a duplicate id, a bad envelope)
    /// are not an id's final status and are left out.
    pub async fn statuses(&self, ids: &[String]) -> Result<HashMap<String, (Status, u64)>> {
        let calls = self.query()?.into_iter().map(|mut c| {
            let q = pb::StatusQuery { tx_ids: ids.to_vec() };
            async move {
                self.timed(async { c.get_tx_status(q).await.map(tonic::Response::into_inner) })
                    .await
            }
        });
        let answers = futures::future::join_all(calls).await;
        let mut errors = Vec::new();
        let mut votes: HashMap<(String, Status, u64), usize> = HashMap::new();
        let mut answered = 0;
        for a in answers {
            match a {
                Ok(batch) => {
                    answered += 1;
                    let mut seen = std::collections::HashSet::new();
                    for s in batch.statuses {
                        let Ok(status) = Status::from_code(s.code) else {
                            continue;
                        };
                        if status.is_stored() && ids.contains(&s.tx_id) && seen.insert(s.tx_id.clone()) {
                            *votes.entry((s.tx_id, status, s.block)).or_default() += 1;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        let need = self.enough_answered(answered, &errors)?;
        let mut confirmed: HashMap<String, Option<(Status, u64)>> = HashMap::new();
        for ((id, status, block), n) in votes {
            if n >= need {
                // Two outcomes confirmed for one id: the services disagree beyond f, so
                // neither is believed.
                confirmed
                    .entry(id)
                    .and_modify(|c| *c = None)
                    .or_insert(Some((status, block)));
            }
        }
        Ok(confirmed
            .into_iter()
            .filter_map(|(id, c)| Some((id, c?)))
            .collect())
    }

    /// Every token one query service says `owner` holds, checked: each row hashes to its
    /// key and names `owner`; a page holds at most [`OWNED_PAGE_ROWS`] rows in rising key
    /// order after the last page's; at most [`MAX_OWNED_PAGES`] pages within
    /// [`OWNED_DEADLINE`]. The query is signed by the owner's key (only the owner may
    /// read its tokens).
    async fn owned_from(
        &self,
        c: &mut QueryClient<Channel>,
        key: &crypto::SigningKey,
        owner: &token::Address,
    ) -> std::result::Result<Vec<Token>, String> {
        let read = async {
            let mut tokens = Vec::new();
            let mut after: Vec<u8> = Vec::new();
            for _ in 0..MAX_OWNED_PAGES {
                let q = token::read::signed_owned_query(
                    key,
                    &self.namespace,
                    &after,
                    OWNED_PAGE_ROWS,
                    token::request::unix_now(),
                );
                let page = self
                    .timed(async { c.get_owned(q).await.map(tonic::Response::into_inner) })
                    .await?;
                if page.rows.len() > OWNED_PAGE_ROWS as usize {
                    return Err(format!(
                        "the query service answered a page of {} rows ({OWNED_PAGE_ROWS} asked)",
                        page.rows.len()
                    ));
                }
                for row in &page.rows {
                    if row.key <= after {
                        return Err("the query service's rows do not advance".into());
                    }
                    match token::value::verified(&row.key, &row.value) {
                        Some(t) if &t.owner == owner && row.version == 0 => tokens.push(t),
                        _ => {
                            return Err(format!(
                                "the query service answered a row that is not one of this wallet's tokens (key {})",
                                String::from_utf8_lossy(&row.key)
                                    .chars()
                                    .take(80)
                                    .collect::<String>()
                            ));
                        }
                    }
                    after.clone_from(&row.key);
                }
                if !page.more {
                    return Ok(tokens);
                }
                if page.rows.is_empty() {
                    return Err("the query service's pages do not advance".into());
                }
            }
            Err(format!("more than {MAX_OWNED_PAGES} pages of tokens"))
        };
        tokio::time::timeout(OWNED_DEADLINE, read)
            .await
            .unwrap_or_else(|_| Err(format!("no complete answer within {OWNED_DEADLINE:?}")))
    }

    /// Every unspent token the wallet of `key` holds, from the committers' owner index:
    /// those that [`TokenNetwork::confirmations`] query services list, each row checked.
    pub async fn owned(&self, key: &crypto::SigningKey) -> Result<Vec<Token>> {
        let owner: token::Address = key
            .public_key()
            .as_bytes()
            .try_into()
            .map_err(|_| Error::Invalid("the wallet key is not an Ed25519 key".into()))?;
        let mut clients = self.query()?;
        let calls = clients.iter_mut().map(|c| self.owned_from(c, key, &owner));
        let answers = futures::future::join_all(calls).await;
        let mut errors = Vec::new();
        let mut votes: HashMap<Vec<u8>, (Token, usize)> = HashMap::new();
        let mut answered = 0;
        for a in answers {
            match a {
                Ok(tokens) => {
                    answered += 1;
                    let mut seen = std::collections::HashSet::new();
                    for t in tokens {
                        let k = t.key();
                        if seen.insert(k.clone()) {
                            votes.entry(k).or_insert((t, 0)).1 += 1;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        let need = self.enough_answered(answered, &errors)?;
        let mut out: Vec<Token> = votes
            .into_values()
            .filter(|(_, n)| *n >= need)
            .map(|(t, _)| t)
            .collect();
        out.sort_by_key(Token::key);
        Ok(out)
    }

    /// Resolves once a sidecar reports a stored final status for `tx_id` (a hint only:
    /// the status is then confirmed through the query services); never, without sidecars.
    async fn notified(&self, tx_id: &str) {
        if self.sidecars.is_empty() {
            return std::future::pending().await;
        }
        let ids = vec![tx_id.to_string()];
        for uri in self.sidecars.iter().cycle() {
            if let Ok(ch) = channel(uri) {
                let mut c = SidecarClient::new(ch);
                let sub = tokio_stream::iter(vec![pb::SubscribeRequest { tx_ids: ids.clone() }])
                    .chain(tokio_stream::pending());
                if let Ok(r) = c.subscribe(sub).await {
                    let mut events = r.into_inner();
                    while let Ok(Some(ev)) = events.message().await {
                        if ev.status.is_some_and(|s| {
                            s.tx_id == tx_id && Status::from_code(s.code).is_ok_and(Status::is_stored)
                        }) {
                            return;
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Waits up to `wait` for the final status of `tx_id`, confirmed by
    /// [`TokenNetwork::confirmations`] query services (asked once a second, and at once
    /// when a sidecar notifies a status).
    pub async fn wait_status(&self, tx_id: &str, wait: Duration) -> Result<Option<(Status, u64)>> {
        let deadline = tokio::time::Instant::now() + wait;
        let ids = vec![tx_id.to_string()];
        let hint = self.notified(tx_id);
        tokio::pin!(hint);
        let mut hinted = false;
        loop {
            if let Ok(found) = self.statuses(&ids).await
                && let Some(s) = found.get(tx_id)
            {
                return Ok(Some(*s));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let pause = (deadline - now).min(Duration::from_secs(1));
            tokio::select! {
                () = &mut hint, if !hinted => hinted = true,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}
