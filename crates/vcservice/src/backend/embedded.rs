//! Embedded backend on RocksDB: the default when no database URL is given, so a local
//! network needs nothing installed.
//!
//! Layout (one column family, prefixed keys):
//! - `s` ‖ tx id → `u32be(status) ‖ height(12 bytes)`
//! - `d` ‖ ns id ‖ `0x00` ‖ key → `u64be(version) ‖ value`
//! - `m` ‖ name → metadata (`last_committed_block`: u64be)
//!
//! A commit checks its conditions and applies one `WriteBatch` under a mutex, with a
//! synced write, so a committed batch survives a process kill or power loss and a
//! conflicting concurrent commit (e.g. the same batch resubmitted twice at once) sees
//! the first one's rows. Blocking RocksDB calls run on `spawn_blocking`.

use super::Backend;
use crate::model::{CommitResult, CommitSet, ReadSet, Row, StatusMap, VersionMap};
use crate::{Error, Result};
use rocksdb::{DB, Direction, IteratorMode, Options, WriteBatch, WriteOptions};
use std::path::Path;
use std::sync::{Arc, Mutex};
use types::check::is_valid_namespace_id;
use types::{Height, META_NAMESPACE, Status, TxId, TxOutcome};

const LAST_COMMITTED: &[u8] = b"mlast_committed_block";

/// The embedded RocksDB backend.
#[derive(Clone)]
pub struct EmbeddedBackend {
    inner: Arc<Inner>,
}

struct Inner {
    db: DB,
    /// Serialises check-and-write of commits.
    commit_lock: Mutex<()>,
    sync: bool,
}

fn status_key(id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + id.len());
    k.push(b's');
    k.extend_from_slice(id.as_bytes());
    k
}

fn data_prefix(ns: &str) -> Result<Vec<u8>> {
    if !is_valid_namespace_id(ns) {
        return Err(Error::InvalidNamespace { ns: ns.to_string() });
    }
    let mut k = Vec::with_capacity(2 + ns.len());
    k.push(b'd');
    k.extend_from_slice(ns.as_bytes());
    k.push(0);
    Ok(k)
}

fn data_key(ns: &str, key: &[u8]) -> Result<Vec<u8>> {
    let mut k = data_prefix(ns)?;
    k.extend_from_slice(key);
    Ok(k)
}

fn decode_versioned(v: &[u8]) -> Result<(u64, &[u8])> {
    if v.len() < 8 {
        return Err(Error::Corrupt {
            what: "row",
            detail: format!("{} bytes", v.len()),
        });
    }
    let mut ver = [0u8; 8];
    ver.copy_from_slice(&v[..8]);
    Ok((u64::from_be_bytes(ver), &v[8..]))
}

fn encode_versioned(version: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + value.len());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(value);
    out
}

fn decode_status(v: &[u8]) -> Result<(Status, Height)> {
    let bad = || Error::Corrupt {
        what: "status",
        detail: format!("{} bytes", v.len()),
    };
    if v.len() != 4 + Height::ENCODED_LEN {
        return Err(bad());
    }
    let mut code = [0u8; 4];
    code.copy_from_slice(&v[..4]);
    let status = Status::from_code(u32::from_be_bytes(code)).map_err(|_| bad())?;
    let height = Height::from_bytes(&v[4..]).map_err(|_| bad())?;
    Ok((status, height))
}

fn encode_status(status: Status, height: Height) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&status.code().to_be_bytes());
    out.extend_from_slice(&height.to_bytes());
    out
}

/// Whether the embedded store makes each commit durable before answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// Every commit is an fsync'ed write: a committed batch survives a crash or power loss.
    #[default]
    SyncEachCommit,
    /// No fsync (tests, throwaway benchmarks): a power loss may lose recent commits.
    NoSync,
}

impl EmbeddedBackend {
    /// Opens (creating if needed) the store at `path`. [`Durability::SyncEachCommit`]
    /// makes every commit an fsync'ed write (services); tests may choose
    /// [`Durability::NoSync`].
    pub fn open(path: &Path, durability: Durability) -> Result<EmbeddedBackend> {
        let sync = durability == Durability::SyncEachCommit;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.increase_parallelism(2);
        let db = DB::open(&opts, path)?;
        Ok(EmbeddedBackend {
            inner: Arc::new(Inner {
                db,
                commit_lock: Mutex::new(()),
                sync,
            }),
        })
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| Error::Task {
                detail: e.to_string(),
            })?
    }
}

impl Inner {
    fn version(&self, ns: &str, key: &[u8]) -> Result<Option<u64>> {
        match self.db.get_pinned(data_key(ns, key)?)? {
            None => Ok(None),
            Some(v) => Ok(Some(decode_versioned(&v)?.0)),
        }
    }

    /// Checks every condition of `set`; fills `batch` when all hold.
    fn stage(&self, set: &CommitSet, batch: &mut WriteBatch) -> Result<bool> {
        for TxOutcome { id, status, height } in &set.statuses {
            let k = status_key(id.as_str());
            if self.db.get_pinned(&k)?.is_some() {
                return Ok(false);
            }
            batch.put(k, encode_status(*status, *height));
        }
        for (ns, w) in &set.writes {
            for (k, v) in &w.inserts {
                if self.version(ns, k)?.is_some() {
                    return Ok(false);
                }
                batch.put(data_key(ns, k)?, encode_versioned(0, v));
            }
            for (k, v, ver) in &w.updates {
                if self.version(ns, k)? != Some(*ver) {
                    return Ok(false);
                }
                batch.put(data_key(ns, k)?, encode_versioned(ver + 1, v));
            }
            for (k, v) in &w.upserts {
                let next = self.version(ns, k)?.map_or(0, |cur| cur + 1);
                batch.put(data_key(ns, k)?, encode_versioned(next, v));
            }
        }
        Ok(true)
    }
}

#[async_trait::async_trait]
impl Backend for EmbeddedBackend {
    async fn init_schema(&self) -> Result<()> {
        Ok(())
    }

    async fn statuses(&self, ids: &[TxId]) -> Result<StatusMap> {
        let ids = ids.to_vec();
        self.blocking(move |inner| {
            let keys: Vec<Vec<u8>> = ids.iter().map(|id| status_key(id.as_str())).collect();
            let mut out = StatusMap::new();
            for (id, v) in ids.into_iter().zip(inner.db.multi_get(keys)) {
                if let Some(v) = v? {
                    out.insert(id, decode_status(&v)?);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn versions(&self, reads: &ReadSet) -> Result<VersionMap> {
        let reads = reads.clone();
        self.blocking(move |inner| {
            let mut names = Vec::new();
            let mut keys = Vec::new();
            for (ns, ks) in &reads {
                for k in ks {
                    keys.push(data_key(ns, k)?);
                    names.push((ns.clone(), k.clone()));
                }
            }
            let mut out = VersionMap::new();
            for (name, v) in names.into_iter().zip(inner.db.multi_get(keys)) {
                if let Some(v) = v? {
                    out.insert(name, decode_versioned(&v)?.0);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn commit(&self, set: &CommitSet) -> Result<CommitResult> {
        let set = set.clone();
        self.blocking(move |inner| {
            let _guard = inner.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
            let mut batch = WriteBatch::default();
            if !inner.stage(&set, &mut batch)? {
                return Ok(CommitResult::Conflict);
            }
            let mut wo = WriteOptions::default();
            wo.set_sync(inner.sync);
            inner.db.write_opt(batch, &wo)?;
            Ok(CommitResult::Applied)
        })
        .await
    }

    async fn last_committed_block(&self) -> Result<Option<u64>> {
        self.blocking(|inner| match inner.db.get(LAST_COMMITTED)? {
            None => Ok(None),
            Some(v) => Ok(Some(decode_versioned(&v)?.0)),
        })
        .await
    }

    async fn set_last_committed_block(&self, block: u64) -> Result<()> {
        self.blocking(move |inner| {
            let _guard = inner.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
            let cur = match inner.db.get(LAST_COMMITTED)? {
                None => None,
                Some(v) => Some(decode_versioned(&v)?.0),
            };
            if cur.is_none_or(|c| c < block) {
                let mut wo = WriteOptions::default();
                wo.set_sync(inner.sync);
                inner
                    .db
                    .put_opt(LAST_COMMITTED, encode_versioned(block, &[]), &wo)?;
            }
            Ok(())
        })
        .await
    }

    async fn namespaces(&self) -> Result<Vec<String>> {
        let mut out = vec![META_NAMESPACE.to_string()];
        out.extend(
            self.scan(META_NAMESPACE)
                .await?
                .into_iter()
                .map(|r| String::from_utf8_lossy(&r.key).into_owned()),
        );
        Ok(out)
    }

    async fn scan(&self, ns: &str) -> Result<Vec<Row>> {
        let prefix = data_prefix(ns)?;
        self.blocking(move |inner| {
            let mut out = Vec::new();
            for item in inner.db.iterator(IteratorMode::From(&prefix, Direction::Forward)) {
                let (k, v) = item?;
                if !k.starts_with(&prefix) {
                    break;
                }
                let (version, value) = decode_versioned(&v)?;
                out.push(Row {
                    key: k[prefix.len()..].to_vec(),
                    value: value.to_vec(),
                    version,
                });
            }
            Ok(out)
        })
        .await
    }
}
