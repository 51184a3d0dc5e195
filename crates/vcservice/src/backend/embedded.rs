//! Embedded backend on RocksDB: the default when no database URL is given, so a local
//! network needs nothing installed.
//!
//! Layout (one column family, prefixed keys):
//! - `s` ‖ tx id → `u32be(status) ‖ height(12 bytes)`
//! - `d` ‖ ns id ‖ `0x00` ‖ key → `u64be(version) ‖ value`
//! - `o` ‖ ns id ‖ `0x00` ‖ owner (32 bytes) ‖ key → empty: the owner index, one entry per
//!   row whose value is owned (`types::owned::owner_of`)
//! - `m` ‖ name → metadata (`last_committed_block`: u64be; `owner_index_v1`: present once
//!   the owner index covers every row)
//!
//! The owner index changes in the same `WriteBatch` as the rows: a write removes the
//! entry of the value it replaces (read under the commit lock) and adds the new value's.
//! Reads ([`Backend::read_rows`], [`Backend::owned_rows`]) go through one RocksDB
//! snapshot, so rows, index and the last committed block are seen at one instant.
//!
//! A commit checks its conditions and applies one `WriteBatch` under a mutex, with a
//! synced write, so a committed batch survives a process kill or power loss and a
//! conflicting concurrent commit (e.g. the same batch resubmitted twice at once) sees
//! the first one's rows. Blocking RocksDB calls run on `spawn_blocking`.

use super::Backend;
use crate::model::{
    CommitResult, CommitSet, OwnedPage, PageCollector, ReadSet, Row, Snapshot, StatusMap, VersionMap,
    row_cost,
};
use crate::{Error, Result};
use rocksdb::{BlockBasedOptions, DB, Direction, IteratorMode, Options, WriteBatch, WriteOptions};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use types::check::is_valid_namespace_id;
use types::owned::{OWNER_LEN, owner_of};
use types::{Height, META_NAMESPACE, Status, TxId, TxOutcome};

const LAST_COMMITTED: &[u8] = b"mlast_committed_block";
/// Present once the owner index covers every row (written by `init_schema`).
const OWNER_INDEX_BUILT: &[u8] = b"mowner_index_v1";
/// Index entries written per batch while building the index of an older store.
const INDEX_BUILD_BATCH: usize = 10_000;

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

/// `o` ‖ ns ‖ 0x00 ‖ owner: the index entries of one owner's rows in `ns`.
fn owner_prefix(ns: &str, owner: &[u8]) -> Result<Vec<u8>> {
    if !is_valid_namespace_id(ns) {
        return Err(Error::InvalidNamespace { ns: ns.to_string() });
    }
    let mut k = Vec::with_capacity(2 + ns.len() + owner.len());
    k.push(b'o');
    k.extend_from_slice(ns.as_bytes());
    k.push(0);
    k.extend_from_slice(owner);
    Ok(k)
}

fn owner_key(ns: &str, owner: &[u8], key: &[u8]) -> Result<Vec<u8>> {
    let mut k = owner_prefix(ns, owner)?;
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
        // Most point reads miss: a new tx id's status (looked up when planning and again
        // under the commit lock), a created row's version. Bloom filters on the memtable
        // (whole keys) and on every table file answer those without searching.
        opts.set_memtable_prefix_bloom_ratio(0.1);
        opts.set_memtable_whole_key_filtering(true);
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        table.set_whole_key_filtering(true);
        opts.set_block_based_table_factory(&table);
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

/// A commit being staged: its write batch, and the owner of every row it wrote so far (a
/// later write of the same key in the same commit replaces that owner's index entry).
struct Staging {
    batch: WriteBatch,
    owners: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Staging {
    /// Writes row `key` of `ns` (its data key `dk`, [`data_key`]) at `version`, moving
    /// its owner index entry from the owner of the value it replaces (`old_owner`, as
    /// committed) to the new value's owner.
    fn put_row(
        &mut self,
        (ns, key, dk): (&str, &[u8], Vec<u8>),
        old_owner: Option<Vec<u8>>,
        version: u64,
        value: &[u8],
    ) -> Result<()> {
        let old = match self.owners.get(&dk) {
            Some(staged) => staged.clone(),
            None => old_owner,
        };
        let new = owner_of(value);
        if old.as_deref() != new {
            if let Some(o) = &old {
                self.batch.delete(owner_key(ns, o, key)?);
            }
            if let Some(n) = new {
                self.batch.put(owner_key(ns, n, key)?, b"");
            }
        }
        self.batch.put(&dk, encode_versioned(version, value));
        self.owners.insert(dk, new.map(<[u8]>::to_vec));
        Ok(())
    }
}

/// The version after `v`; a row at the largest version is corrupt, not a panic.
fn bump(v: u64) -> Result<u64> {
    v.checked_add(1).ok_or_else(|| Error::Corrupt {
        what: "row version",
        detail: format!("{v} has no successor"),
    })
}

impl Inner {
    /// Checks every condition of `set`; returns the batch to write when all hold.
    ///
    /// Every key it checks is read in one `multi_get` (one lookup setup for the whole
    /// set instead of one per key); like the key-by-key reads, they see only what is
    /// committed, never this set's own writes.
    fn stage(&self, set: &CommitSet) -> Result<Option<WriteBatch>> {
        let mut keys = Vec::with_capacity(set.statuses.len());
        for TxOutcome { id, .. } in &set.statuses {
            keys.push(status_key(id.as_str()));
        }
        for (ns, w) in &set.writes {
            for (k, _) in &w.inserts {
                keys.push(data_key(ns, k)?);
            }
            for (k, _, _) in &w.updates {
                keys.push(data_key(ns, k)?);
            }
            for (k, _) in &w.upserts {
                keys.push(data_key(ns, k)?);
            }
        }
        let values = self.db.multi_get(&keys);
        let mut read = keys.into_iter().zip(values);
        // The next key and its committed value, in the order the keys were listed.
        let mut next = move || -> Result<(Vec<u8>, Option<Vec<u8>>)> {
            match read.next() {
                Some((k, v)) => Ok((k, v?)),
                None => Err(Error::Corrupt {
                    what: "multi_get",
                    detail: "fewer values than keys".to_string(),
                }),
            }
        };
        let current = |v: Option<Vec<u8>>| -> Result<Option<(u64, Option<Vec<u8>>)>> {
            match v {
                None => Ok(None),
                Some(v) => {
                    let (version, value) = decode_versioned(&v)?;
                    Ok(Some((version, owner_of(value).map(<[u8]>::to_vec))))
                }
            }
        };
        let mut st = Staging {
            batch: WriteBatch::default(),
            owners: HashMap::new(),
        };
        for TxOutcome { status, height, .. } in &set.statuses {
            let (k, v) = next()?;
            if v.is_some() {
                return Ok(None);
            }
            st.batch.put(k, encode_status(*status, *height));
        }
        for (ns, w) in &set.writes {
            for (k, v) in &w.inserts {
                let (dk, found) = next()?;
                if found.is_some() {
                    return Ok(None);
                }
                st.put_row((ns, k, dk), None, 0, v)?;
            }
            for (k, v, ver) in &w.updates {
                let (dk, found) = next()?;
                match current(found)? {
                    Some((cur, owner)) if cur == *ver => st.put_row((ns, k, dk), owner, bump(cur)?, v)?,
                    _ => return Ok(None),
                }
            }
            for (k, v) in &w.upserts {
                let (dk, found) = next()?;
                let (next_version, owner) = match current(found)? {
                    None => (0, None),
                    Some((cur, owner)) => (bump(cur)?, owner),
                };
                st.put_row((ns, k, dk), owner, next_version, v)?;
            }
        }
        Ok(Some(st.batch))
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(self.sync);
        self.db.write_opt(batch, &wo)?;
        Ok(())
    }

    /// Adds the owner index entries of every row, for a store written before the index
    /// existed, then records that the index is complete. Idempotent; runs under the
    /// commit lock, so no commit interleaves.
    fn build_owner_index(&self) -> Result<()> {
        let _guard = self.commit_lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.db.get_pinned(OWNER_INDEX_BUILT)?.is_some() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        for item in self.db.iterator(IteratorMode::From(b"d", Direction::Forward)) {
            let (k, v) = item?;
            if !k.starts_with(b"d") {
                break;
            }
            let Some(sep) = k.iter().position(|&b| b == 0) else {
                return Err(Error::Corrupt {
                    what: "row key",
                    detail: format!("{} bytes without a namespace separator", k.len()),
                });
            };
            let ns = String::from_utf8_lossy(&k[1..sep]).into_owned();
            if let Some(owner) = owner_of(decode_versioned(&v)?.1) {
                batch.put(owner_key(&ns, owner, &k[sep + 1..])?, b"");
            }
            if batch.len() >= INDEX_BUILD_BATCH {
                self.write(std::mem::take(&mut batch))?;
            }
        }
        batch.put(OWNER_INDEX_BUILT, b"");
        self.write(batch)
    }
}

/// Reads through one RocksDB snapshot.
struct SnapshotReader<'a> {
    snap: rocksdb::Snapshot<'a>,
}

impl SnapshotReader<'_> {
    fn last_committed(&self) -> Result<Option<u64>> {
        match self.snap.get_pinned(LAST_COMMITTED)? {
            None => Ok(None),
            Some(v) => Ok(Some(decode_versioned(&v)?.0)),
        }
    }

    fn row(&self, ns: &str, key: &[u8]) -> Result<Option<Row>> {
        match self.snap.get_pinned(data_key(ns, key)?)? {
            None => Ok(None),
            Some(v) => {
                let (version, value) = decode_versioned(&v)?;
                Ok(Some(Row {
                    key: key.to_vec(),
                    value: value.to_vec(),
                    version,
                }))
            }
        }
    }

    fn rows(&self, ns: &str, mut keys: Vec<Vec<u8>>, max_bytes: usize) -> Result<Snapshot> {
        keys.sort();
        keys.dedup();
        let mut page = PageCollector::new(usize::MAX, max_bytes);
        let mut more = false;
        for key in keys {
            let Some(row) = self.row(ns, &key)? else { continue };
            if !page.fits(row_cost(&row.key, &row.value)) {
                more = true;
                break;
            }
            page.push(row);
        }
        Ok(Snapshot {
            rows: page.into_rows(),
            more,
            last_committed_block: self.last_committed()?,
        })
    }

    fn owned(&self, ns: &str, owner: &[u8], page: &OwnedPage) -> Result<Snapshot> {
        let prefix = owner_prefix(ns, owner)?;
        let mut start = prefix.clone();
        start.extend_from_slice(&page.after_key);
        let mut out = PageCollector::new(page.limit, page.max_bytes);
        let mut more = false;
        for item in self.snap.iterator(IteratorMode::From(&start, Direction::Forward)) {
            let (k, _) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            let key = &k[prefix.len()..];
            if key <= page.after_key.as_slice() {
                continue;
            }
            let row = self.row(ns, key)?.filter(|r| owner_of(&r.value) == Some(owner));
            let Some(row) = row else {
                return Err(Error::Corrupt {
                    what: "owner index",
                    detail: format!("entry for a key of {} bytes names no row of its owner", key.len()),
                });
            };
            if !out.fits(row_cost(&row.key, &row.value)) {
                more = true;
                break;
            }
            out.push(row);
        }
        Ok(Snapshot {
            rows: out.into_rows(),
            more,
            last_committed_block: self.last_committed()?,
        })
    }
}

#[async_trait::async_trait]
impl Backend for EmbeddedBackend {
    async fn init_schema(&self) -> Result<()> {
        self.blocking(Inner::build_owner_index).await
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
            let Some(batch) = inner.stage(&set)? else {
                return Ok(CommitResult::Conflict);
            };
            inner.write(batch)?;
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

    async fn read_rows(&self, ns: &str, keys: &[Vec<u8>], max_bytes: usize) -> Result<Snapshot> {
        data_prefix(ns)?;
        let (ns, keys) = (ns.to_string(), keys.to_vec());
        self.blocking(move |inner| {
            let reader = SnapshotReader {
                snap: inner.db.snapshot(),
            };
            reader.rows(&ns, keys, max_bytes)
        })
        .await
    }

    async fn owned_rows(&self, ns: &str, owner: &[u8], page: &OwnedPage) -> Result<Snapshot> {
        data_prefix(ns)?;
        let (ns, owner, page) = (ns.to_string(), owner.to_vec(), page.clone());
        self.blocking(move |inner| {
            let reader = SnapshotReader {
                snap: inner.db.snapshot(),
            };
            if owner.len() != OWNER_LEN {
                return Ok(Snapshot {
                    last_committed_block: reader.last_committed()?,
                    ..Snapshot::default()
                });
            }
            reader.owned(&ns, &owner, &page)
        })
        .await
    }
}
