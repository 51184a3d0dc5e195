#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Fabric's `Broadcast` on a router: a real router node (`node::spawn`, port 0) over
//! in-process batcher links that admit, refuse or hold as the test says, and a tonic
//! `AtomicBroadcast` client. Plus the pure status table and retry schedule.

mod common;

use parking_lot::Mutex;
use prost::Message;
use router::answer::{BatcherAnswer, BatcherRefusal};
use router::fabric_answer::{self, DUPLICATE_INFO, RETRY_MAX, broadcast_status, retry_delay};
use router::link::BatcherLink;
use router::node::{self, Config as NodeConfig, Deps, Handle};
use router::{Error, Refusal, RequestFormat, RouterConfig, check_request};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Streaming};
use wire::fabric::RawEnvelope;
use wire::fabric::common::{self as fc, Status as FabricStatus};
use wire::fabric::orderer::BroadcastResponse;
use wire::fabric::orderer::atomic_broadcast_client::AtomicBroadcastClient;

const WAIT: Duration = Duration::from_secs(10);

/// What a fake link does with a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answer at once: `DUPLICATE` for a request holding [`DUP`], else admitted.
    Answer,
    /// Wait until released, then answer as `Answer`.
    Hold,
    /// Refuse every request with this reason.
    Refuse(BatcherRefusal),
}

/// The marker of a request the fake batcher already holds.
const DUP: &[u8] = b"dup!";

/// A batcher link in the test's process.
struct FakeLink {
    mode: Mutex<Mode>,
    seen: Mutex<Vec<Vec<u8>>>,
    released: watch::Sender<bool>,
}

impl FakeLink {
    fn new(mode: Mode) -> Arc<FakeLink> {
        Arc::new(FakeLink {
            mode: Mutex::new(mode),
            seen: Mutex::new(Vec::new()),
            released: watch::channel(false).0,
        })
    }

    fn seen(&self) -> Vec<Vec<u8>> {
        self.seen.lock().clone()
    }

    fn release(&self) {
        self.released.send_replace(true);
    }
}

#[async_trait::async_trait]
impl BatcherLink for FakeLink {
    async fn submit(&self, requests: Vec<Vec<u8>>) -> router::Result<Vec<BatcherAnswer>> {
        self.seen.lock().extend(requests.iter().cloned());
        let mode = *self.mode.lock();
        if mode == Mode::Hold {
            let mut rx = self.released.subscribe();
            let _ = rx.wait_for(|r| *r).await;
        }
        Ok(requests
            .iter()
            .map(|r| match mode {
                Mode::Refuse(why) => BatcherAnswer::Refused(why),
                _ if r.windows(DUP.len()).any(|w| w == DUP) => {
                    BatcherAnswer::Refused(BatcherRefusal::Duplicate)
                }
                _ => BatcherAnswer::Admitted,
            })
            .collect())
    }
}

/// A config of `shards` shards that orders Fabric envelopes (open).
fn fabric_config(shards: u32) -> RouterConfig {
    let mut cfg = common::config(shards, &[]);
    cfg.requests.format = RequestFormat::Fabric;
    cfg
}

/// A Fabric MESSAGE envelope of tx `n` with `data`, as `from_parts` writes it.
fn fabric_envelope(n: u64, data: &[u8]) -> Vec<u8> {
    RawEnvelope::from_parts(&fabric_payload(n, data), b"signature")
        .bytes
        .to_vec()
}

fn fabric_payload(n: u64, data: &[u8]) -> Vec<u8> {
    let channel = fc::ChannelHeader {
        r#type: fc::HeaderType::Message as i32,
        channel_id: "arma".into(),
        tx_id: format!("tx-{n}"),
        ..fc::ChannelHeader::default()
    };
    let signature = fc::SignatureHeader {
        creator: b"client-1".to_vec(),
        nonce: n.to_be_bytes().to_vec(),
    };
    fc::Payload {
        header: Some(fc::Header {
            channel_header: channel.encode_to_vec(),
            signature_header: signature.encode_to_vec(),
        }),
        data: data.to_vec(),
    }
    .encode_to_vec()
}

/// The same envelope with its signature field before its payload field (not what prost
/// writes).
fn fabric_envelope_reordered(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::bytes::encode(2, &b"signature".to_vec(), &mut out);
    prost::encoding::bytes::encode(1, &fabric_payload(n, b"reordered"), &mut out);
    out
}

/// Fabric envelopes of `shard` (of `cfg.shards`), from tx `from` on.
fn of_shard(cfg: &RouterConfig, shard: u32, from: u64, count: usize, data: &[u8]) -> Vec<Vec<u8>> {
    (from..)
        .map(|n| fabric_envelope(n, data))
        .filter(|e| check_request(e, cfg).unwrap().shard == shard)
        .take(count)
        .collect()
}

/// A router node over `links` (shard `s` is `links[s]`).
async fn router(cfg: RouterConfig, links: &[Arc<FakeLink>]) -> Handle {
    let deps = Deps {
        links: links.iter().map(|l| l.clone() as Arc<dyn BatcherLink>).collect(),
        registry: telemetry::Registry::detached("router"),
    };
    let node_cfg = NodeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        server: wire::server::ServerLimits::default(),
        router: cfg,
    };
    node::spawn(node_cfg, deps).await.unwrap()
}

/// One client `Broadcast` stream.
struct Session {
    tx: mpsc::Sender<RawEnvelope>,
    rx: Streaming<BroadcastResponse>,
}

impl Session {
    async fn open(router: &Handle) -> Session {
        let mut client = AtomicBroadcastClient::connect(format!("http://{}", router.addr))
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(1024);
        let rx = client
            .broadcast(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Session { tx, rx }
    }

    async fn send(&self, envelope: Vec<u8>) {
        let raw = RawEnvelope {
            bytes: envelope.into(),
        };
        self.tx.send(raw).await.unwrap();
    }

    async fn next(&mut self) -> BroadcastResponse {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("an answer in time")
            .unwrap()
            .expect("an answer, not the end of the stream")
    }

    /// The next `n` answers as (status, info).
    async fn answers(&mut self, n: usize) -> Vec<(FabricStatus, String)> {
        let mut out = Vec::new();
        for _ in 0..n {
            let r = self.next().await;
            out.push((FabricStatus::try_from(r.status).unwrap(), r.info));
        }
        out
    }
}

fn ok() -> (FabricStatus, String) {
    (FabricStatus::Success, String::new())
}

fn dup() -> (FabricStatus, String) {
    (FabricStatus::Success, DUPLICATE_INFO.to_string())
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

#[tokio::test]
async fn answers_come_in_order_when_shards_complete_out_of_order() {
    let cfg = fabric_config(2);
    // Shard 0's batcher holds its requests; shard 1's answers at once.
    let links = [FakeLink::new(Mode::Hold), FakeLink::new(Mode::Answer)];
    let node = router(cfg.clone(), &links).await;
    let s0 = of_shard(&cfg, 0, 0, 4, b"x");
    let mut s1 = of_shard(&cfg, 1, 0, 3, b"x");
    s1.insert(1, of_shard(&cfg, 1, 100, 1, b"dup!").remove(0));
    // s0, s1, s0, s1(dup), s0, s1, s0, s1
    let sent: Vec<Vec<u8>> = s0
        .iter()
        .zip(&s1)
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let mut session = Session::open(&node).await;
    for e in &sent {
        session.send(e.clone()).await;
    }
    eventually("shard 1 to answer its four", || links[1].seen().len() == 4).await;
    eventually("shard 0 to hold its four", || links[0].seen().len() == 4).await;
    // The first envelope is shard 0's: nothing may be answered before it.
    let early = tokio::time::timeout(Duration::from_millis(200), session.rx.message()).await;
    assert!(early.is_err(), "an answer before the first envelope's: {early:?}");
    links[0].release();
    let got = session.answers(8).await;
    assert_eq!(got, vec![ok(), ok(), ok(), dup(), ok(), ok(), ok(), ok()]);
    assert_eq!(sorted(links[0].seen()), sorted(s0));
    assert_eq!(sorted(links[1].seen()), sorted(s1));
    let m = node.service.metrics();
    assert_eq!(m.client_requests.get(), 8);
    assert_eq!(m.broadcast_answers.with_label_values(&["SUCCESS"]).get(), 8);
    assert_eq!(node.service.in_flight(0), (0, 0));
}

#[tokio::test]
async fn the_link_gets_the_bytes_as_sent() {
    let cfg = fabric_config(1);
    let links = [FakeLink::new(Mode::Answer)];
    let node = router(cfg, &links).await;
    let reordered = fabric_envelope_reordered(7);
    assert_ne!(
        reordered,
        RawEnvelope::from_parts(&fabric_payload(7, b"reordered"), b"signature")
            .bytes
            .to_vec(),
        "the test envelope must not be in prost's field order"
    );
    let plain = fabric_envelope(8, b"plain");
    let mut session = Session::open(&node).await;
    session.send(reordered.clone()).await;
    session.send(plain.clone()).await;
    assert_eq!(session.answers(2).await, vec![ok(), ok()]);
    assert_eq!(sorted(links[0].seen()), sorted(vec![reordered, plain]));
}

#[tokio::test]
async fn a_malformed_envelope_is_refused_at_its_position() {
    let cfg = fabric_config(2);
    let links = [FakeLink::new(Mode::Answer), FakeLink::new(Mode::Answer)];
    let node = router(cfg, &links).await;
    let no_header = RawEnvelope::from_parts(
        &fc::Payload {
            header: None,
            data: b"x".to_vec(),
        }
        .encode_to_vec(),
        b"sig",
    )
    .bytes
    .to_vec();
    let config_update = {
        let channel = fc::ChannelHeader {
            r#type: fc::HeaderType::Config as i32,
            ..fc::ChannelHeader::default()
        };
        let payload = fc::Payload {
            header: Some(fc::Header {
                channel_header: channel.encode_to_vec(),
                signature_header: fc::SignatureHeader {
                    creator: b"c".to_vec(),
                    nonce: vec![],
                }
                .encode_to_vec(),
            }),
            data: vec![],
        };
        RawEnvelope::from_parts(&payload.encode_to_vec(), b"sig")
            .bytes
            .to_vec()
    };
    let too_large = fabric_envelope(9, &vec![1; (1 << 20) + 1]);
    let mut session = Session::open(&node).await;
    session.send(fabric_envelope(1, b"a")).await;
    session.send(no_header).await;
    session.send(fabric_envelope(2, b"b")).await;
    session
        .send(RawEnvelope::from_parts(&[0xff, 0xff], b"sig").bytes.to_vec())
        .await;
    session.send(config_update).await;
    session.send(too_large).await;
    session.send(fabric_envelope(3, b"c")).await;
    let got = session.answers(7).await;
    let statuses: Vec<FabricStatus> = got.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        statuses,
        vec![
            FabricStatus::Success,
            FabricStatus::BadRequest,
            FabricStatus::Success,
            FabricStatus::BadRequest,
            FabricStatus::BadRequest,
            FabricStatus::RequestEntityTooLarge,
            FabricStatus::Success,
        ]
    );
    assert!(got[1].1.contains("no payload header"), "{:?}", got[1]);
    assert!(got[3].1.contains("payload does not decode"), "{:?}", got[3]);
    assert!(got[4].1.contains("header type"), "{:?}", got[4]);
    assert!(
        got.iter()
            .all(|(_, info)| info.len() <= router::service::MAX_REASON_BYTES)
    );
    let forwarded = links[0].seen().len() + links[1].seen().len();
    assert_eq!(forwarded, 3, "only the valid envelopes reach a batcher");
}

#[tokio::test]
async fn a_full_shard_is_waited_out() {
    let mut cfg = fabric_config(1);
    cfg.shard_max_in_flight = NonZeroUsize::new(1).unwrap();
    let links = [FakeLink::new(Mode::Hold)];
    let node = router(cfg, &links).await;
    let mut session = Session::open(&node).await;
    session.send(fabric_envelope(1, b"a")).await;
    session.send(fabric_envelope(2, b"b")).await;
    eventually("the first to be held", || links[0].seen().len() == 1).await;
    // The second waits for room (tried again), not refused at once.
    let m = node.service.metrics().clone();
    eventually("the second to be tried again", || m.broadcast_retries.get() >= 2).await;
    assert_eq!(
        links[0].seen().len(),
        1,
        "the second is not forwarded without room"
    );
    links[0].release();
    assert_eq!(session.answers(2).await, vec![ok(), ok()]);
    assert_eq!(links[0].seen().len(), 2);
    assert_eq!(m.broadcast_answers.with_label_values(&["SUCCESS"]).get(), 2);
}

#[tokio::test]
async fn a_shard_that_stays_full_answers_service_unavailable() {
    let mut cfg = fabric_config(1);
    cfg.shard_max_in_flight = NonZeroUsize::new(1).unwrap();
    cfg.answer_timeout = Duration::from_millis(300);
    let links = [FakeLink::new(Mode::Hold)];
    let node = router(cfg, &links).await;
    let mut session = Session::open(&node).await;
    let began = Instant::now();
    session.send(fabric_envelope(1, b"a")).await;
    session.send(fabric_envelope(2, b"b")).await;
    let got = session.answers(2).await;
    assert!(began.elapsed() >= Duration::from_millis(300));
    assert!(
        got.iter().all(|(s, _)| *s == FabricStatus::ServiceUnavailable),
        "{got:?}"
    );
    let m = node.service.metrics();
    assert!(m.broadcast_retries.get() >= 1);
    assert_eq!(
        m.broadcast_answers
            .with_label_values(&["SERVICE_UNAVAILABLE"])
            .get(),
        2
    );
}

#[tokio::test]
async fn a_full_mempool_is_tried_again_until_the_answer_timeout() {
    let mut cfg = fabric_config(1);
    cfg.answer_timeout = Duration::from_millis(300);
    let links = [FakeLink::new(Mode::Refuse(BatcherRefusal::MempoolFullRequests))];
    let node = router(cfg, &links).await;
    let mut session = Session::open(&node).await;
    let began = Instant::now();
    session.send(fabric_envelope(1, b"a")).await;
    let got = session.answers(1).await;
    assert!(began.elapsed() >= Duration::from_millis(300));
    assert_eq!(got[0].0, FabricStatus::ServiceUnavailable);
    assert!(got[0].1.contains("no room"), "{got:?}");
    // 5, 10, 20, 40, 50, 50, … ms apart within 300 ms: at least four tries.
    let tries = links[0].seen().len();
    assert!(tries >= 4, "{tries} tries");
    // Then room frees: the next envelope is admitted after a few refusals.
    *links[0].mode.lock() = Mode::Answer;
    session.send(fabric_envelope(2, b"b")).await;
    assert_eq!(session.answers(1).await, vec![ok()]);
}

#[tokio::test]
async fn a_duplicate_is_success() {
    let cfg = fabric_config(1);
    let links = [FakeLink::new(Mode::Refuse(BatcherRefusal::Duplicate))];
    let node = router(cfg, &links).await;
    let mut session = Session::open(&node).await;
    session.send(fabric_envelope(1, b"a")).await;
    assert_eq!(session.answers(1).await, vec![dup()]);
}

#[tokio::test]
async fn a_fabrx_only_network_refuses_fabric_envelopes() {
    let cfg = common::config(1, &[]);
    assert_eq!(cfg.requests.format, RequestFormat::Fabrx);
    let links = [FakeLink::new(Mode::Answer)];
    let node = router(cfg, &links).await;
    let mut session = Session::open(&node).await;
    session.send(fabric_envelope(1, b"a")).await;
    let got = session.answers(1).await;
    assert_eq!(got[0].0, FabricStatus::BadRequest);
    assert!(got[0].1.contains("fabrx envelopes only"), "{got:?}");
    assert!(links[0].seen().is_empty());
}

/// Sends a valid envelope, then `bad`: the first is answered, then the stream ends with
/// an error whose code is one of `codes`.
async fn ends_with_an_error(bad: Vec<u8>, codes: &[Code]) {
    let cfg = fabric_config(1);
    let links = [FakeLink::new(Mode::Answer)];
    let node = router(cfg, &links).await;
    let mut session = Session::open(&node).await;
    session.send(fabric_envelope(1, b"a")).await;
    session.send(bad).await;
    session.send(fabric_envelope(2, b"b")).await;
    assert_eq!(session.answers(1).await, vec![ok()]);
    let end = tokio::time::timeout(WAIT, session.rx.message())
        .await
        .expect("the stream ends in time");
    let status = end.expect_err("an error, not an answer or OK");
    assert!(codes.contains(&status.code()), "{status:?}");
    assert_eq!(links[0].seen().len(), 1, "nothing after the bad message is read");
}

#[tokio::test]
async fn an_over_limit_message_ends_the_stream_after_the_answers_before_it() {
    let over = vec![7; wire::limits::FABRIC_ENVELOPE.max_bytes + 1];
    ends_with_an_error(over, &[Code::ResourceExhausted, Code::OutOfRange]).await;
}

#[tokio::test]
async fn garbage_ends_the_stream_after_the_answers_before_it() {
    ends_with_an_error(vec![0xff, 0xff, 0xff], &[Code::InvalidArgument]).await;
}

#[tokio::test]
async fn deliver_on_a_router_is_unimplemented() {
    let links = [FakeLink::new(Mode::Answer)];
    let node = router(fabric_config(1), &links).await;
    let mut client = AtomicBroadcastClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap();
    let (_tx, rx) = mpsc::channel::<RawEnvelope>(1);
    let status = client.deliver(ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
}

#[test]
fn the_status_of_each_outcome() {
    use arma::admission::ContentError;
    use arma::fabric::FabricError;
    let refused = |r: Refusal| Err(Error::Refused(r));
    let batcher = |reason| Err(Error::BatcherRefused { reason });
    let table: Vec<(router::Result<()>, FabricStatus)> = vec![
        (Ok(()), FabricStatus::Success),
        (batcher(BatcherRefusal::Duplicate), FabricStatus::Success),
        (refused(Refusal::Empty), FabricStatus::BadRequest),
        (
            refused(Refusal::TooLarge { size: 2, max: 1 }),
            FabricStatus::RequestEntityTooLarge,
        ),
        (
            batcher(BatcherRefusal::TooLarge),
            FabricStatus::RequestEntityTooLarge,
        ),
        (
            refused(Refusal::Content(ContentError::Fabric(FabricError::Malformed(
                "x",
            )))),
            FabricStatus::BadRequest,
        ),
        (
            refused(Refusal::Content(ContentError::Fabric(FabricError::Unsupported(
                1,
            )))),
            FabricStatus::BadRequest,
        ),
        (
            refused(Refusal::Content(ContentError::WrongFormat {
                takes: "fabrx",
                got: "fabric",
            })),
            FabricStatus::BadRequest,
        ),
        (
            refused(Refusal::Content(ContentError::Fabric(FabricError::UnknownClient))),
            FabricStatus::Forbidden,
        ),
        (
            refused(Refusal::Content(ContentError::Fabric(FabricError::BadSignature))),
            FabricStatus::Forbidden,
        ),
        (
            refused(Refusal::Content(ContentError::UnknownClient)),
            FabricStatus::Forbidden,
        ),
        (
            Err(Error::ShardFullRequests {
                shard: 0,
                held: 1,
                max: 1,
            }),
            FabricStatus::ServiceUnavailable,
        ),
        (
            Err(Error::ShardFullBytes {
                shard: 0,
                held: 1,
                size: 1,
                max: 1,
            }),
            FabricStatus::ServiceUnavailable,
        ),
        (
            Err(Error::LinkBusy { shard: 0, max: 1 }),
            FabricStatus::ServiceUnavailable,
        ),
        (
            batcher(BatcherRefusal::MempoolFullBytes),
            FabricStatus::ServiceUnavailable,
        ),
        (
            Err(Error::LinkDown {
                shard: 0,
                reason: "x".into(),
            }),
            FabricStatus::ServiceUnavailable,
        ),
        (
            Err(Error::NoAnswer {
                shard: 0,
                timeout_ms: 1,
            }),
            FabricStatus::ServiceUnavailable,
        ),
        (
            batcher(BatcherRefusal::WrongShard),
            FabricStatus::InternalServerError,
        ),
        (
            batcher(BatcherRefusal::Unspecified),
            FabricStatus::InternalServerError,
        ),
        (
            Err(Error::Internal("x".into())),
            FabricStatus::InternalServerError,
        ),
    ];
    for (result, want) in table {
        let (got, info) = broadcast_status(&result);
        assert_eq!(got, want, "{result:?}");
        assert_eq!(info.is_empty(), result.is_ok(), "{result:?}: {info:?}");
    }
    // Only full bounds are waited out.
    assert!(fabric_answer::waits_for_room(&Error::LinkBusy {
        shard: 0,
        max: 1
    }));
    assert!(!fabric_answer::waits_for_room(&Error::LinkDown {
        shard: 0,
        reason: String::new()
    }));
    assert!(!fabric_answer::waits_for_room(&Error::BatcherRefused {
        reason: BatcherRefusal::Duplicate
    }));
}

#[test]
fn a_long_info_is_cut_on_a_character_boundary() {
    let e = Err(Error::LinkDown {
        shard: 0,
        reason: "é".repeat(400),
    });
    let (_, info) = broadcast_status(&e);
    assert!(info.len() <= router::service::MAX_REASON_BYTES);
    assert!(info.len() > router::service::MAX_REASON_BYTES - 2);
}

#[test]
fn the_retry_delay_doubles_to_its_bound_and_never_overflows() {
    let delays: Vec<Duration> = (0..6).map(retry_delay).collect();
    let ms = |n| Duration::from_millis(n);
    assert_eq!(delays, vec![ms(5), ms(10), ms(20), ms(40), ms(50), ms(50)]);
    for round in [16, 31, 32, 1000, u32::MAX] {
        assert_eq!(retry_delay(round), RETRY_MAX);
    }
}

/// A `Broadcast` stream whose client never reads its answers, over a connection whose
/// stream window takes none of them.
async fn open_unread(router: &Handle) -> mpsc::Sender<RawEnvelope> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", router.addr))
        .unwrap()
        .initial_stream_window_size(Some(0))
        .connect()
        .await
        .unwrap();
    let mut client = AtomicBroadcastClient::new(channel);
    let (tx, rx) = mpsc::channel(1024);
    let answers = client
        .broadcast(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    // Kept open and never read.
    std::mem::forget(answers);
    tx
}

/// Sends envelopes `from..` one at a time on `slow`, each once the router read the one
/// before, until the router stops reading; the number it read.
async fn fill_until_stalled(node: &Handle, slow: &mpsc::Sender<RawEnvelope>, from: u64) -> u64 {
    let m = node.service.metrics().clone();
    let start = m.client_requests.get();
    for n in from.. {
        let raw = RawEnvelope {
            bytes: fabric_envelope(n, b"fill").into(),
        };
        slow.send(raw).await.unwrap();
        let want = start + (n - from) + 1;
        let deadline = Instant::now() + Duration::from_millis(300);
        while m.client_requests.get() < want {
            if Instant::now() > deadline {
                return n - from;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    unreachable!()
}

#[tokio::test]
async fn a_client_that_does_not_read_its_answers_holds_no_room_of_the_shard() {
    let mut cfg = fabric_config(1);
    cfg.stream_max_in_flight = NonZeroUsize::new(4).unwrap();
    cfg.shard_max_in_flight = NonZeroUsize::new(2).unwrap();
    cfg.answer_timeout = Duration::from_millis(500);
    let links = [FakeLink::new(Mode::Answer)];
    let node = router(cfg, &links).await;
    // How many answers a stream that is not read takes before it stops.
    let probe = open_unread(&node).await;
    let room = fill_until_stalled(&node, &probe, 0).await - 1;
    // Another such stream takes exactly that many.
    let slow = open_unread(&node).await;
    let raw = |e: Vec<u8>| RawEnvelope { bytes: e.into() };
    let m = node.service.metrics().clone();
    let read = m.client_requests.get();
    for n in 0..room {
        slow.send(raw(fabric_envelope(10_000 + n, b"fill")))
            .await
            .unwrap();
        eventually("the fill to be read", || m.client_requests.get() == read + n + 1).await;
    }
    // Then two envelopes the batcher holds, each read as its own group.
    *links[0].mode.lock() = Mode::Hold;
    let seen = links[0].seen().len();
    slow.send(raw(fabric_envelope(20_000, b"held"))).await.unwrap();
    eventually("the first to reach the batcher", || {
        links[0].seen().len() == seen + 1
    })
    .await;
    slow.send(raw(fabric_envelope(20_001, b"held"))).await.unwrap();
    eventually("the second to reach the batcher", || {
        links[0].seen().len() == seen + 2
    })
    .await;
    links[0].release();
    // The batcher answered both: the shard's room is free again, whether or not the
    // client reads its answers.
    eventually("the shard's room to be free", || {
        node.service.in_flight(0) == (0, 0)
    })
    .await;
    // Another client is served, up to the shard's whole room.
    let mut other = Session::open(&node).await;
    *links[0].mode.lock() = Mode::Answer;
    other.send(fabric_envelope(30_000, b"other")).await;
    other.send(fabric_envelope(30_001, b"other")).await;
    assert_eq!(other.answers(2).await, vec![ok(), ok()]);
}
