//! Configuration of a vcservice process (`fabrx node vcservice --config FILE`, TOML).
//!
//! ```toml
//! listen = "127.0.0.1:7060"          # gRPC
//! metrics_listen = "127.0.0.1:9060"  # Prometheus /metrics (optional)
//! db = "embedded:./data/vc"          # or "postgres://user@host:5432/db"
//! extra_db_urls = []                 # more endpoints of the same database
//! pool_size = 16                     # connections per endpoint
//! # tablets = 8                      # YugabyteDB: pre-split tables (absent = off)
//! workers = 4                        # concurrent commit workers
//! queue = 16                         # bounded queue depth between stages
//! durability = "sync-each-commit"    # embedded: fsync every commit (or "no-sync")
//! ```

use crate::backend::Backend;
use crate::backend::embedded::{Durability, EmbeddedBackend};
use crate::backend::postgres::{PgBackend, PgOptions, SqlMode};
use crate::{Error, Result};
use serde::Deserialize;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::sync::Arc;

/// Where state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbTarget {
    /// RocksDB in a directory.
    Embedded(PathBuf),
    /// PostgreSQL / YugabyteDB endpoints of one database.
    Postgres(Vec<String>),
}

impl DbTarget {
    /// Parses `embedded:PATH`, `postgres://…` / `postgresql://…` (comma-separated for
    /// several endpoints).
    pub fn parse(s: &str) -> Result<DbTarget> {
        if let Some(path) = s.strip_prefix("embedded:") {
            if path.is_empty() {
                return Err(Error::Config {
                    detail: "embedded: needs a directory".into(),
                });
            }
            return Ok(DbTarget::Embedded(PathBuf::from(path)));
        }
        let urls: Vec<String> = s
            .split(',')
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty()
            || !urls
                .iter()
                .all(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
        {
            return Err(Error::Config {
                detail: format!("database {s:?}: expected embedded:DIR or postgres://… URLs"),
            });
        }
        Ok(DbTarget::Postgres(urls))
    }
}

/// A vcservice process's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct VcConfig {
    /// gRPC listen address.
    pub listen: String,
    /// Prometheus listen address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<String>,
    /// `embedded:DIR` or a PostgreSQL URL.
    pub db: String,
    /// More endpoints of the same database.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_db_urls: Vec<String>,
    /// Connections per endpoint.
    #[serde(default = "default_pool", skip_serializing_if = "is_default_pool")]
    pub pool_size: NonZeroU32,
    /// YugabyteDB tablets per table; absent: do not pre-split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tablets: Option<NonZeroU32>,
    /// Concurrent commit workers.
    #[serde(default = "default_workers", skip_serializing_if = "is_default_workers")]
    pub workers: NonZeroUsize,
    /// Depth of each bounded queue.
    #[serde(default = "default_queue", skip_serializing_if = "is_default_queue")]
    pub queue: NonZeroUsize,
    /// Embedded store: whether every commit is fsync'ed.
    #[serde(default, skip_serializing_if = "is_default_durability")]
    pub durability: Durability,
    /// Batches of all streams together in memory at once (decoded, queued or committing).
    #[serde(
        default = "default_max_in_flight",
        skip_serializing_if = "is_default_max_in_flight"
    )]
    pub max_in_flight: NonZeroUsize,
    /// Most client connections open at once.
    #[serde(
        default = "default_max_connections",
        skip_serializing_if = "is_default_max_connections"
    )]
    pub max_connections: NonZeroUsize,
    /// A connection without traffic for this many milliseconds is closed.
    #[serde(
        default = "default_idle_timeout_ms",
        skip_serializing_if = "is_default_idle_timeout_ms"
    )]
    pub idle_timeout_ms: std::num::NonZeroU64,
}

fn default_max_in_flight() -> NonZeroUsize {
    NonZeroUsize::new(8).unwrap_or(NonZeroUsize::MIN)
}
fn default_max_connections() -> NonZeroUsize {
    NonZeroUsize::new(wire::server::ServerLimits::default().max_connections).unwrap_or(NonZeroUsize::MIN)
}
fn default_idle_timeout_ms() -> std::num::NonZeroU64 {
    let ms = wire::server::ServerLimits::default().idle_timeout.as_millis();
    std::num::NonZeroU64::new(u64::try_from(ms).unwrap_or(u64::MAX)).unwrap_or(std::num::NonZeroU64::MIN)
}

fn default_pool() -> NonZeroU32 {
    NonZeroU32::new(16).unwrap_or(NonZeroU32::MIN)
}
fn default_workers() -> NonZeroUsize {
    NonZeroUsize::new(4).unwrap_or(NonZeroUsize::MIN)
}
fn default_queue() -> NonZeroUsize {
    NonZeroUsize::new(16).unwrap_or(NonZeroUsize::MIN)
}

// A field at its default is not written: a written file keeps following the defaults.
fn is_default_pool(v: &NonZeroU32) -> bool {
    *v == default_pool()
}
fn is_default_workers(v: &NonZeroUsize) -> bool {
    *v == default_workers()
}
fn is_default_queue(v: &NonZeroUsize) -> bool {
    *v == default_queue()
}
fn is_default_max_in_flight(v: &NonZeroUsize) -> bool {
    *v == default_max_in_flight()
}
fn is_default_max_connections(v: &NonZeroUsize) -> bool {
    *v == default_max_connections()
}
fn is_default_idle_timeout_ms(v: &std::num::NonZeroU64) -> bool {
    *v == default_idle_timeout_ms()
}
fn is_default_durability(d: &Durability) -> bool {
    *d == Durability::default()
}

/// How to open a backend besides its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendOptions {
    /// PostgreSQL: connections per endpoint.
    pub pool_size: NonZeroU32,
    /// YugabyteDB: tablets per table; none: do not pre-split.
    pub tablets: Option<NonZeroU32>,
    /// Embedded store: whether every commit is fsync'ed.
    pub durability: Durability,
}

impl Default for BackendOptions {
    fn default() -> Self {
        BackendOptions {
            pool_size: NonZeroU32::new(8).unwrap_or(NonZeroU32::MIN),
            tablets: None,
            durability: Durability::SyncEachCommit,
        }
    }
}

impl BackendOptions {
    /// The default options with `pool_size` connections per endpoint.
    pub fn with_pool(pool_size: NonZeroU32) -> BackendOptions {
        BackendOptions {
            pool_size,
            ..BackendOptions::default()
        }
    }
}

impl VcConfig {
    /// The connection-level limits of the server.
    pub fn server_limits(&self) -> wire::server::ServerLimits {
        wire::server::ServerLimits {
            max_connections: self.max_connections.get(),
            idle_timeout: std::time::Duration::from_millis(self.idle_timeout_ms.get()),
            ..wire::server::ServerLimits::default()
        }
    }

    /// A configuration serving on `listen` over database `db`, every other field at its
    /// default.
    pub fn new(listen: String, db: String) -> VcConfig {
        VcConfig {
            listen,
            metrics_listen: None,
            db,
            extra_db_urls: Vec::new(),
            pool_size: default_pool(),
            tablets: None,
            workers: default_workers(),
            queue: default_queue(),
            durability: Durability::default(),
            max_in_flight: default_max_in_flight(),
            max_connections: default_max_connections(),
            idle_timeout_ms: default_idle_timeout_ms(),
        }
    }

    /// The configuration as TOML text: the fields not at their defaults
    /// ([`VcConfig::from_toml`] reads it back the same).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| Error::Config {
            detail: e.to_string(),
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<VcConfig> {
        toml::from_str(text).map_err(|e| Error::Config {
            detail: e.to_string(),
        })
    }
}

/// Opens the backend a database string names (`embedded:DIR` or PostgreSQL URLs).
pub fn open_backend(db: &str, opts: &BackendOptions) -> Result<Arc<dyn Backend>> {
    Ok(match DbTarget::parse(db)? {
        DbTarget::Embedded(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| Error::Config {
                detail: format!("create {}: {e}", dir.display()),
            })?;
            Arc::new(EmbeddedBackend::open(&dir, opts.durability)?)
        }
        DbTarget::Postgres(urls) => Arc::new(PgBackend::connect(&PgOptions {
            urls,
            pool_size: opts.pool_size,
            mode: SqlMode::SetBased,
            tablets: opts.tablets.map(NonZeroU32::get),
        })?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        assert_eq!(
            DbTarget::parse("embedded:/tmp/x").unwrap(),
            DbTarget::Embedded("/tmp/x".into())
        );
        assert_eq!(
            DbTarget::parse("postgres://a/db, postgres://b/db").unwrap(),
            DbTarget::Postgres(vec!["postgres://a/db".into(), "postgres://b/db".into()])
        );
        assert!(DbTarget::parse("embedded:").is_err());
        assert!(DbTarget::parse("mysql://x").is_err());
        assert!(DbTarget::parse("").is_err());
    }

    #[test]
    fn parses_config_with_defaults() {
        let c = VcConfig::from_toml("listen = \"127.0.0.1:1\"\ndb = \"embedded:/tmp/v\"\n").unwrap();
        assert_eq!(
            (
                c.workers.get(),
                c.queue.get(),
                c.pool_size.get(),
                c.durability,
                c.tablets
            ),
            (4, 16, 16, Durability::SyncEachCommit, None)
        );
        assert!(VcConfig::from_toml("listen = \"x\"\ndb = \"y\"\nbogus = 1\n").is_err());
        // Named values, not "0 means none": zero is refused, absence means off.
        let c = VcConfig::from_toml("listen = \"x\"\ndb = \"y\"\ntablets = 8\ndurability = \"no-sync\"\n")
            .unwrap();
        assert_eq!(
            (c.tablets.map(|t| t.get()), c.durability),
            (Some(8), Durability::NoSync)
        );
        assert!(VcConfig::from_toml("listen = \"x\"\ndb = \"y\"\ntablets = 0\n").is_err());
        assert!(VcConfig::from_toml("listen = \"x\"\ndb = \"y\"\nworkers = 0\n").is_err());
    }

    #[test]
    fn a_written_config_reads_back_the_same() {
        let mut c = VcConfig::new("127.0.0.1:7".into(), "embedded:/tmp/v".into());
        assert_eq!(
            VcConfig::from_toml("listen = \"127.0.0.1:7\"\ndb = \"embedded:/tmp/v\"\n").unwrap(),
            c,
            "new() gives the file's defaults"
        );
        c.metrics_listen = Some("127.0.0.1:8".into());
        c.tablets = NonZeroU32::new(4);
        c.durability = Durability::NoSync;
        let text = c.to_toml().unwrap();
        assert_eq!(VcConfig::from_toml(&text).unwrap(), c, "{text}");
        assert!(
            !text.contains("pool_size") && !text.contains("workers"),
            "defaults are not written: {text}"
        );
    }
}
