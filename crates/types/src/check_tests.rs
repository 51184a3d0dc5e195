use super::*;
use crate::policy::PolicyScheme;
use crate::tx::{Endorsement, Read, ReadWrite, Write};

/// A decoder for tests: a tx payload is accepted when it starts with "TX" (the tx comes
/// from the table row), a policy value is valid when it is "policy:<key>", a config
/// payload when it is "config:<key>".
struct FakeDecoder(Tx);

impl PayloadDecoder for FakeDecoder {
    fn decode_tx(&self, payload: &[u8]) -> Option<Tx> {
        payload.starts_with(b"TX").then(|| self.0.clone())
    }
    fn decode_policy(&self, value: &[u8]) -> Option<NamespacePolicy> {
        let key = value.strip_prefix(b"policy:")?;
        Some(NamespacePolicy {
            scheme: PolicyScheme::Ed25519,
            public_key: key.to_vec(),
        })
    }
    fn decode_config(&self, payload: &[u8]) -> Option<NamespacePolicy> {
        let key = payload.strip_prefix(b"config:")?;
        Some(NamespacePolicy {
            scheme: PolicyScheme::Ed25519,
            public_key: key.to_vec(),
        })
    }
}

fn sig() -> Vec<Endorsement> {
    vec![Endorsement {
        signature: vec![1; 64],
        ..Default::default()
    }]
}

fn ns(id: &str) -> TxNamespace {
    TxNamespace {
        ns_id: id.into(),
        ns_version: 0,
        reads_only: vec![Read {
            key: b"r".to_vec(),
            version: Some(1),
        }],
        read_writes: vec![ReadWrite {
            key: b"rw".to_vec(),
            version: None,
            value: b"v".to_vec(),
        }],
        blind_writes: vec![Write {
            key: b"w".to_vec(),
            value: b"v".to_vec(),
        }],
    }
}

fn valid_tx() -> Tx {
    Tx {
        namespaces: vec![ns("token")],
        endorsements: vec![sig()],
        metadata: vec![],
    }
}

fn meta_tx(key: &[u8], value: &[u8]) -> Tx {
    let meta = TxNamespace {
        ns_id: META_NAMESPACE.into(),
        read_writes: vec![ReadWrite {
            key: key.to_vec(),
            version: None,
            value: value.to_vec(),
        }],
        ..Default::default()
    };
    Tx {
        namespaces: vec![meta],
        endorsements: vec![sig()],
        metadata: vec![],
    }
}

fn with(f: impl FnOnce(&mut Tx)) -> Tx {
    let mut tx = valid_tx();
    f(&mut tx);
    tx
}

#[test]
#[allow(clippy::too_many_lines, reason = "one row per structural rule")]
fn transaction_table() {
    let rows: Vec<(&str, &str, Tx, Result<(), Status>)> = vec![
        ("valid", "t1", valid_tx(), Ok(())),
        (
            "valid two namespaces",
            "t1",
            with(|t| {
                t.namespaces.push(ns("other_1"));
                t.endorsements.push(sig());
            }),
            Ok(()),
        ),
        (
            "valid read-write only",
            "t1",
            with(|t| {
                t.namespaces[0].reads_only.clear();
                t.namespaces[0].blind_writes.clear();
            }),
            Ok(()),
        ),
        (
            "valid namespace creation",
            "t1",
            meta_tx(b"token", b"policy:k"),
            Ok(()),
        ),
        (
            "102 missing id",
            "",
            valid_tx(),
            Err(Status::MalformedMissingTxId),
        ),
        (
            "101 id with space",
            "t 1",
            valid_tx(),
            Err(Status::MalformedBadEnvelope),
        ),
        (
            "106 no namespaces",
            "t1",
            with(|t| {
                t.namespaces.clear();
                t.endorsements.clear();
            }),
            Err(Status::MalformedEmptyNamespaces),
        ),
        (
            "107 duplicate namespace",
            "t1",
            with(|t| {
                t.namespaces.push(ns("token"));
                t.endorsements.push(sig());
            }),
            Err(Status::MalformedDuplicateNamespace),
        ),
        (
            "108 upper case ns id",
            "t1",
            with(|t| t.namespaces[0].ns_id = "Token".into()),
            Err(Status::MalformedNamespaceIdInvalid),
        ),
        (
            "108 empty ns id",
            "t1",
            with(|t| t.namespaces[0].ns_id.clear()),
            Err(Status::MalformedNamespaceIdInvalid),
        ),
        (
            "108 61-char ns id",
            "t1",
            with(|t| t.namespaces[0].ns_id = "a".repeat(61)),
            Err(Status::MalformedNamespaceIdInvalid),
        ),
        (
            "109 blind write in _meta",
            "t1",
            {
                let mut t = meta_tx(b"token", b"policy:k");
                t.namespaces[0].blind_writes.push(Write {
                    key: b"x".to_vec(),
                    value: b"policy:k".to_vec(),
                });
                t
            },
            Err(Status::MalformedBlindWritesNotAllowed),
        ),
        (
            "110 read-only namespace",
            "t1",
            with(|t| {
                t.namespaces[0].read_writes.clear();
                t.namespaces[0].blind_writes.clear();
            }),
            Err(Status::MalformedNoWrites),
        ),
        (
            "111 empty key",
            "t1",
            with(|t| t.namespaces[0].blind_writes[0].key.clear()),
            Err(Status::MalformedEmptyKey),
        ),
        (
            "112 key read and blind-written",
            "t1",
            with(|t| t.namespaces[0].blind_writes[0].key = b"r".to_vec()),
            Err(Status::MalformedDuplicateKeyInReadWriteSet),
        ),
        (
            "112 key twice in read-writes",
            "t1",
            with(|t| {
                let rw = t.namespaces[0].read_writes[0].clone();
                t.namespaces[0].read_writes.push(rw);
            }),
            Err(Status::MalformedDuplicateKeyInReadWriteSet),
        ),
        (
            "104 oversized value",
            "t1",
            with(|t| t.namespaces[0].blind_writes[0].value = vec![0; MAX_VALUE_LEN + 1]),
            Err(Status::MalformedBadEnvelopePayload),
        ),
        (
            "104 oversized key",
            "t1",
            with(|t| t.namespaces[0].blind_writes[0].key = vec![7; MAX_KEY_LEN + 1]),
            Err(Status::MalformedBadEnvelopePayload),
        ),
        (
            "113 no endorsement sets",
            "t1",
            with(|t| t.endorsements.clear()),
            Err(Status::MalformedMissingSignature),
        ),
        (
            "113 empty endorsement set",
            "t1",
            with(|t| t.endorsements[0].clear()),
            Err(Status::MalformedMissingSignature),
        ),
        (
            "113 empty signature",
            "t1",
            with(|t| t.endorsements[0][0].signature.clear()),
            Err(Status::MalformedMissingSignature),
        ),
        (
            "114 policy value invalid",
            "t1",
            meta_tx(b"token", b"garbage"),
            Err(Status::MalformedNamespacePolicyInvalid),
        ),
        (
            "114 _meta key not a namespace id",
            "t1",
            meta_tx(b"Bad-Id", b"policy:k"),
            Err(Status::MalformedNamespacePolicyInvalid),
        ),
        (
            "114 _meta key names _meta",
            "t1",
            meta_tx(b"_meta", b"policy:k"),
            Err(Status::MalformedNamespacePolicyInvalid),
        ),
    ];
    for (name, id, tx, want) in rows {
        let got = check_tx(&TxId(id.into()), &tx, &FakeDecoder(tx.clone()));
        assert_eq!(got, want, "row {name:?}");
    }
}

#[test]
fn envelope_table() {
    let tx = valid_tx();
    let derived = txid::derive_tx_id(b"n1", b"alice");
    let env = |kind, id: &'static str, nonce: &'static [u8], payload: &'static [u8]| EnvelopeParts {
        kind,
        tx_id: id,
        nonce,
        creator: b"alice",
        payload,
        self_certified: false,
    };
    let rows: Vec<(&str, EnvelopeParts<'_>, Result<CheckedPayload, Status>)> = vec![
        (
            "valid free-form id",
            env(PayloadKind::Tx, "t1", b"", b"TX"),
            Ok(CheckedPayload::Tx(tx.clone())),
        ),
        (
            "valid derived id",
            EnvelopeParts {
                tx_id: &derived,
                ..env(PayloadKind::Tx, "", b"n1", b"TX")
            },
            Ok(CheckedPayload::Tx(tx.clone())),
        ),
        (
            "valid config",
            env(PayloadKind::Config, "c1", b"", b"config:k"),
            Ok(CheckedPayload::Config(NamespacePolicy {
                scheme: PolicyScheme::Ed25519,
                public_key: b"k".to_vec(),
            })),
        ),
        (
            "102 missing id",
            env(PayloadKind::Tx, "", b"", b"TX"),
            Err(Status::MalformedMissingTxId),
        ),
        (
            "103 unspecified payload type",
            env(PayloadKind::Unsupported(0), "t1", b"", b"TX"),
            Err(Status::MalformedUnsupportedEnvelopePayload),
        ),
        (
            "103 unknown payload type",
            env(PayloadKind::Unsupported(9), "t1", b"", b"TX"),
            Err(Status::MalformedUnsupportedEnvelopePayload),
        ),
        (
            "104 payload not a tx",
            env(PayloadKind::Tx, "t1", b"", b"junk"),
            Err(Status::MalformedBadEnvelopePayload),
        ),
        (
            "105 id not derived from nonce",
            env(PayloadKind::Tx, "t1", b"n1", b"TX"),
            Err(Status::MalformedTxIdConflict),
        ),
        (
            "115 config undecodable",
            env(PayloadKind::Config, "c1", b"", b"junk"),
            Err(Status::MalformedConfigTxInvalid),
        ),
    ];
    for (name, parts, want) in rows {
        assert_eq!(
            check_envelope(&parts, &FakeDecoder(tx.clone())),
            want,
            "row {name:?}"
        );
    }
}

/// Reserved ids of self-certified creators (`txid::SELF_CERTIFIED_ID_PREFIX`): only the
/// creator's own nonce-derived envelope may carry one; anything else is 101, never
/// stored, so it cannot take the id (not 103 or 105, which are stored).
#[test]
fn reserved_ids_table() {
    let tx = valid_tx();
    let derived = txid::derive_tx_id(b"n1", b"alice");
    let reserved = txid::derive_self_certified_tx_id(b"n1", b"alice");
    let env = |kind, id: &'static str, nonce: &'static [u8], payload: &'static [u8]| EnvelopeParts {
        kind,
        tx_id: id,
        nonce,
        creator: b"alice",
        payload,
        self_certified: false,
    };
    let rows: Vec<(&str, EnvelopeParts<'_>, Result<CheckedPayload, Status>)> = vec![
        (
            "valid reserved id of a self-certified creator",
            EnvelopeParts {
                tx_id: &reserved,
                self_certified: true,
                ..env(PayloadKind::Tx, "", b"n1", b"TX")
            },
            Ok(CheckedPayload::Tx(tx.clone())),
        ),
        (
            "101 a reserved id without a nonce (never stored)",
            EnvelopeParts {
                tx_id: &reserved,
                ..env(PayloadKind::Tx, "", b"", b"TX")
            },
            Err(Status::MalformedBadEnvelope),
        ),
        (
            "101 a reserved id from a creator that is not self-certified",
            EnvelopeParts {
                tx_id: &reserved,
                ..env(PayloadKind::Tx, "", b"n1", b"TX")
            },
            Err(Status::MalformedBadEnvelope),
        ),
        (
            "101 a reserved id under another nonce (not 105: never stored)",
            EnvelopeParts {
                tx_id: &reserved,
                self_certified: true,
                ..env(PayloadKind::Tx, "", b"n2", b"TX")
            },
            Err(Status::MalformedBadEnvelope),
        ),
        (
            "101 a reserved id with a malformed payload from someone else",
            EnvelopeParts {
                tx_id: &reserved,
                ..env(PayloadKind::Unsupported(9), "", b"", b"junk")
            },
            Err(Status::MalformedBadEnvelope),
        ),
        (
            "101 a self-certified creator with an id that is not reserved",
            EnvelopeParts {
                tx_id: &derived,
                self_certified: true,
                ..env(PayloadKind::Tx, "", b"n1", b"TX")
            },
            Err(Status::MalformedBadEnvelope),
        ),
    ];
    for (name, parts, want) in rows {
        assert_eq!(
            check_envelope(&parts, &FakeDecoder(tx.clone())),
            want,
            "row {name:?}"
        );
    }
}

#[test]
fn namespace_ids() {
    for ok in ["a", "token", "_meta", "ns_01", &"z".repeat(60)] {
        assert!(is_valid_namespace_id(ok), "{ok}");
    }
    for bad in ["", "A", "to-ken", "tok en", "ü", &"z".repeat(61)] {
        assert!(!is_valid_namespace_id(bad), "{bad}");
    }
}

/// Duplicate keys and namespaces are found the same way with few items (compared with
/// the earlier ones) and many (a hash set): at every position, after an empty key or
/// behind a key over the size limit.
#[test]
fn repeats_with_few_and_many_items() {
    let dec = FakeDecoder(valid_tx());
    let id = TxId("t".into());
    for n in [1usize, 2, 15, 16, 17, 40] {
        let keyed = |keys: Vec<Vec<u8>>| {
            let mut ns = ns("token");
            let third = keys.len() / 3;
            let mut keys = keys.into_iter();
            ns.reads_only = keys
                .by_ref()
                .take(third)
                .map(|key| Read { key, version: None })
                .collect();
            ns.read_writes = keys
                .by_ref()
                .take(third)
                .map(|key| ReadWrite {
                    key,
                    version: None,
                    value: vec![],
                })
                .collect();
            ns.blind_writes = keys.map(|key| Write { key, value: vec![] }).collect();
            Tx {
                namespaces: vec![ns],
                endorsements: vec![sig()],
                metadata: vec![],
            }
        };
        let distinct: Vec<Vec<u8>> = (0..n).map(|i| format!("k{i}").into_bytes()).collect();
        assert_eq!(check_tx(&id, &keyed(distinct.clone()), &dec), Ok(()), "{n} keys");
        for first in 0..n {
            for second in first + 1..n {
                let mut keys = distinct.clone();
                keys[second] = keys[first].clone();
                assert_eq!(
                    check_tx(&id, &keyed(keys.clone()), &dec),
                    Err(Status::MalformedDuplicateKeyInReadWriteSet),
                    "{n} keys, {second} repeats {first}"
                );
                // What comes first decides.
                keys[first] = vec![];
                keys[second] = vec![];
                assert_eq!(
                    check_tx(&id, &keyed(keys.clone()), &dec),
                    Err(Status::MalformedEmptyKey)
                );
                keys[first] = vec![b'x'; MAX_KEY_LEN + 1];
                keys[second] = keys[first].clone();
                assert_eq!(
                    check_tx(&id, &keyed(keys), &dec),
                    Err(Status::MalformedBadEnvelopePayload),
                    "{n} keys, a long key at {first}"
                );
            }
        }
        // Namespaces: distinct ids pass, a repeated one is refused wherever it is.
        let names: Vec<String> = (0..n).map(|i| format!("ns{i}")).collect();
        let spaced = |names: &[String]| Tx {
            namespaces: names.iter().map(|s| ns(s)).collect(),
            endorsements: names.iter().map(|_| sig()).collect(),
            metadata: vec![],
        };
        assert_eq!(check_tx(&id, &spaced(&names), &dec), Ok(()), "{n} namespaces");
        for first in 0..n {
            for second in first + 1..n {
                let mut names = names.clone();
                names[second] = names[first].clone();
                assert_eq!(
                    check_tx(&id, &spaced(&names), &dec),
                    Err(Status::MalformedDuplicateNamespace),
                    "{n} namespaces, {second} repeats {first}"
                );
            }
        }
    }
}
