//! Load at scale and metrics on every service (issue #14), on one `fabrx up` network
//! (4 parties × 2 shards, a committing party, the token services: 29 processes):
//!
//! - two `fabrx loadgen --target network` processes, `--instance 1|2 --instances 2`, run
//!   at once; `fabrx loadgen merge` of their report directories gives totals equal to the
//!   sum of the parts, and the ledger holds every tx once (no tx id twice);
//! - the rate of a running load changes over HTTP on its `--metrics` port;
//! - after that load and a wallet issue and transfer, every node's `/metrics` is scraped
//!   and the documented throughput metrics of each role have moved.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{fabrx_ok as fabrx, free_base_port, network_json as network};

use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One plain HTTP/1.1 request; the status code and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    sock.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    (code, body.to_owned())
}

/// The sum of every sample of metric `name` (all label sets) in Prometheus text.
fn total(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        *found.get_or_insert(0.0) += v;
    }
    found
}

fn spawn_load(dir: &Path, instance: u32, report: &Path, metrics: Option<&str>) -> std::process::Child {
    let mut cmd = Command::new(cluster::bin());
    cmd.args([
        "loadgen",
        "--target",
        "network",
        "--txs",
        "2400",
        "--rate",
        "400",
        "--block-size",
        "100",
        "--tag",
        "scale",
        "--instances",
        "2",
        "--instance",
        &instance.to_string(),
        "--json",
        "--drain",
        "60",
        "--network",
    ])
    .arg(dir)
    .arg("--report")
    .arg(report)
    .env("RUST_LOG", "warn")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(addr) = metrics {
        cmd.args(["--metrics", addr]);
    }
    cmd.spawn().unwrap()
}

fn finish(child: std::process::Child) -> Value {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "loadgen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster::last_json(&out)
}

fn wallet(dir: &Path, file: &Path, args: &[&str]) -> String {
    let out = Command::new(cluster::bin())
        .args(["wallet", "--network"])
        .arg(dir)
        .arg("--wallet")
        .arg(file)
        .args(["--wait-secs", "60"])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "wallet {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A free loopback port for the loadgen's metrics.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[test]
fn instances_merge_to_the_sum_of_their_parts_and_every_service_reports_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &["up", "--seed", "14", "--base-port", &base, "--json", "--dir"],
        &dir,
    );

    // Two cooperating load processes; the first one's rate is raised while it runs.
    let (r1, r2) = (tmp.path().join("r1"), tmp.path().join("r2"));
    let control = free_addr();
    let one = spawn_load(&dir, 1, &r1, Some(&control));
    let two = spawn_load(&dir, 2, &r2, None);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(&control) {
            s.write_all(b"GET /rate HTTP/1.1\r\n\r\n").unwrap();
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the loadgen's metrics port never opened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        http(&control, "GET", "/rate", ""),
        (200, "200\n".into()),
        "400 tx/s over 2"
    );
    assert_eq!(http(&control, "POST", "/rate", "nonsense").0, 400);
    assert_eq!(http(&control, "POST", "/rate", "-3").0, 400);
    assert_eq!(http(&control, "POST", "/rate", "300"), (200, "300\n".into()));
    let own = http(&control, "GET", "/metrics", "").1;
    assert!(total(&own, "fabrx_loadgen_rate").is_some(), "{own}");
    let (a, b) = (finish(one), finish(two));
    assert_eq!(a["rate_changes"], 1, "{a}");
    assert_eq!(a["final_rate"], 300.0, "{a}");
    for (s, tag) in [(&a, "scale_1"), (&b, "scale_2")] {
        assert_eq!(s["tag"], tag, "{s}");
        assert_eq!(s["sent"], 1200, "each instance sends its half: {s}");
        assert_eq!(s["committed"], 1200, "{s}");
        assert_eq!(s["expected_mismatches"], 0, "{s}");
        assert!(s["client_txs_per_cpu_second"].as_f64().unwrap() > 0.0, "{s}");
    }

    let merged_dir = tmp.path().join("merged");
    let out = fabrx(
        &[
            "loadgen",
            "merge",
            r1.to_str().unwrap(),
            r2.to_str().unwrap(),
            "--json",
            "--report",
        ],
        &merged_dir,
    );
    let m = cluster::last_json(&out);
    for field in [
        "sent",
        "submitted",
        "refused",
        "committed",
        "confirmed",
        "never_confirmed",
    ] {
        assert_eq!(
            m[field].as_u64().unwrap(),
            a[field].as_u64().unwrap() + b[field].as_u64().unwrap(),
            "{field}: {m}"
        );
    }
    assert_eq!(m["instances"], 2);
    assert_eq!(m["missing_instances"], serde_json::json!([]));
    let csv = std::fs::read_to_string(merged_dir.join("per_second.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "committed").unwrap();
    let committed: u64 = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(col).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(committed, 2400, "the merged per-second rows add up");
    assert!(merged_dir.join("report.svg").exists());
    // Merging one instance twice would count its txs twice: refused.
    let again = Command::new(cluster::bin())
        .args(["loadgen", "merge"])
        .args([&r1, &r1])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("twice"));

    // The ledger holds every load tx once: disjoint tx ids across the instances.
    let out = fabrx(&["blocks", "--party", "2", "--tx-ids", "--network"], &dir);
    let mut ids = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let block: Value = serde_json::from_str(line).unwrap();
        assert_eq!(block["verified"], true, "{block}");
        for id in block["tx_ids"].as_array().unwrap() {
            let id = id.as_str().unwrap();
            if id.starts_with("scale_") && !id.contains("-issue-") && !id.ends_with("-meta") {
                ids.push(id.to_owned());
            }
        }
    }
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), 2400, "every load tx is in the ledger");
    assert_eq!(unique.len(), ids.len(), "no tx id twice");

    // The token services: an issue and a transfer through the endorsers and the query
    // service.
    let wallets = dir.join("wallets");
    let alice = wallets.join("alice");
    let bob = wallets.join("bob");
    let to_alice = wallet(&dir, &alice, &["init", "--name", "alice"]);
    let to_bob = wallet(&dir, &bob, &["init", "--name", "bob"]);
    wallet(
        &dir,
        &wallets.join("issuer"),
        &["issue", "--to", &to_alice, "--amount", "50"],
    );
    wallet(&dir, &alice, &["transfer", "--to", &to_bob, "--amount", "20"]);

    // Every node's /metrics: the documented throughput metrics of its role moved.
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md")).unwrap();
    let moving: &[(&str, &[&str])] = &[
        (
            "router",
            &[
                "fabrx_router_requests_admitted_total",
                "fabrx_router_admit_seconds_count",
            ],
        ),
        (
            "batcher",
            &[
                "fabrx_batcher_requests_admitted_total",
                "fabrx_batcher_batches_persisted_total",
                "fabrx_batcher_decisions_total",
                "fabrx_batcher_batch_order_seconds_count",
            ],
        ),
        (
            "consenter",
            &[
                "fabrx_consenter_decisions_total",
                "fabrx_consenter_headers_ordered_total",
                "fabrx_consenter_last_decision",
                "fabrx_consenter_decision_interval_seconds_count",
                "fabrx_consenter_headers_per_decision_count",
                "fabrx_consenter_messages_in_total",
                "fabrx_consenter_messages_out_total",
            ],
        ),
        (
            "assembler",
            &[
                "fabrx_assembler_blocks_appended_total",
                "fabrx_assembler_txs_appended_total",
                "fabrx_assembler_ledger_height",
                "fabrx_assembler_append_seconds_count",
            ],
        ),
        (
            "sidecar",
            &[
                "fabrx_sidecar_blocks_total",
                "fabrx_sidecar_txs_total",
                "fabrx_sidecar_committed_txs_total",
                "fabrx_sidecar_next_block",
                "fabrx_sidecar_block_seconds_count",
            ],
        ),
        (
            "sigverifier",
            &[
                "fabrx_sigverifier_batches_total",
                "fabrx_sigverifier_txs_total",
                "fabrx_sigverifier_batch_seconds_count",
            ],
        ),
        (
            "vcservice",
            &[
                "fabrx_vcservice_batches_total",
                "fabrx_vcservice_txs_total",
                "fabrx_vcservice_backend_calls_total",
            ],
        ),
        (
            "query",
            &["fabrx_query_requests_total", "fabrx_query_latency_seconds_count"],
        ),
        (
            "endorser",
            &[
                "fabrx_endorser_requests_total",
                "fabrx_endorser_latency_seconds_count",
            ],
        ),
    ];
    let net = network(&dir);
    let nodes = net["nodes"].as_array().unwrap();
    let mut roles_seen = BTreeSet::new();
    for node in nodes {
        let role = node["role"].as_str().unwrap();
        let (_, names) = moving
            .iter()
            .find(|(r, _)| *r == role)
            .unwrap_or_else(|| panic!("no metrics listed for role {role}"));
        let addr = node["metrics"].as_str().unwrap();
        let (code, text) = http(addr, "GET", "/metrics", "");
        assert_eq!(code, 200, "{}", node["name"]);
        // One naming scheme: every sample is fabrx_<role>_…, or one of the metrics every
        // node exports (fabrx_build_info, process_*) or a node with a data directory
        // (fabrx_data_dir_*), and carries the node's party.
        let party = format!("party=\"{}\"", node["party"]);
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            assert!(
                line.starts_with(&format!("fabrx_{role}_"))
                    || line.starts_with("fabrx_build_info{")
                    || line.starts_with("process_")
                    || line.starts_with("fabrx_data_dir_"),
                "{}: {line}",
                node["name"]
            );
            assert!(line.contains(&party), "{}: {line} lacks {party}", node["name"]);
        }
        assert!(
            text.lines()
                .any(|l| l.starts_with("fabrx_build_info{") && l.contains(&format!("role=\"{role}\""))),
            "{}: no fabrx_build_info for its role",
            node["name"]
        );
        assert!(
            text.contains("process_cpu_seconds_total{"),
            "{}: no process metrics",
            node["name"]
        );
        for name in *names {
            let doc_name = name
                .strip_suffix("_count")
                .unwrap_or(name)
                .replace(&format!("fabrx_{role}_"), "_");
            assert!(
                docs.contains(*name) || docs.contains(&doc_name),
                "{name} is not in docs/metrics.md"
            );
            // The wallet needs t of the n endorsers (counted below); every other
            // node sees the load.
            if role == "endorser" {
                continue;
            }
            let v = total(&text, name).unwrap_or_else(|| panic!("{} has no {name}:\n{text}", node["name"]));
            assert!(v > 0.0, "{}: {name} did not move ({v})", node["name"]);
        }
        roles_seen.insert(role.to_owned());
    }
    assert_eq!(roles_seen.len(), moving.len(), "every role ran: {roles_seen:?}");
    // At least t = 3 endorsers signed.
    let signed = nodes
        .iter()
        .filter(|n| n["role"] == "endorser")
        .filter(|n| {
            let text = http(n["metrics"].as_str().unwrap(), "GET", "/metrics", "").1;
            total(&text, "fabrx_endorser_requests_total").unwrap_or(0.0) > 0.0
        })
        .count();
    assert!(signed >= 3, "{signed} endorsers answered");
}
