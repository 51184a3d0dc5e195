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

use query::{NodeConfig, QueryLimits};
use std::sync::Arc;
use tokio_stream::wrappers::TcpListenerStream;
use types::owned::{OWNED_MAGIC, OWNER_LEN};
use types::{Endorsement, Height, NamespacePolicy, PolicyScheme, ReadWrite, Status, Tx, TxId, TxNamespace};
use vcservice::service::{PipelineConfig, VcGrpc};
use vcservice::{Backend, Durability, EmbeddedBackend, Engine, EngineConfig, VcTx};
use wire::pb;
use wire::pb::query_client::QueryClient;

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
    let engine = Engine::new(backend, EngineConfig::default(), None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let pipeline = PipelineConfig {
        workers: 1,
        queue: 2,
        max_in_flight: 2,
    };
    let svc = VcGrpc::new(engine.clone(), pipeline, None).into_server();
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

fn owned(owner: u8, tag: &str) -> Vec<u8> {
    let mut v = OWNED_MAGIC.to_vec();
    v.extend_from_slice(&[owner; OWNER_LEN]);
    v.extend_from_slice(tag.as_bytes());
    v
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

async fn query_node(
    vcservices: Vec<String>,
    limits: QueryLimits,
) -> (query::Handle, QueryClient<tonic::transport::Channel>) {
    let mut config = NodeConfig::new("127.0.0.1:0".parse().unwrap(), vcservices);
    config.limits = limits;
    let node = query::spawn(config).await.unwrap();
    let client = QueryClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap()
        .max_decoding_message_size(wire::limits::ROWS_RESULT.max_bytes);
    (node, client)
}

fn rows_query(keys: &[&str]) -> pb::RowsQuery {
    pb::RowsQuery {
        namespace: "token".into(),
        keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
    }
}

fn owned_query(owner: u8, after: &str, limit: u32) -> pb::OwnedQuery {
    pb::OwnedQuery {
        namespace: "token".into(),
        owner: vec![owner; OWNER_LEN],
        after_key: after.as_bytes().to_vec(),
        limit,
    }
}

fn keys(r: &pb::RowsResult) -> Vec<String> {
    r.rows
        .iter()
        .map(|r| String::from_utf8_lossy(&r.key).into_owned())
        .collect()
}

/// Asks `client` the same three questions and checks the answers.
async fn check_answers(client: &mut QueryClient<tonic::transport::Channel>) {
    let r = client
        .get_rows(rows_query(&["t3", "t1", "absent"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (keys(&r), r.more, r.last_committed_block),
        (vec!["t1".into(), "t3".into()], false, Some(2))
    );
    assert_eq!((r.rows[0].value.clone(), r.rows[0].version), (owned(1, "a"), 0));
    assert_eq!(
        (r.rows[1].value.clone(), r.rows[1].version),
        (b"spent".to_vec(), 1)
    );

    // t3 was spent: only t1 is still owner 1's.
    let o = client
        .get_owned(owned_query(1, "", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((keys(&o), o.more), (vec!["t1".into()], false));
    let o = client
        .get_owned(owned_query(2, "", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((keys(&o), o.more), (vec!["t2".into()], false));

    let s = client
        .get_tx_status(pb::StatusQuery {
            tx_ids: vec!["issue".into(), "spend".into(), "never".into()],
        })
        .await
        .unwrap()
        .into_inner();
    let mut got: Vec<(String, u32, u64)> = s
        .statuses
        .into_iter()
        .map(|s| (s.tx_id, s.code, s.block))
        .collect();
    got.sort();
    let committed = Status::Committed.code();
    assert_eq!(
        got,
        vec![("issue".into(), committed, 1), ("spend".into(), committed, 2)]
    );
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
    node.stop().await;
}
