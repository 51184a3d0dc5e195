//! Mutual TLS and role authorization on every link (issue #12; docs/tls.md): a network
//! started by `fabrx up` (TLS by default, 29 processes) is called, link kind by link
//! kind, with certificates of the network that belong to a role the link does not
//! admit — each is refused PERMISSION_DENIED — and the right role is served. A client
//! without a certificate, with a certificate of another CA, or speaking plain HTTP/2 is
//! refused at the connection.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{bin, free_base_port};

use std::path::{Path, PathBuf};
use std::process::Command;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use wire::pb;

struct Net {
    dir: PathBuf,
    nodes: serde_json::Value,
}

impl Net {
    fn listen(&self, name: &str) -> String {
        self.nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))["listen"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// A TLS channel to node `to`, presenting certificate `cert` (`None`: none).
    fn channel(&self, to: &str, cert: Option<&str>) -> Channel {
        let tls = self.dir.join("tls");
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(std::fs::read(tls.join("ca.pem")).unwrap()))
            .domain_name(wire::tls::SERVER_NAME);
        if let Some(name) = cert {
            config = config.identity(Identity::from_pem(
                std::fs::read(tls.join(format!("{name}.pem"))).unwrap(),
                std::fs::read(tls.join(format!("{name}.key"))).unwrap(),
            ));
        }
        Endpoint::from_shared(format!("https://{}", self.listen(to)))
            .unwrap()
            .tls_config(config)
            .unwrap()
            .connect_lazy()
    }
}

fn denied<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    match r {
        Err(s) if s.code() == tonic::Code::PermissionDenied => {}
        other => panic!("{what}: expected PERMISSION_DENIED, got {other:?}"),
    }
}

fn served<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    if let Err(s) = &r {
        assert!(
            !matches!(
                s.code(),
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            ),
            "{what}: refused: {s:?}"
        );
    }
}

fn refused_at_connection<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    match r {
        // A failed handshake or a protocol error (the code depends on when the server
        // hung up): the error comes from the transport, the call never reached a service.
        Err(s) if std::error::Error::source(&s).is_some_and(|e| e.is::<tonic::transport::Error>()) => {}
        other => panic!("{what}: expected the connection to fail, got {other:?}"),
    }
}

fn up(dir: &Path) -> serde_json::Value {
    let base = free_base_port().to_string();
    let out = Command::new(bin())
        .args(["up", "--seed", "12", "--base-port", &base, "--json", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&std::fs::read_to_string(dir.join("network.json")).unwrap()).unwrap()
}

#[test]
fn every_link_admits_only_its_roles() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let net = Net {
        nodes: up(&dir),
        dir: dir.clone(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use pb::assembler_client::AssemblerClient;
        use pb::batcher_intake_client::BatcherIntakeClient;
        use pb::batcher_peer_client::BatcherPeerClient;
        use pb::bft_consensus_client::BftConsensusClient;
        use pb::consenter_client::ConsenterClient;
        use pb::router_client::RouterClient;
        use pb::sidecar_client::SidecarClient;
        use pb::sig_verifier_client::SigVerifierClient;
        use pb::vc_service_client::VcServiceClient;

        // Clients → routers.
        let r = |cert| RouterClient::new(net.channel("router-1", Some(cert)));
        denied(
            r("batcher-1-0").submit(none()).await,
            "a batcher submitting to a router",
        );
        served(
            r("client").submit(none()).await,
            "a client submitting to a router",
        );

        // Routers → their own party's batchers.
        let intake = |cert| BatcherIntakeClient::new(net.channel("batcher-1-0", Some(cert)));
        denied(intake("router-2").intake(none()).await, "another party's router");
        denied(
            intake("client").intake(none()).await,
            "a client at a batcher's intake",
        );
        served(intake("router-1").intake(none()).await, "the party's own router");

        // Batchers of one shard among themselves; assemblers pull.
        let peer = |cert| BatcherPeerClient::new(net.channel("batcher-1-0", Some(cert)));
        denied(
            peer("batcher-2-1").fetch(pb::FetchRequest::default()).await,
            "a batcher of another shard",
        );
        denied(
            peer("router-1").pull(pb::PullRequest::default()).await,
            "a router pulling batches",
        );
        served(
            peer("batcher-2-0").fetch(pb::FetchRequest::default()).await,
            "a batcher of the shard",
        );
        served(
            peer("assembler-3").pull(pb::PullRequest::default()).await,
            "an assembler pulling",
        );

        // Consenters exchange; batchers submit; decisions for batchers and assemblers.
        let bft = |cert| BftConsensusClient::new(net.channel("consenter-1", Some(cert)));
        denied(
            bft("batcher-1-0").exchange(none()).await,
            "a batcher in the consensus exchange",
        );
        denied(
            bft("assembler-1").submit(pb::BftSubmitRequest::default()).await,
            "an assembler submitting to the consenters",
        );
        served(bft("consenter-2").exchange(none()).await, "another consenter");
        let decisions = |cert| ConsenterClient::new(net.channel("consenter-1", Some(cert)));
        denied(
            decisions("router-1")
                .decisions(pb::DecisionsRequest::default())
                .await,
            "a router reading decisions",
        );
        served(
            decisions("assembler-1")
                .decisions(pb::DecisionsRequest { from: 1 })
                .await,
            "an assembler reading decisions",
        );

        // Blocks for sidecars and clients.
        let deliver = |cert| AssemblerClient::new(net.channel("assembler-1", Some(cert)));
        denied(
            deliver("router-1").deliver(pb::DeliverRequest::default()).await,
            "a router reading blocks",
        );
        served(
            deliver("client").deliver(pb::DeliverRequest::default()).await,
            "a client reading blocks",
        );

        // A committing party's own sidecar drives its verifier and validator-committer.
        let verify = |cert| SigVerifierClient::new(net.channel("sigverifier-1", Some(cert)));
        denied(verify("client").verify(none()).await, "a client at the verifier");
        denied(
            verify("sidecar-2").verify(none()).await,
            "another party's sidecar",
        );
        let vc = |cert| VcServiceClient::new(net.channel("vcservice-1", Some(cert)));
        denied(
            vc("client")
                .get_next_block(pb::LastCommittedRequest::default())
                .await,
            "a client at the vcservice",
        );
        denied(
            vc("sidecar-3")
                .get_next_block(pb::LastCommittedRequest::default())
                .await,
            "another party's sidecar at the vcservice",
        );
        served(
            vc("sidecar-1")
                .get_next_block(pb::LastCommittedRequest::default())
                .await,
            "the party's own sidecar",
        );

        // Notifications and lookups for clients.
        let sidecar = |cert| SidecarClient::new(net.channel("sidecar-1", Some(cert)));
        denied(
            sidecar("assembler-1")
                .get_next_block(pb::LastCommittedRequest::default())
                .await,
            "an assembler at the sidecar",
        );
        served(
            sidecar("client")
                .get_next_block(pb::LastCommittedRequest::default())
                .await,
            "a client at the sidecar",
        );

        // The token application: the query service reads its own party's
        // validator-committer; endorsers read its rows, clients their tokens and statuses;
        // clients ask the endorsers.
        let rows = || pb::RowsQuery {
            namespace: "token".into(),
            keys: vec![b"k".to_vec()],
        };
        denied(
            vc("client").read_rows(rows()).await,
            "a client reading the vcservice",
        );
        denied(
            vc("query-2").read_rows(rows()).await,
            "another party's query service",
        );
        denied(
            vc("query-1")
                .set_last_committed(pb::SetLastCommittedRequest::default())
                .await,
            "the query service writing",
        );
        served(
            vc("query-1").read_rows(rows()).await,
            "the party's own query service",
        );
        let query = |cert| pb::query_client::QueryClient::new(net.channel("query-1", Some(cert)));
        denied(
            query("router-1").get_rows(rows()).await,
            "a router at the query service",
        );
        // Rows by key are the endorsers' input checks only; a client reads its own tokens
        // (a signed read, checked by the service itself) and statuses.
        denied(
            query("client").get_rows(rows()).await,
            "a client reading rows by key",
        );
        served(
            query("client")
                .get_tx_status(pb::StatusQuery {
                    tx_ids: vec!["t".into()],
                })
                .await,
            "a client asking statuses",
        );
        served(
            query("endorser-1-1").get_rows(rows()).await,
            "an endorser at the query service",
        );
        // A wallet's certificate: what a payment needs, and no blocks.
        served(
            query("wallet")
                .get_tx_status(pb::StatusQuery {
                    tx_ids: vec!["t".into()],
                })
                .await,
            "a wallet asking statuses",
        );
        denied(
            query("wallet").get_rows(rows()).await,
            "a wallet reading rows by key",
        );
        denied(
            pb::assembler_client::AssemblerClient::new(net.channel("assembler-1", Some("wallet")))
                .deliver(pb::DeliverRequest::default())
                .await,
            "a wallet reading blocks",
        );
        let endorse = |cert| pb::endorser_client::EndorserClient::new(net.channel("endorser-1", Some(cert)));
        denied(
            endorse("sidecar-1").endorse(pb::EndorseRequest::default()).await,
            "a sidecar at an endorser",
        );
        served(
            endorse("client").endorse(pb::EndorseRequest::default()).await,
            "a client at an endorser",
        );

        // No certificate, a certificate of another CA, plain HTTP/2: no connection.
        refused_at_connection(
            RouterClient::new(net.channel("router-1", None))
                .submit(none())
                .await,
            "no client certificate",
        );
        let stranger = rcgen_stranger();
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(
                std::fs::read(net.dir.join("tls/ca.pem")).unwrap(),
            ))
            .domain_name(wire::tls::SERVER_NAME)
            .identity(Identity::from_pem(stranger.0, stranger.1));
        let foreign = Endpoint::from_shared(format!("https://{}", net.listen("router-1")))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect_lazy();
        refused_at_connection(
            RouterClient::new(foreign).submit(none()).await,
            "a certificate of another CA",
        );
        let plain = Endpoint::from_shared(format!("http://{}", net.listen("router-1")))
            .unwrap()
            .connect_lazy();
        refused_at_connection(RouterClient::new(plain).submit(none()).await, "plain HTTP/2");
    });
    drop(rt);
    // The refusals were logged by the nodes that refused.
    let log = std::fs::read_to_string(dir.join("logs/vcservice-1.log")).unwrap();
    assert!(log.contains("call refused"), "the vcservice logged its refusals");
    let down = Command::new(bin())
        .args(["down", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(down.status.success());
}

/// An empty request stream.
fn none<T>() -> tokio_stream::Iter<std::vec::IntoIter<T>> {
    tokio_stream::iter(Vec::new())
}

/// A certificate and key signed by a CA that is not the network's.
fn rcgen_stranger() -> (String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![wire::tls::SERVER_NAME.to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}
