//! A sink: routers that answer at once and an assembler that puts the txs one router
//! took into blocks, on loopback — the cheapest network the network driver can drive,
//! so a run against it measures the load client alone (`fabrx loadgen --target sink`,
//! docs/loadgen.md "A sink: what the load client costs"). The routers serve `Submit`
//! (one request per message) and `SubmitMany` (one answer message per request message)
//! and count the request messages they receive ([`Stats`]).
//!
//! Each router answers by its [`RouterMode`]; a router that admits may also order
//! (`orders`): its txs are cut into blocks of up to [`BLOCK_TXS`] as they arrive and
//! served on the assembler's `Deliver` stream. Tests give routers the misbehaviour of a
//! lagging or faulty party (every answer a duplicate, or a stream never read) to check
//! that the client copes.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio_stream::{Stream, StreamExt as _};
use wire::pb;
use wire::pb::assembler_server::{Assembler, AssemblerServer};
use wire::pb::router_server::{Router, RouterServer};

/// Most txs in one block of the sink.
pub const BLOCK_TXS: usize = 1000;

/// How a sink router answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterMode {
    /// Admits every request (`OK`).
    Admit,
    /// Answers every request `ALREADY_EXISTS`, as a party's router does when its batcher
    /// holds the request already from another party's batch.
    Duplicate,
    /// Accepts the stream and never reads it or answers: a stuck or Byzantine router.
    Hang,
}

/// One router of a sink.
#[derive(Debug, Clone, Copy)]
pub struct SinkRouter {
    /// How it answers.
    pub mode: RouterMode,
    /// Whether the txs it admits go into the sink's blocks (one router should order:
    /// the sink keeps no memory of ids, so two would order each tx twice).
    pub orders: bool,
}

/// A running sink: its routers' and assembler's addresses; dropped, it stops.
pub struct Sink {
    /// Each router's address, in the order given.
    pub routers: Vec<SocketAddr>,
    /// The assembler's address.
    pub assembler: SocketAddr,
    servers: Vec<wire::node::Serving>,
    cutter: tokio::task::JoinHandle<()>,
    ledger: Arc<Ledger>,
    stats: Arc<Stats>,
}

impl Sink {
    /// What the routers received so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Blocks cut so far.
    pub fn height(&self) -> u64 {
        *self.ledger.height.borrow()
    }

    /// Stops every server.
    pub async fn stop(mut self) {
        for s in self.servers.drain(..) {
            s.stop(std::time::Duration::from_millis(200)).await;
        }
        self.cutter.abort();
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.cutter.abort();
    }
}

/// Bytes of requests the sink keeps: older blocks are dropped (a Deliver from one of
/// them ends with `OUT_OF_RANGE`).
pub const KEPT_BYTES: usize = 256 << 20;

/// The sink's latest blocks and their count (watched by the Deliver streams).
struct Ledger {
    window: Mutex<Window>,
    height: watch::Sender<u64>,
}

/// Blocks `first ..` and the bytes of their requests.
#[derive(Default)]
struct Window {
    first: u64,
    blocks: std::collections::VecDeque<Arc<raw::Encoded>>,
    bytes: usize,
}

impl Ledger {
    /// Block `n`: `Err` when it was dropped, `Ok(None)` when it is not cut yet.
    fn get(&self, n: u64) -> Result<Option<Arc<raw::Encoded>>, u64> {
        let w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = n.checked_sub(w.first) else {
            return Err(w.first);
        };
        Ok(usize::try_from(i).ok().and_then(|i| w.blocks.get(i)).cloned())
    }

    /// Appends `block`, encoded once.
    fn push(&self, block: &pb::OrderedBlock) {
        let block = Arc::new(raw::Encoded::new(block));
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        w.bytes = w.bytes.saturating_add(block.request_bytes);
        w.blocks.push_back(block);
        while w.bytes > KEPT_BYTES && w.blocks.len() > 1 {
            if let Some(b) = w.blocks.pop_front() {
                w.bytes = w.bytes.saturating_sub(b.request_bytes);
                w.first = w.first.saturating_add(1);
            }
        }
    }
}

/// Starts a sink on loopback with `routers` (ports chosen by the system). The servers
/// use the process's TLS when one is installed (`wire::tls`).
pub async fn start(routers: &[SinkRouter]) -> crate::Result<Sink> {
    let (height, _) = watch::channel(0u64);
    let ledger = Arc::new(Ledger {
        window: Mutex::new(Window::default()),
        height,
    });
    // Requests to order, in groups; the cutter takes what is there, up to a block's worth.
    let (order_tx, order_rx) = mpsc::channel::<Vec<Vec<u8>>>(64);
    let stats = Arc::new(Stats::default());
    let cutter = tokio::spawn(cut(order_rx, ledger.clone()));
    let limits = wire::server::ServerLimits::default();
    let mut servers = Vec::new();
    let mut addrs = Vec::new();
    for r in routers {
        let svc = SinkRouterService {
            mode: r.mode,
            order: r.orders.then(|| order_tx.clone()),
            stats: stats.clone(),
        };
        let routes = raw::RouterRoutes {
            inner: RouterServer::new(svc.clone()),
            svc,
        };
        let serving = wire::node::serve(bind().await?, &limits, |b| b.add_service(routes))
            .map_err(|e| crate::network::failed(&e.to_string()))?;
        addrs.push(serving.addr());
        servers.push(serving);
    }
    let routes = raw::AssemblerRoutes {
        inner: AssemblerServer::new(SinkAssembler),
        ledger: ledger.clone(),
    };
    let serving = wire::node::serve(bind().await?, &limits, |b| b.add_service(routes))
        .map_err(|e| crate::network::failed(&e.to_string()))?;
    let assembler = serving.addr();
    servers.push(serving);
    Ok(Sink {
        routers: addrs,
        assembler,
        servers,
        cutter,
        ledger,
        stats,
    })
}

async fn bind() -> crate::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| crate::network::failed(&format!("the sink could not listen on loopback: {e}")))
}

/// Cuts what arrives into blocks of up to [`BLOCK_TXS`] requests (a group that does
/// not fit goes into the next block).
async fn cut(mut rx: mpsc::Receiver<Vec<Vec<u8>>>, ledger: Arc<Ledger>) {
    let mut carry: Option<Vec<Vec<u8>>> = None;
    loop {
        let mut requests = match carry.take() {
            Some(group) => group,
            None => match rx.recv().await {
                Some(group) => group,
                None => return,
            },
        };
        while requests.len() < BLOCK_TXS {
            match rx.try_recv() {
                Ok(group) if requests.len() + group.len() <= BLOCK_TXS => requests.extend(group),
                Ok(group) => {
                    carry = Some(group);
                    break;
                }
                Err(_) => break,
            }
        }
        let number = *ledger.height.borrow();
        let block = pb::OrderedBlock {
            header: Some(pb::OrderedHeader {
                number,
                tx_count: u32::try_from(requests.len()).unwrap_or(u32::MAX),
                ..pb::OrderedHeader::default()
            }),
            requests,
            proof: None,
        };
        ledger.push(&block);
        ledger.height.send_replace(number.saturating_add(1));
    }
}

#[derive(Clone)]
struct SinkRouterService {
    mode: RouterMode,
    /// Where an ordering router's envelopes go, a request message's at a time.
    order: Option<mpsc::Sender<Vec<Vec<u8>>>>,
    stats: Arc<Stats>,
}

/// What a sink's routers received, over all of them.
#[derive(Debug, Default)]
pub struct Stats {
    messages: AtomicU64,
    requests: AtomicU64,
}

impl Stats {
    fn on_batch(&self, requests: usize) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(requests as u64, Ordering::Relaxed);
    }

    /// Request messages received (`Submit`: one per request; `SubmitMany`: one per
    /// batch).
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Requests received.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<pb::SubmitResponse, tonic::Status>> + Send>>;
mod raw;

type ManyAnswers = Pin<Box<dyn Stream<Item = Result<pb::SubmitAnswers, tonic::Status>> + Send>>;

impl SinkRouterService {
    /// The code every answer of this router carries.
    fn code(&self) -> tonic::Code {
        match self.mode {
            RouterMode::Duplicate => tonic::Code::AlreadyExists,
            _ => tonic::Code::Ok,
        }
    }
}

#[tonic::async_trait]
impl Router for SinkRouterService {
    type SubmitStream = Answers;
    type SubmitManyStream = ManyAnswers;

    /// A sink orders nothing, config updates included.
    async fn submit_config_update(
        &self,
        _request: tonic::Request<pb::BftSubmitRequest>,
    ) -> Result<tonic::Response<pb::BftSubmitResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("a sink orders no config updates"))
    }

    /// Not reached: the sink's routes serve `SubmitMany` themselves, without decoding
    /// each request (`raw::RouterRoutes`).
    async fn submit_many(
        &self,
        _request: tonic::Request<tonic::Streaming<pb::SubmitBatch>>,
    ) -> Result<tonic::Response<ManyAnswers>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "the sink's routes serve SubmitMany (raw::RouterRoutes)",
        ))
    }

    async fn submit(
        &self,
        request: tonic::Request<tonic::Streaming<pb::SubmitRequest>>,
    ) -> Result<tonic::Response<Answers>, tonic::Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(256);
        let svc = self.clone();
        tokio::spawn(async move {
            if svc.mode == RouterMode::Hang {
                // Hold the stream open, read nothing, answer nothing.
                tx.closed().await;
                drop(inbound);
                return;
            }
            let code = svc.code();
            while let Some(Ok(r)) = inbound.next().await {
                svc.stats.on_batch(1);
                if let Some(order) = &svc.order
                    && order.send(vec![r.envelope]).await.is_err()
                {
                    return;
                }
                let answer = pb::SubmitResponse {
                    id: r.id,
                    code: code as u32,
                    reason: String::new(),
                };
                if tx.send(Ok(answer)).await.is_err() {
                    return;
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

/// Serves the blocks of `ledger` a Deliver `request` asks for, encoded, on the returned
/// channel: from `request.from`, following new blocks unless `to_end` or `to` says
/// otherwise.
fn deliver(
    ledger: Arc<Ledger>,
    r: pb::DeliverRequest,
) -> mpsc::Receiver<Result<prost::bytes::Bytes, tonic::Status>> {
    let (tx, rx) = mpsc::channel(4);
    let mut height = ledger.height.subscribe();
    tokio::spawn(async move {
        let mut next = r.from;
        loop {
            let held = *height.borrow_and_update();
            while next < held {
                if r.to.is_some_and(|to| next > to) {
                    return;
                }
                let block = match ledger.get(next) {
                    Ok(Some(block)) => block,
                    Ok(None) => return,
                    Err(first) => {
                        let gone = format!("block {next} was dropped: the sink keeps blocks from {first}");
                        let _ = tx.send(Err(tonic::Status::out_of_range(gone))).await;
                        return;
                    }
                };
                if tx.send(Ok(block.message(r.headers_only))).await.is_err() {
                    return;
                }
                next = next.saturating_add(1);
            }
            if r.to_end || r.to.is_some_and(|to| next > to) {
                return;
            }
            tokio::select! {
                changed = height.changed() => if changed.is_err() { return },
                () = tx.closed() => return,
            }
        }
    });
    rx
}

/// The generated assembler server behind `raw::AssemblerRoutes`: only its refusals are
/// reached.
struct SinkAssembler;

type Blocks = Pin<Box<dyn Stream<Item = Result<pb::OrderedBlock, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Assembler for SinkAssembler {
    type DeliverStream = Blocks;

    /// Not reached: the sink's routes serve `Deliver` from the encoded blocks
    /// (`raw::AssemblerRoutes`).
    async fn deliver(
        &self,
        _request: tonic::Request<pb::DeliverRequest>,
    ) -> Result<tonic::Response<Blocks>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "the sink's routes serve Deliver (raw::AssemblerRoutes)",
        ))
    }

    async fn fetch_batch(
        &self,
        _request: tonic::Request<pb::FetchRequest>,
    ) -> Result<tonic::Response<pb::Batch>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "a sink serves its blocks with Deliver only",
        ))
    }
}
