#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! A party joining a network laid out for Kubernetes (`fabrx network party add` on a
//! `generate --k8s` network): its endpoints are its Services in namespace
//! `fabrx-party<N+1>` on each role's port, its Secret manifest holds what `generate --k8s`
//! puts in a party's (mode 0600), and the next config is a valid join. The layout is read
//! from the config, or given and then checked against it.

mod support;

use crypto::SigningKey;
use netconfig::file::NetworkFile;
use netconfig::generate::party::{PartyAddError, PartySpec, add_party};
use netconfig::k8s::{K8sLayout, generate_k8s, ports, secret_path};
use netconfig::update::{self, ConfigUpdate};
use netconfig::{GenerateSpec, NetworkConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use types::PartyId;

struct Net {
    dir: tempfile::TempDir,
    config: NetworkConfig,
    admins: Vec<SigningKey>,
}

fn k8s_net(pattern: &str, domain: &str, parties: u32, tls: bool) -> Net {
    let dir = tempfile::tempdir().unwrap();
    let layout = K8sLayout::new(pattern, domain).unwrap();
    let k = generate_k8s(
        &GenerateSpec {
            seed: Some(3),
            tls,
            ..GenerateSpec::new(parties, 2, dir.path())
        },
        &layout,
    )
    .unwrap();
    let admins = k
        .network
        .admin_key_files
        .iter()
        .map(|(p, path)| k.network.config.read_admin_key(*p, path).unwrap())
        .collect();
    Net {
        dir,
        config: k.network.config,
        admins,
    }
}

fn spec(net: &Net, k8s: Option<K8sLayout>) -> PartySpec {
    PartySpec {
        dir: net.dir.path().to_path_buf(),
        host: None,
        k8s,
        seed: Some(3),
        ports_in_use: Vec::new(),
    }
}

/// `next` as an update of the genesis config, signed by parties 1..=3 and validated.
fn verdict(net: &Net, next: &NetworkFile) -> NetworkConfig {
    let current = &net.config;
    let mut u = ConfigUpdate {
        chain: current.chain().to_string(),
        sequence: current.sequence(),
        config: update::canonical_json(next),
        signatures: Vec::new(),
        proofs: Vec::new(),
    };
    update::validate_unsigned(current, &u).unwrap();
    for p in [1, 2, 3] as [PartyId; 3] {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    support::prove_with(
        &mut u,
        current,
        &support::keys_under(&net.dir.path().join("keys")),
    );
    update::validate(current, &u).unwrap()
}

/// The `stringData` entries of a Secret manifest.
fn secret_entries(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap();
    let body = text.split_once("stringData:\n").expect("a stringData section").1;
    body.lines()
        .map(|line| {
            let line = line.strip_prefix("  ").expect("an indented entry");
            let (key, value) = line.split_once("\": \"").expect("\"key\": \"value\"");
            let key: String = serde_json::from_str(&format!("{key}\"")).unwrap();
            let value: String = serde_json::from_str(&format!("\"{value}")).unwrap();
            (key, value)
        })
        .collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_party_joins_a_kubernetes_network_with_service_endpoints_and_a_secret() {
    let net = k8s_net("fabrx-party{party}", "cluster.local", 4, true);
    let added = add_party(&net.config, &spec(&net, None)).unwrap();
    assert_eq!(added.party, 5);
    let host = |svc: &str, port: u16| format!("{svc}.fabrx-party5.svc.cluster.local:{port}");
    let entry = added.next.parties.last().unwrap();
    assert_eq!(entry.id, 5);
    assert_eq!(entry.router, host("router", ports::ROUTER));
    assert_eq!(entry.consenter.endpoint, host("consenter", ports::CONSENTER));
    assert_eq!(
        entry.assembler.as_deref(),
        Some(host("assembler", ports::ASSEMBLER).as_str())
    );
    let batchers: Vec<&str> = entry.batchers.iter().map(|b| b.endpoint.as_str()).collect();
    assert_eq!(
        batchers,
        [
            host("batcher-0", ports::BATCHER),
            host("batcher-1", ports::BATCHER)
        ]
    );
    // The next config is a valid join: unsigned, and signed by three of four.
    let next = verdict(&net, &added.next);
    assert_eq!(next.n(), 5);
    assert_eq!(next.sequence(), 1);

    // Its Secret: where `generate --k8s` puts a party's, in its namespace, mode 0600, with
    // the same keys as party 4's (its names for party 5) holding the files written — but
    // for the committer's and the token's nodes, which a joiner does not have.
    let k = added.k8s.as_ref().expect("a Kubernetes join");
    assert_eq!(k.namespace, "fabrx-party5");
    assert_eq!(k.secret, secret_path(net.dir.path(), 5));
    assert_eq!(mode(&k.secret), 0o600);
    assert_eq!(mode(k.secret.parent().unwrap()), 0o700);
    let text = std::fs::read_to_string(&k.secret).unwrap();
    assert!(text.contains("  namespace: fabrx-party5\n"), "{text}");
    assert!(text.contains("  name: fabrx-keys\n"), "{text}");
    assert!(text.contains("fabrx.io/party: \"5\""), "{text}");
    let mine = secret_entries(&k.secret);
    let party4: BTreeSet<String> = secret_entries(&secret_path(net.dir.path(), 4))
        .into_keys()
        .map(|key| key.replace("-4", "-5"))
        .filter(|key| {
            !["endorser", "sidecar", "sigverifier", "vcservice", "query"]
                .iter()
                .any(|node| key.contains(node))
        })
        .collect();
    assert_eq!(mine.keys().cloned().collect::<BTreeSet<_>>(), party4);
    for key in [
        "consenter.key",
        "batcher-0.key",
        "batcher-1.key",
        "tls-router-5.pem",
        "tls-router-5.key",
        "tls-consenter-5.pem",
        "tls-assembler-5.key",
        "tls-batcher-5-1.pem",
    ] {
        assert!(mine.contains_key(key), "{key} missing from {:?}", mine.keys());
    }
    assert!(!mine.contains_key("admin.key"));
    assert!(!mine.keys().any(|key| key.contains("-4")), "{:?}", mine.keys());
    for (node, path) in &added.key_files {
        let want = std::fs::read_to_string(path).unwrap();
        assert!(
            mine.values().any(|v| *v == want),
            "{node:?}'s key file is not in the secret"
        );
    }
    let consenter = std::fs::read_to_string(net.dir.path().join("keys/party-5/consenter.key")).unwrap();
    assert_eq!(mine["consenter.key"], consenter);
    let cert = std::fs::read_to_string(net.dir.path().join("tls/router-5.pem")).unwrap();
    assert_eq!(mine["tls-router-5.pem"], cert);
    // Party 5's certificate, as listed in the next config, is the one in its Secret.
    let tls = added.next.tls.as_ref().unwrap();
    let listed = tls.certificates.iter().find(|c| c.name == "router-5").unwrap();
    assert_eq!(listed.pem.as_deref(), Some(cert.as_str()));

    // A second run refuses: the files exist.
    let again = add_party(&net.config, &spec(&net, None)).unwrap_err();
    assert!(
        matches!(again, PartyAddError::Exists { party: 5, .. }),
        "{again:?}"
    );
}

#[test]
fn a_layout_given_must_match_the_networks_endpoints() {
    let net = k8s_net("org-{party}-ord", "example.internal", 4, false);
    // Read from the config: the same as given.
    let given = K8sLayout::new("org-{party}-ord", "example.internal").unwrap();
    assert_eq!(K8sLayout::of_network(net.config.file()).unwrap(), given);

    for (pattern, domain) in [
        ("fabrx-party{party}", "example.internal"),
        ("org-{party}-ord", "cluster.local"),
    ] {
        let wrong = K8sLayout::new(pattern, domain).unwrap();
        let e = add_party(&net.config, &spec(&net, Some(wrong))).unwrap_err();
        assert!(matches!(e, PartyAddError::K8sLayoutMismatch { .. }), "{e:?}");
        assert!(e.to_string().contains("party 1 router"), "{e}");
    }
    let mut with_host = spec(&net, None);
    with_host.host = Some("10.0.0.5".into());
    let e = add_party(&net.config, &with_host).unwrap_err();
    assert!(matches!(e, PartyAddError::HostOnKubernetes { .. }), "{e:?}");
    assert!(!net.dir.path().join("keys/party-5").exists());
    assert!(!secret_path(net.dir.path(), 5).exists());

    let added = add_party(&net.config, &spec(&net, Some(given))).unwrap();
    let entry = added.next.parties.last().unwrap();
    assert_eq!(entry.router, "router.org-5-ord.svc.example.internal:7050");
    assert!(added.next.tls.is_none());
    assert_eq!(verdict(&net, &added.next).n(), 5);
    let mine = secret_entries(&added.k8s.unwrap().secret);
    assert_eq!(
        mine.keys().map(String::as_str).collect::<Vec<_>>(),
        ["batcher-0.key", "batcher-1.key", "consenter.key"]
    );
}

#[test]
fn a_layout_that_cannot_be_read_asks_for_the_pattern() {
    // One party in `team1-p1`: `team{party}-p1`, `team1-p{party}` and `team{party}-p{party}`
    // all give it, and name party 2's namespace differently.
    let net = k8s_net("team1-p{party}", "cluster.local", 1, false);
    let e = K8sLayout::of_network(net.config.file()).unwrap_err();
    assert!(e.contains("several patterns"), "{e}");
    assert!(e.contains("team1-p2"), "{e}");
    let e = add_party(&net.config, &spec(&net, None)).unwrap_err();
    assert!(matches!(e, PartyAddError::K8sLayoutUnknown { .. }), "{e:?}");
    assert!(e.to_string().contains("--k8s PATTERN"), "{e}");

    // A digit of the pattern that is also a party's number: read right with two parties.
    let two = k8s_net("ns1-party{party}", "cluster.local", 2, false);
    assert_eq!(
        K8sLayout::of_network(two.config.file()).unwrap(),
        K8sLayout::new("ns1-party{party}", "cluster.local").unwrap()
    );

    // Endpoints that are not Service names.
    let mut file = two.config.file().clone();
    file.parties[1].router = "10.0.0.2:7050".into();
    let e = K8sLayout::of_network(&file).unwrap_err();
    assert!(e.contains("party 2's router"), "{e}");
}

/// The joining release the Helm chart's checks render (scripts/helm-check.sh,
/// examples/k8s-join): the genesis config of a 4-party, 1-shard `generate --k8s` network
/// and the config `party add` wrote for party 5 (public files; the keys were thrown away).
/// The joining config must be a valid join of the genesis one. Regenerate both with
/// `FABRX_WRITE_K8S_EXAMPLES=1 cargo test -p netconfig --test k8s_join example`.
#[test]
fn the_join_example_is_a_valid_kubernetes_join() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/k8s-join");
    let genesis_path = root.join("network-config.json");
    let join_path = root.join("join.next.json");
    if std::env::var_os("FABRX_WRITE_K8S_EXAMPLES").is_some() {
        let dir = tempfile::tempdir().unwrap();
        let layout = K8sLayout::new("fabrx-party{party}", "cluster.local").unwrap();
        let k = generate_k8s(&GenerateSpec::new(4, 1, dir.path()), &layout).unwrap();
        let spec = PartySpec {
            dir: dir.path().to_path_buf(),
            host: None,
            k8s: None,
            seed: None,
            ports_in_use: Vec::new(),
        };
        let added = add_party(&k.network.config, &spec).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        std::fs::copy(k.shared_dir.join("network-config.json"), &genesis_path).unwrap();
        let text = serde_json::to_string_pretty(&added.next).unwrap() + "\n";
        std::fs::write(&join_path, text).unwrap();
    }
    let genesis = NetworkConfig::load(&genesis_path).unwrap();
    let joined = NetworkConfig::load(&join_path).unwrap();
    assert_eq!((genesis.n(), joined.n(), genesis.shards().get()), (4, 5, 1));
    genesis.check_join(&joined, 5).unwrap();
    let u = update::propose(&genesis, joined.file()).unwrap();
    update::validate_unsigned(&genesis, &u).unwrap();
    assert_eq!(
        joined.party(5).unwrap().router.as_str(),
        "router.fabrx-party5.svc.cluster.local:7050"
    );
}
