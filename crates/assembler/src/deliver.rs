//! `Assembler.Deliver`: the party's blocks in order from a block number, stopping after
//! `to` (with `to_end`: after the last block held when the request arrived, if earlier) or
//! following new blocks; with `headers_only`, headers and proofs without the requests
//! (docs/assembler.md "Deliver").
//!
//! Every stream reads the ledger at its own pace and learns of appends through the
//! store's watch channel: at most `buffer` blocks wait in its response channel, so a slow
//! reader is back-pressured, never buffered. At most `max_streams` streams at once
//! (RESOURCE_EXHAUSTED beyond).

use prometheus::IntGauge;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use wire::pb;
use wire::pb::assembler_server::{Assembler, AssemblerServer};

use crate::store::StoreReader;

/// Bounds of the Deliver streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliverLimits {
    /// Streams served at once.
    pub max_streams: usize,
    /// Blocks read ahead per stream.
    pub buffer: std::num::NonZeroUsize,
    /// Largest encoded block sent.
    pub max_message_bytes: usize,
}

impl Default for DeliverLimits {
    fn default() -> DeliverLimits {
        DeliverLimits {
            max_streams: 256,
            buffer: std::num::NonZeroUsize::new(16).unwrap_or(std::num::NonZeroUsize::MIN),
            max_message_bytes: 64 << 20,
        }
    }
}

/// The `Assembler` gRPC service.
#[derive(Clone)]
pub struct DeliverService {
    store: StoreReader,
    slots: StreamSlots,
    limits: DeliverLimits,
}

/// Room for at most `max` streams open at once, each counted in an open-streams gauge
/// while it is open (the fabrx and the Fabric Deliver services each have their own).
#[derive(Clone)]
pub(crate) struct StreamSlots {
    streams: Arc<Semaphore>,
    max: usize,
    open: IntGauge,
}

impl StreamSlots {
    /// `max` slots (at most the semaphore's maximum), counted in `open`.
    pub(crate) fn new(max: usize, open: IntGauge) -> StreamSlots {
        StreamSlots {
            streams: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            max,
            open,
        }
    }

    /// A slot for one stream, or RESOURCE_EXHAUSTED when `max` `what` streams are open.
    pub(crate) fn acquire(&self, what: &str) -> Result<StreamPermit, Status> {
        let permit = self.streams.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{} {what} streams are open at this assembler; retry later",
                self.max
            ))
        })?;
        self.open.inc();
        Ok(StreamPermit {
            _permit: permit,
            open: self.open.clone(),
        })
    }
}

/// A stream's room under `max_streams`, counted in the open-streams gauge while held.
pub(crate) struct StreamPermit {
    _permit: OwnedSemaphorePermit,
    open: IntGauge,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl DeliverService {
    /// Serves the blocks of `store`, counting its open streams in `open`.
    pub fn new(store: StoreReader, limits: DeliverLimits, open: IntGauge) -> DeliverService {
        DeliverService {
            store,
            slots: StreamSlots::new(limits.max_streams, open),
            limits,
        }
    }

    /// The tonic server, with the request (1 KiB) and block size limits.
    pub fn into_server(self) -> AssemblerServer<DeliverService> {
        let max = self.limits.max_message_bytes;
        AssemblerServer::new(self)
            .max_decoding_message_size(1 << 10)
            .max_encoding_message_size(max)
    }
}

type Item = Result<pb::OrderedBlock, Status>;

#[tonic::async_trait]
impl Assembler for DeliverService {
    type DeliverStream = ReceiverStream<Item>;

    async fn deliver(
        &self,
        request: Request<pb::DeliverRequest>,
    ) -> Result<Response<Self::DeliverStream>, Status> {
        let r = request.into_inner();
        if r.to.is_some_and(|to| to < r.from) {
            return Err(Status::invalid_argument(format!(
                "`to` ({:?}) is before `from` ({})",
                r.to, r.from
            )));
        }
        let permit = self.slots.acquire("Deliver")?;
        let (tx, rx) = mpsc::channel(self.limits.buffer.get());
        tokio::spawn(follow(self.store.clone(), r, tx, permit));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn fetch_batch(&self, request: Request<pb::FetchRequest>) -> Result<Response<pb::Batch>, Status> {
        let r = request.into_inner();
        let digest: types::digest::Digest32 = r
            .digest
            .as_slice()
            .try_into()
            .map_err(|_| Status::invalid_argument("a digest has 32 bytes"))?;
        let not_here = || {
            Status::not_found(format!(
                "batch {}/{}/{} is not in this assembler's recent blocks",
                r.shard, r.primary, r.seq
            ))
        };
        let number = self
            .store
            .find_batch(r.shard, r.primary, r.seq, digest)
            .ok_or_else(not_here)?;
        let store = self.store.clone();
        let block = tokio::task::spawn_blocking(move || store.block(number, false))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(format!("ledger: {e}")))?
            .ok_or_else(not_here)?;
        let tx_count = block.header.as_ref().map_or(0, |h| h.tx_count);
        Ok(Response::new(pb::Batch {
            shard: r.shard,
            primary: r.primary,
            seq: r.seq,
            requests: block.requests,
            term: block.header.as_ref().map_or(0, |h| h.term),
            digest: digest.to_vec(),
            tx_count,
            signature: Vec::new(),
            request_digests: Vec::new(),
        }))
    }
}

/// Most blocks read from the ledger in one blocking read.
const READ_CHUNK: u64 = 16;

/// Sends blocks from `r.from` on, in order, until `r.to` (or forever), waiting for new
/// ones; ends when the client is gone, the ledger fails (with a status) or the node
/// stops (UNAVAILABLE).
async fn follow(store: StoreReader, r: pb::DeliverRequest, tx: mpsc::Sender<Item>, _permit: StreamPermit) {
    let mut watch = store.watch();
    let mut next = r.from;
    let last_wanted = match (r.to, r.to_end) {
        (Some(to), false) => to,
        // Blocks below `next_block` are held; with `to_end` the stream ends at the last
        // of them (or at `to`, if earlier), at once when none is wanted.
        (to, true) => match store.next_block().checked_sub(1) {
            Some(last) if last >= r.from => to.map_or(last, |t| t.min(last)),
            _ => return,
        },
        (None, false) => u64::MAX,
    };
    loop {
        let available = *watch.borrow_and_update();
        while next < available && next <= last_wanted {
            let upto = available
                .min(next.saturating_add(READ_CHUNK))
                .min(last_wanted.saturating_add(1));
            let reader = store.clone();
            let (from, headers_only) = (next, r.headers_only);
            let chunk = tokio::task::spawn_blocking(move || {
                (from..upto)
                    .map(|n| reader.block(n, headers_only))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await;
            let blocks = match chunk {
                Ok(Ok(b)) => b,
                Ok(Err(e)) => {
                    let _ = tx.send(Err(Status::internal(format!("ledger: {e}")))).await;
                    return;
                }
                Err(_) => return,
            };
            for b in blocks {
                let Some(b) = b else {
                    let _ = tx
                        .send(Err(Status::internal(
                            "the ledger index promised a block it does not return",
                        )))
                        .await;
                    return;
                };
                if tx.send(Ok(b)).await.is_err() {
                    return;
                }
                next = next.saturating_add(1);
            }
        }
        if next > last_wanted {
            return; // done: the stream ends with OK
        }
        tokio::select! {
            changed = watch.changed() => if changed.is_err() {
                let _ = tx.send(Err(Status::unavailable("the assembler is stopping"))).await;
                return;
            },
            () = tx.closed() => return,
        }
    }
}
