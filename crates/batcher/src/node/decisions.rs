//! Following the own party's consenter: its `Consenter.Decisions` stream, from the next
//! decision the node has not finished, in order. For every decision, the headers of
//! this shard become ordered batches with their requests (from this node's memory or
//! store when it holds the batch with that digest, else fetched by id and digest from
//! the batchers of the shard, digest checked), then the term changes of this shard; the
//! loop feeds them to the core in that order (docs/batcher.md "Ordered requests").
//! When the own consenter no longer holds the next decision (it pruned it, or caught up
//! by a snapshot and skipped it), the follower reads from the other consenters in turn;
//! every decision's certificate is verified whichever consenter serves it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::transport::Channel;
use tracing::{debug, warn};
use types::digest::{Digest32, batch_digest};
use types::{BatchId, ShardId};
use wire::pb;
use wire::pb::batcher_peer_client::BatcherPeerClient;
use wire::pb::consenter_client::ConsenterClient;

use super::served::Served;
use super::store::StoreReader;
use super::{ShellConfig, Stats, bump};
use crate::{Error, Request, Result, SignedBatch, TermInfo};

/// Largest `Decision` message the node reads from its consenter.
pub const DECISION_MAX_MESSAGE_BYTES: usize = 16 << 20;

/// One ordered batch of this shard, with its requests.
#[derive(Debug)]
pub struct OrderedBatch {
    /// Its id.
    pub id: BatchId,
    /// The term it was cut in.
    pub term: u64,
    /// Its digest.
    pub digest: Digest32,
    /// Its requests.
    pub requests: Vec<Request>,
}

/// One decision, as far as this shard is concerned.
#[derive(Debug)]
pub struct Decided {
    /// The decision's number.
    pub number: u64,
    /// The shard's ordered batches, in header order.
    pub ordered: Vec<OrderedBatch>,
    /// The shard's term changes, in order.
    pub terms: Vec<TermInfo>,
    /// The config this decision put in force, if it did (its batching parameters and
    /// batcher keys follow).
    pub config: Option<arma::ConfigView>,
}

/// Checks a decision's quorum certificate before the node acts on it: with the consenter
/// set's keys, a quorum of valid commit signatures over a proposal digest that commits
/// to exactly the headers and term changes carried (`arma::verify_pb_decision`, ADR
/// 0009); without them (tests with a scripted consenter) every decision is accepted.
pub fn verify_decision(decision: &pb::Decision, consenters: Option<&arma::ClusterKeys>) -> Result<()> {
    let Some(keys) = consenters else {
        return Ok(());
    };
    let verifier = arma::CertificateVerifier::new(keys.clone());
    arma::verify_pb_decision(decision, &keys.chain_id(), &verifier, &keys.members())
        .map(|_| ())
        .map_err(|e| Error::DecisionRefused {
            decision: decision.number,
            reason: e.to_string(),
        })
}

/// Where a batcher keeps the consenter sets it learned.
pub fn sets_path(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("consenter-sets.bin")
}

/// The consenter sets of `config` (none without keys), with the switches the node
/// persisted before it stopped.
pub fn load_sets(config: &super::Config) -> Result<Option<arma::ConsenterSets>> {
    let Some(keys) = &config.consenter_keys else {
        return Ok(None);
    };
    let mut sets = arma::ConsenterSets::new(keys, config.config_rules.clone());
    let path = sets_path(&config.data_dir);
    let storage = |reason: String| Error::Storage {
        what: "read the consenter sets",
        reason,
    };
    let at = |e: &dyn std::fmt::Display| storage(format!("{}: {e}", path.display()));
    if let Some(bytes) = clients::file::read_if_present(&path).map_err(|e| at(&e))? {
        sets.restore(&bytes).map_err(|e| at(&e))?;
    }
    Ok(Some(sets))
}

/// Everything the follower needs.
pub struct Follower {
    /// This batcher's shard.
    pub shard: ShardId,
    /// The own party's consenter.
    pub consenter: Channel,
    /// The consenters (fallbacks, read from only when the own one no longer holds the
    /// next decision — OUT_OF_RANGE: pruned, or skipped by a state-transfer snapshot — and
    /// only when `consenter_keys` is set, so what they serve is verified) and the batchers
    /// of the shard (for `Fetch`), growing when a party joins.
    pub book: Arc<super::book::Book>,
    /// The consenter sets whose certificates decisions must carry, by decision
    /// (`None`: unchecked).
    pub sets: Option<arma::ConsenterSets>,
    /// Where the sets learned are persisted.
    pub sets_path: std::path::PathBuf,
    /// Batches in memory.
    pub served: Arc<Served>,
    /// The store.
    pub store: StoreReader,
    /// Where decisions go.
    pub tx: mpsc::Sender<Decided>,
    /// Backoff and timeouts.
    pub shell: ShellConfig,
    /// Counters.
    pub stats: Arc<Stats>,
    /// The next decision to read.
    pub next: u64,
    /// Whether ordered batches are resolved to their requests (false: a joining party's
    /// batcher waiting for the decision that adds it, which needs headers only).
    pub fetch_batches: bool,
}

impl Follower {
    /// Follows the stream forever, reconnecting with backoff.
    pub async fn run(mut self) {
        let mut attempt = 0u32;
        // 0: the own consenter; i: fallback i - 1.
        let mut source = 0usize;
        // Consenters tried in a row that did not hold the next decision.
        let mut not_held = 0usize;
        loop {
            let before = self.next;
            let fallbacks = self.book.consenters();
            let channel = match source.checked_sub(1) {
                Some(i) if !fallbacks.is_empty() => fallbacks[i % fallbacks.len()].clone(),
                _ => self.consenter.clone(),
            };
            let (reason, out_of_range, ahead) = self.follow(source, channel).await;
            if self.tx.is_closed() {
                return;
            }
            if self.next > before {
                attempt = 0;
                not_held = 0;
            }
            if let Some(i) = ahead {
                // Another consenter holds what this one did not give: follow it.
                debug!(next = self.next, reason, "leaving a consenter that is behind");
                source = i;
                continue;
            }
            let can_fail_over = self.sets.is_some() && !fallbacks.is_empty();
            if out_of_range && can_fail_over {
                not_held = not_held.saturating_add(1);
                source = (source % fallbacks.len()) + 1;
                if not_held <= fallbacks.len() {
                    // This consenter cannot serve decision `next`: try the next at once.
                    debug!(
                        next = self.next,
                        reason, "decision not held by this consenter; trying another"
                    );
                    continue;
                }
                // Nobody holds it (pruned everywhere): keep trying, with backoff.
                not_held = 0;
            } else if can_fail_over {
                // The source is down (its consenter crashed, or stopped because its party
                // left): the next one, the own consenter again after the others, so that
                // a batcher follows the decisions while any consenter serves them.
                source = (source + 1) % (fallbacks.len() + 1);
            } else {
                source = 0;
            }
            if attempt >= 3 {
                warn!(next = self.next, attempt, reason, "decision stream down");
            } else {
                debug!(next = self.next, reason, "decision stream down");
            }
            tokio::time::sleep(self.shell.backoff(attempt)).await;
            attempt = attempt.saturating_add(1);
        }
    }

    /// Reads decisions from source `at` (0: the own consenter; i: fallback i − 1) until
    /// the stream fails; returns why, whether the consenter said it does not hold the
    /// next decision, and another source found ahead of it (checked every
    /// `clients::decisions::CHECK_EVERY` when decisions are verified: a consenter that
    /// keeps its stream open and silent, trickles or replays old decisions is left).
    async fn follow(&mut self, at: usize, channel: Channel) -> (String, bool, Option<usize>) {
        let mut client = ConsenterClient::new(channel).max_decoding_message_size(DECISION_MAX_MESSAGE_BYTES);
        let request = pb::DecisionsRequest { from: self.next };
        let out_of_range = |s: &tonic::Status| s.code() == tonic::Code::OutOfRange;
        let mut stream = match client.decisions(request).await {
            Ok(s) => s.into_inner(),
            Err(s) => {
                return (
                    format!("open: {:?}: {}", s.code(), s.message()),
                    out_of_range(&s),
                    None,
                );
            }
        };
        let reason = self.follow_stream(at, &mut stream).await;
        match reason {
            Ok((reason, ahead)) => (reason, false, ahead),
            Err(s) => (format!("{:?}: {}", s.code(), s.message()), out_of_range(&s), None),
        }
    }

    /// The sources other than `at`, by source number.
    fn other_sources(&self, at: usize) -> Vec<(usize, Channel)> {
        std::iter::once(self.consenter.clone())
            .chain(self.book.consenters())
            .enumerate()
            .filter(|(i, _)| *i != at)
            .collect()
    }

    /// Feeds the decisions of `stream` in order; `Err` is the stream's status.
    async fn follow_stream(
        &mut self,
        at: usize,
        stream: &mut tonic::Streaming<pb::Decision>,
    ) -> std::result::Result<(String, Option<usize>), tonic::Status> {
        use tokio_stream::StreamExt as _;
        // Without keys nothing served can be verified: no other source is trusted.
        let others = if self.sets.is_some() {
            self.other_sources(at)
        } else {
            Vec::new()
        };
        // The probe verifies with a copy of the sets: made again after each switch, or
        // every decision probed after it would fail under the set before.
        let checks_of = |sets: &Option<arma::ConsenterSets>, next: u64| {
            let sets = sets.clone();
            let verify: clients::decisions::Verify = std::sync::Arc::new(move |d: &pb::Decision| {
                sets.as_ref().is_none_or(|s| s.check_decision(d).is_ok())
            });
            clients::decisions::Checks::new(others.clone(), DECISION_MAX_MESSAGE_BYTES, verify, next)
        };
        let mut checks = checks_of(&self.sets, self.next);
        loop {
            let next = self.next;
            let message = tokio::select! {
                m = stream.next() => m,
                (i, from) = checks.ahead(next) => {
                    if self.next <= from {
                        return Ok((format!("source {i} holds decision {from}, which this one has not given"), Some(i)));
                    }
                    continue;
                }
            };
            let decision = match message {
                Some(Ok(d)) => d,
                None => return Ok(("the consenter ended the stream".into(), None)),
                Some(Err(s)) => return Err(s),
            };
            if decision.number < self.next {
                continue;
            }
            if decision.number > self.next {
                return Ok((
                    format!(
                        "decision {} arrived while {} was expected",
                        decision.number, self.next
                    ),
                    None,
                ));
            }
            let config = match self.verify_and_learn(&decision) {
                Ok(c) => c,
                Err(e) => return Ok((format!("decision {} does not verify: {e}", decision.number), None)),
            };
            let switched = config.is_some();
            let decided = match self.resolve(decision).await {
                Ok(d) => Decided { config, ..d },
                Err(e) => return Ok((e.to_string(), None)),
            };
            if self.tx.send(decided).await.is_err() {
                return Ok(("node stopped".into(), None));
            }
            self.next = self.next.saturating_add(1);
            if switched {
                checks = checks_of(&self.sets, self.next);
            }
        }
    }

    /// Verifies the next decision under the set in force for it; a decision that puts a
    /// config in force makes its set the next one, persisted before the decision is used,
    /// and gives that config.
    fn verify_and_learn(
        &mut self,
        decision: &pb::Decision,
    ) -> std::result::Result<Option<arma::ConfigView>, String> {
        let Some(sets) = self.sets.as_mut() else {
            return Ok(None);
        };
        let verified = sets.verify_decision(decision).map_err(|e| e.to_string())?;
        if verified.config.is_none() {
            return Ok(None);
        }
        clients::file::write_durably(&self.sets_path, &sets.encode()).map_err(|e| {
            format!(
                "persisting the consenter sets to {}: {e}",
                self.sets_path.display()
            )
        })?;
        Ok(sets.newest_view().cloned())
    }

    async fn resolve(&self, decision: pb::Decision) -> Result<Decided> {
        let mut ordered = Vec::new();
        for h in decision.headers.iter().filter(|h| h.shard == self.shard) {
            let digest = <Digest32>::try_from(h.batch_digest.as_slice()).map_err(|_| {
                Error::Codec(arma::CodecError {
                    what: "ordered header batch digest",
                })
            })?;
            let id = BatchId::new(h.shard, h.primary, h.seq);
            let requests = if self.fetch_batches {
                self.batch(id, digest).await.requests
            } else {
                Vec::new()
            };
            ordered.push(OrderedBatch {
                id,
                term: h.term,
                digest,
                requests,
            });
        }
        let terms = decision
            .terms
            .iter()
            .filter(|t| t.shard == self.shard)
            .map(|t| TermInfo {
                term: t.term,
                last_ordered_seq: t.last_ordered_seq,
            })
            .collect();
        Ok(Decided {
            number: decision.number,
            ordered,
            terms,
            config: None,
        })
    }

    /// The batch `id` with `digest`: from memory, the store, or fetched (retried until
    /// some batcher of the shard has it: f+1 of them persisted it before it was ordered).
    async fn batch(&self, id: BatchId, digest: Digest32) -> SignedBatch {
        let mut attempt = 0u32;
        loop {
            if let Some(b) = self.served.by_digest(id, &digest) {
                return (*b).clone();
            }
            let store = self.store.clone();
            match tokio::task::spawn_blocking(move || store.get(id, &digest)).await {
                Ok(Ok(Some(b))) => return b,
                Ok(Ok(None)) => {}
                Ok(Err(e)) => warn!(%id, error = %e, "reading a stored batch failed"),
                Err(e) => warn!(%id, error = %e, "reading a stored batch failed"),
            }
            if let Some(b) = self.fetch(id, digest).await {
                bump(&self.stats.fetched_batches);
                return b;
            }
            let delay = self.shell.backoff(attempt);
            attempt = attempt.saturating_add(1);
            warn!(%id, "no batcher of the shard served an ordered batch; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// Asks the batchers of the shard, the batch's primary first.
    async fn fetch(&self, id: BatchId, digest: Digest32) -> Option<SignedBatch> {
        let peers = self.book.peers();
        let order = peers
            .iter()
            .filter(|(p, _)| *p == id.primary)
            .chain(peers.iter().filter(|(p, _)| *p != id.primary));
        for (party, channel) in order {
            let mut client = BatcherPeerClient::new(channel.clone())
                .max_decoding_message_size(wire::limits::BATCH.max_bytes);
            let request = pb::FetchRequest {
                shard: id.shard,
                primary: id.primary,
                seq: id.seq,
                digest: digest.to_vec(),
            };
            let answer = tokio::time::timeout(Duration::from_secs(10), client.fetch(request)).await;
            let Ok(Ok(answer)) = answer else {
                continue;
            };
            match SignedBatch::try_from(answer.into_inner()) {
                Ok(b) if b.id() == id && b.header.digest == digest && batch_digest(&b.requests) == digest => {
                    return Some(b);
                }
                _ => warn!(%id, party, "a batcher served a batch that does not match the ordered header"),
            }
        }
        None
    }
}
