//! A config update ordered under load (docs/reconfiguration.md), in a network `fabrx up`
//! started (4 parties × 2 shards and a committing party, every node a process): while
//! `fabrx loadgen` sends, the operators propose a change of `batching.batch_timeout_ms`,
//! three of four admins sign it and `fabrx network update submit --router` hands it to
//! a router, which hands it on to the consenters (an update two admins signed is refused
//! the same way through a router as through a consenter). Every consenter reaches config epoch 1 at the same decision; batchers,
//! assemblers and the sidecar follow the new consenter set (decisions after the switch
//! are certified under it), so every tx of the load — before, during and after the
//! switch — is committed once; `fabrx blocks` verifies every block across the switch
//! and shows one config block; a sidecar, a consenter, a batcher and an assembler
//! restarted after the switch resume with what they persisted; an update two admins
//! signed is refused with the policy's reason and changes nothing. A second update
//! rotates every shard-0 batcher's signing key under load, each batcher reading its next
//! key where it was written while the node ran; ordering goes on under the new keys, and
//! a rotated batcher restarted keeps signing with its new key. A third update rotates
//! party 2's shard-0 batcher key a second time (a third key written over the next key
//! file, no restart): that batcher takes it at the switch and after a restart.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::update::{epochs_by_name as epochs, propose_and_sign, run, s, submit_with};
use cluster::{
    assert_all_committed, fabrx_ok as fabrx, free_base_port, kill_and_wait as kill, last_json,
    network_json as network, pid_in as pid_of, up_load,
};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The update replacing `dir`'s config with one whose batch timeout is `ms`, signed by
/// the admins of `signers`.
fn update(dir: &Path, ms: u64, signers: &[u32], name: &str) -> PathBuf {
    let config = dir.join("config/network-config.json");
    propose_signed(dir, &config, signers, name, |next| {
        next["batching"]["batch_timeout_ms"] = serde_json::json!(ms);
    })
}

/// The update replacing the config in force (the file `current`) with `edit` of it (and
/// the next sequence), signed by the admins of `signers`; its next config is written to
/// `<dir>/<name>.next.json`.
fn propose_signed(
    dir: &Path,
    current: &Path,
    signers: &[u32],
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> PathBuf {
    let mut next: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(current).unwrap()).unwrap();
    next["sequence"] = serde_json::json!(next["sequence"].as_u64().unwrap() + 1);
    edit(&mut next);
    let next_path = dir.join(format!("{name}.next.json"));
    std::fs::write(&next_path, serde_json::to_string_pretty(&next).unwrap()).unwrap();
    propose_and_sign(dir, current, &next_path, name, signers)
}

fn submit(dir: &Path, update: &Path) -> std::process::Output {
    submit_with(dir, update, &[])
}

/// `submit` through party `party`'s router (`--router`), which hands it to the consenters.
fn submit_via_router(dir: &Path, update: &Path, party: u32) -> std::process::Output {
    submit_with(dir, update, &["--router", "--party", &party.to_string()])
}

#[test]
fn a_config_update_is_ordered_under_load_and_every_role_follows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &["up", "--seed", "21", "--base-port", &base, "--json", "--dir"],
        &dir,
    );
    assert_all_committed(&up_load(&dir, 300, 300, "rca"), 300);
    assert!(
        epochs(&dir).iter().all(|(_, e)| *e == Some(0)),
        "{:?}",
        epochs(&dir)
    );

    // Refused: two of four admins where the policy needs three. Nothing changes. Through
    // a router the consenters' reason comes back the same.
    let short = update(&dir, 35, &[1, 2], "short");
    for o in [submit(&dir, &short), submit_via_router(&dir, &short, 3)] {
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("signature"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    // The update submitted while a load runs.
    let good = update(&dir, 40, &[1, 2, 4], "good");
    let during = {
        let dir = dir.clone();
        std::thread::spawn(move || up_load(&dir, 1500, 250, "rcb"))
    };
    std::thread::sleep(Duration::from_secs(2));
    // Through party 2's router, as an operator who reaches only the routers would.
    let o = submit_via_router(&dir, &good, 2);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let answer = last_json(&o);
    assert_eq!(answer["submitted"], true, "{answer}");
    assert_eq!(answer["via"], "router", "{answer}");
    assert_eq!(answer["in_force"], true, "{answer}");
    let start = Instant::now();
    while !epochs(&dir).iter().all(|(_, e)| *e == Some(1)) {
        assert!(start.elapsed() < Duration::from_secs(60), "{:?}", epochs(&dir));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_all_committed(&during.join().unwrap(), 1500);
    // Every batcher put the new batch timeout in force at the switch.
    let net = network(&dir);
    for n in net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["role"] == "batcher")
    {
        let log = std::fs::read_to_string(n["log"].as_str().unwrap()).unwrap();
        let line = log
            .lines()
            .find(|l| l.contains("new batching parameters in force"))
            .unwrap_or_else(|| panic!("{}: no switch logged", n["name"]));
        assert!(
            line.contains("batch_timeout_ms=40") || line.contains("\"batch_timeout_ms\":40"),
            "{line}"
        );
    }

    // After the switch: more load; the sidecar restarted resumes under the new set.
    assert_all_committed(&up_load(&dir, 300, 300, "rcc"), 300);
    // Nodes restarted after the switch come back with what they persisted: the sidecar,
    // a consenter (its state and WAL), a batcher and an assembler (their sets).
    let net = network(&dir);
    for name in ["sidecar-1", "consenter-2", "batcher-3-1", "assembler-4"] {
        kill(pid_of(&net, name));
    }
    fabrx(&["up", "--json", "--dir"], &dir);
    assert_all_committed(&up_load(&dir, 200, 200, "rcd"), 200);
    assert!(
        epochs(&dir).iter().all(|(_, e)| *e == Some(1)),
        "{:?}",
        epochs(&dir)
    );
    let net = network(&dir);
    let batcher = net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "batcher-3-1")
        .unwrap();
    let log = std::fs::read_to_string(batcher["log"].as_str().unwrap()).unwrap();
    let restored = log
        .lines()
        .find(|l| l.contains("batching parameters of the config in force are back"))
        .expect("the restarted batcher puts the parameters back");
    assert!(restored.contains("batch_timeout_ms=40"), "{restored}");
    // The same update again is stale.
    let o = submit(&dir, &good);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("sequence"), "{stderr}");
    assert!(epochs(&dir).iter().all(|(_, e)| *e == Some(1)));

    // Every shard-0 batcher key rotated by a second update, under load, no node
    // restarted: each batcher finds its next key where `fabrx node batcher` looks
    // (`batcher-0.next.key` beside its key file), written while it runs.
    let mut rotated = std::collections::BTreeMap::new();
    for p in 1..=4u32 {
        let file = dir.join(format!("keys/party-{p}/batcher-0.next.key"));
        let out = fabrx(&["keygen", "--seed", &format!("rotated-{p}"), "--out"], &file);
        let printed = String::from_utf8_lossy(&out.stdout).trim().replace(' ', ":");
        assert!(printed.starts_with("ed25519:"), "{printed}");
        rotated.insert(p, printed);
    }
    let rotate = propose_signed(&dir, &dir.join("good.next.json"), &[2, 3, 4], "rotate", |next| {
        for party in next["parties"].as_array_mut().unwrap() {
            let p = u32::try_from(party["id"].as_u64().unwrap()).unwrap();
            for b in party["batchers"].as_array_mut().unwrap() {
                if b["shard"] == 0 {
                    b["public_key"] = serde_json::json!(rotated[&p]);
                }
            }
        }
    });
    let during = {
        let dir = dir.clone();
        std::thread::spawn(move || up_load(&dir, 1000, 250, "rce"))
    };
    std::thread::sleep(Duration::from_secs(1));
    let o = submit(&dir, &rotate);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let start = Instant::now();
    while !epochs(&dir).iter().all(|(_, e)| *e == Some(2)) {
        assert!(start.elapsed() < Duration::from_secs(60), "{:?}", epochs(&dir));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_all_committed(&during.join().unwrap(), 1000);
    // Under the new keys alone: the consenters count the rotated batchers' BAFs and the
    // secondaries take the primaries' batches.
    assert_all_committed(&up_load(&dir, 300, 300, "rcf"), 300);
    let net = network(&dir);
    for p in 1..=4 {
        let name = format!("batcher-{p}-0");
        let n = net["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name.as_str())
            .unwrap();
        let log = std::fs::read_to_string(n["log"].as_str().unwrap()).unwrap();
        assert!(
            log.contains("this batcher signs with its next key from now on"),
            "{name} did not rotate its key"
        );
    }
    // A rotated batcher restarted comes back signing with its next key.
    kill(pid_of(&net, "batcher-2-0"));
    fabrx(&["up", "--json", "--dir"], &dir);
    assert_all_committed(&up_load(&dir, 200, 200, "rcg"), 200);

    // The same batcher key rotated a second time: its operator writes the third key where
    // the node looks (the file it read the second from), no restart.
    let file = dir.join("keys/party-2/batcher-0.next.key");
    std::fs::remove_file(&file).unwrap();
    let out = fabrx(&["keygen", "--seed", "rotated-again-2", "--out"], &file);
    let again = String::from_utf8_lossy(&out.stdout).trim().replace(' ', ":");
    // The config in force, as the consenters answer it, is the one the last update
    // carried (with the keys it retired): the file to edit for the next update.
    let in_force = dir.join("in-force-2.json");
    let out = run(&[
        "network",
        "update",
        "current",
        "--network",
        s(&dir),
        "--out",
        s(&in_force),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let carried: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rotate).unwrap()).unwrap();
    let carried: serde_json::Value = serde_json::from_str(carried["config"].as_str().unwrap()).unwrap();
    let answered: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&in_force).unwrap()).unwrap();
    assert_eq!(answered, carried);
    assert_eq!(answered["retired_keys"].as_array().unwrap().len(), 4);
    let twice = propose_signed(&dir, &in_force, &[1, 3, 4], "twice", |next| {
        for party in next["parties"].as_array_mut().unwrap() {
            if party["id"] == 2 {
                for b in party["batchers"].as_array_mut().unwrap() {
                    if b["shard"] == 0 {
                        b["public_key"] = serde_json::json!(again);
                    }
                }
            }
        }
    });
    let o = submit(&dir, &twice);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let start = Instant::now();
    while !epochs(&dir).iter().all(|(_, e)| *e == Some(3)) {
        assert!(start.elapsed() < Duration::from_secs(60), "{:?}", epochs(&dir));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_all_committed(&up_load(&dir, 200, 200, "rch"), 200);
    let log_of = |name: &str| {
        let net = network(&dir);
        let n = net["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap()
            .clone();
        std::fs::read_to_string(n["log"].as_str().unwrap()).unwrap()
    };
    let at_switches = log_of("batcher-2-0")
        .lines()
        .filter(|l| {
            l.contains("this batcher signs with its next key from now on") && l.contains("decision=Some")
        })
        .count();
    assert_eq!(at_switches, 2, "batcher-2-0 took its key at two switches");
    // Restarted after the second rotation, it signs with the third key.
    kill(pid_of(&network(&dir), "batcher-2-0"));
    fabrx(&["up", "--json", "--dir"], &dir);
    assert!(
        !log_of("batcher-2-0").contains("that it does not hold"),
        "batcher-2-0 lacked a key after its restart"
    );
    assert_all_committed(&up_load(&dir, 200, 200, "rci"), 200);

    // Every block verifies across the switches; two are config blocks.
    let out = fabrx(&["blocks", "--party", "2", "--network"], &dir);
    let blocks: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(blocks.len() > 10);
    for b in &blocks {
        assert_eq!(b["verified"], true, "{b}");
    }
    assert_eq!(blocks.iter().filter(|b| b["config"] == true).count(), 3);
    // From a block after the switch: the sets before it are learned first.
    let last = blocks.last().unwrap()["number"].as_u64().unwrap();
    let from = (last - 2).to_string();
    let out = fabrx(&["blocks", "--party", "3", "--from", &from, "--network"], &dir);
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let b: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(b["verified"], true, "{b}");
    }
}
