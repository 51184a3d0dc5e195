#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::admission::{ContentError, RequestPolicy};
use p256::ecdsa::signature::Signer;

/// The header DER as an independent ASN.1 library writes it.
fn yasna_header(number: u64, previous: &[u8], data: &[u8]) -> Vec<u8> {
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u64(number);
            w.next().write_bytes(previous);
            w.next().write_bytes(data);
        })
    })
}

#[test]
fn header_bytes_are_the_der_an_independent_asn1_library_writes() {
    let numbers = [
        0,
        1,
        127,
        128,
        255,
        256,
        65_535,
        1 << 31,
        (1 << 63) - 1,
        1 << 63,
        u64::MAX,
    ];
    let hashes: [&[u8]; 4] = [&[], &[7; 32], &[1; 127], &[9; 300]];
    for n in numbers {
        for p in hashes {
            for d in hashes {
                assert_eq!(
                    header_bytes(n, p, d),
                    yasna_header(n, p, d),
                    "number {n}, {} / {} bytes",
                    p.len(),
                    d.len()
                );
            }
        }
    }
}

/// An envelope shaped as Arma's load tool makes them: MESSAGE, channel "channelID", a
/// creator that is not a real certificate, the signature "signature".
fn unsigned_envelope(kind: common::HeaderType, data: &[u8]) -> Vec<u8> {
    let payload = payload_of(kind, b"creator".to_vec(), data);
    wire::fabric::RawEnvelope::from_parts(&payload, b"signature")
        .bytes
        .to_vec()
}

fn payload_of(kind: common::HeaderType, creator: Vec<u8>, data: &[u8]) -> Vec<u8> {
    common::Payload {
        header: Some(common::Header {
            channel_header: common::ChannelHeader {
                r#type: kind as i32,
                channel_id: "channelID".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            signature_header: common::SignatureHeader {
                creator,
                nonce: b"nonce".to_vec(),
            }
            .encode_to_vec(),
        }),
        data: data.to_vec(),
    }
    .encode_to_vec()
}

#[test]
fn an_unsigned_message_passes_an_open_network_and_other_shapes_do_not() {
    let open = FabricAuth::Open;
    check_envelope(&unsigned_envelope(common::HeaderType::Message, b"tx"), &open).unwrap();
    check_envelope(
        &unsigned_envelope(common::HeaderType::EndorserTransaction, b"tx"),
        &open,
    )
    .unwrap();
    assert_eq!(
        check_envelope(&unsigned_envelope(common::HeaderType::ConfigUpdate, b"tx"), &open),
        Err(FabricError::Unsupported(2))
    );
    assert!(matches!(
        check_envelope(&[0xff, 0xff], &open),
        Err(FabricError::Malformed(_))
    ));
    assert!(matches!(
        check_envelope(&wire::fabric::RawEnvelope::from_parts(&[], b"s").bytes, &open),
        Err(FabricError::Malformed("empty payload"))
    ));
    // A payload without a header; a header without a creator.
    let headless = common::Payload {
        header: None,
        data: b"x".to_vec(),
    }
    .encode_to_vec();
    assert!(matches!(
        check_envelope(
            &wire::fabric::RawEnvelope::from_parts(&headless, b"s").bytes,
            &open
        ),
        Err(FabricError::Malformed("no payload header"))
    ));
    let nobody = payload_of(common::HeaderType::Message, Vec::new(), b"x");
    assert!(matches!(
        check_envelope(&wire::fabric::RawEnvelope::from_parts(&nobody, b"s").bytes, &open),
        Err(FabricError::Malformed(_))
    ));
}

struct Client {
    pem: Vec<u8>,
    key: p256::ecdsa::SigningKey,
}

fn client() -> Client {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let params = rcgen::CertificateParams::new(vec!["client".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    use p256::pkcs8::DecodePrivateKey;
    let signing = p256::ecdsa::SigningKey::from_pkcs8_der(&key.serialize_der()).unwrap();
    Client {
        pem: cert.pem().into_bytes(),
        key: signing,
    }
}

fn signed_by(c: &Client, msp: &str, signer: &p256::ecdsa::SigningKey) -> Vec<u8> {
    let creator = common::SerializedIdentity {
        mspid: msp.into(),
        id_bytes: c.pem.clone(),
    }
    .encode_to_vec();
    let payload = payload_of(common::HeaderType::Message, creator, b"tx");
    let sig: p256::ecdsa::Signature = signer.sign(&payload);
    let sig = sig.normalize_s().unwrap_or(sig);
    wire::fabric::RawEnvelope::from_parts(&payload, sig.to_der().as_bytes())
        .bytes
        .to_vec()
}

#[test]
fn a_signed_network_takes_its_clients_signatures_only() {
    let alice = client();
    let mallory = client();
    let mut clients = FabricClients::new();
    clients.insert_pem("party1", &alice.pem).unwrap();
    let auth = FabricAuth::Signed(clients);
    check_envelope(&signed_by(&alice, "party1", &alice.key), &auth).unwrap();
    // Another key over alice's certificate; alice's certificate under another MSP; a
    // certificate the network does not list; an unsigned envelope.
    assert_eq!(
        check_envelope(&signed_by(&alice, "party1", &mallory.key), &auth),
        Err(FabricError::BadSignature)
    );
    assert_eq!(
        check_envelope(&signed_by(&alice, "party2", &alice.key), &auth),
        Err(FabricError::UnknownClient)
    );
    assert_eq!(
        check_envelope(&signed_by(&mallory, "party1", &mallory.key), &auth),
        Err(FabricError::UnknownClient)
    );
    assert_eq!(
        check_envelope(&unsigned_envelope(common::HeaderType::Message, b"tx"), &auth),
        Err(FabricError::UnknownClient)
    );
    // The same signature with a high S.
    let good = signed_by(&alice, "party1", &alice.key);
    let parts = EnvelopeParts::decode(good.as_slice()).unwrap();
    let sig = p256::ecdsa::Signature::from_der(&parts.signature).unwrap();
    let (r, s) = sig.split_scalars();
    let high = p256::ecdsa::Signature::from_scalars(r, -*s).unwrap();
    let flipped = wire::fabric::RawEnvelope::from_parts(&parts.payload, high.to_der().as_bytes());
    assert_eq!(
        check_envelope(&flipped.bytes, &auth),
        Err(FabricError::BadSignature)
    );
    // Not a P-256 certificate.
    let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let ed_cert = rcgen::CertificateParams::new(vec!["x".to_string()])
        .unwrap()
        .self_signed(&ed)
        .unwrap();
    assert!(
        FabricClients::new()
            .insert_pem("p", ed_cert.pem().as_bytes())
            .is_err()
    );
}

#[test]
fn a_policy_checks_the_formats_its_network_orders() {
    let fabric_req = unsigned_envelope(common::HeaderType::Message, b"tx");
    let fabrx_like = {
        // A fabrx envelope's tx id is field 4; it fails the fabrx checks further on, but
        // is taken as a fabrx envelope.
        let mut b = Vec::new();
        prost::encoding::bytes::encode(1, &b"p".to_vec(), &mut b);
        prost::encoding::string::encode(4, &"id".to_string(), &mut b);
        b
    };
    let fabrx = RequestPolicy::default();
    assert!(matches!(
        fabrx.check(&fabric_req),
        Err(ContentError::Malformed { .. })
    ));
    let fabric = RequestPolicy {
        format: RequestFormat::Fabric,
        ..RequestPolicy::default()
    };
    fabric.check(&fabric_req).unwrap();
    assert!(matches!(fabric.check(&fabrx_like), Err(ContentError::Fabric(_))));
    let both = RequestPolicy {
        format: RequestFormat::Both,
        ..RequestPolicy::default()
    };
    both.check(&fabric_req).unwrap();
    assert!(matches!(
        both.check(&fabrx_like),
        Err(ContentError::Malformed { .. })
    ));
    assert_eq!(
        both.first_refused([fabric_req.as_slice(), fabrx_like.as_slice()])
            .map(|(i, _)| i),
        Some(1)
    );
    for f in RequestFormat::ALL {
        assert_eq!(RequestFormat::parse(f.name()), Some(f));
    }
}

fn ledger_block(number: u64, requests: Vec<Vec<u8>>) -> pb::OrderedBlock {
    pb::OrderedBlock {
        header: Some(pb::OrderedHeader {
            number,
            previous_hash: vec![1; 32],
            batch_digest: types::digest::batch_digest(&requests).to_vec(),
            shard: 1,
            primary: 3,
            seq: 9,
            term: 0,
            decision: 17,
            index: 0,
            tx_count: u32::try_from(requests.len()).unwrap(),
        }),
        requests,
        proof: Some(pb::DecisionProof {
            decision: 17,
            view: 0,
            requests_root: vec![2; 32],
            metadata: Vec::new(),
            signatures: vec![pb::ConsenterSignature {
                signer: 2,
                signature: vec![5; 64],
            }],
        }),
    }
}

/// A one-organization genesis spec.
fn genesis_spec() -> Genesis {
    Genesis {
        channel: CHANNEL.into(),
        orgs: vec![GenesisOrg {
            msp_id: "party1".into(),
            root_certs: vec![b"ca".to_vec()],
            tls_root_certs: vec![b"tls".to_vec()],
            endpoints: vec!["127.0.0.1:7050".into()],
        }],
        consensus_metadata: b"{}".to_vec(),
        max_message_count: 10,
        absolute_max_bytes: 1000,
    }
}

#[test]
fn data_blocks_chain_on_the_genesis_block_by_fabrics_rules() {
    // Built twice from equal specs (separate values, so maps are filled afresh).
    let genesis = genesis_block(&genesis_spec());
    let again = genesis_block(&genesis_spec());
    assert_eq!(
        genesis.encode_to_vec(),
        again.encode_to_vec(),
        "the genesis block is deterministic"
    );
    let gh = genesis.header.clone().unwrap();
    let gdata = genesis.data.clone().unwrap().data;
    assert_eq!(gh.data_hash, data_hash(&gdata).to_vec());
    let (_, payload, header) = decode_envelope(&gdata[0]).unwrap();
    assert_eq!(header.channel.r#type, common::HeaderType::Config as i32);
    assert!(
        common::ConfigEnvelope::decode(payload.data.as_slice())
            .unwrap()
            .config
            .is_some()
    );

    let first = ledger_block(0, vec![b"a".to_vec(), b"bc".to_vec()]);
    let b1 = data_block(&first, &header_hash(&gh), 3, Content::Block).unwrap();
    let h1 = b1.header.clone().unwrap();
    assert_eq!(h1.number, 1);
    assert_eq!(
        h1.previous_hash,
        Sha256::digest(yasna_header(0, &gh.previous_hash, &gh.data_hash)).to_vec()
    );
    assert_eq!(h1.data_hash, data_hash(&b1.data.clone().unwrap().data).to_vec());
    let md = b1.metadata.clone().unwrap().metadata;
    assert_eq!(md.len(), 5);
    let ord = orderer::AssemblerBlockMetadata::decode(md[3].as_slice()).unwrap();
    assert_eq!(
        (
            ord.shard,
            ord.primary,
            ord.sequence,
            ord.decision_num,
            ord.transaction_count
        ),
        (1, 3, 9, 17, 3)
    );
    let sigs = common::Metadata::decode(md[0].as_slice()).unwrap();
    assert_eq!(sigs.signatures.len(), 1);
    let id = common::IdentifierHeader::decode(sigs.signatures[0].identifier_header.as_slice()).unwrap();
    assert_eq!(id.identifier, 2);
    let b2 = data_block(
        &ledger_block(1, vec![b"d".to_vec()]),
        &header_hash(&h1),
        4,
        Content::HeaderWithSig,
    )
    .unwrap();
    assert!(b2.data.unwrap().data.is_empty());
    assert_eq!(b2.header.unwrap().previous_hash, header_hash(&h1).to_vec());
    assert_eq!(
        data_block(&pb::OrderedBlock::default(), &[0; 32], 0, Content::Block),
        Err(BlockError::Missing("header"))
    );
}

#[test]
fn a_signature_in_another_der_form_is_refused() {
    let alice = client();
    let mut clients = FabricClients::new();
    clients.insert_pem("party1", &alice.pem).unwrap();
    let auth = FabricAuth::Signed(clients);
    let good = signed_by(&alice, "party1", &alice.key);
    let parts = EnvelopeParts::decode(good.as_slice()).unwrap();
    let der = parts.signature.to_vec();
    // A trailing byte; the sequence's length in long form; an integer with a needless
    // leading zero.
    let mut trailing = der.clone();
    trailing.push(0);
    let mut long = vec![0x30, 0x81];
    long.extend_from_slice(&der[1..]);
    let (r_len, r) = (usize::from(der[3]), &der[4..4 + usize::from(der[3])]);
    let rest = &der[4 + r_len..];
    let mut padded_r = vec![0x02, u8::try_from(r_len + 1).unwrap(), 0];
    padded_r.extend_from_slice(r);
    let mut padded = vec![0x30, u8::try_from(padded_r.len() + rest.len()).unwrap()];
    padded.extend_from_slice(&padded_r);
    padded.extend_from_slice(rest);
    for (what, sig) in [("trailing", trailing), ("long", long), ("padded", padded)] {
        let env = wire::fabric::RawEnvelope::from_parts(&parts.payload, &sig);
        assert_eq!(
            check_envelope(&env.bytes, &auth),
            Err(FabricError::BadSignature),
            "{what}"
        );
    }
}
