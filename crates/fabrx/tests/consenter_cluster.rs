//! Four real `fabrx node consenter` processes on loopback (docs/consenter.md): each
//! prints its ready line; BAFs submitted by the batchers come out of the Decisions
//! streams as verified headers; a consenter SIGKILLed and restarted with the same argv
//! serves the same decisions again and catches up. Every wait polls with a deadline.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use arma::{Baf, SignedBatch};
use consenter::application::encode_baf;
use consenter::decision_wire::verify_pb_decision;
use consenter::keys::{EngineVerifier, keys_from_seed_prefix};
use crypto::{Scheme, SigningKey, derive_signing_key};
use tokio::time::Instant;
use types::BatchId;
use wire::pb;
use wire::pb::bft_consensus_client::BftConsensusClient;
use wire::pb::consenter_client::ConsenterClient;

const N: u32 = 4;
const SHARDS: u32 = 1;
const SEEDS: &str = "consenter-cluster-test-";
const CHAIN: &str = "consenter-cluster-test";
const DEADLINE: Duration = Duration::from_secs(90);

fn batcher_key(party: u32, shard: u32) -> SigningKey {
    derive_signing_key(
        Scheme::Ed25519,
        &format!("consenter-cluster-test/batcher/{party}/{shard}"),
    )
}

/// The children; killed when dropped (also on panic).
struct Cluster {
    dir: tempfile::TempDir,
    peers: Vec<String>,
    children: Vec<Option<Child>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Cluster {
    fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut keys = String::from("# party shard hex\n");
        for p in 1..=N {
            for s in 0..SHARDS {
                keys.push_str(&format!("{p} {s} {}\n", batcher_key(p, s).public_key().to_hex()));
            }
        }
        std::fs::write(dir.path().join("batcher-keys.txt"), keys).unwrap();
        let listeners: Vec<_> = (0..N)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let peers = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        Cluster {
            dir,
            peers,
            children: (0..N).map(|_| None).collect(),
        }
    }

    /// Starts consenter `i` and waits for its ready line.
    fn start(&mut self, i: u32) {
        let d = self.dir.path();
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(d.join(format!("consenter-{i}.log")))
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_fabrx"))
            .args(["node", "consenter", "--id", &i.to_string(), "--peers"])
            .arg(self.peers.join(","))
            .arg("--data-dir")
            .arg(d.join(format!("data-{i}")))
            .args([
                "--seed-prefix",
                SEEDS,
                "--chain-id",
                CHAIN,
                "--parties",
                "4",
                "--shards",
                "1",
            ])
            .arg("--batcher-keys")
            .arg(d.join("batcher-keys.txt"))
            .args(["--batch-interval-ms", "5", "--heartbeat-interval-ms", "50"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(DEADLINE).expect("a ready line");
        let ready: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(ready["event"], "ready", "{line}");
        assert_eq!(ready["role"], "consenter");
        assert_eq!(ready["party"], i + 1);
        assert_eq!(ready["listen"], self.peers[i as usize].as_str());
        self.children[i as usize] = Some(child);
    }

    fn kill(&mut self, i: u32) {
        let mut child = self.children[i as usize].take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn log(&self, i: u32) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("consenter-{i}.log"))).unwrap_or_default()
    }
}

/// Every party's BAF of batch `seq` of shard 0 (term 0, primary party 1).
fn bafs(seq: u64) -> Vec<Vec<u8>> {
    let requests: Vec<arma::Request> = vec![Arc::from(vec![seq as u8, 1].as_slice())];
    let batch = SignedBatch::sign(BatchId::new(0, 1, seq), 0, requests, &batcher_key(1, 0));
    (1..=N)
        .map(|p| encode_baf(&Baf::sign(&batch, p, &batcher_key(p, 0))))
        .collect()
}

async fn submit_all(addrs: &[String], requests: Vec<Vec<u8>>) {
    let mut tasks = tokio::task::JoinSet::new();
    for addr in addrs {
        for r in &requests {
            let (addr, request) = (format!("http://{addr}"), r.clone());
            tasks.spawn(async move {
                let mut c = BftConsensusClient::connect(addr).await.unwrap();
                c.submit(pb::BftSubmitRequest { request })
                    .await
                    .unwrap()
                    .into_inner()
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        assert!(r.unwrap().accepted);
    }
}

/// Decisions of `addr` from 1 until they hold `headers` headers.
async fn decisions(addr: &str, headers: usize) -> Vec<pb::Decision> {
    let deadline = Instant::now() + DEADLINE;
    let mut c = ConsenterClient::connect(format!("http://{addr}")).await.unwrap();
    let mut s = c
        .decisions(pb::DecisionsRequest { from: 1 })
        .await
        .unwrap()
        .into_inner();
    let mut got: Vec<pb::Decision> = Vec::new();
    while got.iter().map(|d| d.headers.len()).sum::<usize>() < headers {
        match tokio::time::timeout_at(deadline, s.message()).await {
            Ok(Ok(Some(d))) => got.push(d),
            other => panic!("{addr}: {other:?} after {} decisions", got.len()),
        }
    }
    got
}

fn content(ds: &[pb::Decision]) -> Vec<(u64, Vec<pb::OrderedHeader>, Vec<u8>)> {
    ds.iter()
        .map(|d| (d.number, d.headers.clone(), d.metadata.clone()))
        .collect()
}

fn verify_all(ds: &[pb::Decision]) {
    let keys = keys_from_seed_prefix(SEEDS, 0, N).1.with_chain(CHAIN);
    let verifier = EngineVerifier::new(keys.clone());
    for d in ds {
        verify_pb_decision(d, &keys.chain_id(), &verifier, &bft::Members::contiguous(N)).expect("verifies");
    }
}

#[test]
fn consenter_processes_order_bafs_and_a_killed_one_serves_the_same_decisions() {
    let mut cluster = Cluster::new();
    for i in 0..N {
        cluster.start(i);
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let peers = cluster.peers.clone();
    let mut requests = bafs(1);
    requests.extend(bafs(2));
    rt.block_on(submit_all(&peers, requests));
    let before = rt.block_on(decisions(&peers[2], 2));
    verify_all(&before);

    cluster.kill(2);
    let others = [peers[0].clone(), peers[1].clone(), peers[3].clone()];
    rt.block_on(submit_all(&others, bafs(3)));
    let reference = rt.block_on(decisions(&peers[0], 3));
    cluster.start(2);
    let after = rt.block_on(decisions(&peers[2], 3));
    verify_all(&after);
    assert_eq!(
        content(&after[..before.len()]),
        content(&before),
        "served again after SIGKILL: {}",
        cluster.log(2)
    );
    let n = after.len().min(reference.len());
    assert_eq!(content(&after[..n]), content(&reference[..n]));
    let seqs: Vec<u64> = after
        .iter()
        .flat_map(|d| d.headers.iter().map(|h| h.seq))
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
}
