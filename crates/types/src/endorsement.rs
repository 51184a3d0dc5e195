//! The canonical bytes a namespace endorsement signs.
//!
//! Deterministic and independent of protobuf encoding choices. All integers are
//! big-endian; `bytes(x)` is `u32be(len x) ‖ x`; `opt(v)` is `0x00` for absent or
//! `0x01 ‖ u64be(v)`:
//!
//! ```text
//! bytes(tx_id) ‖ bytes(ns_id) ‖ u64be(ns_version)
//! ‖ u32be(#reads)       ‖ for each read:        bytes(key) ‖ opt(version)
//! ‖ u32be(#read_writes) ‖ for each read-write:  bytes(key) ‖ opt(version) ‖ bytes(value)
//! ‖ u32be(#blind)       ‖ for each blind write: bytes(key) ‖ bytes(value)
//! ‖ u32be(#metadata)    ‖ for each item:        bytes(item)
//! ```
//!
//! The signature scheme adds its own domain-separation tag (crate `crypto`).

use crate::tx::{TxId, TxNamespace};

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

fn put_opt(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// The bytes an endorser of namespace `ns` of transaction `tx_id` signs.
pub fn namespace_signing_bytes(tx_id: &TxId, ns: &TxNamespace, metadata: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    put_bytes(&mut out, tx_id.as_str().as_bytes());
    put_bytes(&mut out, ns.ns_id.as_bytes());
    out.extend_from_slice(&ns.ns_version.to_be_bytes());
    out.extend_from_slice(&(ns.reads_only.len() as u32).to_be_bytes());
    for r in &ns.reads_only {
        put_bytes(&mut out, &r.key);
        put_opt(&mut out, r.version);
    }
    out.extend_from_slice(&(ns.read_writes.len() as u32).to_be_bytes());
    for rw in &ns.read_writes {
        put_bytes(&mut out, &rw.key);
        put_opt(&mut out, rw.version);
        put_bytes(&mut out, &rw.value);
    }
    out.extend_from_slice(&(ns.blind_writes.len() as u32).to_be_bytes());
    for w in &ns.blind_writes {
        put_bytes(&mut out, &w.key);
        put_bytes(&mut out, &w.value);
    }
    out.extend_from_slice(&(metadata.len() as u32).to_be_bytes());
    for m in metadata {
        put_bytes(&mut out, m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::{Read, ReadWrite, Write};

    fn ns() -> TxNamespace {
        TxNamespace {
            ns_id: "token".into(),
            ns_version: 2,
            reads_only: vec![Read {
                key: b"a".to_vec(),
                version: None,
            }],
            read_writes: vec![ReadWrite {
                key: b"b".to_vec(),
                version: Some(7),
                value: b"v".to_vec(),
            }],
            blind_writes: vec![Write {
                key: b"c".to_vec(),
                value: b"w".to_vec(),
            }],
        }
    }

    #[test]
    fn pinned_encoding() {
        let got = namespace_signing_bytes(&"t1".into(), &ns(), &[b"m".to_vec()]);
        let want = concat!(
            "00000002",
            "7431", // tx id "t1"
            "00000005",
            "746f6b656e",       // ns id "token"
            "0000000000000002", // ns version
            "00000001",
            "00000001",
            "61",
            "00", // read a, absent
            "00000001",
            "00000001",
            "62",
            "01",
            "0000000000000007",
            "00000001",
            "76",
            "00000001",
            "00000001",
            "63",
            "00000001",
            "77",
            "00000001",
            "00000001",
            "6d",
        );
        assert_eq!(hex::encode(got), want);
    }

    #[test]
    fn every_field_is_covered() {
        let base = namespace_signing_bytes(&"t1".into(), &ns(), &[]);
        let mut variants = Vec::new();
        let mut n = ns();
        n.ns_version = 3;
        variants.push(namespace_signing_bytes(&"t1".into(), &n, &[]));
        let mut n = ns();
        n.reads_only[0].version = Some(0);
        variants.push(namespace_signing_bytes(&"t1".into(), &n, &[]));
        let mut n = ns();
        n.read_writes[0].value = b"x".to_vec();
        variants.push(namespace_signing_bytes(&"t1".into(), &n, &[]));
        let mut n = ns();
        n.blind_writes.clear();
        variants.push(namespace_signing_bytes(&"t1".into(), &n, &[]));
        variants.push(namespace_signing_bytes(&"t2".into(), &ns(), &[]));
        variants.push(namespace_signing_bytes(&"t1".into(), &ns(), &[vec![]]));
        for v in variants {
            assert_ne!(v, base);
        }
    }
}
