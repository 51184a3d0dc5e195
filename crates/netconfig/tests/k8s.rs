#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! `fabrx network generate --k8s`: Service DNS names on fixed ports, one Secret per party
//! holding only that party's keys, and the shared files.

use netconfig::k8s::{K8sLayout, generate_k8s, ports, secret_path, shared_dir};
use netconfig::{Error, GenerateSpec, NetworkConfig, Node, key_file_path};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn layout() -> K8sLayout {
    K8sLayout::new("fabrx-party{party}", "cluster.local").unwrap()
}

fn spec(dir: &Path) -> GenerateSpec {
    GenerateSpec {
        seed: Some(15),
        ..GenerateSpec::new(4, 2, dir)
    }
}

/// The `stringData` entries of a Secret manifest written by `generate_k8s`.
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

#[test]
fn endpoints_are_service_names_on_fixed_ports() {
    let dir = tempfile::tempdir().unwrap();
    let k = generate_k8s(&spec(dir.path()), &layout()).unwrap();
    let shared = NetworkConfig::load(&shared_dir(dir.path()).join("network-config.json")).unwrap();
    assert_eq!(shared.to_json(), k.network.config.to_json());
    let host = |svc: &str, p: u32, port: u16| format!("{svc}.fabrx-party{p}.svc.cluster.local:{port}");
    for p in 1..=4 {
        let party = shared.party(p).unwrap();
        assert_eq!(party.router.as_str(), host("router", p, ports::ROUTER));
        assert_eq!(party.consenter.as_str(), host("consenter", p, ports::CONSENTER));
        assert_eq!(
            party.assembler.as_ref().unwrap().as_str(),
            host("assembler", p, ports::ASSEMBLER)
        );
        for s in 0..2 {
            let b = shared.batcher(p, s).unwrap();
            assert_eq!(
                b.endpoint.as_str(),
                host(&format!("batcher-{s}"), p, ports::BATCHER)
            );
            // A DNS name listens on every interface at its port.
            assert_eq!(
                b.endpoint.listen_addr().to_string(),
                format!("0.0.0.0:{}", ports::BATCHER)
            );
        }
        let c = shared.committer_party(p).unwrap();
        assert_eq!(c.sidecar.as_str(), host("sidecar", p, ports::SIDECAR));
        assert_eq!(c.sigverifier.as_str(), host("sigverifier", p, ports::SIGVERIFIER));
        assert_eq!(c.vcservice.as_str(), host("vcservice", p, ports::VCSERVICE));
        assert_eq!(
            shared.query_endpoint(p).unwrap().as_str(),
            host("query", p, ports::QUERY)
        );
    }
    let app = shared.token().unwrap();
    assert_eq!(app.endorsers.len(), 5);
    for e in &app.endorsers {
        assert_eq!(
            e.endpoint.as_str(),
            host(&format!("endorser-{}", e.index), e.party, ports::ENDORSER)
        );
    }
    assert!(shared.tls_enabled());
    let ca = std::fs::read_to_string(shared_dir(dir.path()).join("ca.pem")).unwrap();
    assert!(ca.contains("BEGIN CERTIFICATE") && !ca.contains("PRIVATE KEY"));
}

#[test]
fn each_secret_holds_only_its_partys_keys() {
    let dir = tempfile::tempdir().unwrap();
    let k = generate_k8s(&spec(dir.path()), &layout()).unwrap();
    assert_eq!(k.secrets.len(), 4);
    let secrets: BTreeMap<u32, BTreeMap<String, String>> = (1..=4)
        .map(|p| (p, secret_entries(&secret_path(dir.path(), p))))
        .collect();
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).unwrap();
    let ca_key = read(dir.path().join("tls").join("ca.key"));
    for (p, entries) in &secrets {
        let p = *p;
        let path = secret_path(dir.path(), p);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("kind: Secret") && text.contains(&format!("namespace: fabrx-party{p}\n")));
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Its own node keys, byte for byte.
        assert_eq!(
            entries["consenter.key"],
            read(key_file_path(dir.path(), Node::Consenter(p)).unwrap())
        );
        for s in 0..2 {
            assert_eq!(
                entries[&format!("batcher-{s}.key")],
                read(key_file_path(dir.path(), Node::Batcher { party: p, shard: s }).unwrap())
            );
        }
        assert_eq!(
            entries[&format!("tls-router-{p}.key")],
            read(dir.path().join("tls").join(format!("router-{p}.key")))
        );
        // Endorser i runs in party ((i − 1) mod 4) + 1: party 1 runs 1 and 5.
        let mut endorsers: Vec<&str> = entries
            .keys()
            .filter(|k| k.starts_with("endorser-"))
            .map(String::as_str)
            .collect();
        endorsers.sort();
        let want: Vec<String> = (1..=5u32)
            .filter(|i| (i - 1) % 4 + 1 == p)
            .map(|i| format!("endorser-{i}.key"))
            .collect();
        assert_eq!(endorsers, want.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(entries.contains_key("meta.key"), p == 1);
        assert_eq!(entries.contains_key("issuer.key"), p == 1);
        assert!(entries.contains_key("tls-client.key"));
        assert!(entries.contains_key("tls-wallet.key"));
        // Nothing of another party, and never the CA's key.
        for q in (1..=4).filter(|q| *q != p) {
            let theirs = read(key_file_path(dir.path(), Node::Consenter(q)).unwrap());
            assert!(
                entries.values().all(|v| *v != theirs),
                "party {q}'s consenter key in party {p}'s secret"
            );
        }
        // TLS material named `tls-<role>-<party>[-<shard>].{pem,key}`: only party p's.
        for key in entries.keys().filter(|k| {
            k.starts_with("tls-") && !k.starts_with("tls-client.") && !k.starts_with("tls-wallet.")
        }) {
            let name = key.trim_start_matches("tls-").rsplit_once('.').unwrap().0;
            let holder: u32 = name.split('-').nth(1).unwrap().parse().unwrap();
            assert_eq!(holder, p, "{key} in party {p}'s secret");
        }
        assert!(entries.values().all(|v| *v != ca_key));
    }
}

#[test]
fn bad_layouts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |pattern: &str| {
        let l = K8sLayout::new(pattern, "cluster.local").unwrap();
        match generate_k8s(&spec(&dir.path().join(pattern.replace(['{', '}'], "_"))), &l) {
            Err(Error::Generate { reason }) => reason,
            other => panic!("{pattern:?}: {other:?}"),
        }
    };
    assert!(refused("fabrx").contains("share one namespace"));
    assert!(refused("Fabrx-{party}").contains("not a DNS label"));
    assert!(refused(&format!("{}{{party}}", "x".repeat(63))).contains("not a DNS label"));
    assert!(K8sLayout::new("fabrx-{party}", "Cluster.Local").is_err());
    assert!(K8sLayout::new("", "cluster.local").is_err());
    // One party may use a fixed namespace.
    let one = GenerateSpec {
        seed: Some(1),
        ..GenerateSpec::new(1, 1, dir.path().join("one"))
    };
    let k = generate_k8s(&one, &K8sLayout::new("fabrx", "cluster.local").unwrap()).unwrap();
    assert_eq!(
        k.network.config.party(1).unwrap().router.as_str(),
        "router.fabrx.svc.cluster.local:7050"
    );
}

/// The network configs the Helm chart's checks render with (scripts/helm-check.sh):
/// public files of `generate --k8s`, kept in examples/. They must stay valid configs of
/// the layout their values files name. Regenerate them (new keys and certificates) with
/// `FABRX_WRITE_K8S_EXAMPLES=1 cargo test -p netconfig --test k8s examples`.
#[test]
fn examples_are_valid_k8s_networks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let cases = [
        ("k8s-local", "fabrx", 1u32, 1u32),
        ("multi-region", "fabrx-party{party}", 4, 2),
    ];
    for (name, pattern, parties, shards) in cases {
        let path = root.join(name).join("network-config.json");
        let layout = K8sLayout::new(pattern, "cluster.local").unwrap();
        if std::env::var_os("FABRX_WRITE_K8S_EXAMPLES").is_some() {
            let dir = tempfile::tempdir().unwrap();
            let k = generate_k8s(&GenerateSpec::new(parties, shards, dir.path()), &layout).unwrap();
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::copy(k.shared_dir.join("network-config.json"), &path).unwrap();
        }
        let config = NetworkConfig::load(&path).unwrap();
        assert_eq!((config.n(), config.shards().get()), (parties, shards), "{name}");
        for p in 1..=parties {
            assert_eq!(
                config.party(p).unwrap().router.as_str(),
                format!("{}:{}", layout.service_host("router", p), ports::ROUTER),
                "{name}"
            );
        }
    }
}
