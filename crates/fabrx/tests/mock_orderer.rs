//! The committer across processes fed by the mock orderer (issue #12):
//! `fabrx up --no-orderer` starts only the committing party (sidecar, verifier,
//! vcservice); `fabrx loadgen --target mock-orderer` serves a workload with double
//! spends and forged signatures as signed ordered blocks on party 1's assembler
//! endpoint; every tx gets the serial oracle's status.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{bin, free_base_port};

use std::process::Command;

#[test]
fn the_committer_commits_what_a_mock_orderer_serves_as_the_oracle_says() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    let up = Command::new(bin())
        .args([
            "up",
            "--no-orderer",
            "--seed",
            "4",
            "--base-port",
            &base,
            "--json",
            "--dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    assert_eq!(
        String::from_utf8_lossy(&up.stdout).lines().count(),
        3,
        "only the committer's nodes"
    );
    let load = Command::new(bin())
        .args([
            "loadgen",
            "--target",
            "mock-orderer",
            "--blocks",
            "15",
            "--block-size",
            "200",
            "--conflict-rate",
            "0.1",
            "--invalid-sig-rate",
            "0.05",
            "--verify-serial",
            "--drain",
            "60",
            "--network",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(load.status.success(), "{}", String::from_utf8_lossy(&load.stderr));
    let s = cluster::last_json(&load);
    assert_eq!(s["txs"], 3000, "{s}");
    assert_eq!(s["never_confirmed"], 0, "{s}");
    assert_eq!(s["serial_mismatches"], 0, "{s}");
    assert!(s["aborted"]["ABORTED_MVCC_CONFLICT"].as_u64().unwrap() > 0, "{s}");
    assert!(
        s["aborted"]["ABORTED_SIGNATURE_INVALID"].as_u64().unwrap() > 0,
        "{s}"
    );
    let down = Command::new(bin())
        .args(["down", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(down.status.success());
}
