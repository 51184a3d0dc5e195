#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Generation and loading: a generated network loads back to the same config, its key files
//! are private and hold the listed keys, every role's config comes out of it, seeded
//! generation is reproducible and unseeded generation is not.

use netconfig::{ConsenterPaths, Error, GenerateSpec, NetworkConfig, Node, generate, key_file_path};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn spec(dir: &Path, parties: u32, shards: u32, seed: Option<u64>) -> GenerateSpec {
    GenerateSpec {
        seed,
        ..GenerateSpec::new(parties, shards, dir)
    }
}

fn all_public_keys(cfg: &NetworkConfig) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for p in cfg.parties() {
        keys.insert(p.consenter_key.to_string());
        for b in &p.batchers {
            keys.insert(b.public_key.to_string());
        }
    }
    keys
}

#[test]
fn a_generated_network_loads_back_with_private_key_files_matching_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let generated = generate(&spec(dir.path(), 4, 2, None)).unwrap();
    assert_eq!(
        generated.config_path,
        dir.path().join("config/network-config.json")
    );
    let loaded = NetworkConfig::load(&generated.config_path).unwrap();
    assert_eq!(loaded.file(), generated.config.file());
    assert_eq!(loaded.n(), 4);
    assert_eq!(loaded.shards().get(), 2);
    assert_eq!(loaded.chain(), "fabrx");
    // 4 consenters + 4·2 batchers sign; routers and assemblers have no key.
    assert_eq!(generated.key_files.len(), 12);
    assert_eq!(all_public_keys(&loaded).len(), 12, "every key is distinct");
    for (node, path) in &generated.key_files {
        assert_eq!(Some(path.clone()), key_file_path(dir.path(), *node));
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
        let key = loaded.read_node_key(*node, path).unwrap();
        assert_eq!(&key.public_key(), loaded.public_key(*node).unwrap());
    }
    let keys_dir = std::fs::metadata(dir.path().join("keys/party-1")).unwrap();
    assert_eq!(keys_dir.permissions().mode() & 0o777, 0o700);
    // A key file of another node is refused as that node's key.
    let other = key_file_path(dir.path(), Node::Batcher { party: 2, shard: 1 }).unwrap();
    assert!(matches!(
        loaded.read_node_key(Node::Consenter(2), &other),
        Err(Error::KeyMismatch {
            node: Node::Consenter(2),
            ..
        })
    ));
    assert!(matches!(
        loaded.public_key(Node::Router(1)),
        Err(Error::NoKey {
            node: Node::Router(1)
        })
    ));
    // The shared file holds no secret: none of the key files' secret lines appear in it.
    let shared = std::fs::read_to_string(&generated.config_path).unwrap();
    for (_, path) in &generated.key_files {
        let text = std::fs::read_to_string(path).unwrap();
        let secret = text.lines().find_map(|l| l.strip_prefix("secret ")).unwrap();
        assert!(!shared.contains(secret));
    }
    // Generating again into the same directory is refused and changes nothing.
    assert!(matches!(
        generate(&spec(dir.path(), 4, 2, None)),
        Err(Error::Exists { .. })
    ));
    assert_eq!(std::fs::read_to_string(&generated.config_path).unwrap(), shared);
}

#[test]
fn role_configs_come_out_of_the_network_config() {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        base_port: 20_000,
        ..spec(dir.path(), 4, 3, Some(7))
    })
    .unwrap();
    let cfg = g.config;
    // Layout: party p from 20000 + (p − 1)·6: router, consenter, assembler, batchers.
    let setup = cfg.router_setup(2, None).unwrap();
    assert_eq!(setup.node.listen.to_string(), "127.0.0.1:20006");
    assert_eq!(setup.node.router.party, 2);
    assert_eq!(setup.node.router.shards.get(), 3);
    assert_eq!(
        setup.batcher_uris,
        vec![
            "http://127.0.0.1:20009",
            "http://127.0.0.1:20010",
            "http://127.0.0.1:20011"
        ]
    );
    let listen = "127.0.0.1:0".parse().unwrap();
    assert_eq!(cfg.router_setup(2, Some(listen)).unwrap().node.listen, listen);
    assert!(matches!(
        cfg.router_setup(5, None),
        Err(Error::UnknownParty { party: 5, parties }) if parties == vec![1, 2, 3, 4]
    ));
    assert!(matches!(
        cfg.router_setup(0, None),
        Err(Error::UnknownParty { party: 0, .. })
    ));

    let b = cfg.batcher_config(3, 1).unwrap();
    assert_eq!((b.party, b.shard, b.parties.len(), b.shards), (3, 1, 4, 3));
    assert_eq!(b.keys.len(), 4);
    for (party, key) in &b.keys {
        assert_eq!(
            key,
            cfg.public_key(Node::Batcher {
                party: *party,
                shard: 1
            })
            .unwrap()
        );
    }
    assert_eq!(b.max_batch_requests.get(), cfg.file().batching.max_batch_requests);
    assert!(b.validate().is_ok());
    assert!(matches!(
        cfg.batcher_config(3, 3),
        Err(Error::UnknownShard { shard: 3, shards: 3 })
    ));

    assert_eq!(cfg.replica_id(1).unwrap(), 0);
    assert_eq!(cfg.consenter_peers()[3], "127.0.0.1:20019");
    let engine = cfg.consenter_engine(4).unwrap();
    assert_eq!((engine.id, engine.n()), (3, 4));
    assert_eq!(engine.chain, cfg.cluster_keys().chain_id());
    assert_eq!(engine.batch_interval_ms, cfg.file().consensus.batch_interval_ms);

    // The consenter's own key loading (NodeKeys::Files) accepts the generated files and
    // ends up with the cluster the network config describes.
    let node = cfg
        .consenter_node_config(
            2,
            ConsenterPaths {
                key_file: key_file_path(dir.path(), Node::Consenter(2)).unwrap(),
                peer_keys: g.peer_keys_path.clone(),
                wal: dir.path().join("wal"),
                decisions: dir.path().join("decisions"),
            },
        )
        .unwrap();
    assert_eq!(node.peers, cfg.consenter_peers());
    let (key, cluster) = node.keys.load(1, 4).unwrap();
    assert_eq!(&key.public_key(), cfg.public_key(Node::Consenter(2)).unwrap());
    assert_eq!(
        cluster.with_chain(&node.chain).cluster_id(),
        cfg.cluster_keys().cluster_id()
    );
    let key_file = key_file_path(dir.path(), Node::Consenter(2)).unwrap();
    let (own, keys) = cfg.consenter_signing_keys(2, &key_file).unwrap();
    assert_eq!(own.public_key(), key.public_key());
    assert_eq!(keys.cluster_id(), cfg.cluster_keys().cluster_id());
    assert!(cfg.consenter_signing_keys(1, &key_file).is_err());

    let arma = cfg.arma_config().unwrap();
    assert_eq!((arma.parties.ids(), arma.shards), (&[1, 2, 3, 4][..], 3));
    assert_eq!(arma.max_seqs_ahead, cfg.file().consensus.max_seqs_ahead);

    // Seeded consenter keys are those of `fabrx node bft --seed-prefix`.
    let prefix = netconfig::generate::consenter_seed_prefix(7);
    let (_, seeded) = consenter::keys::keys_from_seed_prefix(&prefix, 0, 4);
    for (i, k) in cfg.consenter_keys().iter().enumerate() {
        assert_eq!(seeded.key(i as u32), Some(k));
    }
}

#[test]
fn seeded_generation_is_reproducible_and_unseeded_is_random() {
    let (a, b, c, d) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    // Everything but the TLS and Fabric certificates (always random: ADR 0011) is the
    // seed's.
    let text = |g: &netconfig::Generated| {
        let mut file = g.config.file().clone();
        assert!(file.tls.take().is_some(), "TLS is on by default");
        assert!(file.fabric.take().is_some(), "Fabric organizations are generated");
        serde_json::to_string(&file).unwrap()
    };
    let seeded_a = generate(&spec(a.path(), 4, 2, Some(42))).unwrap();
    let seeded_b = generate(&spec(b.path(), 4, 2, Some(42))).unwrap();
    assert_eq!(text(&seeded_a), text(&seeded_b));
    assert_ne!(
        seeded_a.config.file().tls,
        seeded_b.config.file().tls,
        "TLS keys are random"
    );
    for ((node, pa), (_, pb)) in seeded_a.key_files.iter().zip(&seeded_b.key_files) {
        assert_eq!(
            std::fs::read_to_string(pa).unwrap(),
            std::fs::read_to_string(pb).unwrap(),
            "{node}"
        );
    }
    let other_seed = generate(&spec(c.path(), 4, 2, Some(43))).unwrap();
    assert!(all_public_keys(&other_seed.config).is_disjoint(&all_public_keys(&seeded_a.config)));
    let random_1 = generate(&spec(d.path(), 4, 2, None)).unwrap();
    let e = tempfile::tempdir().unwrap();
    let random_2 = generate(&spec(e.path(), 4, 2, None)).unwrap();
    let (k1, k2) = (
        all_public_keys(&random_1.config),
        all_public_keys(&random_2.config),
    );
    assert!(k1.is_disjoint(&k2), "two unseeded networks share a key");
    assert!(k1.is_disjoint(&all_public_keys(&seeded_a.config)));
}

#[test]
fn generation_requests_out_of_range_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        generate(&spec(dir.path(), 0, 2, None)),
        Err(Error::NoParties)
    ));
    assert!(matches!(
        generate(&spec(dir.path(), 4, 0, None)),
        Err(Error::NoShards)
    ));
    let high = GenerateSpec {
        base_port: 65_500,
        ..spec(dir.path(), 10, 4, Some(1))
    };
    assert!(matches!(generate(&high), Err(Error::Generate { .. })));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // One party, one shard, an IPv6 host.
    let v6 = GenerateSpec {
        host: "::1".into(),
        ..spec(dir.path(), 1, 1, Some(1))
    };
    let g = generate(&v6).unwrap();
    assert_eq!(g.config.parties()[0].router.as_str(), "[::1]:7050");
    assert_eq!(
        g.config.router_setup(1, None).unwrap().node.listen.to_string(),
        "[::1]:7050"
    );
}

#[test]
fn batcher_and_arma_consenter_node_configs_come_out_of_the_network_config() {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        base_port: 21_000,
        ..spec(dir.path(), 4, 2, Some(3))
    })
    .unwrap();
    let cfg = g.config;
    // Layout: party p from 21000 + (p − 1)·5: router, consenter, assembler, batchers.
    let node = Node::Batcher { party: 3, shard: 1 };
    let key_file = key_file_path(dir.path(), node).unwrap();
    let b = cfg
        .batcher_node_config(3, 1, &key_file, dir.path().join("b31"), None)
        .unwrap();
    assert_eq!((b.batcher.party, b.batcher.shard), (3, 1));
    assert_eq!(&b.key.public_key(), cfg.public_key(node).unwrap());
    assert_eq!(b.listen.to_string(), "127.0.0.1:21014");
    assert_eq!(b.data_dir, dir.path().join("b31"));
    assert_eq!(b.own_consenter, "http://127.0.0.1:21011");
    assert_eq!(b.consenters.len(), 4);
    assert_eq!(b.consenters[&1], "http://127.0.0.1:21001");
    assert_eq!(b.peers.len(), 4);
    assert_eq!(b.peers[&4], "http://127.0.0.1:21019");
    let verifying = b.consenter_keys.as_ref().expect("decisions are verified");
    assert_eq!(verifying.chain_id(), cfg.cluster_keys().chain_id());
    let listen = "127.0.0.1:0".parse().unwrap();
    let b = cfg
        .batcher_node_config(3, 1, &key_file, dir.path().join("b31"), Some(listen))
        .unwrap();
    assert_eq!(b.listen, listen);
    // Another node's key file, an unknown shard or party.
    assert!(matches!(
        cfg.batcher_node_config(3, 0, &key_file, dir.path().join("x"), None),
        Err(Error::KeyMismatch { .. })
    ));
    assert!(matches!(
        cfg.batcher_node_config(3, 2, &key_file, dir.path().join("x"), None),
        Err(Error::UnknownShard { shard: 2, shards: 2 })
    ));
    assert!(matches!(
        cfg.batcher_node_config(5, 0, &key_file, dir.path().join("x"), None),
        Err(Error::UnknownParty { party: 5, .. })
    ));

    let paths = |party: u32| netconfig::ArmaConsenterPaths {
        key_file: key_file_path(dir.path(), Node::Consenter(party)).unwrap(),
        peer_keys: g.peer_keys_path.clone(),
        data_dir: dir.path().join("c"),
    };
    let c = cfg.arma_node_config(2, paths(2), None).unwrap();
    assert_eq!(c.listen, Some("127.0.0.1:21006".parse().unwrap()));
    assert_eq!((c.node.engine.id, c.node.engine.n()), (1, 4));
    assert_eq!(c.node.peers, cfg.consenter_peers());
    assert_eq!(c.node.wal, dir.path().join("c/wal/replica.wal"));
    assert_eq!(c.node.decisions, dir.path().join("c/decisions"));
    assert_eq!(c.state, dir.path().join("c/state.json"));
    assert_eq!((c.arma.parties.len(), c.arma.shards), (4, 2));
    assert_eq!(c.arma.max_seqs_ahead, cfg.file().consensus.max_seqs_ahead);
    assert_eq!(
        cfg.arma_node_config(2, paths(2), Some(listen)).unwrap().listen,
        Some(listen)
    );
    // Party 1's key file for party 2; a peer-keys file that is not the config's.
    assert!(matches!(
        cfg.arma_node_config(2, paths(1), None),
        Err(Error::KeyMismatch { .. })
    ));
    let other = dir.path().join("other-peer-keys.txt");
    let mut text = std::fs::read_to_string(&g.peer_keys_path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let swapped = [lines[0], lines[2], lines[1], lines[3], lines[4]].join("\n");
    text = swapped;
    std::fs::write(&other, text).unwrap();
    let refused = cfg.arma_node_config(
        2,
        netconfig::ArmaConsenterPaths {
            peer_keys: other,
            ..paths(2)
        },
        None,
    );
    assert!(
        matches!(&refused, Err(Error::Consenter { reason }) if reason.contains("not the network config's")),
        "{refused:?}"
    );
}

#[test]
fn a_node_of_a_party_or_shard_the_network_lacks_is_named_not_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let generated = generate(&spec(dir.path(), 4, 2, Some(7))).unwrap();
    let cfg = NetworkConfig::load(&generated.config_path).unwrap();
    let path = &generated.config_path;
    let e = cfg
        .install_tls(path, wire::tls::Role::Router, 9, None)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "party 9 is not in [1, 2, 3, 4]: the network has no such node"
    );
    let e = cfg
        .install_tls(path, wire::tls::Role::Batcher, 1, Some(2))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "shard 2 is not in 0..2: the network has no such node"
    );
}

/// The topology lists every process once, in start order, with unique names; committer
/// and token nodes only for the committing parties asked for.
#[test]
fn the_topology_lists_every_process_once_in_start_order() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = generate(&spec(dir.path(), 4, 2, Some(3))).unwrap().config;
    let ordering_only = cfg.topology(0).unwrap();
    // Per party a consenter, 2 batchers, a router and an assembler.
    assert_eq!(ordering_only.len(), 4 * 5);
    let names: Vec<String> = ordering_only.iter().map(netconfig::Process::name).collect();
    assert_eq!(&names[..3], ["consenter-1", "batcher-1-0", "batcher-1-1"]);
    assert_eq!(&names[12..14], ["router-1", "assembler-1"]);
    let two = cfg.topology(2).unwrap();
    let names: BTreeSet<String> = two.iter().map(netconfig::Process::name).collect();
    assert_eq!(names.len(), two.len(), "names are unique");
    for n in ["vcservice-2", "sigverifier-2", "sidecar-2"] {
        assert!(names.contains(n), "{n} in {names:?}");
    }
    assert!(!names.contains("sidecar-3"));
    // Every ordering node comes before every committer node.
    let first_committer = two
        .iter()
        .position(|p| p.role == wire::tls::Role::Vcservice)
        .unwrap();
    assert!(
        two[..first_committer]
            .iter()
            .all(|p| p.shard.is_some() || p.role != wire::tls::Role::Sidecar)
    );
    assert_eq!(two[first_committer - 1].name(), "assembler-4");
    // A listed node has its endpoint.
    assert!(
        two.iter()
            .filter(|p| p.role != wire::tls::Role::Assembler)
            .all(|p| p.listen.is_some())
    );
    assert!(cfg.topology(9).is_err(), "party 9 has no committer nodes");
}
