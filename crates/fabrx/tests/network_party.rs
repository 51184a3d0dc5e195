//! `fabrx network party add` as an operator runs it: a 4-party network generated, party 5's
//! keys and certificates issued and the next config written, proposed, signed by three
//! admins of four — `verify` accepts it. The same update with party 5's router certificate
//! replaced by a self-signed one is refused, by `propose` and by `verify`, with the join
//! rule's message. On a network generated with `--k8s` the joiner gets its Services'
//! endpoints and its Secret manifest.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use serde_json::Value;
use sha2::{Digest, Sha256};
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

/// The error text of a command that must fail (exit code 1, no panic).
fn refused(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Signs `update` in place as parties 1, 2 and 3.
/// `fabrx network update prove --update UPDATE --network NET FLAG PATH`.
fn prove(net: &Path, update: &Path, flag: &str, path: &Path) -> Output {
    fabrx(&[
        "network",
        "update",
        "prove",
        "--update",
        s(update),
        "--network",
        s(net),
        flag,
        s(path),
    ])
}

fn sign_by_three(net: &Path, update: &Path) {
    for p in ["1", "2", "3"] {
        let key = net.join(format!("keys/party-{p}/admin.key"));
        ok(&fabrx(&[
            "network",
            "update",
            "sign",
            "--update",
            s(update),
            "--party",
            p,
            "--key",
            s(&key),
        ]));
    }
}

/// `text` as it appears inside a JSON string.
fn escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap();
    quoted[1..quoted.len() - 1].to_string()
}

#[test]
fn a_party_added_is_proposed_signed_by_three_of_four_and_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let net = tmp.path().join("net");
    ok(&fabrx(&[
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
    ]));
    let next = tmp.path().join("next.json");
    let line = ok(&fabrx(&[
        "network",
        "party",
        "add",
        "--network",
        s(&net),
        "--out",
        s(&next),
        "--seed",
        "7",
    ]));
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.starts_with("party 5: keys in "), "{line}");
    assert!(
        line.contains("TLS certificates router-5, consenter-5, assembler-5, batcher-5-0, batcher-5-1"),
        "{line}"
    );
    assert!(line.contains("sequence 1"), "{line}");
    assert!(line.contains("fabrx network update propose"), "{line}");
    for f in [
        "keys/party-5/admin.key",
        "keys/party-5/consenter.key",
        "keys/party-5/batcher-1.key",
        "tls/assembler-5.pem",
    ] {
        assert!(net.join(f).exists(), "{f}");
    }
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&next).unwrap()).unwrap();
    assert_eq!(file["sequence"], 1);
    assert_eq!(file["parties"].as_array().unwrap().len(), 5);
    // Past the token services' ports (the highest in use is 7090).
    assert_eq!(file["parties"][4]["router"], "127.0.0.1:7091");

    // An existing --out is refused, and so is a second party 5 on the same directory.
    let e = refused(&fabrx(&[
        "network",
        "party",
        "add",
        "--network",
        s(&net),
        "--out",
        s(&next),
    ]));
    assert!(e.contains("already exists: choose another --out"), "{e}");
    let again = tmp.path().join("again.json");
    let e = refused(&fabrx(&[
        "network",
        "party",
        "add",
        "--network",
        s(&net),
        "--out",
        s(&again),
    ]));
    assert!(
        e.contains("already exists: party 5's keys or certificates were issued before"),
        "{e}"
    );
    assert!(!again.exists());

    let update = tmp.path().join("update.json");
    let proposed = ok(&fabrx(&[
        "network",
        "update",
        "propose",
        "--network",
        s(&net),
        "--next",
        s(&next),
        "--out",
        s(&update),
    ]));
    assert!(proposed.contains("  party 5 added\n"), "{proposed}");
    assert!(
        proposed.contains("  party 5 router: 127.0.0.1:7091\n"),
        "{proposed}"
    );
    assert!(
        proposed.contains("  tls certificate router-5 added (router of party 5, sha256 "),
        "{proposed}"
    );
    // Two signatures are not enough; three of four are.
    for p in ["1", "2"] {
        let key = net.join(format!("keys/party-{p}/admin.key"));
        ok(&fabrx(&[
            "network",
            "update",
            "sign",
            "--update",
            s(&update),
            "--party",
            p,
            "--key",
            s(&key),
        ]));
    }
    let e = refused(&fabrx(&[
        "network",
        "update",
        "verify",
        "--network",
        s(&net),
        "--update",
        s(&update),
    ]));
    assert!(e.contains("2 admin signatures, the update policy needs 3"), "{e}");
    sign_by_three(&net, &update);
    // Signed by three, but party 5's new node keys are not proven held yet.
    let verify = || {
        fabrx(&[
            "network",
            "update",
            "verify",
            "--network",
            s(&net),
            "--update",
            s(&update),
        ])
    };
    let e = refused(&verify());
    assert!(
        e.contains("party 5 consenter's new key") && e.contains("is not proven held"),
        "{e}"
    );
    // Party 5 proves them with its key files (its admin key is not a node key: left alone).
    let proven = ok(&prove(&net, &update, "--keys-dir", &net.join("keys/party-5")));
    assert!(
        proven.contains("3 new keys proven") && proven.contains("every new node key of the update is proven"),
        "{proven}"
    );
    // A key file the update does not bring in, named on its own, is refused.
    let e = refused(&prove(
        &net,
        &update,
        "--key",
        &net.join("keys/party-1/consenter.key"),
    ));
    assert!(e.contains("is not one the update brings in"), "{e}");
    let verified = ok(&fabrx(&[
        "network",
        "update",
        "verify",
        "--network",
        s(&net),
        "--update",
        s(&update),
    ]));
    assert!(
        verified.contains("replaces sequence 0 with 1; signed by parties 1, 2, 3"),
        "{verified}"
    );

    // Party 5's router certificate replaced by a self-signed one.
    let router_5 = file["tls"]["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "router-5")
        .unwrap()
        .clone();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["fabrx-node".to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "router-5");
    let own = params.self_signed(&key).unwrap();
    let own_sha = hex::encode(Sha256::digest(own.der()));
    let (old_pem, old_sha) = (
        router_5["pem"].as_str().unwrap(),
        router_5["sha256"].as_str().unwrap(),
    );
    let message = "party 5 joins with a TLS certificate that is refused: the TLS certificate router-5 is not signed by the network CA";

    // `propose` refuses the edited next config.
    let tampered_next = tmp.path().join("tampered-next.json");
    let text = std::fs::read_to_string(&next).unwrap();
    let edited = text
        .replace(&escaped(old_pem), &escaped(&own.pem()))
        .replace(old_sha, &own_sha);
    assert_ne!(edited, text);
    std::fs::write(&tampered_next, edited).unwrap();
    let e = refused(&fabrx(&[
        "network",
        "update",
        "propose",
        "--network",
        s(&net),
        "--next",
        s(&tampered_next),
        "--out",
        s(&tmp.path().join("never.json")),
    ]));
    assert!(e.contains(message), "{e}");

    // An update carrying it (made without `propose`, signed by three) fails `verify`.
    let mut signed: Value = serde_json::from_str(&std::fs::read_to_string(&update).unwrap()).unwrap();
    let config = signed["config"].as_str().unwrap().to_string();
    let config_edited = config
        .replace(&escaped(old_pem), &escaped(&own.pem()))
        .replace(old_sha, &own_sha);
    assert_ne!(config_edited, config);
    signed["config"] = config_edited.into();
    signed["signatures"] = Value::Array(Vec::new());
    let tampered = tmp.path().join("tampered.json");
    std::fs::write(&tampered, serde_json::to_string_pretty(&signed).unwrap()).unwrap();
    sign_by_three(&net, &tampered);
    let e = refused(&fabrx(&[
        "network",
        "update",
        "verify",
        "--network",
        s(&net),
        "--update",
        s(&tampered),
    ]));
    assert!(e.contains(message), "{e}");
}

#[test]
fn a_party_joins_a_kubernetes_network() {
    let tmp = tempfile::tempdir().unwrap();
    let net = tmp.path().join("net");
    ok(&fabrx(&[
        "network",
        "generate",
        "--parties",
        "4",
        "--shards",
        "1",
        "--dir",
        s(&net),
        "--seed",
        "7",
        "--k8s",
        "fabrx-party{party}",
    ]));
    let next = tmp.path().join("next.json");
    // A pattern that is not the network's is refused, and so is --host.
    for args in [
        &["--k8s", "other-{party}"][..],
        &["--k8s", "fabrx-party{party}", "--k8s-domain", "example.org"][..],
    ] {
        let mut argv = vec!["network", "party", "add", "--network", s(&net), "--out", s(&next)];
        argv.extend_from_slice(args);
        let e = refused(&fabrx(&argv));
        assert!(e.contains("do not follow the Kubernetes layout"), "{e}");
        assert!(
            e.contains("party 1 router is at router.fabrx-party1.svc.cluster.local:7050"),
            "{e}"
        );
    }
    let e = refused(&fabrx(&[
        "network",
        "party",
        "add",
        "--network",
        s(&net),
        "--out",
        s(&next),
        "--host",
        "10.0.0.5",
    ]));
    assert!(e.contains("on a Kubernetes network"), "{e}");
    assert!(!next.exists());
    assert!(!net.join("keys/party-5").exists());

    // The layout read from the config; the same given with --k8s would do.
    let out = ok(&fabrx(&[
        "network",
        "party",
        "add",
        "--network",
        s(&net),
        "--out",
        s(&next),
        "--seed",
        "7",
    ]));
    let secret = net.join("k8s/party5/secret.yaml");
    assert!(
        out.contains(&format!(
            "kubernetes: party 5's namespace is fabrx-party5; its secret (give it to party 5 only): {}",
            secret.display()
        )),
        "{out}"
    );
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&next).unwrap()).unwrap();
    let p5 = &file["parties"][4];
    assert_eq!(p5["router"], "router.fabrx-party5.svc.cluster.local:7050");
    assert_eq!(
        p5["consenter"]["endpoint"],
        "consenter.fabrx-party5.svc.cluster.local:7051"
    );
    assert_eq!(p5["assembler"], "assembler.fabrx-party5.svc.cluster.local:7052");
    assert_eq!(
        p5["batchers"][0]["endpoint"],
        "batcher-0.fabrx-party5.svc.cluster.local:7053"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let text = std::fs::read_to_string(&secret).unwrap();
    assert!(text.contains("  namespace: fabrx-party5\n"), "{text}");
    let consenter_key = std::fs::read_to_string(net.join("keys/party-5/consenter.key")).unwrap();
    assert!(
        text.contains(&format!("\"consenter.key\": \"{}\"", escaped(&consenter_key))),
        "{text}"
    );
    for key in [
        "batcher-0.key",
        "tls-router-5.pem",
        "tls-router-5.key",
        "tls-batcher-5-0.key",
        "tls-client.pem",
    ] {
        assert!(text.contains(&format!("  \"{key}\": ")), "{key}: {text}");
    }

    // Proposed against the genesis config, signed by three of four: valid.
    let update = tmp.path().join("update.json");
    let proposed = ok(&fabrx(&[
        "network",
        "update",
        "propose",
        "--network",
        s(&net),
        "--next",
        s(&next),
        "--out",
        s(&update),
    ]));
    assert!(
        proposed.contains("  party 5 router: router.fabrx-party5.svc.cluster.local:7050\n"),
        "{proposed}"
    );
    sign_by_three(&net, &update);
    ok(&prove(&net, &update, "--keys-dir", &net.join("keys/party-5")));
    let verified = ok(&fabrx(&[
        "network",
        "update",
        "verify",
        "--network",
        s(&net),
        "--update",
        s(&update),
    ]));
    assert!(verified.starts_with("valid: "), "{verified}");
}
