//! PostgreSQL administration for the development network and the bench suites: naming a
//! database next to the one a `--db` URL names, and creating or dropping databases. Every
//! statement runs on the server's maintenance database `postgres`, which every cluster
//! has, so a URL may name a database that does not exist yet.

use crate::{Error, Result};

/// A `--db` URL taken apart: `<server>/<name>[?<query>]`.
struct DbUrl<'a> {
    server: &'a str,
    name: &'a str,
    query: Option<&'a str>,
}

impl<'a> DbUrl<'a> {
    fn parse(url: &'a str) -> Result<DbUrl<'a>> {
        let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
        let (server, name) = base
            .rsplit_once('/')
            .filter(|(s, n)| s.contains("://") && !n.is_empty())
            .ok_or_else(|| Error::Database {
                what: format!("--db {url:?}"),
                reason: "names no database".into(),
            })?;
        Ok(DbUrl { server, name, query })
    }

    /// The URL of database `name` on the same server, with the same query string.
    fn with_name(&self, name: &str) -> String {
        match self.query {
            Some(q) => format!("{}/{name}?{q}", self.server),
            None => format!("{}/{name}", self.server),
        }
    }
}

/// A database name that may be quoted into SQL: letters, digits and `_` only.
fn checked_name(name: &str) -> Result<&str> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::Database {
            what: format!("database name {name:?}"),
            reason: "only letters, digits and _ are supported".into(),
        });
    }
    Ok(name)
}

/// The URL and name of the database `<NAME><suffix>` on the server of `url`, which names
/// database NAME (the query string kept).
pub fn sibling_database(url: &str, suffix: &str) -> Result<(String, String)> {
    let parsed = DbUrl::parse(url)?;
    let sibling = format!("{}{suffix}", parsed.name);
    checked_name(&sibling)?;
    Ok((parsed.with_name(&sibling), sibling))
}

/// Runs `statement` on the maintenance database of the server of `url`.
async fn admin(url: &str, statement: &str) -> std::result::Result<(), sqlx::Error> {
    use sqlx::Connection;
    let parsed = DbUrl::parse(url).map_err(|e| sqlx::Error::Configuration(Box::new(e)))?;
    let mut conn = sqlx::PgConnection::connect(&parsed.with_name("postgres")).await?;
    sqlx::query(sqlx::AssertSqlSafe(statement.to_string()))
        .execute(&mut conn)
        .await?;
    Ok(())
}

fn on_runtime<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(h) => h.block_on(f),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Database {
                what: "a runtime for database administration".into(),
                reason: e.to_string(),
            })?
            .block_on(f),
    }
}

/// Creates the database `url` names when the server has none of that name.
pub fn ensure_database(url: &str) -> Result<()> {
    let name = checked_name(DbUrl::parse(url)?.name)?.to_string();
    on_runtime(async {
        match admin(url, &format!("CREATE DATABASE \"{name}\"")).await {
            Ok(()) => Ok(()),
            // 42P04: duplicate_database.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => Ok(()),
            Err(e) => Err(Error::Database {
                what: format!("creating database {name} on the server of {url}"),
                reason: e.to_string(),
            }),
        }
    })
}

/// Drops the database `url` names (when it exists) and creates it empty.
pub fn recreate_database(url: &str) -> Result<()> {
    drop_database(url)?;
    ensure_database(url)
}

/// Drops the database `url` names, when it exists (its connections are closed).
pub fn drop_database(url: &str) -> Result<()> {
    let name = checked_name(DbUrl::parse(url)?.name)?.to_string();
    on_runtime(async {
        admin(url, &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
            .await
            .map_err(|e| Error::Database {
                what: format!("dropping database {name}"),
                reason: e.to_string(),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used)]
    fn siblings_keep_the_server_and_query_and_refuse_unquotable_names() {
        let (url, name) = sibling_database("postgres://u@h:5/fabrx?sslmode=disable", "_party2").unwrap();
        assert_eq!(url, "postgres://u@h:5/fabrx_party2?sslmode=disable");
        assert_eq!(name, "fabrx_party2");
        assert!(sibling_database("postgres://u@h:5/", "_x").is_err());
        assert!(sibling_database("postgres://u@h:5/a-b", "_x").is_err());
        assert_eq!(
            DbUrl::parse("postgres://h/db").unwrap().with_name("postgres"),
            "postgres://h/postgres"
        );
    }
}
