//! The gRPC shell of the sidecar's query and notification service (FX §3.1): the
//! `Sidecar` service of `committer.proto` over a [`StoreReader`] and a [`Notifier`].
//!
//! - `Subscribe`: a bidirectional stream. Every `SubscribeRequest` adds ids to the
//!   caller's subscription; each id is answered once with its final status and name
//!   (at once if already final). When the client closes its side, the stream ends after
//!   the last pending id is answered. A client that does not read its events is dropped
//!   with `RESOURCE_EXHAUSTED` (publishing never waits for it); an empty id is
//!   `INVALID_ARGUMENT`. Closing the stream unsubscribes.
//! - `GetBlock`: the stored block with its statuses; `NOT_FOUND` outside the store.
//! - `GetTxStatus`: stored statuses of the ids asked for, in request order; unknown ids
//!   are left out of the answer.
//! - `GetNextBlock`: the number of the next block the store expects.
//!
//! The store's writer lives elsewhere (the sidecar's block loop); lookups here take the
//! store's index lock only briefly and never wait for an append's fsync.

use crate::Error;
use crate::notify::{Notifier, Subscription, TxEvent};
use crate::store::{StoreReader, StoredBlock};
use std::pin::Pin;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status as GrpcStatus, Streaming};
use tracing::{debug, instrument};
use types::TxId;
use wire::pb;

/// Sizes of the service.
#[derive(Debug, Clone, Copy)]
pub struct ServiceConfig {
    /// Events buffered per `Subscribe` response stream (on top of the subscription's own
    /// channel, see [`crate::notify::NotifierConfig::capacity`]).
    pub stream_buffer: std::num::NonZeroUsize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            stream_buffer: std::num::NonZeroUsize::new(256).unwrap_or(std::num::NonZeroUsize::MIN),
        }
    }
}

/// The tonic service.
#[derive(Debug, Clone)]
pub struct SidecarGrpc {
    store: StoreReader,
    notifier: Notifier,
    config: ServiceConfig,
}

impl SidecarGrpc {
    /// A service over the store's read handle and the notifier the block loop publishes to.
    pub fn new(store: StoreReader, notifier: Notifier, config: ServiceConfig) -> SidecarGrpc {
        SidecarGrpc {
            store,
            notifier,
            config,
        }
    }

    /// The tonic server wrapper.
    pub fn into_server(self) -> pb::sidecar_server::SidecarServer<SidecarGrpc> {
        pb::sidecar_server::SidecarServer::new(self)
            .max_decoding_message_size(wire::limits::SIDECAR_MAX_MESSAGE_BYTES)
            .max_encoding_message_size(wire::limits::COMMITTER_MAX_ANSWER_BYTES)
    }
}

/// A status event on the wire.
pub fn event_to_wire(e: TxEvent) -> pb::TxStatusEvent {
    pb::TxStatusEvent {
        status: Some(pb::TxStatus {
            tx_id: e.id.0,
            code: e.status.code(),
            block: e.height.block,
            index: e.height.index,
        }),
        status_name: e.status.name().to_string(),
    }
}

/// A stored block on the wire.
pub fn block_to_wire(b: StoredBlock) -> pb::CommittedBlock {
    pb::CommittedBlock {
        number: b.number,
        statuses: b
            .statuses
            .into_iter()
            .enumerate()
            .map(|(i, (id, s))| pb::TxStatus {
                tx_id: id.0,
                code: s.code(),
                block: b.number,
                index: i as u32,
            })
            .collect(),
        block: b.block,
    }
}

fn to_grpc(e: Error) -> GrpcStatus {
    match e {
        Error::StoreCorrupt { .. } => GrpcStatus::data_loss(e.to_string()),
        Error::SubscriptionLagged { .. } | Error::SubscriptionsFull { .. } => {
            GrpcStatus::resource_exhausted(e.to_string())
        }
        Error::NotifierClosed => GrpcStatus::unavailable(e.to_string()),
        e => GrpcStatus::internal(e.to_string()),
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::TxStatusEvent, GrpcStatus>> + Send>>;
type Out = mpsc::Sender<Result<pb::TxStatusEvent, GrpcStatus>>;

enum Step {
    Request(Result<Option<pb::SubscribeRequest>, GrpcStatus>),
    Event(crate::Result<Option<TxEvent>>),
    ClientGone,
}

/// Serves one `Subscribe` stream until the client goes away, or has closed its side and
/// every id it watched was answered, or the subscription fails.
async fn run_subscription(mut incoming: Streaming<pb::SubscribeRequest>, mut sub: Subscription, tx_out: Out) {
    let mut open = true;
    loop {
        if !open && sub.pending() == 0 && !sub.has_buffered() {
            return;
        }
        let step = tokio::select! {
            m = incoming.message(), if open => Step::Request(m),
            e = sub.recv() => Step::Event(e),
            () = tx_out.closed() => Step::ClientGone,
        };
        let reply = match step {
            Step::Request(Ok(Some(req))) => on_request(&sub, req),
            Step::Request(Ok(None)) => {
                open = false;
                continue;
            }
            // Bytes that do not decode or a message over its limit: the client learns why.
            Step::Request(Err(e)) => {
                debug!(error = %e, "subscribe request stream failed");
                Err(e)
            }
            Step::Event(Ok(Some(e))) => Ok(with_buffered(&mut sub, e)),
            Step::Event(Ok(None)) => Err(to_grpc(Error::NotifierClosed)),
            Step::Event(Err(e)) => Err(to_grpc(e)),
            Step::ClientGone => return,
        };
        match reply {
            Ok(events) => {
                for e in events {
                    if tx_out.send(Ok(event_to_wire(e))).await.is_err() {
                        return;
                    }
                }
            }
            Err(status) => {
                let _ = tx_out.send(Err(status)).await;
                return;
            }
        }
    }
}

/// Events sent in one turn of a stream's loop: `first`, then what the subscription has
/// buffered already, up to the response buffer's usual size (a published block's events
/// go out without a `select!` per event).
const EVENTS_PER_TURN: usize = 256;

/// `first` and up to [`EVENTS_PER_TURN`] − 1 events already buffered. An error of the
/// subscription is left for the next `recv`, after these events.
fn with_buffered(sub: &mut Subscription, first: TxEvent) -> Vec<TxEvent> {
    let mut events = vec![first];
    while events.len() < EVENTS_PER_TURN {
        match sub.try_recv() {
            Ok(Some(e)) => events.push(e),
            Ok(None) | Err(_) => break,
        }
    }
    events
}

fn on_request(sub: &Subscription, req: pb::SubscribeRequest) -> Result<Vec<TxEvent>, GrpcStatus> {
    if req.tx_ids.iter().any(String::is_empty) {
        return Err(GrpcStatus::invalid_argument("empty tx id in subscribe request"));
    }
    if let Some(bad) = req.tx_ids.iter().find(|id| !types::txid::is_well_formed(id)) {
        let shown: String = bad.chars().take(64).collect();
        return Err(GrpcStatus::invalid_argument(format!(
            "tx id {shown:?} is not well formed (1 to {} printable ASCII characters)",
            types::txid::MAX_TX_ID_LEN
        )));
    }
    sub.watch(req.tx_ids.into_iter().map(TxId)).map_err(to_grpc)
}

#[tonic::async_trait]
impl pb::sidecar_server::Sidecar for SidecarGrpc {
    type SubscribeStream = EventStream;

    #[instrument(skip_all)]
    async fn subscribe(
        &self,
        request: Request<Streaming<pb::SubscribeRequest>>,
    ) -> Result<Response<Self::SubscribeStream>, GrpcStatus> {
        let incoming = request.into_inner();
        let sub = self.notifier.subscribe();
        let (tx_out, rx_out) = mpsc::channel(self.config.stream_buffer.get());
        tokio::spawn(run_subscription(incoming, sub, tx_out));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx_out))))
    }

    #[instrument(skip_all, fields(block = request.get_ref().number))]
    async fn get_block(
        &self,
        request: Request<pb::BlockQuery>,
    ) -> Result<Response<pb::CommittedBlock>, GrpcStatus> {
        let number = request.into_inner().number;
        let store = self.store.clone();
        let found = tokio::task::spawn_blocking(move || store.get_block(number))
            .await
            .map_err(|e| GrpcStatus::internal(e.to_string()))?
            .map_err(to_grpc)?;
        match found {
            Some(b) => Ok(Response::new(block_to_wire(b))),
            None => Err(GrpcStatus::not_found(format!(
                "block {number} is not stored (blocks {}..{})",
                self.store.first_block(),
                self.store.next_block()
            ))),
        }
    }

    async fn get_tx_status(
        &self,
        request: Request<pb::StatusQuery>,
    ) -> Result<Response<pb::TxStatusBatch>, GrpcStatus> {
        let statuses = request
            .into_inner()
            .tx_ids
            .into_iter()
            .filter_map(|id| {
                let id = TxId(id);
                self.store.tx_status(&id).map(|(s, h)| pb::TxStatus {
                    tx_id: id.0,
                    code: s.code(),
                    block: h.block,
                    index: h.index,
                })
            })
            .collect();
        Ok(Response::new(pb::TxStatusBatch { statuses }))
    }

    async fn get_next_block(
        &self,
        _request: Request<pb::LastCommittedRequest>,
    ) -> Result<Response<pb::NextBlock>, GrpcStatus> {
        Ok(Response::new(pb::NextBlock {
            number: self.store.next_block(),
        }))
    }
}
