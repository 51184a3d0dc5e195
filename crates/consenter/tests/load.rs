//! The reported overload: many 1 MiB `Submit` calls at once to a fresh 4-replica
//! cluster with `fabrx node bft`'s default timers. Every call must end with its
//! request decided (and then in every replica's decisions log) or with an error
//! status; none may be answered `accepted` and then lost, and the cluster must keep
//! deciding instead of changing views without end.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use consenter::keys::NodeKeys;
use consenter::replica::{NodeLimits, ReplicaConfig};
use wire::pb;
use wire::pb::bft_consensus_client::BftConsensusClient;

/// `fabrx node bft`'s defaults.
fn config(id: u32, peers: &[String], dir: &Path) -> ReplicaConfig {
    let mut engine = bft::Config::new(id, peers.len() as u32);
    engine.batch_interval_ms = 20;
    engine.request_timeout_ms = 3000;
    engine.heartbeat_interval_ms = 200;
    engine.heartbeat_timeout_ms = 2000;
    engine.view_change_timeout_ms = 2000;
    ReplicaConfig {
        engine,
        peers: peers.to_vec(),
        keys: NodeKeys::Seeded {
            prefix: "load-".into(),
        },
        chain: "load".into(),
        wal: dir.join(format!("r{id}/replica.wal")),
        decisions: dir.join(format!("r{id}/decisions")),
        tick: Duration::from_millis(10),
        limits: NodeLimits::default(),
        channel_capacity: 4096,
    }
}

async fn status(addr: &str) -> Option<pb::BftStatusResponse> {
    let mut c = BftConsensusClient::connect(format!("http://{addr}")).await.ok()?;
    Some(c.status(pb::BftStatusRequest::default()).await.ok()?.into_inner())
}

/// Heavy (100 MiB through four in-process replicas, about two minutes):
/// `cargo test -p consenter --test load -- --ignored --nocapture`
/// (`LOAD_REQUESTS`, `LOAD_BYTES`, `LOAD_LOG=1` for the view-change log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load test, about two minutes"]
async fn many_large_submissions_are_decided_or_refused_never_lost() {
    let requests: usize = std::env::var("LOAD_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let size: usize = std::env::var("LOAD_BYTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20);
    if std::env::var("LOAD_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("warn,consenter=info,bft=info")
            .try_init();
    }
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..4).map(|_| testkit::net::loopback_addr()).collect();
    for id in 0..4 {
        tokio::spawn(consenter::replica::run(config(id, &peers, dir.path())));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for p in &peers {
        while status(p).await.is_none() {
            assert!(Instant::now() < deadline, "{p} never came up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let start = Instant::now();
    let calls: Vec<_> = (0..requests)
        .map(|i| {
            let addr = peers[i % 4].clone();
            let mut request = vec![(i % 251) as u8; size];
            request[..8].copy_from_slice(&(i as u64).to_le_bytes());
            tokio::spawn(async move {
                let mut c = BftConsensusClient::connect(format!("http://{addr}"))
                    .await
                    .unwrap();
                let r = c
                    .submit(pb::BftSubmitRequest {
                        request: request.clone(),
                    })
                    .await;
                (request, r.map(tonic::Response::into_inner))
            })
        })
        .collect();
    let mut accepted = HashSet::new();
    let mut refused = 0;
    for call in calls {
        let (request, r) = call.await.unwrap();
        match r {
            Ok(reply) => {
                assert!(reply.accepted);
                accepted.insert(request);
            }
            Err(s) => {
                assert!(
                    matches!(
                        s.code(),
                        tonic::Code::ResourceExhausted | tonic::Code::DeadlineExceeded
                    ),
                    "{s:?}"
                );
                refused += 1;
            }
        }
    }
    let elapsed = start.elapsed();
    // Every accepted request is in every replica's decisions log.
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in 0..4 {
        loop {
            let log = consenter::decisions::read_log(&dir.path().join(format!("r{id}/decisions"))).unwrap();
            let decided: HashSet<Vec<u8>> = log
                .iter()
                .flat_map(|l| l.requests.iter().map(|r| hex::decode(r).unwrap()))
                .collect();
            let missing = accepted.iter().filter(|r| !decided.contains(*r)).count();
            if missing == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {id} lacks {missing} accepted requests"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let views: Vec<u64> = {
        let mut v = Vec::new();
        for p in &peers {
            v.push(status(p).await.unwrap().view);
        }
        v
    };
    eprintln!(
        "load: {requests} x {size} B: {} decided, {refused} refused or timed out, {:.1} s, views {views:?}",
        accepted.len(),
        elapsed.as_secs_f64()
    );
    // How many are decided depends on the machine (four replicas share its cores);
    // the promises do not: something is decided, and nothing accepted is missing.
    assert!(!accepted.is_empty(), "nothing was decided");
}
