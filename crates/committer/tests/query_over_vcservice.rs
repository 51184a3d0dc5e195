//! The query service over a real validator-committer (in process, embedded store):
//! rows committed through the vcservice's engine come back through `Query` at one
//! snapshot, an owner's rows from the owner index the commit keeps, statuses by id. (The
//! query crate's own tests use a stand-in vcservice: a role may not depend on another;
//! this composition crate may.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

#[path = "../../query/tests/common/mod.rs"]
mod common;
use common::{check_answers, keys, owned, owned_query, query_node};
use query::QueryLimits;
use std::sync::Arc;
use tokio_stream::wrappers::TcpListenerStream;
use types::{Endorsement, Height, NamespacePolicy, PolicyScheme, ReadWrite, Status, Tx, TxId, TxNamespace};
use vcservice::service::{PipelineConfig, VcGrpc};
use vcservice::{Backend, Durability, EmbeddedBackend, Engine, EngineConfig, VcTx};
use wire::node::Node as _;

/// A validator-committer serving in this process, with its engine to commit through.
struct Vc {
    addr: String,
    engine: Engine,
    _dir: tempfile::TempDir,
}

async fn vcservice() -> Vc {
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(EmbeddedBackend::open(dir.path(), Durability::NoSync).unwrap());
    backend.init_schema().await.unwrap();
    let engine = Engine::new(
        backend,
        EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let pipeline = PipelineConfig {
        workers: std::num::NonZeroUsize::new(1).unwrap(),
        queue: std::num::NonZeroUsize::new(2).unwrap(),
        max_in_flight: std::num::NonZeroUsize::new(2).unwrap(),
    };
    let svc = VcGrpc::new(
        engine.clone(),
        pipeline,
        vcservice::metrics::Metrics::unexported().unwrap(),
    )
    .into_server();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Vc {
        addr,
        engine,
        _dir: dir,
    }
}

fn vc_tx(
    id: &str,
    block: u64,
    ns_id: &str,
    ns_version: u64,
    writes: Vec<(&str, Option<u64>, Vec<u8>)>,
) -> VcTx {
    let namespace = TxNamespace {
        ns_id: ns_id.into(),
        ns_version,
        read_writes: writes
            .into_iter()
            .map(|(k, version, value)| ReadWrite {
                key: k.into(),
                version,
                value,
            })
            .collect(),
        ..Default::default()
    };
    VcTx {
        id: TxId(id.into()),
        height: Height::new(block, 0),
        tx: Arc::new(Tx {
            namespaces: vec![namespace],
            endorsements: vec![vec![Endorsement {
                signature: vec![1; 64],
                ..Default::default()
            }]],
            metadata: vec![],
        }),
        prelim: None,
    }
}

/// Creates `token` and commits three owned tokens, then spends one.
async fn commit_tokens(vc: &Vc) {
    let policy = wire::encode_policy(&NamespacePolicy {
        scheme: PolicyScheme::Ed25519,
        public_key: vec![7; 32],
    });
    let txs = vec![
        vc_tx("create", 0, "_meta", 0, vec![("token", None, policy)]),
        vc_tx(
            "issue",
            1,
            "token",
            0,
            vec![
                ("t1", None, owned(1, "a")),
                ("t2", None, owned(2, "b")),
                ("t3", None, owned(1, "c")),
            ],
        ),
        vc_tx("spend", 2, "token", 0, vec![("t3", Some(0), b"spent".to_vec())]),
    ];
    for t in txs {
        let out = vc.engine.process(vec![t]).await.unwrap();
        assert_eq!(out[0].status, Status::Committed, "{out:?}");
    }
    vc.engine.backend().set_last_committed_block(2).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_rows_owned_rows_and_statuses() {
    let vc = vcservice().await;
    commit_tokens(&vc).await;
    let (node, mut client) = query_node(vec![vc.addr.clone()], QueryLimits::default()).await;
    check_answers(&mut client).await;
    // Paging goes through unchanged: one row a page.
    let page = client
        .get_owned(owned_query(1, "", 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((keys(&page), page.more), (vec!["t1".into()], false));
    node.stop().await.unwrap();
}
