//! Consenter nodes in process: `Submit` answers once a request is decided and the
//! answer survives a restart; a replayed or forged envelope ends its stream with an
//! error status; a missing WAL beside a decisions log refuses to start; the WAL as the
//! node lays it out cuts a zero-filled tail and refuses a corrupted length field.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use consenter::keys::{EnvelopeSeq, NodeKeys, keys_from_seed_prefix, seal_at};
use consenter::replica::{NodeLimits, ReplicaConfig};
use wire::pb;
use wire::pb::bft_consensus_client::BftConsensusClient;

const SEEDS: &str = "node-test-";

fn config(id: u32, peers: &[String], dir: &Path) -> ReplicaConfig {
    let mut engine = bft::Config::new(id, peers.len() as u32);
    engine.batch_interval_ms = 5;
    engine.heartbeat_interval_ms = 50;
    ReplicaConfig {
        engine,
        peers: peers.to_vec(),
        keys: NodeKeys::Seeded { prefix: SEEDS.into() },
        chain: "node-test".into(),
        wal: dir.join(format!("r{id}/replica.wal")),
        decisions: dir.join(format!("r{id}/decisions")),
        tick: Duration::from_millis(5),
        limits: NodeLimits::default(),
        channel_capacity: 256,
    }
}

async fn client(addr: &str) -> BftConsensusClient<tonic::transport::Channel> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match BftConsensusClient::connect(format!("http://{addr}")).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("{addr} never came up: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn submit(addr: &str, request: &[u8]) -> Result<pb::BftSubmitResponse, tonic::Status> {
    client(addr)
        .await
        .submit(pb::BftSubmitRequest {
            request: request.to_vec(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Runs one single-replica node on its own runtime until `f` returns, then stops it.
fn with_node<T>(cfg: ReplicaConfig, f: impl AsyncFnOnce(String) -> T) -> T {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let addr = cfg.peers[cfg.engine.id as usize].clone();
    let out = rt.block_on(async move {
        let node = tokio::spawn(consenter::replica::run(cfg));
        let out = f(addr).await;
        assert!(!node.is_finished(), "node stopped: {:?}", node.await);
        out
    });
    rt.shutdown_timeout(Duration::from_secs(5));
    out
}

fn wal_segment(wal: &Path) -> PathBuf {
    std::fs::read_dir(wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "wal"))
        .expect("a WAL segment")
}

/// A node that answered `accepted` still holds the request after a restart; the WAL as
/// the node writes it cuts a zero-filled tail and refuses a corrupted length field.
#[test]
fn submit_answers_when_decided_and_the_wal_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let peers = vec![testkit::net::loopback_addr()];
    let cfg = config(0, &peers, dir.path());
    let seqs = with_node(cfg.clone(), async |addr| {
        let mut seqs = Vec::new();
        for r in [b"one".as_slice(), b"two", b"three"] {
            let reply = submit(&addr, r).await.expect("decided");
            assert!(reply.accepted);
            seqs.push(reply.decided_seq);
        }
        // A request decided before is answered at once.
        assert!(submit(&addr, b"two").await.expect("decided").accepted);
        // Too large: INVALID_ARGUMENT, never accepted.
        let big = vec![1u8; cfg.engine.max_request_bytes + 1];
        assert_eq!(
            submit(&addr, &big).await.unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        // Far over Submit's own message limit (not the 64 MiB of peer envelopes):
        // refused before it is decoded.
        let huge = vec![1u8; 4 << 20];
        let status = submit(&addr, &huge).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
        seqs
    });
    assert_eq!(seqs, [1, 2, 3]);
    let log = consenter::decisions::read_log(&cfg.decisions).unwrap();
    assert_eq!(log.len(), 3);

    // Power loss left a zero-filled tail on the WAL segment: cut on open.
    let segment = wal_segment(&cfg.wal);
    let len = std::fs::metadata(&segment).unwrap().len();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&segment, &bytes).unwrap();
    let (_, entries) = bft::FileWal::open(&cfg.wal).expect("a zero-filled tail is a torn tail");
    assert!(
        entries
            .iter()
            .filter(|e| matches!(e, bft::WalEntry::Decided(_)))
            .count()
            == 3
    );
    assert!(std::fs::metadata(&segment).unwrap().len() <= len + 4096);
    with_node(cfg.clone(), async |addr| {
        let reply = submit(&addr, b"four").await.expect("decided after restart");
        assert_eq!(reply.decided_seq, 4);
    });

    // A corrupted length field in the first record: the node refuses to start instead
    // of cutting every record after it.
    let mut bytes = std::fs::read(wal_segment(&cfg.wal)).unwrap();
    bytes[0] ^= 0x40;
    std::fs::write(wal_segment(&cfg.wal), &bytes).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), consenter::replica::run(cfg)).await
    });
    assert!(
        matches!(
            r,
            Ok(Err(consenter::Error::Engine(bft::Error::WalCorrupt { .. })))
        ),
        "{r:?}"
    );
}

#[test]
fn a_missing_wal_beside_a_decisions_log_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let peers = vec![testkit::net::loopback_addr()];
    let cfg = config(0, &peers, dir.path());
    with_node(cfg.clone(), async |addr| {
        assert_eq!(submit(&addr, b"x").await.unwrap().decided_seq, 1);
    });
    std::fs::remove_dir_all(&cfg.wal).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), consenter::replica::run(cfg)).await });
    match r {
        Ok(Err(consenter::Error::Config { reason })) => assert!(reason.contains("WAL"), "{reason}"),
        other => panic!("a replica without its WAL started: {other:?}"),
    }
}

/// Three of four replicas run (a quorum); replica 3's seeded key plays the attacker who
/// captured one of its envelopes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_and_forged_envelopes_end_their_stream_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..4).map(|_| testkit::net::loopback_addr()).collect();
    let nodes: Vec<_> = (0..3)
        .map(|id| tokio::spawn(consenter::replica::run(config(id, &peers, dir.path()))))
        .collect();
    let reply = submit(&peers[1], b"ordered by three").await.unwrap_or_else(|e| {
        let stopped: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].is_finished()).collect();
        panic!("not decided: {e}; replicas that stopped: {stopped:?}")
    });
    assert!(reply.accepted && reply.decided_seq >= 1);

    let (k3, keys) = keys_from_seed_prefix(SEEDS, 3, 4);
    let keys = keys.with_chain("node-test");
    let heartbeat = pb::BftMessage {
        instance: 0,
        kind: Some(pb::bft_message::Kind::Heartbeat(pb::BftHeartbeat {
            view: 0,
            last_decided: 0,
        })),
    };
    let payload = prost::Message::encode_to_vec(&heartbeat);
    let captured = seal_at(
        &k3,
        &keys,
        (3, 1),
        EnvelopeSeq { epoch: 5, counter: 1 },
        payload.clone(),
    );
    let first = consenter::transport::exchange_status(&peers[1], vec![captured.clone()]).await;
    assert_eq!(first.expect("the first copy is accepted").accepted, 1);
    for _ in 0..20 {
        let replay = consenter::transport::exchange_status(&peers[1], vec![captured.clone()]).await;
        assert_eq!(
            replay.unwrap_err().code(),
            tonic::Code::Aborted,
            "a replay was accepted"
        );
    }
    // The same keys on another chain: rejected, the stream ends with an error.
    let other_chain = keys.with_chain("another-chain");
    let foreign = seal_at(
        &k3,
        &other_chain,
        (3, 1),
        EnvelopeSeq { epoch: 9, counter: 1 },
        payload,
    );
    let r = consenter::transport::exchange_status(&peers[1], vec![foreign]).await;
    assert_eq!(r.unwrap_err().code(), tonic::Code::PermissionDenied);
    for n in &nodes {
        assert!(!n.is_finished());
    }
    let _ = Arc::new(nodes);
}

#[test]
fn byte_bounds_that_do_not_fit_the_message_limit_refuse_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..4).map(|_| testkit::net::loopback_addr()).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A new-view proof carries up to a quorum (3) of proposals of 30 MiB: over 64 MiB.
    let mut cfg = config(0, &peers, dir.path());
    cfg.engine.max_batch_bytes = 30 << 20;
    let r = rt.block_on(consenter::replica::run(cfg));
    assert!(matches!(r, Err(consenter::Error::Config { .. })), "{r:?}");
    // A state-transfer response of up to 80 MiB.
    let mut cfg = config(0, &peers, dir.path());
    cfg.engine.sync_max_bytes = 80 << 20;
    let r = rt.block_on(consenter::replica::run(cfg));
    assert!(matches!(r, Err(consenter::Error::Config { .. })), "{r:?}");
}
