//! The TLS material of a network (docs/tls.md, ADR 0011): a CA, one certificate per node
//! and one for clients, and the `tls` section of the config that lists every
//! certificate's holder (role, party, shard) by the SHA-256 of its DER — what a node
//! authorizes its callers by ([`wire::tls`]).
//!
//! Layout under the network directory:
//!
//! ```text
//! tls/ca.pem, tls/ca.key         the network CA (the key only to issue more certificates)
//! tls/<name>.pem, tls/<name>.key one per node (`router-1`, `batcher-1-0`, …), `client`
//!                                (tools, load generators) and `wallet` (token wallets)
//! ```
//!
//! TLS keys are always random (ECDSA P-256), also in a network generated with a seed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::file::{TlsCertFile, TlsFile};
use wire::tls::{NodeTls, Peer, Role};

/// `<dir>/tls`.
pub fn tls_dir(dir: &Path) -> PathBuf {
    dir.join("tls")
}

/// The certificate and key files of `name` (`router-1`, `client`, …) under `dir`.
pub fn tls_paths(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let d = tls_dir(dir);
    (d.join(format!("{name}.pem")), d.join(format!("{name}.key")))
}

/// The network directory of the config file at `config_path`
/// (`<dir>/config/network-config.json`).
pub fn network_dir(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The name of a node's certificate: `<role>-<party>` (`-<shard>` for a batcher); the
/// clients' is `client`, the wallets' `wallet`.
pub fn cert_name(peer: Peer) -> String {
    match (peer.role, peer.shard) {
        (Role::Client, _) => "client".into(),
        (Role::Wallet, _) => "wallet".into(),
        (role, Some(s)) => format!("{}-{}-{s}", role.name(), peer.party),
        (role, None) => format!("{}-{}", role.name(), peer.party),
    }
}

fn bad(reason: String) -> Error {
    Error::Tls { reason }
}

fn write(path: &Path, text: &str, secret: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(|e| Error::Write {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    f.write_all(text.as_bytes()).map_err(|e| Error::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Generates the CA and a certificate for each of `holders` (plus the clients' and the
/// wallets') under
/// `dir/tls`, every certificate naming `fabrx-node` and `host`; returns the config's
/// `tls` section.
pub(crate) fn generate(dir: &Path, host: &str, holders: &[Peer]) -> Result<TlsFile> {
    let err = |e: rcgen::Error| bad(e.to_string());
    let tls = tls_dir(dir);
    std::fs::create_dir_all(&tls).map_err(|e| Error::Write {
        path: tls.clone(),
        reason: e.to_string(),
    })?;
    let ca_key = rcgen::KeyPair::generate().map_err(err)?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "fabrx network CA");
    let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
    write(&tls.join("ca.pem"), &ca_cert.pem(), false)?;
    write(&tls.join("ca.key"), &ca_key.serialize_pem(), true)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut all: Vec<Peer> = holders.to_vec();
    for role in [Role::Client, Role::Wallet] {
        all.push(Peer {
            role,
            party: 0,
            shard: None,
        });
    }
    let mut certificates = Vec::with_capacity(all.len());
    for peer in all {
        let name = cert_name(peer);
        let key = rcgen::KeyPair::generate().map_err(err)?;
        let mut params =
            rcgen::CertificateParams::new(vec![wire::tls::SERVER_NAME.to_string(), host.to_string()])
                .map_err(err)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name.clone());
        let cert = params.signed_by(&key, &issuer).map_err(err)?;
        let (cert_path, key_path) = tls_paths(dir, &name);
        write(&cert_path, &cert.pem(), false)?;
        write(&key_path, &key.serialize_pem(), true)?;
        certificates.push(TlsCertFile {
            name,
            role: peer.role.name().to_string(),
            party: peer.party,
            shard: peer.shard,
            sha256: hex::encode(wire::tls::fingerprint(cert.der())),
        });
    }
    Ok(TlsFile {
        ca: ca_cert.pem(),
        certificates,
    })
}

/// The `tls` section, parsed: every certificate's holder by fingerprint.
pub(crate) fn parse(file: &TlsFile) -> Result<HashMap<[u8; 32], Peer>> {
    if !file.ca.contains("BEGIN CERTIFICATE") {
        return Err(bad("`ca` is not a PEM certificate".into()));
    }
    let mut peers = HashMap::with_capacity(file.certificates.len());
    for c in &file.certificates {
        let role =
            Role::parse(&c.role).ok_or_else(|| bad(format!("{}: unknown role {:?}", c.name, c.role)))?;
        let digest: [u8; 32] = hex::decode(&c.sha256)
            .ok()
            .and_then(|d| d.try_into().ok())
            .ok_or_else(|| bad(format!("{}: sha256 is not 64 hex digits", c.name)))?;
        let peer = Peer {
            role,
            party: c.party,
            shard: c.shard,
        };
        if peers.insert(digest, peer).is_some() {
            return Err(bad(format!("{}: a certificate listed twice", c.name)));
        }
    }
    Ok(peers)
}

impl crate::NetworkConfig {
    /// Whether the network's links use mutual TLS (the config has a `tls` section).
    pub fn tls_enabled(&self) -> bool {
        self.file.tls.is_some()
    }

    /// Whether the network has TLS and a certificate for `role` (networks generated
    /// before wallets had their own certificate have none for [`Role::Wallet`]).
    pub fn has_tls_role(&self, role: Role) -> Option<bool> {
        let tls = self.file.tls.as_ref()?;
        Some(tls.certificates.iter().any(|c| c.role == role.name()))
    }

    /// The TLS identity of `me` in the network whose config file is `config_path`
    /// (certificate and key from `<dir>/tls`), or `None` for a network without TLS.
    pub fn node_tls(&self, config_path: &Path, me: Peer) -> Result<Option<NodeTls>> {
        let Some(tls) = &self.file.tls else {
            return Ok(None);
        };
        let dir = network_dir(config_path);
        let (cert_path, key_path) = tls_paths(&dir, &cert_name(me));
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| Error::Read {
                path: p.to_path_buf(),
                reason: e.to_string(),
            })
        };
        Ok(Some(NodeTls {
            ca_pem: tls.ca.clone().into_bytes(),
            cert_pem: read(&cert_path)?,
            key_pem: read(&key_path)?,
            me,
            peers: self.tls_peers.clone(),
        }))
    }

    /// Installs this process's TLS identity, `role` of `party` (and `shard`), in the
    /// network whose config file is `config_path` (`wire::tls::install`; docs/tls.md):
    /// nodes at start, clients before they connect. Returns whether TLS is on (a network
    /// generated with `--insecure` has no `tls` section and nothing is installed).
    pub fn install_tls(
        &self,
        config_path: &Path,
        role: Role,
        party: u32,
        shard: Option<u32>,
    ) -> Result<bool> {
        // Clients and wallets are party 0; every node is one of the network's parties.
        if party != 0 && party > self.n() {
            return Err(Error::NotInNetwork {
                what: format!("party {party}"),
                range: format!("1..={}", self.n()),
            });
        }
        // A batcher's `shard` is its shard (an endorser's is its share index).
        if let Some(s) = shard
            && role == Role::Batcher
            && s >= self.shards().get()
        {
            return Err(Error::NotInNetwork {
                what: format!("shard {s}"),
                range: format!("0..{}", self.shards().get()),
            });
        }
        let me = Peer { role, party, shard };
        let Some(tls) = self.node_tls(config_path, me)? else {
            return Ok(false);
        };
        wire::tls::install(tls).map_err(|e| Error::Tls {
            reason: format!("installing the TLS identity of {me}: {e}"),
        })?;
        Ok(true)
    }

    /// Installs the wallets' identity (`tls/wallet.*`) of the network in `dir`; a network
    /// generated before wallets had their own uses the clients' (which may also read
    /// blocks). Returns whether TLS is on and whether the clients' identity stood in.
    pub fn install_wallet_tls(&self, dir: &Path) -> Result<(bool, bool)> {
        let path = crate::config_path(dir);
        if self.has_tls_role(Role::Wallet) == Some(false) {
            return Ok((self.install_tls(&path, Role::Client, 0, None)?, true));
        }
        Ok((self.install_tls(&path, Role::Wallet, 0, None)?, false))
    }

    /// Installs the clients' identity (`tls/client.*`) of the network in `dir`.
    pub fn install_client_tls(&self, dir: &Path) -> Result<bool> {
        self.install_tls(&crate::config_path(dir), Role::Client, 0, None)
    }
}
