//! Assemblers as processes on the ordering service of processes (4 parties × 2 shards,
//! docs/assembler.md): every party's `fabrx node assembler` serves the same chain of
//! blocks on its Deliver stream, each block verifying on its own (a quorum of consenter
//! signatures, its data hash, the chain), and the blocks hold every request sent exactly
//! once. An assembler killed while requests flow and restarted with the same argv
//! resumes from its ledger (its ready line reports the blocks it held) and catches up.
//! A Deliver stream with `to` ends after that block; in headers mode it carries no
//! requests. `fabrx blocks` prints every block verified with the tx ids of every request
//! once, and fails when the consenter keys it checks with are not the network's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::*;

use std::time::Duration;

use arma::{CertificateVerifier, ClusterKeys};
use tokio::time::{Instant, timeout};
use wire::pb;
use wire::pb::assembler_client::AssemblerClient;

/// Requests of the first phase.
const N: u64 = 300;
/// Requests sent while an assembler is down.
const M: u64 = 100;

/// An assembler's blocks read so far, each verified and chained.
struct Reader {
    party: u32,
    keys: ClusterKeys,
    blocks: Vec<pb::OrderedBlock>,
    last: Option<(u64, [u8; 32])>,
}

impl Reader {
    fn new(net: &Net, party: u32) -> Reader {
        Reader {
            party,
            keys: net.config.cluster_keys(),
            blocks: Vec::new(),
            last: None,
        }
    }

    fn requests(&self) -> Vec<Vec<u8>> {
        self.blocks.iter().flat_map(|b| b.requests.clone()).collect()
    }

    fn hashes(&self) -> Vec<Vec<u8>> {
        self.blocks
            .iter()
            .map(|b| b.header.as_ref().unwrap().previous_hash.clone())
            .collect()
    }

    /// Reads (reconnecting) from the next block until `done`; verifies each block.
    async fn read_until(&mut self, net: &Net, done: impl Fn(&Reader) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        let chain = self.keys.chain_id();
        let verifier = CertificateVerifier::new(self.keys.clone());
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "assembler {}: {} blocks, {} requests at the deadline\n{}",
                self.party,
                self.blocks.len(),
                self.requests().len(),
                net.logs()
            );
            let Ok(mut client) = AssemblerClient::connect(net.assembler(self.party)).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let request = pb::DeliverRequest {
                from: self.blocks.len() as u64,
                to: None,
                headers_only: false,
                to_end: false,
            };
            let Ok(stream) = client.deliver(request).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let mut stream = stream.into_inner();
            while !done(self) {
                let Ok(Ok(Some(block))) = timeout(Duration::from_secs(5), stream.message()).await else {
                    break;
                };
                let v = arma::verify_pb_block(&block, self.last, &chain, &verifier, &self.keys.members())
                    .unwrap_or_else(|e| panic!("assembler {}: block {}: {e}", self.party, self.blocks.len()));
                assert_eq!(v.header.number, self.blocks.len() as u64);
                assert!(v.with_requests);
                self.last = Some((v.header.number, v.hash));
                self.blocks.push(block);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assemblers_serve_one_verified_chain_of_every_request_and_resume_after_a_kill() {
    let t0 = Instant::now();
    let mut net = Net::generate();
    net.start_all();
    net.start_assemblers();
    println!("20 nodes ready after {:?}", t0.elapsed());

    // a. N requests: every assembler serves the same verified chain holding each once.
    let mut next = 0u64;
    let mut sent = requests(&mut next, N, None);
    submit_all(&net, &sent).await;
    let mut readers: Vec<Reader> = (1..=PARTIES).map(|p| Reader::new(&net, p)).collect();
    for r in &mut readers {
        r.read_until(&net, |r| r.requests().len() as u64 >= N).await;
    }
    println!(
        "a: {N} requests in every assembler's blocks after {:?}",
        t0.elapsed()
    );
    let reference = readers[0].hashes();
    for r in &readers {
        let n = r.blocks.len().min(reference.len());
        assert_eq!(
            r.hashes()[..n],
            reference[..n],
            "assembler {} serves another chain",
            r.party
        );
    }
    assert_ordered_once(&readers[0].requests(), &sent);

    // b. Assembler 2 is killed; M more requests; restarted, it resumes from its ledger.
    let t = Instant::now();
    let held = readers[1].blocks.len() as u64;
    net.proc("assembler-2").kill();
    let more = requests(&mut next, M, None);
    submit_all(&net, &more).await;
    sent.extend(more);
    readers[0]
        .read_until(&net, |r| r.requests().len() >= sent.len())
        .await;
    let p = net.proc("assembler-2");
    p.spawn();
    let ready = p.wait_ready("assembler");
    assert!(
        ready["height"].as_u64().unwrap() >= held,
        "the restarted assembler holds its blocks: {ready}"
    );
    readers[1]
        .read_until(&net, |r| r.requests().len() >= sent.len())
        .await;
    let n = readers[1].blocks.len().min(readers[0].blocks.len());
    assert_eq!(readers[1].hashes()[..n], readers[0].hashes()[..n]);
    assert_ordered_once(&readers[1].requests(), &sent);
    println!("b: the restarted assembler caught up after {:?}", t.elapsed());

    // c. A bounded stream ends after `to`; headers mode carries no requests.
    let mut client = AssemblerClient::connect(net.assembler(3)).await.unwrap();
    let mut stream = client
        .deliver(pb::DeliverRequest {
            from: 1,
            to: Some(3),
            headers_only: true,
            to_end: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(b) = timeout(DEADLINE, stream.message()).await.unwrap().unwrap() {
        assert!(b.requests.is_empty());
        got.push(b.header.unwrap().number);
    }
    assert_eq!(got, [1, 2, 3]);
    let bad = client
        .deliver(pb::DeliverRequest {
            from: 5,
            to: Some(4),
            headers_only: false,
            to_end: false,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);

    // d. `fabrx blocks`: every block verified, chained from 0, the tx ids of every request
    //    once; with the wrong consenter keys every block fails and the command fails.
    let out = blocks_cli(net.dir.path(), &["--party", "4", "--tx-ids"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert!(lines.len() >= readers[0].blocks.len(), "{} lines", lines.len());
    let mut tx_ids = std::collections::BTreeMap::<String, usize>::new();
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["number"], i as u64, "{l}");
        assert_eq!(l["verified"], true, "{l}");
        assert!(l["signers"].as_array().unwrap().len() >= 3, "{l}");
        for id in l["tx_ids"].as_array().unwrap() {
            *tx_ids.entry(id.as_str().unwrap().to_owned()).or_default() += 1;
        }
    }
    assert_eq!(tx_ids.len(), sent.len());
    assert!(tx_ids.values().all(|c| *c == 1), "every tx id once");
    let middle = blocks_cli(net.dir.path(), &["--party", "1", "--from", "2", "--to", "4"]);
    assert!(middle.status.success());
    let numbers: Vec<u64> = json_lines(&middle.stdout)
        .iter()
        .map(|l| l["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [2, 3, 4]);
    let wrong = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(netconfig::config_path(net.dir.path())).unwrap();
    let mut file: serde_json::Value = serde_json::from_str(&config).unwrap();
    let k1 = file["parties"][0]["consenter"]["public_key"].clone();
    let k2 = file["parties"][1]["consenter"]["public_key"].clone();
    let k3 = file["parties"][2]["consenter"]["public_key"].clone();
    file["parties"][0]["consenter"]["public_key"] = k2;
    file["parties"][1]["consenter"]["public_key"] = k3;
    file["parties"][2]["consenter"]["public_key"] = k1;
    let path = netconfig::config_path(wrong.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
    let refused = blocks_cli(wrong.path(), &["--party", "1", "--to", "2"]);
    assert!(!refused.status.success());
    let lines = json_lines(&refused.stdout);
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l["verified"] == false),
        "{lines:?}"
    );
    println!("total {:?}", t0.elapsed());
}

/// Runs `fabrx blocks --network DIR ARGS`.
fn blocks_cli(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin())
        .args(["blocks", "--json", "--network"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
