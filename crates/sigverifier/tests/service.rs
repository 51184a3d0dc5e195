//! The verifier service and client over loopback: real tonic servers on 127.0.0.1:0,
//! each on its own runtime so a test can kill it (dropping every task and socket).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use clients::verifier::{ClientError, VerifierClient};
use sigverifier::service::{ServiceConfig, VerifierService};
use sigverifier::{Policies, Verifier};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use types::endorsement::namespace_signing_bytes;
use types::{Endorsement, NamespacePolicy, PolicyScheme, Status, Tx, TxId, TxNamespace, Write};
use wire::pb;
use wire::pb::verify_stream_request::Kind;

/// A server on its own thread and runtime; `kill` drops the runtime.
struct TestServer {
    addr: SocketAddr,
    tx_kill: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    fn start_with<F, Fut>(serve: F) -> TestServer
    where
        F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (tx_addr, rx_addr) = std::sync::mpsc::sync_channel(1);
        let (tx_kill, rx_kill) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
            tx_addr.send(listener.local_addr().unwrap()).unwrap();
            rt.spawn(serve(listener));
            let _ = rx_kill.recv();
            rt.shutdown_background();
        });
        TestServer {
            addr: rx_addr.recv().unwrap(),
            tx_kill: Some(tx_kill),
            thread: Some(thread),
        }
    }

    fn start(threads: usize) -> TestServer {
        TestServer::start_with(move |listener| async move {
            let svc = VerifierService::new(
                Verifier::new(threads).unwrap(),
                ServiceConfig::default(),
                std::sync::Arc::new(
                    sigverifier::metrics::Metrics::register(&telemetry::Registry::detached("sigverifier"))
                        .unwrap(),
                ),
            );
            let limits = ServiceConfig::default().server;
            let _serving =
                wire::node::serve(listener, &limits, |b| b.add_service(svc.into_server())).unwrap();
            std::future::pending::<()>().await;
        })
    }

    fn kill(&mut self) {
        drop(self.tx_kill.take());
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn key(scheme: crypto::Scheme, seed: &str) -> (crypto::SigningKey, NamespacePolicy) {
    let sk = crypto::derive_signing_key(scheme, seed);
    let p = sigverifier::policy_of(&sk.public_key());
    (sk, p)
}

fn signed(id: &str, ns: &str, sk: &crypto::SigningKey) -> (TxId, Arc<Tx>) {
    let id = TxId(id.into());
    let n = TxNamespace {
        ns_id: ns.into(),
        blind_writes: vec![Write {
            key: b"k".to_vec(),
            value: id.0.clone().into_bytes(),
        }],
        ..Default::default()
    };
    let sig = crypto::sign_namespace_endorsement(sk, &namespace_signing_bytes(&id, &n, &[]));
    let tx = Tx {
        namespaces: vec![n],
        endorsements: vec![vec![Endorsement {
            signature: sig.into_bytes(),
            ..Default::default()
        }]],
        metadata: vec![],
    };
    (id, Arc::new(tx))
}

const BAD: Option<Status> = Some(Status::AbortedSignatureInvalid);

/// Txs to verify.
type Batch = Vec<(TxId, Arc<Tx>)>;

/// A batch over three schemes, good and bad, with its expected verdicts.
fn mixed_batch(tag: &str) -> (Batch, Vec<Option<Status>>) {
    let mut batch = Vec::new();
    let mut want = Vec::new();
    for (i, (ns, scheme)) in [
        ("eda", crypto::Scheme::Ed25519),
        ("ec", crypto::Scheme::EcdsaP256),
        ("bls", crypto::Scheme::Bls12381),
    ]
    .into_iter()
    .enumerate()
    {
        let (owner, _) = key(scheme, ns);
        let (stranger, _) = key(scheme, "stranger");
        batch.push(signed(&format!("{tag}-{i}-ok"), ns, &owner));
        want.push(None);
        batch.push(signed(&format!("{tag}-{i}-bad"), ns, &stranger));
        want.push(BAD);
        batch.push(signed(&format!("{tag}-{i}-nopolicy"), "unknown", &owner));
        want.push(BAD);
    }
    (batch, want)
}

async fn client_with_policies(addr: SocketAddr) -> VerifierClient {
    let client = VerifierClient::connect(&addr.to_string()).await.unwrap();
    for (ns, scheme) in [
        ("eda", crypto::Scheme::Ed25519),
        ("ec", crypto::Scheme::EcdsaP256),
        ("bls", crypto::Scheme::Bls12381),
    ] {
        client.set_policy(ns, &key(scheme, ns).1).await.unwrap();
    }
    client
}

#[tokio::test]
async fn policies_then_batches() {
    let server = TestServer::start(2);
    let client = client_with_policies(server.addr).await;
    let (batch, want) = mixed_batch("a");
    let got = client.verify(batch.clone()).await.unwrap();
    assert_eq!(got, want);
    // Same verdicts as the pure core.
    let mut policies = Policies::new();
    for (ns, scheme) in [
        ("eda", crypto::Scheme::Ed25519),
        ("ec", crypto::Scheme::EcdsaP256),
        ("bls", crypto::Scheme::Bls12381),
    ] {
        policies.set(ns, &key(scheme, ns).1).unwrap();
    }
    let oracle: Vec<_> = batch
        .iter()
        .map(|(id, tx)| policies.verify_tx(id, tx).err())
        .collect();
    assert_eq!(got, oracle);
    assert_eq!(client.verify(vec![]).await.unwrap(), vec![]);
}

#[tokio::test]
async fn policy_update_changes_later_batches_only() {
    let server = TestServer::start(2);
    let client = VerifierClient::connect(&server.addr.to_string()).await.unwrap();
    let (alice, alice_policy) = key(crypto::Scheme::Ed25519, "alice");
    let (_, bob_policy) = key(crypto::Scheme::EcdsaP256, "bob");
    let batch = vec![signed("t1", "token", &alice)];
    assert_eq!(client.verify(batch.clone()).await.unwrap(), vec![BAD]);
    client.set_policy("token", &alice_policy).await.unwrap();
    assert_eq!(client.verify(batch.clone()).await.unwrap(), vec![None]);
    client.set_policy("token", &bob_policy).await.unwrap();
    assert_eq!(client.verify(batch.clone()).await.unwrap(), vec![BAD]);

    // Raw stream, everything sent before any answer: batch 1, policy, batch 2. Batch 1
    // was read before the policy, so it must not see it.
    let mut grpc = pb::sig_verifier_client::SigVerifierClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let (tx_req, rx_req) = mpsc::channel(8);
    let wire_batch = |request_id| {
        let txs = batch
            .iter()
            .map(|(id, tx)| pb::VerifyTx {
                tx_id: id.0.clone(),
                tx: Some(pb::Tx::from(tx.as_ref())),
            })
            .collect();
        pb::VerifyStreamRequest {
            kind: Some(Kind::Batch(pb::VerifyBatch { request_id, txs })),
        }
    };
    tx_req.send(wire_batch(1)).await.unwrap();
    tx_req
        .send(pb::VerifyStreamRequest {
            kind: Some(Kind::Policy(pb::PolicyUpdate {
                namespace: "token".into(),
                policy: wire::encode_policy(&alice_policy),
            })),
        })
        .await
        .unwrap();
    tx_req.send(wire_batch(2)).await.unwrap();
    drop(tx_req);
    let mut answers = grpc
        .verify(ReceiverStream::new(rx_req))
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(a) = answers.message().await.unwrap() {
        got.push((a.request_id, a.codes));
    }
    got.sort();
    assert_eq!(got, vec![(1, vec![2]), (2, vec![0])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_get_their_own_answers() {
    let server = TestServer::start(2);
    let client = client_with_policies(server.addr).await;
    let mut tasks = Vec::new();
    for caller in 0..8 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..5 {
                let (mut batch, mut want) = mixed_batch(&format!("c{caller}r{round}"));
                // Different sizes and orders per caller, so mixed-up answers show.
                batch.truncate(3 + (caller + round) % 7);
                want.truncate(batch.len());
                if caller % 2 == 1 {
                    batch.reverse();
                    want.reverse();
                }
                assert_eq!(client.verify(batch).await.unwrap(), want, "caller {caller}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A verifier that reads its stream and never answers.
struct Silent;

#[tonic::async_trait]
impl pb::sig_verifier_server::SigVerifier for Silent {
    type VerifyStream = ReceiverStream<Result<pb::VerifyResult, tonic::Status>>;

    async fn verify(
        &self,
        request: tonic::Request<tonic::Streaming<pb::VerifyStreamRequest>>,
    ) -> Result<tonic::Response<Self::VerifyStream>, tonic::Status> {
        let (tx_out, rx_out) = mpsc::channel(1);
        let mut incoming = request.into_inner();
        tokio::spawn(async move {
            while let Ok(Some(_)) = incoming.message().await {}
            drop(tx_out);
        });
        Ok(tonic::Response::new(ReceiverStream::new(rx_out)))
    }
}

#[tokio::test]
async fn server_killed_mid_call_disconnects_every_call() {
    let mut server = TestServer::start_with(|listener| async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tonic::transport::Server::builder()
            .add_service(pb::sig_verifier_server::SigVerifierServer::new(Silent))
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
    let client = VerifierClient::connect(&server.addr.to_string()).await.unwrap();
    let (alice, _) = key(crypto::Scheme::Ed25519, "alice");
    let pending: Vec<_> = (0..3)
        .map(|i| {
            let client = client.clone();
            let batch = vec![signed(&format!("t{i}"), "token", &alice)];
            tokio::spawn(async move { client.verify(batch).await })
        })
        .collect();
    // Let the calls reach the server, and check they are really pending.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(pending.iter().all(|p| !p.is_finished()));
    assert!(!client.is_disconnected());
    server.kill();
    for p in pending {
        let outcome = tokio::time::timeout(Duration::from_secs(3), p)
            .await
            .expect("pending call must end quickly")
            .unwrap();
        assert!(matches!(outcome, Err(ClientError::Disconnected)), "{outcome:?}");
    }
    assert!(client.is_disconnected());
    let later = client.verify(vec![signed("t9", "token", &alice)]).await;
    assert!(matches!(later, Err(ClientError::Disconnected)), "{later:?}");
    let policy = key(crypto::Scheme::Ed25519, "alice").1;
    assert!(matches!(
        client.set_policy("token", &policy).await,
        Err(ClientError::Disconnected)
    ));
}

#[tokio::test]
async fn real_server_killed_disconnects() {
    let mut server = TestServer::start(1);
    let client = client_with_policies(server.addr).await;
    let (batch, want) = mixed_batch("k");
    assert_eq!(client.verify(batch.clone()).await.unwrap(), want);
    server.kill();
    let outcome = tokio::time::timeout(Duration::from_secs(3), client.verify(batch))
        .await
        .expect("call must end quickly");
    assert!(matches!(outcome, Err(ClientError::Disconnected)), "{outcome:?}");
}

#[tokio::test]
async fn bad_policy_ends_the_stream_with_invalid_argument() {
    let server = TestServer::start(2);
    let (alice, alice_policy) = key(crypto::Scheme::Ed25519, "alice");
    let bad_key = wire::encode_policy(&NamespacePolicy {
        scheme: PolicyScheme::Ed25519,
        public_key: vec![1, 2, 3],
    });
    let unknown_scheme = prost::Message::encode_to_vec(&pb::NamespacePolicy {
        scheme: "rsa".into(),
        public_key: vec![1],
    });
    let undecodable = vec![0xff, 0xff, 0xff];
    for (what, policy) in [
        ("bad key", bad_key),
        ("unknown scheme", unknown_scheme),
        ("undecodable", undecodable),
    ] {
        let mut grpc = pb::sig_verifier_client::SigVerifierClient::connect(format!("http://{}", server.addr))
            .await
            .unwrap();
        let (id, tx) = signed("t1", "token", &alice);
        let batch = |request_id| pb::VerifyStreamRequest {
            kind: Some(Kind::Batch(pb::VerifyBatch {
                request_id,
                txs: vec![pb::VerifyTx {
                    tx_id: id.0.clone(),
                    tx: Some(pb::Tx::from(tx.as_ref())),
                }],
            })),
        };
        let policy_update = |namespace: &str, policy: Vec<u8>| pb::VerifyStreamRequest {
            kind: Some(Kind::Policy(pb::PolicyUpdate {
                namespace: namespace.into(),
                policy,
            })),
        };
        let (tx_req, rx_req) = mpsc::channel(8);
        tx_req
            .send(policy_update("token", wire::encode_policy(&alice_policy)))
            .await
            .unwrap();
        tx_req.send(batch(1)).await.unwrap();
        tx_req.send(policy_update("cash", policy)).await.unwrap();
        tx_req.send(batch(2)).await.unwrap();
        let mut answers = grpc
            .verify(ReceiverStream::new(rx_req))
            .await
            .unwrap()
            .into_inner();
        // The batch before the bad policy is answered, then the stream ends with the error.
        let first = answers.message().await.unwrap().unwrap();
        assert_eq!((first.request_id, first.codes), (1, vec![0]), "{what}");
        let err = answers.message().await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err}");
        assert!(err.message().contains("cash"), "{what}: {}", err.message());
        drop(tx_req);
    }

    // The client refuses such a policy before sending, and stays usable.
    let client = VerifierClient::connect(&server.addr.to_string()).await.unwrap();
    let refused = client
        .set_policy(
            "cash",
            &NamespacePolicy {
                scheme: PolicyScheme::Bls12381,
                public_key: vec![0; 48],
            },
        )
        .await;
    assert!(
        matches!(refused, Err(ClientError::BadPolicy { .. })),
        "{refused:?}"
    );
    client.set_policy("token", &alice_policy).await.unwrap();
    assert_eq!(
        client.verify(vec![signed("t1", "token", &alice)]).await.unwrap(),
        vec![None]
    );
}

#[tokio::test]
async fn tx_without_body_is_answered_invalid() {
    let server = TestServer::start(1);
    let (alice, alice_policy) = key(crypto::Scheme::Ed25519, "alice");
    let (id, tx) = signed("t1", "token", &alice);
    let mut grpc = pb::sig_verifier_client::SigVerifierClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let (tx_req, rx_req) = mpsc::channel(8);
    tx_req
        .send(pb::VerifyStreamRequest {
            kind: Some(Kind::Policy(pb::PolicyUpdate {
                namespace: "token".into(),
                policy: wire::encode_policy(&alice_policy),
            })),
        })
        .await
        .unwrap();
    tx_req
        .send(pb::VerifyStreamRequest {
            kind: Some(Kind::Batch(pb::VerifyBatch {
                request_id: 7,
                txs: vec![
                    pb::VerifyTx {
                        tx_id: id.0.clone(),
                        tx: Some(pb::Tx::from(tx.as_ref())),
                    },
                    pb::VerifyTx {
                        tx_id: "empty".into(),
                        tx: None,
                    },
                ],
            })),
        })
        .await
        .unwrap();
    drop(tx_req);
    let mut answers = grpc
        .verify(ReceiverStream::new(rx_req))
        .await
        .unwrap()
        .into_inner();
    let a = answers.message().await.unwrap().unwrap();
    assert_eq!((a.request_id, a.codes), (7, vec![0, 2]));
    assert!(answers.message().await.unwrap().is_none());
}

#[tokio::test]
async fn garbage_on_verify_ends_the_stream_with_an_error() {
    // Found by the hostile-input review: after bytes that do not decode, the stream ended
    // with OK and no message, so the client could not tell garbage from a clean end.
    // `NextBlock { number }` is a varint in field 1, where `VerifyStreamRequest` has a
    // message: not a `VerifyStreamRequest`.
    let server = TestServer::start(1);
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = wire::codec::BoundedCodec::<pb::NextBlock, pb::VerifyResult>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/fabrx.v1.SigVerifier/Verify");
    let garbage = tokio_stream::iter(vec![pb::NextBlock { number: 5 }]);
    let mut answers = grpc
        .streaming(tonic::Request::new(garbage), path, codec)
        .await
        .unwrap()
        .into_inner();
    let err = tokio::time::timeout(Duration::from_secs(10), answers.message())
        .await
        .expect("an answer in time")
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    // The server keeps serving honest clients.
    let client = client_with_policies(server.addr).await;
    let (batch, want) = mixed_batch("after-garbage");
    assert_eq!(client.verify(batch).await.unwrap(), want);
}

#[tokio::test]
async fn an_amplifying_batch_is_refused_before_decoding() {
    // Found by the hostile-input review: a 32 MiB message of tiny txs took the sigverifier
    // to 3.8 GB. A batch of 2 Mi empty txs (4 MiB on the wire) is refused unread.
    let server = TestServer::start(1);
    let mut grpc = pb::sig_verifier_client::SigVerifierClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let req = pb::VerifyStreamRequest {
        kind: Some(Kind::Batch(pb::VerifyBatch {
            request_id: 1,
            txs: vec![pb::VerifyTx::default(); 2 << 20],
        })),
    };
    let mut answers = grpc
        .verify(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let err = answers.message().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    let client = client_with_policies(server.addr).await;
    let (batch, want) = mixed_batch("after-amplifying");
    assert_eq!(client.verify(batch).await.unwrap(), want);
}
