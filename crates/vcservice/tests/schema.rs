//! Several vcservices starting together against one database: creating the schema at
//! the same time must not fail any of them (PostgreSQL's `CREATE TABLE IF NOT EXISTS`
//! races on its catalog; the loser retries).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::sync::Arc;
use vcservice::{Backend, PgBackend, PgOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_schema_creation_succeeds_everywhere() {
    for round in 0..8 {
        let url = testkit::pg::cluster().fresh_database("schema").await;
        let backends: Vec<Arc<dyn Backend>> = (0..4)
            .map(|_| Arc::new(PgBackend::connect(&PgOptions::new(url.clone())).unwrap()) as Arc<dyn Backend>)
            .collect();
        let tasks: Vec<_> = backends
            .iter()
            .map(|b| {
                let b = b.clone();
                tokio::spawn(async move { b.init_schema().await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        assert_eq!(backends[0].last_committed_block().await.unwrap(), None);
    }
}
