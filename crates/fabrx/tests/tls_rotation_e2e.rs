//! Every ordering node's TLS certificate rotated by two config updates under load, no
//! node restarted (ADR 0019, docs/reconfiguration.md "Rotating TLS certificates"), in a
//! network `fabrx up` started (4 parties × 1 shard and a committing party, every node a
//! process, mutual TLS on every link):
//!
//! * update A (`fabrx network tls add`): each router, batcher, consenter and assembler
//!   gets a new certificate from the network CA, listed beside its old one; at the switch
//!   each node presents the new one (routers: when they next ask the consenters);
//! * update B (`fabrx network tls retire`): the old certificates are removed; the
//!   connections still made with them are closed and made again with the new ones.
//!
//! A load runs across both switches and another after them: every tx is committed once;
//! every node is the same process at the end; `fabrx blocks` verifies every block and
//! shows the two config blocks; after B a call presenting a node's old certificate is
//! refused and one presenting its new certificate is served; a router restarted from the
//! genesis config finds its way back to its new certificate. An update that replaces a
//! certificate without an overlap is refused.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::update::{assert_acknowledged_committed, current, ok, order, run, s, wait_epoch};
use cluster::{
    assert_all_committed, fabrx_ok as fabrx, free_base_port, network_json as network, pid_in, up_load,
};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// The ordering nodes of the network (name, pid, log path).
fn ordering_nodes(dir: &Path) -> Vec<(String, u64, PathBuf)> {
    let net = network(dir);
    net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| ["router", "batcher", "consenter", "assembler"].contains(&n["role"].as_str().unwrap()))
        .map(|n| {
            let name = n["name"].as_str().unwrap().to_owned();
            (
                name.clone(),
                pid_in(&net, &name),
                PathBuf::from(n["log"].as_str().unwrap()),
            )
        })
        .collect()
}

/// Waits until the log of every node holds `text` (`count` times at least).
fn wait_logged(nodes: &[(String, u64, PathBuf)], text: &str, count: usize) {
    let start = Instant::now();
    loop {
        let missing: Vec<&str> = nodes
            .iter()
            .filter(|(_, _, log)| {
                std::fs::read_to_string(log)
                    .unwrap_or_default()
                    .matches(text)
                    .count()
                    < count
            })
            .map(|(n, _, _)| n.as_str())
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{missing:?} did not log {text:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `BftConsensus.Status` on the consenter at `listen`, presenting the certificate `cert`
/// (`<dir>/tls/<cert>.pem|key`).
async fn status_as(dir: &Path, listen: &str, cert: &str) -> Result<(), tonic::Status> {
    let tls = dir.join("tls");
    let config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(tls.join("ca.pem")).unwrap()))
        .domain_name(wire::tls::SERVER_NAME)
        .identity(Identity::from_pem(
            std::fs::read(tls.join(format!("{cert}.pem"))).unwrap(),
            std::fs::read(tls.join(format!("{cert}.key"))).unwrap(),
        ));
    let channel = Endpoint::from_shared(format!("https://{listen}"))
        .unwrap()
        .tls_config(config)
        .unwrap()
        .connect_lazy();
    wire::pb::bft_consensus_client::BftConsensusClient::new(channel)
        .status(wire::pb::BftStatusRequest { with_config: false })
        .await
        .map(|_| ())
}

#[test]
fn every_ordering_node_certificate_rotates_under_load_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    // FABRX_KEEP_NET=1 keeps the network directory (logs) after the test.
    let root = if std::env::var_os("FABRX_KEEP_NET").is_some() {
        tmp.keep()
    } else {
        tmp.path().to_path_buf()
    };
    let dir = root.join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &[
            "up",
            "--seed",
            "27",
            "--shards",
            "1",
            "--no-token",
            "--base-port",
            &base,
            "--json",
            "--dir",
        ],
        &dir,
    );
    let nodes = ordering_nodes(&dir);
    assert_eq!(nodes.len(), 16, "{nodes:?}");
    let genesis = dir.join("config/network-config.json");

    // Refused: a node's certificate replaced in one update (no overlap).
    let swapped = dir.join("swap.next.json");
    ok(&run(&[
        "network",
        "tls",
        "add",
        "--network",
        s(&dir),
        "--node",
        "router-3",
        "--out",
        s(&swapped),
    ]));
    let mut next: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&swapped).unwrap()).unwrap();
    next["tls"]["certificates"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["name"] != "router-3");
    std::fs::write(&swapped, serde_json::to_string_pretty(&next).unwrap()).unwrap();
    let o = run(&[
        "network",
        "update",
        "propose",
        "--network",
        s(&genesis),
        "--next",
        s(&swapped),
        "--out",
        s(&dir.join("swap.update.json")),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("replaces every TLS certificate of party 3's router"),
        "{stderr}"
    );
    std::fs::remove_file(dir.join("tls/router-3.next.pem")).unwrap();
    std::fs::remove_file(dir.join("tls/router-3.next.key")).unwrap();

    // Update A under load: every ordering node's next certificate.
    let during = {
        let dir = dir.clone();
        std::thread::spawn(move || up_load(&dir, 3000, 200, "tra"))
    };
    std::thread::sleep(Duration::from_secs(2));
    let next_a = dir.join("a.next.json");
    let out = ok(&run(&[
        "network",
        "tls",
        "add",
        "--network",
        s(&dir),
        "--out",
        s(&next_a),
    ]));
    assert!(out.contains("issued 16 certificates"), "{out}");
    let o = order(&dir, &genesis, &next_a, "a", &[1, 2, 4]);
    ok(&o);
    wait_epoch(&dir, 1);
    // Every ordering node presents its new certificate (routers within a poll).
    wait_logged(&nodes, "this node presents its certificate", 1);

    // Update B, still under the same load: the old certificates removed.
    let in_force = current(&dir, "in-force-1.json");
    let next_b = dir.join("b.next.json");
    let out = ok(&run(&[
        "network",
        "tls",
        "retire",
        "--network",
        s(&in_force),
        "--out",
        s(&next_b),
    ]));
    assert!(out.contains("retired 16 certificates"), "{out}");
    ok(&order(&dir, &in_force, &next_b, "b", &[1, 2, 4]));
    wait_epoch(&dir, 2);
    assert_acknowledged_committed(&during.join().unwrap(), 3000);
    // Every node follows B's table (routers within a poll), and ordering goes on with the
    // new certificates alone.
    wait_logged(&nodes, "authorize callers from now on", 2);
    assert_all_committed(&up_load(&dir, 400, 200, "trb"), 400);

    // No node was restarted.
    for (name, pid, _) in ordering_nodes(&dir) {
        let before = nodes.iter().find(|(n, _, _)| *n == name).unwrap().1;
        assert_eq!(pid, before, "{name} was restarted");
    }

    // An old certificate is refused; the new one is served.
    let net = network(&dir);
    let listen = net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "consenter-2")
        .unwrap()["listen"]
        .as_str()
        .unwrap()
        .to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for old in ["consenter-1", "batcher-3-0"] {
        // Refused at the handshake: the call never reaches a service.
        let refused = rt.block_on(status_as(&dir, &listen, old)).unwrap_err();
        assert!(
            std::error::Error::source(&refused).is_some_and(|e| e.is::<tonic::transport::Error>()),
            "{old}: {refused:?}"
        );
        let new = format!("{old}.next");
        rt.block_on(status_as(&dir, &listen, &new))
            .unwrap_or_else(|e| panic!("{new} refused: {e:?}"));
    }

    // A router restarted after the rotation (from the genesis config, as `fabrx up`
    // starts it) presents its old certificate first, falls back to its new one when the
    // consenters refuse it, learns the config in force and serves again.
    cluster::kill_and_wait(pid_in(&network(&dir), "router-2"));
    fabrx(&["up", "--json", "--dir"], &dir);
    let restarted: Vec<_> = ordering_nodes(&dir)
        .into_iter()
        .filter(|(n, _, _)| n == "router-2")
        .collect();
    wait_logged(&restarted, "this node presents its certificate router-2.next", 2);
    assert_all_committed(&up_load(&dir, 300, 200, "trc"), 300);

    // Every block verifies across both switches; two are config blocks.
    let out = fabrx(&["blocks", "--party", "2", "--network"], &dir);
    let blocks: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(blocks.len() > 10);
    for b in &blocks {
        assert_eq!(b["verified"], true, "{b}");
    }
    assert_eq!(blocks.iter().filter(|b| b["config"] == true).count(), 2);
}
