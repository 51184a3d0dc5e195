#![allow(clippy::unwrap_used)]

use super::*;
use crate::admission::{ClientAuth, check_envelope_fully};
use proptest::prelude::*;
use prost::Message as _;
use wire::pb;

fn open_full(bytes: &[u8]) -> bool {
    check_envelope_fully(bytes, &ClientAuth::Open).is_ok()
}

fn identity(msp: &str, creator: Option<pb::identity::Creator>) -> pb::Identity {
    pb::Identity {
        msp_id: msp.into(),
        creator,
    }
}

fn signature(n: usize) -> pb::Endorsements {
    pb::Endorsements {
        endorsements_with_identity: (0..n)
            .map(|i| pb::EndorsementWithIdentity {
                endorsement: vec![1; 64],
                identity: (i % 2 == 1)
                    .then(|| identity("org1", Some(pb::identity::Creator::Certificate(vec![3; 40])))),
            })
            .collect(),
    }
}

fn envelope(tx: &pb::Tx, id: &str) -> pb::Envelope {
    pb::Envelope {
        payload: tx.encode_to_vec(),
        signature: vec![9; 64],
        identity: Some(identity(
            "org1",
            Some(pb::identity::Creator::CertificateId("client".into())),
        )),
        tx_id: id.into(),
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
}

/// The shapes fabrx's own clients send: blind writes (the load generator), reads and
/// read-writes with and without versions, several namespaces, metadata.
fn typical() -> Vec<Vec<u8>> {
    let blind = pb::Tx {
        namespaces: vec![pb::TxNamespace {
            ns_id: "loadgen".into(),
            blind_writes: vec![pb::Write {
                key: b"k-1".to_vec(),
                value: vec![5; 200],
            }],
            ..Default::default()
        }],
        endorsements: vec![signature(1)],
        ..Default::default()
    };
    let transfer = pb::Tx {
        namespaces: vec![
            pb::TxNamespace {
                ns_id: "token".into(),
                ns_version: 3,
                reads_only: vec![pb::Read {
                    key: b"issuer".to_vec(),
                    version: Some(7),
                }],
                read_writes: vec![pb::ReadWrite {
                    key: b"coin-1".to_vec(),
                    version: Some(0),
                    value: vec![],
                }],
                blind_writes: vec![pb::Write {
                    key: b"coin-2".to_vec(),
                    value: vec![1; 32],
                }],
            },
            pb::TxNamespace {
                ns_id: "audit_2".into(),
                read_writes: vec![pb::ReadWrite {
                    key: b"log".to_vec(),
                    version: None,
                    value: b"x".to_vec(),
                }],
                ..Default::default()
            },
        ],
        endorsements: vec![signature(2), signature(3)],
        metadata: vec![b"memo".to_vec()],
    };
    let mut anonymous = envelope(&blind, "tx-0002");
    anonymous.identity = None;
    anonymous.signature = vec![];
    vec![
        envelope(&blind, "tx-0001").encode_to_vec(),
        envelope(&transfer, "b8f1c0de").encode_to_vec(),
        anonymous.encode_to_vec(),
    ]
}

#[test]
fn the_requests_fabrx_clients_send_take_the_fast_path() {
    for (i, e) in typical().iter().enumerate() {
        assert!(open_full(e), "envelope {i} is valid");
        assert!(plainly_valid(e), "envelope {i} takes the fast path");
    }
}

/// Appends field `number` with wire type 2 and `bytes` to `out`.
fn field(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    prost::encoding::encode_key(number as u32, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

#[test]
fn what_the_decoder_reads_in_its_own_way_takes_the_full_check() {
    let e = typical().remove(0);
    // A singular field twice (the decoder keeps the last).
    let mut twice = e.clone();
    field(&mut twice, 4, b"tx-other");
    assert!(!plainly_valid(&twice));
    // An unknown field (the decoder skips it).
    let mut unknown = e.clone();
    field(&mut unknown, 15, b"?");
    assert!(open_full(&unknown) && !plainly_valid(&unknown));
    // Both variants of the creator oneof.
    let mut env = pb::Envelope::decode(e.as_slice()).unwrap();
    let mut id = identity("org1", Some(pb::identity::Creator::Certificate(vec![1]))).encode_to_vec();
    field(&mut id, 3, b"also");
    env.identity = None;
    let mut both = env.encode_to_vec();
    field(&mut both, 3, &id);
    assert!(!plainly_valid(&both));
    // A payload type that is 1 only after the decoder truncates it to 32 bits.
    let mut env = pb::Envelope::decode(e.as_slice()).unwrap();
    env.payload_type = 0;
    let mut wide = env.encode_to_vec();
    prost::encoding::encode_key(6, prost::encoding::WireType::Varint, &mut wide);
    prost::encoding::encode_varint((1u64 << 32) + 1, &mut wide);
    assert!(!plainly_valid(&wide));
    // A field of an access under the other kind's wire type: the decoder refuses it.
    let wrong_write = {
        let mut w = Vec::new();
        field(&mut w, 1, b"k");
        prost::encoding::encode_key(2, prost::encoding::WireType::Varint, &mut w);
        prost::encoding::encode_varint(5, &mut w);
        w
    };
    let wrong_read = {
        let mut r = Vec::new();
        field(&mut r, 1, b"k");
        field(&mut r, 2, b"v");
        r
    };
    for (ns_field, access) in [(5u64, wrong_write), (3, wrong_read)] {
        let mut ns = Vec::new();
        field(&mut ns, 1, b"token");
        field(
            &mut ns,
            5,
            &pb::Write {
                key: b"w".to_vec(),
                value: vec![],
            }
            .encode_to_vec(),
        );
        field(&mut ns, ns_field, &access);
        let mut tx = Vec::new();
        field(&mut tx, 1, &ns);
        field(&mut tx, 2, &signature(1).encode_to_vec());
        let mut env = pb::Envelope::decode(e.as_slice()).unwrap();
        env.payload = tx;
        let bytes = env.encode_to_vec();
        assert!(!open_full(&bytes), "field {ns_field}: the decoder refuses it");
        assert!(!plainly_valid(&bytes), "field {ns_field}");
    }
    // A nonce, a self-certified creator, a reserved id, `_meta`: the full check's.
    let mut env = pb::Envelope::decode(e.as_slice()).unwrap();
    env.nonce = vec![1];
    assert!(!plainly_valid(&env.encode_to_vec()));
    let mut env = pb::Envelope::decode(e.as_slice()).unwrap();
    env.identity = Some(identity(wire::SELF_CERTIFIED_MSP, None));
    assert!(!plainly_valid(&env.encode_to_vec()));
    let mut env = pb::Envelope::decode(e.as_slice()).unwrap();
    env.tx_id = format!("{}abc", types::txid::SELF_CERTIFIED_ID_PREFIX);
    assert!(!plainly_valid(&env.encode_to_vec()));
}

/// A random tx: valid or broken in one of the ways the full check refuses.
fn arb_tx() -> impl Strategy<Value = pb::Tx> {
    let key = prop_oneof![
        4 => "[a-c]{1,3}".prop_map(String::into_bytes),
        1 => Just(Vec::new()),
        1 => Just(vec![b'k'; MAX_KEY_LEN + 1]),
    ];
    let value =
        prop_oneof![9 => proptest::collection::vec(any::<u8>(), 0..8), 1 => Just(vec![0; MAX_VALUE_LEN + 1])];
    let ns_id = prop_oneof![
        6 => "[a-c_0-9]{1,3}",
        1 => Just(String::new()),
        1 => Just("UPPER".to_string()),
        1 => Just(types::META_NAMESPACE.to_string()),
    ];
    let namespace = (
        ns_id,
        any::<u64>(),
        proptest::collection::vec((key.clone(), proptest::option::of(any::<u64>())), 0..3),
        proptest::collection::vec(
            (key.clone(), proptest::option::of(any::<u64>()), value.clone()),
            0..3,
        ),
        proptest::collection::vec((key, value), 0..3),
    )
        .prop_map(|(ns_id, ns_version, reads, rws, writes)| pb::TxNamespace {
            ns_id,
            ns_version,
            reads_only: reads
                .into_iter()
                .map(|(key, version)| pb::Read { key, version })
                .collect(),
            read_writes: rws
                .into_iter()
                .map(|(key, version, value)| pb::ReadWrite { key, version, value })
                .collect(),
            blind_writes: writes
                .into_iter()
                .map(|(key, value)| pb::Write { key, value })
                .collect(),
        });
    let endorsements = proptest::collection::vec(
        (proptest::collection::vec(any::<u8>(), 0..3), any::<bool>()).prop_map(|(sig, with_id)| {
            pb::EndorsementWithIdentity {
                endorsement: sig,
                identity: with_id.then(|| identity("org2", None)),
            }
        }),
        0..3,
    )
    .prop_map(|e| pb::Endorsements {
        endorsements_with_identity: e,
    });
    (
        proptest::collection::vec(namespace, 0..3),
        proptest::collection::vec(endorsements, 0..4),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..4), 0..2),
    )
        .prop_map(|(namespaces, endorsements, metadata)| pb::Tx {
            namespaces,
            endorsements,
            metadata,
        })
}

fn arb_envelope() -> impl Strategy<Value = Vec<u8>> {
    let tx_id = prop_oneof![
        6 => "[a-f0-9-]{1,12}",
        1 => Just(String::new()),
        1 => Just("with space".to_string()),
        1 => Just(format!("{}x", types::txid::SELF_CERTIFIED_ID_PREFIX)),
    ];
    let msp = prop_oneof![4 => Just("org1".to_string()), 1 => Just(wire::SELF_CERTIFIED_MSP.to_string())];
    (
        arb_tx(),
        tx_id,
        proptest::option::of(msp),
        prop_oneof![6 => Just(Vec::new()), 1 => Just(vec![1u8, 2])],
        prop_oneof![6 => Just(1i32), 1 => Just(0i32), 1 => Just(2i32), 1 => Just(99i32)],
    )
        .prop_map(|(tx, tx_id, msp, nonce, payload_type)| {
            pb::Envelope {
                payload: tx.encode_to_vec(),
                signature: vec![7; 8],
                identity: msp.map(|m| identity(&m, Some(pb::identity::Creator::CertificateId("c".into())))),
                tx_id,
                nonce,
                payload_type,
            }
            .encode_to_vec()
        })
}

/// Mutations of encoded bytes: a flipped byte, a cut, an inserted byte.
fn mutate(bytes: &[u8], op: u8, at: usize, b: u8) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if out.is_empty() {
        return vec![b];
    }
    let at = at % out.len();
    match op % 3 {
        0 => out[at] ^= b | 1,
        1 => out.truncate(at),
        _ => out.insert(at, b),
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_fast_path_accepts_only_what_the_full_check_accepts(
        e in arb_envelope(),
        op in any::<u8>(),
        at in any::<usize>(),
        b in any::<u8>(),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        for bytes in [e.clone(), mutate(&e, op, at, b), noise] {
            if plainly_valid(&bytes) {
                prop_assert!(open_full(&bytes), "the fast path accepted what the full check refuses: {bytes:?}");
            }
        }
    }

    #[test]
    fn valid_envelopes_mostly_take_the_fast_path(e in arb_envelope()) {
        // Whatever the full check accepts and has none of the unusual features is
        // accepted by the fast path too (what makes it worth having).
        let env = pb::Envelope::decode(e.as_slice()).unwrap();
        let usual = env.nonce.is_empty()
            && env.identity.as_ref().is_none_or(|i| i.msp_id != wire::SELF_CERTIFIED_MSP)
            && !env.tx_id.starts_with(types::txid::SELF_CERTIFIED_ID_PREFIX)
            && pb::Tx::decode(env.payload.as_slice())
                .is_ok_and(|tx| tx.namespaces.iter().all(|n| n.ns_id != types::META_NAMESPACE));
        if usual && open_full(&e) {
            prop_assert!(plainly_valid(&e));
        }
    }
}
