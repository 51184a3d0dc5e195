//! `wire::decode::decode_tx` (straight into the domain type) against the path it
//! replaces, `pb::Tx::decode` then `Tx::from`: the same tx for every input prost
//! accepts, `None` for every input it refuses. Inputs: valid txs, hand-made malformed
//! ones, structurally random field sequences (known fields with right and wrong wire
//! types, unknown fields, groups, repeated singular fields, bad UTF-8, nesting at the
//! recursion limit), mutations of valid encodings, and random bytes.

use proptest::prelude::*;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};
use types::Tx;
use wire::decode::{check_envelope_ref, decode_envelope, decode_tx};
use wire::pb;

/// The old path.
fn oracle(bytes: &[u8]) -> Option<Tx> {
    pb::Tx::decode(bytes).ok().map(Tx::from)
}

fn same(bytes: &[u8]) {
    assert_eq!(decode_tx(bytes), oracle(bytes), "input {bytes:02x?}");
}

fn full_tx() -> pb::Tx {
    let identity = |msp: &str, creator: Option<pb::identity::Creator>| pb::Identity {
        msp_id: msp.into(),
        creator,
    };
    pb::Tx {
        namespaces: vec![
            pb::TxNamespace {
                ns_id: "token".into(),
                ns_version: 7,
                reads_only: vec![
                    pb::Read {
                        key: b"r".to_vec(),
                        version: None,
                    },
                    pb::Read {
                        key: vec![],
                        version: Some(0),
                    },
                ],
                read_writes: vec![pb::ReadWrite {
                    key: b"coin".to_vec(),
                    version: Some(u64::MAX),
                    value: vec![3; 200],
                }],
                blind_writes: vec![pb::Write {
                    key: b"new".to_vec(),
                    value: vec![],
                }],
            },
            pb::TxNamespace::default(),
        ],
        endorsements: vec![
            pb::Endorsements {
                endorsements_with_identity: vec![
                    pb::EndorsementWithIdentity {
                        endorsement: vec![9; 64],
                        identity: None,
                    },
                    pb::EndorsementWithIdentity {
                        endorsement: b"s".to_vec(),
                        identity: Some(identity(
                            "Org1",
                            Some(pb::identity::Creator::Certificate(b"cert".to_vec())),
                        )),
                    },
                    pb::EndorsementWithIdentity {
                        endorsement: vec![],
                        identity: Some(identity(
                            "",
                            Some(pb::identity::Creator::CertificateId("id-1".into())),
                        )),
                    },
                    pb::EndorsementWithIdentity {
                        endorsement: vec![1],
                        identity: Some(identity("Org2", None)),
                    },
                ],
            },
            pb::Endorsements::default(),
        ],
        metadata: vec![b"m".to_vec(), vec![]],
    }
}

fn key(tag: u32, wt: WireType, out: &mut Vec<u8>) {
    encode_key(tag, wt, out);
}

fn delimited(tag: u32, body: &[u8], out: &mut Vec<u8>) {
    key(tag, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

#[test]
fn valid_txs_decode_to_the_same_tx() {
    let full = full_tx();
    for tx in [pb::Tx::default(), full.clone()] {
        let bytes = tx.encode_to_vec();
        assert_eq!(decode_tx(&bytes), Some(Tx::from(tx)));
    }
    // Every prefix of a valid tx: accepted or refused as prost does.
    let bytes = full.encode_to_vec();
    for end in 0..=bytes.len() {
        same(&bytes[..end]);
    }
    // Every single byte changed to a few values.
    for i in 0..bytes.len() {
        for v in [0x00, 0x01, 0x07, 0x0a, 0x7f, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] = v;
            same(&b);
        }
    }
}

fn group(tag: u32, inner: &[u8], end: u32) -> Vec<u8> {
    let mut b = Vec::new();
    key(tag, WireType::StartGroup, &mut b);
    b.extend_from_slice(inner);
    key(end, WireType::EndGroup, &mut b);
    b
}

/// `body` as the only namespace of a tx.
fn in_namespace(body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    delimited(1, body, &mut b);
    b
}

/// `body` as the identity of the only endorsement of a tx.
fn in_identity(body: &[u8]) -> Vec<u8> {
    let mut e = Vec::new();
    delimited(2, body, &mut e);
    let mut set = Vec::new();
    delimited(1, &e, &mut set);
    let mut b = Vec::new();
    delimited(2, &set, &mut b);
    b
}

/// Checks every case against prost; returns how many prost accepted.
fn all_same(cases: &[Vec<u8>]) -> usize {
    for c in cases {
        same(c);
    }
    cases.iter().filter(|c| oracle(c).is_some()).count()
}

#[test]
fn keys_varints_and_wire_types_as_prost() {
    // Tag 0, wire types 6 and 7, a key over u32::MAX, a truncated varint, an 11-byte
    // varint, a 10-byte varint ending in 0x01 (valid) and 0x02 (invalid).
    let mut cases = vec![
        vec![0x02, 0x00],
        vec![0x0e],
        vec![0x0f],
        vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
        vec![0x8a],
        vec![0xff; 11],
    ];
    let mut b = vec![0x98, 0x01]; // tag 19, varint (unknown)
    b.extend([0xff; 9]);
    b.push(0x01);
    cases.push(b.clone());
    *b.last_mut().unwrap() = 0x02;
    cases.push(b);
    // Known fields with every wrong wire type, unknown fields with every wire type.
    for tag in [1u32, 2, 3, 4, 1000] {
        for wt in [0u32, 1, 2, 3, 4, 5] {
            let mut b = Vec::new();
            encode_varint(u64::from(tag << 3 | wt), &mut b);
            b.extend([0x00; 8]);
            cases.push(b.clone());
            b.truncate(b.len() - 6);
            cases.push(b);
        }
    }
    let accepted = all_same(&cases);
    assert!(
        accepted >= 3 && accepted < cases.len() - 10,
        "{accepted} of {}",
        cases.len()
    );
}

#[test]
fn groups_and_namespaces_as_prost() {
    // Groups: matched, nested, mismatched end, end without start.
    let mut cases = vec![
        group(9, &[0x08, 0x01], 9),
        group(9, &group(10, &[], 10), 9),
        group(9, &[], 10),
        vec![0x4c],
    ];
    // A namespace with a bad UTF-8 id; ids and versions given twice (the last wins);
    // a version with the wrong wire type; a read running past its namespace.
    let mut bad_id = Vec::new();
    delimited(1, &[0xc3, 0x28], &mut bad_id);
    cases.push(in_namespace(&bad_id));
    let mut twice = Vec::new();
    delimited(1, b"first", &mut twice);
    delimited(1, b"second", &mut twice);
    for v in [5, 6] {
        key(2, WireType::Varint, &mut twice);
        encode_varint(v, &mut twice);
    }
    cases.push(in_namespace(&twice));
    assert_eq!(
        decode_tx(cases.last().unwrap()).unwrap().namespaces[0].ns_version,
        6
    );
    let mut fixed = Vec::new();
    key(2, WireType::SixtyFourBit, &mut fixed);
    fixed.extend([0; 8]);
    cases.push(in_namespace(&fixed));
    let mut past = Vec::new();
    key(3, WireType::LengthDelimited, &mut past);
    encode_varint(10, &mut past);
    past.extend([0x0a, 0x01, b'k']);
    let mut b = in_namespace(&past);
    b.extend([0x1a, 0x00, 0x1a, 0x00, 0x1a, 0x00, 0x1a, 0x00]);
    cases.push(b);
    let accepted = all_same(&cases);
    assert_eq!(accepted, 3, "of {}", cases.len());
}

#[test]
fn identities_as_prost() {
    // Identities given twice (merged), oneof members in turn, a bad UTF-8 certificate id.
    let mut cases = Vec::new();
    for creators in [
        vec![(2u32, b"a".to_vec()), (3, b"b".to_vec())],
        vec![(3, b"b".to_vec()), (2, b"a".to_vec())],
        vec![(3, vec![0xff])],
    ] {
        let mut e = Vec::new();
        for (tag, value) in &creators {
            let mut id = Vec::new();
            delimited(1, b"Org", &mut id);
            delimited(*tag, value, &mut id);
            delimited(2, &id, &mut e);
        }
        let mut id = Vec::new();
        delimited(1, b"Org9", &mut id);
        delimited(2, &id, &mut e);
        let mut set = Vec::new();
        delimited(1, &e, &mut set);
        let mut b = Vec::new();
        delimited(2, &set, &mut b);
        cases.push(b);
    }
    assert_eq!(all_same(&cases), 2);
    let merged = decode_tx(&cases[0]).unwrap();
    assert_eq!(merged.endorsements[0][0].msp_id, "Org9");
    assert_eq!(merged.endorsements[0][0].identity, b"b");
}

#[test]
fn nesting_at_the_recursion_limit_as_prost() {
    // Groups nested around the limit inside an identity (three messages deep) and at
    // the top.
    let mut cases = Vec::new();
    for levels in [90, 95, 96, 97, 98, 99, 100, 101] {
        let mut inner: Vec<u8> = Vec::new();
        for _ in 0..levels {
            inner = group(20, &inner, 20);
        }
        cases.push(in_identity(&inner));
        cases.push(inner);
    }
    let accepted = all_same(&cases);
    assert!(
        accepted > 2 && accepted < cases.len() - 2,
        "{accepted} of {}",
        cases.len()
    );
}

/// A small deterministic generator of field sequences.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self) -> Vec<u8> {
        let len = match self.below(4) {
            0 => 0,
            1 => 1 + self.below(3),
            _ => self.below(40),
        };
        let text = self.below(3) != 0;
        (0..len)
            .map(|_| {
                if text {
                    b'a' + self.below(26) as u8
                } else {
                    self.below(256) as u8
                }
            })
            .collect()
    }

    fn varint_value(&mut self) -> u64 {
        match self.below(4) {
            0 => 0,
            1 => self.below(300),
            2 => u64::MAX - self.below(3),
            _ => self.next(),
        }
    }
}

/// The known fields of each message: (tag, wire type, nested message kind if any).
#[derive(Clone, Copy)]
enum Kind {
    Tx,
    Namespace,
    Read,
    ReadWrite,
    Write,
    Endorsements,
    Endorsement,
    Identity,
    Envelope,
}

fn fields(kind: Kind) -> &'static [(u32, WireType, Option<Kind>)] {
    use Kind::*;
    use WireType::{LengthDelimited as L, Varint as V};
    match kind {
        Tx => &[(1, L, Some(Namespace)), (2, L, Some(Endorsements)), (3, L, None)],
        Namespace => &[
            (1, L, None),
            (2, V, None),
            (3, L, Some(Read)),
            (4, L, Some(ReadWrite)),
            (5, L, Some(Write)),
        ],
        Read => &[(1, L, None), (2, V, None)],
        ReadWrite => &[(1, L, None), (2, V, None), (3, L, None)],
        Write => &[(1, L, None), (2, L, None)],
        Endorsements => &[(1, L, Some(Endorsement))],
        Endorsement => &[(1, L, None), (2, L, Some(Identity))],
        Identity => &[(1, L, None), (2, L, None), (3, L, None)],
        Envelope => &[
            (1, L, Some(Tx)),
            (2, L, None),
            (3, L, Some(Identity)),
            (4, L, None),
            (5, L, None),
            (6, V, None),
        ],
    }
}

fn any_wire_type(g: &mut Gen) -> WireType {
    match g.below(6) {
        0 => WireType::Varint,
        1 => WireType::SixtyFourBit,
        2 => WireType::LengthDelimited,
        3 => WireType::StartGroup,
        4 => WireType::EndGroup,
        _ => WireType::ThirtyTwoBit,
    }
}

/// A random field value for wire type `wt` (groups closed with their tag).
fn value(g: &mut Gen, tag: u32, wt: WireType, out: &mut Vec<u8>, depth: u32) {
    match wt {
        WireType::Varint => encode_varint(g.varint_value(), out),
        WireType::SixtyFourBit => out.extend((0..8).map(|_| g.below(256) as u8)),
        WireType::ThirtyTwoBit => out.extend((0..4).map(|_| g.below(256) as u8)),
        WireType::LengthDelimited => {
            let b = g.bytes();
            encode_varint(b.len() as u64, out);
            out.extend(b);
        }
        WireType::StartGroup => {
            if depth > 0 && g.below(3) == 0 {
                let t = 20 + g.below(5) as u32;
                key(t, any_wire_type(g), out);
                let last = out.len() - 1;
                // Only a start group or a plain value inside.
                out[last] = out[last] & !7 | if g.below(2) == 0 { 3 } else { 0 };
                if out[last] & 7 == 3 {
                    value(g, t, WireType::StartGroup, out, depth - 1);
                } else {
                    value(g, t, WireType::Varint, out, depth - 1);
                }
            }
            let end = if g.below(20) == 0 { tag + 1 } else { tag };
            key(end, WireType::EndGroup, out);
        }
        WireType::EndGroup => {}
    }
}

/// A random encoding of message `kind`: known fields (mostly with their own wire type),
/// unknown fields, repetitions, nested messages.
fn message(g: &mut Gen, kind: Kind, depth: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let n = g.below(6);
    for _ in 0..n {
        let known = fields(kind);
        if g.below(8) == 0 {
            // An unknown field.
            let tag = 6 + g.below(30) as u32;
            let wt = any_wire_type(g);
            key(tag, wt, &mut out);
            value(g, tag, wt, &mut out, 3);
            continue;
        }
        let (tag, wt, nested) = known[g.below(known.len() as u64) as usize];
        let wt = if g.below(25) == 0 { any_wire_type(g) } else { wt };
        key(tag, wt, &mut out);
        match (nested, wt) {
            (Some(k), WireType::LengthDelimited) if depth > 0 => {
                let body = message(g, k, depth - 1);
                encode_varint(body.len() as u64, &mut out);
                out.extend(body);
            }
            _ => value(g, tag, wt, &mut out, 3),
        }
    }
    out
}

#[test]
fn generated_field_sequences_as_prost() {
    let (mut accepted, mut refused) = (0, 0);
    for seed in 1..20_000u64 {
        let mut g = Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let bytes = message(&mut g, Kind::Tx, 5);
        same(&bytes);
        if oracle(&bytes).is_some() {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    // Both outcomes are well represented.
    assert!(
        accepted > 2_000 && refused > 2_000,
        "accepted {accepted}, refused {refused}"
    );
}

/// The borrowed envelope against `pb::Envelope::decode`, and its check against
/// `check_decoded_envelope`, for `bytes`.
fn same_envelope(bytes: &[u8]) -> bool {
    let want = pb::Envelope::decode(bytes).ok();
    let got = decode_envelope(bytes);
    assert_eq!(got.map(|e| e.to_pb()), want, "input {bytes:02x?}");
    let (Some(got), Some(want)) = (got, want) else {
        return false;
    };
    let dec = wire::ProstDecoder::default();
    assert_eq!(
        check_envelope_ref(&got, &dec),
        wire::check_decoded_envelope(&want, &dec),
        "input {bytes:02x?}"
    );
    assert_eq!(got.self_certified_key(), wire::self_certified_key(&want));
    true
}

/// Envelopes that pass the checks (a free-form id, an id derived from a nonce, a
/// self-certified creator) and variants of them.
fn envelopes() -> Vec<pb::Envelope> {
    let identity = |msp: &str, creator| {
        Some(pb::Identity {
            msp_id: msp.into(),
            creator,
        })
    };
    let with_id = |mut env: pb::Envelope| {
        if !env.nonce.is_empty() {
            let creator = env
                .identity
                .as_ref()
                .map(|i| i.encode_to_vec())
                .unwrap_or_default();
            env.tx_id = types::txid::derive_tx_id(&env.nonce, &creator);
        }
        env
    };
    let payload = pb::Tx {
        namespaces: vec![pb::TxNamespace {
            ns_id: "token".into(),
            read_writes: vec![pb::ReadWrite {
                key: b"coin".to_vec(),
                version: Some(1),
                value: b"v".to_vec(),
            }],
            ..Default::default()
        }],
        endorsements: vec![pb::Endorsements {
            endorsements_with_identity: vec![pb::EndorsementWithIdentity {
                endorsement: vec![1; 64],
                identity: None,
            }],
        }],
        metadata: vec![],
    }
    .encode_to_vec();
    vec![
        with_id(pb::Envelope {
            payload: payload.clone(),
            tx_id: "free-form-1".into(),
            payload_type: 1,
            ..Default::default()
        }),
        with_id(pb::Envelope {
            payload: payload.clone(),
            signature: vec![5; 64],
            identity: identity("Org1", Some(pb::identity::Creator::Certificate(b"cert".to_vec()))),
            nonce: vec![1; 24],
            payload_type: 1,
            ..Default::default()
        }),
        with_id(pb::Envelope {
            payload: payload.clone(),
            identity: identity("", Some(pb::identity::Creator::CertificateId(String::new()))),
            nonce: vec![2; 8],
            payload_type: 1,
            ..Default::default()
        }),
        with_id(pb::Envelope {
            payload,
            identity: identity("token", Some(pb::identity::Creator::Certificate(vec![7; 32]))),
            nonce: vec![3; 8],
            payload_type: 1,
            ..Default::default()
        }),
        with_id(pb::Envelope {
            payload: b"not a config".to_vec(),
            identity: identity("Org1", None),
            nonce: vec![4; 8],
            payload_type: 2,
            ..Default::default()
        }),
        pb::Envelope {
            payload_type: -5,
            tx_id: "x".into(),
            ..Default::default()
        },
    ]
}

#[test]
fn envelopes_decode_and_check_as_prost() {
    let mut checked = 0;
    for env in envelopes() {
        let bytes = env.encode_to_vec();
        assert!(same_envelope(&bytes));
        for end in 0..bytes.len() {
            same_envelope(&bytes[..end]);
        }
        for i in 0..bytes.len() {
            for v in [0x00, 0x01, 0x0a, 0x7f, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] = v;
                checked += usize::from(same_envelope(&b));
            }
        }
        // An identity given twice is merged; an int32 payload type from a 10-byte varint.
        let mut b = bytes.clone();
        delimited(3, &[0x0a, 0x02, b'O', b'2'], &mut b);
        key(6, WireType::Varint, &mut b);
        encode_varint(u64::MAX - 1, &mut b);
        assert!(same_envelope(&b));
    }
    assert!(checked > 1_000, "{checked}");
    let dec = wire::ProstDecoder::default();
    let statuses: std::collections::BTreeSet<String> = envelopes()
        .iter()
        .map(|e| format!("{:?}", wire::check_decoded_envelope(e, &dec).map(|_| ())))
        .collect();
    // The fixtures reach several outcomes of the check, success included.
    assert!(statuses.len() >= 3 && statuses.contains("Ok(())"), "{statuses:?}");
}

#[test]
fn generated_envelopes_as_prost() {
    let (mut accepted, mut refused) = (0, 0);
    for seed in 1..20_000u64 {
        let mut g = Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        if same_envelope(&message(&mut g, Kind::Envelope, 6)) {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    assert!(
        accepted > 2_000 && refused > 2_000,
        "accepted {accepted}, refused {refused}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    #[test]
    fn random_bytes_as_prost(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        prop_assert_eq!(decode_tx(&bytes), oracle(&bytes));
        same_envelope(&bytes);
    }

    #[test]
    fn mutated_encodings_as_prost(
        seed in 1..u64::MAX,
        edits in proptest::collection::vec((any::<u16>(), any::<u8>(), 0..3u8), 1..4),
    ) {
        let mut g = Gen(seed);
        let mut bytes = message(&mut g, Kind::Tx, 5);
        for (at, v, op) in edits {
            let i = usize::from(at) % (bytes.len() + 1);
            match op {
                0 if i < bytes.len() => bytes[i] = v,
                1 => bytes.insert(i, v),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => bytes.push(v),
            }
        }
        prop_assert_eq!(decode_tx(&bytes), oracle(&bytes));
    }
}
