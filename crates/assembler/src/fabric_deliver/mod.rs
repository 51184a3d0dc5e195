//! Fabric's `orderer.AtomicBroadcast/Deliver` over the party's ledger, so that Fabric
//! deliver clients read the assembler's blocks as Fabric blocks (docs/assembler.md
//! "Fabric Deliver"): block 0 is the network's genesis config block, block `n ≥ 1` the
//! ledger's block `n − 1` ([`arma::fabric::data_block`]).
//!
//! * [`seek`] (pure) checks a request envelope and resolves its `SeekInfo`;
//! * [`chain`] (pure) makes the Fabric blocks and keeps the checkpoints a stream
//!   starts from;
//! * this module is the shell: one task per stream reads the requests one after the
//!   other, reads the ledger at its own pace (at most `buffer` responses wait in its
//!   channel) and follows appends through the store's watch channel.

pub mod chain;
pub mod seek;

use std::sync::{Arc, Mutex};

use arma::fabric::Content;
use prometheus::IntGauge;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;
use wire::fabric::orderer::atomic_broadcast_server::{AtomicBroadcast, AtomicBroadcastServer};
use wire::fabric::orderer::{BroadcastResponse, DeliverResponse, deliver_response};
use wire::fabric::{RawEnvelope, common};

use crate::deliver::{DeliverLimits, StreamPermit, StreamSlots};
use crate::store::StoreReader;
use chain::{Checkpoints, Cursor, Point};
use seek::{Behavior, Refusal, Seek};

/// Largest request envelope read (a `SeekInfo` with its headers and the creator's
/// certificate).
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// Most ledger blocks read in one blocking read.
const READ_CHUNK: u64 = 16;

/// Bounds of the Fabric Deliver service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FabricDeliverLimits {
    /// Streams at once, blocks read ahead per stream, largest block sent.
    pub deliver: DeliverLimits,
    /// Blocks between two checkpoints of the chain.
    pub checkpoint_interval: std::num::NonZeroU64,
    /// Most checkpoints held (the interval doubles past them).
    pub max_checkpoints: std::num::NonZeroUsize,
}

impl Default for FabricDeliverLimits {
    fn default() -> FabricDeliverLimits {
        FabricDeliverLimits {
            deliver: DeliverLimits::default(),
            checkpoint_interval: chain::DEFAULT_INTERVAL,
            max_checkpoints: chain::DEFAULT_MAX_CHECKPOINTS,
        }
    }
}

/// Why the service cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenesisError {
    /// The configured genesis block is not one.
    #[error("the Fabric genesis block is unusable: {0}")]
    Unusable(&'static str),
}

/// The network's genesis block, checked once.
struct Genesis {
    block: common::Block,
    channel: String,
    checkpoints: Mutex<Checkpoints>,
}

impl Genesis {
    fn new(block: common::Block, limits: &FabricDeliverLimits) -> Result<Genesis, GenesisError> {
        let header = block.header.as_ref().ok_or(GenesisError::Unusable("no header"))?;
        if header.number != 0 {
            return Err(GenesisError::Unusable("its number is not 0"));
        }
        let first = block
            .data
            .as_ref()
            .and_then(|d| d.data.first())
            .ok_or(GenesisError::Unusable("no config envelope"))?;
        let (_, _, fabric_header) = arma::fabric::decode_envelope(first)
            .map_err(|_| GenesisError::Unusable("its config envelope does not decode"))?;
        let point = Point {
            hash: arma::fabric::header_hash(header),
            tx_count: chain::GENESIS_TX_COUNT,
        };
        Ok(Genesis {
            channel: fabric_header.channel.channel_id,
            checkpoints: Mutex::new(Checkpoints::new(
                point,
                limits.checkpoint_interval,
                limits.max_checkpoints,
            )),
            block,
        })
    }

    fn nearest(&self, number: u64) -> (u64, Point) {
        self.checkpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .nearest(number)
    }

    fn record(&self, number: u64, point: Point) {
        self.checkpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(number, point);
    }
}

/// What every stream shares.
struct Shared {
    store: StoreReader,
    genesis: Option<Genesis>,
    slots: StreamSlots,
    limits: FabricDeliverLimits,
}

/// The `orderer.AtomicBroadcast` service of an assembler: `Deliver` only (`Broadcast` is
/// a router's).
#[derive(Clone)]
pub struct FabricDeliverService {
    shared: Arc<Shared>,
}

impl FabricDeliverService {
    /// Serves the blocks of `store` after `genesis` (`None`: every request is answered
    /// NOT_FOUND), counting its open streams in `open`.
    pub fn new(
        store: StoreReader,
        genesis: Option<common::Block>,
        limits: FabricDeliverLimits,
        open: IntGauge,
    ) -> Result<FabricDeliverService, GenesisError> {
        let genesis = genesis.map(|g| Genesis::new(g, &limits)).transpose()?;
        Ok(FabricDeliverService {
            shared: Arc::new(Shared {
                store,
                genesis,
                slots: StreamSlots::new(limits.deliver.max_streams, open),
                limits,
            }),
        })
    }

    /// The tonic server, with the request and block size limits.
    pub fn into_server(self) -> AtomicBroadcastServer<FabricDeliverService> {
        let max = self.shared.limits.deliver.max_message_bytes;
        AtomicBroadcastServer::new(self)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .max_encoding_message_size(max)
    }
}

type Item = Result<DeliverResponse, Status>;

#[tonic::async_trait]
impl AtomicBroadcast for FabricDeliverService {
    type BroadcastStream = ReceiverStream<Result<BroadcastResponse, Status>>;
    type DeliverStream = ReceiverStream<Item>;

    async fn broadcast(
        &self,
        _request: Request<Streaming<RawEnvelope>>,
    ) -> Result<Response<Self::BroadcastStream>, Status> {
        Err(Status::unimplemented(
            "an assembler serves Deliver; broadcast to a router",
        ))
    }

    async fn deliver(
        &self,
        request: Request<Streaming<RawEnvelope>>,
    ) -> Result<Response<Self::DeliverStream>, Status> {
        // Over mutual TLS: the hash a request's channel header may bind it to.
        let caller = wire::tls::caller_certificate(&request);
        let s = &self.shared;
        let permit = s.slots.acquire("Fabric Deliver")?;
        let (tx, rx) = mpsc::channel(s.limits.deliver.buffer.get());
        let session = Session {
            shared: Arc::clone(s),
            caller,
            tx,
        };
        tokio::spawn(session.run(request.into_inner(), permit));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// How a request ended.
enum End {
    /// Answered with this status (SUCCESS after the stop block).
    Status(common::Status),
    /// The client is gone.
    Gone,
}

impl From<Refusal> for End {
    fn from(r: Refusal) -> End {
        End::Status(r.status())
    }
}

fn status_response(status: common::Status) -> DeliverResponse {
    DeliverResponse {
        r#type: Some(deliver_response::Type::Status(status as i32)),
    }
}

/// One Deliver stream.
struct Session {
    shared: Arc<Shared>,
    caller: Option<[u8; 32]>,
    tx: mpsc::Sender<Item>,
}

impl Session {
    /// Answers the stream's requests one after the other: each with its blocks, then a
    /// status; a status other than SUCCESS ends the stream, as does the client.
    async fn run(self, mut requests: Streaming<RawEnvelope>, _permit: StreamPermit) {
        loop {
            let envelope = tokio::select! {
                m = requests.message() => match m {
                    Ok(Some(e)) => e,
                    // Closed by the client, or broken.
                    Ok(None) | Err(_) => return,
                },
                () = self.tx.closed() => return,
            };
            let status = match self.answer(&envelope.bytes).await {
                Ok(()) => common::Status::Success,
                Err(End::Status(s)) => s,
                Err(End::Gone) => return,
            };
            if self.tx.send(Ok(status_response(status))).await.is_err() || status != common::Status::Success {
                return;
            }
        }
    }

    /// Sends the blocks one request asks for.
    async fn answer(&self, request: &[u8]) -> Result<(), End> {
        let Some(genesis) = self.shared.genesis.as_ref() else {
            debug!("Fabric Deliver refused: no genesis block configured");
            return Err(End::Status(common::Status::NotFound));
        };
        let info = seek::parse_request(request, &genesis.channel, self.caller.as_ref())
            .inspect_err(|r| debug!(reason = %r, "Fabric Deliver request refused"))?;
        let height = self.shared.store.next_block().saturating_add(1);
        let seek = seek::resolve(&info, height)
            .inspect_err(|r| debug!(reason = %r, "Fabric Deliver request refused"))?;
        if seek.start == 0 {
            // The genesis block is a config block: sent whole whatever the content type.
            self.send(genesis.block.clone()).await?;
            if seek.stop == 0 {
                return Ok(());
            }
        }
        let (from, point) = genesis.nearest(seek.start.saturating_sub(1));
        self.follow(Cursor::after(from, point), seek).await
    }

    async fn send(&self, block: common::Block) -> Result<(), End> {
        let response = DeliverResponse {
            r#type: Some(deliver_response::Type::Block(block)),
        };
        self.tx.send(Ok(response)).await.map_err(|_| End::Gone)
    }

    /// Walks the chain from `cursor` (headers only before `seek.start`) and sends
    /// blocks `seek.start..=seek.stop`, waiting for appends (or NOT_FOUND with
    /// FAIL_IF_NOT_READY).
    async fn follow(&self, mut cursor: Cursor, seek: Seek) -> Result<(), End> {
        let mut watch = self.shared.store.watch();
        loop {
            // Fabric blocks below `held` are held.
            let held = watch.borrow_and_update().saturating_add(1);
            while cursor.next() < held && cursor.next() <= seek.stop {
                let upto = held
                    .min(cursor.next().saturating_add(READ_CHUNK))
                    .min(seek.stop.saturating_add(1));
                let blocks;
                (cursor, blocks) = self.read(cursor, upto, seek).await?;
                for b in blocks {
                    self.send(b).await?;
                }
            }
            if cursor.next() > seek.stop {
                return Ok(());
            }
            if seek.behavior == Behavior::FailIfNotReady {
                return Err(Refusal::NotFound(format!("block {} is not held yet", cursor.next())).into());
            }
            tokio::select! {
                changed = watch.changed() => if changed.is_err() {
                    return Err(Refusal::Unavailable("the assembler is stopping".into()).into());
                },
                () = self.tx.closed() => return Err(End::Gone),
            }
        }
    }

    /// Reads Fabric blocks `cursor.next()..upto` from the ledger (a blocking read) and
    /// returns the cursor after them and those at or after `seek.start`.
    async fn read(&self, cursor: Cursor, upto: u64, seek: Seek) -> Result<(Cursor, Vec<common::Block>), End> {
        let shared = Arc::clone(&self.shared);
        tokio::task::spawn_blocking(move || read_blocks(&shared, cursor, upto, seek))
            .await
            .map_err(|_| End::Gone)?
            .map_err(End::from)
    }
}

/// The blocking part of [`Session::read`]: passes the blocks before `seek.start` (headers
/// only) and makes the others with the content asked for, recording checkpoints.
fn read_blocks(
    shared: &Shared,
    mut cursor: Cursor,
    upto: u64,
    seek: Seek,
) -> Result<(Cursor, Vec<common::Block>), Refusal> {
    let mut out = Vec::new();
    while cursor.next() < upto {
        let number = cursor.next();
        let wanted = number >= seek.start;
        let content = if wanted {
            seek.content
        } else {
            Content::HeaderWithSig
        };
        let ledger = shared
            .store
            .block(cursor.next_ledger(), content == Content::HeaderWithSig)
            .map_err(|e| Refusal::Internal(e.to_string()))?
            .ok_or_else(|| {
                Refusal::Internal(format!(
                    "the ledger does not return block {}",
                    cursor.next_ledger()
                ))
            })?;
        let (block, point) = cursor
            .advance(&ledger, content)
            .map_err(|e| Refusal::Internal(e.to_string()))?;
        if let Some(g) = shared.genesis.as_ref() {
            g.record(number, point);
        }
        if wanted {
            out.push(block);
        }
    }
    Ok((cursor, out))
}
