//! The deciding logic of the vcservice (FX §3.5), pure: which keys to read, which txs are
//! valid given the committed versions, and what to write.
//!
//! The coordinator only hands over batches whose txs are pairwise conflict-free. The
//! vcservice does not rely on it for safety: [`split_conflict_free`] cuts any batch into
//! consecutive conflict-free chunks, processed one after the other.

use crate::model::{CommitSet, ReadSet, StatusMap, TxOutcome, VcTx, VersionMap};
use std::collections::{BTreeSet, HashSet};
use types::check::{PayloadDecoder, check_tx};
use types::{META_NAMESPACE, Status, Tx};

/// Runs the structural checks on txs that arrive without an upstream status, so a
/// malformed tx gets its `MALFORMED_*` status and never reaches storage (defence in
/// depth: the sidecar checks first).
pub fn precheck(batch: &mut [VcTx], dec: &dyn PayloadDecoder) {
    for vtx in batch.iter_mut().filter(|t| t.prelim.is_none()) {
        if let Err(status) = check_tx(&vtx.id, &vtx.tx, dec) {
            vtx.prelim = Some(status);
        }
    }
}

/// Reads of one tx (with the expected version) including the implicit read of
/// `(_meta, ns)` at `ns_version` for every namespace other than `_meta`.
pub fn reads_of(tx: &Tx) -> Vec<(&str, &[u8], Option<u64>)> {
    let mut out = Vec::new();
    for ns in &tx.namespaces {
        if ns.ns_id != META_NAMESPACE {
            out.push((META_NAMESPACE, ns.ns_id.as_bytes(), Some(ns.ns_version)));
        }
        for r in &ns.reads_only {
            out.push((ns.ns_id.as_str(), r.key.as_slice(), r.version));
        }
        for rw in &ns.read_writes {
            out.push((ns.ns_id.as_str(), rw.key.as_slice(), rw.version));
        }
    }
    out
}

/// Keys a tx writes.
pub fn writes_of(tx: &Tx) -> impl Iterator<Item = (&str, &[u8])> {
    tx.namespaces.iter().flat_map(|ns| {
        ns.read_writes
            .iter()
            .map(|rw| rw.key.as_slice())
            .chain(ns.blind_writes.iter().map(|w| w.key.as_slice()))
            .map(move |k| (ns.ns_id.as_str(), k))
    })
}

/// Splits a batch into consecutive chunks in which no two txs conflict (read-write,
/// write-read, write-write on a key) or share an id. Order is preserved.
pub fn split_conflict_free(batch: Vec<VcTx>) -> Vec<Vec<VcTx>> {
    let mut chunks: Vec<Vec<VcTx>> = Vec::new();
    let mut cur: Vec<VcTx> = Vec::new();
    let mut reads: HashSet<(String, Vec<u8>)> = HashSet::new();
    let mut writes: HashSet<(String, Vec<u8>)> = HashSet::new();
    let mut ids = HashSet::new();
    for vtx in batch {
        let (r, w): (Vec<_>, Vec<_>) = if vtx.prelim.is_some() {
            (Vec::new(), Vec::new())
        } else {
            (
                reads_of(&vtx.tx)
                    .into_iter()
                    .map(|(n, k, _)| (n.to_string(), k.to_vec()))
                    .collect(),
                writes_of(&vtx.tx)
                    .map(|(n, k)| (n.to_string(), k.to_vec()))
                    .collect(),
            )
        };
        let conflicts = ids.contains(&vtx.id)
            || r.iter().any(|k| writes.contains(k))
            || w.iter().any(|k| writes.contains(k) || reads.contains(k));
        if conflicts {
            chunks.push(std::mem::take(&mut cur));
            reads.clear();
            writes.clear();
            ids.clear();
        }
        ids.insert(vtx.id.clone());
        reads.extend(r);
        writes.extend(w);
        cur.push(vtx);
    }
    if !cur.is_empty() {
        chunks.push(cur);
    }
    chunks
}

/// How each tx of a chunk is handled before validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Decided without touching state: a resubmission (stored status, same height), a
    /// duplicate id (100), or an upstream status that is not stored.
    Answered(TxOutcome),
    /// An upstream status to store, nothing else.
    StorePrelim(Status),
    /// Validate reads, then commit or abort.
    Validate,
}

/// Decides the disposition of each tx of a conflict-free chunk, given the statuses already
/// stored for their ids (FX §3.6 idempotence).
pub fn classify(chunk: &[VcTx], stored: &StatusMap) -> Vec<Disposition> {
    chunk
        .iter()
        .map(|vtx| {
            if let Some(&(status, height)) = stored.get(&vtx.id) {
                let status = if height == vtx.height {
                    status
                } else {
                    Status::RejectedDuplicateTxId
                };
                let height = vtx.height;
                return Disposition::Answered(TxOutcome {
                    id: vtx.id.clone(),
                    status,
                    height,
                });
            }
            match vtx.prelim {
                Some(s) if s.is_stored() => Disposition::StorePrelim(s),
                Some(s) => Disposition::Answered(TxOutcome {
                    id: vtx.id.clone(),
                    status: s,
                    height: vtx.height,
                }),
                None => Disposition::Validate,
            }
        })
        .collect()
}

/// The keys whose versions validation needs.
pub fn read_set(chunk: &[VcTx], disp: &[Disposition]) -> ReadSet {
    let mut set: std::collections::BTreeMap<String, BTreeSet<Vec<u8>>> = Default::default();
    for (vtx, d) in chunk.iter().zip(disp) {
        if *d == Disposition::Validate {
            for (ns, key, _) in reads_of(&vtx.tx) {
                set.entry(ns.to_string()).or_default().insert(key.to_vec());
            }
        }
    }
    set.into_iter()
        .map(|(ns, keys)| (ns, keys.into_iter().collect()))
        .collect()
}

/// The keys a first, optimistic plan reads ([`crate::Engine`]): those of [`read_set`]
/// except the keys a tx expects absent and writes. Such a key becomes an insert of the
/// commit, which holds only if the key is still absent ([`crate::Backend::commit`]), so
/// the commit checks it and reading it first is needed only to tell which tx conflicts
/// when one does: a plan that assumes them absent is either right, or its commit fails
/// and the chunk is planned again from [`read_set`]. Reads that the commit does not
/// check (read-only keys, a namespace's `_meta` version, keys read at a version, which
/// decide most conflicts) are kept.
pub fn unchecked_read_set(chunk: &[VcTx], disp: &[Disposition]) -> ReadSet {
    let mut set: std::collections::BTreeMap<String, BTreeSet<Vec<u8>>> = Default::default();
    for (vtx, d) in chunk.iter().zip(disp) {
        if *d == Disposition::Validate {
            for (ns, key, _) in reads_not_checked_by_commit(&vtx.tx) {
                set.entry(ns.to_string()).or_default().insert(key.to_vec());
            }
        }
    }
    set.into_iter()
        .map(|(ns, keys)| (ns, keys.into_iter().collect()))
        .collect()
}

/// [`reads_of`] without the read-writes that expect their key absent (the commit's
/// inserts check those).
fn reads_not_checked_by_commit(tx: &Tx) -> impl Iterator<Item = (&str, &[u8], Option<u64>)> {
    tx.namespaces.iter().flat_map(|ns| {
        let meta = (ns.ns_id != META_NAMESPACE).then_some((
            META_NAMESPACE,
            ns.ns_id.as_bytes(),
            Some(ns.ns_version),
        ));
        let id = ns.ns_id.as_str();
        meta.into_iter()
            .chain(
                ns.reads_only
                    .iter()
                    .map(move |r| (id, r.key.as_slice(), r.version)),
            )
            .chain(
                ns.read_writes
                    .iter()
                    .filter(|rw| rw.version.is_some())
                    .map(move |rw| (id, rw.key.as_slice(), rw.version)),
            )
    })
}

/// Validates every tx to be validated against `versions` and builds the commit.
/// Returns the commit and the outcome of every tx, in chunk order.
pub fn decide(chunk: &[VcTx], disp: &[Disposition], versions: &VersionMap) -> (CommitSet, Vec<TxOutcome>) {
    let mut set = CommitSet::default();
    let mut outcomes = Vec::with_capacity(chunk.len());
    for (vtx, d) in chunk.iter().zip(disp) {
        let status = match d {
            Disposition::Answered(o) => {
                outcomes.push(o.clone());
                continue;
            }
            Disposition::StorePrelim(s) => *s,
            Disposition::Validate => {
                let valid = reads_of(&vtx.tx)
                    .into_iter()
                    .all(|(ns, key, want)| versions.get(&(ns.to_string(), key.to_vec())).copied() == want);
                if valid {
                    add_writes(&mut set, &vtx.tx);
                    Status::Committed
                } else {
                    Status::AbortedMvccConflict
                }
            }
        };
        set.statuses
            .push(TxOutcome::new(vtx.id.clone(), status, vtx.height));
        outcomes.push(TxOutcome {
            id: vtx.id.clone(),
            status,
            height: vtx.height,
        });
    }
    (set, outcomes)
}

fn add_writes(set: &mut CommitSet, tx: &Tx) {
    for ns in &tx.namespaces {
        let w = set.writes.entry(ns.ns_id.clone()).or_default();
        for rw in &ns.read_writes {
            match rw.version {
                None => w.inserts.push((rw.key.clone(), rw.value.clone())),
                Some(v) => w.updates.push((rw.key.clone(), rw.value.clone(), v)),
            }
        }
        for bw in &ns.blind_writes {
            w.upserts.push((bw.key.clone(), bw.value.clone()));
        }
        if ns.ns_id == META_NAMESPACE {
            for rw in ns.read_writes.iter().filter(|rw| rw.version.is_none()) {
                // Structural checks guarantee the key is a valid namespace id.
                set.new_namespaces
                    .push(String::from_utf8_lossy(&rw.key).into_owned());
            }
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
