#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Validation on load: each bad field of a good file gives its typed error.

use netconfig::file::{ClientAuthFile, ClientFile, NetworkFile};
use netconfig::{Error, GenerateSpec, NetworkConfig, Node, generate};

/// A good file: 4 parties, 2 shards, seeded keys.
fn good() -> NetworkFile {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        seed: Some(9),
        ..GenerateSpec::new(4, 2, dir.path())
    })
    .unwrap();
    g.config.file().clone()
}

fn client(id: &str, seed: &str) -> ClientFile {
    ClientFile {
        msp_id: "org1".into(),
        certificate_id: id.into(),
        public_key: crypto::derive_signing_key(crypto::Scheme::Ed25519, seed)
            .public_key()
            .to_string(),
    }
}

type Mutation = fn(&mut NetworkFile);
type Check = fn(&Error) -> bool;

#[test]
fn each_bad_field_gives_its_typed_error() {
    let cases: Vec<(&str, Mutation, Check)> = vec![
        (
            "version",
            |f| f.version = 2,
            |e| {
                matches!(
                    e,
                    Error::UnsupportedVersion {
                        version: 2,
                        supported: 1
                    }
                )
            },
        ),
        (
            "empty chain",
            |f| f.chain.clear(),
            |e| matches!(e, Error::BadChain { .. }),
        ),
        (
            "chain with a space",
            |f| f.chain = "a b".into(),
            |e| matches!(e, Error::BadChain { .. }),
        ),
        (
            "no parties",
            |f| f.parties.clear(),
            |e| matches!(e, Error::NoParties),
        ),
        ("no shards", |f| f.shards = 0, |e| matches!(e, Error::NoShards)),
        (
            "party ids out of order",
            |f| f.parties.swap(1, 2),
            |e| {
                matches!(
                    e,
                    Error::PartyOrder {
                        index: 2,
                        id: 2,
                        after: 3
                    }
                )
            },
        ),
        (
            "party id 0",
            |f| f.parties[0].id = 0,
            |e| {
                matches!(
                    e,
                    Error::PartyOrder {
                        index: 0,
                        id: 0,
                        after: 0
                    }
                )
            },
        ),
        (
            "duplicate party",
            |f| f.parties[1] = f.parties[0].clone(),
            |e| matches!(e, Error::PartyOrder { index: 1, id: 1, .. }),
        ),
        (
            "a batcher missing",
            |f| {
                f.parties[2].batchers.pop();
            },
            |e| {
                matches!(
                    e,
                    Error::BatcherShards {
                        party: 3,
                        index: 1,
                        shard: None,
                        shards: 2
                    }
                )
            },
        ),
        (
            "an extra batcher",
            |f| {
                let mut b = f.parties[0].batchers[1].clone();
                b.shard = 2;
                f.parties[0].batchers.push(b);
            },
            |e| {
                matches!(
                    e,
                    Error::BatcherShards {
                        party: 1,
                        index: 2,
                        shard: Some(2),
                        ..
                    }
                )
            },
        ),
        (
            "batchers out of order",
            |f| f.parties[3].batchers.swap(0, 1),
            |e| {
                matches!(
                    e,
                    Error::BatcherShards {
                        party: 4,
                        index: 0,
                        shard: Some(1),
                        ..
                    }
                )
            },
        ),
        (
            "router endpoint without port",
            |f| f.parties[1].router = "127.0.0.1".into(),
            |e| {
                matches!(
                    e,
                    Error::BadEndpoint {
                        node: Node::Router(2),
                        ..
                    }
                )
            },
        ),
        (
            "router endpoint empty",
            |f| f.parties[1].router.clear(),
            |e| {
                matches!(
                    e,
                    Error::BadEndpoint {
                        node: Node::Router(2),
                        ..
                    }
                )
            },
        ),
        (
            "consenter port 0",
            |f| f.parties[0].consenter.endpoint = "localhost:0".into(),
            |e| {
                matches!(
                    e,
                    Error::BadEndpoint {
                        node: Node::Consenter(1),
                        reason: "has port 0",
                        ..
                    }
                )
            },
        ),
        (
            "batcher port too large",
            |f| f.parties[2].batchers[1].endpoint = "h:70000".into(),
            |e| {
                matches!(
                    e,
                    Error::BadEndpoint {
                        node: Node::Batcher { party: 3, shard: 1 },
                        ..
                    }
                )
            },
        ),
        (
            "assembler host with a slash",
            |f| f.parties[3].assembler = Some("http://h:1".into()),
            |e| {
                matches!(
                    e,
                    Error::BadEndpoint {
                        node: Node::Assembler(4),
                        ..
                    }
                )
            },
        ),
        (
            "duplicate endpoint",
            |f| f.parties[2].batchers[0].endpoint = f.parties[0].router.clone(),
            |e| {
                matches!(
                    e,
                    Error::DuplicateEndpoint {
                        first: Node::Router(1),
                        second: Node::Batcher { party: 3, shard: 0 },
                        ..
                    }
                )
            },
        ),
        (
            "duplicate endpoint, one named localhost",
            |f| {
                let port = f.parties[0].router.rsplit_once(':').unwrap().1.to_owned();
                f.parties[2].batchers[0].endpoint = format!("localhost:{port}");
            },
            |e| {
                matches!(
                    e,
                    Error::DuplicateEndpoint {
                        first: Node::Router(1),
                        second: Node::Batcher { party: 3, shard: 0 },
                        ..
                    }
                )
            },
        ),
        (
            "consenter key not hex",
            |f| f.parties[1].consenter.public_key = "ed25519:zz".into(),
            |e| {
                matches!(
                    e,
                    Error::BadKey {
                        node: Node::Consenter(2),
                        ..
                    }
                )
            },
        ),
        (
            "batcher key unknown scheme",
            |f| {
                let hex = f.parties[1].batchers[0]
                    .public_key
                    .split_once(':')
                    .unwrap()
                    .1
                    .to_string();
                f.parties[1].batchers[0].public_key = format!("rsa:{hex}");
            },
            |e| {
                matches!(
                    e,
                    Error::BadKey {
                        node: Node::Batcher { party: 2, shard: 0 },
                        ..
                    }
                )
            },
        ),
        (
            "batcher key not a point",
            |f| f.parties[1].batchers[1].public_key = format!("ed25519:{}", "00".repeat(32)),
            |e| {
                matches!(
                    e,
                    Error::BadKey {
                        node: Node::Batcher { party: 2, shard: 1 },
                        ..
                    }
                )
            },
        ),
        (
            "duplicate key",
            |f| f.parties[3].consenter.public_key = f.parties[0].batchers[1].public_key.clone(),
            |e| {
                matches!(
                    e,
                    Error::DuplicateKey {
                        first: Node::Batcher { party: 1, shard: 1 },
                        second: Node::Consenter(4)
                    }
                )
            },
        ),
        (
            "max_batch_requests 0",
            |f| f.batching.max_batch_requests = 0,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "batching.max_batch_requests",
                        value: 0,
                        ..
                    }
                )
            },
        ),
        (
            "batch timeout 0",
            |f| f.batching.batch_timeout_ms = 0,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "batching.batch_timeout_ms",
                        ..
                    }
                )
            },
        ),
        (
            "batch timeout over a day",
            |f| f.batching.batch_timeout_ms = 86_400_001,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "batching.batch_timeout_ms",
                        ..
                    }
                )
            },
        ),
        (
            "request over the wire limit",
            |f| f.batching.max_request_bytes = 4 << 20,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "batching.max_request_bytes",
                        ..
                    }
                )
            },
        ),
        (
            "window 0",
            |f| f.batching.window = 0,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "batching.window",
                        ..
                    }
                )
            },
        ),
        (
            "batch bytes below request bytes",
            |f| f.batching.max_batch_bytes = 1000,
            |e| {
                matches!(
                    e,
                    Error::Batcher {
                        party: 1,
                        shard: 0,
                        source: batcher::Error::LimitTooSmall {
                            field: "max_batch_bytes",
                            ..
                        }
                    }
                )
            },
        ),
        (
            "complain before forward",
            |f| f.batching.complain_timeout_ms = 10,
            |e| {
                matches!(
                    e,
                    Error::Batcher {
                        source: batcher::Error::LimitTooSmall {
                            field: "complain_timeout_ms",
                            ..
                        },
                        ..
                    }
                )
            },
        ),
        (
            "unordered below window",
            |f| f.batching.max_unordered_batches = 5,
            |e| {
                matches!(
                    e,
                    Error::Batcher {
                        source: batcher::Error::LimitTooSmall {
                            field: "max_unordered_batches",
                            ..
                        },
                        ..
                    }
                )
            },
        ),
        (
            "consensus batch 0",
            |f| f.consensus.batch_max = 0,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "consensus.batch_max",
                        ..
                    }
                )
            },
        ),
        (
            "heartbeat timeout not above interval",
            |f| f.consensus.heartbeat_timeout_ms = f.consensus.heartbeat_interval_ms,
            |e| {
                matches!(
                    e,
                    Error::TooSmall {
                        field: "consensus.heartbeat_timeout_ms",
                        other: "consensus.heartbeat_interval_ms",
                        ..
                    }
                )
            },
        ),
        (
            "consensus batches too large for a message",
            |f| f.consensus.batch_max_bytes = 32 << 20,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "consensus.batch_max_bytes",
                        ..
                    }
                )
            },
        ),
        (
            "pending bytes below request",
            |f| f.consensus.max_pending_bytes = 10,
            |e| {
                matches!(
                    e,
                    Error::TooSmall {
                        field: "consensus.max_pending_bytes",
                        ..
                    }
                )
            },
        ),
        (
            "a consensus timeout of an hour",
            |f| f.consensus.view_change_timeout_ms = 3_600_000,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "consensus.view_change_timeout_ms",
                        value: 3_600_000,
                        ..
                    }
                )
            },
        ),
        (
            "a request timeout under three ticks",
            |f| f.consensus.request_timeout_ms = 2 * f.consensus.tick_ms,
            |e| {
                matches!(
                    e,
                    Error::TooSmall {
                        field: "consensus.request_timeout_ms",
                        ..
                    }
                )
            },
        ),
        (
            "heartbeats faster than the tick",
            |f| {
                f.consensus.heartbeat_interval_ms = 1;
                f.consensus.heartbeat_timeout_ms = 40;
            },
            |e| {
                matches!(
                    e,
                    Error::TooSmall {
                        field: "consensus.heartbeat_interval_ms",
                        other: "consensus.tick_ms",
                        ..
                    }
                )
            },
        ),
        (
            "consenter requests too small for a config update",
            |f| f.consensus.max_request_bytes = 2048,
            |e| {
                matches!(
                    e,
                    Error::TooSmall {
                        field: "consensus.max_request_bytes",
                        value: 2048,
                        ..
                    }
                )
            },
        ),
        (
            "seqs ahead without bound",
            |f| f.consensus.max_seqs_ahead = 1 << 40,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "consensus.max_seqs_ahead",
                        ..
                    }
                )
            },
        ),
        (
            "seqs ahead below unordered batches",
            |f| f.consensus.max_seqs_ahead = 99,
            |e| {
                matches!(
                    e,
                    Error::TooSmall {
                        field: "consensus.max_seqs_ahead",
                        value: 99,
                        other: "batching.max_unordered_batches",
                        minimum: 100
                    }
                )
            },
        ),
        (
            "tick 0",
            |f| f.consensus.tick_ms = 0,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "consensus.tick_ms",
                        ..
                    }
                )
            },
        ),
        (
            "router request above the batcher's",
            |f| f.router.max_request_bytes = f.batching.max_request_bytes + 1,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "router.max_request_bytes",
                        ..
                    }
                )
            },
        ),
        (
            "router in-flight 0",
            |f| f.router.shard_max_in_flight = 0,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "router.shard_max_in_flight",
                        ..
                    }
                )
            },
        ),
        (
            "router in-flight bytes below a request",
            |f| f.router.shard_max_in_flight_bytes = 10,
            |e| {
                matches!(
                    e,
                    Error::Router {
                        party: 1,
                        source: router::Error::InvalidConfig {
                            field: "shard_max_in_flight_bytes",
                            ..
                        }
                    }
                )
            },
        ),
        (
            "answer timeout 0",
            |f| f.router.answer_timeout_ms = 0,
            |e| {
                matches!(
                    e,
                    Error::OutOfRange {
                        field: "router.answer_timeout_ms",
                        ..
                    }
                )
            },
        ),
        (
            "client with a bad key",
            |f| {
                f.router.client_auth = ClientAuthFile::Signed {
                    clients: vec![
                        client("alice", "a"),
                        ClientFile {
                            public_key: "ed25519:00".into(),
                            ..client("bob", "b")
                        },
                    ],
                }
            },
            |e| matches!(e, Error::BadClient { index: 1, .. }),
        ),
        (
            "client listed twice",
            |f| {
                f.router.client_auth = ClientAuthFile::Signed {
                    clients: vec![client("alice", "a"), client("alice", "b")],
                }
            },
            |e| matches!(e, Error::BadClient { index: 1, .. }),
        ),
        (
            "client without id",
            |f| {
                f.router.client_auth = ClientAuthFile::Signed {
                    clients: vec![client("", "a")],
                }
            },
            |e| matches!(e, Error::BadClient { index: 0, .. }),
        ),
        (
            "update policy of 0 signatures",
            |f| f.update_policy = Some(netconfig::file::UpdatePolicyFile { signatures: 0 }),
            |e| {
                matches!(
                    e,
                    Error::UpdatePolicy {
                        signatures: 0,
                        parties: 4
                    }
                )
            },
        ),
        (
            "update policy of more signatures than parties",
            |f| f.update_policy = Some(netconfig::file::UpdatePolicyFile { signatures: 5 }),
            |e| {
                matches!(
                    e,
                    Error::UpdatePolicy {
                        signatures: 5,
                        parties: 4
                    }
                )
            },
        ),
        (
            "an admin key that does not decode",
            |f| f.parties[1].admin_key = Some("ed25519:zz".into()),
            |e| matches!(e, Error::BadAdminKey { party: 2, .. }),
        ),
        (
            "two parties with one admin key",
            |f| f.parties[2].admin_key = f.parties[0].admin_key.clone(),
            |e| matches!(e, Error::DuplicateAdminKey { party: 3, other } if other == "party 1 admin"),
        ),
        (
            "an admin key that is a consenter's key",
            |f| f.parties[0].admin_key = Some(f.parties[1].consenter.public_key.clone()),
            |e| matches!(e, Error::DuplicateAdminKey { party: 1, other } if other == "party 2 consenter"),
        ),
    ];
    assert!(NetworkConfig::from_file(good()).is_ok());
    let base = good();
    for (name, mutate, check) in cases {
        let mut file = base.clone();
        mutate(&mut file);
        match NetworkConfig::from_file(file.clone()) {
            Ok(_) => panic!("{name}: accepted"),
            Err(e) => assert!(check(&e), "{name}: wrong error {e:?} ({e})"),
        }
        // The same through the JSON text and a file on disk.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("network-config.json");
        std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
        let e = NetworkConfig::load(&path).unwrap_err();
        assert!(check(&e), "{name} (from disk): wrong error {e:?}");
    }
}

#[test]
fn signed_client_auth_reaches_the_router_config() {
    let mut file = good();
    file.router.client_auth = ClientAuthFile::Signed {
        clients: vec![client("alice", "a"), client("bob", "b")],
    };
    let cfg = NetworkConfig::from_file(file).unwrap();
    let router = cfg.router_config(1).unwrap();
    let router::ClientAuth::Signed(keys) = router.requests.client_auth else {
        panic!("open");
    };
    assert_eq!(keys.len(), 2);
    let alice = keys.get(&netconfig::client_identity("org1", "alice")).unwrap();
    assert_eq!(
        alice,
        &crypto::derive_signing_key(crypto::Scheme::Ed25519, "a").public_key()
    );
    assert!(matches!(good().router.client_auth, ClientAuthFile::Open));
    assert!(matches!(
        NetworkConfig::from_file(good())
            .unwrap()
            .router_config(2)
            .unwrap()
            .requests
            .client_auth,
        router::ClientAuth::Open
    ));
}

#[test]
fn text_that_is_not_a_network_config_is_a_parse_error() {
    let text = serde_json::to_string(&good()).unwrap();
    assert!(NetworkConfig::from_json(&text).is_ok());
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["batching"]["max_batch_requets"] = 5.into();
    let misspelt = serde_json::to_string(&value).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value.as_object_mut().unwrap().remove("shards");
    let missing = serde_json::to_string(&value).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["shards"] = (-1).into();
    let negative = serde_json::to_string(&value).unwrap();
    for (name, bad) in [
        ("misspelt field", misspelt.as_str()),
        ("missing shards", missing.as_str()),
        ("negative shards", negative.as_str()),
        ("cut short", &text[..text.len() / 2]),
        ("not json", "parties: 4"),
        ("empty", ""),
    ] {
        let e = NetworkConfig::from_json(bad).unwrap_err();
        assert!(matches!(e, Error::Parse { .. }), "{name}: {e:?}");
    }
    // Parameter blocks are optional: the defaults apply.
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    for block in ["batching", "consensus", "router"] {
        value.as_object_mut().unwrap().remove(block);
    }
    let minimal = NetworkConfig::from_json(&serde_json::to_string(&value).unwrap()).unwrap();
    assert_eq!(minimal.file().batching, Default::default());
    // A missing file.
    let e = NetworkConfig::load(std::path::Path::new("/nonexistent/network-config.json")).unwrap_err();
    assert!(matches!(e, Error::Read { .. }));
}

#[test]
fn endpoints_are_host_and_non_zero_port() {
    use netconfig::Endpoint;
    for good in ["127.0.0.1:7050", "router-1.example:443", "[::1]:7050", "h:65535"] {
        let e = Endpoint::parse(good).unwrap_or_else(|r| panic!("{good}: {r}"));
        assert_eq!(e.as_str(), good);
        assert_eq!(e.uri(), format!("http://{good}"));
    }
    assert_eq!(
        Endpoint::parse("127.0.0.1:7050")
            .unwrap()
            .listen_addr()
            .to_string(),
        "127.0.0.1:7050"
    );
    // A DNS name: every interface at its port.
    assert_eq!(
        Endpoint::parse("router-1.example:7050")
            .unwrap()
            .listen_addr()
            .to_string(),
        "0.0.0.0:7050"
    );
    for bad in [
        "",
        "7050",
        ":7050",
        "h:",
        "h:0",
        "h:65536",
        "h:-1",
        "http://h:1",
        "h h:1",
        "[::1:7050",
        "[]:7050",
        "::1:7050",
        "[zz::1]:7050",
    ] {
        assert!(Endpoint::parse(bad).is_err(), "{bad:?} accepted");
    }
}
