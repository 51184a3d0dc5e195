//! The token application end to end (issue #13; docs/token.md): a `fabrx up` network
//! (4 parties × 2 shards, one committing party, its query service, five endorsers with
//! 3-of-5 shares, mutual TLS), driven through `fabrx wallet` as a person would:
//!
//! - the issuer issues 1000 to alice, alice pays bob 300: balances 700 and 300, and both
//!   histories show it;
//! - two copies of alice's wallet pay at once from the same token: exactly one commits,
//!   the other fails with a double-spend reason, and the balance is right afterwards;
//! - a transfer above the balance fails with "insufficient funds" and writes nothing;
//! - requests signed by a non-issuer or by the wrong owner are refused by the endorsers;
//! - with 2 of 5 endorsers down payments commit, with 3 down they fail clearly;
//! - a wallet killed mid-payment, run again, ends with the right balance;
//! - hostile: settlement txs with a forged aggregate, or a signature of too few shares,
//!   sent straight to the routers, abort `ABORTED_SIGNATURE_INVALID`;
//! - front-running: an envelope under alice's next tx id (her nonce and identity, as an
//!   endorser sees them) with a payload she did not sign is refused by every router, and
//!   her payment under that id then commits;
//! - private reads: bob cannot read alice's tokens (unsigned, signed by himself as a
//!   reader, or rows by key, which only endorsers may read); the issuer (an auditor) can;
//! - a slow network: behind routers 6 s away and calls that time out after 3 s, a payment
//!   stays pending (never rolled back), a retry of it is refused instead of paying
//!   twice, and `sync` finds it committed, once.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{bin, fabrx_ok, free_base_port, kill_and_wait, network_json, pid_in};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// `fabrx wallet --network DIR --wallet FILE ARGS --json`.
fn wallet(dir: &Path, file: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(["wallet", "--network"])
        .arg(dir)
        .arg("--wallet")
        .arg(file)
        .args(["--wait-secs", "60", "--json"])
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: &Output, what: &str) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("{}")
        .to_owned();
    serde_json::from_str(&last).unwrap_or(serde_json::Value::Null)
}

fn failed(out: &Output, what: &str) -> String {
    assert!(
        !out.status.success(),
        "{what} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn address(dir: &Path, file: &Path) -> String {
    ok(&wallet(dir, file, &["address"]), "address")["address"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `(available, locked)` of type CBDC.
fn balance(dir: &Path, file: &Path) -> (u64, u64) {
    let b = ok(&wallet(dir, file, &["balance"]), "balance");
    let t = &b["balances"]["CBDC"];
    (
        t["available"].as_u64().unwrap_or(0),
        t["locked"].as_u64().unwrap_or(0),
    )
}

fn history(dir: &Path, file: &Path) -> Vec<serde_json::Value> {
    let out = wallet(dir, file, &["history"]);
    ok(&out, "history");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn pay(dir: &Path, file: &Path, to: &str, amount: u64) -> Output {
    wallet(
        dir,
        file,
        &["transfer", "--to", to, "--amount", &amount.to_string()],
    )
}

/// The token network of `dir` as a wallet sees it, with the clients' TLS identity
/// installed in this process.
fn network(dir: &Path) -> (wallet::TokenNetwork, netconfig::NetworkConfig) {
    let path = netconfig::config_path(dir);
    let config = netconfig::NetworkConfig::load(&path).unwrap();
    let me = wire::tls::Peer {
        role: wire::tls::Role::Wallet,
        party: 0,
        shard: None,
    };
    if wire::tls::installed().is_none()
        && let Some(tls) = config.node_tls(&path, me).unwrap()
    {
        wire::tls::install(tls).unwrap();
    }
    let app = config.token().unwrap().clone();
    let net = wallet::TokenNetwork {
        routers: config.parties().iter().map(|p| p.router.uri()).collect(),
        sidecars: vec![config.committer_party(1).unwrap().sidecar.uri()],
        query: vec![config.query_endpoint(1).unwrap().uri()],
        endorsers: app.endorsers.iter().map(|e| e.endpoint.uri()).collect(),
        public: app.public.clone(),
        namespace: app.namespace.clone(),
        ns_version: app.ns_version,
        call_timeout: Duration::from_secs(10),
        confirmations: std::num::NonZeroUsize::MIN,
    };
    (net, config)
}

/// Asks endorser `i` (0-based) directly.
async fn endorse(
    net: &wallet::TokenNetwork,
    i: usize,
    request: &token::Request,
) -> wire::pb::EndorseResponse {
    let ch = wire::server::connect(&wire::server::client_endpoint(net.endorsers[i].clone()).unwrap())
        .await
        .unwrap();
    wire::pb::endorser_client::EndorserClient::new(ch)
        .endorse(wire::pb::EndorseRequest {
            request: Some(request.to_pb()),
        })
        .await
        .unwrap()
        .into_inner()
}

fn key_of(file: &Path) -> crypto::SigningKey {
    let w: wallet::WalletFile = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    w.key().unwrap()
}

fn addr_bytes(k: &crypto::SigningKey) -> token::Address {
    k.public_key().as_bytes().try_into().unwrap()
}

/// The endorsers' refusals and the committer's checks, without the wallet.
fn hostile_and_refused(dir: &Path, alice: &Path, bob: &Path) {
    let (net, _) = network(dir);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (alice_key, bob_key) = (key_of(alice), key_of(bob));
        let owned = net.owned(&alice_key).await.unwrap();
        let input = owned.first().expect("alice holds a token").clone();
        let out = |owner: token::Address, q: u64| token::Output {
            owner,
            token_type: "CBDC".into(),
            quantity: q,
        };
        // A non-issuer issuing.
        let issue = token::Request::new(
            token::Action::Issue,
            b"hostile-issue".to_vec(),
            addr_bytes(&bob_key),
            vec![],
            vec![out(addr_bytes(&bob_key), 5)],
        )
        .sign(&bob_key);
        let r = endorse(&net, 0, &issue).await;
        assert_eq!(r.reject, wire::pb::RejectReason::NotIssuer as i32, "{r:?}");
        // Bob spending alice's token.
        let steal = token::Request::new(
            token::Action::Transfer,
            b"hostile-steal".to_vec(),
            addr_bytes(&bob_key),
            vec![input.key()],
            vec![out(addr_bytes(&bob_key), input.quantity)],
        )
        .sign(&bob_key);
        let r = endorse(&net, 1, &steal).await;
        assert_eq!(r.reject, wire::pb::RejectReason::NotOwner as i32, "{r:?}");
        // Bob signing a request in alice's name.
        let mut forged = steal.clone();
        forged.creator = addr_bytes(&alice_key);
        let r = endorse(&net, 2, &forged).await;
        assert_eq!(r.reject, wire::pb::RejectReason::BadSignature as i32, "{r:?}");

        // Alice's own honest request, endorsed by only two endorsers; its settlement tx
        // goes to the routers with (a) their two partials added up, (b) a forged
        // aggregate: both abort ABORTED_SIGNATURE_INVALID, the token stays unspent.
        for (k, nonce) in ["too-few", "forged"].into_iter().enumerate() {
            let request = token::Request::new(
                token::Action::Transfer,
                nonce.as_bytes().to_vec(),
                addr_bytes(&alice_key),
                vec![input.key()],
                vec![out(addr_bytes(&bob_key), input.quantity)],
            )
            .sign(&alice_key);
            let settlement = token::Settlement::build(&request, &net.namespace, net.ns_version);
            let signature = if k == 0 {
                let mut sigs = Vec::new();
                for i in 0..2 {
                    let r = endorse(&net, i, &request).await;
                    assert_eq!(r.reject, 0, "{r:?}");
                    sigs.push(crypto::Signature::from_bytes(r.partial_signature));
                }
                crypto::aggregate_signatures(&sigs).unwrap().into_bytes()
            } else {
                let other = crypto::deal_threshold_keys(3, 5, "not-the-network").unwrap();
                let message = settlement.endorsement_bytes();
                let partials: Vec<_> = other
                    .shares
                    .iter()
                    .take(3)
                    .map(|s| crypto::sign_namespace_endorsement_partial(s, &message))
                    .collect();
                crypto::aggregate_partials(&other.public, &partials)
                    .unwrap()
                    .into_bytes()
            };
            let envelope = token::envelope(&request, &settlement, &signature, &alice_key);
            let sent = net.submit(&envelope).await;
            assert!(sent.acks >= sent.quorum, "{sent:?}");
            let status = net
                .wait_status(&settlement.tx_id.0, Duration::from_secs(60))
                .await
                .unwrap()
                .expect("a final status");
            assert_eq!(status.0, types::Status::AbortedSignatureInvalid, "{nonce}");
        }
        let still = net.owned(&alice_key).await.unwrap();
        assert!(
            still.iter().any(|t| t.key() == input.key()),
            "the token is unspent"
        );
    });
}

/// Front-running alice's next payment, and reading her tokens without being her.
fn front_run_and_private_reads(dir: &Path, alice: &Path, bob: &Path, issuer: &Path) {
    let (net, _) = network(dir);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (alice_key, bob_key, issuer_key) = (key_of(alice), key_of(bob), key_of(issuer));
        let owned = net.owned(&alice_key).await.unwrap();
        let input = owned.first().expect("alice holds a token").clone();
        let request = token::Request::new(
            token::Action::Transfer,
            b"front-run-me".to_vec(),
            addr_bytes(&alice_key),
            vec![input.key()],
            vec![token::Output {
                owner: addr_bytes(&bob_key),
                token_type: "CBDC".into(),
                quantity: input.quantity,
            }],
        )
        .sign(&alice_key);
        let settlement = token::Settlement::build(&request, &net.namespace, net.ns_version);
        // What a Byzantine endorser can send before alice: her id, nonce and identity,
        // any payload, signed by anyone but her.
        let mut junk_tx = settlement.endorsed(&[1; 96]);
        junk_tx.namespaces[0].read_writes.truncate(1);
        let payload = prost::Message::encode_to_vec(&wire::pb::Tx::from(&junk_tx));
        let junk = prost::Message::encode_to_vec(&wire::pb::Envelope {
            signature: crypto::sign_client_request(&bob_key, &payload).into_bytes(),
            payload,
            identity: Some(request.identity()),
            tx_id: settlement.tx_id.0.clone(),
            nonce: request.nonce.clone(),
            payload_type: wire::pb::PayloadType::Tx as i32,
        });
        let sent = net.submit(&junk).await;
        assert_eq!(
            sent.acks, 0,
            "every router refuses an envelope its creator did not sign"
        );
        // Alice's own payment under that id.
        let mut partials = Vec::new();
        for i in 0..3 {
            let r = endorse(&net, i, &request).await;
            assert_eq!(r.reject, 0, "{r:?}");
            partials.push(crypto::PartialSignature {
                index: r.share_index,
                signature: crypto::Signature::from_bytes(r.partial_signature),
            });
        }
        let aggregate = crypto::aggregate_partials(&net.public, &partials).unwrap();
        let envelope = token::envelope(&request, &settlement, aggregate.as_bytes(), &alice_key);
        let sent = net.submit(&envelope).await;
        assert!(sent.acks >= sent.quorum, "{sent:?}");
        let status = net
            .wait_status(&settlement.tx_id.0, Duration::from_secs(60))
            .await
            .unwrap()
            .expect("a final status");
        assert_eq!(status.0, types::Status::Committed);

        // Bob reading alice's tokens.
        let query = net.query[0].clone();
        let mut client = wire::pb::query_client::QueryClient::new(
            wire::server::connect(&wire::server::client_endpoint(query).unwrap())
                .await
                .unwrap(),
        );
        let now = token::request::unix_now();
        let alice_addr = addr_bytes(&alice_key);
        let unsigned = wire::pb::OwnedQuery {
            namespace: net.namespace.clone(),
            owner: alice_addr.to_vec(),
            ..Default::default()
        };
        let e = client.get_owned(unsigned).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
        let as_reader = token::read::signed_audit_query(&bob_key, &net.namespace, &alice_addr, b"", now);
        let e = client.get_owned(as_reader).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
        let rows = wire::pb::RowsQuery {
            namespace: net.namespace.clone(),
            keys: vec![input.key()],
        };
        let e = client.get_rows(rows).await.unwrap_err();
        assert_eq!(
            e.code(),
            tonic::Code::PermissionDenied,
            "rows by key are the endorsers' only: {e}"
        );
        // The issuer audits bob (who holds tokens now); bob reads his own.
        let bob_addr = addr_bytes(&bob_key);
        let audit = token::read::signed_audit_query(&issuer_key, &net.namespace, &bob_addr, b"", now);
        let page = client.get_owned(audit).await.unwrap().into_inner();
        assert!(!page.rows.is_empty());
        let own = token::read::signed_owned_query(&bob_key, &net.namespace, b"", 0, now);
        assert_eq!(client.get_owned(own).await.unwrap().into_inner().rows, page.rows);
    });
}

/// Every router 6 s away behind `fabrx latency-proxy`, calls timing out after 3 s: alice
/// pays bob 25.
fn slow_routers(dir: &Path, alice: &Path, bob_addr: &str) {
    let (mut net, config) = network(dir);
    let mut proxy = Command::new(bin());
    proxy.args(["latency-proxy", "--delay-ms", "6000"]);
    for p in config.parties() {
        proxy.args(["--route", &format!("127.0.0.1:0={}", p.router.listen_addr())]);
    }
    let mut proxy = proxy
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(proxy.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let ready: serde_json::Value = serde_json::from_str(&line).unwrap();
    net.routers = ready["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("http://{}", r["listen"].as_str().unwrap()))
        .collect();
    net.call_timeout = Duration::from_secs(3);
    let payment = wallet::Payment {
        action: token::Action::Transfer,
        to: token::parse_address(bob_addr).unwrap(),
        amount: 25,
        token_type: "CBDC".into(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut w = wallet::Wallet::open(alice).unwrap();
    let first = rt.block_on(wallet::ops::pay(&mut w, &net, &payment, Duration::from_secs(1)));
    assert!(
        matches!(first, Err(wallet::Error::Unconfirmed { .. })),
        "no router answered in time: {first:?}"
    );
    assert_eq!(w.data.pending.len(), 1, "the payment stays pending");
    let again = rt.block_on(wallet::ops::pay(&mut w, &net, &payment, Duration::from_secs(1)));
    assert!(
        matches!(again, Err(wallet::Error::StillPending { .. })),
        "a retry must not pay twice: {again:?}"
    );
    drop(w);
    // The delayed submission reaches the routers and commits; `sync` finds it.
    ok(&wallet(dir, alice, &["sync"]), "sync after the slow network");
    let _ = proxy.kill();
    let _ = proxy.wait();
}

/// A payment that never reached a router (every router unreachable) stays pending;
/// `abandon` replaces it by spending its tokens back; the original envelope, sent later
/// by anyone, can no longer pay.
fn abandon_a_pending_payment(dir: &Path, alice: &Path, bob_addr: &str) {
    let (mut net, _) = network(dir);
    let real_routers = net.routers.clone();
    net.routers = vec!["http://127.0.0.1:1".into(); real_routers.len()];
    let payment = wallet::Payment {
        action: token::Action::Transfer,
        to: token::parse_address(bob_addr).unwrap(),
        amount: 40,
        token_type: "CBDC".into(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut w = wallet::Wallet::open(alice).unwrap();
    let first = rt.block_on(wallet::ops::pay(&mut w, &net, &payment, Duration::from_secs(1)));
    assert!(
        matches!(first, Err(wallet::Error::Unconfirmed { .. })),
        "{first:?}"
    );
    let pending = w.data.pending[0].clone();
    drop(w);
    let out = ok(
        &wallet(dir, alice, &["abandon", "--tx", &pending.tx_id]),
        "abandon",
    );
    assert_eq!(out["status"], "COMMITTED", "{out}");
    let hist = history(dir, alice);
    assert!(
        hist.iter()
            .any(|h| h["tx_id"] == pending.tx_id.as_str() && h["status"] == wallet::ABANDONED),
        "{hist:?}"
    );
    // The original envelope, sent now, aborts: its tokens were spent by the cancellation.
    net.routers = real_routers;
    rt.block_on(async {
        let envelope = hex::decode(&pending.envelope).unwrap();
        let sent = net.submit(&envelope).await;
        assert!(sent.acks >= sent.quorum, "{sent:?}");
        let status = net
            .wait_status(&pending.tx_id, Duration::from_secs(60))
            .await
            .unwrap()
            .expect("a final status");
        assert_eq!(status.0, types::Status::AbortedMvccConflict);
    });
}

#[test]
fn issue_transfer_double_spend_endorser_faults_and_a_killed_wallet() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx_ok(
        &["up", "--seed", "21", "--base-port", &base, "--json", "--dir"],
        &dir,
    );
    let issuer = dir.join("wallets").join("issuer");
    assert!(issuer.exists(), "fabrx up writes the issuer wallet");
    let wallets = tmp.path().join("wallets");
    let (alice, bob, carol) = (wallets.join("alice"), wallets.join("bob"), wallets.join("carol"));
    for w in [&alice, &bob, &carol] {
        ok(&wallet(&dir, w, &["init", "--name", "w"]), "init");
    }
    let (a, b, c) = (address(&dir, &alice), address(&dir, &bob), address(&dir, &carol));

    // Issue and pay.
    let issued = ok(
        &wallet(&dir, &issuer, &["issue", "--to", &a, "--amount", "1000"]),
        "issue",
    );
    assert_eq!(issued["status"], "COMMITTED", "{issued}");
    assert_eq!(balance(&dir, &alice), (1000, 0));
    ok(&pay(&dir, &alice, &b, 300), "alice pays bob");
    assert_eq!(balance(&dir, &alice), (700, 0));
    assert_eq!(balance(&dir, &bob), (300, 0));
    let ha = history(&dir, &alice);
    assert!(
        ha.iter()
            .any(|h| h["direction"] == "received" && h["amount"] == 1000 && h["counterparty"] == "issuer"),
        "{ha:?}"
    );
    assert!(
        ha.iter().any(|h| h["direction"] == "sent"
            && h["amount"] == 300
            && h["counterparty"] == b.as_str()
            && h["status"] == "COMMITTED"
            && h["block"].is_u64()),
        "{ha:?}"
    );
    let hb = history(&dir, &bob);
    assert!(
        hb.iter()
            .any(|h| h["direction"] == "received" && h["amount"] == 300 && h["counterparty"] == a.as_str()),
        "{hb:?}"
    );

    // Refusals and hostile settlement txs (alice holds one token of 700 now).
    hostile_and_refused(&dir, &alice, &bob);
    let err = failed(
        &wallet(&dir, &alice, &["issue", "--to", &a, "--amount", "5"]),
        "alice issuing",
    );
    assert!(err.contains("not an issuer"), "{err}");

    // Above the balance: refused before anything is sent or written.
    let before = std::fs::read(&alice).unwrap();
    let err = failed(&pay(&dir, &alice, &b, 701), "paying above the balance");
    assert!(err.contains("insufficient funds"), "{err}");
    assert_eq!(std::fs::read(&alice).unwrap(), before, "nothing written");
    let err = failed(&pay(&dir, &alice, "not-an-address", 1), "an unknown address");
    assert!(err.contains("unknown address"), "{err}");

    // Two copies of alice's wallet spend her one token at once.
    let alice2 = wallets.join("alice-copy");
    std::fs::copy(&alice, &alice2).unwrap();
    let spawn = |file: &PathBuf, to: &str| {
        Command::new(bin())
            .args(["wallet", "--network"])
            .arg(&dir)
            .arg("--wallet")
            .arg(file)
            .args(["--json", "transfer", "--to", to, "--amount", "400"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (p1, p2) = (spawn(&alice, &b), spawn(&alice2, &c));
    let (o1, o2) = (p1.wait_with_output().unwrap(), p2.wait_with_output().unwrap());
    assert_eq!(
        u8::from(o1.status.success()) + u8::from(o2.status.success()),
        1,
        "exactly one commits:\n{}\n{}",
        String::from_utf8_lossy(&o1.stderr),
        String::from_utf8_lossy(&o2.stderr)
    );
    let loser = if o1.status.success() { &o2 } else { &o1 };
    let err = String::from_utf8_lossy(&loser.stderr);
    assert!(
        err.contains("double spend") || err.contains("already spent"),
        "a double-spend reason: {err}"
    );
    assert_eq!(balance(&dir, &alice), (300, 0));
    assert_eq!(balance(&dir, &alice2), (300, 0));
    let paid = balance(&dir, &bob).0 + balance(&dir, &carol).0;
    assert_eq!(paid, 300 + 400, "one payment of 400 arrived");

    // Endorsers down: 2 of 5 is fine, 3 of 5 is not.
    let net = network_json(&dir);
    for e in ["endorser-4", "endorser-5"] {
        kill_and_wait(pid_in(&net, e));
    }
    ok(&pay(&dir, &alice, &b, 10), "paying with 3 of 5 endorsers");
    kill_and_wait(pid_in(&net, "endorser-3"));
    let before = std::fs::read(&alice).unwrap();
    let err = failed(&pay(&dir, &alice, &b, 10), "paying with 2 of 5 endorsers");
    assert!(err.contains("endorsers below threshold"), "{err}");
    assert_eq!(std::fs::read(&alice).unwrap(), before, "nothing written");
    assert_eq!(balance(&dir, &alice), (290, 0));
    fabrx_ok(&["up", "--json", "--dir"], &dir);

    // A wallet killed once its payment is pending: the next command settles it.
    let mut child = Command::new(bin())
        .args(["wallet", "--network"])
        .arg(&dir)
        .arg("--wallet")
        .arg(&alice)
        .args(["transfer", "--to", &b, "--amount", "90"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut killed_pending = false;
    while std::time::Instant::now() < deadline {
        let text = std::fs::read_to_string(&alice).unwrap_or_default();
        if let Ok(w) = serde_json::from_str::<wallet::WalletFile>(&text)
            && !w.pending.is_empty()
        {
            child.kill().unwrap();
            killed_pending = true;
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = child.wait();
    eprintln!("wallet killed with its payment pending: {killed_pending}");
    ok(&wallet(&dir, &alice, &["sync"]), "sync after the kill");
    assert_eq!(balance(&dir, &alice), (200, 0));
    assert_eq!(
        balance(&dir, &bob).0,
        300 + 10 + 90 + if o1.status.success() { 400 } else { 0 }
    );
    let hist = history(&dir, &alice);
    assert_eq!(
        hist.iter()
            .filter(|h| h["direction"] == "sent" && h["amount"] == 90)
            .count(),
        1,
        "{hist:?}"
    );

    // A slow network: the payment stays pending, is not paid twice, and commits once.
    let bob_before = balance(&dir, &bob).0;
    slow_routers(&dir, &alice, &b);
    assert_eq!(balance(&dir, &alice), (175, 0));
    assert_eq!(balance(&dir, &bob).0, bob_before + 25, "paid once");
    let hist = history(&dir, &alice);
    assert_eq!(
        hist.iter()
            .filter(|h| h["direction"] == "sent" && h["amount"] == 25 && h["status"] == "COMMITTED")
            .count(),
        1,
        "{hist:?}"
    );

    // A pending payment abandoned: nothing paid, alice keeps her 175.
    abandon_a_pending_payment(&dir, &alice, &b);
    assert_eq!(balance(&dir, &alice), (175, 0));
    assert_eq!(
        balance(&dir, &bob).0,
        bob_before + 25,
        "the abandoned payment never paid"
    );

    // Front-running and private reads (alice pays her 175 token to bob).
    front_run_and_private_reads(&dir, &alice, &bob, &issuer);
    assert_eq!(balance(&dir, &bob).0, bob_before + 25 + 175);
    fabrx_ok(&["down", "--dir"], &dir);
}
