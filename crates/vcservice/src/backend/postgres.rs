//! PostgreSQL backend (YugabyteDB YSQL compatible: PostgreSQL 11 dialect only).
//!
//! Schema: `tx_status(tx_id, status, height)`, `vc_metadata(name, value)` and one table
//! `ns_<id>(key, value, version)` per namespace, created in the same database transaction
//! that commits the namespace's `_meta` row. Set-based SQL ([`SqlMode::SetBased`]): every
//! phase is one statement over arrays (`unnest`, `= ANY`), and a commit is one statement
//! of data-modifying CTEs. A status row or an inserted key that exists fails the statement
//! with a unique violation (plain `INSERT`s: one index descent per row, where `ON CONFLICT
//! DO NOTHING` takes two), and an update whose version moved shows in the `RETURNING`
//! counts; either way the transaction is rolled back and the commit reports a conflict. [`SqlMode::PerKey`] issues one statement per key and
//! exists only to measure the difference.
//!
//! Each namespace table also carries the owner index (`pg_owner.rs`): a stored generated
//! column `owner` and a partial index on `(owner, key)`.

use super::Backend;
use crate::model::{
    CommitResult, CommitSet, NsWrites, OwnedPage, ReadSet, Row, Snapshot, StatusMap, VersionMap,
};
use crate::{Error, Result};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Postgres, Row as _};
use std::collections::HashSet;
use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use types::check::is_valid_namespace_id;
use types::{Height, META_NAMESPACE, Status, TxId, TxOutcome};

#[path = "pg_owner.rs"]
mod owner;

/// How statements are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqlMode {
    /// One statement per phase per batch (arrays and `unnest`).
    #[default]
    SetBased,
    /// One statement per key or status row (baseline for the benchmark).
    PerKey,
}

/// Connection options.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// One or more endpoints (`postgres://…`) of the same database; batches are spread
    /// round robin over them.
    pub urls: Vec<String>,
    /// Connections per endpoint.
    pub pool_size: std::num::NonZeroU32,
    /// Statement style.
    pub mode: SqlMode,
    /// YugabyteDB only: pre-split each table into this many tablets.
    pub tablets: Option<u32>,
}

impl PgOptions {
    /// Options for one endpoint with defaults.
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            urls: vec![url.into()],
            pool_size: std::num::NonZeroU32::new(8).unwrap_or(std::num::NonZeroU32::MIN),
            mode: SqlMode::SetBased,
            tablets: None,
        }
    }
}

/// Planner settings of every connection (startup options). Every statement of this backend
/// finds its rows by key (statuses by id, versions and updates by key, reads by key or
/// owner), for which an index scan is always right. Without these, a namespace table that
/// grows faster than autovacuum analyzes it (a fresh table under load: its statistics
/// say it is small for the first minute) gets its updates planned as a hash join over a
/// sequential scan of the whole table, and its version reads as sequential scans: 30 ms
/// instead of 4 for a block's 500 updates at 40,000 rows, and growing with the table
/// (docs/benchmarks.md, "What the vcservice asks of PostgreSQL"). Each setting only
/// makes a plan very expensive, so a statement without an index to use still runs.
const PLANNER_OPTIONS: [(&str, &str); 3] = [
    ("enable_seqscan", "off"),
    ("enable_hashjoin", "off"),
    ("enable_mergejoin", "off"),
];

/// The PostgreSQL backend.
pub struct PgBackend {
    pools: Vec<PgPool>,
    next: AtomicUsize,
    mode: SqlMode,
    tablets: Option<u32>,
    /// Namespaces known to have a `_meta` row (and so a table). Only grows.
    known: RwLock<HashSet<String>>,
}

/// The table of a namespace. Namespace ids are `^[a-z0-9_]{1,60}$`, so the name is a
/// safe SQL identifier; anything else is refused before it reaches SQL.
fn table(ns: &str) -> Result<String> {
    if !is_valid_namespace_id(ns) {
        return Err(Error::InvalidNamespace { ns: ns.to_string() });
    }
    Ok(format!("ns_{ns}"))
}

fn version_of(v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::Corrupt {
        what: "version",
        detail: format!("negative version {v}"),
    })
}

fn sql_version(v: u64) -> i64 {
    // Versions count commits of one key; 2^63 is out of reach.
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl PgBackend {
    /// Creates the committer's tables when missing (idempotent).
    async fn create_schema(&self) -> Result<()> {
        let mut conn = self.pool().acquire().await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS tx_status (tx_id TEXT PRIMARY KEY, status INT4 NOT NULL, \
             height BYTEA NOT NULL)",
        )
        .execute(&mut *conn)
        .await?;
        sqlx::query("CREATE TABLE IF NOT EXISTS vc_metadata (name TEXT PRIMARY KEY, value INT8 NOT NULL)")
            .execute(&mut *conn)
            .await?;
        sqlx::query(AssertSqlSafe(self.create_table_sql(&table(META_NAMESPACE)?)))
            .execute(&mut *conn)
            .await?;
        drop(conn);
        self.upgrade_owner_index().await
    }

    /// Connects to every endpoint (lazily: connections open on first use).
    pub fn connect(opts: &PgOptions) -> Result<PgBackend> {
        if opts.urls.is_empty() {
            return Err(Error::Config {
                detail: "no database URL given".into(),
            });
        }
        let pools = opts
            .urls
            .iter()
            .map(|url| {
                let connect = url.parse::<PgConnectOptions>()?.options(PLANNER_OPTIONS);
                Ok(PgPoolOptions::new()
                    .max_connections(opts.pool_size.get())
                    .connect_lazy_with(connect))
            })
            .collect::<Result<Vec<_>>>()?;
        let known = RwLock::new(HashSet::from([META_NAMESPACE.to_string()]));
        Ok(PgBackend {
            pools,
            next: AtomicUsize::new(0),
            mode: opts.mode,
            tablets: opts.tablets,
            known,
        })
    }

    fn pool(&self) -> &PgPool {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.pools.len();
        &self.pools[i]
    }

    fn create_table_sql(&self, name: &str) -> String {
        let (pk, split) = match self.tablets {
            Some(n) => ("PRIMARY KEY (key HASH)", format!(" SPLIT INTO {n} TABLETS")),
            None => ("PRIMARY KEY (key)", String::new()),
        };
        format!(
            "CREATE TABLE IF NOT EXISTS {name} (key BYTEA NOT NULL, value BYTEA NOT NULL, \
             version BIGINT NOT NULL, {}, {pk}){split}",
            owner::owner_column()
        )
    }

    /// The subset of `wanted` that exists (has a `_meta` row).
    async fn existing(&self, wanted: &[&str]) -> Result<Vec<String>> {
        let unknown: Vec<String> = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            wanted
                .iter()
                .filter(|ns| !known.contains(**ns))
                .map(|ns| ns.to_string())
                .collect()
        };
        if !unknown.is_empty() {
            let keys: Vec<Vec<u8>> = unknown.iter().map(|n| n.as_bytes().to_vec()).collect();
            let found: Vec<Vec<u8>> = sqlx::query_scalar("SELECT key FROM ns__meta WHERE key = ANY($1)")
                .bind(&keys)
                .fetch_all(self.pool())
                .await?;
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            known.extend(
                found
                    .into_iter()
                    .map(|k| String::from_utf8_lossy(&k).into_owned()),
            );
        }
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        Ok(wanted
            .iter()
            .filter(|ns| known.contains(**ns))
            .map(|ns| ns.to_string())
            .collect())
    }

    async fn versions_set_based(&self, reads: &ReadSet, namespaces: &[String]) -> Result<VersionMap> {
        let mut parts = Vec::with_capacity(namespaces.len());
        for (i, ns) in namespaces.iter().enumerate() {
            parts.push(format!(
                "SELECT {i}::INT4 AS n, key, version FROM {} WHERE key = ANY(${})",
                table(ns)?,
                i + 1
            ));
        }
        let sql = parts.join(" UNION ALL ");
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for ns in namespaces {
            q = q.bind(&reads[ns]);
        }
        let rows = q.fetch_all(self.pool()).await?;
        let mut out = VersionMap::with_capacity(rows.len());
        for r in rows {
            let n: i32 = r.try_get(0)?;
            let ns = usize::try_from(n)
                .ok()
                .and_then(|i| namespaces.get(i))
                .ok_or_else(|| Error::Corrupt {
                    what: "version query result",
                    detail: format!("namespace index {n}"),
                })?;
            out.insert((ns.clone(), r.try_get(1)?), version_of(r.try_get(2)?)?);
        }
        Ok(out)
    }

    async fn versions_per_key(&self, reads: &ReadSet, namespaces: &[String]) -> Result<VersionMap> {
        let mut out = VersionMap::new();
        let mut conn = self.pool().acquire().await?;
        for ns in namespaces {
            let sql = format!("SELECT version FROM {} WHERE key = $1", table(ns)?);
            for key in &reads[ns] {
                let v: Option<i64> = sqlx::query_scalar(AssertSqlSafe(sql.clone()))
                    .bind(key)
                    .fetch_optional(&mut *conn)
                    .await?;
                if let Some(v) = v {
                    out.insert((ns.clone(), key.clone()), version_of(v)?);
                }
            }
        }
        Ok(out)
    }

    /// One statement of data-modifying CTEs; returns whether every condition held.
    async fn commit_set_based(
        &self,
        tx: &mut sqlx::Transaction<'_, Postgres>,
        set: &CommitSet,
    ) -> Result<bool> {
        let (sql, expected) = set_based_statement(set)?;
        let mut q = sqlx::query_scalar::<_, Vec<i64>>(AssertSqlSafe(sql))
            .bind(
                set.statuses
                    .iter()
                    .map(|s| s.id.as_str().to_string())
                    .collect::<Vec<_>>(),
            )
            .bind(
                set.statuses
                    .iter()
                    .map(|s| s.status.code() as i32)
                    .collect::<Vec<_>>(),
            )
            .bind(
                set.statuses
                    .iter()
                    .map(|s| s.height.to_bytes().to_vec())
                    .collect::<Vec<_>>(),
            );
        for w in set.writes.values() {
            if !w.inserts.is_empty() {
                q = q.bind(w.inserts.iter().map(|x| x.0.clone()).collect::<Vec<_>>());
                q = q.bind(w.inserts.iter().map(|x| x.1.clone()).collect::<Vec<_>>());
            }
            if !w.updates.is_empty() {
                q = q.bind(w.updates.iter().map(|x| x.0.clone()).collect::<Vec<_>>());
                q = q.bind(w.updates.iter().map(|x| x.1.clone()).collect::<Vec<_>>());
                q = q.bind(w.updates.iter().map(|x| sql_version(x.2)).collect::<Vec<_>>());
            }
            if !w.upserts.is_empty() {
                q = q.bind(w.upserts.iter().map(|x| x.0.clone()).collect::<Vec<_>>());
                q = q.bind(w.upserts.iter().map(|x| x.1.clone()).collect::<Vec<_>>());
            }
        }
        let got = q.fetch_one(&mut **tx).await?;
        Ok(got == expected)
    }

    async fn commit_per_key(
        &self,
        tx: &mut sqlx::Transaction<'_, Postgres>,
        set: &CommitSet,
    ) -> Result<bool> {
        for TxOutcome { id, status, height } in &set.statuses {
            let r = sqlx::query(
                "INSERT INTO tx_status (tx_id, status, height) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(id.as_str())
            .bind(status.code() as i32)
            .bind(height.to_bytes().to_vec())
            .execute(&mut **tx)
            .await?;
            if r.rows_affected() != 1 {
                return Ok(false);
            }
        }
        for (ns, w) in &set.writes {
            if !self.write_ns_per_key(tx, &table(ns)?, w).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn write_ns_per_key(
        &self,
        tx: &mut sqlx::Transaction<'_, Postgres>,
        t: &str,
        w: &NsWrites,
    ) -> Result<bool> {
        let insert =
            format!("INSERT INTO {t} (key, value, version) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING");
        let update = format!("UPDATE {t} SET value = $2, version = $3 + 1 WHERE key = $1 AND version = $3");
        let upsert = format!(
            "INSERT INTO {t} AS t (key, value, version) VALUES ($1, $2, 0) ON CONFLICT (key) DO UPDATE \
             SET value = EXCLUDED.value, version = t.version + 1"
        );
        for (k, v) in &w.inserts {
            let r = sqlx::query(AssertSqlSafe(insert.clone()))
                .bind(k)
                .bind(v)
                .execute(&mut **tx)
                .await?;
            if r.rows_affected() != 1 {
                return Ok(false);
            }
        }
        for (k, v, ver) in &w.updates {
            let r = sqlx::query(AssertSqlSafe(update.clone()))
                .bind(k)
                .bind(v)
                .bind(sql_version(*ver))
                .execute(&mut **tx)
                .await?;
            if r.rows_affected() != 1 {
                return Ok(false);
            }
        }
        for (k, v) in &w.upserts {
            sqlx::query(AssertSqlSafe(upsert.clone()))
                .bind(k)
                .bind(v)
                .execute(&mut **tx)
                .await?;
        }
        Ok(true)
    }
}

#[async_trait::async_trait]
impl Backend for PgBackend {
    async fn init_schema(&self) -> Result<()> {
        // `CREATE TABLE IF NOT EXISTS` is not atomic in PostgreSQL: two vcservices starting
        // together against one database can both try to create a table, and the loser
        // fails with a unique violation on the catalog (23505), "relation exists" (42P07)
        // or "type exists" (42710). The statements are idempotent, so the loser tries
        // again and then finds the tables.
        let mut attempt = 0u32;
        loop {
            match self.create_schema().await {
                Err(Error::Postgres { source }) if attempt < 5 && is_concurrent_ddl(&source) => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50 * u64::from(attempt))).await;
                }
                other => return other,
            }
        }
    }

    async fn statuses(&self, ids: &[TxId]) -> Result<StatusMap> {
        let rows: Vec<(String, i32, Vec<u8>)> = match self.mode {
            SqlMode::SetBased => {
                let ids: Vec<&str> = ids.iter().map(TxId::as_str).collect();
                sqlx::query_as("SELECT tx_id, status, height FROM tx_status WHERE tx_id = ANY($1)")
                    .bind(&ids)
                    .fetch_all(self.pool())
                    .await?
            }
            SqlMode::PerKey => {
                let mut conn = self.pool().acquire().await?;
                let mut rows = Vec::new();
                for id in ids {
                    let r = sqlx::query_as("SELECT tx_id, status, height FROM tx_status WHERE tx_id = $1")
                        .bind(id.as_str())
                        .fetch_optional(&mut *conn)
                        .await?;
                    rows.extend(r);
                }
                rows
            }
        };
        let mut out = StatusMap::with_capacity(rows.len());
        for (id, code, height) in rows {
            let status = u32::try_from(code)
                .ok()
                .and_then(|c| Status::from_code(c).ok())
                .ok_or_else(|| Error::Corrupt {
                    what: "status",
                    detail: format!("code {code}"),
                })?;
            let height = Height::from_bytes(&height).map_err(|e| Error::Corrupt {
                what: "height",
                detail: e.to_string(),
            })?;
            out.insert(TxId(id), (status, height));
        }
        Ok(out)
    }

    async fn versions(&self, reads: &ReadSet) -> Result<VersionMap> {
        let wanted: Vec<&str> = reads.keys().map(String::as_str).collect();
        let namespaces = self.existing(&wanted).await?;
        if namespaces.is_empty() {
            return Ok(VersionMap::new());
        }
        match self.mode {
            SqlMode::SetBased => self.versions_set_based(reads, &namespaces).await,
            SqlMode::PerKey => self.versions_per_key(reads, &namespaces).await,
        }
    }

    async fn commit(&self, set: &CommitSet) -> Result<CommitResult> {
        let mut tx = self.pool().begin().await?;
        for ns in &set.new_namespaces {
            self.create_namespace_table(&mut tx, ns).await?;
        }
        let ok = match self.mode {
            SqlMode::SetBased => match self.commit_set_based(&mut tx, set).await {
                Ok(ok) => ok,
                // A status row or an inserted key exists: a failed condition, not an error.
                Err(Error::Postgres { source }) if is_unique_violation(&source) => false,
                Err(e) => return Err(e),
            },
            SqlMode::PerKey => self.commit_per_key(&mut tx, set).await?,
        };
        if !ok {
            tx.rollback().await?;
            return Ok(CommitResult::Conflict);
        }
        tx.commit().await?;
        Ok(CommitResult::Applied)
    }

    async fn last_committed_block(&self) -> Result<Option<u64>> {
        let v: Option<i64> =
            sqlx::query_scalar("SELECT value FROM vc_metadata WHERE name = 'last_committed_block'")
                .fetch_optional(self.pool())
                .await?;
        v.map(version_of).transpose()
    }

    async fn set_last_committed_block(&self, block: u64) -> Result<()> {
        sqlx::query(
            "INSERT INTO vc_metadata (name, value) VALUES ('last_committed_block', $1) ON CONFLICT (name) \
             DO UPDATE SET value = GREATEST(vc_metadata.value, EXCLUDED.value)",
        )
        .bind(sql_version(block))
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn namespaces(&self) -> Result<Vec<String>> {
        let keys: Vec<Vec<u8>> = sqlx::query_scalar("SELECT key FROM ns__meta ORDER BY key")
            .fetch_all(self.pool())
            .await?;
        let mut out = vec![META_NAMESPACE.to_string()];
        out.extend(keys.into_iter().map(|k| String::from_utf8_lossy(&k).into_owned()));
        Ok(out)
    }

    async fn scan(&self, ns: &str) -> Result<Vec<Row>> {
        if self.existing(&[ns]).await?.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!("SELECT key, value, version FROM {} ORDER BY key", table(ns)?);
        let rows: Vec<(Vec<u8>, Vec<u8>, i64)> =
            sqlx::query_as(AssertSqlSafe(sql)).fetch_all(self.pool()).await?;
        rows.into_iter()
            .map(|(key, value, v)| {
                Ok(Row {
                    key,
                    value,
                    version: version_of(v)?,
                })
            })
            .collect()
    }

    async fn read_rows(&self, ns: &str, keys: &[Vec<u8>], max_bytes: usize) -> Result<Snapshot> {
        self.read_rows_at_snapshot(ns, keys, max_bytes).await
    }

    async fn owned_rows(&self, ns: &str, owner: &[u8], page: &OwnedPage) -> Result<Snapshot> {
        self.owned_rows_at_snapshot(ns, owner, page).await
    }
}

/// The set-based commit statement of [`PgBackend`]'s set-based mode: one data-modifying
/// CTE per status batch, insert, update and upsert group, and the row count each must
/// affect for the commit to hold. Parameters are bound in the same order by the caller.
fn set_based_statement(set: &CommitSet) -> Result<(String, Vec<i64>)> {
    let mut ctes = Vec::new();
    let mut expected: Vec<i64> = Vec::new();
    let mut p = 0usize;
    let mut next = || {
        p += 1;
        p
    };
    let (a, b, c) = (next(), next(), next());
    ctes.push(format!(
        "c0 AS (INSERT INTO tx_status (tx_id, status, height) SELECT * FROM \
         unnest(${a}::TEXT[], ${b}::INT4[], ${c}::BYTEA[]) RETURNING 1)"
    ));
    expected.push(set.statuses.len() as i64);
    for (ns, w) in &set.writes {
        let t = table(ns)?;
        if !w.inserts.is_empty() {
            let (k, v) = (next(), next());
            ctes.push(format!(
                "c{} AS (INSERT INTO {t} (key, value, version) SELECT k, v, 0 FROM \
                 unnest(${k}::BYTEA[], ${v}::BYTEA[]) AS u(k, v) RETURNING 1)",
                ctes.len()
            ));
            expected.push(w.inserts.len() as i64);
        }
        if !w.updates.is_empty() {
            let (k, v, ver) = (next(), next(), next());
            ctes.push(format!(
                "c{} AS (UPDATE {t} AS t SET value = u.v, version = u.ver + 1 FROM \
                 unnest(${k}::BYTEA[], ${v}::BYTEA[], ${ver}::INT8[]) AS u(k, v, ver) \
                 WHERE t.key = u.k AND t.version = u.ver RETURNING 1)",
                ctes.len()
            ));
            expected.push(w.updates.len() as i64);
        }
        if !w.upserts.is_empty() {
            let (k, v) = (next(), next());
            ctes.push(format!(
                "c{} AS (INSERT INTO {t} AS t (key, value, version) SELECT k, v, 0 FROM \
                 unnest(${k}::BYTEA[], ${v}::BYTEA[]) AS u(k, v) ON CONFLICT (key) DO UPDATE \
                 SET value = EXCLUDED.value, version = t.version + 1 RETURNING 1)",
                ctes.len()
            ));
            expected.push(w.upserts.len() as i64);
        }
    }
    let counts: Vec<String> = (0..ctes.len())
        .map(|i| format!("(SELECT count(*) FROM c{i})"))
        .collect();
    let sql = format!(
        "WITH {} SELECT ARRAY[{}]::INT8[]",
        ctes.join(", "),
        counts.join(", ")
    );
    Ok((sql, expected))
}

/// Whether a PostgreSQL error is a unique violation (23505): in a commit statement, a status
/// row or an inserted key that exists.
fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c.as_ref() == "23505")
}

/// Whether a PostgreSQL error is the loser's side of two sessions creating the same
/// table at once: a unique violation on the catalog (23505), the relation (42P07) or its
/// row type (42710) exists by now.
fn is_concurrent_ddl(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| matches!(c.as_ref(), "23505" | "42P07" | "42710"))
}
