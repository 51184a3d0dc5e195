//! TLS certificate rotation through config updates (ADR 0019): the next configs
//! `fabrx network tls add|retire` make are valid updates, and every rule of a TLS change
//! refuses what breaks it, with its own error.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use crypto::SigningKey;
use netconfig::file::{NetworkFile, TlsCertFile};
use netconfig::tls::follow::choose;
use netconfig::tls::rotate::{add_next, retire_old};
use netconfig::update::{self, ConfigUpdate, UpdateError};
use netconfig::{GenerateSpec, NetworkConfig, generate};
use types::PartyId;

struct Net {
    dir: tempfile::TempDir,
    config: NetworkConfig,
    admins: Vec<SigningKey>,
}

fn net() -> Net {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        seed: Some(9),
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

/// `next` as an update of `current`, signed by parties 1..=3, without `propose`'s checks.
fn signed(net: &Net, current: &NetworkConfig, next: &NetworkFile) -> ConfigUpdate {
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
    u
}

fn verdict(net: &Net, current: &NetworkConfig, next: &NetworkFile) -> Result<NetworkConfig, UpdateError> {
    update::validate(current, &signed(net, current, next))
}

/// A certificate for `name` (`fabrx-node` named when `node_name`), signed by the network
/// CA of `dir` or, with `stranger`, by a CA of its own.
fn issue(dir: &std::path::Path, name: &str, stranger: bool, node_name: bool) -> (String, [u8; 32]) {
    let (issuer_params, issuer_key) = if stranger {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "fabrx network CA");
        (Some(params), key)
    } else {
        let key =
            rcgen::KeyPair::from_pem(&std::fs::read_to_string(dir.join("tls/ca.key")).unwrap()).unwrap();
        (None, key)
    };
    let issuer = match issuer_params {
        Some(params) => rcgen::Issuer::new(params, issuer_key),
        None => rcgen::Issuer::from_ca_cert_pem(
            &std::fs::read_to_string(dir.join("tls/ca.pem")).unwrap(),
            issuer_key,
        )
        .unwrap(),
    };
    let names = if node_name {
        vec![wire::tls::SERVER_NAME.to_string()]
    } else {
        vec!["elsewhere".to_string()]
    };
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (cert.pem(), wire::tls::fingerprint(cert.der()))
}

fn entry_of(file: &NetworkFile, name: &str) -> TlsCertFile {
    file.tls
        .as_ref()
        .unwrap()
        .certificates
        .iter()
        .find(|c| c.name == name)
        .unwrap()
        .clone()
}

fn certs(file: &mut NetworkFile) -> &mut Vec<TlsCertFile> {
    &mut file.tls.as_mut().unwrap().certificates
}

#[test]
fn add_then_retire_rotates_every_ordering_certificate() {
    let net = net();
    let genesis = &net.config;
    let (a, issued) = add_next(net.dir.path(), genesis.file(), &[]).unwrap();
    // 4 parties × (router, consenter, assembler, 2 batchers).
    assert_eq!(issued.len(), 20, "{issued:?}");
    assert!(issued.contains(&"batcher-3-1.next".to_string()), "{issued:?}");
    assert!(net.dir.path().join("tls/router-2.next.pem").exists());
    // Proposed as any update, signed, valid: both certificates authorized from A on.
    update::propose(genesis, &a).unwrap();
    let after_a = verdict(&net, genesis, &a).unwrap();
    let router_1 = wire::tls::Peer {
        role: wire::tls::Role::Router,
        party: 1,
        shard: None,
    };
    let listed = netconfig::tls::follow::listed_for(after_a.file().tls.as_ref().unwrap(), router_1);
    assert_eq!(
        listed.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["router-1", "router-1.next"]
    );
    // The node presents the last listed certificate whose files it holds.
    let read = |name: &str| netconfig::tls::follow::read_identity(net.dir.path(), name);
    assert_eq!(choose(&listed, read).unwrap().0, "router-1.next");
    // A third one for a node that has two is refused by the command.
    let e = add_next(net.dir.path(), after_a.file(), &["router-1".into()]).unwrap_err();
    assert!(e.to_string().contains("already has two certificates"), "{e}");
    // B: the old ones removed.
    let (b, retired) = retire_old(after_a.file(), &[]).unwrap();
    assert_eq!(retired.len(), 20);
    assert!(retired.contains(&"router-1".to_string()));
    let after_b = verdict(&net, &after_a, &b).unwrap();
    let listed = netconfig::tls::follow::listed_for(after_b.file().tls.as_ref().unwrap(), router_1);
    assert_eq!(
        listed.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["router-1.next"]
    );
    // The next rotation issues under the free name again, over the retired files.
    let (c, issued) = add_next(net.dir.path(), after_b.file(), &["router-1".into()]).unwrap();
    assert_eq!(issued, ["router-1"]);
    verdict(&net, &after_b, &c).unwrap();
    // The clients' and the committer's certificates are left as they are.
    assert_eq!(entry_of(&c, "client"), entry_of(genesis.file(), "client"));
    assert_eq!(entry_of(&c, "sidecar-1"), entry_of(genesis.file(), "sidecar-1"));
}

#[test]
fn each_rule_of_a_tls_change_refuses_what_breaks_it() {
    let net = net();
    let genesis = &net.config;
    let dir = net.dir.path();
    let (a, _) = add_next(dir, genesis.file(), &["router-1".into()]).unwrap();
    let after_a = verdict(&net, genesis, &a).unwrap();

    // No overlap: the old certificate removed in the update that adds the new one.
    let mut next = a.clone();
    certs(&mut next).retain(|c| c.name != "router-1");
    assert!(
        matches!(verdict(&net, genesis, &next), Err(UpdateError::TlsNoOverlap { ref holder }) if holder == "party 1's router"),
        "{:?}",
        verdict(&net, genesis, &next).err()
    );

    // A third certificate.
    let mut next = a.clone();
    next.sequence += 1;
    let (pem, fp) = issue(dir, "router-1.third", false, true);
    certs(&mut next).push(TlsCertFile {
        name: "router-1.third".into(),
        sha256: hex::encode(fp),
        pem: Some(pem),
        ..entry_of(&a, "router-1")
    });
    let e = verdict(&net, &after_a, &next).unwrap_err();
    assert!(
        matches!(e, UpdateError::TlsTooManyCertificates { count: 3, max: 2, .. }),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("party 1's router would have 3 TLS certificates"),
        "{e}"
    );

    // A new certificate the network CA did not sign.
    let stranger = |pem: String, fp: [u8; 32]| {
        let mut next = genesis.file().clone();
        next.sequence += 1;
        certs(&mut next).push(TlsCertFile {
            name: "consenter-2.next".into(),
            sha256: hex::encode(fp),
            pem: Some(pem),
            ..entry_of(genesis.file(), "consenter-2")
        });
        next
    };
    let (pem, fp) = issue(dir, "consenter-2.next", true, true);
    let e = verdict(&net, genesis, &stranger(pem, fp)).unwrap_err();
    assert!(
        matches!(e, UpdateError::TlsNotSignedByCa { ref name } if name == "consenter-2.next"),
        "{e:?}"
    );
    // One that does not name `fabrx-node`.
    let (pem, fp) = issue(dir, "consenter-2.next", false, false);
    let e = verdict(&net, genesis, &stranger(pem, fp)).unwrap_err();
    assert!(
        matches!(e, UpdateError::TlsBadCertificate { ref reason, .. } if reason.contains("fabrx-node")),
        "{e:?}"
    );
    // One whose PEM is another certificate than the fingerprint names.
    let (pem, _) = issue(dir, "consenter-2.next", false, true);
    let e = verdict(&net, genesis, &stranger(pem, [7; 32])).unwrap_err();
    assert!(
        matches!(e, UpdateError::TlsBadCertificate { ref reason, .. } if reason.contains("SHA-256")),
        "{e:?}"
    );
    // One without its PEM.
    let mut next = a.clone();
    for c in certs(&mut next) {
        c.pem = None;
    }
    let e = verdict(&net, genesis, &next).unwrap_err();
    assert!(
        matches!(e, UpdateError::TlsCertificateMissing { ref name } if name == "router-1.next"),
        "{e:?}"
    );

    // A fingerprint passes to another holder.
    let mut next = a.clone();
    let moved = entry_of(&a, "router-1.next");
    for c in certs(&mut next) {
        if c.name == "router-1.next" {
            c.party = 2;
            c.name = "router-2.next".into();
        }
    }
    let e = verdict(&net, &after_a, &{
        let mut n = next.clone();
        n.sequence += 1;
        n
    })
    .unwrap_err();
    assert!(
        matches!(e, UpdateError::TlsCertificateMoved { ref sha256, ref from, ref to }
            if *sha256 == moved.sha256 && from == "party 1's router" && to == "party 2's router"),
        "{e:?}"
    );

    // A node left without any certificate.
    let mut next = genesis.file().clone();
    next.sequence += 1;
    certs(&mut next).retain(|c| c.name != "assembler-3");
    let e = verdict(&net, genesis, &next).unwrap_err();
    assert!(
        matches!(e, UpdateError::TlsNoCertificate { ref holder } if holder == "party 3's assembler"),
        "{e:?}"
    );

    // The committer's nodes, the clients and the CA do not rotate through an update.
    let (pem, fp) = issue(dir, "sidecar-1.next", false, true);
    let mut next = genesis.file().clone();
    next.sequence += 1;
    certs(&mut next).push(TlsCertFile {
        name: "sidecar-1.next".into(),
        sha256: hex::encode(fp),
        pem: Some(pem),
        ..entry_of(genesis.file(), "sidecar-1")
    });
    match verdict(&net, genesis, &next) {
        Err(UpdateError::NotFollowed { changes }) => {
            assert_eq!(changes.len(), 1, "{changes:?}");
            assert!(
                changes[0].starts_with("tls certificate sidecar-1.next added"),
                "{changes:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let mut next = a.clone();
    next.tls.as_mut().unwrap().ca = issue(dir, "other CA", true, true).0;
    match verdict(&net, genesis, &next) {
        Err(UpdateError::NotFollowed { changes }) => {
            assert!(changes.iter().any(|c| c.starts_with("tls.ca")), "{changes:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_node_presents_the_last_listed_certificate_it_holds() {
    let fp = |b: u8| [b; 32];
    let listed = vec![("old".to_string(), fp(1)), ("new".to_string(), fp(2))];
    /// The files a node holds: a name and the certificate (by fingerprint byte) in it.
    type Held = &'static [(&'static str, u8)];
    let holding = |held: Held| {
        move |name: &str| {
            held.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, b)| (fp(*b), b"cert".to_vec(), b"key".to_vec()))
        }
    };
    // (files held, chosen)
    let cases: [(Held, Option<&str>); 5] = [
        (&[("old", 1), ("new", 2)], Some("new")),
        (&[("old", 1)], Some("old")),
        (&[("new", 2)], Some("new")),
        // A file of the right name holding another certificate is not taken.
        (&[("old", 1), ("new", 9)], Some("old")),
        (&[], None),
    ];
    for (held, chosen) in cases {
        let got = choose(&listed, holding(held)).map(|(n, _, _)| n);
        assert_eq!(got.as_deref(), chosen, "{held:?}");
    }
}
