//! `fabrx network update` as an operator runs it: a 4-party network generated, a change of
//! `batching.batch_timeout_ms` proposed, signed on separate copies by two parties and
//! merged — `verify` refuses it with the policy's message — then signed by a third —
//! `verify` accepts it. Bad steps (an unbumped sequence, another party's key) fail with
//! their reason.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn fabrx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fabrx"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fabrx")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The error line of a command that must fail (exit code 1, no panic).
fn refused(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `fabrx network update sign --update U --party P --key K` and `more`.
fn sign(update: &Path, party: u32, key: &Path, more: &[&str]) -> Output {
    let party = party.to_string();
    let mut args = vec![
        "network",
        "update",
        "sign",
        "--update",
        s(update),
        "--party",
        &party,
        "--key",
        s(key),
    ];
    args.extend(more);
    fabrx(&args)
}

#[test]
fn two_signatures_of_four_parties_are_refused_and_three_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let net = tmp.path().join("net");
    let generated: Value = serde_json::from_str(&ok(&fabrx(&[
        "network",
        "generate",
        "--parties",
        "4",
        "--shards",
        "2",
        "--dir",
        s(&net),
        "--seed",
        "7",
        "--json",
    ])))
    .unwrap();
    let admin_keys = generated["admin_keys"].as_array().unwrap();
    assert_eq!(admin_keys.len(), 4);
    let key = |p: u32| net.join(format!("keys/party-{p}/admin.key"));
    assert_eq!(admin_keys[1]["path"].as_str().unwrap(), s(&key(2)));

    // The next config: the batch timeout changed, the sequence one more.
    let config_path = net.join("config/network-config.json");
    let mut next: Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    assert_eq!(next["sequence"], 0);
    next["sequence"] = 1.into();
    next["batching"]["batch_timeout_ms"] = 50.into();
    let next_path = tmp.path().join("next.json");
    std::fs::write(&next_path, serde_json::to_string_pretty(&next).unwrap()).unwrap();

    // An edit that forgot the sequence is refused with the sequence it needs.
    let mut unbumped = next.clone();
    unbumped["sequence"] = 0.into();
    let unbumped_path = tmp.path().join("unbumped.json");
    std::fs::write(&unbumped_path, unbumped.to_string()).unwrap();
    let update = tmp.path().join("update.json");
    let e = refused(&fabrx(&[
        "network",
        "update",
        "propose",
        "--network",
        s(&net),
        "--next",
        s(&unbumped_path),
        "--out",
        s(&update),
    ]));
    assert!(e.contains("the next config has sequence 0; it must be 1"), "{e}");
    assert!(!update.exists());

    let proposed = ok(&fabrx(&[
        "network",
        "update",
        "propose",
        "--network",
        s(&config_path),
        "--next",
        s(&next_path),
        "--out",
        s(&update),
    ]));
    assert!(
        proposed.contains("batching.batch_timeout_ms: 200 → 50"),
        "{proposed}"
    );
    // Party 2 signs its own copy; party 1 signs the proposal in place.
    let copy = tmp.path().join("party-2.json");
    ok(&sign(&update, 2, &key(2), &["--out", s(&copy)]));
    ok(&sign(&update, 1, &key(1), &["--network", s(&net)]));
    // Party 3's key offered as party 4's is refused when the network is given.
    let e = refused(&sign(&update, 4, &key(3), &["--network", s(&net)]));
    assert!(e.contains("does not hold party 4's admin key"), "{e}");
    let merged = tmp.path().join("merged.json");
    let line: Value = serde_json::from_str(&ok(&fabrx(&[
        "network",
        "update",
        "merge",
        s(&update),
        s(&copy),
        "--out",
        s(&merged),
        "--json",
    ])))
    .unwrap();
    assert_eq!(line["signers"], serde_json::json!([1, 2]));

    let verify = |file: &Path| {
        fabrx(&[
            "network",
            "update",
            "verify",
            "--update",
            s(file),
            "--network",
            s(&net),
        ])
    };
    let e = refused(&verify(&merged));
    assert!(e.contains("2 admin signatures, the update policy needs 3"), "{e}");
    let show = |more: &[&str]| {
        let mut args = vec![
            "network",
            "update",
            "show",
            "--update",
            s(&merged),
            "--network",
            s(&net),
        ];
        args.extend(more);
        ok(&fabrx(&args))
    };
    let shown = show(&[]);
    assert!(shown.contains("signed by parties 1, 2"), "{shown}");
    assert!(shown.contains("  batching.batch_timeout_ms: 200 → 50"), "{shown}");
    assert!(
        shown.contains(": no: 2 admin signatures, the update policy needs 3")
            && shown.contains("valid against the genesis config of"),
        "{shown}"
    );

    ok(&sign(&merged, 3, &key(3), &[]));
    let verified = ok(&verify(&merged));
    assert!(verified.contains("replaces sequence 0 with 1"), "{verified}");
    let shown: Value = serde_json::from_str(&show(&["--json"])).unwrap();
    assert_eq!(shown["valid"], true);
    assert_eq!(shown["signers"], serde_json::json!([1, 2, 3]));
    assert_eq!(
        shown["changes"],
        serde_json::json!(["sequence: 0 → 1", "batching.batch_timeout_ms: 200 → 50"])
    );

    // Against the next config, once in force, the same update is stale.
    let e = refused(&fabrx(&[
        "network",
        "update",
        "verify",
        "--update",
        s(&merged),
        "--network",
        s(&next_path),
    ]));
    assert!(e.contains("stale config sequence 0, the network is at 1"), "{e}");
    // A file that is not an update.
    let e = refused(&verify(&config_path));
    assert!(e.contains("parsing the config update"), "{e}");

    // Only the shard count edited: refused as a change of shards, before the next config
    // is read as a whole (where it would be a party with a batcher missing).
    let mut sharded = next.clone();
    sharded["shards"] = 3.into();
    let sharded_path = tmp.path().join("sharded.json");
    std::fs::write(&sharded_path, sharded.to_string()).unwrap();
    let e = refused(&fabrx(&[
        "network",
        "update",
        "propose",
        "--network",
        s(&net),
        "--next",
        s(&sharded_path),
        "--out",
        s(&tmp.path().join("sharded.update.json")),
    ]));
    assert!(
        e.contains("the next config has 3 shards, the network 2: adding or removing shards is not supported"),
        "{e}"
    );
    // A party the config in force does not have cannot sign (a joining party's admin).
    let e = refused(&sign(&merged, 5, &key(4), &["--network", s(&net)]));
    assert!(
        e.contains("party 5 cannot sign: the signers of an update are the parties of the config in force"),
        "{e}"
    );
    // The calls to the nodes need the network directory's client TLS identity: a config
    // file of a network with TLS is refused before any call.
    for args in [
        vec!["submit", "--update", s(&merged), "--network", s(&config_path)],
        vec!["current", "--network", s(&config_path)],
    ] {
        let e = refused(&fabrx(&[&["network", "update"][..], &args].concat()));
        assert!(e.contains("give the network directory"), "{args:?}: {e}");
    }
}
