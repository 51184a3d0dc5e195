//! The whole network end to end (issue #12): `fabrx up` with its default committing
//! party (4 parties × 2 shards, 23 processes), `fabrx loadgen --target network` whose
//! txs are ordered, assembled, verified by the sidecar and committed — every tx
//! `COMMITTED` exactly once. The sidecar, killed and started again by `up`, resumes at
//! the block after its store; with its own party's assembler down it reads another
//! party's; the committed blocks are the verified chain `fabrx blocks` shows.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{
    fabrx_ok as fabrx, free_base_port, kill_and_wait as kill, last_json, network_json as network,
    pid_in as pid_of,
};

use std::path::Path;

/// Runs a load of `txs` and returns its summary line.
fn load(dir: &Path, txs: usize, tag: &str) -> serde_json::Value {
    let out = fabrx(
        &[
            "loadgen",
            "--target",
            "network",
            "--txs",
            &txs.to_string(),
            "--block-size",
            "100",
            "--tag",
            tag,
            "--json",
            "--drain",
            "60",
            "--network",
        ],
        dir,
    );
    last_json(&out)
}

fn assert_all_committed(summary: &serde_json::Value, txs: u64) {
    assert_eq!(summary["confirmed_by"], "committer", "{summary}");
    assert_eq!(summary["sent"], txs, "{summary}");
    assert_eq!(summary["submitted"], txs, "{summary}");
    assert_eq!(summary["committed"], txs, "{summary}");
    assert_eq!(summary["never_confirmed"], 0, "{summary}");
    assert_eq!(summary["aborted"], serde_json::json!({}), "{summary}");
}

/// The committed block numbers and tx counts in the sidecar's store, by asking the
/// chain: every block `fabrx blocks` shows verifies, and its txs are the load's.
fn verified_chain(dir: &Path) -> Vec<serde_json::Value> {
    let out = fabrx(&["blocks", "--party", "3", "--tx-ids", "--network"], dir);
    let blocks: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for b in &blocks {
        assert_eq!(b["verified"], true, "{b}");
    }
    blocks
}

#[test]
fn txs_sent_to_the_routers_are_committed_once_through_restarts_and_failover() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &["up", "--seed", "9", "--base-port", &base, "--json", "--dir"],
        &dir,
    );
    let net = network(&dir);
    let roles: Vec<&str> = net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["role"].as_str().unwrap())
        .collect();
    // 20 ordering nodes, one committing party, its query service and five endorsers.
    assert_eq!(roles.len(), 29);
    for role in ["sidecar", "sigverifier", "vcservice", "query"] {
        assert_eq!(roles.iter().filter(|r| **r == role).count(), 1, "{role}");
    }
    assert_eq!(roles.iter().filter(|r| **r == "endorser").count(), 5);

    assert_all_committed(&load(&dir, 600, "e2ea"), 600);
    // `status` shows heights: blocks held by the assemblers, the sidecar's next block.
    let status = fabrx(&["status", "--json", "--dir"], &dir);
    let heights: std::collections::HashMap<String, u64> = String::from_utf8_lossy(&status.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|n| Some((n["name"].as_str()?.to_owned(), n["height"].as_u64()?)))
        .collect();
    assert!(heights["assembler-1"] > 0, "{heights:?}");
    assert!(
        heights["sidecar-1"] > 0 && heights["consenter-1"] > 0,
        "{heights:?}"
    );

    // The sidecar killed and restarted: it resumes after its store.
    kill(pid_of(&net, "sidecar-1"));
    fabrx(&["up", "--json", "--dir"], &dir);
    let out = std::fs::read_to_string(dir.join("logs/sidecar-1.out")).unwrap();
    let ready: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert!(ready["next_block"].as_u64().unwrap() > 0, "{ready}");
    assert_all_committed(&load(&dir, 400, "e2eb"), 400);

    // Its own party's assembler down: the sidecar reads another party's.
    let net = network(&dir);
    kill(pid_of(&net, "assembler-1"));
    assert_all_committed(&load(&dir, 400, "e2ec"), 400);
    let log = std::fs::read_to_string(dir.join("logs/sidecar-1.log")).unwrap();
    assert!(log.contains("trying the next"), "the sidecar failed over");

    // What was committed is the verified chain, each load tx in it once.
    let blocks = verified_chain(&dir);
    let ids: Vec<String> = blocks
        .iter()
        .flat_map(|b| b["tx_ids"].as_array().unwrap().clone())
        .map(|t| t.as_str().unwrap().to_owned())
        .filter(|t| t.starts_with("e2e"))
        .collect();
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no tx ordered twice");
    // Load txs plus each run's genesis (namespace, issuance).
    assert!(ids.len() >= 1400, "{}", ids.len());

    fabrx(&["down", "--dir"], &dir);
}
