#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Batcher nodes over real gRPC on loopback: four batchers of one shard and a scripted
//! consenter (tests/scripted). No sleep synchronises anything: every wait polls a
//! condition with a deadline.

mod common;
mod scripted;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use batcher::Config;
use batcher::node::{Config as NodeConfig, Deps, Handle, ShellConfig, StatsSnapshot};
use scripted::Scripted;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use types::PartyId;
use wire::node::Node as _;
use wire::pb;
use wire::pb::batcher_intake_client::BatcherIntakeClient;
use wire::pb::batcher_peer_client::BatcherPeerClient;

const PARTIES: u32 = 4;
const DEADLINE: Duration = Duration::from_secs(60);

fn core_config(party: PartyId) -> Config {
    let mut c = common::config(party, 1);
    c.max_request_bytes = NonZeroUsize::new(200).unwrap();
    c.max_batch_requests = NonZeroU32::new(4).unwrap();
    c.max_batch_bytes = NonZeroU64::new(1000).unwrap();
    c.batch_timeout_ms = 20;
    c.window = NonZeroU32::new(2).unwrap();
    c.max_unordered_batches = NonZeroU32::new(4).unwrap();
    c.mempool_max_requests = NonZeroUsize::new(1000).unwrap();
    c.mempool_max_bytes = NonZeroU64::new(1 << 20).unwrap();
    c.forward_timeout_ms = 2_000;
    c.complain_timeout_ms = 600_000;
    c
}

fn shell() -> ShellConfig {
    ShellConfig {
        backoff_max: Duration::from_millis(500),
        ..ShellConfig::default()
    }
}

/// Polls `cond` every 10 ms until it holds; fails naming `what` after `DEADLINE`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A request of the test workload (distinct per `i`).
fn request(i: u32) -> Vec<u8> {
    common::req(i, 40).to_vec()
}

/// A router-side intake stream to one batcher.
struct Intake {
    tx: mpsc::Sender<pb::IntakeBatch>,
    rx: tonic::Streaming<pb::IntakeAnswers>,
    next_id: u64,
}

impl Intake {
    async fn open(addr: SocketAddr) -> Intake {
        let mut client = BatcherIntakeClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(1024);
        let rx = client.intake(ReceiverStream::new(rx)).await.unwrap().into_inner();
        Intake { tx, rx, next_id: 0 }
    }

    /// Sends the requests (in messages of up to three) and returns the answers in
    /// request order.
    async fn submit(&mut self, requests: &[Vec<u8>]) -> Vec<pb::IntakeResponse> {
        let first = self.next_id;
        for chunk in requests.chunks(3) {
            let mut batch = pb::IntakeBatch::default();
            for r in chunk {
                batch.requests.push(pb::IntakeRequest {
                    id: self.next_id,
                    request: r.clone(),
                });
                self.next_id += 1;
            }
            self.tx.send(batch).await.unwrap();
        }
        let mut answers = BTreeMap::new();
        while answers.len() < requests.len() {
            let message = tokio::time::timeout(DEADLINE, self.rx.message())
                .await
                .expect("an answer in time")
                .unwrap()
                .expect("the stream stays open");
            for a in message.answers {
                answers.insert(a.id, a);
            }
        }
        assert_eq!(answers.keys().next().copied(), Some(first));
        answers.into_values().collect()
    }
}

struct Net {
    tweak: fn(&mut Config),
    content: batcher::node::RequestContent,
    dir: tempfile::TempDir,
    consenter: Arc<Scripted>,
    consenter_uri: String,
    addrs: BTreeMap<PartyId, SocketAddr>,
    nodes: BTreeMap<PartyId, Handle>,
    /// Each running node's metrics registry (a fresh one at each start).
    registries: BTreeMap<PartyId, telemetry::Registry>,
}

impl Net {
    async fn start() -> Net {
        Net::start_with(|_| {}).await
    }

    /// A network whose nodes check pulled requests as client envelopes, as
    /// `fabrx node batcher` does.
    async fn start_checking() -> Net {
        Net::start_content(
            |_| {},
            batcher::node::RequestContent::Envelopes(Default::default()),
        )
        .await
    }

    /// A network whose core configs are changed by `tweak`.
    async fn start_with(tweak: fn(&mut Config)) -> Net {
        Net::start_content(tweak, batcher::node::RequestContent::Opaque).await
    }

    async fn start_content(tweak: fn(&mut Config), content: batcher::node::RequestContent) -> Net {
        let keys = (1..=PARTIES).map(|p| (p, common::key(p).public_key())).collect();
        let (consenter, caddr) = Scripted::start(keys, 1).await;
        let mut listeners = BTreeMap::new();
        for p in 1..=PARTIES {
            listeners.insert(p, TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let mut net = Net {
            tweak,
            content,
            dir: tempfile::tempdir().unwrap(),
            consenter,
            consenter_uri: format!("http://{caddr}"),
            addrs: listeners
                .iter()
                .map(|(p, l)| (*p, l.local_addr().unwrap()))
                .collect(),
            nodes: BTreeMap::new(),
            registries: BTreeMap::new(),
        };
        for (p, l) in listeners {
            net.spawn(p, l).await;
        }
        net
    }

    fn config(&self, party: PartyId) -> NodeConfig {
        let mut batcher = core_config(party);
        (self.tweak)(&mut batcher);
        NodeConfig {
            batcher,
            key: common::key(party),
            listen: self.addrs[&party],
            server: wire::server::ServerLimits::default(),
            data_dir: self.dir.path().join(format!("batcher-{party}")),
            consenters: (1..=PARTIES).map(|p| (p, self.consenter_uri.clone())).collect(),
            peers: self
                .addrs
                .iter()
                .map(|(p, a)| (*p, format!("http://{a}")))
                .collect(),
            own_consenter: self.consenter_uri.clone(),
            consenter_keys: None,
            config_rules: None,
            shell: shell(),
            content: self.content.clone(),
            next_key_files: Vec::new(),
            joining: false,
        }
    }

    async fn spawn(&mut self, party: PartyId, listener: TcpListener) {
        let registry = telemetry::Registry::detached("batcher");
        // `Deps` has one more field in builds with the `testing` feature.
        #[allow(clippy::needless_update)]
        let deps = Deps {
            listener: Some(listener),
            registry: registry.clone(),
            ..Deps::default()
        };
        let handle = batcher::node::spawn(self.config(party), deps).await.unwrap();
        self.nodes.insert(party, handle);
        self.registries.insert(party, registry);
    }

    async fn stop(&mut self, party: PartyId) {
        self.nodes.remove(&party).unwrap().stop().await.unwrap();
    }

    /// Restarts `party` from its data directory on the same port.
    async fn restart(&mut self, party: PartyId) {
        let addr = self.addrs[&party];
        let start = Instant::now();
        let listener = loop {
            match TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(start.elapsed() < DEADLINE, "rebinding {addr}: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        self.spawn(party, listener).await;
    }

    fn stats(&self, party: PartyId) -> StatsSnapshot {
        self.nodes[&party].stats.snapshot()
    }

    /// Party `party`'s metric `name` as its `/metrics` would show it.
    fn metric(&self, party: PartyId, name: &str) -> u64 {
        let text = self.registries[&party].text();
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no metric {name} in\n{text}"));
        value
            .parse()
            .unwrap_or_else(|e| panic!("{name} = {value:?}: {e}"))
    }

    /// Sends `requests` to the intake of every running batcher; asserts the answers.
    async fn submit_everywhere(&self, requests: &[Vec<u8>]) {
        for (p, addr) in &self.addrs {
            if !self.nodes.contains_key(p) {
                continue;
            }
            let answers = Intake::open(*addr).await.submit(requests).await;
            for a in answers {
                assert!(
                    a.admitted || a.refusal == pb::IntakeRefusal::Duplicate as i32,
                    "party {p}: {a:?}"
                );
            }
        }
    }

    fn ordered_tx_count(&self) -> u64 {
        self.consenter
            .headers()
            .iter()
            .map(|h| u64::from(h.tx_count))
            .sum()
    }

    /// The requests of every ordered batch, fetched from the batchers by id and digest.
    async fn ordered_requests(&self) -> Vec<Vec<u8>> {
        let mut all = Vec::new();
        for h in self.consenter.headers() {
            let mut found = None;
            for addr in self.addrs.values() {
                let Ok(mut c) = BatcherPeerClient::connect(format!("http://{addr}")).await else {
                    continue;
                };
                let fetch = pb::FetchRequest {
                    shard: h.shard,
                    primary: h.primary,
                    seq: h.seq,
                    digest: h.batch_digest.clone(),
                };
                if let Ok(b) = c.fetch(fetch).await {
                    found = Some(b.into_inner());
                    break;
                }
            }
            let b = found.unwrap_or_else(|| panic!("no batcher serves ordered batch {h:?}"));
            assert_eq!(types::digest::batch_digest(&b.requests).to_vec(), h.batch_digest);
            all.extend(b.requests);
        }
        all
    }

    /// What every node and the consenter hold (for failure messages).
    fn dump(&self) -> String {
        let mut out = String::new();
        for (p, h) in &self.nodes {
            out.push_str(&format!("party {p}: {:?}\n", h.stats.snapshot()));
        }
        for h in self.consenter.headers() {
            out.push_str(&format!(
                "ordered t{} {}/{}/{} x{}\n",
                h.term, h.shard, h.primary, h.seq, h.tx_count
            ));
        }
        out
    }

    /// Waits until exactly `sent` are ordered, each once, and every mempool is empty.
    async fn settle(&self, sent: &[Vec<u8>]) {
        let start = Instant::now();
        while self.ordered_tx_count() < sent.len() as u64 {
            assert!(
                start.elapsed() < DEADLINE,
                "not everything ordered:\n{}",
                self.dump()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let ordered = self.ordered_requests().await;
        let distinct: BTreeSet<_> = ordered.iter().cloned().collect();
        assert_eq!(distinct.len(), ordered.len(), "a request was ordered twice");
        assert_eq!(distinct, sent.iter().cloned().collect::<BTreeSet<_>>());
        for p in self.nodes.keys() {
            eventually(&format!("party {p}'s mempool and flight are empty"), || {
                let s = self.stats(*p);
                s.pending == 0 && s.in_flight == 0 && s.unordered_batches == 0
            })
            .await;
        }
        assert_eq!(self.consenter.equivocations(), vec![], "two batches under one id");
    }
}

fn requests(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range.map(request).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_batched_pulled_attested_ordered_and_leave_every_mempool() {
    let net = Net::start().await;
    let sent = requests(0..30);
    net.submit_everywhere(&sent).await;
    net.settle(&sent).await;

    // Party 1 is the primary of shard 0 in term 0: it cut every batch; the others pulled,
    // persisted and attested them.
    let headers = net.consenter.headers();
    assert!(headers.iter().all(|h| h.primary == 1 && h.term == 0));
    assert!(headers.len() >= 8, "30 requests in batches of at most 4");
    assert_eq!(net.stats(1).batches_cut, headers.len() as u64);
    assert_eq!(
        net.metric(1, "fabrx_batcher_batches_cut_total"),
        headers.len() as u64
    );
    assert_eq!(
        net.metric(1, "fabrx_batcher_batches_persisted_total"),
        headers.len() as u64
    );
    for p in 2..=PARTIES {
        let s = net.stats(p);
        assert!(s.batches_accepted > 0, "party {p}: {s:?}");
        assert_eq!(
            net.metric(p, "fabrx_batcher_bafs_sent_total"),
            s.bafs_sent,
            "party {p}"
        );
        assert_eq!(net.metric(p, "fabrx_batcher_mempool_requests"), 0, "party {p}");
        assert_eq!(net.metric(p, "fabrx_batcher_mempool_bytes"), 0, "party {p}");
        // A batch ordered before its fsync completed needs no BAF of this party.
        assert!(
            s.bafs_sent > 0 && s.bafs_sent <= s.batches_accepted,
            "party {p}: {s:?}"
        );
    }
    for h in &headers {
        let signers = net.consenter.baf_signers((h.term, h.shard, h.primary, h.seq));
        assert!(signers.len() >= 2, "{h:?} ordered with {signers:?}");
    }
    // Every node followed every decision.
    let decisions = net.consenter.decisions() as u64;
    for p in 1..=PARTIES {
        eventually("every node read every decision", || {
            net.stats(p).decisions == decisions
        })
        .await;
    }
    // An ordered request is remembered: a resubmission is a duplicate.
    let again = Intake::open(net.addrs[&2]).await.submit(&sent[..1]).await;
    assert!(!again[0].admitted);
    assert_eq!(again[0].refusal, pb::IntakeRefusal::Duplicate as i32);
}

/// A fabrx envelope a router admits (distinct per `i`).
fn envelope(i: u32) -> Vec<u8> {
    use prost::Message as _;
    let payload = pb::Tx {
        namespaces: vec![pb::TxNamespace {
            ns_id: "token".into(),
            blind_writes: vec![pb::Write {
                key: format!("key-{i}").into_bytes(),
                value: vec![7; 16],
            }],
            ..Default::default()
        }],
        endorsements: vec![pb::Endorsements {
            endorsements_with_identity: vec![pb::EndorsementWithIdentity {
                endorsement: vec![1; 64],
                identity: None,
            }],
        }],
        ..Default::default()
    }
    .encode_to_vec();
    pb::Envelope {
        payload,
        identity: Some(pb::Identity {
            msp_id: "org1".into(),
            creator: Some(pb::identity::Creator::CertificateId("client".into())),
        }),
        tx_id: format!("tx-{i:08}"),
        payload_type: pb::PayloadType::Tx as i32,
        ..Default::default()
    }
    .encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secondaries_check_only_the_pulled_requests_their_own_router_did_not_pass() {
    let net = Net::start_checking().await;
    let everywhere: Vec<_> = (0..12).map(envelope).collect();
    for e in &everywhere {
        arma::admission::RequestPolicy::default()
            .check(e)
            .expect("a router admits it");
    }
    // Through every party's intake, the primary's last: a secondary's own router passed
    // each of them before the primary's batches bring them back, so it checks none again.
    for p in [2, 3, 4, 1] {
        let answers = Intake::open(net.addrs[&p]).await.submit(&everywhere).await;
        assert!(answers.iter().all(|a| a.admitted), "party {p}: {answers:?}");
    }
    net.settle(&everywhere).await;
    // Each batch comes compact and is rebuilt from the requests pending here. A secondary
    // that had not pulled a batch before f + 1 others attested it and it was ordered skips
    // it, so f + 1 of them, not every one, count all twelve.
    let threshold = ((PARTIES - 1) / 3 + 1) as usize;
    eventually("f + 1 secondaries pulled every batch", || {
        (2..=PARTIES).filter(|p| net.stats(*p).pulled_known == 12).count() >= threshold
    })
    .await;
    let mut known = BTreeMap::new();
    for p in 2..=PARTIES {
        let stats = net.stats(p);
        assert!(stats.pulled_known <= 12, "party {p}");
        assert_eq!(stats.pulled_checked, 0, "party {p}");
        assert_eq!(stats.compact_fallbacks, 0, "party {p}");
        known.insert(p, stats.pulled_known);
    }
    // Through the primary's intake only: every secondary checks each of them.
    let primary_only: Vec<_> = (100..110).map(envelope).collect();
    let answers = Intake::open(net.addrs[&1]).await.submit(&primary_only).await;
    assert!(answers.iter().all(|a| a.admitted), "{answers:?}");
    net.settle(&[everywhere.clone(), primary_only].concat()).await;
    // Likewise a secondary still fetching a batch when it was ordered skips it, so f + 1
    // of them, not every one, check all ten; none counts one of them as known.
    eventually("f + 1 secondaries checked the new requests", || {
        (2..=PARTIES)
            .filter(|p| net.stats(*p).pulled_checked == 10)
            .count()
            >= threshold
    })
    .await;
    for p in 2..=PARTIES {
        let stats = net.stats(p);
        assert!(stats.pulled_checked <= 10, "party {p}");
        assert_eq!(Some(&stats.pulled_known), known.get(&p), "party {p}");
        assert_eq!(stats.batches_rejected, 0, "party {p}");
        // Not pending here: each such compact batch is fetched whole.
        assert!(
            stats.pulled_checked == 0 || stats.compact_fallbacks > 0,
            "party {p}"
        );
    }
    // A request no router would admit, behind one the secondaries know, in the batch of
    // a primary that does not check its intake: the secondaries still refuse the batch.
    let known = envelope(200);
    for p in 2..=PARTIES {
        Intake::open(net.addrs[&p])
            .await
            .submit(std::slice::from_ref(&known))
            .await;
    }
    let bogus = b"not an envelope".to_vec();
    let answers = Intake::open(net.addrs[&1])
        .await
        .submit(&[known.clone(), bogus.clone()])
        .await;
    assert!(answers.iter().all(|a| a.admitted), "{answers:?}");
    // f+1 refusals complain the primary out; a secondary that had not pulled the batch
    // by then never sees it (it follows the next primary), so not every one refuses.
    eventually("f+1 secondaries refused the bogus batch", || {
        (2..=PARTIES)
            .filter(|p| net.stats(*p).batches_rejected > 0)
            .count()
            >= threshold
    })
    .await;
    // The next primary orders the known request; the bogus one is never ordered.
    let start = Instant::now();
    while !net.ordered_requests().await.contains(&known) {
        assert!(
            start.elapsed() < DEADLINE,
            "known request not ordered:\n{}",
            net.dump()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!net.ordered_requests().await.contains(&bogus));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_secondary_and_primary_keep_going_without_a_second_batch_under_one_id() {
    let mut net = Net::start().await;
    let mut sent = requests(0..12);
    net.submit_everywhere(&sent).await;
    net.settle(&sent).await;

    // A secondary goes down; the shard goes on without it; it comes back, resumes the
    // decisions where it stopped and fetches the batches it missed. (It stops only once
    // it read every decision so far: a secondary's mempool empties at the primary's
    // batch, before the decision, so a busy machine could stop it before any.)
    let decided = net.consenter.decisions() as u64;
    eventually("party 3 read every decision so far", || {
        net.stats(3).decisions >= decided
    })
    .await;
    net.stop(3).await;
    let b = requests(100..112);
    net.submit_everywhere(&b).await;
    sent.extend(b.iter().cloned());
    eventually("batches are ordered without party 3", || {
        net.ordered_tx_count() >= sent.len() as u64
    })
    .await;
    net.restart(3).await;
    // Its memory of ordered requests survived the restart (the progress log): what was
    // ordered before it stopped is still a duplicate.
    let again = Intake::open(net.addrs[&3]).await.submit(&sent[..12]).await;
    assert!(
        again
            .iter()
            .all(|a| !a.admitted && a.refusal == pb::IntakeRefusal::Duplicate as i32),
        "{again:?}"
    );
    net.submit_everywhere(&b).await;
    net.settle(&sent).await;
    let s3 = net.stats(3);
    assert!(s3.fetched_batches > 0, "party 3 fetched what it missed: {s3:?}");
    assert!(
        s3.decisions < net.consenter.decisions() as u64,
        "resumed, not replayed from 1: {s3:?}"
    );

    // The primary goes down with batches persisted, attested and not ordered; restarted,
    // it re-adopts them and cuts new batches after them, never a second batch under a
    // seq it signed.
    net.consenter.pause();
    let c = requests(200..212);
    net.submit_everywhere(&c).await;
    sent.extend(c.iter().cloned());
    eventually("the primary cut every request", || {
        let s = net.stats(1);
        s.pending == 0 && s.in_flight == 12
    })
    .await;
    eventually("the secondaries attested the primary's batches", || {
        net.consenter.attested_unordered() >= 3
    })
    .await;
    net.stop(1).await;
    net.restart(1).await;
    let s1 = net.stats(1);
    assert!(s1.batches_restored >= 3, "{s1:?}");
    eventually("the restarted primary holds its batches again", || {
        net.stats(1).in_flight == 12
    })
    .await;
    let d = requests(300..308);
    net.submit_everywhere(&d).await;
    sent.extend(d.iter().cloned());
    // The restored batches fill the window (their acks were lost with the restart), so
    // the new requests wait for them to be ordered.
    net.consenter.resume();
    net.settle(&sent).await;
    let seqs: Vec<u64> = net.consenter.headers().iter().map(|h| h.seq).collect();
    let distinct: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(distinct.len(), seqs.len(), "one batch per seq: {seqs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_change_moves_the_primary_and_the_pulls() {
    let net = Net::start().await;
    let mut sent = requests(0..8);
    net.submit_everywhere(&sent).await;
    net.settle(&sent).await;
    net.consenter.next_term(0);
    for p in 1..=PARTIES {
        eventually("every node is in term 1", || net.stats(p).term == 1).await;
        assert_eq!(net.metric(p, "fabrx_batcher_term"), 1);
        assert_eq!(net.metric(p, "fabrx_batcher_term_changes_total"), 1);
    }
    let b = requests(100..108);
    net.submit_everywhere(&b).await;
    sent.extend(b);
    net.settle(&sent).await;
    // Term 1's primary of shard 0 is party 2; party 1 now pulls from it.
    let term1: Vec<_> = net
        .consenter
        .headers()
        .into_iter()
        .filter(|h| h.term == 1)
        .collect();
    assert!(!term1.is_empty());
    assert!(term1.iter().all(|h| h.primary == 2), "{term1:?}");
    assert!(net.stats(1).batches_accepted > 0, "{:?}", net.stats(1));

    // Term 1's primary restarts with attested, unordered batches of term 1: it restores
    // them (its progress log names term 1) and goes on after them.
    let mut net = net;
    net.consenter.pause();
    let c = requests(200..208);
    net.submit_everywhere(&c).await;
    sent.extend(c);
    eventually("party 2 cut every request", || {
        let s = net.stats(2);
        s.pending == 0 && s.in_flight == 8
    })
    .await;
    eventually("the batches are attested", || {
        net.consenter.attested_unordered() >= 2
    })
    .await;
    net.stop(2).await;
    net.restart(2).await;
    assert!(net.stats(2).batches_restored >= 2, "{:?}", net.stats(2));
    let d = requests(300..304);
    net.submit_everywhere(&d).await;
    sent.extend(d);
    net.consenter.resume();
    net.settle(&sent).await;
    let keys: Vec<_> = net.consenter.headers().iter().map(|h| (h.term, h.seq)).collect();
    let distinct: BTreeSet<_> = keys.iter().copied().collect();
    assert_eq!(distinct.len(), keys.len(), "one batch per (term, seq): {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secondaries_complain_about_a_silent_primary_and_the_next_one_orders_their_requests() {
    let mut net = Net::start_with(|c| {
        c.forward_timeout_ms = 200;
        c.complain_timeout_ms = 600;
    })
    .await;
    net.stop(1).await;
    let sent = requests(0..6);
    net.submit_everywhere(&sent).await;
    // Parties 2..4 forward to the dead primary, then complain; f+1 complaints move the
    // shard to term 1, whose primary (party 2) batches the requests.
    net.settle(&sent).await;
    let headers = net.consenter.headers();
    assert!(
        headers.iter().all(|h| h.term == 1 && h.primary == 2),
        "{headers:?}"
    );
    let complaints: u64 = (2..=PARTIES).map(|p| net.stats(p).complaints).sum();
    assert!(complaints >= 2, "{}", net.dump());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_mempool_answers_a_clear_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let mut batcher = core_config(2);
    batcher.mempool_max_requests = NonZeroUsize::new(4).unwrap();
    let nowhere = "http://127.0.0.1:9".to_string();
    // Party 2 is a secondary in term 0 and its primary is unreachable: nothing leaves
    // its mempool.
    let config = NodeConfig {
        batcher,
        key: common::key(2),
        listen: "127.0.0.1:0".parse().unwrap(),
        server: wire::server::ServerLimits::default(),
        data_dir: dir.path().to_path_buf(),
        consenters: (1..=PARTIES).map(|p| (p, nowhere.clone())).collect(),
        peers: (1..=PARTIES).map(|p| (p, nowhere.clone())).collect(),
        own_consenter: nowhere.clone(),
        consenter_keys: None,
        config_rules: None,
        shell: shell(),
        content: batcher::node::RequestContent::Opaque,
        next_key_files: Vec::new(),
        joining: false,
    };
    let node = batcher::node::spawn(config, Deps::default()).await.unwrap();
    let mut intake = Intake::open(node.addr).await;
    let mut batch = requests(0..6);
    batch.push(request(0));
    batch.push(vec![7; 201]);
    let answers = intake.submit(&batch).await;
    let got: Vec<(bool, i32)> = answers.iter().map(|a| (a.admitted, a.refusal)).collect();
    let refused = |r: pb::IntakeRefusal| (false, r as i32);
    let ok = (true, pb::IntakeRefusal::Unspecified as i32);
    assert_eq!(
        got,
        vec![
            ok,
            ok,
            ok,
            ok,
            refused(pb::IntakeRefusal::MempoolFullRequests),
            refused(pb::IntakeRefusal::MempoolFullRequests),
            refused(pb::IntakeRefusal::Duplicate),
            refused(pb::IntakeRefusal::TooLarge),
        ]
    );
    let s = node.stats.snapshot();
    assert_eq!((s.admitted, s.refused, s.pending), (4, 4, 4));
    assert_eq!(s.intake_messages, 3, "eight requests in messages of up to three");
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_missing_peers_or_oversized_batches_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = NodeConfig {
        batcher: core_config(1),
        key: common::key(1),
        listen: "127.0.0.1:0".parse().unwrap(),
        server: wire::server::ServerLimits::default(),
        data_dir: dir.path().to_path_buf(),
        consenters: BTreeMap::from([(1, "http://127.0.0.1:9".to_string())]),
        peers: (2..=PARTIES)
            .map(|p| (p, "http://127.0.0.1:9".to_string()))
            .collect(),
        own_consenter: "http://127.0.0.1:9".into(),
        consenter_keys: None,
        config_rules: None,
        shell: shell(),
        content: batcher::node::RequestContent::Opaque,
        next_key_files: Vec::new(),
        joining: false,
    };
    let mut missing = base.clone();
    missing.peers.remove(&3);
    assert!(matches!(
        batcher::node::spawn(missing, Deps::default()).await.err(),
        Some(batcher::Error::NodeConfig { .. })
    ));
    let mut huge = base.clone();
    huge.batcher.max_batch_bytes = NonZeroU64::new(1 << 30).unwrap();
    huge.batcher.mempool_max_bytes = NonZeroU64::new(1 << 30).unwrap();
    assert!(matches!(
        batcher::node::spawn(huge, Deps::default()).await.err(),
        Some(batcher::Error::NodeConfig { .. })
    ));
    let mut wrong_key = base;
    wrong_key.key = common::key(2);
    assert!(matches!(
        batcher::node::spawn(wrong_key, Deps::default()).await.err(),
        Some(batcher::Error::SigningKeyMismatch { .. })
    ));
}

/// With the consenter set's keys a decision must carry a quorum certificate; an
/// unsigned one is refused. Without keys (a scripted consenter) it is accepted.
#[test]
fn a_decision_without_a_quorum_certificate_is_refused() {
    use crypto::{Scheme, derive_signing_key};
    let keys: Vec<_> = (0..4)
        .map(|i| {
            derive_signing_key(Scheme::Ed25519, &format!("batcher-node-test/consenter/{i}")).public_key()
        })
        .collect();
    let cluster = arma::ClusterKeys::for_chain("test", keys);
    let unsigned = wire::pb::Decision {
        number: 1,
        requests_root: vec![0; 32],
        metadata: arma::Outcome::default().metadata(),
        ..Default::default()
    };
    assert!(matches!(
        batcher::node::verify_decision(&unsigned, Some(&cluster)),
        Err(batcher::Error::DecisionRefused { decision: 1, .. })
    ));
    assert!(batcher::node::verify_decision(&unsigned, None).is_ok());
}
