//! The owner index and the snapshot reads of the PostgreSQL backend.
//!
//! Every namespace table has a stored generated column `owner`: the owner an owned value
//! names (exactly `types::owned::owner_of`, in SQL), NULL for any other value, and a
//! partial index `o_<ns>` on `(owner, key) WHERE owner IS NOT NULL`. PostgreSQL computes
//! the column in the statement that writes the row, so the index moves atomically with
//! the rows, whatever statement writes them. Tables of an older schema get the column and
//! the index in `init_schema` (`ADD COLUMN IF NOT EXISTS`, one transaction per table).
//!
//! A read is one statement (one snapshot under READ COMMITTED): the rows, the byte-budget
//! cut (window sums over the rows in key order) and the last committed block together.

use super::PgBackend;
use crate::model::{OwnedPage, Row, Snapshot};
use crate::{Error, Result};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, Postgres, Row as _};
use types::check::is_valid_namespace_id;
use types::owned::{OWNED_MAGIC, OWNER_LEN};

/// The SQL expression of the owner of column `value`: `types::owned::owner_of`.
pub(super) fn owner_expr() -> String {
    let magic: String = OWNED_MAGIC.iter().map(|b| format!("{b:02x}")).collect();
    let magic_len = OWNED_MAGIC.len();
    format!(
        "CASE WHEN length(value) >= {min} AND substring(value from 1 for {magic_len}) = '\\x{magic}'::bytea \
         THEN substring(value from {start} for {OWNER_LEN}) END",
        min = magic_len + OWNER_LEN,
        start = magic_len + 1,
    )
}

/// The column definition of `owner` in a namespace table.
pub(super) fn owner_column() -> String {
    format!("owner BYTEA GENERATED ALWAYS AS ({}) STORED", owner_expr())
}

/// The owner index of the namespace table `ns_<ns>`. Named `o_<ns>` (at most 62
/// characters, never a table's name).
fn owner_index_sql(ns: &str) -> String {
    format!("CREATE INDEX IF NOT EXISTS o_{ns} ON ns_{ns} (owner, key) WHERE owner IS NOT NULL")
}

/// The first part of every read statement: the last committed block (part 0).
const LAST_COMMITTED_PART: &str = "SELECT 0 AS part, NULL::BYTEA AS key, NULL::BYTEA AS value, value AS version, \
     0::INT8 AS fetched FROM vc_metadata WHERE name = 'last_committed_block'";

/// Rows of `source` (a subquery of `key, value, version`) in key order, cut at the byte
/// budget `$budget` (the first row always kept), as part 1 after the last committed block.
fn read_statement(source: &str, budget: usize) -> String {
    format!(
        "{LAST_COMMITTED_PART} UNION ALL SELECT 1, key, value, version, fetched FROM (SELECT key, value, version, \
         count(*) OVER () AS fetched, row_number() OVER w AS n, sum(length(key) + length(value)) OVER w AS total \
         FROM ({source}) s WINDOW w AS (ORDER BY key)) r WHERE n = 1 OR total <= ${budget} ORDER BY part, key"
    )
}

fn sql_count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Decodes a read statement's result: the rows, how many rows the budget cut was applied
/// to, and the last committed block.
fn decode_read(rows: Vec<PgRow>) -> Result<(Vec<Row>, usize, Option<u64>)> {
    let mut out = Vec::with_capacity(rows.len());
    let mut fetched = 0usize;
    let mut last = None;
    for r in rows {
        let part: i32 = r.try_get(0)?;
        let version: i64 = r.try_get(3)?;
        let version = u64::try_from(version).map_err(|_| Error::Corrupt {
            what: "version",
            detail: format!("negative version {version}"),
        })?;
        if part == 0 {
            last = Some(version);
            continue;
        }
        let f: i64 = r.try_get(4)?;
        fetched = usize::try_from(f).unwrap_or(usize::MAX);
        let key: Option<Vec<u8>> = r.try_get(1)?;
        let value: Option<Vec<u8>> = r.try_get(2)?;
        out.push(Row {
            key: key.unwrap_or_default(),
            value: value.unwrap_or_default(),
            version,
        });
    }
    Ok((out, fetched, last))
}

impl PgBackend {
    /// Creates the table and owner index of a namespace created by a commit, inside the
    /// commit's transaction. A table that exists already is left alone (its `_meta` row
    /// exists, so this commit will not apply), so no lock is taken on a table in use.
    pub(super) async fn create_namespace_table(
        &self,
        tx: &mut sqlx::Transaction<'_, Postgres>,
        ns: &str,
    ) -> Result<()> {
        let t = super::table(ns)?;
        let absent: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NULL")
            .bind(&t)
            .fetch_one(&mut **tx)
            .await?;
        if absent {
            sqlx::query(AssertSqlSafe(self.create_table_sql(&t)))
                .execute(&mut **tx)
                .await?;
            sqlx::query(AssertSqlSafe(owner_index_sql(ns)))
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Gives every namespace table without an `owner` column (an older schema) the column
    /// and the owner index, one transaction per table. Idempotent.
    pub(super) async fn upgrade_owner_index(&self) -> Result<()> {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT t.table_name::TEXT FROM information_schema.tables t WHERE t.table_schema = current_schema() \
             AND t.table_type = 'BASE TABLE' AND t.table_name LIKE 'ns\\_%' AND NOT EXISTS (SELECT 1 FROM \
             information_schema.columns c WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name \
             AND c.column_name = 'owner')",
        )
        .fetch_all(self.pool())
        .await?;
        for name in names {
            // Only fabrx's namespace tables; the name is a safe identifier once checked.
            let Some(ns) = name.strip_prefix("ns_").filter(|ns| is_valid_namespace_id(ns)) else {
                continue;
            };
            let mut tx = self.pool().begin().await?;
            sqlx::query(AssertSqlSafe(format!(
                "ALTER TABLE ns_{ns} ADD COLUMN IF NOT EXISTS {}",
                owner_column()
            )))
            .execute(&mut *tx)
            .await?;
            sqlx::query(AssertSqlSafe(owner_index_sql(ns)))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Ok(())
    }

    /// [`crate::Backend::read_rows`].
    pub(super) async fn read_rows_at_snapshot(
        &self,
        ns: &str,
        keys: &[Vec<u8>],
        max_bytes: usize,
    ) -> Result<Snapshot> {
        let t = super::table(ns)?;
        if self.existing(&[ns]).await?.is_empty() {
            return self.empty_snapshot().await;
        }
        let source = format!("SELECT key, value, version FROM {t} WHERE key = ANY($1)");
        let rows = sqlx::query(AssertSqlSafe(read_statement(&source, 2)))
            .bind(keys)
            .bind(sql_count(max_bytes))
            .fetch_all(self.pool())
            .await?;
        let (rows, fetched, last_committed_block) = decode_read(rows)?;
        Ok(Snapshot {
            more: fetched > rows.len(),
            rows,
            last_committed_block,
        })
    }

    /// [`crate::Backend::owned_rows`].
    pub(super) async fn owned_rows_at_snapshot(
        &self,
        ns: &str,
        owner: &[u8],
        page: &OwnedPage,
    ) -> Result<Snapshot> {
        let t = super::table(ns)?;
        if owner.len() != OWNER_LEN || self.existing(&[ns]).await?.is_empty() {
            return self.empty_snapshot().await;
        }
        let source = format!(
            "SELECT key, value, version FROM {t} WHERE owner = $1 AND key > $2 ORDER BY key LIMIT $3"
        );
        let rows = sqlx::query(AssertSqlSafe(read_statement(&source, 4)))
            .bind(owner)
            .bind(&page.after_key)
            .bind(sql_count(page.limit.saturating_add(1)))
            .bind(sql_count(page.max_bytes))
            .fetch_all(self.pool())
            .await?;
        let (mut rows, fetched, last_committed_block) = decode_read(rows)?;
        rows.truncate(page.limit);
        Ok(Snapshot {
            more: fetched > rows.len(),
            rows,
            last_committed_block,
        })
    }

    /// No rows (a namespace without a table), with the last committed block.
    async fn empty_snapshot(&self) -> Result<Snapshot> {
        Ok(Snapshot {
            last_committed_block: crate::Backend::last_committed_block(self).await?,
            ..Snapshot::default()
        })
    }
}
