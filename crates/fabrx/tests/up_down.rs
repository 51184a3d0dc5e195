//! `fabrx up / status / down` (docs/contracts.md "Contracts", docs/network.md) for an
//! ordering-only network (`--committers 0`, 4 parties × 2 shards, 20 processes):
//! `up` returns once every node printed its ready line and writes `network.json` with
//! every contract field; requests sent to the routers come out of `fabrx blocks`; a node
//! killed by pid is started again by another `up` (the others are left running) and
//! catches up; `loadgen --target network` confirms its txs by the assemblers' blocks;
//! `down` stops every process. The committing side: tests/network_e2e.rs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{bin, free_base_port, submit_stream};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn fabrx(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

fn network(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("network.json")).unwrap()).unwrap()
}

fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// The tx ids in party `party`'s blocks (`fabrx blocks --tx-ids`), once `count` are there.
fn tx_ids_until(dir: &Path, party: u32, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new(bin())
            .args(["blocks", "--tx-ids", "--party", &party.to_string(), "--network"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .inspect(|b| assert_eq!(b["verified"], true, "{b}"))
            .flat_map(|b| {
                b["tx_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        if ids.len() >= count {
            return ids;
        }
        assert!(
            Instant::now() < deadline,
            "only {} tx ids in party {party}'s blocks",
            ids.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The body of `GET /metrics` at `addr` (plain HTTP/1.1).
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // One write: the endpoint answers after its first read.
    let request = format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    sock.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    sock.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The value of metric `name` in `text`, whose labels must include `labels`.
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"));
    for label in labels {
        assert!(line.contains(label), "{label} not in {line}");
    }
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The `/metrics` address of node `name`.
fn metrics_of(net: &serde_json::Value, name: &str) -> String {
    let node = net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap();
    node["metrics"].as_str().unwrap().to_owned()
}

fn send(net: &serde_json::Value, from: u64, count: u64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let requests: Vec<Vec<u8>> = (from..from + count).map(envelope::envelope).collect();
    for node in net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["role"] == "router")
    {
        let uri = format!("http://{}", node["listen"].as_str().unwrap());
        let answers = rt.block_on(submit_stream(uri, requests.clone()));
        assert_eq!(answers.len(), requests.len(), "{node}");
    }
}

#[test]
fn up_starts_an_ordering_network_status_shows_it_and_down_stops_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    let up = fabrx(
        &[
            "up",
            "--committers",
            "0",
            // The test's own clients speak plain HTTP/2 (TLS: tests/tls_links.rs).
            "--insecure",
            "--seed",
            "5",
            "--base-port",
            &base,
            "--json",
        ],
        &dir,
    );
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let net = network(&dir);
    assert_eq!(
        (net["parties"].as_u64(), net["shards"].as_u64()),
        (Some(4), Some(2))
    );
    let nodes = net["nodes"].as_array().unwrap().clone();
    assert_eq!(nodes.len(), 20);
    for n in &nodes {
        for field in [
            "name", "role", "party", "shard", "pid", "argv", "cwd", "listen", "metrics", "data_dir", "log",
        ] {
            assert!(n.get(field).is_some(), "{field} missing in {n}");
        }
        assert!(alive(n["pid"].as_u64().unwrap()), "{n}");
        assert_eq!(n["shard"].is_null(), n["role"] != "batcher", "{n}");
    }
    // Every node serves /metrics on its own loopback port, none a node's port.
    let listens: std::collections::BTreeSet<&str> =
        nodes.iter().map(|n| n["listen"].as_str().unwrap()).collect();
    let metrics: std::collections::BTreeSet<&str> = nodes
        .iter()
        .map(|n| {
            n["metrics"]
                .as_str()
                .unwrap_or_else(|| panic!("no metrics in {n}"))
        })
        .collect();
    assert_eq!(metrics.len(), nodes.len(), "one metrics address per node");
    assert!(
        metrics
            .iter()
            .all(|m| m.starts_with("127.0.0.1:") && !listens.contains(m))
    );

    send(&net, 0, 50);
    let ids = tx_ids_until(&dir, 1, 50);
    assert_eq!(ids.len(), 50, "each request once");

    // The documented metrics moved (docs/metrics.md).
    let router = scrape(&metrics_of(&net, "router-1"));
    assert!(metric(&router, "fabrx_router_requests_admitted_total", &["party=\"1\""]) > 0.0);
    let assembler = scrape(&metrics_of(&net, "assembler-1"));
    let party1 = ["party=\"1\""];
    assert_eq!(
        metric(&assembler, "fabrx_assembler_txs_appended_total", &party1),
        50.0
    );
    let height = metric(&assembler, "fabrx_assembler_ledger_height", &party1);
    let blocks = metric(&assembler, "fabrx_assembler_blocks_appended_total", &party1);
    assert!(
        height > 0.0 && height == blocks,
        "height {height}, blocks {blocks}"
    );
    let batcher = scrape(&metrics_of(&net, "batcher-2-1"));
    let labels = ["party=\"2\"", "shard=\"1\""];
    assert!(metric(&batcher, "fabrx_batcher_batches_persisted_total", &labels) > 0.0);
    let consenter = scrape(&metrics_of(&net, "consenter-4"));
    assert!(
        metric(
            &consenter,
            "fabrx_consenter_headers_ordered_total",
            &["party=\"4\""]
        ) > 0.0
    );

    // Kill a consenter and an assembler by pid; `up` starts them again, alone.
    let pid_of = |net: &serde_json::Value, name: &str| {
        net["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap()["pid"]
            .as_u64()
            .unwrap()
    };
    for name in ["consenter-3", "assembler-2"] {
        Command::new("kill")
            .args(["-KILL", &pid_of(&net, name).to_string()])
            .status()
            .unwrap();
    }
    let status = fabrx(&["status", "--json"], &dir);
    let down: Vec<String> = String::from_utf8_lossy(&status.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|n| n["state"] == "down")
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(down, ["consenter-3", "assembler-2"]);
    // Flags of a new network that contradict the one in the directory are refused (they
    // would be ignored); the same values are fine.
    let clash = fabrx(
        &["up", "--committers", "0", "--parties", "7", "--shards", "2"],
        &dir,
    );
    assert!(!clash.status.success());
    let why = String::from_utf8_lossy(&clash.stderr);
    assert!(
        why.contains("--parties 7 (it has 4)") && !why.contains("--shards"),
        "{why}"
    );
    let clash = fabrx(&["up", "--committers", "1"], &dir);
    assert!(!clash.status.success());
    let why = String::from_utf8_lossy(&clash.stderr);
    assert!(why.contains("--committers 1 (it runs 0)"), "{why}");
    // Without the flags, `up` starts what network.json records of this network (no
    // committer, no token application), not the defaults of a new one.
    let again = fabrx(&["up", "--shards", "2", "--json"], &dir);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let restarted = network(&dir);
    assert_eq!(
        restarted["nodes"].as_array().unwrap().len(),
        nodes.len(),
        "{restarted}"
    );
    for n in nodes.iter() {
        let name = n["name"].as_str().unwrap();
        let same = pid_of(&restarted, name) == n["pid"].as_u64().unwrap();
        assert_eq!(same, !["consenter-3", "assembler-2"].contains(&name), "{name}");
        assert_eq!(
            metrics_of(&restarted, name),
            n["metrics"].as_str().unwrap(),
            "{name}"
        );
    }
    send(&restarted, 50, 30);
    assert_eq!(tx_ids_until(&dir, 2, 80).len(), 80);

    // Without a committer the load generator confirms txs by their ordering.
    let load = Command::new(bin())
        .args([
            "loadgen",
            "--target",
            "network",
            "--txs",
            "300",
            "--block-size",
            "100",
            "--json",
            "--network",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(load.status.success(), "{}", String::from_utf8_lossy(&load.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&load.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(summary["confirmed_by"], "orderer", "{summary}");
    assert_eq!(summary["ordered"], 300, "{summary}");
    assert_eq!(summary["never_confirmed"], 0, "{summary}");

    let stopped = fabrx(&["down"], &dir);
    assert!(stopped.status.success());
    for n in restarted["nodes"].as_array().unwrap() {
        assert!(!alive(n["pid"].as_u64().unwrap()), "{n} still runs");
    }
}
