//! Faults under a steady load (issue #12, "Done when"): a network of 4 parties × 2
//! shards with one committing party (`fabrx up`, 23 processes) carries an open-loop
//! load (`fabrx loadgen --target network --rate …`, 5 % forged signatures) while one node
//! at a time is killed with SIGKILL and started again by `fabrx up`: a router, the
//! primary batcher of shard 0, a secondary batcher, a consenter, an assembler, the
//! sidecar, the signature verifier and the vcservice. Afterwards:
//!
//! - every submitted tx has its final status, and it is the serial oracle's (the
//!   planner's intent: with no double spends a tx's status does not depend on order);
//! - every assembler holds the same verified chain (a tx ordered twice, which Arma
//!   allows around a term change, is reported; the committer commits it once);
//! - the routers that answered with errors are only those of the parties whose router
//!   or batcher was killed.
//!
//! `FAULT_RATE` (txs/s, default 150) and `FAULT_PAUSE_MS` (between kills, default 2500)
//! size it; the default run takes about a minute on two cores.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{
    bin, fabrx_ok as fabrx, free_base_port, kill_and_wait as kill, last_json, network_json, pid_in,
};

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Party `p`'s blocks: (number, hash, tx ids), each verified.
fn chain(dir: &Path, p: u32) -> Vec<(u64, String, Vec<String>)> {
    let out = fabrx(
        &["blocks", "--tx-ids", "--party", &p.to_string(), "--network"],
        dir,
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|b| {
            assert_eq!(b["verified"], true, "party {p}: {b}");
            let ids = b["tx_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect();
            (
                b["number"].as_u64().unwrap(),
                b["hash"].as_str().unwrap().to_owned(),
                ids,
            )
        })
        .collect()
}

#[test]
fn a_loaded_network_survives_killing_each_kind_of_node() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &[
            "up",
            "--seed",
            "11",
            "--base-port",
            &base,
            "--no-token",
            "--json",
            "--dir",
        ],
        &dir,
    );

    let rate = env_or("FAULT_RATE", 150);
    let pause = Duration::from_millis(env_or("FAULT_PAUSE_MS", 2500));
    // The victims, in order; each party's router and batchers noted to judge errors.
    let victims = [
        "router-2",
        "batcher-1-0", // shard 0's primary in term 0
        "batcher-3-0", // a secondary of shard 0
        "consenter-3",
        "assembler-1", // the sidecar's own party's assembler
        "sidecar-1",
        "sigverifier-1",
        "vcservice-1",
    ];
    let load_secs = (victims.len() as u64 + 2) * pause.as_millis() as u64 / 1000 + 2;
    let txs = rate * load_secs;
    let load = Command::new(bin())
        .args([
            "loadgen",
            "--target",
            "network",
            "--rate",
            &rate.to_string(),
            "--txs",
            &txs.to_string(),
            "--block-size",
            "500",
            "--invalid-sig-rate",
            "0.05",
            "--tag",
            "faults",
            "--drain",
            "120",
            "--json",
            "--network",
        ])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let the genesis commit and the load start.
    std::thread::sleep(pause * 2);
    for name in victims {
        kill(pid_in(&network_json(&dir), name));
        std::thread::sleep(Duration::from_millis(300));
        fabrx(&["up", "--no-token", "--json", "--dir"], &dir);
        eprintln!("killed and restarted {name}");
        std::thread::sleep(pause);
    }
    let out = load.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = last_json(&out);
    eprintln!("{summary}");
    let sent = summary["sent"].as_u64().unwrap();
    assert_eq!(sent, txs, "{summary}");
    assert_eq!(summary["refused"], 0, "{summary}");
    assert_eq!(summary["never_confirmed"], 0, "{summary}");
    assert_eq!(summary["confirmed"], sent, "{summary}");
    assert_eq!(summary["expected_mismatches"], 0, "{summary}");
    let forged = summary["aborted"]["ABORTED_SIGNATURE_INVALID"]
        .as_u64()
        .unwrap_or(0);
    assert!(forged > 0, "the forged signatures were judged: {summary}");
    assert_eq!(summary["committed"].as_u64().unwrap() + forged, sent, "{summary}");
    // Errors only from the routers of parties whose router or batcher was killed. An
    // `AlreadyExists` answer is none: a healthy router saying it holds a tx the client
    // sent again after another router failed it (the summary lists every refusing answer).
    let erring: BTreeSet<String> = summary["router_errors"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| !k.ends_with(": AlreadyExists"))
        .map(|k| k.split(':').next().unwrap().to_owned())
        .collect();
    let allowed: BTreeSet<String> = ["router 1", "router 2", "router 3"].map(String::from).into();
    assert!(erring.is_subset(&allowed), "{erring:?}");

    // Every assembler holds the same verified chain (up to the shortest), each tx once.
    let chains: Vec<_> = (1..=4).map(|p| chain(&dir, p)).collect();
    let shortest = chains.iter().map(Vec::len).min().unwrap();
    assert!(shortest > 0);
    for c in &chains[1..] {
        for (a, b) in chains[0][..shortest].iter().zip(&c[..shortest]) {
            assert_eq!((a.0, &a.1), (b.0, &b.1), "the assemblers' chains differ");
        }
    }
    let longest = chains.iter().max_by_key(|c| c.len()).unwrap();
    // A tx may be ordered twice around a term change (Arma does not promise
    // otherwise); the committer keeps the first and rejects the repeat as a duplicate id,
    // so it is committed once: its single status above is the proof.
    let mut seen: HashMap<&str, u64> = HashMap::new();
    let mut repeats = 0;
    for (number, _, ids) in longest {
        for id in ids {
            if let Some(first) = seen.insert(id, *number) {
                eprintln!("tx {id} ordered in blocks {first} and {number}");
                repeats += 1;
            }
        }
    }
    eprintln!("{repeats} txs ordered twice");
    let load_ids = seen.keys().filter(|id| id.starts_with("faults-")).count() as u64;
    assert!(
        load_ids >= sent,
        "{load_ids} load and genesis txs in the chain, {sent} sent"
    );

    fabrx(&["down", "--dir"], &dir);
}
