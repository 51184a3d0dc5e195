//! The rules of a TLS certificate change (ADR 0019): an update may add a certificate for
//! an ordering node beside the one it has, or remove one of a node's two. With the CA
//! fixed (a change of the CA is not followed), every change is checked here:
//!
//! * a certificate the update adds carries its PEM, which is the certificate the
//!   fingerprint names, signed by the network CA, for the name `fabrx-node`;
//! * it is for a node that holds a certificate in the config in force (same role, party,
//!   shard), and the node keeps one of those (an overlap: both are authorized between the
//!   update that adds the new one and the one that removes the old one) — or for an
//!   ordering node of the party the update adds, which has exactly one
//!   ([`check_joiner`]);
//! * a node has at most two certificates, and at least one — but the nodes of a party
//!   that left keep theirs only until an update drops them, and get no new one
//!   (`super::leaving`);
//! * no fingerprint passes to another holder.
//!
//! Names stay unique (`NetworkConfig::from_file` refuses a name listed twice).

use std::collections::BTreeMap;

use types::PartyId;
use wire::tls::{Peer, Role};

use super::{Result, UpdateError};
use crate::file::{NetworkFile, TlsCertFile, TlsFile};
use crate::tls::rotate::{holder_of, rotates};

/// Most certificates a node has at once.
pub const MAX_CERTIFICATES_PER_NODE: usize = 2;

fn holders(tls: &TlsFile) -> BTreeMap<String, (Peer, &TlsCertFile)> {
    tls.certificates
        .iter()
        .filter_map(|c| Some((c.sha256.to_ascii_lowercase(), (holder_of(c)?, c))))
        .collect()
}

fn by_holder(tls: &TlsFile) -> BTreeMap<String, (Peer, Vec<&TlsCertFile>)> {
    let mut out: BTreeMap<String, (Peer, Vec<&TlsCertFile>)> = BTreeMap::new();
    for c in tls.certificates.iter().filter(|c| rotates(&c.role)) {
        if let Some(p) = holder_of(c) {
            out.entry(p.to_string()).or_insert((p, Vec::new())).1.push(c);
        }
    }
    out
}

/// Checks the TLS changes from `current` to `next` (see the module).
pub(super) fn check_tls(current: &NetworkFile, next: &NetworkFile) -> Result<()> {
    let (Some(old), Some(new)) = (current.tls.as_ref(), next.tls.as_ref()) else {
        return Ok(());
    };
    let before = holders(old);
    for c in &new.certificates {
        let Some(to) = holder_of(c) else { continue };
        match before.get(&c.sha256.to_ascii_lowercase()) {
            Some((from, _)) if *from != to => {
                return Err(UpdateError::TlsCertificateMoved {
                    sha256: c.sha256.clone(),
                    from: from.to_string(),
                    to: to.to_string(),
                });
            }
            Some(_) => {}
            None => check_added(old, c)?,
        }
    }
    let (was, now) = (by_holder(old), by_holder(new));
    // The party an update adds: its nodes' certificates are new ([`check_joiner`]).
    let joining =
        |party| next.parties.iter().any(|p| p.id == party) && !current.parties.iter().any(|p| p.id == party);
    let left = |party| next.left_parties.contains(&party);
    for (holder, (peer, certs)) in &now {
        if left(peer.party)
            && let Some((_, had)) = was.get(holder)
            && certs
                .iter()
                .any(|c| !had.iter().any(|h| h.sha256.eq_ignore_ascii_case(&c.sha256)))
        {
            return Err(UpdateError::LeftPartyCertificate {
                party: peer.party,
                holder: holder.clone(),
            });
        }
        let Some((_, had)) = was.get(holder) else {
            if joining(peer.party) {
                continue;
            }
            return Err(UpdateError::TlsNewHolder {
                name: certs.first().map(|c| c.name.clone()).unwrap_or_default(),
                holder: peer.to_string(),
            });
        };
        if certs.len() > MAX_CERTIFICATES_PER_NODE {
            return Err(UpdateError::TlsTooManyCertificates {
                holder: holder.clone(),
                count: certs.len(),
                max: MAX_CERTIFICATES_PER_NODE,
            });
        }
        if !certs
            .iter()
            .any(|c| had.iter().any(|h| h.sha256.eq_ignore_ascii_case(&c.sha256)))
        {
            return Err(UpdateError::TlsNoOverlap {
                holder: holder.clone(),
            });
        }
    }
    // A party that left in an earlier update: its nodes' certificates may go. Those of a
    // party this update removes stay, so that its nodes can read their removal.
    let left_before = |party| current.left_parties.contains(&party);
    if let Some(holder) = was
        .iter()
        .find(|(h, (peer, _))| !now.contains_key(*h) && !left_before(peer.party))
        .map(|(h, _)| h)
    {
        return Err(UpdateError::TlsNoCertificate {
            holder: holder.clone(),
        });
    }
    Ok(())
}

/// The certificates of `party`, which the update adds, in `new` (the next config's
/// section; `old` is the config in force's): exactly one for each of its ordering nodes
/// (router, consenter, assembler, one batcher per shard of `shards`) and none for another
/// node of the party, each checked as a rotated certificate is ([`check_added`]) and with
/// a fingerprint nobody holds in the config in force.
pub(super) fn check_joiner(old: &TlsFile, new: &TlsFile, party: PartyId, shards: u32) -> Result<()> {
    let node = |role, shard| Peer { role, party, shard };
    let mut nodes = vec![
        node(Role::Router, None),
        node(Role::Consenter, None),
        node(Role::Assembler, None),
    ];
    nodes.extend((0..shards).map(|s| node(Role::Batcher, Some(s))));
    // An ordering certificate of the party for a node it does not have (a batcher of a
    // shard the network lacks, a router with a shard).
    for c in new
        .certificates
        .iter()
        .filter(|c| c.party == party && rotates(&c.role))
    {
        if let Some(holder) = holder_of(c).filter(|h| !nodes.contains(h)) {
            return Err(UpdateError::TlsNewHolder {
                name: c.name.clone(),
                holder: holder.to_string(),
            });
        }
    }
    let before = holders(old);
    for peer in nodes {
        let certs: Vec<&TlsCertFile> = new
            .certificates
            .iter()
            .filter(|c| holder_of(c) == Some(peer))
            .collect();
        let [c] = certs.as_slice() else {
            return Err(UpdateError::JoinTlsCertificates {
                party,
                holder: peer.to_string(),
                count: certs.len(),
            });
        };
        let refused = |source| UpdateError::JoinCertificate {
            party,
            source: Box::new(source),
        };
        if let Some((from, _)) = before.get(&c.sha256.to_ascii_lowercase()) {
            return Err(refused(UpdateError::TlsCertificateMoved {
                sha256: c.sha256.clone(),
                from: from.to_string(),
                to: peer.to_string(),
            }));
        }
        check_added(old, c).map_err(refused)?;
    }
    Ok(())
}

/// A certificate the update adds: its PEM is the certificate the fingerprint names, the
/// network CA signed it, and it names `fabrx-node`.
fn check_added(old: &TlsFile, c: &TlsCertFile) -> Result<()> {
    let bad = |reason: String| UpdateError::TlsBadCertificate {
        name: c.name.clone(),
        reason,
    };
    let Some(pem) = &c.pem else {
        return Err(UpdateError::TlsCertificateMissing { name: c.name.clone() });
    };
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| bad(format!("its pem is not a PEM certificate: {e}")))?;
    let digest = hex::encode(wire::tls::fingerprint(&pem.contents));
    if !digest.eq_ignore_ascii_case(&c.sha256) {
        return Err(bad(format!(
            "its pem has SHA-256 {digest}, the entry names {}",
            c.sha256
        )));
    }
    let cert = pem
        .parse_x509()
        .map_err(|e| bad(format!("its pem is not an X.509 certificate: {e}")))?;
    let (_, ca) = x509_parser::pem::parse_x509_pem(old.ca.as_bytes())
        .map_err(|e| bad(format!("the network CA does not parse: {e}")))?;
    let ca = ca
        .parse_x509()
        .map_err(|e| bad(format!("the network CA does not parse: {e}")))?;
    if cert.verify_signature(Some(ca.public_key())).is_err() {
        return Err(UpdateError::TlsNotSignedByCa { name: c.name.clone() });
    }
    let names_node = cert.subject_alternative_name().ok().flatten().is_some_and(|san| {
        san.value.general_names.iter().any(
            |n| matches!(n, x509_parser::extensions::GeneralName::DNSName(d) if *d == wire::tls::SERVER_NAME),
        )
    });
    if !names_node {
        return Err(bad(format!(
            "it does not name {} (every fabrx node certificate does)",
            wire::tls::SERVER_NAME
        )));
    }
    Ok(())
}
