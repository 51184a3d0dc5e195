//! Two committing parties on one PostgreSQL server (issue #12): `fabrx up --committers 2
//! --db postgres://…/NAME` against a server that has neither gives party 1 the database
//! NAME and party 2 `NAME_party2`, both created by `up`; a load through the routers is committed by both parties'
//! committers, each reporting every tx `COMMITTED`. The PostgreSQL cluster is the test's
//! own throwaway one (testkit).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{bin, free_base_port};

use std::process::Command;

#[test]
fn two_committing_parties_each_commit_into_their_own_database() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A cluster without the database: `fabrx up` creates it (and party 2's).
    let url = testkit::pg::cluster().missing_database_url("netpg");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    let up = Command::new(bin())
        .args([
            "up",
            "--committers",
            "2",
            "--db",
            &url,
            "--seed",
            "21",
            "--base-port",
            &base,
            "--json",
            "--dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let config =
        |p: u32| std::fs::read_to_string(dir.join(format!("data/vcservice-{p}/vcservice.toml"))).unwrap();
    assert!(config(1).contains(&format!("{url:?}")), "{}", config(1));
    assert!(
        config(2).contains(&format!("{:?}", format!("{url}_party2"))),
        "{}",
        config(2)
    );
    for (party, tag) in [("1", "pga"), ("2", "pgb")] {
        let load = Command::new(bin())
            .args([
                "loadgen",
                "--target",
                "network",
                "--txs",
                "400",
                "--block-size",
                "100",
                "--party",
                party,
                "--tag",
                tag,
                "--json",
                "--network",
            ])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(load.status.success(), "{}", String::from_utf8_lossy(&load.stderr));
        let s = cluster::last_json(&load);
        assert_eq!(s["committed"], 400, "party {party}: {s}");
        assert_eq!(s["never_confirmed"], 0, "party {party}: {s}");
        assert_eq!(s["expected_mismatches"], 0, "party {party}: {s}");
    }
    // Each party's state is its own database: party 2's holds both runs' namespaces too.
    rt.block_on(async {
        use sqlx::Connection;
        for db in [url.clone(), format!("{url}_party2")] {
            let mut conn = sqlx::PgConnection::connect(&db).await.unwrap();
            let tables: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
            )
            .fetch_one(&mut conn)
            .await
            .unwrap();
            assert!(tables > 0, "{db} holds the committer's tables");
        }
    });
}
