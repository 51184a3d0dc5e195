//! A node follows the `tls` section of the config in force (ADR 0019): the table of the
//! network's certificates becomes the one its servers authorize callers by, and it
//! presents the **last** certificate the section lists for it among those whose files it
//! holds (`tls/<name>.pem` and `.key` in its network directory).
//!
//! An update that adds a node's next certificate therefore makes the node present it from
//! that update on (both are authorized then), and the update that removes the old one
//! closes the connections still made with it (their clients reconnect with the new one).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use wire::tls::Peer;

use super::tls_paths;
use crate::config::NetworkConfig;
use crate::file::TlsFile;

/// The network directory of this process's TLS files, set when it installs its identity.
static NETWORK_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The sequence of the newest config followed (`u64::MAX`: none yet): an older config
/// handed over later (a replay, a slower source) changes nothing.
static FOLLOWED: AtomicU64 = AtomicU64::new(u64::MAX);

/// Records where this process's certificate files are (`<dir>/tls`).
pub(crate) fn remember_dir(dir: &Path) {
    let _ = NETWORK_DIR.set(dir.to_path_buf());
}

/// The names and fingerprints the section lists for `me`, in list order.
pub fn listed_for(tls: &TlsFile, me: Peer) -> Vec<(String, [u8; 32])> {
    tls.certificates
        .iter()
        .filter(|c| c.role == me.role.name() && c.party == me.party && c.shard == me.shard)
        .filter_map(|c| {
            let fp: [u8; 32] = hex::decode(&c.sha256).ok()?.try_into().ok()?;
            Some((c.name.clone(), fp))
        })
        .collect()
}

/// The certificate a node presents: the last of `listed` that `held` gives (its files
/// hold that very certificate), or `None` when it holds none of them. `held` reads a
/// listed name's certificate and key and gives them with the certificate's fingerprint.
pub fn choose<F>(listed: &[(String, [u8; 32])], mut held: F) -> Option<(String, Vec<u8>, Vec<u8>)>
where
    F: FnMut(&str) -> Option<([u8; 32], Vec<u8>, Vec<u8>)>,
{
    listed.iter().rev().find_map(|(name, fp)| {
        let (got, cert, key) = held(name)?;
        (got == *fp).then(|| (name.clone(), cert, key))
    })
}

/// The certificate and key files of `name` under `dir`, with the certificate's
/// fingerprint, when both read and the certificate parses.
pub fn read_identity(dir: &Path, name: &str) -> Option<([u8; 32], Vec<u8>, Vec<u8>)> {
    let (cert_path, key_path) = tls_paths(dir, name);
    let cert = std::fs::read(cert_path).ok()?;
    let key = std::fs::read(key_path).ok()?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&cert).ok()?;
    Some((wire::tls::fingerprint(&pem.contents), cert, key))
}

fn short(fp: &[u8; 32]) -> String {
    hex::encode(fp).chars().take(16).collect()
}

/// Puts the `tls` section of `config`, the config in force, in force for this process:
/// the table, and the certificate it presents (see the module). Does nothing without an
/// installed identity, for a config without TLS, or for a config older than one already
/// followed.
pub fn follow(config: &NetworkConfig) {
    let (Some(live), Some(tls)) = (wire::tls::installed(), config.file().tls.as_ref()) else {
        return;
    };
    let sequence = config.sequence();
    let followed = FOLLOWED.load(Ordering::Acquire);
    if followed != u64::MAX && sequence < followed {
        return;
    }
    FOLLOWED.store(sequence, Ordering::Release);
    let peers = config.tls_peers.clone();
    let changed = *live.peers() != peers;
    let count = peers.len();
    let closed = live.replace_peers(peers);
    if changed {
        tracing::info!(
            sequence,
            certificates = count,
            closed,
            "TLS: the certificates of the config in force authorize callers from now on"
        );
    }
    let me = live.me();
    let listed = listed_for(tls, me);
    live.keep_previous_if_listed(&listed.iter().map(|(_, fp)| *fp).collect::<Vec<_>>());
    let presented = live.presented();
    // Already presenting the newest listed certificate it holds: nothing to read.
    if listed.last().is_some_and(|(_, fp)| *fp == presented) {
        return;
    }
    let Some(dir) = NETWORK_DIR.get() else {
        return;
    };
    let chosen = choose(&listed, |name| read_identity(dir, name));
    if let (Some((newest, _)), Some((name, _, _))) = (listed.last(), chosen.as_ref())
        && newest != name
    {
        tracing::warn!(
            sequence,
            missing = %newest,
            presents = %name,
            dir = %dir.join("tls").display(),
            "TLS: the config in force lists a newer certificate for this node than it holds: put its files in place before the update that removes {name}"
        );
    }
    match chosen {
        Some((_, cert, _)) if wire::tls::fingerprint(&pem_der(&cert)) == presented => {}
        Some((name, cert, key)) => match live.present(&cert, &key) {
            Ok(fp) => tracing::info!(
                sequence,
                certificate = %name,
                sha256 = %short(&fp),
                "TLS: this node presents its certificate {name} from now on"
            ),
            Err(e) => {
                tracing::error!(certificate = %name, error = %e, "TLS: the certificate cannot be presented")
            }
        },
        None if listed.iter().any(|(_, fp)| *fp == presented) => {}
        None => tracing::error!(
            sequence,
            node = %me,
            dir = %dir.join("tls").display(),
            "TLS: the config in force lists no certificate this node holds (tls/<name>.pem and .key): the calls it makes will be refused"
        ),
    }
}

/// The DER of the first certificate of `pem` (empty when it does not parse).
fn pem_der(pem: &[u8]) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem)
        .map(|(_, p)| p.contents)
        .unwrap_or_default()
}
