//! The operator's side of a TLS certificate rotation (ADR 0019, docs/reconfiguration.md
//! "Rotating TLS certificates"): [`add_next`] issues each ordering node a new certificate
//! with the network CA and lists it beside the old one (update A); [`retire_old`] drops
//! the old ones (update B). Both give the next config to propose; neither changes the CA.
//!
//! A node's certificates are named `<node>` and `<node>.next` (`router-1`,
//! `router-1.next`): a rotation issues into whichever of the two names the config in
//! force does not list for the node, so the files of the certificate in use are never
//! overwritten, and rotations alternate between the two names.

use std::collections::BTreeSet;
use std::path::Path;

use wire::tls::{Peer, Role};

use super::{bad, cert_name, tls_dir, tls_paths, write};
use crate::error::{Error, Result};
use crate::file::{NetworkFile, TlsCertFile, TlsFile};

/// The roles whose certificates rotate through an update: the ordering nodes, which follow
/// the config in force (the committer's nodes read theirs at start).
pub const ROTATING_ROLES: [Role; 4] = [Role::Router, Role::Batcher, Role::Consenter, Role::Assembler];

/// Whether certificates of the role named `role` rotate through an update.
pub fn rotates(role: &str) -> bool {
    ROTATING_ROLES.iter().any(|r| r.name() == role)
}

/// The holder an entry names (`None`: unknown role).
pub fn holder_of(c: &TlsCertFile) -> Option<Peer> {
    Some(Peer {
        role: Role::parse(&c.role)?,
        party: c.party,
        shard: c.shard,
    })
}

/// The holders of rotating certificates in `file`, in list order, each once; only those
/// named `only` (`router-1`, `batcher-2-0`) when given.
fn holders(file: &NetworkFile, only: &[String]) -> Result<Vec<Peer>> {
    let tls = file
        .tls
        .as_ref()
        .ok_or_else(|| bad("the network has no TLS (it was generated with --insecure)".into()))?;
    let mut out: Vec<Peer> = Vec::new();
    // Only the nodes of parties in force: a party that left has no certificate rotated.
    let in_force = |party| file.parties.iter().any(|p| p.id == party);
    for c in tls
        .certificates
        .iter()
        .filter(|c| rotates(&c.role) && in_force(c.party))
    {
        if let Some(p) = holder_of(c)
            && !out.contains(&p)
        {
            out.push(p);
        }
    }
    if only.is_empty() {
        return Ok(out);
    }
    let wanted: BTreeSet<&str> = only.iter().map(String::as_str).collect();
    let known: BTreeSet<String> = out.iter().map(|p| cert_name(*p)).collect();
    if let Some(unknown) = wanted.iter().find(|n| !known.contains(**n)) {
        return Err(bad(format!(
            "{unknown} is not an ordering node of this network (routers, batchers, consenters and assemblers rotate: router-P, batcher-P-S, consenter-P, assembler-P)"
        )));
    }
    out.retain(|p| wanted.contains(cert_name(*p).as_str()));
    Ok(out)
}

/// The host a holder's certificate names beside `fabrx-node`: its endpoint's.
fn host_of(file: &NetworkFile, p: Peer) -> Option<String> {
    let party = file.parties.iter().find(|x| x.id == p.party)?;
    let endpoint = match p.role {
        Role::Router => party.router.clone(),
        Role::Consenter => party.consenter.endpoint.clone(),
        Role::Assembler => party.assembler.clone()?,
        Role::Batcher => party
            .batchers
            .iter()
            .find(|b| Some(b.shard) == p.shard)?
            .endpoint
            .clone(),
        _ => return None,
    };
    let host = endpoint.rsplit_once(':').map_or(endpoint.as_str(), |(h, _)| h);
    Some(host.trim_start_matches('[').trim_end_matches(']').to_string())
}

/// `current` with the next sequence, and for each ordering node (those named `only`, or
/// all) a new certificate signed by the network CA (`<dir>/tls/ca.pem`, `ca.key`),
/// written to `<dir>/tls/<name>.pem` and `.key` and listed after the node's current one
/// with its PEM. Refuses a node that already has two certificates (retire one first).
/// Gives the next config and the names issued.
pub fn add_next(dir: &Path, current: &NetworkFile, only: &[String]) -> Result<(NetworkFile, Vec<String>)> {
    let mut next = current.clone();
    next.sequence = current.sequence.saturating_add(1);
    let holders = holders(current, only)?;
    let Some(tls) = next.tls.as_mut() else {
        return Err(bad("the network has no TLS".into()));
    };
    let issuer = network_issuer(dir, tls)?;
    let mut issued = Vec::new();
    for p in holders {
        let base = cert_name(p);
        let listed: Vec<usize> = (0..tls.certificates.len())
            .filter(|&i| holder_of(&tls.certificates[i]) == Some(p))
            .collect();
        if listed.len() >= 2 {
            return Err(bad(format!(
                "{base} already has two certificates: retire the old one first (`fabrx network tls retire`)"
            )));
        }
        let taken = |n: &str| listed.iter().any(|&i| tls.certificates[i].name == n);
        let name = if taken(&base) {
            format!("{base}.next")
        } else {
            base.clone()
        };
        let host = host_of(current, p).ok_or_else(|| bad(format!("{base}: no endpoint in the config")))?;
        let cert = issue(&issuer, p, &name, &host)?;
        // Files of that name are not listed for the node: a certificate rotated out before.
        let (cert_path, key_path) = tls_paths(dir, &name);
        for path in [&cert_path, &key_path] {
            if path.exists() {
                std::fs::remove_file(path).map_err(|e| Error::Write {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            }
        }
        cert.write(dir)?;
        let at = listed.last().map_or(tls.certificates.len(), |&i| i + 1);
        tls.certificates.insert(at, cert.entry);
        issued.push(name);
    }
    Ok((next, issued))
}

/// A node certificate issued by the network CA, not yet written.
#[derive(Debug, Clone)]
pub struct Issued {
    /// Its entry in the `tls` section, with its PEM (as a config update must carry it).
    pub entry: TlsCertFile,
    /// Its private key (PEM).
    key_pem: String,
}

impl Issued {
    /// Writes `<dir>/tls/<name>.pem` and `.key` (mode 0600); an existing file is refused.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let (cert_path, key_path) = tls_paths(dir, &self.entry.name);
        write(&cert_path, self.entry.pem.as_deref().unwrap_or_default(), false)?;
        write(&key_path, &self.key_pem, true)
    }
}

/// The network CA of `dir` (`tls/ca.pem`, `tls/ca.key`), when it is the CA `tls` lists.
pub fn network_issuer(dir: &Path, tls: &TlsFile) -> Result<rcgen::Issuer<'static, rcgen::KeyPair>> {
    let err = |e: rcgen::Error| bad(e.to_string());
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| Error::Read {
            path: p.to_path_buf(),
            reason: e.to_string(),
        })
    };
    let ca_pem = read(&tls_dir(dir).join("ca.pem"))?;
    let ca_key = rcgen::KeyPair::from_pem(&read(&tls_dir(dir).join("ca.key"))?).map_err(err)?;
    if tls.ca.trim() != ca_pem.trim() {
        return Err(bad(format!(
            "{} is not the CA the config lists: issue with the network's CA",
            tls_dir(dir).join("ca.pem").display()
        )));
    }
    rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(err)
}

/// A certificate for `peer` under `name`, naming `fabrx-node` and `host`, signed by
/// `issuer` with a new random key (ECDSA P-256).
pub fn issue(
    issuer: &rcgen::Issuer<'static, rcgen::KeyPair>,
    peer: Peer,
    name: &str,
    host: &str,
) -> Result<Issued> {
    let err = |e: rcgen::Error| bad(e.to_string());
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let key = rcgen::KeyPair::generate().map_err(err)?;
    let mut params =
        rcgen::CertificateParams::new(vec![wire::tls::SERVER_NAME.to_string(), host.to_string()])
            .map_err(err)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name.to_string());
    let cert = params.signed_by(&key, issuer).map_err(err)?;
    Ok(Issued {
        entry: TlsCertFile {
            name: name.to_string(),
            role: peer.role.name().to_string(),
            party: peer.party,
            shard: peer.shard,
            sha256: hex::encode(wire::tls::fingerprint(cert.der())),
            pem: Some(cert.pem()),
        },
        key_pem: key.serialize_pem(),
    })
}

/// `current` with the next sequence and, for each ordering node with two certificates
/// (those named `only`, or all), the first one listed (the older) removed. Gives the next
/// config and the names removed.
pub fn retire_old(current: &NetworkFile, only: &[String]) -> Result<(NetworkFile, Vec<String>)> {
    let mut next = current.clone();
    next.sequence = current.sequence.saturating_add(1);
    let holders = holders(current, only)?;
    let Some(tls) = next.tls.as_mut() else {
        return Err(bad("the network has no TLS".into()));
    };
    let mut retired = Vec::new();
    // The certificates a party that left kept for the switch that removed it (so that its
    // nodes could still read that decision, and stop): all of them go.
    let left = &current.left_parties;
    tls.certificates.retain(|c| {
        let gone = rotates(&c.role) && left.contains(&c.party);
        if gone {
            retired.push(c.name.clone());
        }
        !gone
    });
    for p in holders {
        let listed: Vec<usize> = (0..tls.certificates.len())
            .filter(|&i| holder_of(&tls.certificates[i]) == Some(p))
            .collect();
        if let [first, _, ..] = listed.as_slice() {
            retired.push(tls.certificates.remove(*first).name);
        }
    }
    Ok((next, retired))
}
