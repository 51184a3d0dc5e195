//! The ordering service as real processes on loopback (issue #11, "Done when"): `fabrx
//! network generate` for 4 parties and 2 shards, then 4 `fabrx node router`, 8 `fabrx node
//! batcher` and 4 `fabrx node consenter` processes, all configured from the one network
//! config. A client sends every request to every party's router; every consenter serves
//! the same verified, chained headers, which order every request exactly once (the batches
//! fetched from the batchers hold them). Then, one after the other:
//!
//! * shard 0's primary batcher is SIGKILLed: the shard moves to term 1 and its new primary
//!   (party 2) orders the requests sent after;
//! * a secondary batcher of shard 1 is SIGKILLed: shard 1 keeps ordering, in term 0;
//! * the consenters' leader is SIGKILLed: the others keep ordering (after a view change);
//!   restarted with the same argv it serves the same headers, caught up;
//! * the two killed batchers restart with the same argv: every router admits again, and
//!   each serves the batches of its shard ordered after (shard 0's former primary as a
//!   secondary of term 1).
//!
//! Every wait polls with a deadline; timings are printed (`--nocapture`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::*;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use arma::{CertificateVerifier, ClusterKeys, OrderedHeader, TermChange, verify_pb_decision};
use tokio::time::{Instant, sleep, timeout};
use wire::pb;
use wire::pb::batcher_peer_client::BatcherPeerClient;
use wire::pb::bft_consensus_client::BftConsensusClient;
use wire::pb::consenter_client::ConsenterClient;

/// One consenter's decisions, each verified, read so far.
struct Follower {
    party: u32,
    uri: String,
    keys: ClusterKeys,
    decisions: Vec<(u64, Vec<OrderedHeader>, Vec<TermChange>)>,
}

impl Follower {
    fn new(net: &Net, party: u32) -> Follower {
        Follower {
            party,
            uri: net.consenter(party),
            keys: net.config.cluster_keys(),
            decisions: Vec::new(),
        }
    }

    fn headers(&self) -> Vec<OrderedHeader> {
        self.decisions.iter().flat_map(|d| d.1.clone()).collect()
    }

    fn terms(&self) -> Vec<TermChange> {
        self.decisions.iter().flat_map(|d| d.2.clone()).collect()
    }

    fn tx_count(&self) -> u64 {
        self.headers().iter().map(|h| u64::from(h.tx_count)).sum()
    }

    /// Reads (reconnecting after errors) the decisions after those read until
    /// `done(self)` holds; panics at the deadline.
    async fn follow_until(&mut self, done: impl Fn(&Follower) -> bool, logs: impl Fn() -> String) {
        let deadline = Instant::now() + DEADLINE;
        let verifier = CertificateVerifier::new(self.keys.clone());
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "consenter {}: {} decisions, {} txs\n{}",
                self.party,
                self.decisions.len(),
                self.tx_count(),
                logs()
            );
            let Ok(channel) =
                wire::server::connect(&wire::server::client_endpoint(self.uri.clone()).unwrap()).await
            else {
                sleep(Duration::from_millis(100)).await;
                continue;
            };
            let from = self.decisions.len() as u64 + 1;
            let Ok(stream) = ConsenterClient::new(channel)
                .decisions(pb::DecisionsRequest { from })
                .await
            else {
                sleep(Duration::from_millis(100)).await;
                continue;
            };
            let mut stream = stream.into_inner();
            while !done(self) && Instant::now() < deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                let Ok(Ok(Some(d))) = timeout(left.min(Duration::from_secs(2)), stream.message()).await
                else {
                    break;
                };
                let v = verify_pb_decision(
                    &d,
                    &self.keys.chain_id(),
                    &verifier,
                    &bft::Members::contiguous(PARTIES),
                )
                .unwrap_or_else(|e| panic!("consenter {}: decision {}: {e}", self.party, d.number));
                assert!(v.signers.len() >= 3, "a quorum signed");
                assert_eq!(v.number, self.decisions.len() as u64 + 1, "consecutive");
                self.decisions.push((v.number, v.headers, v.terms));
            }
        }
    }
}

/// The header chain: numbers 0, 1, … and each previous hash the hash of the header
/// before; no batch id twice.
fn check_chain(headers: &[OrderedHeader]) {
    let mut ids = BTreeSet::new();
    for (i, h) in headers.iter().enumerate() {
        assert_eq!(h.number, i as u64);
        let previous = if i == 0 { [0u8; 32] } else { headers[i - 1].hash() };
        assert_eq!(h.previous_hash, previous, "header {i}");
        assert!(
            ids.insert((h.shard, h.primary, h.seq)),
            "batch {:?} ordered twice",
            (h.shard, h.primary, h.seq)
        );
    }
}

/// The requests of every header, fetched from the batchers of its shard (the primary
/// first); each batch's digest and tx count must equal its header's.
async fn fetch_requests(net: &Net, headers: &[OrderedHeader], dead: &BTreeSet<(u32, u32)>) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    for h in headers {
        let mut order = vec![h.primary];
        order.extend((1..=PARTIES).filter(|&p| p != h.primary));
        let mut got = None;
        let deadline = Instant::now() + DEADLINE;
        while got.is_none() {
            assert!(Instant::now() < deadline, "no batcher serves {:?}", h.batch_id());
            for &p in order.iter().filter(|&&p| !dead.contains(&(p, h.shard))) {
                let Ok(mut c) = BatcherPeerClient::connect(net.batcher(p, h.shard)).await else {
                    continue;
                };
                let request = pb::FetchRequest {
                    shard: h.shard,
                    primary: h.primary,
                    seq: h.seq,
                    digest: h.digest.to_vec(),
                };
                if let Ok(batch) = c.fetch(request).await {
                    got = Some(batch.into_inner());
                    break;
                }
            }
            if got.is_none() {
                sleep(Duration::from_millis(100)).await;
            }
        }
        let batch = got.unwrap();
        assert_eq!(types::digest::batch_digest(&batch.requests), h.digest);
        assert_eq!(batch.requests.len(), h.tx_count as usize);
        all.extend(batch.requests);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordering_service_of_processes_orders_every_request_through_batcher_and_consenter_failures() {
    let t0 = Instant::now();
    let mut net = Net::generate();
    net.start_all();
    println!("16 nodes ready after {:?}", t0.elapsed());

    // a. N requests through every router; every consenter serves the same verified chain.
    let t = Instant::now();
    let mut next = 0u64;
    let mut sent = requests(&mut next, N, None);
    let resent = submit_all(&net, &sent).await;
    println!(
        "a: {N} requests admitted by 2f+1 routers ({resent} sent again) after {:?}",
        t.elapsed()
    );
    let mut followers: Vec<Follower> = (1..=PARTIES).map(|p| Follower::new(&net, p)).collect();
    for f in &mut followers {
        f.follow_until(|f| f.tx_count() >= N, || net.logs()).await;
    }
    println!("a: {N} requests ordered after {:?}", t.elapsed());
    let reference = followers[0].headers();
    for f in &followers {
        let headers = f.headers();
        let n = headers.len().min(reference.len());
        assert_eq!(
            headers[..n],
            reference[..n],
            "consenter {} serves other headers",
            f.party
        );
        check_chain(&headers);
    }
    let ordered = fetch_requests(&net, &reference, &BTreeSet::new()).await;
    assert_ordered_once(&ordered, &sent);
    assert!(
        followers[0].terms().is_empty(),
        "no term change: {:?}",
        followers[0].terms()
    );
    println!(
        "a: {} headers ({} of shard 0), {} batches fetched, after {:?}",
        reference.len(),
        reference.iter().filter(|h| h.shard == 0).count(),
        reference.len(),
        t.elapsed()
    );

    // b. Shard 0's primary (party 1 in term 0) dies: term 1, primary party 2.
    let t = Instant::now();
    let mut dead = BTreeSet::new();
    net.proc("batcher-1-0").kill();
    dead.insert((1, 0));
    let batch = requests(&mut next, M, Some(0));
    submit_all(&net, &batch).await;
    sent.extend(batch.iter().cloned());
    let total = N + M;
    followers[1]
        .follow_until(|f| f.tx_count() >= total, || net.logs())
        .await;
    let terms = followers[1].terms();
    assert!(
        terms.iter().any(|c| c.shard == 0 && c.term == 1),
        "a term change of shard 0: {terms:?}"
    );
    assert!(terms.iter().all(|c| c.shard == 0), "{terms:?}");
    let headers = followers[1].headers();
    let new = &headers[reference.len()..];
    assert!(!new.is_empty());
    for h in new {
        assert_eq!((h.shard, h.term, h.primary), (0, 1, 2), "{h:?}");
    }
    assert_ordered_once(&fetch_requests(&net, new, &dead).await, &batch);
    println!(
        "b: term 1 of shard 0, {} headers of party 2 order {M} requests, after {:?}",
        new.len(),
        t.elapsed()
    );

    // c. A secondary of shard 1 (party 3; the primary is party 2) dies: no term change.
    let t = Instant::now();
    net.proc("batcher-3-1").kill();
    dead.insert((3, 1));
    let before = headers.len();
    let batch = requests(&mut next, M, Some(1));
    submit_all(&net, &batch).await;
    sent.extend(batch.iter().cloned());
    let total = total + M;
    followers[1]
        .follow_until(|f| f.tx_count() >= total, || net.logs())
        .await;
    let headers = followers[1].headers();
    let new = &headers[before..];
    for h in new {
        assert_eq!((h.shard, h.term, h.primary), (1, 0, 2), "{h:?}");
    }
    assert!(followers[1].terms().iter().all(|c| c.shard == 0));
    assert_ordered_once(&fetch_requests(&net, new, &dead).await, &batch);
    println!(
        "c: shard 1 ordered {M} requests in term 0 after {:?}",
        t.elapsed()
    );

    // d. The consenters' current leader dies; the others order on (after a view change);
    // restarted with the same argv, it serves the same headers, caught up.
    let t = Instant::now();
    let victim = leader(&net).await;
    let name = format!("consenter-{victim}");
    net.proc(&name).kill();
    let v = (victim - 1) as usize;
    let before = headers.len();
    let batch = requests(&mut next, M, None);
    submit_all(&net, &batch).await;
    sent.extend(batch.iter().cloned());
    let total = total + M;
    for (i, f) in followers.iter_mut().enumerate().filter(|(i, _)| *i != v) {
        f.follow_until(|f| f.tx_count() >= total, || net.logs()).await;
        println!("d: consenter {} ordered them after {:?}", i + 1, t.elapsed());
    }
    let alive = if v == 0 { 1 } else { 0 };
    let headers = followers[alive].headers();
    check_chain(&headers);
    assert_ordered_once(&fetch_requests(&net, &headers[before..], &dead).await, &batch);
    println!(
        "d: leader consenter {victim} killed, {M} requests ordered by the 3 others after {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    {
        let p = net.proc(&name);
        p.spawn();
        p.wait_ready("consenter");
    }
    followers[v]
        .follow_until(|f| f.tx_count() >= total, || net.logs())
        .await;
    let caught_up = followers[v].headers();
    assert!(caught_up.len() >= headers.len());
    check_chain(&caught_up);
    for f in &followers {
        let h = f.headers();
        let n = h.len().min(caught_up.len());
        assert_eq!(h[..n], caught_up[..n], "consenter {}", f.party);
    }
    let all = fetch_requests(&net, &caught_up, &dead).await;
    assert_ordered_once(&all, &sent);
    println!(
        "d: restarted consenter {victim} caught up ({} headers) after {:?}",
        caught_up.len(),
        t.elapsed(),
    );

    // e. The killed batchers restart with the same argv: every router admits again, and
    // each restarted batcher serves the batches of its shard ordered after its restart
    // (shard 0's former primary is now a secondary of term 1).
    let t = Instant::now();
    for name in ["batcher-1-0", "batcher-3-1"] {
        let p = net.proc(name);
        p.spawn();
        p.wait_ready("batcher");
    }
    let restarted = dead.clone();
    dead.clear();
    let before = caught_up.len();
    let batch = requests(&mut next, M, None);
    submit_to(&net, &batch, PARTIES as usize).await;
    sent.extend(batch.iter().cloned());
    let total = total + M;
    followers[0]
        .follow_until(|f| f.tx_count() >= total, || net.logs())
        .await;
    let headers = followers[0].headers();
    check_chain(&headers);
    let new = &headers[before..];
    for h in new {
        assert_eq!((h.term, h.primary), (u64::from(h.shard == 0), 2), "{h:?}");
    }
    assert_ordered_once(&fetch_requests(&net, new, &dead).await, &batch);
    for &(party, shard) in &restarted {
        let mine: Vec<OrderedHeader> = new.iter().filter(|h| h.shard == shard).copied().collect();
        assert!(!mine.is_empty(), "shard {shard} ordered some");
        let others: BTreeSet<(u32, u32)> = (1..=PARTIES)
            .filter(|&p| p != party)
            .map(|p| (p, shard))
            .collect();
        fetch_requests(&net, &mine, &others).await;
    }
    let all = fetch_requests(&net, &headers, &dead).await;
    assert_ordered_once(&all, &sent);
    println!(
        "e: restarted batchers admit and serve {M} more requests after {:?}; \
         {} headers, {} requests; total {:?}",
        t.elapsed(),
        headers.len(),
        sent.len(),
        t0.elapsed()
    );
}

/// The party of the consenters' current leader, as consenter 1's `Status` reports it.
async fn leader(net: &Net) -> u32 {
    let mut c = BftConsensusClient::connect(net.consenter(1)).await.unwrap();
    let status = c
        .status(pb::BftStatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    status.leader + 1
}

/// Sends SIGTERM to `p` and waits for its exit status.
fn terminate(p: &mut Proc) -> std::process::ExitStatus {
    let mut child = p.child.take().unwrap();
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + READY;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: no exit after SIGTERM\n{}",
            p.name,
            p.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn node_batcher_and_node_consenter_start_from_the_config_refuse_bad_parties_and_keys_and_stop_on_sigterm() {
    let mut net = Net::generate();
    let config = net.config_path();
    let data = net.dir.path().join("data");
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(["node"])
            .args(args)
            .args(["--config", &config, "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.join("refused"))
            .env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0")
            .output()
            .unwrap()
    };
    let other_key = netconfig::key_file_path(net.dir.path(), netconfig::Node::Batcher { party: 2, shard: 0 })
        .unwrap()
        .display()
        .to_string();
    let cases: [(&[&str], &str); 5] = [
        (
            &["batcher", "--party", "9", "--shard", "0"],
            "party 9 is not in [1, 2, 3, 4]",
        ),
        (&["batcher", "--party", "1", "--shard", "2"], "shard 2"),
        (
            &[
                "batcher",
                "--party",
                "1",
                "--shard",
                "0",
                "--key-file",
                &other_key,
            ],
            "does not hold the public key",
        ),
        (&["consenter", "--party", "5"], "party 5 is not in [1, 2, 3, 4]"),
        (
            &[
                "consenter",
                "--party",
                "1",
                "--key-file",
                &other_key,
                "--peer-keys",
                &other_key,
            ],
            "party 1 consenter",
        ),
    ];
    for (args, reason) in cases {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: no ready line");
    }
    // The flag mode's arguments are refused with --config.
    let out = run(&["consenter", "--party", "1", "--id", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));

    // Alone, each starts, prints its ready line and exits 0 on SIGTERM.
    let b = data.join("b").display().to_string();
    let c = data.join("c").display().to_string();
    net.start(
        "b",
        [
            "node",
            "batcher",
            "--party",
            "2",
            "--shard",
            "1",
            "--data-dir",
            &b,
        ]
        .map(String::from)
        .to_vec(),
    );
    net.start(
        "c",
        ["node", "consenter", "--party", "3", "--data-dir", &c]
            .map(String::from)
            .to_vec(),
    );
    let ready = net.proc("b").wait_ready("batcher");
    assert_eq!(
        (
            ready["party"].as_u64(),
            ready["shard"].as_u64(),
            ready["term"].as_u64()
        ),
        (Some(2), Some(1), Some(0))
    );
    let endpoint = net.config.batcher(2, 1).unwrap().endpoint.to_string();
    assert_eq!(ready["listen"], endpoint.as_str());
    let ready = net.proc("c").wait_ready("consenter");
    assert_eq!(
        (ready["party"].as_u64(), ready["id"].as_u64()),
        (Some(3), Some(2))
    );
    let endpoint = net.config.party(3).unwrap().consenter.to_string();
    assert_eq!(ready["listen"], endpoint.as_str());
    for name in ["b", "c"] {
        let p = net.proc(name);
        let status = terminate(p);
        assert!(status.success(), "{name}: {status:?}\n{}", p.log_text());
    }
}
