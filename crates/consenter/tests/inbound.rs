//! The inbound budget per sender: a peer that floods verified messages while the
//! replica does not keep up is slowed down at its own budget; another peer's messages
//! still get through.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::sync::Arc;
use std::time::Duration;

use bft::shell::ShellStatus;
use consenter::keys::{EnvelopeSeq, keys_from_seed_prefix, seal_at};
use consenter::service::{ConsensusService, ServiceDeps, ServiceLimits};
use consenter::submit::{SubmitLimits, Waiters};
use consenter::transport::Stats;
use tokio::sync::{mpsc, watch};
use wire::pb;

fn forward(size: usize) -> Vec<u8> {
    prost::Message::encode_to_vec(&pb::BftMessage {
        instance: 0,
        kind: Some(pb::bft_message::Kind::Forward(pb::BftForward {
            request: vec![7; size],
        })),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_peer_is_held_at_its_own_budget() {
    let (_, keys) = keys_from_seed_prefix("inbound-", 0, 4);
    let (tx_inbound, mut rx_inbound) = mpsc::channel(1024);
    let (tx_requests, _rx_requests) = mpsc::channel(16);
    let (_tx_status, rx_status) = watch::channel(ShellStatus::default());
    let service = ConsensusService::new(ServiceDeps {
        me: 0,
        peers: Arc::new(consenter::peers::Peers::new(keys.clone(), Vec::new())),
        tx_inbound,
        tx_requests,
        rx_status,
        stats: Arc::new(Stats::default()),
        waiters: Waiters::new(SubmitLimits {
            max_bytes: 1 << 20,
            max_waiting: 10,
        }),
        limits: ServiceLimits {
            max_request_bytes: 1 << 20,
            submit_timeout: Duration::from_secs(1),
            inbound_bytes_per_peer: std::num::NonZeroUsize::new(4 << 20).unwrap(),
        },
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let envelopes = |from: u32, count: u64| -> Vec<pb::BftEnvelope> {
        let (k, _) = keys_from_seed_prefix("inbound-", from, 4);
        (1..=count)
            .map(|c| {
                seal_at(
                    &k,
                    &keys,
                    (from, 0),
                    EnvelopeSeq { epoch: 1, counter: c },
                    forward(1 << 20),
                )
            })
            .collect()
    };
    // Replica 3 sends 20 MiB; nobody consumes the replica's queue.
    let flood = envelopes(3, 20);
    let addr3 = addr.clone();
    let flooding = tokio::spawn(async move { consenter::transport::exchange_status(&addr3, flood).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Replica 1 still gets its two messages in.
    let r1 = tokio::time::timeout(
        Duration::from_secs(10),
        consenter::transport::exchange_status(&addr, envelopes(1, 2)),
    )
    .await
    .expect("replica 1 is not held behind replica 3");
    assert_eq!(r1.unwrap().accepted, 2);
    // Nothing was consumed: replica 3 holds at most its 4 MiB budget (three 1 MiB
    // messages with their overhead) in the queue, not its 20 MiB.
    let queued = rx_inbound.len();
    assert!(queued <= 3 + 2, "{queued} messages queued");
    let mut from = [0usize; 4];
    while let Ok(Some((f, _, _permit))) =
        tokio::time::timeout(Duration::from_millis(200), rx_inbound.recv()).await
    {
        from[f as usize] += 1;
        // The permits are dropped here, as the node does once the replica took it.
        if from.iter().sum::<usize>() >= 64 {
            break;
        }
    }
    assert_eq!(from[1], 2);
    // Replica 3 had at most its 4 MiB budget (three 1 MiB messages plus overhead) in
    // the queue before it was read; then more came as permits were released.
    assert!(from[3] >= 3, "{from:?}");
    assert!(!flooding.is_finished() || from[3] == 20, "{from:?}");
}
