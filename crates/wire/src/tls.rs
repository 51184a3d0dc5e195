//! Mutual TLS and role authorization on every fabrx gRPC link (docs/tls.md, ADR 0011,
//! ADR 0019).
//!
//! A node process installs its TLS identity at start ([`install`]): the network CA, its
//! own certificate and key, who it is ([`Peer`]: role, party, shard) and the roles of
//! every certificate of the network, by the SHA-256 of the certificate's DER. From then
//! on every server built by [`crate::server::builder`] and serving [`accept`]ed
//! connections requires a client certificate signed by the CA, and every client channel
//! made by [`crate::server::connect`] presents the node's certificate and checks the
//! server's against the CA. Authorization is by certificate, not by name: a call is
//! served only when the caller's certificate is one the network lists and its role may
//! call that method on this node ([`allowed`]); anything else is answered
//! PERMISSION_DENIED and counted ([`refused`]). A process that installs nothing (tests,
//! `--insecure` networks) speaks plain HTTP/2 and authorizes every call.
//!
//! The table and the presented certificate follow the network config in force
//! ([`replace_peers`], [`present`]; ADR 0019): a config update rotates certificates
//! without a restart.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use sha2::{Digest, Sha256};
use tonic::transport::server::TcpConnectInfo;

mod connector;
mod live;

pub use connector::{ClientConn, ClientTls, Connector};
pub use live::{Accepted, ConnInfo, HANDSHAKE_TIMEOUT, LiveTls, ServerConn, accept};

/// The name every fabrx node certificate carries and every client checks (the
/// certificates also carry the node's IP address).
pub const SERVER_NAME: &str = "fabrx-node";

/// The role a certificate speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A party's router.
    Router,
    /// A party's batcher of one shard.
    Batcher,
    /// A party's consenter.
    Consenter,
    /// A party's assembler.
    Assembler,
    /// A committing party's sidecar.
    Sidecar,
    /// A committing party's signature verifier.
    Sigverifier,
    /// A committing party's validator-committer.
    Vcservice,
    /// A committing party's query service.
    Query,
    /// A token endorser.
    Endorser,
    /// A client: load generator, tools (`fabrx blocks`, `fabrx status`).
    Client,
    /// A token wallet: submits, asks endorsers, reads its own tokens and statuses, and
    /// nothing else (it cannot read blocks: docs/token.md "Who may read what").
    Wallet,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 11] = [
        Role::Router,
        Role::Batcher,
        Role::Consenter,
        Role::Assembler,
        Role::Sidecar,
        Role::Sigverifier,
        Role::Vcservice,
        Role::Query,
        Role::Endorser,
        Role::Client,
        Role::Wallet,
    ];

    /// The role's name (as in `network.json`).
    pub fn name(self) -> &'static str {
        match self {
            Role::Router => "router",
            Role::Batcher => "batcher",
            Role::Consenter => "consenter",
            Role::Assembler => "assembler",
            Role::Sidecar => "sidecar",
            Role::Sigverifier => "sigverifier",
            Role::Vcservice => "vcservice",
            Role::Query => "query",
            Role::Endorser => "endorser",
            Role::Client => "client",
            Role::Wallet => "wallet",
        }
    }

    /// The role named `name`.
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// Who holds a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    /// Its role.
    pub role: Role,
    /// Its party (1..N).
    pub party: u32,
    /// Its shard (batchers only).
    pub shard: Option<u32>,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.shard {
            Some(s) => write!(f, "party {}'s {} of shard {s}", self.party, self.role.name()),
            None => write!(f, "party {}'s {}", self.party, self.role.name()),
        }
    }
}

/// Whether `peer` may call the gRPC method at `path` (`/fabrx.v1.Service/Method`) on a
/// server run by `me`: each role reaches only what its protocol needs.
pub fn allowed(me: Peer, peer: Peer, path: &str) -> bool {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or("");
    let method = parts.next().unwrap_or("");
    let own_party = peer.party == me.party;
    match (service, peer.role) {
        // Clients and wallets submit to any router; a router forwards to its own party's
        // batchers.
        ("fabrx.v1.Router", Role::Client) => true,
        // A wallet submits transactions, never config updates (which a router hands on
        // to the consenters under its own identity).
        ("fabrx.v1.Router", Role::Wallet) => matches!(method, "Submit" | "SubmitMany"),
        // Fabric's ordering API (docs/fabric.md): clients broadcast to a router and read
        // blocks from an assembler.
        ("orderer.AtomicBroadcast", Role::Client) => match me.role {
            Role::Router => method == "Broadcast",
            Role::Assembler => method == "Deliver",
            _ => false,
        },
        ("fabrx.v1.BatcherIntake", Role::Router) => own_party,
        // Batchers of one shard pull, fetch, ack and forward among themselves;
        // assemblers pull and fetch batches.
        ("fabrx.v1.BatcherPeer", Role::Batcher) => peer.shard == me.shard && !own_party,
        ("fabrx.v1.BatcherPeer", Role::Assembler) => matches!(method, "Pull" | "Fetch"),
        // Consenters exchange consensus messages; batchers submit BAFs and complaints.
        ("fabrx.v1.BftConsensus", Role::Consenter) => matches!(method, "Exchange" | "Status"),
        ("fabrx.v1.BftConsensus", Role::Batcher) => matches!(method, "Submit" | "Status"),
        // A client submits config updates only (their admin signatures authorize them;
        // the consenter refuses anything else from a client).
        ("fabrx.v1.BftConsensus", Role::Client) => matches!(method, "Submit" | "Status"),
        // A router asks for the config in force, whose TLS section it follows (ADR 0019),
        // and hands on the config updates its clients submit (config updates only: the
        // consenter refuses anything else from a router).
        ("fabrx.v1.BftConsensus", Role::Router) => matches!(method, "Status" | "Submit"),
        // Decided headers: batchers (terms), assemblers (blocks), consenters, tools.
        ("fabrx.v1.Consenter", Role::Batcher | Role::Assembler | Role::Consenter | Role::Client) => true,
        // Blocks: sidecars, other assemblers, tools.
        ("fabrx.v1.Assembler", Role::Sidecar | Role::Assembler | Role::Client) => true,
        // A committing party's own sidecar drives its verifier and validator-committer.
        ("fabrx.v1.SigVerifier" | "fabrx.v1.VcService" | "fabrx.v1.Coordinator", Role::Sidecar) => own_party,
        // A committing party's query service reads its own validator-committers.
        ("fabrx.v1.VcService", Role::Query) => {
            own_party && matches!(method, "ReadRows" | "OwnedRows" | "GetStatuses" | "GetNextBlock")
        }
        // Notifications and lookups for clients; status notifications for wallets.
        ("fabrx.v1.Sidecar", Role::Client) => true,
        ("fabrx.v1.Sidecar", Role::Wallet) => matches!(method, "Subscribe" | "GetTxStatus"),
        // Committed state: rows by key for the endorsers' input checks only; owners'
        // tokens (signed reads, checked by the service) and statuses for clients.
        ("fabrx.v1.Query", Role::Endorser) => true,
        ("fabrx.v1.Query", Role::Client | Role::Wallet) => matches!(method, "GetOwned" | "GetTxStatus"),
        // Wallets (and tools) ask the endorsers to endorse token requests.
        ("fabrx.v1.Endorser", Role::Client | Role::Wallet) => true,
        _ => false,
    }
}

/// A node's TLS identity and the network's certificates.
pub struct NodeTls {
    /// The network CA's certificate (PEM).
    pub ca_pem: Vec<u8>,
    /// This node's certificate (PEM), signed by the CA.
    pub cert_pem: Vec<u8>,
    /// This node's private key (PEM).
    pub key_pem: Vec<u8>,
    /// Who this node is.
    pub me: Peer,
    /// Every certificate of the network by the SHA-256 of its DER, with its holder.
    pub peers: HashMap<[u8; 32], Peer>,
}

impl NodeTls {
    /// The holder of the certificate with DER `der`, if the network lists it.
    pub fn holder(&self, der: &[u8]) -> Option<Peer> {
        self.peers.get(&fingerprint(der)).copied()
    }
}

/// The SHA-256 of a certificate's DER: how the network config names certificates.
pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    Sha256::digest(der).into()
}

/// Why TLS could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A second installation in one process.
    #[error("TLS is already installed in this process")]
    AlreadyInstalled,
    /// The certificate or key does not make a server or client configuration.
    #[error("TLS identity: {0}")]
    Identity(String),
    /// An identity change in a process without TLS.
    #[error("TLS is not installed in this process")]
    NotInstalled,
}

static INSTALLED: OnceLock<Arc<LiveTls>> = OnceLock::new();
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Installs `tls` for this process (once, before any server or client is built).
pub fn install(tls: NodeTls) -> Result<(), TlsError> {
    let live = LiveTls::new(tls)?;
    INSTALLED
        .set(Arc::new(live))
        .map_err(|_| TlsError::AlreadyInstalled)
}

/// The installed TLS state, if any.
pub fn installed() -> Option<Arc<LiveTls>> {
    INSTALLED.get().cloned()
}

/// Replaces the table of the network's certificates (a config put in force, ADR 0019) and
/// closes the connections of clients whose certificate it no longer lists. Gives how
/// many were closed; without TLS installed, does nothing.
pub fn replace_peers(peers: HashMap<[u8; 32], Peer>) -> usize {
    INSTALLED.get().map_or(0, |live| live.replace_peers(peers))
}

/// Presents `cert_pem` and `key_pem` on the connections made and accepted from now on
/// (ADR 0019); gives the certificate's fingerprint. Without TLS installed, refused.
pub fn present(cert_pem: &[u8], key_pem: &[u8]) -> Result<[u8; 32], TlsError> {
    INSTALLED
        .get()
        .ok_or(TlsError::NotInstalled)?
        .present(cert_pem, key_pem)
}

/// `uri` as fabrx clients dial it: the scheme does not choose TLS (the installation
/// does, [`Connector`]), so `https://` is dialled as `http://` by the transport.
pub fn uri(uri: String) -> String {
    match uri.strip_prefix("https://") {
        Some(rest) => format!("http://{rest}"),
        None => uri,
    }
}

/// The fingerprint of the certificate the caller of `request` presented (`None` without
/// TLS).
pub fn caller_certificate<T>(request: &tonic::Request<T>) -> Option<[u8; 32]> {
    request
        .extensions()
        .get::<ConnInfo<TcpConnectInfo>>()
        .and_then(|c| c.client_cert)
}

/// Counts one refusal (a call, or a connection whose certificate is not listed).
fn count_refusal() {
    REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// Calls refused by authorization in this process so far.
pub fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// The authenticated caller of a call this process serves (its certificate's holder), as
/// the authorization layer recorded it; `None` without TLS (an `--insecure` network),
/// where no caller is authenticated.
pub fn caller<T>(request: &tonic::Request<T>) -> Option<Peer> {
    request.extensions().get::<Peer>().copied()
}

/// The authorization check of one call: the authenticated caller, or `Err` with the
/// status to answer.
fn authorize<B>(tls: &LiveTls, req: &http::Request<B>) -> Result<Peer, tonic::Status> {
    let path = req.uri().path();
    let leaf = req
        .extensions()
        .get::<ConnInfo<TcpConnectInfo>>()
        .and_then(|c| c.client_cert);
    let Some(leaf) = leaf else {
        return Err(tonic::Status::unauthenticated(
            "no client certificate: fabrx nodes accept only mutually authenticated TLS",
        ));
    };
    let Some(peer) = tls.holder_of(&leaf) else {
        return Err(tonic::Status::permission_denied(
            "the client certificate is not one of this network's",
        ));
    };
    if allowed(tls.me(), peer, path) {
        Ok(peer)
    } else {
        Err(tonic::Status::permission_denied(format!(
            "{peer} may not call {path} on {}",
            tls.me()
        )))
    }
}

/// The layer every fabrx server carries: with TLS installed, a call is passed on only
/// when its caller is authorized ([`allowed`]); without, every call is.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuthLayer {
    deny: bool,
}

impl AuthLayer {
    /// A layer that refuses every call (a server whose TLS setup failed).
    pub fn deny_all() -> AuthLayer {
        AuthLayer { deny: true }
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Auth<S> {
        Auth {
            inner,
            deny: self.deny,
        }
    }
}

/// The service of [`AuthLayer`].
#[derive(Debug, Clone)]
pub struct Auth<S> {
    inner: S,
    deny: bool,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower_service::Service<http::Request<B>> for Auth<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let verdict = match INSTALLED.get() {
            _ if self.deny => Err(tonic::Status::unavailable("this server's TLS setup failed")),
            Some(tls) => authorize(tls, &req).map(Some),
            None => Ok(None),
        };
        match verdict {
            Err(status) => {
                count_refusal();
                tracing::warn!(path = req.uri().path(), reason = status.message(), "call refused");
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
            Ok(caller) => {
                // Handlers read it with [`caller`]: who is calling is known from the
                // certificate, never taken from a message field.
                if let Some(peer) = caller {
                    req.extensions_mut().insert(peer);
                }
                Box::pin(self.inner.call(req))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(role: Role, party: u32, shard: Option<u32>) -> Peer {
        Peer { role, party, shard }
    }

    #[test]
    #[allow(clippy::too_many_lines)]
    fn each_link_admits_only_its_roles() {
        let batcher = p(Role::Batcher, 1, Some(0));
        assert!(allowed(
            batcher,
            p(Role::Router, 1, None),
            "/fabrx.v1.BatcherIntake/Intake"
        ));
        assert!(!allowed(
            batcher,
            p(Role::Router, 2, None),
            "/fabrx.v1.BatcherIntake/Intake"
        ));
        assert!(!allowed(
            batcher,
            p(Role::Client, 1, None),
            "/fabrx.v1.BatcherIntake/Intake"
        ));
        assert!(allowed(
            batcher,
            p(Role::Batcher, 2, Some(0)),
            "/fabrx.v1.BatcherPeer/Pull"
        ));
        assert!(!allowed(
            batcher,
            p(Role::Batcher, 2, Some(1)),
            "/fabrx.v1.BatcherPeer/Pull"
        ));
        assert!(allowed(
            batcher,
            p(Role::Assembler, 3, None),
            "/fabrx.v1.BatcherPeer/Fetch"
        ));
        assert!(!allowed(
            batcher,
            p(Role::Assembler, 3, None),
            "/fabrx.v1.BatcherPeer/Ack"
        ));
        let consenter = p(Role::Consenter, 2, None);
        assert!(allowed(
            consenter,
            p(Role::Consenter, 3, None),
            "/fabrx.v1.BftConsensus/Exchange"
        ));
        assert!(!allowed(
            consenter,
            p(Role::Batcher, 3, Some(0)),
            "/fabrx.v1.BftConsensus/Exchange"
        ));
        assert!(allowed(
            consenter,
            p(Role::Batcher, 3, Some(0)),
            "/fabrx.v1.BftConsensus/Submit"
        ));
        assert!(allowed(
            consenter,
            p(Role::Client, 3, None),
            "/fabrx.v1.BftConsensus/Submit"
        ));
        // Through a router, clients submit config updates; wallets only transactions.
        let router = p(Role::Router, 3, None);
        for (caller, method, ok) in [
            (Role::Client, "SubmitConfigUpdate", true),
            (Role::Client, "SubmitMany", true),
            (Role::Wallet, "SubmitConfigUpdate", false),
            (Role::Wallet, "Submit", true),
            (Role::Wallet, "SubmitMany", true),
        ] {
            let path = format!("/fabrx.v1.Router/{method}");
            assert_eq!(
                allowed(router, p(caller, 1, None), &path),
                ok,
                "{caller:?} {method}"
            );
        }
        // A router hands on config updates (the consenter takes nothing else from it).
        assert!(allowed(
            consenter,
            p(Role::Router, 3, None),
            "/fabrx.v1.BftConsensus/Submit"
        ));
        assert!(!allowed(
            consenter,
            p(Role::Router, 3, None),
            "/fabrx.v1.BftConsensus/Exchange"
        ));
        assert!(allowed(
            consenter,
            p(Role::Router, 3, None),
            "/fabrx.v1.BftConsensus/Status"
        ));
        assert!(!allowed(
            consenter,
            p(Role::Router, 2, None),
            "/fabrx.v1.Consenter/Decisions"
        ));
        let router = p(Role::Router, 1, None);
        assert!(allowed(
            router,
            p(Role::Client, 4, None),
            "/fabrx.v1.Router/Submit"
        ));
        assert!(!allowed(
            router,
            p(Role::Batcher, 1, Some(0)),
            "/fabrx.v1.Router/Submit"
        ));
        let vc = p(Role::Vcservice, 1, None);
        assert!(allowed(
            vc,
            p(Role::Sidecar, 1, None),
            "/fabrx.v1.VcService/Commit"
        ));
        assert!(!allowed(
            vc,
            p(Role::Sidecar, 2, None),
            "/fabrx.v1.VcService/Commit"
        ));
        assert!(!allowed(
            vc,
            p(Role::Client, 1, None),
            "/fabrx.v1.VcService/Commit"
        ));
        let sidecar = p(Role::Sidecar, 1, None);
        assert!(allowed(
            sidecar,
            p(Role::Client, 3, None),
            "/fabrx.v1.Sidecar/Subscribe"
        ));
        assert!(!allowed(
            sidecar,
            p(Role::Assembler, 1, None),
            "/fabrx.v1.Sidecar/Subscribe"
        ));
        let assembler = p(Role::Assembler, 2, None);
        assert!(allowed(
            assembler,
            p(Role::Sidecar, 1, None),
            "/fabrx.v1.Assembler/Deliver"
        ));
        assert!(!allowed(
            assembler,
            p(Role::Router, 1, None),
            "/fabrx.v1.Assembler/Deliver"
        ));
        assert!(!allowed(
            assembler,
            p(Role::Client, 1, None),
            "/fabrx.v1.Unknown/X"
        ));
    }

    #[test]
    fn roles_round_trip_by_name() {
        for r in Role::ALL {
            assert_eq!(Role::parse(r.name()), Some(r));
        }
        assert_eq!(Role::parse("nobody"), None);
    }
}
