//! Shared fixtures of the vcservice tests: backends, tx builders and a serial oracle.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use types::{
    Endorsement, Height, NamespacePolicy, PolicyScheme, Read, ReadWrite, Status, Tx, TxId, TxNamespace, Write,
};
use vcservice::{
    Backend, Durability, EmbeddedBackend, Engine, EngineConfig, PgBackend, PgOptions, TxOutcome, VcTx,
};

/// A backend under test and what keeps it alive.
pub struct Harness {
    pub backend: Arc<dyn Backend>,
    pub engine: Engine,
    /// A second, independent backend instance on the same database (PostgreSQL) or the
    /// same handle (embedded: RocksDB allows one opener per directory).
    pub twin: Engine,
    _dir: Option<tempfile::TempDir>,
}

fn engine(b: Arc<dyn Backend>) -> Engine {
    Engine::new(
        b,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    )
}

pub async fn postgres() -> Harness {
    let url = testkit::pg::cluster().fresh_database("vc").await;
    let b: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url.clone())).unwrap());
    b.init_schema().await.unwrap();
    b.init_schema().await.unwrap(); // idempotent
    let twin: Arc<dyn Backend> = Arc::new(PgBackend::connect(&PgOptions::new(url)).unwrap());
    Harness {
        engine: engine(b.clone()),
        twin: engine(twin),
        backend: b,
        _dir: None,
    }
}

pub async fn embedded() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let b: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::NoSync).unwrap());
    b.init_schema().await.unwrap();
    Harness {
        engine: engine(b.clone()),
        twin: engine(b.clone()),
        backend: b,
        _dir: Some(dir),
    }
}

pub fn policy_value() -> Vec<u8> {
    wire::encode_policy(&NamespacePolicy {
        scheme: PolicyScheme::Ed25519,
        public_key: vec![7; 32],
    })
}

/// Builder of one namespace's read-write set.
#[derive(Clone, Default)]
pub struct Ns(pub TxNamespace);

pub fn ns(id: &str, version: u64) -> Ns {
    Ns(TxNamespace {
        ns_id: id.into(),
        ns_version: version,
        ..Default::default()
    })
}

impl Ns {
    pub fn read(mut self, key: &str, version: Option<u64>) -> Ns {
        self.0.reads_only.push(Read {
            key: key.into(),
            version,
        });
        self
    }
    pub fn rw(mut self, key: &str, version: Option<u64>, value: &str) -> Ns {
        self.0.read_writes.push(ReadWrite {
            key: key.into(),
            version,
            value: value.into(),
        });
        self
    }
    pub fn rw_bytes(mut self, key: &str, version: Option<u64>, value: Vec<u8>) -> Ns {
        self.0.read_writes.push(ReadWrite {
            key: key.into(),
            version,
            value,
        });
        self
    }
    pub fn blind_bytes(mut self, key: &str, value: Vec<u8>) -> Ns {
        self.0.blind_writes.push(Write {
            key: key.into(),
            value,
        });
        self
    }
    pub fn blind(mut self, key: &str, value: &str) -> Ns {
        self.0.blind_writes.push(Write {
            key: key.into(),
            value: value.into(),
        });
        self
    }
}

pub fn tx(id: &str, block: u64, index: u32, namespaces: Vec<Ns>) -> VcTx {
    let endorsements = namespaces
        .iter()
        .map(|_| {
            vec![Endorsement {
                signature: vec![1; 64],
                ..Default::default()
            }]
        })
        .collect();
    VcTx {
        id: TxId(id.into()),
        height: Height::new(block, index),
        tx: Arc::new(Tx {
            namespaces: namespaces.into_iter().map(|n| n.0).collect(),
            endorsements,
            metadata: vec![],
        }),
        prelim: None,
    }
}

/// `_meta` tx creating namespace `name` (version 0) or updating it from `from`.
pub fn meta(id: &str, block: u64, index: u32, name: &str, from: Option<u64>) -> VcTx {
    tx(
        id,
        block,
        index,
        vec![ns("_meta", 0).rw_bytes(name, from, policy_value())],
    )
}

pub fn statuses(out: &[TxOutcome]) -> Vec<(String, Status)> {
    out.iter().map(|o| (o.id.0.clone(), o.status)).collect()
}

/// (key, value, version) rows of a namespace, keys and values as strings.
pub async fn state(b: &Arc<dyn Backend>, ns: &str) -> Vec<(String, String, u64)> {
    b.scan(ns)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            (
                String::from_utf8_lossy(&r.key).into(),
                String::from_utf8_lossy(&r.value).into(),
                r.version,
            )
        })
        .collect()
}

/// The serial oracle: applies txs one at a time in order against a plain map (FX §3.5).
#[derive(Default)]
pub struct Oracle {
    pub rows: BTreeMap<(String, Vec<u8>), (Vec<u8>, u64)>,
    pub stored: HashMap<String, (Status, Height)>,
}

impl Oracle {
    pub fn apply(&mut self, vtx: &VcTx) -> Status {
        if let Some(&(s, h)) = self.stored.get(&vtx.id.0) {
            return if h == vtx.height {
                s
            } else {
                Status::RejectedDuplicateTxId
            };
        }
        let version = |rows: &BTreeMap<_, (Vec<u8>, u64)>, ns: &str, k: &[u8]| {
            rows.get(&(ns.to_string(), k.to_vec()))
                .map(|r: &(Vec<u8>, u64)| r.1)
        };
        let mut valid = true;
        for n in &vtx.tx.namespaces {
            if n.ns_id != "_meta" && version(&self.rows, "_meta", n.ns_id.as_bytes()) != Some(n.ns_version) {
                valid = false;
            }
            for r in &n.reads_only {
                valid &= version(&self.rows, &n.ns_id, &r.key) == r.version;
            }
            for rw in &n.read_writes {
                valid &= version(&self.rows, &n.ns_id, &rw.key) == rw.version;
            }
        }
        let status = if valid {
            Status::Committed
        } else {
            Status::AbortedMvccConflict
        };
        if valid {
            for n in &vtx.tx.namespaces {
                for rw in &n.read_writes {
                    let v = rw.version.map_or(0, |v| v + 1);
                    self.rows
                        .insert((n.ns_id.clone(), rw.key.clone()), (rw.value.clone(), v));
                }
                for w in &n.blind_writes {
                    let v = version(&self.rows, &n.ns_id, &w.key).map_or(0, |v| v + 1);
                    self.rows
                        .insert((n.ns_id.clone(), w.key.clone()), (w.value.clone(), v));
                }
            }
        }
        self.stored.insert(vtx.id.0.clone(), (status, vtx.height));
        status
    }
}
