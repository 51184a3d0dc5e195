//! Helpers shared by the coordinator's integration tests: tx builders, a reference
//! conflict relation on real keys, and a serial vcservice oracle (FX §3.5).

#![allow(dead_code)]

use coordinator::BlockTx;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use types::{Height, META_NAMESPACE, Read, ReadWrite, Status, Tx, TxNamespace, Write};

/// A namespace with reads (version `None`), read-writes (version `None`) and blind
/// writes of the given keys.
pub fn ns(id: &str, reads: &[&str], rws: &[&str], blinds: &[&str]) -> TxNamespace {
    TxNamespace {
        ns_id: id.to_string(),
        ns_version: 0,
        reads_only: reads
            .iter()
            .map(|k| Read {
                key: k.as_bytes().to_vec(),
                version: None,
            })
            .collect(),
        read_writes: rws
            .iter()
            .map(|k| ReadWrite {
                key: k.as_bytes().to_vec(),
                version: None,
                value: b"v".to_vec(),
            })
            .collect(),
        blind_writes: blinds
            .iter()
            .map(|k| Write {
                key: k.as_bytes().to_vec(),
                value: b"v".to_vec(),
            })
            .collect(),
    }
}

/// A tx over the given namespaces.
pub fn tx(namespaces: Vec<TxNamespace>) -> Arc<Tx> {
    Arc::new(Tx {
        namespaces,
        ..Tx::default()
    })
}

/// A tx on namespace `ns1` reading `reads` and writing (read-write) `writes`.
pub fn rw(reads: &[&str], writes: &[&str]) -> Arc<Tx> {
    tx(vec![ns("ns1", reads, writes, &[])])
}

/// A tx on namespace `ns1` blind-writing `keys`.
pub fn blind(keys: &[&str]) -> Arc<Tx> {
    tx(vec![ns("ns1", &[], &[], keys)])
}

/// Block `number` holding `txs` at indices `0..`, with ids `b<number>t<index>`.
pub fn block(number: u64, txs: Vec<Arc<Tx>>) -> Vec<BlockTx> {
    txs.into_iter()
        .enumerate()
        .map(|(i, t)| BlockTx::new(format!("b{number}t{i}").into(), Height::new(number, i as u32), t))
        .collect()
}

/// A key as the vcservice sees it.
pub type Key = (String, Vec<u8>);

/// Reads of a tx with expected versions, including the implicit `(_meta, ns)` read.
pub fn reads_of(tx: &Tx) -> Vec<(Key, Option<u64>)> {
    let mut out = Vec::new();
    for ns in &tx.namespaces {
        if ns.ns_id != META_NAMESPACE {
            out.push((
                (META_NAMESPACE.to_string(), ns.ns_id.as_bytes().to_vec()),
                Some(ns.ns_version),
            ));
        }
        for r in &ns.reads_only {
            out.push(((ns.ns_id.clone(), r.key.clone()), r.version));
        }
        for r in &ns.read_writes {
            out.push(((ns.ns_id.clone(), r.key.clone()), r.version));
        }
    }
    out
}

/// Keys a tx writes.
pub fn writes_of(tx: &Tx) -> BTreeSet<Key> {
    let mut out = BTreeSet::new();
    for ns in &tx.namespaces {
        for r in &ns.read_writes {
            out.insert((ns.ns_id.clone(), r.key.clone()));
        }
        for w in &ns.blind_writes {
            out.insert((ns.ns_id.clone(), w.key.clone()));
        }
    }
    out
}

/// Whether two txs conflict: one writes a key the other reads or writes.
pub fn conflict(a: &Tx, b: &Tx) -> bool {
    let (ra, wa): (BTreeSet<Key>, _) = (reads_of(a).into_iter().map(|r| r.0).collect(), writes_of(a));
    let (rb, wb): (BTreeSet<Key>, _) = (reads_of(b).into_iter().map(|r| r.0).collect(), writes_of(b));
    !wa.is_disjoint(&rb) || !ra.is_disjoint(&wb) || !wa.is_disjoint(&wb)
}

/// Committed state: key → version.
pub type State = BTreeMap<Key, u64>;

/// What the vcservice does with one tx at its turn: validate reads against `state`,
/// then apply writes (new key → 0, update at v → v+1, blind write → 0 or +1).
pub fn commit(state: &mut State, tx: &Tx) -> Status {
    let valid = reads_of(tx)
        .into_iter()
        .all(|(k, want)| state.get(&k).copied() == want);
    if !valid {
        return Status::AbortedMvccConflict;
    }
    for ns in &tx.namespaces {
        for r in &ns.read_writes {
            let v = r.version.map_or(0, |v| v + 1);
            state.insert((ns.ns_id.clone(), r.key.clone()), v);
        }
        for w in &ns.blind_writes {
            let k = (ns.ns_id.clone(), w.key.clone());
            let v = state.get(&k).map_or(0, |v| v + 1);
            state.insert(k, v);
        }
    }
    Status::Committed
}
