//! The node's clients: pulling the primary's batches, acks and forwards to the primary,
//! and BAFs and complaints to every consenter.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tracing::{debug, warn};
use types::{PartyId, ShardId};
use wire::pb;
use wire::pb::batcher_peer_client::BatcherPeerClient;
use wire::pb::bft_consensus_client::BftConsensusClient;

use super::{ShellConfig, Stats, bump};
use crate::SignedBatch;

/// A message from a peer (or a pulled batch) for the core.
#[derive(Debug)]
pub enum PeerEvent {
    /// A request a secondary forwarded.
    Forwarded {
        /// The forwarding party.
        from: PartyId,
        /// The request.
        request: crate::Request,
    },
    /// A secondary's ack.
    Ack(crate::Baf),
    /// A batch pulled from `from`.
    Pulled {
        /// The party that served it.
        from: PartyId,
        /// The batch.
        batch: SignedBatch,
    },
    /// A compact batch pulled from `from`; `need_full` is answered when the core asks for
    /// the full batch (`Output::NeedFullBatch`), and dropped otherwise.
    Compact {
        /// The party that served it.
        from: PartyId,
        /// The batch.
        batch: crate::CompactBatch,
        /// Answered when the full batch must be fetched.
        need_full: tokio::sync::oneshot::Sender<()>,
    },
    /// A batch pulled from `from` with a request whose content is refused.
    Refused {
        /// The party that served it.
        from: PartyId,
        /// The batch.
        batch: SignedBatch,
        /// The refused request's index.
        index: usize,
        /// Why.
        reason: String,
    },
}

/// The batch the core waits for, derived from its state after every input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullWant {
    /// The current primary.
    pub primary: PartyId,
    /// The current term.
    pub term: u64,
    /// The seq the core accepts next.
    pub seq: u64,
}

/// Everything the pull task needs.
pub struct PullCtx {
    /// This batcher's shard.
    pub shard: ShardId,
    /// Channels to the batchers of the shard (growing when a party joins).
    pub book: Arc<super::book::Book>,
    /// What the core wants next (`None`: nothing, e.g. primary or at its bound).
    pub rx_want: watch::Receiver<Option<PullWant>>,
    /// Where pulled batches go.
    pub tx_peer: mpsc::Sender<PeerEvent>,
    /// Backoff.
    pub shell: ShellConfig,
    /// How pulled requests' content is checked.
    pub content: Arc<super::RequestContent>,
    /// The requests this party's router already checked: not checked again.
    pub checked: Arc<super::CheckedRequests>,
    /// Counters.
    pub stats: Arc<super::Stats>,
}

/// Whether to read the next batch of an open stream positioned at `next` for `open`.
enum Step {
    Read,
    Wait,
    Reopen,
}

fn step(want: Option<PullWant>, open: PullWant, next: u64) -> Step {
    match want {
        None => Step::Wait,
        Some(w) if w.primary != open.primary || w.term != open.term => Step::Reopen,
        Some(w) if w.seq == next => Step::Read,
        // The batch just handed over is still wanted: the core has not taken it yet, or
        // rejected it (a complaint follows; only a new term moves on).
        Some(w) if next.checked_sub(1) == Some(w.seq) => Step::Wait,
        Some(_) => Step::Reopen,
    }
}

/// Keeps a `Pull` stream open to the primary at the seq the core wants, feeding each
/// batch once; reopens when the core wants another primary, term or seq.
pub async fn run_pull(mut ctx: PullCtx) {
    let mut attempt = 0u32;
    loop {
        let want: Option<PullWant> = *ctx.rx_want.borrow_and_update();
        let (Some(w), Some(channel)) = (want, want.and_then(|w| ctx.book.peer(w.primary))) else {
            if ctx.rx_want.changed().await.is_err() {
                return;
            }
            continue;
        };
        let mut client =
            BatcherPeerClient::new(channel).max_decoding_message_size(wire::limits::BATCH.max_bytes);
        let request = pb::PullRequest {
            shard: ctx.shard,
            primary: w.primary,
            term: w.term,
            from_seq: w.seq,
            compact: true,
        };
        let opened = tokio::select! {
            r = client.pull(request) => r,
            r = ctx.rx_want.changed() => { if r.is_err() { return; } continue; }
        };
        let reason = match opened {
            Ok(stream) => {
                attempt = 0;
                follow_pull(&mut ctx, w, stream.into_inner()).await
            }
            Err(s) => format!("open: {}", s.message()),
        };
        if reason.is_empty() {
            continue;
        }
        debug!(primary = w.primary, seq = w.seq, reason, "pull stream down");
        let delay = ctx.shell.backoff(attempt);
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            r = ctx.rx_want.changed() => if r.is_err() { return; },
        }
    }
}

/// Reads the open stream while the core wants its batches; returns "" to reopen at once
/// or why the stream failed.
async fn follow_pull(ctx: &mut PullCtx, open: PullWant, mut stream: tonic::Streaming<pb::Batch>) -> String {
    let mut next = open.seq;
    loop {
        let want = *ctx.rx_want.borrow_and_update();
        match step(want, open, next) {
            Step::Reopen => return String::new(),
            Step::Wait => {
                if ctx.rx_want.changed().await.is_err() {
                    return "node stopped".into();
                }
                continue;
            }
            Step::Read => {}
        }
        let message = tokio::select! {
            m = stream.message() => m,
            r = ctx.rx_want.changed() => { if r.is_err() { return "node stopped".into(); } continue; }
        };
        let batch = match message {
            Ok(Some(b)) => b,
            Ok(None) => return "the primary ended the stream".into(),
            Err(s) => return format!("{:?}: {}", s.code(), s.message()),
        };
        let batch = if batch.request_digests.is_empty() {
            match SignedBatch::try_from(batch) {
                Ok(b) if b.id().seq == next => b,
                Ok(b) => return format!("asked for seq {next}, got {}", b.id().seq),
                Err(e) => return format!("malformed batch: {e}"),
            }
        } else {
            let compact = match crate::CompactBatch::try_from(batch) {
                Ok(b) if b.id().seq == next => b,
                Ok(b) => return format!("asked for seq {next}, got {}", b.id().seq),
                Err(e) => return format!("malformed batch: {e}"),
            };
            bump(&ctx.stats.pulled_compact);
            let (id, digest) = (compact.id(), compact.header.digest);
            let (need_full, needed) = tokio::sync::oneshot::channel();
            let event = PeerEvent::Compact {
                from: open.primary,
                batch: compact,
                need_full,
            };
            if ctx.tx_peer.send(event).await.is_err() {
                return "node stopped".into();
            }
            if needed.await.is_err() {
                // Rebuilt (or not the batch the core waits for any more).
                next = next.saturating_add(1);
                continue;
            }
            bump(&ctx.stats.compact_fallbacks);
            let Some(channel) = ctx.book.peer(open.primary) else {
                return format!("no channel to party {}", open.primary);
            };
            // Bounded, and given up when the core moves on: a primary that accepts the
            // call and never answers must not hold this task past its term.
            let fetched = tokio::select! {
                r = tokio::time::timeout(FETCH_TIMEOUT, fetch_full(channel, id, digest)) => r,
                r = ctx.rx_want.changed() => {
                    if r.is_err() { return "node stopped".into(); }
                    return String::new();
                }
            };
            match fetched {
                Ok(Ok(b)) => b,
                Ok(Err(why)) => return why,
                Err(_) => return format!("fetching the full batch {id}: no answer within {FETCH_TIMEOUT:?}"),
            }
        };
        if let Err(why) = deliver(ctx, open.primary, batch).await {
            return why;
        }
        next = next.saturating_add(1);
    }
}

/// How long the pull task waits for the full batch of a compact one it could not rebuild.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The full batch `id` with `digest` from the primary behind `channel` (a compact one it
/// served could not be rebuilt here).
async fn fetch_full(channel: Channel, id: types::BatchId, digest: [u8; 32]) -> Result<SignedBatch, String> {
    let mut client = BatcherPeerClient::new(channel).max_decoding_message_size(wire::limits::BATCH.max_bytes);
    let request = pb::FetchRequest {
        shard: id.shard,
        primary: id.primary,
        seq: id.seq,
        digest: digest.to_vec(),
    };
    let batch = match client.fetch(request).await {
        Ok(b) => b.into_inner(),
        Err(s) => {
            return Err(format!(
                "fetching the full batch {id}: {:?}: {}",
                s.code(),
                s.message()
            ));
        }
    };
    match SignedBatch::try_from(batch) {
        Ok(b) if b.id() == id && b.header.digest == digest => Ok(b),
        Ok(b) => Err(format!("fetched {id}, got {} with another digest or id", b.id())),
        Err(e) => Err(format!("malformed fetched batch: {e}")),
    }
}

/// Checks the content of a full pulled batch's requests and hands it to the loop.
async fn deliver(ctx: &PullCtx, from: PartyId, batch: SignedBatch) -> Result<(), String> {
    // The content of every request, as a router checks it (off the async workers:
    // signatures); a refused one makes the batch bogus. Requests this party's router
    // already checked (the same bytes came through the intake) are not checked again.
    let unknown = if ctx.content.as_ref() == &super::RequestContent::Opaque {
        Vec::new()
    } else {
        ctx.checked.unknown(batch.requests.iter().map(|r| &r[..]))
    };
    super::add(&ctx.stats.pulled_checked, unknown.len() as u64);
    super::add(
        &ctx.stats.pulled_known,
        (batch.requests.len().saturating_sub(unknown.len())) as u64,
    );
    let refused = if unknown.is_empty() {
        None
    } else {
        let content = Arc::clone(&ctx.content);
        let requests: Vec<_> = unknown
            .iter()
            .filter_map(|&i| batch.requests.get(i).cloned())
            .collect();
        match tokio::task::spawn_blocking(move || content.first_refused(requests.iter().map(|r| &r[..])))
            .await
        {
            Ok(refused) => refused.and_then(|(k, why)| unknown.get(k).map(|&i| (i, why))),
            Err(e) => return Err(format!("checking a pulled batch: {e}")),
        }
    };
    let event = match refused {
        None => PeerEvent::Pulled { from, batch },
        Some((index, reason)) => PeerEvent::Refused {
            from,
            batch,
            index,
            reason,
        },
    };
    if ctx.tx_peer.send(event).await.is_err() {
        return Err("node stopped".into());
    }
    Ok(())
}

type Call = Pin<Box<dyn Future<Output = Result<(), tonic::Status>> + Send>>;

/// Opens one client-streaming call to a peer over `stream`.
pub type Opener<T> = Arc<dyn Fn(BatcherPeerClient<Channel>, ReceiverStream<T>) -> Call + Send + Sync>;

/// Queues to one client-streaming call per peer (acks or forwards), best effort.
pub struct PeerSenders<T> {
    txs: BTreeMap<PartyId, mpsc::Sender<T>>,
    book: Arc<super::book::Book>,
    shell: ShellConfig,
    open: Opener<T>,
}

impl<T: Send + 'static> PeerSenders<T> {
    /// One task per peer channel of `book`, each opening its call when it has something
    /// to send; a peer the book learns later (a party joined) gets its task at its first
    /// item.
    pub fn spawn(
        book: &Arc<super::book::Book>,
        shell: ShellConfig,
        open: &Opener<T>,
    ) -> (PeerSenders<T>, Vec<JoinHandle<()>>) {
        let mut senders = PeerSenders {
            txs: BTreeMap::new(),
            book: Arc::clone(book),
            shell,
            open: Arc::clone(open),
        };
        let tasks = book
            .peers()
            .into_iter()
            .map(|(party, channel)| senders.start(party, channel))
            .collect();
        (senders, tasks)
    }

    fn start(&mut self, party: PartyId, channel: Channel) -> JoinHandle<()> {
        let (tx, rx) = mpsc::channel(self.shell.peer_send_queue.get());
        self.txs.insert(party, tx);
        tokio::spawn(run_peer_stream(channel, rx, Arc::clone(&self.open), self.shell))
    }

    /// Queues `item` for `to`; false if it was dropped (unknown peer or full queue).
    pub fn send(&mut self, to: PartyId, item: T) -> bool {
        if !self.txs.contains_key(&to)
            && let Some(channel) = self.book.peer(to)
        {
            // The task ends when this sender is dropped with the node.
            drop(self.start(to, channel));
        }
        self.txs.get(&to).is_some_and(|tx| tx.try_send(item).is_ok())
    }
}

async fn run_peer_stream<T: Send + 'static>(
    channel: Channel,
    mut rx: mpsc::Receiver<T>,
    open: Opener<T>,
    shell: ShellConfig,
) {
    let mut attempt = 0u32;
    loop {
        let Some(first) = rx.recv().await else {
            return;
        };
        let (tx_call, rx_call) = mpsc::channel(shell.peer_send_queue.get());
        let client = BatcherPeerClient::new(channel.clone())
            .max_encoding_message_size(wire::limits::BATCHER_PEER_MAX_MESSAGE_BYTES);
        let mut call = open(client, ReceiverStream::new(rx_call));
        let _ = tx_call.try_send(first);
        let started = Instant::now();
        let ended = loop {
            tokio::select! {
                r = &mut call => break r,
                item = rx.recv() => match item {
                    None => return,
                    Some(i) => { let _ = tx_call.try_send(i); }
                },
            }
        };
        if started.elapsed() > shell.backoff_max {
            attempt = 0;
        }
        debug!(?ended, "peer stream ended");
        let delay = shell.backoff(attempt);
        attempt = attempt.saturating_add(1);
        tokio::time::sleep(delay).await;
    }
}

/// A BAF or complaint to submit to every consenter.
#[derive(Debug)]
pub struct SubmitJob {
    /// The encoded `ConsenterRequest`.
    pub bytes: Arc<Vec<u8>>,
    /// The term it belongs to (given up once the term is over).
    pub term: u64,
    /// For a BAF: the attested batch's (primary, seq) (given up once ordered).
    pub batch: Option<(PartyId, u64)>,
}

/// What the submitter needs to know to give up on obsolete jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubmitView {
    /// The shard's current term.
    pub term: u64,
    /// The last ordered batch of the current term, (primary, seq).
    pub ordered: Option<(PartyId, u64)>,
}

fn obsolete(job: &SubmitJob, view: &SubmitView) -> bool {
    job.term < view.term
        || match (job.batch, view.ordered) {
            (Some((p, seq)), Some((op, oseq))) => job.term == view.term && p == op && seq <= oseq,
            _ => false,
        }
}

/// Submits jobs: each in a task of its own, at most `submit_concurrency` rounds of calls
/// at once. A job holds a permit only while its round runs, never while it backs off, so
/// jobs that cannot reach f + 1 consenters (a partition) neither block the others nor
/// the node's loop, and end when they become obsolete.
pub async fn run_submitter(
    mut rx: mpsc::Receiver<SubmitJob>,
    book: Arc<super::book::Book>,
    rx_view: watch::Receiver<SubmitView>,
    shell: ShellConfig,
    stats: Arc<Stats>,
) {
    let permits = Arc::new(Semaphore::new(shell.submit_concurrency.get()));
    let mut tasks = JoinSet::new();
    while let Some(job) = rx.recv().await {
        // Every consenter of the set in force when the job is made (a party that
        // joined included).
        let (c, v, s, p) = (
            book.consenters(),
            rx_view.clone(),
            Arc::clone(&stats),
            Arc::clone(&permits),
        );
        tasks.spawn(async move { submit_one(job, &c, v, shell, &s, &p).await });
        while tasks.try_join_next().is_some() {}
    }
}

/// Why a round of `Submit` calls failed.
#[derive(Debug)]
enum RoundError {
    /// Every consenter failed; worth retrying.
    Retry(String),
    /// A consenter refused the request as invalid: retrying cannot help.
    Refused(String),
}

/// Rounds refused by f + 1 consenters after which a job is dropped (with the backoff,
/// about 1.5 s: long enough for the consenters to apply a config switch the batcher
/// learned first).
const REFUSED_ROUNDS: u32 = 5;

/// How a round of `Submit` calls to `n` consenters stands: it succeeds once f + 1
/// accepted (at least one correct consenter then decides the request), and the request
/// is refused once f + 1 refused it (at least one correct consenter judged it invalid);
/// answers of up to f Byzantine consenters — an immediate `accepted` for a request they
/// then drop, or an immediate refusal — decide nothing. `None`: not yet.
fn round_verdict(n: usize, accepted: usize, refused: usize, answered: usize) -> Option<Result<(), bool>> {
    let needed = n.saturating_sub(1) / 3 + 1;
    if accepted >= needed {
        return Some(Ok(()));
    }
    if refused >= needed {
        return Some(Err(true));
    }
    // Every consenter answered and neither side has f + 1: retry.
    (answered >= n).then_some(Err(false))
}

async fn submit_round(bytes: &[u8], consenters: &[Channel], shell: ShellConfig) -> Result<(), RoundError> {
    let calls = consenters.iter().map(|channel| {
        let mut client = BftConsensusClient::new(channel.clone()).max_decoding_message_size(1 << 10);
        let request = pb::BftSubmitRequest {
            request: bytes.to_vec(),
        };
        Box::pin(async move {
            match tokio::time::timeout(shell.submit_timeout, client.submit(request)).await {
                Ok(Ok(r)) if r.get_ref().accepted => Ok(()),
                Ok(Ok(_)) => Err(RoundError::Retry("not accepted".to_string())),
                Ok(Err(s)) if s.code() == tonic::Code::InvalidArgument => {
                    Err(RoundError::Refused(s.message().to_string()))
                }
                Ok(Err(s)) => Err(RoundError::Retry(format!("{:?}: {}", s.code(), s.message()))),
                Err(_) => Err(RoundError::Retry("timed out".to_string())),
            }
        })
    });
    let n = consenters.len();
    let mut pending: FuturesUnordered<_> = calls.collect();
    let (mut accepted, mut refused, mut answered) = (0usize, 0usize, 0usize);
    let mut last_refusal = String::new();
    let mut last_failure = "no consenter".to_string();
    while let Some(result) = pending.next().await {
        answered += 1;
        match result {
            Ok(()) => accepted += 1,
            Err(RoundError::Refused(reason)) => {
                refused += 1;
                last_refusal = reason;
            }
            Err(RoundError::Retry(reason)) => last_failure = reason,
        }
        match round_verdict(n, accepted, refused, answered) {
            Some(Ok(())) => return Ok(()),
            Some(Err(true)) => return Err(RoundError::Refused(last_refusal)),
            Some(Err(false)) => break,
            None => {}
        }
    }
    Err(RoundError::Retry(format!(
        "{accepted} accepted and {refused} refused of {n} ({last_failure})"
    )))
}

/// Submits one job to every consenter until f + 1 accepted it (or f + 1 refused it), or
/// the job is obsolete (its term ended, its batch was ordered); retries with backoff. A
/// complaint is therefore re-sent until f + 1 consenters took it or the term changes.
async fn submit_one(
    job: SubmitJob,
    consenters: &[Channel],
    mut rx_view: watch::Receiver<SubmitView>,
    shell: ShellConfig,
    stats: &Stats,
    permits: &Semaphore,
) {
    let mut attempt = 0u32;
    let mut refusals = 0u32;
    loop {
        if obsolete(&job, &rx_view.borrow_and_update()) {
            bump(&stats.submits_dropped);
            return;
        }
        let Ok(permit) = permits.acquire().await else {
            return;
        };
        let done = tokio::select! {
            r = submit_round(&job.bytes, consenters, shell) => r,
            r = rx_view.changed() => { if r.is_err() { return; } continue; }
        };
        drop(permit);
        match done {
            Ok(()) => return,
            // f + 1 refusals drop the job only once they persist: right after a config
            // switch a consenter that has not applied it yet checks a BAF signed with a
            // rotated key under the old keys and refuses it (docs/reconfiguration.md).
            Err(RoundError::Refused(reason)) if refusals >= REFUSED_ROUNDS => {
                warn!(
                    term = job.term,
                    reason, "the consenters refused a BAF or complaint; dropped"
                );
                bump(&stats.submits_dropped);
                return;
            }
            Err(RoundError::Refused(reason)) => {
                refusals = refusals.saturating_add(1);
                debug!(
                    term = job.term,
                    refusals, reason, "refused by f + 1 consenters; retrying"
                );
                let delay = shell.backoff(attempt);
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    r = rx_view.changed() => if r.is_err() { return; },
                }
            }
            Err(RoundError::Retry(reason)) => {
                warn!(
                    term = job.term,
                    attempt, reason, "submit to the consenters failed; retrying"
                );
            }
        }
        let delay = shell.backoff(attempt);
        attempt = attempt.saturating_add(1);
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_become_obsolete_when_their_term_ends_or_their_batch_is_ordered() {
        let baf = |term, seq| SubmitJob {
            bytes: Arc::new(vec![]),
            term,
            batch: Some((1, seq)),
        };
        let view = |term, ordered| SubmitView { term, ordered };
        assert!(!obsolete(&baf(2, 5), &view(2, None)));
        assert!(obsolete(&baf(1, 5), &view(2, None)));
        assert!(obsolete(&baf(2, 5), &view(2, Some((1, 5)))));
        assert!(!obsolete(&baf(2, 6), &view(2, Some((1, 5)))));
        assert!(!obsolete(&baf(2, 5), &view(2, Some((2, 9)))));
        let complaint = SubmitJob {
            bytes: Arc::new(vec![]),
            term: 2,
            batch: None,
        };
        assert!(!obsolete(&complaint, &view(2, Some((1, 5)))));
        assert!(obsolete(&complaint, &view(3, None)));
    }

    /// One Byzantine consenter of four (f = 1) that answers `accepted` at once (and then
    /// drops the request) or refuses at once decides nothing: the round waits for f + 1.
    /// Before, the first `accepted` ended the submission, and one refusal among timeouts
    /// dropped it.
    #[test]
    fn a_round_needs_f_plus_one_alike_answers() {
        let n = 4;
        assert_eq!(round_verdict(n, 1, 0, 1), None, "one accepted is not enough");
        assert_eq!(round_verdict(n, 2, 0, 2), Some(Ok(())));
        assert_eq!(
            round_verdict(n, 0, 1, 4),
            Some(Err(false)),
            "one refusal among failures: retry"
        );
        assert_eq!(round_verdict(n, 1, 1, 4), Some(Err(false)));
        assert_eq!(
            round_verdict(n, 0, 2, 2),
            Some(Err(true)),
            "f + 1 refusals: dropped"
        );
        assert_eq!(
            round_verdict(1, 1, 0, 1),
            Some(Ok(())),
            "one consenter: its answer"
        );
        assert_eq!(round_verdict(7, 2, 0, 2), None, "f = 2 of 7");
        assert_eq!(round_verdict(7, 3, 0, 3), Some(Ok(())));
    }

    /// How a stand-in consenter answers `Submit`.
    #[derive(Clone, Copy)]
    enum Says {
        Accepted,
        Refused,
        Silent,
    }

    struct FakeConsenter(Says);

    #[tonic::async_trait]
    impl pb::bft_consensus_server::BftConsensus for FakeConsenter {
        async fn exchange(
            &self,
            _r: tonic::Request<tonic::Streaming<pb::BftEnvelope>>,
        ) -> std::result::Result<tonic::Response<pb::BftExchangeSummary>, tonic::Status> {
            Err(tonic::Status::unimplemented("not used"))
        }

        async fn submit(
            &self,
            _r: tonic::Request<pb::BftSubmitRequest>,
        ) -> std::result::Result<tonic::Response<pb::BftSubmitResponse>, tonic::Status> {
            match self.0 {
                Says::Accepted => Ok(tonic::Response::new(pb::BftSubmitResponse {
                    accepted: true,
                    decided_seq: 1,
                })),
                Says::Refused => Err(tonic::Status::invalid_argument("refused")),
                Says::Silent => std::future::pending().await,
            }
        }

        async fn status(
            &self,
            _r: tonic::Request<pb::BftStatusRequest>,
        ) -> std::result::Result<tonic::Response<pb::BftStatusResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("not used"))
        }
    }

    async fn consenters(says: &[Says]) -> Vec<Channel> {
        let mut out = Vec::new();
        for s in says {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let at = listener.local_addr().unwrap();
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(pb::bft_consensus_server::BftConsensusServer::new(FakeConsenter(
                        *s,
                    )))
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
            );
            out.push(
                clients::channel::lazy(&at.to_string(), clients::channel::DEFAULT_CONNECT_TIMEOUT).unwrap(),
            );
        }
        out
    }

    /// The rule on real calls: one Byzantine consenter of four answering `accepted` at
    /// once while the others are silent (a view change, say) does not end the round, nor
    /// does one refusing at once; two alike answers do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_round_over_real_calls_ends_only_on_f_plus_one_alike_answers() {
        let shell = ShellConfig {
            submit_timeout: std::time::Duration::from_millis(300),
            ..ShellConfig::default()
        };
        let round = |says: Vec<Says>| async move {
            let c = consenters(&says).await;
            submit_round(b"baf", &c, shell).await
        };
        use Says::{Accepted, Refused, Silent};
        assert!(matches!(
            round(vec![Accepted, Silent, Silent, Silent]).await,
            Err(RoundError::Retry(_))
        ));
        assert!(matches!(
            round(vec![Refused, Silent, Silent, Silent]).await,
            Err(RoundError::Retry(_))
        ));
        assert!(round(vec![Accepted, Refused, Accepted, Silent]).await.is_ok());
        assert!(matches!(
            round(vec![Refused, Refused, Accepted, Silent]).await,
            Err(RoundError::Refused(_))
        ));
    }

    #[test]
    fn the_pull_follows_the_core() {
        let open = PullWant {
            primary: 1,
            term: 0,
            seq: 3,
        };
        let at = |seq| Some(PullWant { seq, ..open });
        assert!(matches!(step(at(3), open, 3), Step::Read));
        assert!(matches!(step(at(3), open, 4), Step::Wait));
        assert!(matches!(step(at(4), open, 4), Step::Read));
        assert!(matches!(step(at(7), open, 4), Step::Reopen));
        assert!(matches!(step(None, open, 4), Step::Wait));
        let other = Some(PullWant { term: 1, ..open });
        assert!(matches!(step(other, open, 3), Step::Reopen));
    }

    /// A primary that serves a compact batch and then never answers the `Fetch` of its
    /// full form: a stalling attack the review found. The pull task must follow the core
    /// to the next term at once, not stay inside the fetch.
    struct HangingPrimary {
        batch: pb::Batch,
        pulls: Arc<std::sync::atomic::AtomicUsize>,
    }

    #[tonic::async_trait]
    impl pb::batcher_peer_server::BatcherPeer for HangingPrimary {
        type PullStream = ReceiverStream<std::result::Result<pb::Batch, tonic::Status>>;

        async fn pull(
            &self,
            r: tonic::Request<pb::PullRequest>,
        ) -> std::result::Result<tonic::Response<Self::PullStream>, tonic::Status> {
            self.pulls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (tx, rx) = mpsc::channel(1);
            if r.get_ref().term == 0 {
                let _ = tx.send(Ok(self.batch.clone())).await;
            }
            tokio::spawn(async move { tx.closed().await });
            Ok(tonic::Response::new(ReceiverStream::new(rx)))
        }

        async fn fetch(
            &self,
            _r: tonic::Request<pb::FetchRequest>,
        ) -> std::result::Result<tonic::Response<pb::Batch>, tonic::Status> {
            std::future::pending().await
        }

        async fn ack(
            &self,
            _r: tonic::Request<tonic::Streaming<pb::BatchAttestationFragment>>,
        ) -> std::result::Result<tonic::Response<pb::PeerAck>, tonic::Status> {
            Err(tonic::Status::unimplemented("not used"))
        }

        async fn forward(
            &self,
            _r: tonic::Request<tonic::Streaming<pb::ForwardRequest>>,
        ) -> std::result::Result<tonic::Response<pb::PeerAck>, tonic::Status> {
            Err(tonic::Status::unimplemented("not used"))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_primary_that_never_answers_the_full_fetch_does_not_hold_the_pull() {
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, "hanging-primary");
        let requests: Vec<crate::Request> = vec![Arc::from(&b"not pending anywhere"[..])];
        let batch = SignedBatch::sign(types::BatchId::new(0, 1, 1), 0, requests, &key);
        let digests: Vec<_> = batch
            .requests
            .iter()
            .map(|r| crate::RequestDigest::of(r))
            .collect();
        let compact = crate::compact::encode_compact(&batch, &crate::compact::pack_digests(&digests));
        let pulls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::batcher_peer_server::BatcherPeerServer::new(HangingPrimary {
                    batch: compact,
                    pulls: Arc::clone(&pulls),
                }))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let channel =
            clients::channel::lazy(&at.to_string(), clients::channel::DEFAULT_CONNECT_TIMEOUT).unwrap();
        let (tx_want, rx_want) = watch::channel(Some(PullWant {
            primary: 1,
            term: 0,
            seq: 1,
        }));
        let (tx_peer, mut rx_peer) = mpsc::channel(4);
        let stats = Arc::new(Stats::register(&telemetry::Registry::detached("batcher")).unwrap());
        let ctx = PullCtx {
            shard: 0,
            book: Arc::new(super::super::book::Book::new(
                2,
                0,
                BTreeMap::from([(1, channel)]),
                BTreeMap::new(),
                arma::Parties::contiguous(4),
                0,
            )),
            rx_want,
            tx_peer,
            shell: ShellConfig::default(),
            content: Arc::new(super::super::RequestContent::Opaque),
            checked: Arc::new(super::super::CheckedRequests::new(16)),
            stats: Arc::clone(&stats),
        };
        let task = tokio::spawn(run_pull(ctx));
        // The core cannot rebuild it: the pull task asks for the full batch, which hangs.
        let Some(PeerEvent::Compact { need_full, .. }) = rx_peer.recv().await else {
            panic!("a compact batch first");
        };
        need_full.send(()).unwrap();
        let start = std::time::Instant::now();
        while stats.compact_fallbacks.get() == 0 {
            assert!(start.elapsed() < std::time::Duration::from_secs(5));
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // The term changes: the pull task reopens at the new term well before the
        // fetch's own timeout.
        tx_want.send_replace(Some(PullWant {
            primary: 1,
            term: 1,
            seq: 1,
        }));
        let start = std::time::Instant::now();
        while pulls.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(2),
                "the pull task stayed in the hanging fetch"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        task.abort();
    }
}
