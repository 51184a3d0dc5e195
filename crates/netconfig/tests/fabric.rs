#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What `fabrx network generate` writes for Fabric clients (docs/fabric.md): each party's
//! MSP, the genesis block and `armageddon` user configs, and the `fabric` section's checks.

use netconfig::file::{ClientAuthFile, ClientFile, FabricClientFile, RequestFormatFile};
use netconfig::{Error, GenerateSpec, NetworkConfig, generate};
use p256::ecdsa::signature::Signer;
use p256::pkcs8::DecodePrivateKey;
use prost::Message;
use std::path::Path;

/// The bytes of a YAML flow sequence of numbers written after `key: `.
fn yaml_bytes(text: &str, key: &str) -> Vec<u8> {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key}"));
    let list = line
        .trim_start_matches(&format!("{key}: "))
        .trim_start_matches('[')
        .trim_end_matches(']');
    list.split(", ").map(|n| n.parse::<u8>().unwrap()).collect()
}

#[test]
fn a_tls_network_gives_each_party_an_msp_and_a_user_config_with_its_tls_files() {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec::new(2, 1, dir.path())).unwrap();
    let fabric = g.config.file().fabric.clone().expect("a fabric section");
    assert_eq!(fabric.channel, "arma");
    assert_eq!(fabric.orgs.len(), 2);
    assert_eq!(fabric.clients.len(), 2);
    for party in [1u32, 2] {
        let msp = netconfig::fabric::client_msp_dir(dir.path(), party);
        // The key signs, and the certificate the network lists for the client verifies it.
        let key_pem = std::fs::read_to_string(msp.join("keystore").join("priv_sk")).unwrap();
        assert!(key_pem.starts_with("-----BEGIN PRIVATE KEY-----"), "PKCS#8 PEM");
        let key = p256::ecdsa::SigningKey::from_pkcs8_pem(&key_pem).unwrap();
        let cert = std::fs::read(
            msp.join("signcerts")
                .join(format!("client@party{party}-cert.pem")),
        )
        .unwrap();
        let listed = &fabric.clients[usize::try_from(party - 1).unwrap()];
        assert_eq!(listed.msp_id, format!("party{party}"));
        assert_eq!(listed.certificate.as_bytes(), cert.as_slice());
        let sig: p256::ecdsa::Signature = key.sign(b"payload");
        let sig = sig.normalize_s().unwrap_or(sig);
        let public = arma::fabric::p256_key_of_pem(&cert).unwrap();
        arma::fabric::verify_signature(&public, b"payload", sig.to_der().as_bytes()).unwrap();
        let ca = std::fs::read_to_string(msp.join("cacerts").join("ca-cert.pem")).unwrap();
        assert_eq!(ca, fabric.orgs[usize::try_from(party - 1).unwrap()].ca);
        let tls_ca = std::fs::read_to_string(msp.join("tlscacerts").join("tlsca-cert.pem")).unwrap();
        assert_eq!(tls_ca, g.config.file().tls.as_ref().unwrap().ca);

        let user = std::fs::read_to_string(netconfig::fabric::user_config_path(dir.path(), party)).unwrap();
        let (cert_path, key_path) = netconfig::tls::tls_paths(dir.path(), "client");
        assert_eq!(
            yaml_bytes(&user, "TLSCertificate"),
            std::fs::read(cert_path).unwrap()
        );
        assert_eq!(
            yaml_bytes(&user, "TLSPrivateKey"),
            std::fs::read(key_path).unwrap()
        );
        assert!(user.contains("UseTLSRouter: mTLS\n") && user.contains("UseTLSAssembler: mTLS\n"));
        assert!(
            user.contains(r#"RouterEndpoints: ["127.0.0.1:7050", "127.0.0.1:7054"]"#),
            "{user}"
        );
        assert!(
            user.contains(r#"AssemblerEndpoints: ["127.0.0.1:7052", "127.0.0.1:7056"]"#),
            "{user}"
        );
        let msp_line = user.lines().find(|l| l.starts_with("MSPDir: ")).unwrap();
        let msp_path = msp_line.trim_start_matches("MSPDir: ").trim_matches('"');
        assert!(Path::new(msp_path).is_absolute());
        assert!(
            msp_path.contains(&format!("/ordererOrganizations/party{party}/")),
            "{msp_path}"
        );
        assert_eq!(Path::new(msp_path), std::fs::canonicalize(&msp).unwrap());
    }
    // The genesis block on disk is the one the assemblers serve, and it names the orgs.
    let on_disk = std::fs::read(netconfig::fabric::genesis_path(dir.path())).unwrap();
    let genesis = g.config.fabric_genesis().unwrap();
    assert_eq!(on_disk, genesis.encode_to_vec());
    let reloaded = NetworkConfig::load(&g.config_path).unwrap();
    assert_eq!(reloaded.fabric_genesis().unwrap().encode_to_vec(), on_disk);
    let env = &genesis.data.unwrap().data[0];
    let (_, payload, _) = arma::fabric::decode_envelope(env).unwrap();
    let config = wire::fabric::common::ConfigEnvelope::decode(payload.data.as_slice()).unwrap();
    let channel = config.config.unwrap().channel_group.unwrap();
    let orderer = &channel.groups["Orderer"];
    assert_eq!(
        orderer.groups.keys().cloned().collect::<Vec<_>>(),
        ["party1", "party2"]
    );
}

#[test]
fn an_insecure_network_gives_user_configs_without_tls() {
    let dir = tempfile::tempdir().unwrap();
    generate(&GenerateSpec {
        tls: false,
        ..GenerateSpec::new(1, 1, dir.path())
    })
    .unwrap();
    let user = std::fs::read_to_string(netconfig::fabric::user_config_path(dir.path(), 1)).unwrap();
    assert!(user.contains("UseTLSRouter: none\n") && user.contains("UseTLSAssembler: none\n"));
    assert!(!user.contains("TLSCertificate") && !user.contains("TLSCACerts"));
}

#[test]
fn the_request_policy_follows_the_format_and_the_client_auth() {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(&GenerateSpec {
        seed: Some(3),
        ..GenerateSpec::new(2, 1, dir.path())
    })
    .unwrap();
    let policy = g.config.request_policy();
    assert_eq!(
        policy.format,
        arma::fabric::RequestFormat::Both,
        "both formats by default"
    );
    assert_eq!(policy.fabric_auth, arma::fabric::FabricAuth::Open);

    let mut file = g.config.file().clone();
    file.router.request_format = RequestFormatFile::Fabric;
    file.router.client_auth = ClientAuthFile::Signed {
        clients: vec![ClientFile {
            msp_id: "org1".into(),
            certificate_id: "alice".into(),
            public_key: crypto::derive_signing_key(crypto::Scheme::Ed25519, "a")
                .public_key()
                .to_string(),
        }],
    };
    let signed = NetworkConfig::from_file(file.clone()).unwrap();
    let policy = signed.request_policy();
    assert_eq!(policy.format, arma::fabric::RequestFormat::Fabric);
    let arma::fabric::FabricAuth::Signed(clients) = policy.fabric_auth else {
        panic!("a signed network requires Fabric signatures too");
    };
    assert_eq!(clients.len(), 2);
    assert_eq!(
        signed
            .batcher_node_config(
                1,
                0,
                &netconfig::key_file_path(dir.path(), netconfig::Node::Batcher { party: 1, shard: 0 })
                    .unwrap(),
                dir.path().join("b"),
                None,
            )
            .unwrap()
            .content,
        batcher::node::RequestContent::Envelopes(signed.request_policy()),
        "batchers check requests as routers do"
    );

    // A client of no organization; an organization of no party; one listed twice; a
    // certificate that is not P-256.
    let mut bad = file.clone();
    bad.fabric.as_mut().unwrap().clients[0].msp_id = "party9".into();
    assert!(matches!(NetworkConfig::from_file(bad), Err(Error::Fabric { .. })));
    let mut bad = file.clone();
    bad.fabric.as_mut().unwrap().orgs[1].party = 7;
    assert!(matches!(NetworkConfig::from_file(bad), Err(Error::Fabric { .. })));
    let mut bad = file.clone();
    let first = bad.fabric.as_ref().unwrap().orgs[0].clone();
    bad.fabric.as_mut().unwrap().orgs.push(first);
    assert!(matches!(NetworkConfig::from_file(bad), Err(Error::Fabric { .. })));
    let mut bad = file;
    bad.fabric.as_mut().unwrap().clients.push(FabricClientFile {
        msp_id: "party1".into(),
        certificate: "not a certificate".into(),
    });
    assert!(matches!(NetworkConfig::from_file(bad), Err(Error::Fabric { .. })));
}
