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

pub mod follow;
pub mod rotate;

use crate::error::{Error, Result};
use crate::file::{TlsCertFile, TlsFile};
use wire::tls::{Peer, Role};

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
            pem: None,
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
    let mut names = std::collections::HashSet::with_capacity(file.certificates.len());
    for c in &file.certificates {
        if !names.insert(c.name.as_str()) {
            return Err(bad(format!("{}: a certificate name listed twice", c.name)));
        }
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
