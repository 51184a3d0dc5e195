//! The TLS state a process follows at run time (ADR 0019), over real connections in one
//! process (one identity: the process calls its own server): the certificate it presents
//! changes for new connections, a certificate the table does not list fails the
//! handshake, a client falls back to its previous certificate when the server refuses
//! the new one, and replacing the table closes the connections of the certificates it
//! drops.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::time::Duration;

use wire::pb;
use wire::tls::{NodeTls, Peer, Role};

struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

fn ca() -> Ca {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    Ca {
        issuer: rcgen::Issuer::new(params, key),
        pem: cert.pem(),
    }
}

/// A certificate (PEM), its key (PEM) and its fingerprint.
fn issue(ca: &Ca) -> (String, String, [u8; 32]) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec![wire::tls::SERVER_NAME.to_string(), "127.0.0.1".into()]).unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (
        cert.pem(),
        key.serialize_pem(),
        wire::tls::fingerprint(cert.der()),
    )
}

const CLIENT: Peer = Peer {
    role: Role::Client,
    party: 0,
    shard: None,
};

struct Echo;

#[tonic::async_trait]
impl pb::endorser_server::Endorser for Echo {
    async fn endorse(
        &self,
        request: tonic::Request<pb::EndorseRequest>,
    ) -> Result<tonic::Response<pb::EndorseResponse>, tonic::Status> {
        // The caller's certificate, as the handler sees it.
        let fp = wire::tls::caller_certificate(&request).unwrap();
        Ok(tonic::Response::new(pb::EndorseResponse {
            tx_id: hex(&fp),
            ..Default::default()
        }))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One call on a new channel: the fingerprint the server saw, or the status.
async fn call_new(addr: &str) -> Result<String, tonic::Status> {
    let endpoint = wire::server::client_endpoint(format!("http://{addr}")).unwrap();
    let channel = wire::server::connect(&endpoint)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    call(channel).await
}

async fn call(channel: tonic::transport::Channel) -> Result<String, tonic::Status> {
    pb::endorser_client::EndorserClient::new(channel)
        .endorse(pb::EndorseRequest::default())
        .await
        .map(|r| r.into_inner().tx_id)
}

#[tokio::test]
async fn the_table_and_the_presented_certificate_change_while_the_node_runs() {
    let ca = ca();
    let (cert_1, key_1, fp_1) = issue(&ca);
    let (cert_2, key_2, fp_2) = issue(&ca);
    let (cert_3, key_3, fp_3) = issue(&ca);
    wire::tls::install(NodeTls {
        ca_pem: ca.pem.clone().into_bytes(),
        cert_pem: cert_1.clone().into_bytes(),
        key_pem: key_1.into_bytes(),
        me: CLIENT,
        peers: HashMap::from([(fp_1, CLIENT)]),
    })
    .unwrap();
    let live = wire::tls::installed().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = wire::server::ServerLimits::default();
    let (incoming, _) = wire::server::incoming(listener, &limits);
    tokio::spawn(
        wire::server::builder(&limits)
            .add_service(pb::endorser_server::EndorserServer::new(Echo))
            .serve_with_incoming(incoming),
    );

    // Served with the certificate installed.
    assert_eq!(call_new(&addr).await.unwrap(), hex(&fp_1));
    let endpoint = wire::server::client_endpoint(format!("http://{addr}")).unwrap();
    let open = wire::server::connect(&endpoint).await.unwrap();
    assert_eq!(call(open.clone()).await.unwrap(), hex(&fp_1));

    // A next certificate the server does not list yet: the handshake is refused and the
    // client falls back to its previous certificate.
    assert_eq!(live.present(cert_2.as_bytes(), key_2.as_bytes()).unwrap(), fp_2);
    assert_eq!((live.presented(), live.previous()), (fp_2, Some(fp_1)));
    let refused_before = wire::tls::refused();
    assert_eq!(call_new(&addr).await.unwrap(), hex(&fp_1));
    assert!(
        wire::tls::refused() > refused_before,
        "the new certificate was refused at the handshake"
    );

    // Both listed (update A): new connections present the new certificate; the open one
    // keeps the old.
    assert_eq!(
        wire::tls::replace_peers(HashMap::from([(fp_1, CLIENT), (fp_2, CLIENT)])),
        0
    );
    assert_eq!(call_new(&addr).await.unwrap(), hex(&fp_2));
    assert_eq!(call(open.clone()).await.unwrap(), hex(&fp_1));

    // The old one removed (update B): its connections are closed; the channel
    // reconnects with the new certificate.
    let closed = wire::tls::replace_peers(HashMap::from([(fp_2, CLIENT)]));
    assert!(closed >= 1, "{closed}");
    live.keep_previous_if_listed(&[fp_2]);
    assert_eq!(live.previous(), None);
    let mut served = None;
    for _ in 0..50 {
        match call(open.clone()).await {
            Ok(fp) => {
                served = Some(fp);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(served, Some(hex(&fp_2)));

    // A certificate the table does not list, with no previous one to fall back to: the
    // connection is refused, the call never reaches the service.
    live.present(cert_3.as_bytes(), key_3.as_bytes()).unwrap();
    live.keep_previous_if_listed(&[]);
    let e = call_new(&addr).await.unwrap_err();
    assert!(
        matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Unknown),
        "{e:?}"
    );
    assert_eq!(live.holder_of(&fp_3), None);
    assert_eq!(live.holder_of(&fp_2), Some(CLIENT));
}
