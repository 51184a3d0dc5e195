//! The TLS state a node follows at run time (ADR 0019): the table of the network's
//! certificates and the certificate the node presents, both swappable while the node
//! serves and calls.
//!
//! tonic's own TLS settings fix the identity when a server or endpoint is built, so fabrx
//! does the TLS handshakes itself, with one rustls configuration per process whose
//! certificate resolver reads the identity in force at each handshake:
//!
//! * servers: [`accept`] turns a stream of accepted connections into TLS connections
//!   (handshakes run concurrently, each bounded by [`HANDSHAKE_TIMEOUT`]); each carries
//!   the fingerprint of its client's certificate ([`ConnInfo`]), which the authorization
//!   layer reads for every call;
//! * clients: [`super::Connector`] dials and runs the client handshake, presenting the identity
//!   in force when the connection is made (also when a channel reconnects).
//!
//! When the table changes ([`replace_peers`]), the connections whose client certificate
//! the new table no longer lists are closed: their clients reconnect with the certificate
//! they present by then, and calls on them would be refused anyway. Connections of
//! certificates still listed are left as they are, whatever the nodes present now.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::{NodeTls, Peer, TlsError, fingerprint};

/// Longest a server waits for a client to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 over TLS (ALPN).
const ALPN_H2: &[u8] = b"h2";

fn identity_error(what: &str, e: impl std::fmt::Display) -> TlsError {
    TlsError::Identity(format!("{what}: {e}"))
}

/// Every certificate of the network by fingerprint, with its holder.
type Table = HashMap<[u8; 32], Peer>;

/// The table in force, shared by the handshakes' check and the calls' authorization.
type SharedTable = Arc<RwLock<Arc<Table>>>;

/// A certificate and key in force, with the certificate's fingerprint.
struct Presented {
    fingerprint: [u8; 32],
    key: Arc<CertifiedKey>,
}

/// The identity both handshake sides present: read at each handshake.
#[derive(Debug)]
struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl Resolver {
    fn get(&self) -> Arc<CertifiedKey> {
        Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl rustls::server::ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

impl rustls::client::ResolvesClientCert for Resolver {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The server's check of a client certificate: signed by the network CA (webpki), and
/// listed in the table in force. A certificate the table does not list fails the
/// handshake, so that a client that presents a certificate a peer has not learned yet
/// (a node ahead of that peer by a config update) learns it at once and may present
/// its previous one ([`super::Connector`]).
#[derive(Debug)]
struct ListedClients {
    ca: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    peers: SharedTable,
}

impl rustls::server::danger::ClientCertVerifier for ListedClients {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.ca.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        let verified = self.ca.verify_client_cert(end_entity, intermediates, now)?;
        let fp = fingerprint(end_entity.as_ref());
        let listed = self
            .peers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(&fp);
        if listed {
            return Ok(verified);
        }
        super::count_refusal();
        tracing::warn!(
            sha256 = %hex_of(&fp[..8]),
            "connection refused: the client certificate is not one of this network's"
        );
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::ApplicationVerificationFailure,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.ca.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.ca.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.ca.supported_verify_schemes()
    }
}

/// A server connection's watch: closed when the table stops listing its client's
/// certificate.
#[derive(Debug)]
struct Watch {
    fingerprint: [u8; 32],
    closed: AtomicBool,
    waker: AtomicWaker,
}

impl Watch {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// The TLS state of a process that installed an identity ([`super::install`]).
pub struct LiveTls {
    me: Peer,
    peers: SharedTable,
    presented: RwLock<Arc<Presented>>,
    /// The certificate presented before the last [`LiveTls::present`], while the config in
    /// force still lists it: a client falls back to it when a server refuses the new one.
    previous: RwLock<Option<Arc<Presented>>>,
    resolver: Arc<Resolver>,
    previous_resolver: Arc<Resolver>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    server: Arc<rustls::ServerConfig>,
    pub(super) client: Arc<rustls::ClientConfig>,
    pub(super) previous_client: Arc<rustls::ClientConfig>,
    watches: Mutex<Vec<Weak<Watch>>>,
}

impl std::fmt::Debug for LiveTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTls")
            .field("me", &self.me)
            .field("presented", &hex_of(&self.presented()))
            .finish_non_exhaustive()
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The certified key of `cert_pem` (the chain, leaf first) and `key_pem`, and the leaf's
/// fingerprint.
fn certified_key(
    provider: &rustls::crypto::CryptoProvider,
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<Presented, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| identity_error("the certificate", e))?;
    let leaf = chain
        .first()
        .ok_or_else(|| TlsError::Identity("the certificate file holds no certificate".into()))?;
    let fingerprint = fingerprint(leaf.as_ref());
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| identity_error("the key", e))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| identity_error("the key", e))?;
    let key = CertifiedKey::new(chain, signing);
    key.keys_match()
        .map_err(|e| identity_error("the key and certificate", e))?;
    Ok(Presented {
        fingerprint,
        key: Arc::new(key),
    })
}

impl LiveTls {
    /// The state of `tls`: its identity presented, its table in force.
    pub(super) fn new(tls: NodeTls) -> Result<LiveTls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let presented = certified_key(&provider, &tls.cert_pem, &tls.key_pem)?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(&tls.ca_pem) {
            let ca = ca.map_err(|e| identity_error("the CA certificate", e))?;
            roots
                .add(ca)
                .map_err(|e| identity_error("the CA certificate", e))?;
        }
        let roots = Arc::new(roots);
        let resolver = Arc::new(Resolver {
            current: RwLock::new(Arc::clone(&presented.key)),
        });
        let previous_resolver = Arc::new(Resolver {
            current: RwLock::new(Arc::clone(&presented.key)),
        });
        let peers = Arc::new(RwLock::new(Arc::new(tls.peers)));
        let ca = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::clone(&roots),
            Arc::clone(&provider),
        )
        .build()
        .map_err(|e| identity_error("the client verifier", e))?;
        let verifier = Arc::new(ListedClients {
            ca,
            peers: Arc::clone(&peers),
        });
        let mut server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| identity_error("the server configuration", e))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(resolver.clone());
        server.alpn_protocols = vec![ALPN_H2.to_vec()];
        // No resumption: a resumed session would carry the client certificate of the
        // session it resumes, not the one the client presents now.
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
        let client_config = |resolver: Arc<Resolver>| -> Result<Arc<rustls::ClientConfig>, TlsError> {
            let mut client = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .map_err(|e| identity_error("the client configuration", e))?
                .with_root_certificates(Arc::clone(&roots))
                .with_client_cert_resolver(resolver);
            client.alpn_protocols = vec![ALPN_H2.to_vec()];
            client.resumption = rustls::client::Resumption::disabled();
            Ok(Arc::new(client))
        };
        let client = client_config(Arc::clone(&resolver))?;
        let previous_client = client_config(Arc::clone(&previous_resolver))?;
        Ok(LiveTls {
            me: tls.me,
            peers,
            presented: RwLock::new(Arc::new(presented)),
            previous: RwLock::new(None),
            resolver,
            previous_resolver,
            provider,
            server: Arc::new(server),
            client,
            previous_client,
            watches: Mutex::new(Vec::new()),
        })
    }

    /// Who this node is.
    pub fn me(&self) -> Peer {
        self.me
    }

    /// The table in force: every certificate of the network by fingerprint.
    pub fn peers(&self) -> Arc<HashMap<[u8; 32], Peer>> {
        Arc::clone(
            &self
                .peers
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The holder of the certificate with fingerprint `fp`, if the table in force lists it.
    pub fn holder_of(&self, fp: &[u8; 32]) -> Option<Peer> {
        self.peers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(fp)
            .copied()
    }

    /// The fingerprint of the certificate this node presents on new connections.
    pub fn presented(&self) -> [u8; 32] {
        self.presented
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fingerprint
    }

    /// Replaces the table; closes the server connections whose client certificate it no
    /// longer lists, and gives how many were closed.
    pub fn replace_peers(&self, peers: HashMap<[u8; 32], Peer>) -> usize {
        let peers = Arc::new(peers);
        *self
            .peers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::clone(&peers);
        let mut watches = self
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut closed = 0;
        watches.retain(|w| {
            let Some(watch) = w.upgrade() else {
                return false;
            };
            if peers.contains_key(&watch.fingerprint) {
                return true;
            }
            watch.close();
            closed += 1;
            false
        });
        closed
    }

    /// Presents `cert_pem` with `key_pem` on every connection made or accepted from now
    /// on (open connections keep theirs); the certificate presented until now becomes the
    /// one a client falls back to ([`super::Connector`]). Gives the certificate's fingerprint.
    pub fn present(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<[u8; 32], TlsError> {
        let presented = Arc::new(certified_key(&self.provider, cert_pem, key_pem)?);
        let fp = presented.fingerprint;
        let before = std::mem::replace(
            &mut *self
                .presented
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            Arc::clone(&presented),
        );
        *self
            .resolver
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::clone(&presented.key);
        if before.fingerprint != fp {
            *self
                .previous_resolver
                .current
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::clone(&before.key);
            *self
                .previous
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(before);
        }
        Ok(fp)
    }

    /// Forgets the certificate a client falls back to unless `listed` holds it (a config
    /// that no longer lists it: servers refuse it).
    pub fn keep_previous_if_listed(&self, listed: &[[u8; 32]]) {
        let mut previous = self
            .previous
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if previous
            .as_ref()
            .is_some_and(|p| !listed.contains(&p.fingerprint))
        {
            *previous = None;
        }
    }

    /// The fingerprint of the certificate a client falls back to, if any.
    pub fn previous(&self) -> Option<[u8; 32]> {
        self.previous
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|p| p.fingerprint)
    }

    fn watch(&self, fingerprint: [u8; 32]) -> Arc<Watch> {
        let watch = Arc::new(Watch {
            fingerprint,
            closed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        let mut watches = self
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Forget the connections gone (amortized: a sweep when the list doubles).
        if watches.len() >= 64 && watches.len().is_power_of_two() {
            watches.retain(|w| w.strong_count() > 0);
        }
        watches.push(Arc::downgrade(&watch));
        watch
    }
}

/// What a server connection tells each call about itself (in the request's extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo<T> {
    /// The transport's own info (addresses).
    pub inner: T,
    /// The fingerprint of the client's certificate (`None`: no TLS).
    pub client_cert: Option<[u8; 32]>,
}

enum ServerIo<IO> {
    Plain(IO),
    Tls(Box<tokio_rustls::server::TlsStream<IO>>),
}

/// An accepted connection: TLS when the process installed an identity, else plain.
pub struct ServerConn<IO> {
    io: ServerIo<IO>,
    client_cert: Option<[u8; 32]>,
    watch: Option<Arc<Watch>>,
}

impl<IO: Connected> Connected for ServerConn<IO> {
    type ConnectInfo = ConnInfo<IO::ConnectInfo>;

    fn connect_info(&self) -> Self::ConnectInfo {
        let inner = match &self.io {
            ServerIo::Plain(io) => io.connect_info(),
            ServerIo::Tls(tls) => tls.get_ref().0.connect_info(),
        };
        ConnInfo {
            inner,
            client_cert: self.client_cert,
        }
    }
}

impl<IO> ServerConn<IO> {
    fn closed(&self, cx: &Context<'_>) -> bool {
        self.watch.as_ref().is_some_and(|w| {
            w.waker.register(cx.waker());
            w.is_closed()
        })
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for ServerConn<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.closed(cx) {
            // End of stream: the server closes the connection.
            return Poll::Ready(Ok(()));
        }
        match &mut this.io {
            ServerIo::Plain(io) => Pin::new(io).poll_read(cx, buf),
            ServerIo::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ServerConn<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.closed(cx) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the client's certificate is no longer one of the network's",
            )));
        }
        match &mut this.io {
            ServerIo::Plain(io) => Pin::new(io).poll_write(cx, data),
            ServerIo::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            ServerIo::Plain(io) => Pin::new(io).poll_flush(cx),
            ServerIo::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            ServerIo::Plain(io) => Pin::new(io).poll_shutdown(cx),
            ServerIo::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connections a server serves (`serve_with_incoming`).
pub type Accepted<IO> = ReceiverStream<io::Result<ServerConn<IO>>>;

/// The connections of `incoming` as a fabrx server serves them: with TLS installed, each
/// after its handshake (a client that does not complete one in [`HANDSHAKE_TIMEOUT`], or
/// whose certificate the CA did not sign, is dropped); without, as they are. Ends when
/// `incoming` ends or the returned stream is dropped.
pub fn accept<S, IO>(incoming: S) -> Accepted<IO>
where
    S: futures::Stream<Item = io::Result<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(accept_loop(incoming, tx));
    ReceiverStream::new(rx)
}

async fn accept_loop<S, IO>(incoming: S, tx: mpsc::Sender<io::Result<ServerConn<IO>>>)
where
    S: futures::Stream<Item = io::Result<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    use futures::StreamExt as _;
    let mut incoming = std::pin::pin!(incoming);
    let mut handshakes = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = tx.closed() => return,
            Some(done) = handshakes.join_next(), if !handshakes.is_empty() => {
                if let Ok(Some(conn)) = done
                    && tx.send(Ok(conn)).await.is_err()
                {
                    return;
                }
            }
            next = incoming.next() => match next {
                None => return,
                Some(Err(e)) => tracing::debug!(error = %e, "accept failed"),
                Some(Ok(io)) => match super::installed() {
                    None => {
                        let conn = ServerConn { io: ServerIo::Plain(io), client_cert: None, watch: None };
                        if tx.send(Ok(conn)).await.is_err() {
                            return;
                        }
                    }
                    Some(live) => {
                        handshakes.spawn(handshake(live, io));
                    }
                },
            },
        }
    }
}

async fn handshake<IO>(live: Arc<LiveTls>, io: IO) -> Option<ServerConn<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&live.server));
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            return None;
        }
    };
    let client_cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| fingerprint(c.as_ref()));
    let watch = client_cert.map(|fp| live.watch(fp));
    Some(ServerConn {
        io: ServerIo::Tls(Box::new(tls)),
        client_cert,
        watch,
    })
}
