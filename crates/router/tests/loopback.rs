#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! The router over loopback gRPC: a real router node, its real `GrpcLink`s, and a tiny
//! `BatcherIntake` server per shard that admits, refuses or holds requests as the test
//! says and can be killed and restarted on the same port.

mod common;

use common::{Client, config, envelope_signed_by, signed};
use parking_lot::Mutex;
use prost::Message;
use router::link::{BatcherLink, GrpcLink, LinkConfig};
use router::node::{self, Config as NodeConfig, Deps, Handle};
use router::{BatcherAnswer, BatcherRefusal, RouterConfig};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};
use wire::node::Node as _;
use wire::pb;
use wire::pb::batcher_intake_server::{BatcherIntake, BatcherIntakeServer};
use wire::pb::router_client::RouterClient;

const WAIT: Duration = Duration::from_secs(10);

/// What the test batcher does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Admit,
    Refuse(BatcherRefusal),
    /// Never answer on its own; `release` admits what is held.
    Hold,
}

type AnswerTx = mpsc::Sender<Result<pb::IntakeAnswers, Status>>;

#[derive(Default)]
struct State {
    mode: Option<Mode>,
    seen: Vec<Vec<u8>>,
    /// Intake messages received.
    messages: usize,
    held: Vec<(u64, AnswerTx)>,
}

#[derive(Clone)]
struct TestBatcher {
    state: Arc<Mutex<State>>,
    kill: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl BatcherIntake for TestBatcher {
    type IntakeStream = ReceiverStream<Result<pb::IntakeAnswers, Status>>;

    async fn intake(
        &self,
        request: Request<Streaming<pb::IntakeBatch>>,
    ) -> Result<Response<Self::IntakeStream>, Status> {
        let (tx, rx) = mpsc::channel(1024);
        let (state, mut kill, mut inbound) = (self.state.clone(), self.kill.clone(), request.into_inner());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = kill.changed() => {
                        let _ = tx.send(Err(Status::unavailable("batcher killed"))).await;
                        return;
                    }
                    m = inbound.message() => {
                        let Ok(Some(batch)) = m else { return };
                        state.lock().messages += 1;
                        let mut answers = Vec::new();
                        for r in batch.requests {
                            let mut st = state.lock();
                            st.seen.push(r.request.clone());
                            match st.mode.unwrap_or(Mode::Admit) {
                                Mode::Admit => answers.push(BatcherAnswer::Admitted.to_wire(r.id)),
                                Mode::Refuse(why) => answers.push(BatcherAnswer::Refused(why).to_wire(r.id)),
                                Mode::Hold => st.held.push((r.id, tx.clone())),
                            }
                        }
                        if !answers.is_empty() {
                            let _ = tx.send(Ok(pb::IntakeAnswers { answers })).await;
                        }
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

struct BatcherServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    kill: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl BatcherServer {
    async fn start(addr: SocketAddr, mode: Mode) -> BatcherServer {
        // Rebinding a port just released may take a moment.
        let deadline = Instant::now() + WAIT;
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("bind {addr}: {e}"),
            }
        };
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            mode: Some(mode),
            ..State::default()
        }));
        let (kill, kill_rx) = watch::channel(false);
        let svc = TestBatcher {
            state: state.clone(),
            kill: kill_rx,
        };
        let limits = wire::server::ServerLimits::default();
        let (incoming, _) = wire::server::incoming(listener, &limits);
        let server = wire::server::builder(&limits).add_service(BatcherIntakeServer::new(svc));
        let task = tokio::spawn(async move {
            let _ = server.serve_with_incoming(incoming).await;
        });
        BatcherServer {
            addr,
            state,
            kill,
            task,
        }
    }

    fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set_mode(&self, mode: Mode) {
        self.state.lock().mode = Some(mode);
    }

    fn seen(&self) -> Vec<Vec<u8>> {
        self.state.lock().seen.clone()
    }

    /// Admits every held request.
    async fn release(&self) {
        let held = std::mem::take(&mut self.state.lock().held);
        for (id, tx) in held {
            let answers = vec![BatcherAnswer::Admitted.to_wire(id)];
            tx.send(Ok(pb::IntakeAnswers { answers })).await.unwrap();
        }
    }

    /// Ends every intake stream with an error and stops listening.
    async fn kill(self) {
        let _ = self.kill.send(true);
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn fast(mut cfg: RouterConfig) -> RouterConfig {
    cfg.backoff.initial = Duration::from_millis(20);
    cfg.backoff.max = Duration::from_millis(200);
    cfg
}

/// A router node over `GrpcLink`s to `batchers` (shard `s` is `batchers[s]`), once every
/// link is up.
async fn router(cfg: RouterConfig, batchers: &[&BatcherServer]) -> Handle {
    router_with(cfg, batchers, telemetry::Registry::detached("router")).await
}

/// [`router`] recording into `metrics`.
async fn router_with(
    cfg: RouterConfig,
    batchers: &[&BatcherServer],
    registry: telemetry::Registry,
) -> Handle {
    let links: Vec<Arc<GrpcLink>> = batchers
        .iter()
        .zip(0u32..)
        .map(|(b, shard)| {
            Arc::new(GrpcLink::spawn(LinkConfig {
                shard,
                uri: b.uri(),
                max_pending: cfg.shard_max_in_flight,
                backoff: cfg.backoff,
                connect_timeout: Duration::from_secs(5),
            }))
        })
        .collect();
    eventually("the batcher links to be up", || links.iter().all(|l| l.is_up())).await;
    let deps = Deps {
        links: links.into_iter().map(|l| l as Arc<dyn BatcherLink>).collect(),
        registry,
    };
    let node_cfg = NodeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        server: wire::server::ServerLimits::default(),
        router: cfg,
    };
    node::spawn(node_cfg, deps).await.unwrap()
}

/// One client `Submit` stream.
struct Session {
    tx: mpsc::Sender<pb::SubmitRequest>,
    rx: Streaming<pb::SubmitResponse>,
}

impl Session {
    async fn open(router: &Handle) -> Session {
        let mut client = RouterClient::connect(format!("http://{}", router.addr))
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(64);
        let rx = client.submit(ReceiverStream::new(rx)).await.unwrap().into_inner();
        Session { tx, rx }
    }

    async fn send(&self, id: u64, envelope: Vec<u8>) {
        self.tx.send(pb::SubmitRequest { id, envelope }).await.unwrap();
    }

    async fn next(&mut self) -> pb::SubmitResponse {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("an answer in time")
            .unwrap()
            .expect("an answer, not the end of the stream")
    }

    async fn call(&mut self, id: u64, envelope: Vec<u8>) -> pb::SubmitResponse {
        self.send(id, envelope).await;
        let r = self.next().await;
        assert_eq!(r.id, id);
        r
    }

    /// No answer arrives within `d`.
    async fn silent_for(&mut self, d: Duration) -> bool {
        tokio::time::timeout(d, self.rx.message()).await.is_err()
    }
}

fn code(r: &pb::SubmitResponse) -> Code {
    Code::from(r.code as i32)
}

/// A request of `client` that maps to `shard` of `shards`, starting the search at `n`.
fn request_for_shard(client: &Client, shard: u32, shards: u32, n: &mut u64) -> Vec<u8> {
    loop {
        *n += 1;
        let bytes = signed(client, *n);
        if arma::content::shard_of(&bytes, shards).unwrap() == shard {
            return bytes;
        }
    }
}

#[tokio::test]
async fn acks_only_after_admission_and_refusals_come_back() {
    let alice = Client::new("alice");
    let (b0, b1) = (
        BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Admit).await,
        BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Admit).await,
    );
    let registry = telemetry::Registry::detached("router");
    let r = router_with(fast(config(2, &[&alice])), &[&b0, &b1], registry.clone()).await;
    let metrics = r.service.metrics().clone();
    // Every reason and shard has its series before the first request.
    let text = registry.text();
    for reason in router::metrics::REASONS {
        assert!(
            text.contains(&format!(
                "fabrx_router_requests_refused_total{{reason=\"{reason}\"}} 0"
            )),
            "{text}"
        );
    }
    assert!(
        text.contains("fabrx_router_in_flight_requests{shard=\"1\"} 0"),
        "{text}"
    );
    let mut s = Session::open(&r).await;
    let mut n = 0;
    let refused = |reason: &str| metrics.refused.with_label_values(&[reason]).get();
    let in_flight = |shard: &str| metrics.in_flight.with_label_values(&[shard]).get();

    // Admitted: OK, and the request reached the batcher of its shard, byte for byte.
    let req0 = request_for_shard(&alice, 0, 2, &mut n);
    let req1 = request_for_shard(&alice, 1, 2, &mut n);
    let a = s.call(1, req0.clone()).await;
    assert_eq!((code(&a), a.reason.as_str()), (Code::Ok, ""));
    let a = s.call(2, req1.clone()).await;
    assert_eq!(code(&a), Code::Ok, "{}", a.reason);
    assert_eq!(b0.seen(), vec![req0]);
    assert_eq!(b1.seen(), vec![req1]);
    assert_eq!(metrics.admitted.get(), 2);
    assert_eq!(metrics.streams.get(), 1);

    // Refusals come back with their code and reason.
    for (why, expected) in [
        (BatcherRefusal::Duplicate, Code::AlreadyExists),
        (BatcherRefusal::MempoolFullRequests, Code::ResourceExhausted),
        (BatcherRefusal::MempoolFullBytes, Code::ResourceExhausted),
        (BatcherRefusal::WrongShard, Code::FailedPrecondition),
    ] {
        b0.set_mode(Mode::Refuse(why));
        let a = s.call(3, request_for_shard(&alice, 0, 2, &mut n)).await;
        assert_eq!(code(&a), expected, "{why}: {}", a.reason);
        assert!(a.reason.contains(why.as_str()), "{}", a.reason);
    }
    let by_reason = ["batcher_duplicate", "batcher_full", "batcher_wrong_shard"].map(refused);
    assert_eq!(by_reason, [1, 2, 1]);
    assert_eq!(metrics.admitted.get(), 2);

    // Held by the batcher: no answer until it admits.
    b0.set_mode(Mode::Hold);
    let held = request_for_shard(&alice, 0, 2, &mut n);
    s.send(4, held).await;
    eventually("the batcher to hold the request", || {
        b0.state.lock().held.len() == 1
    })
    .await;
    assert!(
        s.silent_for(Duration::from_millis(200)).await,
        "answered before the batcher did"
    );
    assert_eq!(r.service.in_flight(0).0, 1);
    assert_eq!((in_flight("0"), in_flight("1")), (1, 0));
    assert!(metrics.in_flight_bytes.with_label_values(&["0"]).get() > 0);
    b0.release().await;
    let a = s.next().await;
    assert_eq!((a.id, code(&a)), (4, Code::Ok), "{}", a.reason);
    eventually("the in-flight room to be released", || {
        r.service.in_flight(0) == (0, 0)
    })
    .await;
    assert_eq!((in_flight("0"), metrics.admitted.get()), (0, 3));
    drop(s);
    eventually("the stream gauge to drop", || metrics.streams.get() == 0).await;
    r.stop().await.unwrap();
}

#[tokio::test]
async fn a_batcher_that_never_answers_fills_the_bound_and_no_more() {
    let mut cfg = fast(config(1, &[]));
    cfg.shard_max_in_flight = NonZeroUsize::new(4).unwrap();
    let b = BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Hold).await;
    let r = router(cfg, &[&b]).await;
    let bob = Client::new("bob");
    let mut s = Session::open(&r).await;
    for id in 0..4 {
        s.send(id, signed(&bob, id)).await;
    }
    eventually("4 requests at the batcher", || b.seen().len() == 4).await;
    // The fifth, and every later one, is refused at once: nothing queues behind the bound.
    for id in 4..10 {
        let a = s.call(id, signed(&bob, id)).await;
        assert_eq!(code(&a), Code::ResourceExhausted, "{}", a.reason);
        assert!(a.reason.contains("retry later"), "{}", a.reason);
    }
    assert_eq!(r.service.in_flight(0).0, 4);
    assert_eq!(b.seen().len(), 4, "refused requests must not reach the batcher");
    // Once the batcher answers, the room is back.
    b.release().await;
    let mut acked: Vec<u64> = Vec::new();
    for _ in 0..4 {
        let a = s.next().await;
        assert_eq!(code(&a), Code::Ok, "{}", a.reason);
        acked.push(a.id);
    }
    acked.sort_unstable();
    assert_eq!(acked, vec![0, 1, 2, 3]);
    b.set_mode(Mode::Admit);
    let a = s.call(10, signed(&bob, 10)).await;
    assert_eq!(code(&a), Code::Ok, "{}", a.reason);
    r.stop().await.unwrap();
}

#[tokio::test]
async fn a_killed_batcher_fails_pending_and_new_requests_then_the_link_recovers() {
    let b = BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Admit).await;
    let addr = b.addr;
    let r = router(fast(config(1, &[])), &[&b]).await;
    let carol = Client::new("carol");
    let mut s = Session::open(&r).await;
    let a = s.call(0, signed(&carol, 0)).await;
    assert_eq!(code(&a), Code::Ok, "{}", a.reason);

    b.set_mode(Mode::Hold);
    s.send(1, signed(&carol, 1)).await;
    s.send(2, signed(&carol, 2)).await;
    eventually("2 held requests", || b.state.lock().held.len() == 2).await;
    b.kill().await;
    // Pending requests: UNAVAILABLE, never OK, never silence.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let a = s.next().await;
        assert_eq!(code(&a), Code::Unavailable, "{}", a.reason);
        ids.push(a.id);
    }
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(r.service.in_flight(0), (0, 0));
    // New requests while it is down: UNAVAILABLE at once.
    for id in 3..6 {
        let a = s.call(id, signed(&carol, id)).await;
        assert_eq!(code(&a), Code::Unavailable, "{}", a.reason);
    }

    // The batcher comes back on the same address: the link reconnects.
    let b = BatcherServer::start(addr, Mode::Admit).await;
    let deadline = Instant::now() + WAIT;
    let mut id = 100;
    loop {
        id += 1;
        let a = s.call(id, signed(&carol, id)).await;
        if code(&a) == Code::Ok {
            break;
        }
        assert_eq!(code(&a), Code::Unavailable, "{}", a.reason);
        assert!(Instant::now() < deadline, "the link did not reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        b.seen().len(),
        1,
        "only the acked request reached the new batcher"
    );
    r.stop().await.unwrap();
}

#[tokio::test]
async fn a_late_answer_times_out_and_frees_its_room() {
    let mut cfg = fast(config(1, &[]));
    cfg.answer_timeout = Duration::from_millis(200);
    let b = BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Hold).await;
    let r = router(cfg, &[&b]).await;
    let mut s = Session::open(&r).await;
    let a = s.call(1, signed(&Client::new("dave"), 1)).await;
    assert_eq!(code(&a), Code::DeadlineExceeded, "{}", a.reason);
    assert_eq!(r.service.in_flight(0), (0, 0));
    r.stop().await.unwrap();
}

#[tokio::test]
async fn invalid_requests_are_refused_and_never_forwarded() {
    let alice = Client::new("alice");
    let mallory = Client::new("mallory");
    let b = BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Admit).await;
    let r = router(fast(config(1, &[&alice])), &[&b]).await;
    let mut s = Session::open(&r).await;
    let mut bad_sig = envelope_signed_by(&alice, &mallory.key, 5);
    bad_sig.signature[0] ^= 1;
    let cases = [
        ("empty", vec![], Code::InvalidArgument),
        ("oversized", vec![0x0a; (1 << 20) + 1], Code::InvalidArgument),
        ("undecodable", vec![0xff; 40], Code::InvalidArgument),
        (
            "wrong signature",
            envelope_signed_by(&alice, &mallory.key, 6).encode_to_vec(),
            Code::InvalidArgument,
        ),
        (
            "corrupted signature",
            bad_sig.encode_to_vec(),
            Code::InvalidArgument,
        ),
        ("unknown client", signed(&mallory, 7), Code::PermissionDenied),
    ];
    for (i, (name, bytes, expected)) in cases.into_iter().enumerate() {
        let a = s.call(i as u64, bytes).await;
        assert_eq!(code(&a), expected, "{name}: {}", a.reason);
        assert!(!a.reason.is_empty(), "{name}");
    }
    assert!(b.seen().is_empty());
    // The stream is still usable.
    let a = s.call(99, signed(&alice, 99)).await;
    assert_eq!(code(&a), Code::Ok, "{}", a.reason);
    r.stop().await.unwrap();
}

#[tokio::test]
async fn garbage_bytes_end_the_stream_with_an_error() {
    let b = BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Admit).await;
    // The node as a binary would build it: links from addresses, not waited for.
    let cfg = fast(config(1, &[]));
    let deps = Deps::grpc(&cfg, vec![b.uri()]);
    let node_cfg = NodeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        server: wire::server::ServerLimits::default(),
        router: cfg,
    };
    let r = node::spawn(node_cfg, deps).await.unwrap();
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", r.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    // `IntakeResponse.admitted` is a varint in field 2, where `SubmitRequest` has bytes.
    let codec = wire::codec::BoundedCodec::<pb::IntakeResponse, pb::SubmitResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/fabrx.v1.Router/Submit");
    let garbage = tokio_stream::iter(vec![pb::IntakeResponse {
        id: 1,
        admitted: true,
        refusal: 0,
    }]);
    let mut answers = grpc
        .streaming(Request::new(garbage), path, codec)
        .await
        .unwrap()
        .into_inner();
    let err = tokio::time::timeout(WAIT, answers.message())
        .await
        .expect("an answer in time")
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(b.seen().is_empty());
    r.stop().await.unwrap();
}

#[tokio::test]
async fn a_batcher_that_accepts_but_never_speaks_does_not_stall_the_link() {
    // A listener that accepts connections and never answers: opening the stream must
    // time out and the link must keep retrying with its backoff.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let held = accepted.clone();
    let silent = tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            held.lock().push(sock);
        }
    });
    let link = GrpcLink::spawn(LinkConfig {
        shard: 0,
        uri: format!("http://{addr}"),
        max_pending: NonZeroUsize::new(4).unwrap(),
        backoff: router::Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(20),
        },
        connect_timeout: Duration::from_millis(100),
    });
    eventually("the link to try again", || accepted.lock().len() >= 3).await;
    assert!(!link.is_up());
    let err = link
        .submit(vec![signed(&Client::new("erin"), 1)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert_eq!(link.pending(), 0);
    silent.abort();
}

#[tokio::test]
async fn a_stream_is_not_read_beyond_its_in_flight_bound() {
    let mut cfg = fast(config(1, &[]));
    cfg.stream_max_in_flight = NonZeroUsize::new(2).unwrap();
    let b = BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Hold).await;
    let r = router(cfg, &[&b]).await;
    let frank = Client::new("frank");
    let mut s = Session::open(&r).await;
    for id in 0..6 {
        s.send(id, signed(&frank, id)).await;
    }
    eventually("2 requests at the batcher", || b.seen().len() == 2).await;
    // The other four stay unread (in the client's queue and the HTTP/2 window), neither
    // forwarded nor refused.
    assert!(s.silent_for(Duration::from_millis(200)).await);
    assert_eq!(b.seen().len(), 2);
    assert_eq!(r.service.in_flight(0).0, 2);
    b.set_mode(Mode::Admit);
    b.release().await;
    let mut acked: Vec<u64> = Vec::new();
    for _ in 0..6 {
        let a = s.next().await;
        assert_eq!(code(&a), Code::Ok, "{}", a.reason);
        acked.push(a.id);
    }
    acked.sort_unstable();
    assert_eq!(acked, (0..6).collect::<Vec<u64>>());
    assert_eq!(b.seen().len(), 6);
    r.stop().await.unwrap();
}

#[tokio::test]
async fn a_node_refuses_a_wrong_config() {
    let b = BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Admit).await;
    let node_cfg = |router| NodeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        server: wire::server::ServerLimits::default(),
        router,
    };
    // Two shards, one link.
    let cfg = config(2, &[]);
    let deps = Deps::grpc(&cfg, vec![b.uri()]);
    match node::spawn(node_cfg(cfg), deps).await {
        Err(router::Error::InvalidConfig { field, .. }) => assert_eq!(field, "links"),
        other => panic!("{:?}", other.map(|h| h.addr)),
    }
    // An address already in use.
    let cfg = config(1, &[]);
    let deps = Deps::grpc(&cfg, vec![b.uri()]);
    let mut taken = node_cfg(cfg);
    taken.listen = b.addr;
    match node::spawn(taken, deps).await {
        Err(router::Error::Listen { addr, .. }) => assert_eq!(addr, b.addr),
        other => panic!("{:?}", other.map(|h| h.addr)),
    }
}

/// `SubmitMany`: one message with requests for two shards and a bad one is answered per
/// request (by id, the bad one refused at once), and each shard's requests reach its
/// batcher in one intake message, not one per request.
#[tokio::test]
async fn a_many_message_is_answered_per_request_and_forwarded_per_shard() {
    let alice = Client::new("alice");
    let (b0, b1) = (
        BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Admit).await,
        BatcherServer::start("127.0.0.1:0".parse().unwrap(), Mode::Admit).await,
    );
    let r = router(fast(config(2, &[&alice])), &[&b0, &b1]).await;
    b1.set_mode(Mode::Refuse(BatcherRefusal::Duplicate));
    let mut n = 0;
    let mut requests = Vec::new();
    for i in 0..40u64 {
        let envelope = request_for_shard(&alice, (i % 2) as u32, 2, &mut n);
        requests.push(pb::SubmitRequest {
            id: 100 + i,
            envelope,
        });
    }
    requests.push(pb::SubmitRequest {
        id: 7,
        envelope: vec![1, 2, 3],
    });
    let mut client = RouterClient::connect(format!("http://{}", r.addr)).await.unwrap();
    let batch = pb::SubmitBatch { requests };
    let mut answers = client
        .submit_many(tokio_stream::iter([batch]))
        .await
        .unwrap()
        .into_inner();
    let mut got = std::collections::BTreeMap::new();
    while got.len() < 41 {
        let message = tokio::time::timeout(WAIT, answers.message())
            .await
            .expect("answers in time")
            .unwrap()
            .expect("answers, not the end of the stream");
        for a in message.answers {
            assert!(
                got.insert(a.id, Code::from(a.code as i32)).is_none(),
                "one answer per id"
            );
        }
    }
    assert_eq!(got[&7], Code::InvalidArgument);
    for i in 0..40u64 {
        let want = if i % 2 == 0 { Code::Ok } else { Code::AlreadyExists };
        assert_eq!(got[&(100 + i)], want, "request {i}");
    }
    assert_eq!((b0.seen().len(), b1.seen().len()), (20, 20));
    assert_eq!((b0.state.lock().messages, b1.state.lock().messages), (1, 1));
    let m = r.service.metrics();
    assert_eq!((m.client_messages.get(), m.client_requests.get()), (1, 41));
    r.stop().await.unwrap();
}
