//! A fifth party's consenter joins a running 4-party network under load
//! (docs/reconfiguration.md "Adding a party"), every node a process: `fabrx network party
//! add` issues party 5's keys and certificates and writes the next config; three of four
//! admins sign the update; party 5's consenter is started with `--join` before the update
//! is ordered (it is refused by everyone until then, and keeps dialling); the update goes
//! through a router while `fabrx loadgen` sends. Every genesis consenter reaches epoch 1
//! and a set of five; the joiner catches up, becomes a member at that decision
//! (`fabrx_consenter_member` 1) and counts toward the quorum: with consenter 4 stopped,
//! the network of five (quorum four) still orders, which it could not without the joiner.
//! Every tx of every load is committed, and `fabrx blocks` verifies every block. The
//! joiner restarted comes back a member.
//!
//! Party 5's batchers, router and assembler are started with `--join` too: the batchers
//! start their cores at the decision that adds the party, and party 5's assembler
//! builds the whole ledger (`fabrx blocks --party 5` finds it through the config in
//! force), block for block the one party 1's holds.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{
    assert_all_committed, bin, fabrx_ok as fabrx, free_base_port, kill_and_wait as kill, last_json,
    network_json as network, pid_in as pid_of, up_load,
};

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn run(args: &[&str]) -> std::process::Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `GET /metrics` of `addr`, or `None` while it does not answer.
fn scrape(addr: &str) -> Option<String> {
    let mut sock = std::net::TcpStream::connect(addr).ok()?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(sock, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    sock.read_to_string(&mut text).ok()?;
    Some(text.split_once("\r\n\r\n")?.1.to_owned())
}

/// The value of the unlabelled-or-labelled gauge `name` in Prometheus text.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every genesis consenter's config epoch (`fabrx status --json`).
fn epochs(dir: &Path) -> Vec<Option<u64>> {
    let out = fabrx(&["status", "--json", "--dir"], dir);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|n| n["role"] == "consenter")
        .map(|n| n["config_epoch"].as_u64())
        .collect()
}

/// Party 5's nodes, each started with `--join`; killed on drop.
struct Joiner {
    children: Vec<Child>,
    metrics: String,
    log: PathBuf,
}

/// Starts `fabrx node ROLE --network GENESIS --party 5 --join NEXT ARGS…`, its stderr
/// appended to `log`; the ready line is awaited only when `wait` (a joining batcher
/// prints it once its party is in force).
fn start_node(dir: &Path, join: &Path, role: &str, args: &[String], log: &Path, wait: bool) -> Child {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = Command::new(bin())
        .args(["node", role, "--network"])
        .arg(dir.join("config/network-config.json"))
        .args(["--party", "5", "--join"])
        .arg(join)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    if wait {
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
        assert!(
            line.contains("\"ready\""),
            "party 5's {role} did not start: {line}\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    child
}

impl Joiner {
    /// Party 5's consenter (its ready line awaited), batchers, router and assembler.
    fn start(dir: &Path, join: &Path, metrics: &str, log: &Path) -> Joiner {
        let data = |name: &str| s(&dir.join("data/joiner").join(name)).to_owned();
        let mut children = vec![start_node(
            dir,
            join,
            "consenter",
            &[
                "--data-dir".into(),
                data("consenter-5"),
                "--metrics".into(),
                metrics.into(),
            ],
            log,
            true,
        )];
        for shard in 0..2 {
            children.push(start_node(
                dir,
                join,
                "batcher",
                &[
                    "--shard".into(),
                    shard.to_string(),
                    "--data-dir".into(),
                    data(&format!("batcher-5-{shard}")),
                ],
                log,
                false,
            ));
        }
        children.push(start_node(dir, join, "router", &[], log, true));
        children.push(start_node(
            dir,
            join,
            "assembler",
            &["--data-dir".into(), data("assembler-5")],
            log,
            true,
        ));
        Joiner {
            children,
            metrics: metrics.to_owned(),
            log: log.to_owned(),
        }
    }

    /// `(member, set_members)` as the consenter's metrics show them.
    fn membership(&self) -> Option<(f64, f64)> {
        let text = scrape(&self.metrics)?;
        Some((
            gauge(&text, "fabrx_consenter_member")?,
            gauge(&text, "fabrx_consenter_set_members")?,
        ))
    }

    fn wait_member(&self, within: Duration) {
        let start = Instant::now();
        while self.membership() != Some((1.0, 5.0)) {
            assert!(
                start.elapsed() < within,
                "the joiner is not a member of five: {:?}\n{}",
                self.membership(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `(number, hash)` of every block party `party`'s assembler holds, each verified.
fn ledger(dir: &Path, party: u32) -> Vec<(u64, String)> {
    let out = fabrx(&["blocks", "--party", &party.to_string(), "--network"], dir);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|b| {
            assert_eq!(b["verified"], true, "party {party}: {b}");
            (
                b["number"].as_u64().unwrap(),
                b["hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_fifth_partys_consenter_joins_under_load_and_counts_toward_the_quorum() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &["up", "--seed", "51", "--base-port", &base, "--json", "--dir"],
        &dir,
    );
    assert_all_committed(&up_load(&dir, 300, 300, "pja"), 300);

    // Party 5's keys, certificates and the next config; its endpoints moved to ports free
    // now (the devnet's metrics ports lie just above the config's).
    let next = dir.join("join.next.json");
    let o = run(&[
        "network",
        "party",
        "add",
        "--network",
        s(&dir),
        "--seed",
        "5",
        "--out",
        s(&next),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&next).unwrap()).unwrap();
    let party5 = cfg["parties"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["id"] == 5)
        .expect("party 5 in the next config");
    let move_port = |v: &mut serde_json::Value| {
        let host = v.as_str().unwrap().rsplit_once(':').unwrap().0.to_owned();
        *v = serde_json::json!(format!("{host}:{}", free_port()));
    };
    move_port(&mut party5["router"]);
    move_port(&mut party5["consenter"]["endpoint"]);
    if !party5["assembler"].is_null() {
        move_port(&mut party5["assembler"]);
    }
    for b in party5["batchers"].as_array_mut().unwrap() {
        move_port(&mut b["endpoint"]);
    }
    std::fs::write(&next, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    let update = dir.join("join.update.json");
    let genesis = dir.join("config/network-config.json");
    let o = run(&[
        "network",
        "update",
        "propose",
        "--network",
        s(&genesis),
        "--next",
        s(&next),
        "--out",
        s(&update),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for p in [1u32, 2, 3] {
        let key = dir.join(format!("keys/party-{p}/admin.key"));
        let o = run(&[
            "network",
            "update",
            "sign",
            "--update",
            s(&update),
            "--party",
            &p.to_string(),
            "--key",
            s(&key),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    // The joiner runs before its party is in force: a non-member nobody accepts yet.
    let metrics = format!("127.0.0.1:{}", free_port());
    let log = dir.join("joiner-consenter-5.log");
    let joiner = Joiner::start(&dir, &next, &metrics, &log);
    std::thread::sleep(Duration::from_secs(2));
    let (member, members) = joiner.membership().expect("the joiner's metrics");
    assert_eq!(member, 0.0, "a member before the update");
    assert_eq!(members, 4.0);

    // The update through party 2's router, under load.
    let during = {
        let dir = dir.clone();
        std::thread::spawn(move || up_load(&dir, 1500, 250, "pjb"))
    };
    std::thread::sleep(Duration::from_secs(2));
    let o = run(&[
        "network",
        "update",
        "submit",
        "--update",
        s(&update),
        "--network",
        s(&dir),
        "--json",
        "--router",
        "--party",
        "2",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(last_json(&o)["in_force"], true);
    let start = Instant::now();
    while !epochs(&dir).iter().all(|e| *e == Some(1)) {
        assert!(start.elapsed() < Duration::from_secs(60), "{:?}", epochs(&dir));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_all_committed(&during.join().unwrap(), 1500);
    joiner.wait_member(Duration::from_secs(90));
    // Every genesis consenter sees a set of five.
    for n in network(&dir)["nodes"].as_array().unwrap() {
        if n["role"] == "consenter" {
            let text = scrape(n["metrics"].as_str().unwrap()).unwrap();
            assert_eq!(
                gauge(&text, "fabrx_consenter_set_members"),
                Some(5.0),
                "{}",
                n["name"]
            );
        }
    }

    // Consenter 4 stopped: four of five remain, the joiner among them — the quorum of a
    // set of five is four, so the network orders only with the joiner's votes.
    kill(pid_of(&network(&dir), "consenter-4"));
    assert_all_committed(&up_load(&dir, 300, 150, "pjc"), 300);
    // Party 5's assembler built the whole ledger: the blocks party 1's holds, the same.
    let start = Instant::now();
    loop {
        let (one, five) = (ledger(&dir, 1), ledger(&dir, 5));
        if five.len() >= one.len() && five[..one.len()] == one[..] {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "party 5 holds {} blocks, party 1 {}",
            five.len(),
            one.len()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    // Blocks certified after consenter 4 stopped carry the joiner's signature.
    let out = fabrx(&["blocks", "--party", "1", "--network"], &dir);
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert!(
        last["signers"].as_array().unwrap().iter().any(|s| s == 5),
        "the last block is not signed by the joiner: {last}"
    );
    // Every genesis assembler fetches from party 5's batchers of both shards now.
    for n in network(&dir)["nodes"].as_array().unwrap() {
        if n["role"] == "assembler" {
            let text = std::fs::read_to_string(n["log"].as_str().unwrap()).unwrap();
            assert_eq!(
                text.matches("a joined party's batcher is fetched from from now on")
                    .count(),
                2,
                "{}",
                n["name"]
            );
        }
    }
    // Party 5's batchers started their cores at the decision that added the party.
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        log_text.matches("the batcher starts there").count(),
        2,
        "both of party 5's batchers joined"
    );

    // The joiner restarted comes back a member (its state holds the config that adds it).
    joiner.stop();
    let joiner = Joiner::start(&dir, &next, &metrics, &log);
    joiner.wait_member(Duration::from_secs(60));
    fabrx(&["up", "--json", "--dir"], &dir);
    assert_all_committed(&up_load(&dir, 200, 200, "pjd"), 200);

    // Every block verifies across the switch; one is a config block.
    let out = fabrx(&["blocks", "--party", "1", "--network"], &dir);
    let blocks: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(blocks.len() > 10);
    for b in &blocks {
        assert_eq!(b["verified"], true, "{b}");
    }
    assert_eq!(blocks.iter().filter(|b| b["config"] == true).count(), 1);
    drop(joiner);
}
