//! Throwaway PostgreSQL clusters for tests.
//!
//! [`cluster()`] starts one cluster per test process the first time it is called: `initdb`
//! into a fresh directory under the system temp dir (as user `postgres` when running as
//! root, since PostgreSQL refuses to run as root), then `postgres` on a free loopback port
//! with `fsync=off`. A detached watchdog shell stops the server and deletes the directory
//! once the test process has exited, so nothing outlives the test run.
//!
//! Set `FABRX_TEST_PG_URL=postgres://…` to use an existing server instead (for example a
//! YugabyteDB cluster); each test still gets a database of its own.

use sqlx::Connection;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A running PostgreSQL server that tests may create databases in.
#[derive(Debug)]
pub struct PgCluster {
    /// `postgres://user@host:port` without a database name.
    base_url: String,
}

static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// The cluster of this test process, started on first use. Panics with an explanation
/// when no PostgreSQL server binaries are installed (run `bash scripts/test.sh`, which
/// installs them).
pub fn cluster() -> &'static PgCluster {
    CLUSTER.get_or_init(|| match std::env::var("FABRX_TEST_PG_URL") {
        Ok(url) => PgCluster { base_url: url.trim_end_matches('/').to_string() },
        Err(_) => start().unwrap_or_else(|e| {
            panic!("cannot start a throwaway PostgreSQL cluster: {e}. Run `bash scripts/test.sh`, which installs PostgreSQL when missing, or set FABRX_TEST_PG_URL.")
        }),
    })
}

impl PgCluster {
    /// The URL of a database this cluster does not have (nothing is created): for tools
    /// that must create their database themselves.
    pub fn missing_database_url(&self, prefix: &str) -> String {
        let name = format!(
            "{}_{}_{}",
            prefix.to_ascii_lowercase(),
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        format!("{}/{name}", self.base_url)
    }

    /// Creates a fresh, empty database and returns its URL.
    pub async fn fresh_database(&self, prefix: &str) -> String {
        let name = format!(
            "{}_{}_{}",
            prefix.to_ascii_lowercase(),
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        let admin = format!("{}/postgres", self.base_url);
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("connect to {admin}: {e}"));
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        format!("{}/{name}", self.base_url)
    }
}

fn bin_dir() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("FABRX_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    found.retain(|p| p.join("initdb").exists());
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(dir) = found.pop() {
        return Ok(dir);
    }
    let on_path = Command::new("sh").args(["-c", "command -v initdb"]).output();
    match on_path {
        Ok(out) if out.status.success() => {
            let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            Ok(p.parent().map(Path::to_path_buf).unwrap_or_default())
        }
        _ => Err("no initdb found in /usr/lib/postgresql/*/bin or on PATH".into()),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs `program args` as user `postgres` when we are root, else as ourselves.
fn as_pg_user(root: bool, program: &Path) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn start() -> Result<PgCluster, String> {
    let bin = bin_dir()?;
    let root = is_root();
    let dir = std::env::temp_dir().join(format!("fabrx-pg-{}-{}", std::process::id(), free_port()?));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    if root {
        let ok = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status();
        if !matches!(ok, Ok(s) if s.success()) {
            return Err("chown of the cluster directory to user postgres failed".into());
        }
    }
    let data = dir.join("data");
    let out = as_pg_user(root, &bin.join("initdb"))
        .args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-locale",
            "-D",
        ])
        .arg(&data)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("run initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let port = free_port()?;
    spawn_with_watchdog(root, &bin, &dir, &data, port)?;
    wait_ready(&bin, port)?;
    Ok(PgCluster {
        base_url: format!("postgres://postgres@127.0.0.1:{port}"),
    })
}

/// Starts postgres under a detached shell that stops it and removes `dir` once this
/// process is gone (checked through /proc, which works across users).
fn spawn_with_watchdog(root: bool, bin: &Path, dir: &Path, data: &Path, port: u16) -> Result<(), String> {
    let script = format!(
        "{pg} -D {data} -p {port} -k {dir} -c listen_addresses=127.0.0.1 -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
         -c shared_buffers=256MB >{dir}/log 2>&1 & pg=$!; \
         while [ -d /proc/{parent} ] && kill -0 $pg 2>/dev/null; do sleep 0.5; done; \
         kill -INT $pg 2>/dev/null; wait $pg; rm -rf {dir}",
        pg = bin.join("postgres").display(),
        data = data.display(),
        dir = dir.display(),
        parent = std::process::id(),
    );
    let mut cmd = if root {
        let mut c = Command::new("setsid");
        c.args(["runuser", "-u", "postgres", "--", "sh", "-c", &script]);
        c
    } else {
        let mut c = Command::new("setsid");
        c.args(["sh", "-c", &script]);
        c
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd.spawn()
        .map(|_| ())
        .map_err(|e| format!("spawn postgres: {e}"))
}

fn wait_ready(bin: &Path, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let ok = Command::new(bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .status();
        if matches!(ok, Ok(s) if s.success()) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("postgres on port {port} not ready within 30 s"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn databases_are_fresh_and_usable() {
        let c = cluster();
        let a = c.fresh_database("kit").await;
        let b = c.fresh_database("kit").await;
        assert_ne!(a, b);
        let mut conn = sqlx::PgConnection::connect(&a).await.unwrap();
        sqlx::raw_sql("CREATE TABLE t (k INT PRIMARY KEY)")
            .execute(&mut conn)
            .await
            .unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 0);
        // The other database does not see the table.
        let mut other = sqlx::PgConnection::connect(&b).await.unwrap();
        assert!(
            sqlx::query("SELECT 1 FROM t")
                .fetch_all(&mut other)
                .await
                .is_err()
        );
    }
}
