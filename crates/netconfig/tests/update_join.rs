//! A party joining through a config update (docs/reconfiguration.md "Adding a party"):
//! the next config `netconfig::generate::party::add_party` writes is a valid update, and
//! every rule of a join refuses what breaks it with its own error, naming the party.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod support;

use crypto::SigningKey;
use netconfig::file::{NetworkFile, PartyFile, TlsCertFile};
use netconfig::generate::party::{PartyAddError, PartySpec, add_party, joiner_endpoints};
use netconfig::update::{self, ConfigUpdate, UpdateError};
use netconfig::{GenerateSpec, NetworkConfig, generate};
use types::PartyId;

struct Net {
    dir: tempfile::TempDir,
    config: NetworkConfig,
    admins: Vec<SigningKey>,
}

fn net_with(tls: bool) -> Net {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        seed: Some(11),
        tls,
        ..GenerateSpec::new(4, 2, dir.path())
    })
    .unwrap();
    let admins = g
        .admin_key_files
        .iter()
        .map(|(p, path)| g.config.read_admin_key(*p, path).unwrap())
        .collect();
    Net {
        dir,
        config: g.config,
        admins,
    }
}

fn spec(net: &Net) -> PartySpec {
    PartySpec {
        dir: net.dir.path().to_path_buf(),
        host: None,
        k8s: None,
        seed: Some(11),
        ports_in_use: Vec::new(),
    }
}

/// `next` as an update of the genesis config, signed by parties 1..=3, without
/// `propose`'s checks.
fn verdict(net: &Net, next: &NetworkFile) -> Result<NetworkConfig, UpdateError> {
    let current = &net.config;
    let mut u = ConfigUpdate {
        chain: current.chain().to_string(),
        sequence: current.sequence(),
        config: update::canonical_json(next),
        signatures: Vec::new(),
        proofs: Vec::new(),
    };
    for p in [1, 2, 3] as [PartyId; 3] {
        update::sign(&mut u, p, &net.admins[p as usize - 1]);
    }
    support::prove_with(
        &mut u,
        current,
        &support::keys_under(&net.dir.path().join("keys")),
    );
    update::validate(current, &u)
}

/// A certificate for `name`, naming `fabrx-node`, signed by a CA of its own.
fn stranger_cert(name: &str) -> (String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "fabrx network CA");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let mut params = rcgen::CertificateParams::new(vec![wire::tls::SERVER_NAME.to_string()]).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let cert = params
        .signed_by(&rcgen::KeyPair::generate().unwrap(), &issuer)
        .unwrap();
    (cert.pem(), hex::encode(wire::tls::fingerprint(cert.der())))
}

fn joiner(f: &mut NetworkFile) -> &mut PartyFile {
    f.parties.last_mut().unwrap()
}

fn cert<'a>(f: &'a mut NetworkFile, name: &str) -> &'a mut TlsCertFile {
    f.tls
        .as_mut()
        .unwrap()
        .certificates
        .iter_mut()
        .find(|c| c.name == name)
        .unwrap()
}

/// The reason party 5's certificate is refused, when that is the error.
fn refused_cert(e: &UpdateError) -> Option<&UpdateError> {
    match e {
        UpdateError::JoinCertificate { party: 5, source } => Some(source),
        _ => None,
    }
}

#[test]
fn the_next_config_of_party_add_is_a_valid_join() {
    let net = net_with(true);
    let peer_keys = std::fs::read_to_string(netconfig::peer_keys_path(net.dir.path())).unwrap();
    let added = add_party(&net.config, &spec(&net)).unwrap();
    assert_eq!(added.party, 5);
    assert_eq!(added.next.sequence, 1);
    // 4 parties × (3 + 2) ordering ports from 7050, 4 × 3 committer ports, 4 query
    // services and 5 endorsers: the highest port in use is 7090.
    let p5 = added.next.parties.last().unwrap();
    assert_eq!(p5.router, "127.0.0.1:7091");
    assert_eq!(p5.consenter.endpoint, "127.0.0.1:7092");
    assert_eq!(p5.assembler.as_deref(), Some("127.0.0.1:7093"));
    let batchers: Vec<&str> = p5.batchers.iter().map(|b| b.endpoint.as_str()).collect();
    assert_eq!(batchers, ["127.0.0.1:7094", "127.0.0.1:7095"]);
    assert_eq!(
        added.certificates,
        [
            "router-5",
            "consenter-5",
            "assembler-5",
            "batcher-5-0",
            "batcher-5-1"
        ]
    );
    // The files, in the generated layout; the consenter key as a seeded generate of
    // 5 parties derives it.
    let dir = net.dir.path();
    for f in [
        "keys/party-5/consenter.key",
        "keys/party-5/batcher-0.key",
        "keys/party-5/batcher-1.key",
        "keys/party-5/admin.key",
        "tls/router-5.pem",
        "tls/router-5.key",
        "tls/batcher-5-1.key",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let five = tempfile::tempdir().unwrap();
    let g5 = generate(&GenerateSpec {
        seed: Some(11),
        ..GenerateSpec::new(5, 2, five.path())
    })
    .unwrap();
    assert_eq!(
        p5.consenter.public_key,
        g5.config.file().parties[4].consenter.public_key
    );
    // The genesis peer-keys file is left as generated.
    assert_eq!(
        std::fs::read_to_string(netconfig::peer_keys_path(dir)).unwrap(),
        peer_keys
    );

    let proposed = update::propose(&net.config, &added.next).unwrap();
    let next = verdict(&net, &added.next).unwrap();
    assert_eq!((next.n(), next.sequence(), next.update_signatures()), (5, 1, 3));
    // The diff lists the party in its nodes' order, then its certificates.
    let lines = update::diff(net.config.file(), &proposed.next_file().unwrap());
    assert_eq!(lines[0], "sequence: 0 → 1");
    assert_eq!(lines[1], "party 5 added");
    assert_eq!(lines[2], "party 5 router: 127.0.0.1:7091");
    assert_eq!(lines[3], "party 5 consenter endpoint: 127.0.0.1:7092");
    assert!(lines[10].starts_with("party 5 admin key: ed25519:"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("tls certificate router-5 added (router of party 5, sha256 ")),
        "{lines:?}"
    );

    // Again on the same directory: party 5's files exist, nothing is overwritten.
    let before = std::fs::read(dir.join("keys/party-5/consenter.key")).unwrap();
    let e = add_party(&net.config, &spec(&net)).unwrap_err();
    assert!(
        matches!(&e, PartyAddError::Exists { party: 5, path } if path.ends_with("keys/party-5/consenter.key")),
        "{e:?}"
    );
    assert_eq!(
        std::fs::read(dir.join("keys/party-5/consenter.key")).unwrap(),
        before
    );
}

#[test]
fn a_join_breaking_a_rule_is_refused_naming_the_party() {
    let net = net_with(true);
    let good = add_party(&net.config, &spec(&net)).unwrap().next;
    verdict(&net, &good).unwrap();
    let other_ca = stranger_cert("router-5");
    let router_1_pem = std::fs::read_to_string(net.dir.path().join("tls/router-1.pem")).unwrap();
    let router_1_sha = net
        .config
        .file()
        .tls
        .as_ref()
        .unwrap()
        .certificates
        .iter()
        .find(|c| c.name == "router-1")
        .unwrap()
        .sha256
        .clone();
    let sidecar_1 = net.config.file().committer.as_ref().unwrap().parties[0]
        .sidecar
        .clone();

    type Edit = Box<dyn Fn(&mut NetworkFile)>;
    type Expect = fn(&UpdateError) -> bool;
    let cases: Vec<(&str, Edit, Expect)> = vec![
        (
            "two parties",
            Box::new(|f| {
                let mut six = f.parties[4].clone();
                six.id = 6;
                six.router = "127.0.0.1:9001".into();
                f.parties.push(six);
            }),
            |e| matches!(e, UpdateError::JoinSeveralParties { parties } if *parties == [5, 6]),
        ),
        (
            "a gap",
            Box::new(|f| {
                joiner(f).id = 6;
                for c in &mut f.tls.as_mut().unwrap().certificates {
                    if c.party == 5 {
                        c.party = 6;
                    }
                }
            }),
            |e| {
                matches!(
                    e,
                    UpdateError::JoinNotNextSlot {
                        party: 6,
                        expected: 5
                    }
                )
            },
        ),
        ("no admin key", Box::new(|f| joiner(f).admin_key = None), |e| {
            matches!(e, UpdateError::JoinWithoutAdminKey { party: 5 })
        }),
        ("no assembler", Box::new(|f| joiner(f).assembler = None), |e| {
            matches!(e, UpdateError::JoinWithoutAssembler { party: 5 })
        }),
        (
            "no batcher for shard 1",
            Box::new(|f| {
                joiner(f).batchers.pop();
            }),
            |e| matches!(e, UpdateError::JoinWithoutBatcher { party: 5, shard: 1 }),
        ),
        (
            "the router on party 1's consenter endpoint",
            Box::new(|f| joiner(f).router = f.parties[0].consenter.endpoint.clone()),
            |e| {
                matches!(e, UpdateError::JoinEndpointInUse { party: 5, node, endpoint, holder }
                    if node == "party 5 router" && endpoint == "127.0.0.1:7051" && holder == "party 1 consenter")
            },
        ),
        (
            "the router on party 1's consenter endpoint, named localhost",
            Box::new(|f| {
                let port = f.parties[0]
                    .consenter
                    .endpoint
                    .rsplit_once(':')
                    .unwrap()
                    .1
                    .to_owned();
                joiner(f).router = format!("localhost:{port}");
            }),
            |e| {
                matches!(e, UpdateError::JoinEndpointInUse { party: 5, node, endpoint, holder }
                    if node == "party 5 router" && endpoint == "localhost:7051" && holder == "party 1 consenter")
            },
        ),
        (
            "the consenter on party 1's sidecar endpoint",
            Box::new(move |f| joiner(f).consenter.endpoint = sidecar_1.clone()),
            |e| {
                matches!(e, UpdateError::JoinEndpointInUse { party: 5, node, holder, .. }
                    if node == "party 5 consenter" && holder == "party 1 sidecar")
            },
        ),
        (
            "party 2's consenter key",
            Box::new(|f| joiner(f).consenter.public_key = f.parties[1].consenter.public_key.clone()),
            |e| {
                matches!(e, UpdateError::KeyMoved { from, to, .. }
                    if from == "party 2 consenter" && to == "party 5 consenter")
            },
        ),
        (
            "party 1's admin key as a batcher key",
            Box::new(|f| joiner(f).batchers[1].public_key = f.parties[0].admin_key.clone().unwrap()),
            |e| {
                matches!(e, UpdateError::KeyMoved { from, to, .. }
                    if from == "the admin of party 1" && to == "party 5 batcher of shard 1")
            },
        ),
        (
            "no certificate for the router",
            Box::new(|f| {
                f.tls
                    .as_mut()
                    .unwrap()
                    .certificates
                    .retain(|c| c.name != "router-5");
            }),
            |e| {
                matches!(e, UpdateError::JoinTlsCertificates { party: 5, holder, count: 0 }
                    if holder == "party 5's router")
            },
        ),
        (
            "two certificates for a batcher",
            Box::new(|f| {
                let mut twin = cert(f, "batcher-5-0").clone();
                twin.name = "batcher-5-0.next".into();
                twin.sha256 = "ab".repeat(32);
                f.tls.as_mut().unwrap().certificates.push(twin);
            }),
            |e| {
                matches!(e, UpdateError::JoinTlsCertificates { party: 5, holder, count: 2 }
                    if holder == "party 5's batcher of shard 0")
            },
        ),
        (
            "a certificate for a batcher of shard 2, which the network lacks",
            Box::new(|f| {
                let mut extra = cert(f, "batcher-5-1").clone();
                extra.name = "batcher-5-2".into();
                extra.shard = Some(2);
                extra.sha256 = "ef".repeat(32);
                f.tls.as_mut().unwrap().certificates.push(extra);
            }),
            |e| {
                matches!(e, UpdateError::TlsNewHolder { name, holder }
                    if name == "batcher-5-2" && holder == "party 5's batcher of shard 2")
            },
        ),
        (
            "a certificate without its PEM",
            Box::new(|f| cert(f, "consenter-5").pem = None),
            |e| matches!(refused_cert(e), Some(UpdateError::TlsCertificateMissing { name }) if name == "consenter-5"),
        ),
        (
            "a certificate another CA signed",
            Box::new(move |f| {
                let c = cert(f, "router-5");
                c.pem = Some(other_ca.0.clone());
                c.sha256 = other_ca.1.clone();
            }),
            |e| matches!(refused_cert(e), Some(UpdateError::TlsNotSignedByCa { name }) if name == "router-5"),
        ),
        (
            "a fingerprint that is not the PEM's",
            Box::new(|f| cert(f, "assembler-5").sha256 = "cd".repeat(32)),
            |e| {
                matches!(refused_cert(e), Some(UpdateError::TlsBadCertificate { name, reason })
                    if name == "assembler-5" && reason.contains("its pem has SHA-256"))
            },
        ),
        (
            "party 1's router certificate",
            Box::new(move |f| {
                let c = cert(f, "router-5");
                c.pem = Some(router_1_pem.clone());
                c.sha256 = router_1_sha.clone();
            }),
            |e| {
                matches!(refused_cert(e), Some(UpdateError::TlsCertificateMoved { from, to, .. })
                    if from == "party 1's router" && to == "party 5's router")
            },
        ),
    ];
    for (what, edit, expect) in cases {
        let mut next = good.clone();
        edit(&mut next);
        let e = verdict(&net, &next).unwrap_err();
        assert!(expect(&e), "{what}: {e:?}");
        let text = e.to_string();
        assert!(
            text.contains("party 5") || text.contains("party 6"),
            "{what}: {text}"
        );
        // `propose` refuses it alike, before anyone signs.
        assert!(update::propose(&net.config, &next).is_err(), "{what}");
    }
}

/// What a join does not make followed stays refused: the joiner's committer nodes, and
/// a party removed (with or without one added).
#[test]
fn a_join_makes_only_the_joiners_ordering_entry_followed() {
    let net = net_with(true);
    let good = add_party(&net.config, &spec(&net)).unwrap().next;
    let mut with_committer = good.clone();
    let committer = with_committer.committer.as_mut().unwrap();
    let mut c5 = committer.parties[3].clone();
    c5.party = 5;
    c5.sidecar = "127.0.0.1:9100".into();
    c5.sigverifier = "127.0.0.1:9101".into();
    c5.vcservice = "127.0.0.1:9102".into();
    committer.parties.push(c5);
    match verdict(&net, &with_committer) {
        Err(UpdateError::NotFollowed { changes }) => {
            assert_eq!(changes.len(), 1, "{changes:?}");
            assert!(
                changes[0].starts_with("committer.parties: 4 → 5 entries"),
                "{changes:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Party 4 replaced by party 5: a party leaves in an update of its own.
    let mut swapped = good.clone();
    swapped.parties.remove(3);
    assert!(matches!(
        verdict(&net, &swapped),
        Err(UpdateError::LeaveWithJoin {
            leaving: 4,
            joining: 5
        })
    ));
}

#[test]
fn a_join_counts_as_a_new_consenter_key() {
    // 4 parties tolerate f = 1 new consenter key per update: the joiner's is one, so a
    // join that also rotates party 2's consenter key is refused (if party 2 lacked its new
    // key and the joiner had not caught up, the set of five could never decide).
    let net = net_with(true);
    let mut next = add_party(&net.config, &spec(&net)).unwrap().next;
    let fresh = crypto::derive_signing_key(crypto::Scheme::Ed25519, "rotated-2").public_key();
    next.parties[1].consenter.public_key = fresh.to_string();
    match verdict(&net, &next) {
        Err(UpdateError::TooManyConsenterKeys { parties, f: 1 }) => assert_eq!(parties, vec![2, 5]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_network_without_tls_joins_without_certificates() {
    let net = net_with(false);
    let added = add_party(&net.config, &spec(&net)).unwrap();
    assert!(added.certificates.is_empty());
    assert!(added.next.tls.is_none());
    assert_eq!(verdict(&net, &added.next).unwrap().n(), 5);
}

#[test]
fn the_joiners_ports_come_after_every_port_in_use_and_stop_at_65535() {
    let net = net_with(false);
    let mut file = net.config.file().clone();
    // A committer node on a port past every other: the joiner starts after it.
    file.committer.as_mut().unwrap().parties[2].vcservice = "127.0.0.1:60000".into();
    let e = joiner_endpoints(&file, 5, "10.0.0.5", &[]).unwrap();
    assert_eq!(e.router, "10.0.0.5:60001");
    assert_eq!(e.batchers, ["10.0.0.5:60004", "10.0.0.5:60005"]);
    let e = joiner_endpoints(&file, 5, "::1", &[]).unwrap();
    assert_eq!(e.consenter, "[::1]:60002");
    // A port in use that the config does not name (a devnet's metrics port) counts too.
    let e = joiner_endpoints(&file, 5, "h", &[61000, 59000]).unwrap();
    assert_eq!(e.router, "h:61001");
    // Five ports after 65530 fit (the last batcher on 65535); after 65531 they do not.
    file.committer.as_mut().unwrap().parties[2].vcservice = "127.0.0.1:65530".into();
    let e = joiner_endpoints(&file, 5, "h", &[]).unwrap();
    assert_eq!(e.batchers, ["h:65534", "h:65535"]);
    file.committer.as_mut().unwrap().parties[2].vcservice = "127.0.0.1:65531".into();
    let e = joiner_endpoints(&file, 5, "h", &[]).unwrap_err();
    assert!(
        matches!(
            e,
            PartyAddError::PortOverflow {
                party: 5,
                highest: 65531,
                needed: 5
            }
        ),
        "{e:?}"
    );
    file.committer.as_mut().unwrap().parties[2].vcservice = "127.0.0.1:65535".into();
    assert!(matches!(
        joiner_endpoints(&file, 5, "h", &[]).unwrap_err(),
        PartyAddError::PortOverflow { highest: 65535, .. }
    ));
    file.committer.as_mut().unwrap().parties[2].vcservice = "127.0.0.1:60000".into();
    assert!(matches!(
        joiner_endpoints(&file, 5, "bad host", &[]).unwrap_err(),
        PartyAddError::BadHost { .. }
    ));
}
