//! Byzantine ordering as separate processes (docs/ordering-faults.md): a real `fabrx up`
//! network (4 parties × 2 shards, mutual TLS, ordering only). Party 1's batcher of shard
//! 0 is the primary of term 0. It is restarted as a Byzantine batcher
//! (`fabrx node batcher --byzantine withhold:2`, built only with the `testing` feature).
//! It serves its batches to party 2's batcher alone, so they are ordered with two
//! attestations (f + 1). It keeps every other batcher's and every assembler's pull open
//! and silent, and answers every fetch with forged requests under the ordered id and
//! digest.
//!
//! Every party's assembler must still deliver every block. It gets the batches from party
//! 2's batcher, the one correct holder, or from another assembler that has them. Every
//! tx of the load must be in every party's ledger, in blocks that verify. The secondaries
//! that never get the primary's batches may complain it out of its term; the blocks of
//! its term must be delivered all the same.
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
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

#[test]
fn a_withholding_and_forging_primary_stalls_no_assembler() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    let up = Command::new(bin())
        .args([
            "up",
            "--committers",
            "0",
            "--no-token",
            "--seed",
            "11",
            "--base-port",
            &base,
            "--dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));

    // Party 1's batcher of shard 0, restarted Byzantine with the same command line.
    let net: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("network.json")).unwrap()).unwrap();
    let node = net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "batcher-1-0")
        .unwrap()
        .clone();
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
    let mut child = Command::new(bin())
        .args(&argv[1..])
        .args(["--byzantine", "withhold:2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let byzantine = KillOnDrop(child);
    let mut ready = String::new();
    std::io::BufReader::new(stdout).read_line(&mut ready).unwrap();
    assert!(ready.contains("\"ready\":\"batcher\""), "{ready}");

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
        &dir,
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
        let all: Vec<Vec<serde_json::Value>> = (1..=4).map(|p| blocks(&dir, p)).collect();
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
    drop(byzantine);
}
