//! The node's gRPC services: `BatcherIntake` for its own party's router and
//! `BatcherPeer` for the other batchers of the shard and the assemblers.
//!
//! Handlers decode, check the shape and `send().await` into the loop's bounded queues,
//! so a slow core slows its clients down (HTTP/2 flow control) instead of growing a
//! queue. An intake stream reads a request only after reserving room for its answer,
//! so at most `stream_max_in_flight` requests per stream wait for the core.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use types::digest::Digest32;
use types::{PartyId, ShardId};
use wire::pb;
use wire::pb::batcher_intake_server::{BatcherIntake, BatcherIntakeServer};
use wire::pb::batcher_peer_server::{BatcherPeer, BatcherPeerServer};

use super::links::PeerEvent;
use super::served::Served;
use super::store::StoreReader;
use crate::Baf;

/// A router message's requests waiting for the core, with the room reserved for its
/// answer message.
pub struct IntakeItem {
    /// The requests, each with the router's id.
    pub requests: Vec<(u64, crate::Request)>,
    /// Answers made without the core (requests over the size limit).
    pub answered: Vec<pb::IntakeResponse>,
    /// Where the answers go, in one message.
    pub reply: mpsc::OwnedPermit<Result<pb::IntakeAnswers, Status>>,
    /// The requests' share of the intake's byte bound, released once the core took them.
    pub bytes: OwnedSemaphorePermit,
}

/// `BatcherIntake`.
#[derive(Clone)]
pub struct IntakeService {
    /// The loop's intake queue.
    pub tx: mpsc::Sender<IntakeItem>,
    /// Messages per stream awaiting their answers.
    pub stream_max_in_flight: std::num::NonZeroUsize,
    /// Bytes of requests queued for the core, all streams together (at least one
    /// message's worth).
    pub queue_bytes: Arc<Semaphore>,
    /// Larger requests are answered `TOO_LARGE` without reaching the core.
    pub max_request_bytes: usize,
    /// Counters (refusals made here).
    pub stats: Arc<super::Stats>,
    /// Turns true when the node stops: open streams end.
    pub stop: watch::Receiver<bool>,
    /// Where the requests taken in are remembered as checked by this party's router
    /// (`None` when the node does not check content).
    pub checked: Option<Arc<super::CheckedRequests>>,
}

fn too_large(id: u64) -> pb::IntakeResponse {
    pb::IntakeResponse {
        id,
        admitted: false,
        refusal: pb::IntakeRefusal::TooLarge as i32,
    }
}

/// Waits until the node stops.
async fn stopping(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn stopped() -> Status {
    Status::unavailable("the batcher is stopping")
}

impl IntakeService {
    /// The tonic server with the intake's message limits.
    pub fn into_server(self) -> BatcherIntakeServer<IntakeService> {
        BatcherIntakeServer::new(self)
            .max_decoding_message_size(wire::limits::BATCHER_INTAKE_MAX_MESSAGE_BYTES)
            .max_encoding_message_size(wire::limits::INTAKE_ANSWERS.max_bytes)
    }
}

#[tonic::async_trait]
impl BatcherIntake for IntakeService {
    type IntakeStream = ReceiverStream<Result<pb::IntakeAnswers, Status>>;

    async fn intake(
        &self,
        request: Request<Streaming<pb::IntakeBatch>>,
    ) -> Result<Response<Self::IntakeStream>, Status> {
        let mut input = request.into_inner();
        let (tx_out, rx_out) = mpsc::channel(self.stream_max_in_flight.get());
        let (tx_core, stop) = (self.tx.clone(), self.stop.clone());
        let (budget, max) = (Arc::clone(&self.queue_bytes), self.max_request_bytes);
        let stats = Arc::clone(&self.stats);
        let checked = self.checked.clone();
        tokio::spawn(async move {
            loop {
                let Ok(reply) = tx_out.clone().reserve_owned().await else {
                    return;
                };
                let next = tokio::select! {
                    m = input.message() => m,
                    () = stopping(stop.clone()) => Err(stopped()),
                };
                let message = match next {
                    Ok(Some(m)) => m,
                    Ok(None) => return,
                    Err(status) => {
                        reply.send(Err(status));
                        return;
                    }
                };
                super::bump(&stats.intake_messages);
                let mut answered = Vec::new();
                let mut requests = Vec::with_capacity(message.requests.len());
                let mut size = 0usize;
                for r in message.requests {
                    if r.request.len() > max {
                        super::bump(&stats.refused);
                        answered.push(too_large(r.id));
                    } else {
                        size = size.saturating_add(r.request.len().max(1));
                        requests.push((r.id, Arc::from(r.request)));
                    }
                }
                if requests.is_empty() {
                    reply.send(Ok(pb::IntakeAnswers { answers: answered }));
                    continue;
                }
                if let Some(checked) = &checked {
                    checked.record(requests.iter().map(|(_, r): &(u64, Arc<[u8]>)| &r[..]));
                }
                // Within u32: at most one message (the intake message limit), and the
                // semaphore holds at least that much.
                let want = u32::try_from(size).unwrap_or(u32::MAX);
                let Ok(bytes) = Arc::clone(&budget).acquire_many_owned(want).await else {
                    return;
                };
                let item = IntakeItem {
                    requests,
                    answered,
                    reply,
                    bytes,
                };
                if let Err(mpsc::error::SendError(item)) = tx_core.send(item).await {
                    item.reply.send(Err(Status::unavailable("the batcher stopped")));
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx_out)))
    }
}

/// `BatcherPeer`.
#[derive(Clone)]
pub struct PeerService {
    /// What it does wrong on purpose (only with the `testing` feature).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) faults: super::Faults,
    /// How forwarded requests' content is checked.
    pub content: Arc<super::RequestContent>,
    /// This batcher's shard.
    pub shard: ShardId,
    /// The parties (their number grows when a party joins).
    pub book: Arc<super::book::Book>,
    /// Largest request forwarded.
    pub max_request_bytes: usize,
    /// Batches in memory.
    pub served: Arc<Served>,
    /// The store.
    pub store: StoreReader,
    /// The loop's peer queue.
    pub tx_peer: mpsc::Sender<PeerEvent>,
    /// Turns true when the node stops: open streams end.
    pub stop: watch::Receiver<bool>,
}

impl PeerService {
    /// The tonic server with the peer service's message limits.
    pub fn into_server(self) -> BatcherPeerServer<PeerService> {
        BatcherPeerServer::new(self)
            .max_decoding_message_size(wire::limits::BATCHER_PEER_MAX_MESSAGE_BYTES)
            .max_encoding_message_size(wire::limits::BATCH.max_bytes)
    }

    fn check_shard(&self, shard: ShardId) -> Result<(), Status> {
        if shard != self.shard {
            return Err(Status::invalid_argument(format!(
                "this batcher serves shard {}, not {shard}",
                self.shard
            )));
        }
        Ok(())
    }

    /// The next message of a client stream, or an error once the node stops.
    async fn next<T>(&self, stream: &mut Streaming<T>) -> Result<Option<T>, Status> {
        tokio::select! {
            m = stream.message() => m,
            () = stopping(self.stop.clone()) => Err(stopped()),
        }
    }

    async fn send(&self, event: PeerEvent) -> Result<(), Status> {
        self.tx_peer
            .send(event)
            .await
            .map_err(|_| Status::unavailable("the batcher stopped"))
    }
}

type BatchStream = ReceiverStream<Result<pb::Batch, Status>>;

/// What a `Pull` stream reads: the served set or, in a test build whose node is a late
/// equivocator, that node's view for a party it deceives.
struct PullSource {
    served: Arc<Served>,
    version: watch::Receiver<u64>,
    #[cfg(feature = "testing")]
    late: Option<(Arc<super::testing::Late>, watch::Receiver<u64>)>,
}

impl PullSource {
    fn new(served: Arc<Served>) -> PullSource {
        let version = served.subscribe();
        PullSource {
            served,
            version,
            #[cfg(feature = "testing")]
            late: None,
        }
    }

    /// Reads `late`'s view when it deceives `caller`.
    #[cfg(feature = "testing")]
    fn deceive(&mut self, late: Option<&Arc<super::testing::Late>>, caller: types::PartyId) {
        self.late = late
            .filter(|l| l.deceives(caller))
            .map(|l| (Arc::clone(l), l.subscribe()));
    }

    /// Marks the current state as read (`changed` waits for a later one).
    fn seen(&mut self) {
        self.version.borrow_and_update();
        #[cfg(feature = "testing")]
        if let Some((_, v)) = &mut self.late {
            v.borrow_and_update();
        }
    }

    fn next(&self, term: u64, primary: types::PartyId, seq: u64) -> Option<Arc<crate::SignedBatch>> {
        #[cfg(feature = "testing")]
        if let Some((late, _)) = &self.late {
            return late.next_for_deceived(&self.served, term, primary, seq);
        }
        self.served.next_for_pull(term, primary, seq)
    }

    /// The packed request digests of `batch` when it is served with a compact form (a
    /// deceiving late equivocator's view has none).
    fn packed(&self, batch: &crate::SignedBatch) -> Option<super::served::Packed> {
        #[cfg(feature = "testing")]
        if self.late.is_some() {
            return None;
        }
        self.served.packed_digests(batch)
    }

    /// Waits until what `next` reads may have changed.
    async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        #[cfg(feature = "testing")]
        if let Some((_, late)) = &mut self.late {
            return tokio::select! {
                r = self.version.changed() => r,
                r = late.changed() => r,
            };
        }
        self.version.changed().await
    }
}

#[tonic::async_trait]
impl BatcherPeer for PeerService {
    type PullStream = BatchStream;

    async fn pull(&self, request: Request<pb::PullRequest>) -> Result<Response<BatchStream>, Status> {
        #[cfg(feature = "testing")]
        if let Some(b) = self.faults.byzantine {
            let caller = wire::tls::caller(&request).map(|p| p.party);
            if !b.serves_pull(caller) {
                // Withheld: the stream stays open and silent.
                let (tx, rx) = mpsc::channel(1);
                tokio::spawn(async move { tx.closed().await });
                return Ok(Response::new(ReceiverStream::new(rx)));
            }
        }
        #[cfg_attr(not(feature = "testing"), allow(unused_mut))]
        let mut source = PullSource::new(Arc::clone(&self.served));
        #[cfg(feature = "testing")]
        if let Some(caller) = wire::tls::caller(&request) {
            source.deceive(self.faults.late.as_ref(), caller.party);
        }
        let r = request.into_inner();
        self.check_shard(r.shard)?;
        let (tx, rx) = mpsc::channel(2);
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let mut seq = r.from_seq;
            loop {
                source.seen();
                // The next served seq at or after `seq`: an ordered batch left the set, and
                // a puller that asks for it (an assembler after a restart) goes on with the
                // next one instead of waiting for it for ever.
                if let Some(b) = source.next(r.term, r.primary, seq) {
                    // The compact form when the puller asked for it and this node has it
                    // (docs/batcher.md "Compact pulls").
                    let message = match r.compact.then(|| source.packed(&b)).flatten() {
                        Some(packed) => crate::compact::encode_compact(&b, &packed),
                        None => pb::Batch::from(&*b),
                    };
                    if tx.send(Ok(message)).await.is_err() {
                        return;
                    }
                    let Some(next) = b.id().seq.checked_add(1) else {
                        return;
                    };
                    seq = next;
                    continue;
                }
                tokio::select! {
                    changed = source.changed() => if changed.is_err() { return; },
                    () = tx.closed() => return,
                    () = stopping(stop.clone()) => {
                        let _ = tx.send(Err(stopped())).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn fetch(&self, request: Request<pb::FetchRequest>) -> Result<Response<pb::Batch>, Status> {
        #[cfg(feature = "testing")]
        let caller = wire::tls::caller(&request);
        let r = request.into_inner();
        self.check_shard(r.shard)?;
        let digest = <Digest32>::try_from(r.digest.as_slice())
            .map_err(|_| Status::invalid_argument("FetchRequest.digest must be 32 bytes"))?;
        let id = types::BatchId::new(r.shard, r.primary, r.seq);
        #[cfg(feature = "testing")]
        if self.faults.byzantine.is_some_and(|b| b.forges_fetch()) {
            return Ok(Response::new(pb::Batch {
                shard: r.shard,
                primary: r.primary,
                seq: r.seq,
                requests: vec![b"forged".to_vec()],
                digest: r.digest.clone(),
                tx_count: 1,
                ..Default::default()
            }));
        }
        #[cfg(feature = "testing")]
        if let (Some(late), Some(caller)) = (&self.faults.late, caller) {
            late.hold_fetch(caller, id, &digest).await;
        }
        if let Some(b) = self.served.by_digest(id, &digest) {
            return Ok(Response::new(pb::Batch::from(&*b)));
        }
        let store = self.store.clone();
        let found = tokio::task::spawn_blocking(move || store.get(id, &digest))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(e.to_string()))?;
        match found {
            Some(b) => Ok(Response::new(pb::Batch::from(&b))),
            None => Err(Status::not_found(format!("no batch {id} with that digest here"))),
        }
    }

    async fn ack(
        &self,
        request: Request<Streaming<pb::BatchAttestationFragment>>,
    ) -> Result<Response<pb::PeerAck>, Status> {
        let mut stream = request.into_inner();
        while let Some(message) = self.next(&mut stream).await? {
            let baf = Baf::try_from(message).map_err(|e| Status::invalid_argument(e.to_string()))?;
            #[cfg(feature = "testing")]
            if let Some(late) = &self.faults.late {
                late.on_ack(&baf);
            }
            self.send(PeerEvent::Ack(baf)).await?;
        }
        Ok(Response::new(pb::PeerAck {}))
    }

    async fn forward(
        &self,
        request: Request<Streaming<pb::ForwardRequest>>,
    ) -> Result<Response<pb::PeerAck>, Status> {
        let caller = wire::tls::caller(&request);
        let mut stream = request.into_inner();
        while let Some(m) = self.next(&mut stream).await? {
            let from = forwarder(m.from, caller, &self.book.parties())?;
            if m.request.is_empty() || m.request.len() > self.max_request_bytes {
                continue;
            }
            // A forward whose content a router would refuse is dropped: a Byzantine peer
            // must not get it batched (checked off the async workers: signatures).
            if self.content.as_ref() != &super::RequestContent::Opaque {
                let content = Arc::clone(&self.content);
                let request = m.request.clone();
                let refused =
                    tokio::task::spawn_blocking(move || content.first_refused([request.as_slice()]))
                        .await
                        .map_err(|e| Status::internal(e.to_string()))?;
                if let Some((_, why)) = refused {
                    tracing::debug!(%from, %why, "forward refused");
                    continue;
                }
            }
            let event = PeerEvent::Forwarded {
                from,
                request: Arc::from(m.request),
            };
            self.send(event).await?;
        }
        Ok(Response::new(pb::PeerAck {}))
    }
}

/// The party a forward comes from: with TLS, the authenticated caller's, and a message
/// that names another party is refused (a Byzantine batcher must not spend another
/// party's forward quota or have its requests blamed on it); without TLS (an
/// `--insecure` network) the party the message names. Either way the party must be in
/// force (a party that left forwards nothing).
fn forwarder(
    claimed: PartyId,
    caller: Option<wire::tls::Peer>,
    parties: &arma::Parties,
) -> Result<PartyId, Status> {
    if !parties.contains(claimed) {
        return Err(Status::invalid_argument(format!(
            "party {claimed} is not in force"
        )));
    }
    match caller {
        Some(peer) if peer.party != claimed => Err(Status::permission_denied(format!(
            "{peer} forwarded as party {claimed}"
        ))),
        _ => Ok(claimed),
    }
}

#[cfg(test)]
mod forwarder_tests {
    use super::*;
    use wire::tls::{Peer, Role};

    #[test]
    fn a_forward_comes_from_its_authenticated_caller() {
        let batcher = |party| Peer {
            role: Role::Batcher,
            party,
            shard: Some(0),
        };
        // (claimed, caller, accepted as)
        let table: [(PartyId, Option<Peer>, Option<PartyId>); 8] = [
            (2, Some(batcher(2)), Some(2)),
            // Impersonation: party 4's batcher claims to be party 2.
            (2, Some(batcher(4)), None),
            (0, Some(batcher(2)), None),
            (5, Some(batcher(5)), None),
            // No TLS: the message's party, when it exists.
            (4, None, Some(4)),
            (5, None, None),
            // Party 3 left: its forwards are refused, with or without TLS.
            (3, Some(batcher(3)), None),
            (3, None, None),
        ];
        let parties = arma::Parties::new(vec![1, 2, 4]).unwrap_or_else(|e| panic!("{e}"));
        for (claimed, caller, want) in table {
            assert_eq!(
                forwarder(claimed, caller, &parties).ok(),
                want,
                "claimed {claimed}, caller {caller:?}"
            );
        }
    }
}
