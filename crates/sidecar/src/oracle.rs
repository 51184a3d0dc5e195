//! A serial oracle and a random workload, for checking the committer pipeline (tests,
//! the recovery check, load generation): the oracle applies txs one by one in block order
//! against a plain map, with the same rules as the pipeline, and nothing else.

use crate::blockfile::BlockFile;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use types::check::{PayloadDecoder, check_tx};
use types::{META_NAMESPACE, Status, Tx, TxId};

/// Committed state: (namespace, key) → (value, version).
pub type Rows = BTreeMap<(String, Vec<u8>), (Vec<u8>, u64)>;

fn signer(seed: &str, scheme: &str) -> Value {
    json!({"scheme": scheme, "seed": seed})
}

/// A random block file in the `committer apply` format (deterministic per seed): block 0
/// creates namespaces `alpha` (ed25519) and `beta` (ecdsa-p256); each later block has 1–9
/// txs over keys `k0`–`k5` with random read versions (high conflict), blind writes,
/// forged signatures, reused ids, read-only (malformed) namespaces and policy changes of
/// `alpha` between two signers.
pub fn workload(seed: u64, blocks: usize) -> String {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let admin = signer("admin", "ed25519");
    let mut lines = vec![json!({"block": 0, "txs": [
        {"id": "c-alpha", "namespaces": [{"ns": "_meta", "read_writes": [{"key": "alpha", "value": {"policy": signer("a0", "ed25519")}}], "signer": admin}]},
        {"id": "c-beta", "namespaces": [{"ns": "_meta", "read_writes": [{"key": "beta", "value": {"policy": signer("b", "ecdsa-p256")}}], "signer": admin}]},
    ]})];
    let mut ids: Vec<String> = Vec::new();
    for b in 1..blocks {
        let mut txs = Vec::new();
        for i in 0..rng.gen_range(1..10) {
            let id = if !ids.is_empty() && rng.gen_bool(0.05) {
                ids[rng.gen_range(0..ids.len())].clone()
            } else {
                format!("t{b}-{i}")
            };
            ids.push(id.clone());
            if rng.gen_bool(0.07) {
                // A policy change of alpha, to a key the writers may or may not use.
                let to = format!("a{}", rng.gen_range(0..2));
                let version = rng.gen_range(0..3);
                txs.push(json!({"id": id, "namespaces": [{"ns": "_meta", "read_writes": [
                    {"key": "alpha", "version": version, "value": {"policy": signer(&to, "ed25519")}}], "signer": admin}]}));
                continue;
            }
            let mut spaces = Vec::new();
            for (ns, scheme) in [("alpha", "ed25519"), ("beta", "ecdsa-p256")] {
                if !(rng.gen_bool(0.6) || spaces.is_empty() && ns == "beta") {
                    continue;
                }
                let mut keys: Vec<String> = (0..6).map(|k| format!("k{k}")).collect();
                let mut reads = Vec::new();
                let mut rws = Vec::new();
                let mut blind = Vec::new();
                for _ in 0..rng.gen_range(0..3) {
                    let key = keys.swap_remove(rng.gen_range(0..keys.len()));
                    let mut r = json!({"key": key});
                    if rng.gen_bool(0.7) {
                        r["version"] = json!(rng.gen_range(0..3));
                    }
                    if rng.gen_bool(0.5) {
                        r["value"] = json!(format!("{b}.{i}"));
                        rws.push(r);
                    } else {
                        reads.push(r);
                    }
                }
                if rng.gen_bool(0.6) || rws.is_empty() {
                    let key = keys.swap_remove(rng.gen_range(0..keys.len()));
                    blind.push(json!({"key": key, "value": format!("{b}.{i}")}));
                }
                if rng.gen_bool(0.03) {
                    blind.clear();
                    rws.clear(); // read-only: malformed (110)
                }
                let seed = match ns {
                    "alpha" => format!("a{}", rng.gen_range(0..2)),
                    _ if rng.gen_bool(0.1) => "mallory".into(),
                    _ => "b".into(),
                };
                spaces.push(json!({"ns": ns, "version": rng.gen_range(0..2), "reads": reads,
                    "read_writes": rws, "blind_writes": blind, "signer": signer(&seed, scheme)}));
            }
            txs.push(json!({"id": id, "namespaces": spaces}));
        }
        lines.push(json!({"block": b, "txs": txs}));
    }
    lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n")
}

/// The serial oracle: applies txs one at a time in block order (FX §3.5 and §3.6) against
/// a plain map, and returns every tx's status by block and the final state.
pub fn serial(file: &BlockFile) -> (Vec<Vec<Status>>, Rows) {
    let dec = wire::ProstDecoder {
        key_ok: |p| sigverifier::parse_policy_key(p).is_some(),
    };
    let mut policies = sigverifier::Policies::new();
    // The file's meta policy parsed when the file was read.
    let _ = policies.set(META_NAMESPACE, &file.meta_policy);
    let mut rows = Rows::new();
    let mut stored: HashMap<TxId, ()> = HashMap::new();
    let mut out = Vec::new();
    for block in &file.blocks {
        let mut statuses = Vec::new();
        for (id, tx) in &block.txs {
            let status = decide(id, tx, &dec, &policies, &stored, &rows);
            if status == Status::Committed {
                apply(tx, &mut rows);
                policies.apply_committed_meta(tx, |v| dec.decode_policy(v));
            }
            if status.is_stored() {
                stored.insert(id.clone(), ());
            }
            statuses.push(status);
        }
        out.push(statuses);
    }
    (out, rows)
}

/// The status of one tx given everything before it.
pub fn decide(
    id: &TxId,
    tx: &Tx,
    dec: &dyn PayloadDecoder,
    policies: &sigverifier::Policies,
    stored: &HashMap<TxId, ()>,
    rows: &Rows,
) -> Status {
    if let Err(s) = check_tx(id, tx, dec) {
        return if stored.contains_key(id) && s.is_stored() {
            Status::RejectedDuplicateTxId
        } else {
            s
        };
    }
    if stored.contains_key(id) {
        return Status::RejectedDuplicateTxId;
    }
    if let Err(s) = policies.verify_tx(id, tx) {
        return s;
    }
    let version = |ns: &str, k: &[u8]| rows.get(&(ns.to_string(), k.to_vec())).map(|r| r.1);
    for n in &tx.namespaces {
        let meta_ok =
            n.ns_id == META_NAMESPACE || version(META_NAMESPACE, n.ns_id.as_bytes()) == Some(n.ns_version);
        let reads_ok = n
            .reads_only
            .iter()
            .all(|r| version(&n.ns_id, &r.key) == r.version)
            && n.read_writes
                .iter()
                .all(|r| version(&n.ns_id, &r.key) == r.version);
        if !meta_ok || !reads_ok {
            return Status::AbortedMvccConflict;
        }
    }
    Status::Committed
}

/// Applies a committed tx's writes to the state.
pub fn apply(tx: &Tx, rows: &mut Rows) {
    for n in &tx.namespaces {
        for rw in &n.read_writes {
            rows.insert(
                (n.ns_id.clone(), rw.key.clone()),
                (rw.value.clone(), rw.version.map_or(0, |v| v + 1)),
            );
        }
        for w in &n.blind_writes {
            let next = rows.get(&(n.ns_id.clone(), w.key.clone())).map_or(0, |r| r.1 + 1);
            rows.insert((n.ns_id.clone(), w.key.clone()), (w.value.clone(), next));
        }
    }
}
