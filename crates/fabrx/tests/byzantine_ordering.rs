//! Byzantine ordering as separate processes (docs/ordering-faults.md): a real `fabrx up`
//! network (4 parties × 2 shards, mutual TLS, ordering only). Party 1's batcher of shard
//! 0 is the primary of term 0. Each test restarts it as a Byzantine batcher
//! (`fabrx node batcher --byzantine MODE`, built only with the `testing` feature).
//!
//! `a_withholding_and_forging_primary_stalls_no_assembler` (`withhold:2`): it serves its
//! batches to party 2's batcher alone, so they are ordered with two attestations
//! (f + 1). It keeps every other batcher's and every assembler's pull open and silent,
//! and answers every fetch with forged requests under the ordered id and digest. Every
//! party's assembler must still deliver every block. It gets the batches from party 2's
//! batcher, the one correct holder, or from another assembler that has them. Every tx of
//! the load must be in every party's ledger, in blocks that verify. The secondaries that
//! never get the primary's batches may complain it out of its term; the blocks of its
//! term must be delivered all the same.
//!
//! `a_late_equivocation_does_not_censor_its_victim` (`equivocate-late:2`): see the test.
//!
//! The tests of this file take turns: each runs a network of 20 processes.
//!
//! `cargo test -p fabrx --features testing --test byzantine_ordering` (`scripts/test.sh`
//! runs it).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{DownOnDrop, bin, free_base_port};

use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use prost::Message as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use wire::pb;

/// Held by each test while its network runs: two networks at once would share a small
/// machine's cores and slow both past their deadlines.
static NETWORK: Mutex<()> = Mutex::new(());

fn one_network_at_a_time() -> MutexGuard<'static, ()> {
    NETWORK.lock().unwrap_or_else(PoisonError::into_inner)
}

fn fabrx(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(bin()).args(args).arg(dir).output().unwrap()
}

/// Kills the Byzantine batcher when the test ends (`fabrx down` does not know it).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Every block of party `party`'s ledger (`fabrx blocks --tx-ids`), each checked to verify.
fn blocks(dir: &Path, party: u32) -> Vec<serde_json::Value> {
    let out = Command::new(bin())
        .args(["blocks", "--tx-ids", "--party", &party.to_string(), "--network"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "party {party}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .inspect(|b| assert_eq!(b["verified"], true, "party {party}: {b}"))
        .collect()
}

fn tx_ids(blocks: &[serde_json::Value]) -> BTreeSet<String> {
    blocks
        .iter()
        .flat_map(|b| b["tx_ids"].as_array().unwrap().iter())
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

/// A `fabrx up` network whose party 1 batcher of shard 0 runs as a Byzantine batcher.
struct Network {
    dir: PathBuf,
    /// The Byzantine batcher's log (its stderr).
    log: PathBuf,
    nodes: serde_json::Value,
    // Dropped in this order: the Byzantine batcher, the network, its directory.
    _byzantine: KillOnDrop,
    _down: DownOnDrop,
    _tmp: tempfile::TempDir,
}

impl Network {
    /// `fabrx up --seed SEED`, then party 1's batcher of shard 0 restarted with the same
    /// command line and `--byzantine MODE`.
    fn up(seed: &str, mode: &str) -> Network {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("net");
        let down = DownOnDrop(dir.clone());
        let base = free_base_port().to_string();
        let up = Command::new(bin())
            .args([
                "up",
                "--committers",
                "0",
                "--no-token",
                "--seed",
                seed,
                "--base-port",
                &base,
                "--dir",
            ])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));

        let nodes: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("network.json")).unwrap()).unwrap();
        let node = node(&nodes, "batcher-1-0").clone();
        let pid = node["pid"].as_u64().unwrap();
        let _ = Command::new("kill").arg(pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while alive(pid) {
            assert!(Instant::now() < deadline, "batcher-1-0 did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
        let argv: Vec<String> = node["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        let log = tmp.path().join("byzantine-batcher.log");
        let mut child = Command::new(bin())
            .args(&argv[1..])
            .args(["--byzantine", mode])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let byzantine = KillOnDrop(child);
        let mut ready = String::new();
        std::io::BufReader::new(stdout).read_line(&mut ready).unwrap();
        assert!(ready.contains("\"ready\":\"batcher\""), "{ready}");
        Network {
            dir,
            log,
            nodes,
            _byzantine: byzantine,
            _down: down,
            _tmp: tmp,
        }
    }

    fn byzantine_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn node<'a>(nodes: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in network.json"))
}

#[test]
fn a_withholding_and_forging_primary_stalls_no_assembler() {
    let _turn = one_network_at_a_time();
    let net = Network::up("11", "withhold:2");
    let dir = &net.dir;

    // Load through every party's router; the load counts a tx once party 1's assembler
    // delivered it.
    let load = fabrx(
        &[
            "loadgen",
            "--target",
            "network",
            "--txs",
            "300",
            "--block-size",
            "50",
            "--json",
            "--network",
        ],
        dir,
    );
    assert!(load.status.success(), "{}", String::from_utf8_lossy(&load.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&load.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(summary["ordered"], 300, "{summary}");
    assert_eq!(summary["never_confirmed"], 0, "{summary}");

    // Every party's ledger holds every tx, and the same blocks; some of them are the
    // Byzantine primary's batches, which no assembler could pull from it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let reference = loop {
        let all: Vec<Vec<serde_json::Value>> = (1..=4).map(|p| blocks(dir, p)).collect();
        let heights: Vec<usize> = all.iter().map(Vec::len).collect();
        if heights.iter().all(|h| *h == heights[0]) && tx_ids(&all[0]).len() >= 300 {
            for (p, b) in all.iter().enumerate() {
                assert_eq!(tx_ids(b), tx_ids(&all[0]), "party {} holds other txs", p + 1);
            }
            break all.into_iter().next().unwrap();
        }
        assert!(Instant::now() < deadline, "ledgers stuck at heights {heights:?}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let withheld = reference
        .iter()
        .filter(|b| b["shard"] == 0 && b["primary"] == 1)
        .count();
    assert!(withheld > 0, "no block of the Byzantine primary was ordered");
}

/// A TLS channel to node `name` (a router), with the network's client certificate.
fn channel(net: &Network, name: &str) -> Channel {
    let tls = net.dir.join("tls");
    let read = |file: &str| std::fs::read(tls.join(file)).unwrap();
    let config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem")))
        .identity(Identity::from_pem(read("client.pem"), read("client.key")))
        .domain_name(wire::tls::SERVER_NAME);
    let listen = node(&net.nodes, name)["listen"].as_str().unwrap().to_owned();
    Endpoint::from_shared(format!("https://{listen}"))
        .unwrap()
        .tls_config(config)
        .unwrap()
        .connect_lazy()
}

/// Sends `envelopes` in order on one `Router.Submit` stream; the answer codes by index
/// (a missing answer: `UNAVAILABLE`).
async fn submit(channel: Channel, envelopes: &[Vec<u8>]) -> Vec<Code> {
    let mut codes = vec![Code::Unavailable; envelopes.len()];
    let (tx, rx) = tokio::sync::mpsc::channel(envelopes.len().max(1));
    for (id, envelope) in envelopes.iter().enumerate() {
        let request = pb::SubmitRequest {
            id: id as u64,
            envelope: envelope.clone(),
        };
        tx.send(request).await.unwrap();
    }
    let Ok(response) = pb::router_client::RouterClient::new(channel)
        .submit(ReceiverStream::new(rx))
        .await
    else {
        return codes;
    };
    let mut stream = response.into_inner();
    let mut answered = 0;
    while answered < envelopes.len() {
        let next = tokio::time::timeout(Duration::from_secs(30), stream.message()).await;
        let Ok(Ok(Some(r))) = next else { break };
        if let Some(code) = codes.get_mut(r.id as usize) {
            *code = Code::from(r.code as i32);
            answered += 1;
        }
    }
    drop(tx);
    codes
}

/// Sends `envelopes` to party `party`'s router until each was acknowledged (`OK`, or
/// `ALREADY_EXISTS`: its batcher holds it already, from a batch it pulled).
async fn submit_until_acknowledged(net: &Network, party: u32, envelopes: &[Vec<u8>]) {
    let channel = channel(net, &format!("router-{party}"));
    let mut todo: Vec<Vec<u8>> = envelopes.to_vec();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let codes = submit(channel.clone(), &todo).await;
        let refused: Vec<(Vec<u8>, Code)> = todo
            .into_iter()
            .zip(codes)
            .filter(|(_, c)| !matches!(c, Code::Ok | Code::AlreadyExists))
            .collect();
        if refused.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "router {party} did not acknowledge: {:?}",
            refused.iter().map(|(_, c)| c).collect::<Vec<_>>()
        );
        todo = refused.into_iter().map(|(e, _)| e).collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Envelope `n` of the process tests, with tx id `id`.
fn envelope_with_id(n: u64, id: &str) -> Vec<u8> {
    let mut e = pb::Envelope::decode(envelope::envelope(n).as_slice()).unwrap();
    e.tx_id = id.to_owned();
    e.encode_to_vec()
}

/// `count` envelopes of shard 0 from `*n` on, with tx ids `prefix-N` (the shard is a
/// function of the content, which the tx id is part of).
fn shard0(n: &mut u64, count: usize, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while out.len() < count {
        let id = format!("{prefix}-{n}");
        let e = envelope_with_id(*n, &id);
        *n += 1;
        if arma::content::shard_of(&e, 2).unwrap() == 0 {
            out.push((id, e));
        }
    }
    out
}

/// The value of gauge `name` on the `/metrics` page at `addr` (its first series).
fn gauge(addr: &str, name: &str) -> Option<f64> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut page = String::new();
    stream.read_to_string(&mut page).ok()?;
    page.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The late equivocation of issue 23 (finding 2), as processes. Party 1's batcher, the
/// primary of shard 0 in term 0, runs `equivocate-late:2`: a batch it cuts with the
/// victim tx (tx id `fabrx-victim-…`, the marker of that mode) exists in two versions.
/// Version A, without the victim, goes to party 1's and party 2's nodes only, and its
/// BAF and party 2's order it (f + 1). Version B, with the victim, goes to parties 3 and
/// 4 only once A is ordered; the equivocator holds their batchers' fetch of A until they
/// acked B, so they hold B when they learn that A was ordered. It then forgets the
/// victim: it never batches it again.
///
/// The victim's client reaches the routers of parties 1, 3 and 4: 2f + 1 acknowledge it,
/// which is all a client waits for (party 2's router may be unreachable for it). So no
/// correct batcher holds the victim outside B: only batchers 3 and 4, which got B, can
/// save it, by returning B's requests that were not ordered to their pending queues and
/// sending their BAF of B as evidence (a different primary-signed digest for an ordered
/// seq), which moves the shard to a new term. The victim is then batched by the next
/// primary. Had party 2's batcher held it too, its forwards and complaints would get it
/// ordered without that give-back, once the consenters saw B's attestations.
///
/// Asserted: the victim tx is ordered, exactly once, in a later term's batch; every other
/// tx (the victim's companions and the load) is in every party's ledger; every assembler
/// delivers the same blocks, which verify; the honest batchers of shard 0 moved past term
/// 0 (`fabrx_batcher_term`); and the equivocation happened as described (the Byzantine
/// batcher's log says an honest batcher acked version B).
#[test]
fn a_late_equivocation_does_not_censor_its_victim() {
    const LOAD: u64 = 200;
    let _turn = one_network_at_a_time();
    let net = Network::up("13", "equivocate-late:2");
    let dir = &net.dir;

    // The victim between companions on one stream to router 1, so that the primary cuts
    // it into a batch with others (version A must not be empty).
    let mut n = 0;
    let before = shard0(&mut n, 4, "companion");
    let (victim_id, victim) = shard0(&mut n, 1, "fabrx-victim").remove(0);
    let after = shard0(&mut n, 4, "companion");
    let companions: Vec<(String, Vec<u8>)> = before.iter().chain(&after).cloned().collect();
    let with_victim: Vec<Vec<u8>> = before
        .iter()
        .map(|(_, e)| e.clone())
        .chain(std::iter::once(victim.clone()))
        .chain(after.iter().map(|(_, e)| e.clone()))
        .collect();
    let without_victim: Vec<Vec<u8>> = companions.iter().map(|(_, e)| e.clone()).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for party in [1, 3, 4] {
            submit_until_acknowledged(&net, party, &with_victim).await;
        }
        submit_until_acknowledged(&net, 2, &without_victim).await;
    });

    let load = fabrx(
        &[
            "loadgen",
            "--target",
            "network",
            "--txs",
            &LOAD.to_string(),
            "--block-size",
            "50",
            "--json",
            "--network",
        ],
        dir,
    );
    assert!(load.status.success(), "{}", String::from_utf8_lossy(&load.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&load.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(summary["ordered"], LOAD, "{summary}");
    assert_eq!(summary["never_confirmed"], 0, "{summary}");

    // Every party's ledger: the same blocks, holding the victim, its companions and the
    // load.
    let expected = LOAD as usize + companions.len() + 1;
    let deadline = Instant::now() + Duration::from_secs(120);
    let reference = loop {
        let all: Vec<Vec<serde_json::Value>> = (1..=4).map(|p| blocks(dir, p)).collect();
        let hashes: Vec<Vec<&serde_json::Value>> = all
            .iter()
            .map(|b| b.iter().map(|b| &b["hash"]).collect())
            .collect();
        let ids: Vec<BTreeSet<String>> = all.iter().map(|b| tx_ids(b)).collect();
        let complete = ids.iter().all(|i| i.contains(&victim_id) && i.len() >= expected);
        if complete && hashes.iter().all(|h| *h == hashes[0]) {
            break all.into_iter().next().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the ledgers did not all get the victim {victim_id} and {expected} txs: heights {:?}, \
             txs {:?}, victim held by parties {:?}\nthe Byzantine batcher's log:\n{}",
            hashes.iter().map(Vec::len).collect::<Vec<_>>(),
            ids.iter().map(BTreeSet::len).collect::<Vec<_>>(),
            (1..=4)
                .filter(|p| ids[p - 1].contains(&victim_id))
                .collect::<Vec<_>>(),
            net.byzantine_log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let ids = tx_ids(&reference);
    for (id, _) in &companions {
        assert!(ids.contains(id), "companion {id} missing");
    }
    assert_eq!(
        ids.len(),
        expected,
        "exactly the victim, its companions and the load"
    );
    let with: Vec<&serde_json::Value> = reference
        .iter()
        .filter(|b| b["tx_ids"].as_array().unwrap().iter().any(|t| *t == *victim_id))
        .collect();
    assert_eq!(with.len(), 1, "the victim is ordered once: {with:?}");
    let victim_count = with[0]["tx_ids"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| **t == *victim_id)
        .count();
    assert_eq!(victim_count, 1, "{:?}", with[0]);
    assert_eq!(with[0]["shard"], 0);
    assert_ne!(
        with[0]["primary"], 1,
        "the victim came in a batch of the equivocator: {:?}",
        with[0]
    );

    // The evidence worked: the shard left term 0 at every honest batcher of shard 0.
    for party in 2..=4 {
        let name = format!("batcher-{party}-0");
        let addr = node(&net.nodes, &name)["metrics"].as_str().unwrap().to_owned();
        let term = gauge(&addr, "fabrx_batcher_term");
        assert!(
            term.is_some_and(|t| t >= 1.0),
            "{name}: fabrx_batcher_term {term:?}"
        );
    }
    let log = net.byzantine_log();
    assert!(
        log.contains("a batcher acked version B"),
        "no honest batcher took version B:\n{log}"
    );
    println!("the victim's block: {}", with[0]);
    for line in log.lines().filter(|l| l.contains("late equivocation")) {
        println!("{line}");
    }
}
