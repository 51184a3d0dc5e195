//! The wallet trusts no single party: four stand-in query services (the committing
//! parties of a 4-party network, so f = 1 and a status or a token needs 2 of them) and a
//! stand-in sidecar on loopback, one query service and the sidecar lying:
//!
//! - the liar reports a committed payment as aborted (which would release its inputs and
//!   invite paying again): the wallet believes the 3 honest services;
//! - the liar alone reports an undecided payment as committed: not believed;
//! - the liar adds a token it made up (its key matches its value, so only agreement can
//!   catch it) and the honest services do not list it: not counted in the balance;
//! - a service that answers a row of another owner, or a row that is not what its key
//!   names, is not believed at all;
//! - the sidecar notifies an abort at once: the wallet still waits for the services;
//! - a service whose pages do not advance is cut off.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use token::Token;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status as GrpcStatus, Streaming};
use types::Status;
use wire::pb;

/// How a stand-in query service lists an owner's tokens.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Pages {
    /// Its tokens of that owner, one page.
    #[default]
    Honest,
    /// Every token it knows, whoever owns it.
    AnyOwner,
    /// Its tokens of that owner, each under the key of another token.
    WrongKeys,
    /// The same valid token of the owner on every page, and `more`, for ever.
    Endless,
}

/// What a stand-in query service knows: tokens by owner, statuses by id.
#[derive(Clone, Default)]
struct Knows {
    tokens: Vec<Token>,
    statuses: HashMap<String, (Status, u64)>,
    pages: Pages,
}

struct FakeQuery(Arc<Knows>);

#[tonic::async_trait]
impl pb::query_server::Query for FakeQuery {
    async fn get_rows(&self, _r: Request<pb::RowsQuery>) -> Result<Response<pb::RowsResult>, GrpcStatus> {
        Err(GrpcStatus::unimplemented("not used"))
    }

    async fn get_owned(&self, r: Request<pb::OwnedQuery>) -> Result<Response<pb::RowsResult>, GrpcStatus> {
        let q = r.into_inner();
        let owner: token::Address = q.owner.as_slice().try_into().unwrap();
        if self.0.pages == Pages::Endless {
            // A valid token of the owner, the same on every page.
            let t = token(owner, 1, "again");
            return Ok(Response::new(pb::RowsResult {
                rows: vec![pb::StateRow {
                    key: t.key(),
                    value: t.encode(),
                    version: 0,
                }],
                more: true,
                last_committed_block: Some(1),
            }));
        }
        let mut rows: Vec<pb::StateRow> = self
            .0
            .tokens
            .iter()
            .filter(|t| self.0.pages == Pages::AnyOwner || t.owner == owner)
            .map(|t| pb::StateRow {
                key: if self.0.pages == Pages::WrongKeys {
                    token(t.owner, t.quantity + 1, &t.tx_id).key()
                } else {
                    t.key()
                },
                value: t.encode(),
                version: 0,
            })
            .collect();
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Response::new(pb::RowsResult {
            rows,
            more: false,
            last_committed_block: Some(1),
        }))
    }

    async fn get_tx_status(
        &self,
        r: Request<pb::StatusQuery>,
    ) -> Result<Response<pb::TxStatusBatch>, GrpcStatus> {
        let statuses = r
            .into_inner()
            .tx_ids
            .iter()
            .filter_map(|id| {
                let (s, block) = self.0.statuses.get(id)?;
                Some(pb::TxStatus {
                    tx_id: id.clone(),
                    code: s.code(),
                    block: *block,
                    index: 0,
                })
            })
            .collect();
        Ok(Response::new(pb::TxStatusBatch { statuses }))
    }
}

/// A sidecar that answers every watched id at once with `ABORTED_MVCC_CONFLICT`.
struct LyingSidecar;

type Events = Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::TxStatusEvent, GrpcStatus>> + Send>>;

#[tonic::async_trait]
impl pb::sidecar_server::Sidecar for LyingSidecar {
    type SubscribeStream = Events;

    async fn subscribe(
        &self,
        r: Request<Streaming<pb::SubscribeRequest>>,
    ) -> Result<Response<Events>, GrpcStatus> {
        let mut input = r.into_inner();
        let first = input.message().await?.unwrap_or_default();
        let events: Vec<Result<pb::TxStatusEvent, GrpcStatus>> = first
            .tx_ids
            .into_iter()
            .map(|id| {
                Ok(pb::TxStatusEvent {
                    status: Some(pb::TxStatus {
                        tx_id: id,
                        code: Status::AbortedMvccConflict.code(),
                        block: 9,
                        index: 0,
                    }),
                    status_name: "ABORTED_MVCC_CONFLICT".into(),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::StreamExt::chain(
            tokio_stream::iter(events),
            tokio_stream::pending(),
        ))))
    }

    async fn get_block(
        &self,
        _r: Request<pb::BlockQuery>,
    ) -> Result<Response<pb::CommittedBlock>, GrpcStatus> {
        Err(GrpcStatus::unimplemented("not used"))
    }

    async fn get_tx_status(
        &self,
        _r: Request<pb::StatusQuery>,
    ) -> Result<Response<pb::TxStatusBatch>, GrpcStatus> {
        Err(GrpcStatus::unimplemented("not used"))
    }

    async fn get_next_block(
        &self,
        _r: Request<pb::LastCommittedRequest>,
    ) -> Result<Response<pb::NextBlock>, GrpcStatus> {
        Err(GrpcStatus::unimplemented("not used"))
    }
}

async fn listener() -> (tokio::net::TcpListener, String) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = format!("http://{}", l.local_addr().unwrap());
    (l, at)
}

async fn serve_query(k: Knows) -> String {
    let (l, at) = listener().await;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::query_server::QueryServer::new(FakeQuery(Arc::new(k))))
            .serve_with_incoming(TcpListenerStream::new(l)),
    );
    at
}

async fn serve_sidecar() -> String {
    let (l, at) = listener().await;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::sidecar_server::SidecarServer::new(LyingSidecar))
            .serve_with_incoming(TcpListenerStream::new(l)),
    );
    at
}

fn token(owner: token::Address, quantity: u64, tx: &str) -> Token {
    Token {
        owner,
        token_type: "CBDC".into(),
        quantity,
        tx_id: tx.into(),
        index: 0,
        sender: None,
    }
}

fn network(query: Vec<String>, sidecars: Vec<String>) -> wallet::TokenNetwork {
    let set = crypto::deal_threshold_keys(3, 5, "lying-parties").unwrap();
    wallet::TokenNetwork {
        routers: vec![],
        sidecars,
        confirmations: wallet::net::confirmations(4, query.len()),
        query,
        endorsers: vec![],
        public: set.public,
        namespace: "token".into(),
        ns_version: 0,
        call_timeout: Duration::from_secs(3),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_query_service_or_sidecar_cannot_make_the_wallet_pay_twice_or_see_false_funds() {
    let alice = crypto::derive_signing_key(crypto::Scheme::Ed25519, "alice");
    let me: token::Address = alice.public_key().as_bytes().try_into().unwrap();
    let other: token::Address = crypto::derive_signing_key(crypto::Scheme::Ed25519, "bob")
        .public_key()
        .as_bytes()
        .try_into()
        .unwrap();
    let real = token(me, 700, "issue-1");
    let honest = Knows {
        tokens: vec![real.clone()],
        statuses: HashMap::from([("paid".to_string(), (Status::Committed, 4))]),
        pages: Pages::Honest,
    };
    let liar = Knows {
        tokens: vec![real.clone(), token(me, 1_000_000, "made-up")],
        statuses: HashMap::from([
            ("paid".to_string(), (Status::AbortedMvccConflict, 4)),
            ("undecided".to_string(), (Status::Committed, 5)),
        ]),
        pages: Pages::Honest,
    };
    let mut query = vec![serve_query(liar).await];
    for _ in 0..3 {
        query.push(serve_query(honest.clone()).await);
    }
    let net = network(query.clone(), vec![serve_sidecar().await]);
    assert_eq!(net.confirmations.get(), 2);

    let ids = vec!["paid".to_string(), "undecided".to_string()];
    let s = net.statuses(&ids).await.unwrap();
    assert_eq!(
        s.get("paid"),
        Some(&(Status::Committed, 4)),
        "the honest majority"
    );
    assert_eq!(s.get("undecided"), None, "one party's word is not enough");

    let owned = net.owned(&alice).await.unwrap();
    assert_eq!(owned, vec![real.clone()], "the made-up token is not counted");

    // The sidecar says "aborted" at once; the services say committed.
    let got = net.wait_status("paid", Duration::from_secs(5)).await.unwrap();
    assert_eq!(got, Some((Status::Committed, 4)));
    let got = net
        .wait_status("undecided", Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got, None, "neither the sidecar nor one service decides it");

    // A service that answers another owner's row, or rows that are not what their keys
    // name, is not believed at all: beside one honest service (2 needed), nothing is.
    for pages in [Pages::AnyOwner, Pages::WrongKeys] {
        let bad = Knows {
            tokens: vec![real.clone(), token(other, 5, "bobs")],
            pages,
            ..Knows::default()
        };
        let mut net = network(vec![serve_query(bad).await, query[1].clone()], vec![]);
        net.confirmations = std::num::NonZeroUsize::new(2).unwrap();
        let e = net.owned(&alice).await.unwrap_err();
        assert!(
            e.to_string().contains("1 query services answered, 2 needed"),
            "{e}"
        );
        assert!(e.to_string().contains("not one of this wallet's tokens"), "{e}");
    }
    // Beyond f liars the services disagree: two outcomes each confirmed by 2 — neither
    // is believed (the payment stays pending rather than be settled wrongly).
    let mut two_liars = vec![];
    for k in [&honest, &honest] {
        two_liars.push(serve_query(k.clone()).await);
    }
    let lie = Knows {
        statuses: HashMap::from([("paid".to_string(), (Status::AbortedMvccConflict, 4))]),
        ..Knows::default()
    };
    for _ in 0..2 {
        two_liars.push(serve_query(lie.clone()).await);
    }
    let net = network(two_liars, vec![]);
    let s = net.statuses(&["paid".to_string()]).await.unwrap();
    assert_eq!(s.get("paid"), None, "{s:?}");

    // Pages that do not advance are cut off, with an error, not followed for ever.
    let endless = Knows {
        pages: Pages::Endless,
        ..Knows::default()
    };
    let net = network(vec![serve_query(endless).await], vec![]);
    let e = net.owned(&alice).await.unwrap_err();
    assert!(e.to_string().contains("do not advance"), "{e}");
}
