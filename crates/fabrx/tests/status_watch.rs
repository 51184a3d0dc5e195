//! `fabrx status --watch` (docs/metrics.md "Watching a network") over a hand-written
//! `network.json`: a router whose `/metrics` the test serves (its counter grows by 100
//! per scrape), a batcher whose metrics port nobody listens on, a consenter without a
//! metrics address. With stdout not a terminal it prints one table per interval (no
//! screen clearing); the router gets a rate from the second table on, the others say
//! down / no-metrics; SIGINT ends it with success.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> String {
    std::env::var("FABRX_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_fabrx").to_owned())
}

/// Serves `/metrics` on a loopback port: scrape k sees the admitted counter at 100·k.
fn serve_router_metrics() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for (k, sock) in listener.incoming().enumerate() {
            let Ok(mut sock) = sock else { continue };
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf);
            let body = format!(
                "# TYPE fabrx_router_requests_admitted_total counter\n\
                 fabrx_router_requests_admitted_total{{party=\"1\"}} {}\n\
                 fabrx_router_in_flight_requests{{party=\"1\",shard=\"0\"}} 2\n\
                 fabrx_router_in_flight_requests{{party=\"1\",shard=\"1\"}} 3\n",
                100 * (k + 1)
            );
            let _ = write!(
                sock,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

fn node(name: &str, role: &str, shard: Option<u32>, metrics: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "name": name, "role": role, "party": 1, "shard": shard, "pid": 0,
        "argv": ["fabrx"], "cwd": ".", "listen": "127.0.0.1:1", "metrics": metrics,
        "data_dir": ".", "log": "x.log",
    })
}

#[test]
fn watch_prints_a_table_per_interval_with_rates_and_down_nodes_and_stops_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let router = serve_router_metrics();
    let nobody = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let net = serde_json::json!({
        "parties": 1, "shards": 1,
        "nodes": [
            node("router-1", "router", None, Some(&router)),
            node("batcher-1-0", "batcher", Some(0), Some(&nobody)),
            node("consenter-1", "consenter", None, None),
        ],
    });
    std::fs::write(dir.path().join("network.json"), net.to_string()).unwrap();

    let mut child = Command::new(bin())
        .args(["status", "--watch", "--interval", "1", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(64);
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Three tables: header, three rows, a blank line each.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    while lines.iter().filter(|l: &&String| l.starts_with("NODE")).count() < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        lines.push(rx.recv_timeout(left).expect("three tables before the deadline"));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");

    let text = lines.join("\n");
    assert!(
        !text.contains('\x1b'),
        "no screen clearing without a terminal:\n{text}"
    );
    let rows = |name: &str| -> Vec<Vec<&str>> {
        lines
            .iter()
            .filter(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().collect())
            .collect()
    };
    let routers = rows("router-1");
    assert_eq!(routers.len(), 2, "{text}");
    assert_eq!(
        routers[0],
        ["router-1", "router", "1", "up", "-", "in", "flight", "5"]
    );
    assert_eq!(routers[1][..4], ["router-1", "router", "1", "up"]);
    let rate: f64 = routers[1][4].parse().unwrap();
    // 100 more per scrape, scrapes about a second apart.
    assert!((30.0..300.0).contains(&rate), "rate {rate}:\n{text}");
    assert_eq!(routers[1][5..], ["in", "flight", "5"]);
    for b in rows("batcher-1-0") {
        assert_eq!(b, ["batcher-1-0", "batcher", "1/0", "down", "-", "-"]);
    }
    for c in rows("consenter-1") {
        assert_eq!(c, ["consenter-1", "consenter", "1", "no-metrics", "-", "-"]);
    }
}
