//! What the query service's tests over a stand-in vcservice (this crate) and over a real
//! one (crates/committer/tests/query_over_vcservice.rs) share: the state both commit
//! (`token`: t1 and t2 owned by owners 1 and 2, t3 owned by 1 then spent; txs `issue` in
//! block 1 and `spend` in block 2), the questions and the answers expected.

#![allow(dead_code)]

use query::QueryLimits;
use query::node::{Config as NodeConfig, Deps};
use types::Status;
use types::owned::{OWNED_MAGIC, OWNER_LEN};
use wire::pb;
use wire::pb::query_client::QueryClient;

pub fn owned(owner: u8, tag: &str) -> Vec<u8> {
    let mut v = OWNED_MAGIC.to_vec();
    v.extend_from_slice(&[owner; OWNER_LEN]);
    v.extend_from_slice(tag.as_bytes());
    v
}

pub async fn query_node(
    vcservices: Vec<String>,
    limits: QueryLimits,
) -> (query::node::Handle, QueryClient<tonic::transport::Channel>) {
    let mut config = NodeConfig::new("127.0.0.1:0".parse().unwrap(), vcservices);
    config.limits = limits;
    // These checks are about answers and forwarding; signed reads have their own test.
    config.reads.signed = false;
    let node = query::node::spawn(config, Deps::default()).await.unwrap();
    let client = QueryClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap()
        .max_decoding_message_size(wire::limits::ROWS_RESULT.max_bytes);
    (node, client)
}

pub fn rows_query(keys: &[&str]) -> pb::RowsQuery {
    pb::RowsQuery {
        namespace: "token".into(),
        keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
    }
}

pub fn owned_query(owner: u8, after: &str, limit: u32) -> pb::OwnedQuery {
    pb::OwnedQuery {
        namespace: "token".into(),
        owner: vec![owner; OWNER_LEN],
        after_key: after.as_bytes().to_vec(),
        limit,
        ..Default::default()
    }
}

pub fn keys(r: &pb::RowsResult) -> Vec<String> {
    r.rows
        .iter()
        .map(|r| String::from_utf8_lossy(&r.key).into_owned())
        .collect()
}

/// Asks `client` the same three questions and checks the answers.
pub async fn check_answers(client: &mut QueryClient<tonic::transport::Channel>) {
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
