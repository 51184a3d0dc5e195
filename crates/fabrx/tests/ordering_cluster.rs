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

mod envelope;
use envelope::envelope;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use arma::{CertificateVerifier, ClusterKeys, OrderedHeader, TermChange, verify_pb_decision};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use wire::pb;
use wire::pb::batcher_peer_client::BatcherPeerClient;
use wire::pb::bft_consensus_client::BftConsensusClient;
use wire::pb::consenter_client::ConsenterClient;
use wire::pb::router_client::RouterClient;

const PARTIES: u32 = 4;
const SHARDS: u32 = 2;
const F: usize = 1;
/// Requests of the first phase.
const N: u64 = 400;
/// Requests of each later phase.
const M: u64 = 60;
const READY: Duration = Duration::from_secs(120);
const DEADLINE: Duration = Duration::from_secs(120);

fn bin() -> String {
    std::env::var("FABRX_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_fabrx").to_owned())
}

/// A base port from which the `PARTIES · (3 + SHARDS)` ports of a generated network are
/// free right now, below the kernel's ephemeral port range: the nodes' own outgoing
/// connections take ephemeral ports, and one of them could otherwise take the port of a
/// node that has not bound it yet (routers start last).
fn free_base_port() -> u16 {
    let span = u16::try_from(PARTIES * (3 + SHARDS)).unwrap();
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000u16;
    let high = ephemeral.saturating_sub(span).max(low + 1);
    let mut x = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
    for _ in 0..200 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let base = low + u16::try_from((x >> 33) % u64::from(high - low)).unwrap();
        let all_free = (base..base + span).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if all_free {
            return base;
        }
    }
    panic!("no free port range");
}

/// One node process: its argv (to restart it), its log and, while it runs, the child.
struct Proc {
    name: String,
    argv: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    ready: Option<std::sync::mpsc::Receiver<String>>,
}

impl Proc {
    /// Starts `fabrx <argv>` with stderr to `log`; its ready line is awaited by
    /// [`Proc::wait_ready`].
    fn start(name: &str, argv: Vec<String>, dir: &Path) -> Proc {
        let mut p = Proc {
            name: name.to_owned(),
            argv,
            log: dir.join(format!("{name}.log")),
            child: None,
            ready: None,
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut child = Command::new(bin())
            .args(&self.argv)
            .env("RUST_LOG", "info")
            .env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        self.child = Some(child);
        self.ready = Some(rx);
    }

    /// Its ready line, parsed (panics with its log without one before the deadline).
    fn wait_ready(&mut self, role: &str) -> serde_json::Value {
        let rx = self.ready.take().unwrap();
        let line = rx
            .recv_timeout(READY)
            .unwrap_or_else(|_| panic!("{}: no ready line\n{}", self.name, self.log_text()));
        let ready: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(ready["ready"], role, "{}: {line}", self.name);
        ready
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn log_text(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The network: its processes, config and directory (fields drop in this order: the
/// processes are killed before the directory is removed).
struct Net {
    procs: BTreeMap<String, Proc>,
    config: netconfig::NetworkConfig,
    dir: tempfile::TempDir,
}

impl Net {
    fn generate() -> Net {
        let dir = tempfile::tempdir().unwrap();
        let base = free_base_port();
        let out = Command::new(bin())
            .args(["network", "generate", "--json", "--seed", "7"])
            .args(["--parties", &PARTIES.to_string(), "--shards", &SHARDS.to_string()])
            .args(["--base-port", &base.to_string(), "--dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // Small batches and quick censorship detection, so that the test runs in seconds.
        let path = netconfig::config_path(dir.path());
        let mut file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        file["batching"] = serde_json::json!({
            "max_batch_requests": 50,
            "batch_timeout_ms": 50,
            "forward_timeout_ms": 1000,
            "complain_timeout_ms": 3000,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
        let config = netconfig::NetworkConfig::load(&path).unwrap();
        Net {
            dir,
            config,
            procs: BTreeMap::new(),
        }
    }

    fn config_path(&self) -> String {
        netconfig::config_path(self.dir.path()).display().to_string()
    }

    fn start(&mut self, name: &str, mut argv: Vec<String>) {
        argv.extend(["--config".to_owned(), self.config_path()]);
        let p = Proc::start(name, argv, self.dir.path());
        self.procs.insert(name.to_owned(), p);
    }

    /// Starts every node, then waits for every ready line.
    fn start_all(&mut self) {
        let root = self.dir.path().join("data");
        let data = |name: &str| root.join(name).display().to_string();
        for p in 1..=PARTIES {
            let name = format!("consenter-{p}");
            let argv = vec![
                "node".into(),
                "consenter".into(),
                "--party".into(),
                p.to_string(),
                "--data-dir".into(),
                data(&name),
            ];
            self.start(&name, argv);
        }
        for p in 1..=PARTIES {
            for s in 0..SHARDS {
                let name = format!("batcher-{p}-{s}");
                let argv = vec![
                    "node".into(),
                    "batcher".into(),
                    "--party".into(),
                    p.to_string(),
                    "--shard".into(),
                    s.to_string(),
                    "--data-dir".into(),
                    data(&name),
                ];
                self.start(&name, argv);
            }
        }
        self.wait_all_ready();
        // Routers last: a router answers UNAVAILABLE until its batchers listen.
        for p in 1..=PARTIES {
            let argv = vec!["node".into(), "router".into(), "--party".into(), p.to_string()];
            self.start(&format!("router-{p}"), argv);
        }
        self.wait_all_ready();
    }

    /// Waits for the ready line of every node started and not yet ready.
    fn wait_all_ready(&mut self) {
        for (name, proc) in self.procs.iter_mut().filter(|(_, p)| p.ready.is_some()) {
            let role = name.split('-').next().unwrap();
            let ready = proc.wait_ready(role);
            if role == "batcher" {
                assert_eq!(ready["term"], 0, "{name}: {ready}");
            }
        }
    }

    fn proc(&mut self, name: &str) -> &mut Proc {
        self.procs.get_mut(name).unwrap()
    }

    fn logs(&self) -> String {
        self.procs
            .values()
            .map(|p| format!("--- {}\n{}", p.name, p.log_text()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn router(&self, party: u32) -> String {
        self.config.party(party).unwrap().router.uri()
    }

    fn consenter(&self, party: u32) -> String {
        self.config.party(party).unwrap().consenter.uri()
    }

    fn batcher(&self, party: u32, shard: u32) -> String {
        self.config.batcher(party, shard).unwrap().endpoint.uri()
    }
}

fn shard_of(request: &[u8]) -> u32 {
    types::digest::shard_of(request, SHARDS).unwrap()
}

/// `count` envelopes from `*next` on whose shard is `shard` (any shard when `None`).
fn requests(next: &mut u64, count: u64, shard: Option<u32>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while (out.len() as u64) < count {
        let e = envelope(*next);
        *next += 1;
        if shard.is_none_or(|s| shard_of(&e) == s) {
            out.push(e);
        }
    }
    out
}

/// Sends every request on one `Router.Submit` stream to `router`; the answer codes by
/// request index (a request without an answer before the deadline is missing).
async fn submit_stream(router: String, requests: Vec<Vec<u8>>) -> HashMap<u64, Code> {
    let mut answers = HashMap::new();
    let Ok(mut client) = RouterClient::connect(router).await else {
        return answers;
    };
    let (tx, rx) = mpsc::channel(64);
    let total = requests.len();
    tokio::spawn(async move {
        for (id, envelope) in requests.into_iter().enumerate() {
            let id = id as u64;
            if tx.send(pb::SubmitRequest { id, envelope }).await.is_err() {
                return;
            }
        }
        // Keeps the stream open until the answers are read.
        tx.closed().await;
    });
    let Ok(response) = client.submit(ReceiverStream::new(rx)).await else {
        return answers;
    };
    let mut stream = response.into_inner();
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers.len() < total {
        match timeout(
            deadline.saturating_duration_since(Instant::now()),
            stream.message(),
        )
        .await
        {
            Ok(Ok(Some(r))) => {
                answers.insert(r.id, Code::from(r.code as i32));
            }
            _ => break,
        }
    }
    answers
}

/// Sends every request to every party's router, as a client does, until each is admitted
/// by at least 2f+1 routers: answered OK, or ALREADY_EXISTS (that party's batcher holds it
/// already: it pulled the primary's batch before its router's copy arrived). A request
/// with fewer is sent again (after 200 ms) to the routers that did not admit it (a router
/// answers UNAVAILABLE while its batcher is down). Returns how many were sent again.
async fn submit_to(net: &Net, requests: &[Vec<u8>], need: usize) -> usize {
    let mut ok: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); requests.len()];
    let deadline = Instant::now() + DEADLINE;
    let mut resent = 0;
    let mut refused: BTreeMap<usize, BTreeMap<u32, Code>> = BTreeMap::new();
    let mut first: BTreeMap<(u32, String), usize> = BTreeMap::new();
    for round in 0.. {
        let streams: Vec<_> = (1..=PARTIES)
            .map(|p| {
                let todo: Vec<usize> = (0..requests.len())
                    .filter(|&i| ok[i].len() < need && !ok[i].contains(&p))
                    .collect();
                let batch = todo.iter().map(|&i| requests[i].clone()).collect();
                (p, todo, tokio::spawn(submit_stream(net.router(p), batch)))
            })
            .collect();
        for (p, todo, s) in streams {
            if round > 0 {
                resent += todo.len();
            }
            let answers = s.await.unwrap();
            if round == 0 && answers.len() < todo.len() {
                *first.entry((p, "no answer".into())).or_default() += todo.len() - answers.len();
            }
            for (id, code) in answers {
                // ALREADY_EXISTS: the party's batcher holds it already (docs/router.md),
                // e.g. in a batch it pulled from the primary before this router's copy.
                if code != Code::Ok && round == 0 {
                    *first.entry((p, format!("{code:?}"))).or_default() += 1;
                }
                if code == Code::Ok || code == Code::AlreadyExists {
                    ok[todo[id as usize]].insert(p);
                } else {
                    refused.entry(todo[id as usize]).or_default().insert(p, code);
                }
            }
        }
        let short = ok.iter().filter(|k| k.len() < need).count();
        if short == 0 {
            if !first.is_empty() {
                println!("  answers other than OK at first (router, code): {first:?}");
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{short} requests admitted by fewer than {need} routers: {:?}\n{}",
            ok.iter()
                .enumerate()
                .filter(|(_, k)| k.len() < need)
                .map(|(i, k)| (i, k, refused.get(&i)))
                .collect::<Vec<_>>(),
            net.logs()
        );
        sleep(Duration::from_millis(200)).await;
    }
    resent
}

/// [`submit_to`] until 2f+1 routers admitted each request.
async fn submit_all(net: &Net, requests: &[Vec<u8>]) -> usize {
    submit_to(net, requests, 2 * F + 1).await
}

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
            let Ok(channel) = wire::server::client_endpoint(self.uri.clone())
                .unwrap()
                .connect()
                .await
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
                let v = verify_pb_decision(&d, &self.keys.chain_id(), &verifier, PARTIES)
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

/// Every request sent is ordered exactly once.
fn assert_ordered_once(ordered: &[Vec<u8>], sent: &[Vec<u8>]) {
    let mut counts: HashMap<&[u8], usize> = HashMap::new();
    for r in ordered {
        *counts.entry(r.as_slice()).or_default() += 1;
    }
    for (i, r) in sent.iter().enumerate() {
        assert_eq!(
            counts.get(r.as_slice()).copied(),
            Some(1),
            "request {i} ordered once"
        );
    }
    assert_eq!(ordered.len(), sent.len(), "nothing else was ordered");
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
    let status = c.status(pb::BftStatusRequest {}).await.unwrap().into_inner();
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
            "party 9 is not in 1..=4",
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
        (&["consenter", "--party", "5"], "party 5 is not in 1..=4"),
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
