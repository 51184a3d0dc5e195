//! The serial oracle and a random workload, for checking the committer pipeline (tests,
//! the recovery check, `fabrx loadgen --verify-serial`). The workload is text in the
//! block-file format of `fabrx committer apply` (crate `committer`). The oracle applies txs one at a
//! time, in block order, against a plain map, with the committer's rules (FX §3.5, §3.6):
//!
//! 1. structural checks (`MALFORMED_*`, 101, 102); an id that was already stored turns a
//!    storable outcome into `REJECTED_DUPLICATE_TX_ID`;
//! 2. an id already stored: `REJECTED_DUPLICATE_TX_ID`;
//! 3. every namespace endorsement under the policy in force: else
//!    `ABORTED_SIGNATURE_INVALID`;
//! 4. every read (and the implicit read of `(_meta, ns)` at `ns_version`) matches the
//!    committed version: else `ABORTED_MVCC_CONFLICT`;
//! 5. `COMMITTED`: read-writes write `version + 1` (0 for a new key), blind writes bump;
//!    committed `_meta` writes change the policies for the txs after it.
//!
//! Signatures of a block without `_meta` txs are checked in parallel up front (the
//! policies cannot change inside such a block); the decisions stay serial.

use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use types::check::{PayloadDecoder, check_tx};
use types::{Block, META_NAMESPACE, NamespacePolicy, Status, Tx, TxId};

/// Result alias of the oracle: only a meta policy whose key does not parse fails.
pub type Result<T> = std::result::Result<T, policy::Error>;

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

/// The serial oracle over whole blocks (e.g. of a block file): every tx's status by block,
/// and the final state. `_meta` txs are endorsed under `meta_policy`.
pub fn serial(meta_policy: &NamespacePolicy, blocks: &[Block]) -> Result<(Vec<Vec<Status>>, Rows)> {
    let mut oracle = SerialOracle::new(meta_policy)?;
    let statuses = blocks.iter().map(|b| oracle.apply_block(b)).collect();
    Ok((statuses, oracle.rows))
}

/// Applies blocks one tx at a time.
pub struct SerialOracle {
    decoder: wire::ProstDecoder,
    policies: policy::Policies,
    rows: Rows,
    stored: HashSet<TxId>,
}

impl SerialOracle {
    /// An empty state whose `_meta` txs are endorsed under `meta_policy`.
    pub fn new(meta_policy: &NamespacePolicy) -> Result<SerialOracle> {
        let mut policies = policy::Policies::new();
        policies.set(META_NAMESPACE, meta_policy)?;
        Ok(SerialOracle {
            decoder: wire::ProstDecoder {
                key_ok: |p| policy::parse_policy_key(p).is_some(),
            },
            policies,
            rows: Rows::new(),
            stored: HashSet::new(),
        })
    }

    /// The committed state.
    pub fn rows(&self) -> &Rows {
        &self.rows
    }

    /// Rows of one namespace: (key, value, version), ordered by key.
    pub fn rows_of(&self, ns: &str) -> Vec<(Vec<u8>, Vec<u8>, u64)> {
        self.rows
            .iter()
            .filter(|((n, _), _)| n == ns)
            .map(|((_, k), (v, ver))| (k.clone(), v.clone(), *ver))
            .collect()
    }

    /// Applies one block and returns the status of each tx, by index.
    pub fn apply_block(&mut self, block: &Block) -> Vec<Status> {
        let touches_meta = block
            .txs
            .iter()
            .any(|(_, tx)| tx.namespaces.iter().any(|n| n.ns_id == META_NAMESPACE));
        let verdicts: Option<Vec<bool>> = (!touches_meta).then(|| {
            block
                .txs
                .par_iter()
                .map(|(id, tx)| self.policies.verify_tx(id, tx).is_ok())
                .collect()
        });
        let mut out = Vec::with_capacity(block.txs.len());
        for (i, (id, tx)) in block.txs.iter().enumerate() {
            let signed = |o: &SerialOracle| match &verdicts {
                Some(v) => v[i],
                None => o.policies.verify_tx(id, tx).is_ok(),
            };
            let status = self.decide(id, tx, signed);
            if status == Status::Committed {
                self.apply(tx);
                let dec = &self.decoder;
                self.policies.apply_committed_meta(tx, |v| dec.decode_policy(v));
            }
            if status.is_stored() {
                self.stored.insert(id.clone());
            }
            out.push(status);
        }
        out
    }

    fn decide(&self, id: &TxId, tx: &Tx, signed: impl Fn(&SerialOracle) -> bool) -> Status {
        let duplicate = self.stored.contains(id);
        if let Err(s) = check_tx(id, tx, &self.decoder) {
            return if duplicate && s.is_stored() {
                Status::RejectedDuplicateTxId
            } else {
                s
            };
        }
        if duplicate {
            return Status::RejectedDuplicateTxId;
        }
        if !signed(self) {
            return Status::AbortedSignatureInvalid;
        }
        let version = |ns: &str, k: &[u8]| self.rows.get(&(ns.to_string(), k.to_vec())).map(|r| r.1);
        for n in &tx.namespaces {
            let meta_ok = n.ns_id == META_NAMESPACE
                || version(META_NAMESPACE, n.ns_id.as_bytes()) == Some(n.ns_version);
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

    fn apply(&mut self, tx: &Tx) {
        for n in &tx.namespaces {
            for rw in &n.read_writes {
                let next = rw.version.map_or(0, |v| v + 1);
                self.rows
                    .insert((n.ns_id.clone(), rw.key.clone()), (rw.value.clone(), next));
            }
            for w in &n.blind_writes {
                let slot = (n.ns_id.clone(), w.key.clone());
                let next = self.rows.get(&slot).map_or(0, |r| r.1 + 1);
                self.rows.insert(slot, (w.value.clone(), next));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use types::endorsement::namespace_signing_bytes;
    use types::{Endorsement, PolicyScheme, Read, ReadWrite, TxNamespace, Write};

    fn key(seed: &str) -> (crypto::SigningKey, NamespacePolicy) {
        let sk = crypto::derive_signing_key(crypto::Scheme::Ed25519, seed);
        let p = NamespacePolicy {
            scheme: PolicyScheme::Ed25519,
            public_key: sk.public_key().to_bytes(),
        };
        (sk, p)
    }

    fn tx(id: &str, ns: TxNamespace, sk: Option<&crypto::SigningKey>) -> (TxId, Arc<Tx>) {
        let id = TxId(id.into());
        let endorsements = match sk {
            Some(sk) => vec![vec![Endorsement {
                signature: crypto::sign_namespace_endorsement(sk, &namespace_signing_bytes(&id, &ns, &[]))
                    .into_bytes(),
                ..Default::default()
            }]],
            None => vec![vec![]],
        };
        let tx = Tx {
            namespaces: vec![ns],
            endorsements,
            metadata: vec![],
        };
        (id, Arc::new(tx))
    }

    fn ns(reads: Vec<Read>, rws: Vec<ReadWrite>, blind: Vec<Write>) -> TxNamespace {
        TxNamespace {
            ns_id: "coin".into(),
            ns_version: 0,
            reads_only: reads,
            read_writes: rws,
            blind_writes: blind,
        }
    }

    fn rwk(k: &str, v: Option<u64>) -> ReadWrite {
        ReadWrite {
            key: k.into(),
            version: v,
            value: b"x".to_vec(),
        }
    }

    #[test]
    #[allow(clippy::too_many_lines, reason = "one block of cases per rule")]
    fn statuses_follow_the_serial_rules() {
        let (admin, meta_policy) = key("admin");
        let (alice, alice_policy) = key("alice");
        let (mallory, _) = key("mallory");
        let create = TxNamespace {
            ns_id: META_NAMESPACE.into(),
            read_writes: vec![ReadWrite {
                key: b"coin".to_vec(),
                version: None,
                value: wire::encode_policy(&alice_policy),
            }],
            ..Default::default()
        };
        let mut o = SerialOracle::new(&meta_policy).unwrap();
        let b0 = Block::unordered(
            0,
            vec![
                // Before the namespace exists it has no policy: no signature verifies.
                tx("early", ns(vec![], vec![rwk("a", None)], vec![]), Some(&alice)),
                tx("create", create, Some(&admin)),
                tx(
                    "issue",
                    ns(vec![], vec![rwk("a", None), rwk("b", None)], vec![]),
                    Some(&alice),
                ),
            ],
        );
        assert_eq!(
            o.apply_block(&b0),
            vec![
                Status::AbortedSignatureInvalid,
                Status::Committed,
                Status::Committed
            ]
        );
        let b1 = Block::unordered(
            1,
            vec![
                tx("spend", ns(vec![], vec![rwk("a", Some(0))], vec![]), Some(&alice)),
                tx(
                    "double",
                    ns(vec![], vec![rwk("a", Some(0))], vec![]),
                    Some(&alice),
                ),
                tx(
                    "forged",
                    ns(vec![], vec![rwk("b", Some(0))], vec![]),
                    Some(&mallory),
                ),
                tx("unsigned", ns(vec![], vec![rwk("b", Some(0))], vec![]), None),
                tx("spend", ns(vec![], vec![rwk("b", Some(0))], vec![]), Some(&alice)),
                tx(
                    "ro",
                    ns(
                        vec![Read {
                            key: b"b".to_vec(),
                            version: Some(0),
                        }],
                        vec![],
                        vec![],
                    ),
                    Some(&alice),
                ),
                tx(
                    "blind",
                    ns(
                        vec![],
                        vec![],
                        vec![Write {
                            key: b"a".to_vec(),
                            value: b"y".to_vec(),
                        }],
                    ),
                    Some(&alice),
                ),
            ],
        );
        assert_eq!(
            o.apply_block(&b1),
            vec![
                Status::Committed,
                Status::AbortedMvccConflict,
                Status::AbortedSignatureInvalid,
                Status::MalformedMissingSignature,
                Status::RejectedDuplicateTxId,
                Status::MalformedNoWrites,
                Status::Committed,
            ]
        );
        assert_eq!(
            o.rows_of("coin"),
            vec![
                (b"a".to_vec(), b"y".to_vec(), 2),
                (b"b".to_vec(), b"x".to_vec(), 0)
            ]
        );
        assert_eq!(o.rows_of(META_NAMESPACE).len(), 1);
    }
}
