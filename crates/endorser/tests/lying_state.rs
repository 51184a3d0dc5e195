//! An endorser against query services that lie (one party operator trying to steal or
//! mint through its query service). Real endorsers (the gRPC service with its
//! `StateReader`) read through stand-in query services on loopback: an honest one over a
//! committed state, and liars that answer another owner, a larger quantity, or hide a
//! token. Every row is checked against the key it was read for, so:
//!
//! - a liar that says alice's token is mallory's cannot get mallory's transfer of it
//!   endorsed, and a liar that says it holds more cannot get value minted;
//! - a liar listed first that hides alice's token, or lies about it, cannot block her
//!   payment: the next service proves it;
//! - the honest state alone endorses alice's honest payment (the control).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use token::{Action, Output, Policy, Request, Token};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Channel;
use tonic::{Request as GrpcRequest, Response, Status};
use wire::pb;
use wire::pb::endorser_client::EndorserClient;

/// How a stand-in query service answers `GetRows`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    Honest,
    OwnerIsMallory,
    MoreValue,
    Hidden,
}

/// Committed rows by key: value and version.
type Rows = HashMap<Vec<u8>, (Vec<u8>, u64)>;

struct FakeQuery {
    rows: Arc<Rows>,
    answer: Answer,
    mallory: token::Address,
}

#[tonic::async_trait]
impl pb::query_server::Query for FakeQuery {
    async fn get_rows(&self, r: GrpcRequest<pb::RowsQuery>) -> Result<Response<pb::RowsResult>, Status> {
        let rows = r
            .into_inner()
            .keys
            .iter()
            .filter_map(|k| {
                let (value, version) = self.rows.get(k)?.clone();
                let mut t = Token::decode(&value).ok()?;
                let value = match self.answer {
                    Answer::Honest => value,
                    Answer::Hidden => return None,
                    Answer::OwnerIsMallory => {
                        t.owner = self.mallory;
                        t.encode()
                    }
                    Answer::MoreValue => {
                        t.quantity *= 10;
                        t.encode()
                    }
                };
                Some(pb::StateRow {
                    key: k.clone(),
                    value,
                    version,
                })
            })
            .collect();
        Ok(Response::new(pb::RowsResult {
            rows,
            ..Default::default()
        }))
    }

    async fn get_owned(&self, _r: GrpcRequest<pb::OwnedQuery>) -> Result<Response<pb::RowsResult>, Status> {
        Err(Status::unimplemented("not used"))
    }

    async fn get_tx_status(
        &self,
        _r: GrpcRequest<pb::StatusQuery>,
    ) -> Result<Response<pb::TxStatusBatch>, Status> {
        Err(Status::unimplemented("not used"))
    }
}

async fn serve_query(q: FakeQuery) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::query_server::QueryServer::new(q))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

fn key(name: &str) -> crypto::SigningKey {
    crypto::derive_signing_key(crypto::Scheme::Ed25519, name)
}

fn addr(k: &crypto::SigningKey) -> token::Address {
    k.public_key().as_bytes().try_into().unwrap()
}

/// An endorser of share 1 reading through `query` (in that order), on loopback.
async fn endorser(set: &crypto::ThresholdKeySet, query: Vec<String>) -> EndorserClient<Channel> {
    let core = endorser::EndorserCore::new(
        set.shares[0].clone(),
        &set.public,
        "token".into(),
        0,
        Policy { issuers: vec![] },
    )
    .unwrap();
    let state = endorser::service::StateReader::new(&query).unwrap();
    let service = endorser::service::EndorserService::new(
        core,
        state,
        endorser::service::ServiceConfig::default(),
        endorser::metrics::Metrics::register(&telemetry::Registry::detached("endorser")).unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let limits = endorser::service::ServiceConfig::default().server;
    let serving = wire::node::serve(listener, &limits, |b| b.add_service(service.into_server())).unwrap();
    // Served for the rest of the test.
    std::mem::forget(serving);
    tokio::time::sleep(Duration::from_millis(50)).await;
    EndorserClient::connect(format!("http://{at}")).await.unwrap()
}

async fn endorse(c: &mut EndorserClient<Channel>, r: &Request) -> pb::EndorseResponse {
    c.endorse(pb::EndorseRequest {
        request: Some(r.to_pb()),
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_query_service_cannot_move_others_tokens_mint_or_block() {
    let set = crypto::deal_threshold_keys(3, 5, "lying-state").unwrap();
    let (alice, mallory, bob) = (key("alice"), key("mallory"), key("bob"));
    let held = Token {
        owner: addr(&alice),
        token_type: "CBDC".into(),
        quantity: 800,
        tx_id: "issue-1".into(),
        index: 0,
        sender: None,
    };
    let rows = Arc::new(HashMap::from([(held.key(), (held.encode(), 0u64))]));
    let query = |answer| FakeQuery {
        rows: rows.clone(),
        answer,
        mallory: addr(&mallory),
    };
    let honest = serve_query(query(Answer::Honest)).await;
    let steals = serve_query(query(Answer::OwnerIsMallory)).await;
    let mints = serve_query(query(Answer::MoreValue)).await;
    let hides = serve_query(query(Answer::Hidden)).await;
    let out = |owner, q| Output {
        owner,
        token_type: "CBDC".into(),
        quantity: q,
    };

    // Mallory spends alice's token, and the first (only) service says it is hers.
    let theft = Request::new(
        Action::Transfer,
        b"theft".to_vec(),
        addr(&mallory),
        vec![held.key()],
        vec![out(addr(&mallory), 800)],
    )
    .sign(&mallory);
    let mut e = endorser(&set, vec![steals.clone()]).await;
    let r = endorse(&mut e, &theft).await;
    assert_ne!(r.reject, 0, "mallory's theft was endorsed: {r:?}");
    assert!(r.partial_signature.is_empty());
    // Listed after an honest service, the liar changes nothing either.
    let mut e = endorser(&set, vec![honest.clone(), steals.clone()]).await;
    let r = endorse(&mut e, &theft).await;
    assert_eq!(r.reject, pb::RejectReason::NotOwner as i32, "{r:?}");

    // Alice pays out 8000 from her 800, and the service says the token holds 8000.
    let mint = Request::new(
        Action::Transfer,
        b"mint".to_vec(),
        addr(&alice),
        vec![held.key()],
        vec![out(addr(&bob), 8000)],
    )
    .sign(&alice);
    let mut e = endorser(&set, vec![mints.clone()]).await;
    let r = endorse(&mut e, &mint).await;
    assert_ne!(r.reject, 0, "value minted: {r:?}");

    // Alice's honest payment: endorsed on the honest state, and also when the first
    // services hide her token or lie about it (a later one proves it).
    let pay = Request::new(
        Action::Transfer,
        b"pay".to_vec(),
        addr(&alice),
        vec![held.key()],
        vec![out(addr(&bob), 300), out(addr(&alice), 500)],
    )
    .sign(&alice);
    for query in [
        vec![honest.clone()],
        vec![hides.clone(), honest.clone()],
        vec![steals.clone(), honest.clone()],
        vec![mints.clone(), hides.clone(), honest.clone()],
    ] {
        let mut e = endorser(&set, query).await;
        let r = endorse(&mut e, &pay).await;
        assert_eq!(r.reject, 0, "{r:?}");
        assert_eq!(r.tx_id, pay.tx_id());
    }
    // With only liars, it is refused.
    let mut e = endorser(&set, vec![hides, steals]).await;
    let r = endorse(&mut e, &pay).await;
    assert_ne!(r.reject, 0, "{r:?}");
}
