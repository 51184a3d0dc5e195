//! Remote stages with failover: a pool of vcservice endpoints and a pool of sigverifier
//! endpoints.
//!
//! Failover rule (FX §3.6): a call that fails for a transport reason (the endpoint is down,
//! the connection broke, no answer within the call timeout) is resubmitted to the next
//! endpoint, round robin, with backoff once every endpoint failed in a row. The lost call
//! is dropped, so a late answer from the lost endpoint has nowhere to go and is ignored.
//! Resubmission is safe because the vcservice answers a tx it already decided with the
//! stored status (conditional commits, ADR 0001) and verification has no effects.
//! A refusal (invalid argument and the like) is not retried: it is a bug or bad input and
//! surfaces as [`Error::Remote`].

use crate::stages::{CommitStage, VerifyBatch, VerifyStage};
use crate::{Error, Result};
use clients::verifier::VerifierClient;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tracing::warn;
use types::{NamespacePolicy, Status, TxOutcome, VcTx};
use wire::encode::{Encoded, TxBody};
use wire::pb;
use wire::pb::vc_service_client::VcServiceClient;

/// Timing of remote calls.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// A call without an answer within this time counts as lost.
    pub call_timeout: Duration,
    /// First backoff after every endpoint failed in a row (doubles up to 2 s).
    pub backoff: Duration,
    /// Stop retrying after this long without success (`None`: retry until stopped).
    pub give_up_after: Option<Duration>,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            call_timeout: Duration::from_secs(30),
            backoff: Duration::from_millis(50),
            give_up_after: None,
        }
    }
}

/// The failover bookkeeping of one call: after a lost attempt, log it, give up once
/// `give_up_after` has passed, and back off (50 ms doubling to 2 s by default) each time
/// every endpoint failed in a row.
struct Retry<'a> {
    what: &'static str,
    endpoints: usize,
    config: &'a RemoteConfig,
    start: Instant,
    backoff: Duration,
    failures: usize,
}

impl<'a> Retry<'a> {
    fn new(what: &'static str, endpoints: usize, config: &'a RemoteConfig) -> Retry<'a> {
        Retry {
            what,
            endpoints,
            config,
            start: Instant::now(),
            backoff: config.backoff,
            failures: 0,
        }
    }

    /// Records an attempt lost at `endpoint`; `Err` when it is time to give up.
    async fn lost(&mut self, endpoint: &str, reason: String) -> Result<()> {
        warn!(service = self.what, %endpoint, %reason, "call lost; resubmitting");
        self.failures += 1;
        if let Some(limit) = self.config.give_up_after
            && self.start.elapsed() > limit
        {
            return Err(Error::Unavailable {
                service: self.what,
                detail: reason,
            });
        }
        if self.failures.is_multiple_of(self.endpoints) {
            tokio::time::sleep(self.backoff).await;
            self.backoff = (self.backoff * 2).min(Duration::from_secs(2));
        }
        Ok(())
    }
}

/// Round-robin endpoint selection with failover (the vcservice pool): one pass over the
/// endpoints is `clients::Failover`; a pass in which none answered is retried after a
/// backoff until `give_up_after`.
struct Failover<C> {
    inner: clients::Failover<C>,
    config: RemoteConfig,
}

impl<C: Clone> Failover<C> {
    async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(C) -> Fut,
        Fut: Future<Output = std::result::Result<T, tonic::Status>>,
    {
        let mut retry = Retry::new(self.inner.what(), 1, &self.config);
        loop {
            match self.inner.call(&f).await {
                Ok(v) => return Ok(v),
                Err(clients::FailoverError::Final {
                    endpoint,
                    code,
                    message,
                }) => {
                    return Err(Error::Remote {
                        service: self.inner.what(),
                        endpoint,
                        detail: format!("{code:?}: {message}"),
                    });
                }
                Err(e @ clients::FailoverError::NoneAnswered { .. }) => {
                    retry.lost("every endpoint", e.to_string()).await?;
                }
            }
        }
    }
}

fn channel(addr: &str) -> Result<Channel> {
    clients::channel::lazy(addr, Duration::from_secs(2)).map_err(|e| Error::Config {
        detail: e.to_string(),
    })
}

/// A batch handed over with another number of bodies than txs (a bug of the caller).
fn body_count(stage: &'static str, bodies: usize, txs: usize) -> Error {
    Error::Stage {
        stage,
        detail: format!("{bodies} encoded bodies for {txs} txs"),
    }
}

fn no_endpoints(what: &str) -> Error {
    Error::Config {
        detail: format!("no {what} endpoints configured"),
    }
}

/// Matches an answer to the batch it answers: every tx exactly once.
fn outcomes_from_wire(
    batch: &[VcTx],
    answer: pb::TxStatusBatch,
) -> std::result::Result<Vec<TxOutcome>, String> {
    let mut out = Vec::with_capacity(answer.statuses.len());
    for s in answer.statuses {
        out.push(TxOutcome::try_from(s).map_err(|e| format!("bad status in answer: {e}"))?);
    }
    // The vcservice answers in batch order: then the ids match one by one, without sorting.
    if out.len() == batch.len() && out.iter().zip(batch).all(|(o, t)| o.id == t.id) {
        return Ok(out);
    }
    let mut asked: Vec<&str> = batch.iter().map(|t| t.id.0.as_str()).collect();
    let mut got: Vec<&str> = out.iter().map(|o| o.id.0.as_str()).collect();
    asked.sort_unstable();
    got.sort_unstable();
    if asked != got {
        return Err(format!(
            "answer covers {} txs, the batch has {} (or other ids)",
            got.len(),
            asked.len()
        ));
    }
    Ok(out)
}

/// One vcservice endpoint: the generated client, and the same channel for `Commit`
/// calls that send encoded batches.
#[derive(Clone)]
struct VcClient {
    api: VcServiceClient<Channel>,
    raw: tonic::client::Grpc<Channel>,
}

impl VcClient {
    fn new(channel: Channel) -> VcClient {
        let api = VcServiceClient::new(channel.clone())
            .max_decoding_message_size(wire::limits::COMMITTER_MAX_ANSWER_BYTES)
            .max_encoding_message_size(wire::limits::VCSERVICE_MAX_MESSAGE_BYTES);
        let raw = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(wire::limits::COMMITTER_MAX_ANSWER_BYTES)
            .max_encoding_message_size(wire::limits::VCSERVICE_MAX_MESSAGE_BYTES);
        VcClient { api, raw }
    }

    /// `VcService.Commit` with one encoded batch: the stream of answers (the generated
    /// `commit`, with the batch's bytes as they are).
    async fn commit(
        &mut self,
        batch: Encoded,
    ) -> std::result::Result<tonic::Streaming<pb::TxStatusBatch>, tonic::Status> {
        self.raw
            .ready()
            .await
            .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
        let codec = wire::codec::BoundedCodec::<Encoded, pb::TxStatusBatch>::default();
        let path = tonic::codegen::http::uri::PathAndQuery::from_static("/fabrx.v1.VcService/Commit");
        let mut req = tonic::Request::new(tokio_stream::once(batch));
        req.extensions_mut()
            .insert(tonic::GrpcMethod::new("fabrx.v1.VcService", "Commit"));
        Ok(self.raw.streaming(req, path, codec).await?.into_inner())
    }
}

/// vcservice endpoints with failover. Each batch is one short `Commit` stream, so a lost
/// call never shares a stream with other batches.
pub struct VcPool {
    inner: Failover<VcClient>,
}

impl VcPool {
    /// A pool over `endpoints` (`host:port` or URLs); connections are made lazily.
    pub fn new(endpoints: &[String], config: RemoteConfig) -> Result<VcPool> {
        if endpoints.is_empty() {
            return Err(no_endpoints("vcservice"));
        }
        let clients = endpoints
            .iter()
            .map(|a| Ok((a.clone(), VcClient::new(channel(a)?))))
            .collect::<Result<Vec<_>>>()?;
        let inner = clients::Failover::new("vcservice", clients, config.call_timeout)
            .ok_or_else(|| no_endpoints("vcservice"))?
            .with_order(clients::Order::RoundRobin);
        Ok(VcPool {
            inner: Failover { inner, config },
        })
    }

    /// Commits one batch that fits the limits (`req`: `batch` encoded), with failover.
    async fn process_part(&self, batch: &[VcTx], req: Encoded) -> Result<Vec<TxOutcome>> {
        self.inner
            .call(|mut c| {
                let req = req.clone();
                async move {
                    let mut answers = c.commit(req).await?;
                    let answer = answers
                        .message()
                        .await?
                        .ok_or_else(|| tonic::Status::unavailable("stream ended without an answer"))?;
                    outcomes_from_wire(batch, answer).map_err(tonic::Status::internal)
                }
            })
            .await
    }
}

/// Whether `bytes`, an encoded batch, fits the vcservice's batch limits
/// (`wire::limits::VC_BATCH`).
fn fits_encoded(bytes: &[u8]) -> bool {
    let limit = wire::limits::VC_BATCH;
    bytes.len() <= limit.max_bytes && wire::budget::check(bytes, limit.schema, limit.budget).is_ok()
}

/// Encoded consecutive parts of `txs` that each fit the batch limits, halving what does
/// not fit, with their lengths. A single tx is its own part even when it does not fit
/// (the vcservice then refuses it with `RESOURCE_EXHAUSTED`). Processing the parts one
/// after the other is what the vcservice does with a batch's conflict-free chunks anyway.
///
/// `bodies[i]`, when given, is `txs[i]`'s encoded body, spliced instead of encoding the
/// tx again (`wire::encode::vc_batch_with_bodies`).
fn encoded_parts(txs: &[VcTx], bodies: &[TxBody], out: &mut Vec<(usize, Vec<u8>)>) {
    let bytes = wire::encode::vc_batch_with_bodies(txs, bodies);
    if txs.len() <= 1 || fits_encoded(&bytes) {
        out.push((txs.len(), bytes));
        return;
    }
    let half = txs.len() / 2;
    let (first, second) = txs.split_at(half);
    let (first_bodies, second_bodies) = bodies.split_at(half.min(bodies.len()));
    encoded_parts(first, first_bodies, out);
    encoded_parts(second, second_bodies, out);
}

impl VcPool {
    /// Commits `batch` in parts that fit the limits (`bodies`: as for [`encoded_parts`]).
    async fn process_parts(&self, batch: &[VcTx], bodies: &[TxBody]) -> Result<Vec<TxOutcome>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let mut parts = Vec::new();
        encoded_parts(batch, bodies, &mut parts);
        let mut out = Vec::with_capacity(batch.len());
        let mut start = 0;
        for (len, bytes) in parts {
            let end = start + len;
            let req = Encoded::from(bytes);
            out.extend(self.process_part(&batch[start..end], req).await?);
            start = end;
        }
        Ok(out)
    }
}

#[tonic::async_trait]
impl CommitStage for VcPool {
    async fn process(&self, batch: Vec<VcTx>) -> Result<Vec<TxOutcome>> {
        self.process_parts(&batch, &[]).await
    }

    async fn process_encoded(&self, batch: Vec<VcTx>, bodies: Vec<TxBody>) -> Result<Vec<TxOutcome>> {
        if bodies.len() != batch.len() {
            return Err(body_count("vcservice", bodies.len(), batch.len()));
        }
        self.process_parts(&batch, &bodies).await
    }

    async fn set_last_committed(&self, block: u64) -> Result<()> {
        self.inner
            .call(|mut c| async move {
                c.api
                    .set_last_committed(pb::SetLastCommittedRequest { number: block })
                    .await
                    .map(|_| ())
            })
            .await
    }

    async fn last_committed(&self) -> Result<Option<u64>> {
        let next = self
            .inner
            .call(|mut c| async move {
                Ok(c.api
                    .get_next_block(pb::LastCommittedRequest {})
                    .await?
                    .into_inner()
                    .number)
            })
            .await?;
        Ok(next.checked_sub(1))
    }

    async fn policies(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let list = self
            .inner
            .call(|mut c| async move { Ok(c.api.get_policies(pb::PoliciesRequest {}).await?.into_inner()) })
            .await?;
        Ok(list
            .policies
            .into_iter()
            .map(|p| (p.namespace, p.policy))
            .collect())
    }
}

/// sigverifier endpoints with failover. Each endpoint has at most one live multiplexed
/// stream; a broken one is replaced on next use, and the new stream first receives every
/// policy set so far, so a batch is always verified under every earlier policy update.
pub struct VerifierPool {
    endpoints: Vec<String>,
    slots: Vec<tokio::sync::Mutex<Option<VerifierClient>>>,
    policies: std::sync::Mutex<BTreeMap<String, NamespacePolicy>>,
    next: AtomicUsize,
    config: RemoteConfig,
}

impl VerifierPool {
    /// A pool over `endpoints`; connections are made on first use.
    pub fn new(endpoints: &[String], config: RemoteConfig) -> Result<VerifierPool> {
        if endpoints.is_empty() {
            return Err(no_endpoints("sigverifier"));
        }
        Ok(VerifierPool {
            endpoints: endpoints.to_vec(),
            slots: endpoints.iter().map(|_| tokio::sync::Mutex::new(None)).collect(),
            policies: std::sync::Mutex::new(BTreeMap::new()),
            next: AtomicUsize::new(0),
            config,
        })
    }

    fn policy_snapshot(&self) -> Vec<(String, NamespacePolicy)> {
        let guard = match self.policies.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        guard.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// The live client of endpoint `i`, connecting (and sending every policy) if needed.
    async fn client(&self, i: usize) -> std::result::Result<VerifierClient, String> {
        let mut slot = self.slots[i].lock().await;
        if let Some(c) = slot.as_ref()
            && !c.is_disconnected()
        {
            return Ok(c.clone());
        }
        *slot = None;
        let c = tokio::time::timeout(
            self.config.call_timeout,
            VerifierClient::connect(&self.endpoints[i]),
        )
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
        for (ns, p) in self.policy_snapshot() {
            c.set_policy(&ns, &p).await.map_err(|e| e.to_string())?;
        }
        *slot = Some(c.clone());
        Ok(c)
    }
}

impl VerifierPool {
    /// Verifies `batch` with failover (`bodies`: each tx's encoded body, or none).
    async fn verify_with(&self, batch: &VerifyBatch, bodies: &[TxBody]) -> Result<Vec<Option<Status>>> {
        let n = self.endpoints.len();
        let mut retry = Retry::new("sigverifier", n, &self.config);
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % n;
            let reason = match self.client(i).await {
                Err(e) => e,
                Ok(c) => {
                    match tokio::time::timeout(self.config.call_timeout, c.verify_encoded(batch, bodies))
                        .await
                    {
                        Ok(Ok(v)) if v.len() == batch.len() => return Ok(v),
                        Ok(Ok(v)) => format!("{} verdicts for {} txs", v.len(), batch.len()),
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => format!("no answer within {:?}", self.config.call_timeout),
                    }
                }
            };
            // Drop the stream: a late answer on it is never read.
            *self.slots[i].lock().await = None;
            retry.lost(&self.endpoints[i], reason).await?;
        }
    }
}

#[tonic::async_trait]
impl VerifyStage for VerifierPool {
    async fn verify(&self, batch: VerifyBatch) -> Result<Vec<Option<Status>>> {
        self.verify_with(&batch, &[]).await
    }

    async fn verify_encoded(&self, batch: &VerifyBatch, bodies: Vec<TxBody>) -> Result<Vec<Option<Status>>> {
        if bodies.len() != batch.len() {
            return Err(body_count("verify", bodies.len(), batch.len()));
        }
        self.verify_with(batch, &bodies).await
    }

    async fn set_policy(&self, ns: &str, policy: &NamespacePolicy) -> Result<()> {
        // Refuse what no verifier would accept before recording it.
        policy::Policies::new().set(ns, policy)?;
        {
            let mut guard = match self.policies.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            guard.insert(ns.to_string(), policy.clone());
        }
        for slot in &self.slots {
            let mut slot = slot.lock().await;
            if let Some(c) = slot.as_ref()
                && c.set_policy(ns, policy).await.is_err()
            {
                // Broken: the next use reconnects and sends every policy.
                *slot = None;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod split_tests {
    use super::*;
    use std::sync::Arc;
    use types::{Height, Tx, TxId, TxNamespace, Write};

    fn tx(i: usize, values: usize, value_len: usize) -> VcTx {
        VcTx {
            id: TxId(format!("t{i}")),
            height: Height::new(1, i as u32),
            tx: Arc::new(Tx {
                namespaces: vec![TxNamespace {
                    ns_id: "token".into(),
                    blind_writes: (0..values)
                        .map(|v| Write {
                            key: format!("k{i}-{v}").into_bytes(),
                            value: vec![1; value_len],
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            prelim: None,
        }
    }

    fn parts(txs: &[VcTx]) -> Vec<usize> {
        let mut out = Vec::new();
        encoded_parts(txs, &[], &mut out);
        for (len, bytes) in &out {
            assert!(*len == 1 || fits_encoded(bytes));
        }
        out.into_iter().map(|(len, _)| len).collect()
    }

    #[test]
    fn batches_are_split_to_fit_the_vcservice_limits() {
        // The usual batch: one part.
        let small: Vec<_> = (0..500).map(|i| tx(i, 2, 100)).collect();
        assert_eq!(parts(&small), vec![500]);
        // Three txs of ~3 MiB: 9 MiB is over the 8 MiB limit; halves are sent in order.
        let big: Vec<_> = (0..3).map(|i| tx(i, 3, 1 << 20)).collect();
        let p = parts(&big);
        assert_eq!(p.iter().sum::<usize>(), 3);
        assert!(p.len() >= 2, "{p:?}");
        // Many writes per tx: within the wire limit but over the decoded budget.
        let dense: Vec<_> = (0..2000).map(|i| tx(i, 100, 0)).collect();
        let p = parts(&dense);
        assert!(p.len() >= 2, "{p:?}");
        assert_eq!(p.iter().sum::<usize>(), 2000);
        // A single tx over the limit stays alone (the vcservice refuses it).
        assert_eq!(parts(&[tx(0, 9, 1 << 20)]), vec![1]);
    }

    #[test]
    fn an_answer_covers_the_batch_in_any_order() {
        let batch: Vec<_> = (0..4).map(|i| tx(i, 1, 1)).collect();
        let answer = |order: &[usize]| pb::TxStatusBatch {
            statuses: order
                .iter()
                .map(|&i| {
                    pb::TxStatus::from(&TxOutcome::new(
                        TxId(format!("t{i}")),
                        Status::Committed,
                        Height::new(1, i as u32),
                    ))
                })
                .collect(),
        };
        let ids = |out: Vec<TxOutcome>| out.into_iter().map(|o| o.id.0).collect::<Vec<_>>();
        let got = outcomes_from_wire(&batch, answer(&[0, 1, 2, 3])).unwrap();
        assert_eq!(ids(got), ["t0", "t1", "t2", "t3"]);
        let got = outcomes_from_wire(&batch, answer(&[2, 0, 3, 1])).unwrap();
        assert_eq!(ids(got), ["t2", "t0", "t3", "t1"]);
        for bad in [&[0, 1, 2][..], &[0, 1, 2, 3, 3], &[0, 1, 2, 2], &[]] {
            assert!(outcomes_from_wire(&batch, answer(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_encoded_batch_is_sent_as_its_bytes() {
        use prost::Message;
        let txs: Vec<_> = (0..5).map(|i| tx(i, 2, 10 * i)).collect();
        let bytes = wire::encode::vc_batch(&txs);
        let sent = Encoded(bytes.clone().into());
        assert_eq!(sent.encoded_len(), bytes.len());
        assert_eq!(sent.encode_to_vec(), bytes);
        let decoded = pb::VcBatch::decode(sent.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.txs.len(), 5);
        assert_eq!(decoded.txs[3], pb::VcTx::from(&txs[3]));
    }
}
