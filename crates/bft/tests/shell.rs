//! The tokio shell over the in-process loopback transport: four replicas with file
//! WALs and Ed25519 order the same requests in the same order; a replica stopped and
//! restarted from its WAL catches up.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
#![cfg(feature = "shell")]

use std::sync::Arc;
use std::time::Duration;

use bft::crypto::ed25519_keys;
use bft::shell::{Delivery, Loopback, LoopbackNet, ShellConfig, ShellDeps, spawn};
use bft::{Config, FileWal, NullApp, Replica, ReplicaId, Result, Verifier};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const N: u32 = 4;

fn config(id: ReplicaId) -> Config {
    let mut c = Config::new(id, N);
    c.max_batch_count = 10;
    c.batch_interval_ms = 5;
    c.request_timeout_ms = 2_000;
    c.heartbeat_interval_ms = 50;
    c.heartbeat_timeout_ms = 1_000;
    c.view_change_timeout_ms = 500;
    c
}

struct Node {
    tx_requests: mpsc::Sender<Vec<u8>>,
    rx_decisions: mpsc::Receiver<Delivery>,
    task: JoinHandle<Result<()>>,
}

fn start(
    id: ReplicaId,
    dir: &std::path::Path,
    endpoint: (Loopback, mpsc::Receiver<(ReplicaId, bft::Message)>),
    verifier: Arc<dyn Verifier>,
) -> Node {
    let (signers, _) = ed25519_keys(5, N);
    let signer = signers.into_iter().nth(id as usize).expect("signer");
    let (wal, entries) = FileWal::open(&dir.join(format!("r{id}.wal"))).expect("wal");
    let (replica, replayed) = Replica::restore(
        config(id),
        NullApp::default(),
        Box::new(signer),
        verifier,
        &entries,
    )
    .expect("restore");
    let (tx_requests, rx_requests) = mpsc::channel(1024);
    let (tx_decisions, rx_decisions) = mpsc::channel(1024);
    // Decisions the (in-memory) application had not applied are delivered again.
    for out in replayed {
        if let bft::Output::Deliver(d) = out {
            tx_decisions
                .try_send(Delivery::Decided(d))
                .expect("room for replayed decisions");
        }
    }
    let (transport, rx_net) = endpoint;
    let task = spawn(
        ShellConfig {
            me: id,
            tick: Duration::from_millis(5),
        },
        ShellDeps {
            replica,
            wal,
            transport,
            rx_net,
            rx_requests,
            tx_decisions,
            tx_status: None,
            tx_refused: None,
        },
    );
    Node {
        tx_requests,
        rx_decisions,
        task,
    }
}

/// Collects decisions until `count` requests were delivered (or the deadline passes).
async fn ordered(node: &mut Node, count: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while out.len() < count {
        match tokio::time::timeout_at(deadline, node.rx_decisions.recv()).await {
            Ok(Some(Delivery::Decided(d))) => out.extend(d.proposal.requests.iter().cloned()),
            Ok(Some(Delivery::Durable(done))) => {
                let _ = done.send(());
            }
            _ => panic!(
                "only {} of {count} requests ordered before the deadline",
                out.len()
            ),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_cluster_orders_and_a_restarted_replica_catches_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, verifier) = ed25519_keys(5, N);
    let verifier: Arc<dyn Verifier> = Arc::new(verifier);
    let net = LoopbackNet::new(N, 4096);
    let mut nodes: Vec<Node> = (0..N)
        .map(|i| start(i, dir.path(), net.attach(i), verifier.clone()))
        .collect();

    let requests: Vec<Vec<u8>> = (0..40).map(|i| format!("req-{i}").into_bytes()).collect();
    for r in &requests[..20] {
        for node in &nodes {
            node.tx_requests.send(r.clone()).await.expect("submit");
        }
    }
    let first = ordered(&mut nodes[0], 20).await;
    for node in nodes.iter_mut().skip(1) {
        assert_eq!(ordered(node, 20).await, first, "same order everywhere");
    }

    // Stop replica 3, order more requests without it, then restart it from its file
    // WAL: it must fetch the decisions it missed (state transfer) and agree.
    let stopped = nodes.pop().expect("node 3");
    stopped.task.abort();
    let _ = stopped.task.await;
    for r in &requests[20..] {
        for node in &nodes {
            node.tx_requests.send(r.clone()).await.expect("submit");
        }
    }
    let second = ordered(&mut nodes[0], 20).await;
    let mut restarted = start(3, dir.path(), net.attach(3), verifier.clone());
    // A restarted replica re-delivers from its WAL what the (NullApp) application
    // had not applied, then catches up: 40 requests in the same order.
    let all = ordered(&mut restarted, 40).await;
    assert_eq!(all[..20], first[..]);
    assert_eq!(all[20..], second[..]);
}
