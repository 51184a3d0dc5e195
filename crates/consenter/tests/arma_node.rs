#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Four Arma consenter nodes in process, on loopback (docs/consenter.md): BAFs that
//! batchers submit come out of every consenter's Decisions stream as the same headers
//! with a verifying proof; a complaint pair changes a term visible in the stream; a
//! consenter restarted from its data serves the same decisions and catches up; a stream
//! from the middle starts there; a garbage or badly signed request is refused with
//! INVALID_ARGUMENT at once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arma::{Baf, Complaint, ComplaintReason, SignedBatch};
use consenter::application::{ArmaConfig, encode_baf, encode_complaint};
use consenter::decision_wire::verify_pb_decision;
use consenter::decisions_service::StreamLimits;
use consenter::keys::{EngineVerifier, NodeKeys, keys_from_seed_prefix};
use consenter::metrics::Metrics;
use consenter::node::{Config as ArmaNodeConfig, Deps as ArmaNodeDeps, parse_batcher_keys};
use consenter::replica::{NodeLimits, ReplicaConfig};
use crypto::{Scheme, SigningKey, derive_signing_key};
use types::BatchId;
use wire::node::Node as _;
use wire::pb;
use wire::pb::bft_consensus_client::BftConsensusClient;
use wire::pb::consenter_client::ConsenterClient;

const SEEDS: &str = "arma-node-test-";
const CHAIN: &str = "arma-node-test";
const N: u32 = 4;
const SHARDS: u32 = 2;
const DEADLINE: Duration = Duration::from_secs(60);

fn batcher_key(party: u32, shard: u32) -> SigningKey {
    derive_signing_key(
        Scheme::Ed25519,
        &format!("arma-node-test/batcher/{party}/{shard}"),
    )
}

/// The batcher-keys file every node reads (the format `fabrx node consenter` takes).
fn batcher_keys_file() -> String {
    let mut text = String::from("# party shard scheme hex\n");
    for p in 1..=N {
        for s in 0..SHARDS {
            text.push_str(&format!(
                "{p} {s} ed25519 {}\n",
                batcher_key(p, s).public_key().to_hex()
            ));
        }
    }
    text
}

fn arma_config() -> ArmaConfig {
    let keys = parse_batcher_keys(&batcher_keys_file()).unwrap();
    ArmaConfig::new(arma::Parties::contiguous(N), SHARDS, 64, keys).unwrap()
}

fn config(id: u32, peers: &[String], dir: &Path) -> ArmaNodeConfig {
    let mut engine = bft::Config::new(id, peers.len() as u32);
    engine.batch_interval_ms = 5;
    engine.heartbeat_interval_ms = 50;
    ArmaNodeConfig {
        node: ReplicaConfig {
            engine,
            peers: peers.to_vec(),
            keys: NodeKeys::Seeded { prefix: SEEDS.into() },
            chain: CHAIN.into(),
            wal: dir.join(format!("c{id}/replica.wal")),
            decisions: dir.join(format!("c{id}/decisions")),
            tick: Duration::from_millis(5),
            limits: NodeLimits::default(),
            channel_capacity: 256,
        },
        arma: arma_config(),
        state: dir.join(format!("c{id}/state.json")),
        listen: None,
        streams: StreamLimits::default(),
        // Consenter 3 (the one restarted) replaces its snapshot at every idle moment,
        // the others every second: restarts from a snapshot and from genesis.
        snapshot_interval: if id == 3 {
            Duration::ZERO
        } else {
            Duration::from_secs(1)
        },
        retain_decisions: consenter::node::DEFAULT_RETAIN_DECISIONS,
        next_key_files: Vec::new(),
        reconfig: None,
    }
}

/// One consenter on its own runtime.
struct Node {
    rt: Option<tokio::runtime::Runtime>,
}

impl Node {
    /// Starts the node; retries while the previous incarnation still holds its logs.
    fn start(cfg: &ArmaNodeConfig) -> Node {
        Node::start_with(cfg, &ArmaNodeDeps::default())
    }

    /// [`Node::start`] with `deps`.
    fn start_with(cfg: &ArmaNodeConfig, deps: &ArmaNodeDeps) -> Node {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let rt = tokio::runtime::Runtime::new().unwrap();
            match rt.block_on(consenter::node::spawn(cfg.clone(), deps.clone())) {
                Ok(running) => {
                    rt.spawn(async move {
                        let mut running = running;
                        let e = running.failed().await;
                        panic!("consenter stopped: {e:?}");
                    });
                    return Node { rt: Some(rt) };
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("start: {e}; retrying");
                    rt.shutdown_timeout(Duration::from_secs(1));
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("consenter did not start: {e}"),
            }
        }
    }

    fn stop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn submit(addr: &str, request: Vec<u8>) -> Result<pb::BftSubmitResponse, tonic::Status> {
    let deadline = Instant::now() + DEADLINE;
    let mut client = loop {
        match BftConsensusClient::connect(format!("http://{addr}")).await {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => panic!("{addr} never came up: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    client
        .submit(pb::BftSubmitRequest { request })
        .await
        .map(tonic::Response::into_inner)
}

/// Submits every request to every address at once; all must be accepted.
async fn submit_all(addrs: &[String], requests: &[Vec<u8>]) {
    let mut tasks = tokio::task::JoinSet::new();
    for addr in addrs {
        for r in requests {
            let (addr, r) = (addr.clone(), r.clone());
            // A consenter that caught up by snapshot answers what it held UNAVAILABLE:
            // the request is submitted again, as a batcher would.
            tasks.spawn(async move {
                loop {
                    match submit(&addr, r.clone()).await {
                        Err(s) if s.code() == tonic::Code::Unavailable => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        reply => break (addr, reply),
                    }
                }
            });
        }
    }
    while let Some(res) = tasks.join_next().await {
        let (addr, reply) = res.unwrap();
        let reply = reply.unwrap_or_else(|e| panic!("submitted to {addr}: {e:?}"));
        assert!(reply.accepted);
    }
}

/// Reads `addr`'s Decisions stream from `from` until `done` holds for what arrived.
async fn decisions_until(addr: &str, from: u64, done: impl Fn(&[pb::Decision]) -> bool) -> Vec<pb::Decision> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut client = loop {
        match ConsenterClient::connect(format!("http://{addr}")).await {
            Ok(c) => break c,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("{addr} never came up: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let mut stream = client
        .decisions(pb::DecisionsRequest { from })
        .await
        .expect("stream")
        .into_inner();
    let mut got = Vec::new();
    while !done(&got) {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Ok(Ok(Some(d))) => got.push(d),
            other => panic!(
                "{addr}: stream ended or stalled after {} decisions: {other:?}",
                got.len()
            ),
        }
    }
    got
}

/// The first decision `addr` holds: 1 when a stream from 1 yields one, the number its
/// OUT_OF_RANGE answer names when it pruned or skipped the start, `None` when it is not
/// up or holds no decision yet.
async fn first_held(addr: &str) -> Option<u64> {
    let mut c = ConsenterClient::connect(format!("http://{addr}")).await.ok()?;
    let mut stream = c
        .decisions(pb::DecisionsRequest { from: 1 })
        .await
        .ok()?
        .into_inner();
    let reply = tokio::time::timeout(Duration::from_millis(500), stream.message())
        .await
        .ok()?;
    match reply {
        Ok(Some(_)) => Some(1),
        Ok(None) => None,
        Err(status) if status.code() == tonic::Code::OutOfRange => Some(
            status
                .message()
                .split_whitespace()
                .nth(5)
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| panic!("no first decision in {status:?}")),
        ),
        Err(_) => None,
    }
}

/// `addr`'s decisions from `from` (or from the first it holds, when later) through
/// `last`; `None` when it holds none of them (a snapshot past `last`).
async fn held_through(addr: &str, from: u64, last: u64) -> Option<Vec<pb::Decision>> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut start = from;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never reached {last}"
        );
        if start > last {
            return None;
        }
        let mut client = match ConsenterClient::connect(format!("http://{addr}")).await {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let mut stream = client
            .decisions(pb::DecisionsRequest { from: start })
            .await
            .expect("stream")
            .into_inner();
        let mut got: Vec<pb::Decision> = Vec::new();
        loop {
            if got.last().is_some_and(|d| d.number >= last) {
                got.retain(|d| d.number <= last);
                return Some(got);
            }
            match tokio::time::timeout_at(deadline, stream.message()).await {
                Ok(Ok(Some(d))) => got.push(d),
                Ok(Err(status)) if status.code() == tonic::Code::OutOfRange => {
                    // A (later) snapshot moved the start of its log: read from there.
                    start = first_held(addr).await.unwrap_or(start).max(start);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    break;
                }
                other => panic!(
                    "{addr}: stream ended or stalled after {} decisions: {other:?}",
                    got.len()
                ),
            }
        }
    }
}

/// The batch `(shard, primary, seq)` of term 0 and its BAFs by every party.
fn bafs(shard: u32, term: u64, primary: u32, seq: u64) -> Vec<Vec<u8>> {
    let requests: Vec<arma::Request> = vec![Arc::from(vec![shard as u8, seq as u8, 7].as_slice())];
    let batch = SignedBatch::sign(
        BatchId::new(shard, primary, seq),
        term,
        requests,
        &batcher_key(primary, shard),
    );
    (1..=N)
        .map(|p| encode_baf(&Baf::sign(&batch, p, &batcher_key(p, shard))))
        .collect()
}

fn complaint(shard: u32, term: u64, signer: u32) -> Vec<u8> {
    encode_complaint(&Complaint::sign(
        shard,
        term,
        signer,
        ComplaintReason::Censorship,
        &batcher_key(signer, shard),
    ))
}

fn headers(ds: &[pb::Decision]) -> Vec<pb::OrderedHeader> {
    ds.iter().flat_map(|d| d.headers.clone()).collect()
}

/// What every consenter must agree on for a decision (the certificate each holds may
/// have other signers).
fn content(d: &pb::Decision) -> (u64, Vec<pb::OrderedHeader>, Vec<pb::TermChange>, Vec<u8>, Vec<u8>) {
    (
        d.number,
        d.headers.clone(),
        d.terms.clone(),
        d.requests_root.clone(),
        d.metadata.clone(),
    )
}

/// Every decision verifies, numbers are consecutive from 1, headers chain from block 0.
fn check_chain(ds: &[pb::Decision]) {
    let keys = keys_from_seed_prefix(SEEDS, 0, N).1.with_chain(CHAIN);
    let chain = keys.chain_id();
    let verifier = EngineVerifier::new(keys);
    let mut previous = [0u8; 32];
    let mut number = 0;
    for (i, d) in ds.iter().enumerate() {
        assert_eq!(d.number, i as u64 + 1);
        let v = verify_pb_decision(d, &chain, &verifier, &bft::Members::contiguous(N)).expect("verifies");
        assert!(v.signers.len() >= 3, "a quorum signed");
        for h in &v.headers {
            assert_eq!(h.number, number);
            assert_eq!(h.previous_hash, previous);
            previous = h.hash();
            number += 1;
        }
        // A tampered, missing or added header or term change is not proven.
        if let Some(h) = d.headers.first() {
            let mut bad = d.clone();
            bad.headers[0].tx_count = h.tx_count + 1;
            assert!(verify_pb_decision(&bad, &chain, &verifier, &bft::Members::contiguous(N)).is_err());
            let mut bad = d.clone();
            bad.headers.pop();
            assert!(verify_pb_decision(&bad, &chain, &verifier, &bft::Members::contiguous(N)).is_err());
        }
        let mut bad = d.clone();
        bad.terms.push(pb::TermChange::default());
        assert!(verify_pb_decision(&bad, &chain, &verifier, &bft::Members::contiguous(N)).is_err());
        let mut bad = d.clone();
        bad.signatures.truncate(2);
        assert!(
            verify_pb_decision(&bad, &chain, &verifier, &bft::Members::contiguous(N)).is_err(),
            "below quorum"
        );
    }
}

#[test]
fn four_consenters_order_bafs_change_terms_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..N).map(|_| testkit::net::loopback_addr()).collect();
    let cfgs: Vec<ArmaNodeConfig> = (0..N).map(|i| config(i, &peers, dir.path())).collect();
    // Consenter 0 records its metrics.
    let registry = telemetry::Registry::detached("consenter");
    let deps = ArmaNodeDeps {
        registry: registry.clone(),
    };
    // The same series the node records into (a metric made again is the same one).
    let metrics = Metrics::register(&registry).unwrap();
    let mut nodes: Vec<Node> = cfgs
        .iter()
        .enumerate()
        .map(|(i, cfg)| {
            if i == 0 {
                Node::start_with(cfg, &deps)
            } else {
                Node::start(cfg)
            }
        })
        .collect();
    let client = tokio::runtime::Runtime::new().unwrap();

    // Garbage and a BAF whose primary signature is not the primary's: refused at once.
    client.block_on(async {
        let status = submit(&peers[0], b"not a consenter request".to_vec())
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        let requests: Vec<arma::Request> = vec![Arc::from([1u8, 2].as_slice())];
        let forged = SignedBatch::sign(BatchId::new(0, 1, 1), 0, requests, &batcher_key(2, 0));
        let baf = encode_baf(&Baf::sign(&forged, 2, &batcher_key(2, 0)));
        let status = submit(&peers[1], baf).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("primary"), "{status:?}");
    });

    // Shard 0's primary in term 0 is party 1, shard 1's is party 2; three batches each,
    // every party's BAF sent to every consenter.
    let mut requests = Vec::new();
    for seq in 1..=3 {
        requests.extend(bafs(0, 0, 1, seq));
        requests.extend(bafs(1, 0, 2, seq));
    }
    client.block_on(submit_all(&peers, &requests));
    let per_node: Vec<Vec<pb::Decision>> = client.block_on(async {
        let mut all = Vec::new();
        for addr in &peers {
            all.push(decisions_until(addr, 1, |ds| headers(ds).len() >= 6).await);
        }
        all
    });
    let shortest = per_node.iter().map(Vec::len).min().unwrap();
    for ds in &per_node {
        check_chain(ds);
        let a: Vec<_> = ds[..shortest].iter().map(content).collect();
        let b: Vec<_> = per_node[0][..shortest].iter().map(content).collect();
        assert_eq!(a, b, "every consenter serves the same decisions");
        let mut ordered: Vec<(u32, u64)> = headers(ds).iter().map(|h| (h.shard, h.seq)).collect();
        ordered.sort_unstable();
        assert_eq!(ordered, [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]);
    }

    // f+1 = 2 complaints against shard 1's term 0: term 1, visible in the stream.
    client.block_on(submit_all(&peers, &[complaint(1, 0, 3), complaint(1, 0, 4)]));
    let with_term = client.block_on(decisions_until(&peers[0], 1, |ds| {
        ds.iter().any(|d| !d.terms.is_empty())
    }));
    let changed = with_term.last().unwrap();
    assert_eq!(
        changed.terms,
        [pb::TermChange {
            shard: 1,
            term: 1,
            last_ordered_seq: 3
        }]
    );
    check_chain(&with_term);
    let term_decision = changed.number;
    // Consenter 0's metrics count what its stream served: every decision from 1 on,
    // the six headers and the term change.
    let metrics_deadline = Instant::now() + DEADLINE;
    while metrics.last_decision.get() < term_decision as i64 {
        assert!(Instant::now() < metrics_deadline, "last_decision stuck");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(metrics.decisions.get(), metrics.last_decision.get() as u64);
    assert!(metrics.headers.get() >= 6, "{:?}", metrics.headers.get());
    assert_eq!(metrics.term_changes.get(), 1);

    // Consenter 3 stops; the others order shard 0's batch 4; it restarts from its data.
    let before = client.block_on(decisions_until(&peers[3], 1, |ds| {
        ds.len() as u64 >= term_decision
    }));
    let snapshot_deadline = Instant::now() + DEADLINE;
    while consenter::arma_log::load_snapshot(&cfgs[3].state, SHARDS)
        .unwrap()
        .is_none_or(|s| s.applied < term_decision)
    {
        assert!(Instant::now() < snapshot_deadline, "no snapshot written");
        std::thread::sleep(Duration::from_millis(10));
    }
    nodes[3].stop();
    client.block_on(submit_all(&peers[..3], &bafs(0, 0, 1, 4)));
    let reference = client.block_on(decisions_until(&peers[0], 1, |ds| headers(ds).len() >= 7));
    nodes[3] = Node::start(&cfgs[3]);
    let after = client.block_on(decisions_until(&peers[3], 1, |ds| headers(ds).len() >= 7));
    assert_eq!(
        after[..before.len()].iter().map(content).collect::<Vec<_>>(),
        before.iter().map(content).collect::<Vec<_>>(),
        "the restarted consenter serves what it served before"
    );
    let n = reference.len().min(after.len());
    assert_eq!(
        after[..n].iter().map(content).collect::<Vec<_>>(),
        reference[..n].iter().map(content).collect::<Vec<_>>(),
        "and caught up with the others"
    );
    check_chain(&after);
    assert_eq!(headers(&after).last().map(|h| (h.shard, h.seq)), Some((0, 4)));

    // A stream from the middle starts at its decision.
    let middle = client.block_on(decisions_until(&peers[2], term_decision, |ds| !ds.is_empty()));
    assert_eq!(content(&middle[0]), content(changed));

    drop(client);
    for node in &mut nodes {
        node.stop();
    }
    refuses_a_log_that_differs_from_the_wal(&cfgs[3], &after);
}

/// A consenter that was down while the others checkpointed and pruned their decisions
/// catches up by their stable checkpoint's snapshot: its decisions log restarts after the
/// snapshot (a stream from before it is OUT_OF_RANGE), it serves what the others serve
/// from there on, and it orders new batches with them.
#[test]
fn a_consenter_behind_the_pruned_decisions_catches_up_by_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..N).map(|_| testkit::net::loopback_addr()).collect();
    let cfgs: Vec<ArmaNodeConfig> = (0..N)
        .map(|i| {
            let mut c = config(i, &peers, dir.path());
            c.node.engine.checkpoint_interval = 2;
            c.node.engine.retain_decisions = 0;
            // The others keep only a few messages for the absent consenter, so it cannot
            // decide from their backlog when it comes up.
            c.node.limits.peer_queue_messages = std::num::NonZeroUsize::new(4).unwrap();
            c
        })
        .collect();
    let mut nodes: Vec<Node> = cfgs[..3].iter().map(Node::start).collect();
    let client = tokio::runtime::Runtime::new().unwrap();
    // Consenter 3 never started: the others order six batches of shard 0, one at a time
    // (at least six decisions, so at least two checkpoints).
    for seq in 1..=6 {
        client.block_on(submit_all(&peers[..3], &bafs(0, 0, 1, seq)));
        client.block_on(decisions_until(&peers[0], 1, |ds| {
            headers(ds).len() as u64 >= seq
        }));
    }
    nodes.push(Node::start(&cfgs[3]));
    // It learns the others' height from their heartbeats and installs a snapshot: its
    // log then starts after decision 1.
    let deadline = Instant::now() + DEADLINE;
    let first = loop {
        let held = client.block_on(first_held(&peers[3]));
        if let Some(first) = held.filter(|&f| f > 1) {
            break first;
        }
        assert!(
            Instant::now() < deadline,
            "consenter 3 never installed a snapshot"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(first > 1, "the log restarts after the snapshot, at {first}");
    // New batches: consenter 3 orders them with the others and serves the same decisions.
    // With no retention at all it may fall behind a checkpoint again and install a later
    // snapshot (its log then restarts later still), so the comparison starts at what it
    // holds, and batches keep coming until it serves one with headers.
    let mut seq = 6;
    let caught_up = loop {
        seq += 1;
        assert!(seq <= 40, "consenter 3 never served a decision with headers");
        client.block_on(submit_all(&peers, &bafs(0, 0, 1, seq)));
        let reference = client.block_on(decisions_until(&peers[0], first, |ds| {
            headers(ds).iter().any(|h| h.seq == seq)
        }));
        let last = reference.last().map_or(0, |d| d.number);
        let Some(served) = client.block_on(held_through(&peers[3], first, last)) else {
            continue;
        };
        let from = served.first().map_or(last, |d| d.number);
        let expected: Vec<_> = reference.iter().filter(|d| d.number >= from).collect();
        assert_eq!(
            served.iter().map(content).collect::<Vec<_>>(),
            expected.iter().map(|d| content(d)).collect::<Vec<_>>(),
            "the consenter that installed a snapshot serves what the others serve"
        );
        if served.iter().any(|d| !d.headers.is_empty()) {
            break served;
        }
    };
    let keys = keys_from_seed_prefix(SEEDS, 0, N).1.with_chain(CHAIN);
    let chain = keys.chain_id();
    let verifier = EngineVerifier::new(keys);
    for d in &caught_up {
        verify_pb_decision(d, &chain, &verifier, &bft::Members::contiguous(N)).expect("a verifying decision");
    }
    drop(client);
    for node in &mut nodes {
        node.stop();
    }
}

/// A decisions log whose record differs from what the WAL's decision re-derives (a
/// header it served that the decisions do not give) makes the node refuse to start.
fn refuses_a_log_that_differs_from_the_wal(cfg: &ArmaNodeConfig, served: &[pb::Decision]) {
    let tampered = cfg.node.decisions.with_extension("tampered");
    {
        // The stopped node's writer thread lets go of its log once its channel closed.
        let deadline = Instant::now() + DEADLINE;
        let original = loop {
            match consenter::arma_log::ArmaLog::open(&cfg.node.decisions) {
                Ok(log) => break log,
                Err(e) if Instant::now() > deadline => panic!("log still held: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let reader = original.reader();
        let mut log = consenter::arma_log::ArmaLog::open(&tampered).unwrap();
        let first_with_headers = served.iter().find(|d| !d.headers.is_empty()).unwrap().number;
        for n in 1..=reader.last() {
            let mut d = reader.read(n).unwrap().unwrap();
            if n == first_with_headers {
                d.headers[0].tx_count += 1;
            }
            log.append(&d).unwrap();
        }
        log.sync().unwrap();
    }
    std::fs::remove_dir_all(&cfg.node.decisions).unwrap();
    std::fs::rename(&tampered, &cfg.node.decisions).unwrap();
    std::fs::remove_file(&cfg.state).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt
        .block_on(consenter::node::spawn(cfg.clone(), ArmaNodeDeps::default()))
        .err()
        .expect("refused");
    assert!(matches!(e, consenter::Error::Diverged { .. }), "{e}");
}
