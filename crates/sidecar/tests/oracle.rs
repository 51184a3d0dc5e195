//! The committer pipeline against a serial oracle: random workloads with high conflict
//! rates, multi-namespace txs, blind writes, bad signatures, duplicate ids, malformed txs
//! and `_meta` policy changes give exactly the statuses and final state of applying the
//! txs one by one in block order.

use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use sidecar::blockfile::{self, BlockFile};
use sidecar::pipeline::{Pipeline, PipelineConfig};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use types::check::{PayloadDecoder, check_tx};
use types::{META_NAMESPACE, Status, Tx, TxId};
use vcservice::{Backend, EmbeddedBackend, Engine, EngineConfig, PgBackend, PgOptions};

/// Committed state: (namespace, key) → (value, version).
type Rows = BTreeMap<(String, Vec<u8>), (Vec<u8>, u64)>;

fn signer(seed: &str, scheme: &str) -> Value {
    json!({"scheme": scheme, "seed": seed})
}

/// A random block file: namespaces alpha (ed25519) and beta (ecdsa-p256), then blocks.
fn workload(seed: u64, blocks: usize) -> String {
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

/// Applies txs one at a time in block order (FX §3.5 and §3.6).
fn oracle(file: &BlockFile) -> (Vec<Vec<Status>>, Rows) {
    let dec = wire::ProstDecoder {
        key_ok: |p| sigverifier::parse_policy_key(p).is_some(),
    };
    let mut policies = sigverifier::Policies::new();
    policies.set(META_NAMESPACE, &file.meta_policy).unwrap();
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

fn decide(
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

fn apply(tx: &Tx, rows: &mut Rows) {
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

async fn run_pipeline(
    backend: Arc<dyn Backend>,
    file: &BlockFile,
    workers: usize,
    max_batch: usize,
) -> Vec<Vec<Status>> {
    let engine = Engine::new(backend, EngineConfig::default(), None);
    let mut config = PipelineConfig {
        workers,
        max_batch,
        ..PipelineConfig::default()
    };
    config.graph.max_pending = 16; // exercise back-pressure
    let mut pipeline = Pipeline::new(engine, &file.meta_policy, config).await.unwrap();
    let mut got = Vec::new();
    pipeline
        .run(file.blocks.clone(), |b| {
            assert_eq!(b.number as usize, got.len(), "blocks emitted in order");
            got.push(b.statuses.into_iter().map(|s| s.1).collect());
        })
        .await
        .unwrap();
    got
}

async fn state(backend: &Arc<dyn Backend>) -> Rows {
    let mut out = BTreeMap::new();
    for ns in ["_meta", "alpha", "beta"] {
        for r in backend.scan(ns).await.unwrap() {
            out.insert((ns.to_string(), r.key), (r.value, r.version));
        }
    }
    out
}

async fn check(backend: Arc<dyn Backend>, seed: u64) {
    let file = blockfile::parse(&workload(seed, 25)).unwrap();
    let (want, want_rows) = oracle(&file);
    let got = run_pipeline(backend.clone(), &file, 4, 5).await;
    assert_eq!(got, want, "seed {seed}: statuses differ from the serial oracle");
    assert_eq!(state(&backend).await, want_rows, "seed {seed}: state differs");
    let all: Vec<Status> = want.iter().flatten().copied().collect();
    for s in [
        Status::Committed,
        Status::AbortedMvccConflict,
        Status::AbortedSignatureInvalid,
    ] {
        assert!(all.contains(&s), "seed {seed}: workload never produced {s}");
    }
    // Re-running the same blocks changes nothing and answers the same.
    let again = run_pipeline(backend.clone(), &file, 2, 50).await;
    assert_eq!(again, want, "seed {seed}: re-run differs");
    assert_eq!(state(&backend).await, want_rows);
    assert_eq!(backend.last_committed_block().await.unwrap(), Some(24));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_matches_serial_oracle() {
    for seed in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        check(Arc::new(EmbeddedBackend::open(dir.path(), false).unwrap()), seed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_matches_serial_oracle() {
    for seed in 100..103 {
        let url = testkit::pg::cluster().fresh_database("pipe").await;
        let backend: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url)).unwrap());
        backend.init_schema().await.unwrap();
        check(backend, seed).await;
    }
}

#[tokio::test]
async fn example_file_statuses() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/blocks.jsonl"
    ))
    .unwrap();
    let file = blockfile::parse(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), false).unwrap());
    let got = run_pipeline(backend, &file, 4, 3).await;
    assert_eq!(got, oracle(&file).0);
    let codes: Vec<u32> = got.iter().flatten().map(|s| s.code()).collect();
    assert_eq!(
        codes,
        vec![
            1, 1, 1, 1, 1, 3, 2, 1, 102, 106, 107, 108, 111, 112, 110, 113, 109, 114, 100
        ]
    );
}
