//! The committing side of a network (`committer` in the config file): the key that
//! endorses `_meta` txs, and per party the endpoints of its sidecar, signature verifier
//! and validator-committer. A party's sidecar reads blocks from its own assembler first
//! and from the other parties' assemblers when its own fails.

use std::path::Path;

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::file::{CommitterFile, CommitterPartyFile};
use types::{NamespacePolicy, PartyId};

/// One party's committer nodes, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitterParty {
    /// The party.
    pub party: PartyId,
    /// The sidecar.
    pub sidecar: Endpoint,
    /// The signature verifier.
    pub sigverifier: Endpoint,
    /// The validator-committer.
    pub vcservice: Endpoint,
}

/// The `committer` section, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committers {
    /// The `_meta` policy.
    pub meta_policy: NamespacePolicy,
    /// The parties that may run a committer, by party id.
    pub parties: Vec<CommitterParty>,
}

fn bad(reason: String) -> Error {
    Error::Committer { reason }
}

/// Parses and checks the section against the parties in force `ids`.
pub(crate) fn parse(file: &CommitterFile, ids: &[PartyId]) -> Result<Committers> {
    let key: crypto::PublicKey = file
        .meta_policy
        .parse()
        .map_err(|e| bad(format!("meta_policy {:?}: {e}", file.meta_policy)))?;
    let mut parties: Vec<CommitterParty> = Vec::with_capacity(file.parties.len());
    for p in &file.parties {
        if !ids.contains(&p.party) {
            return Err(bad(format!(
                "party {} is not one of the parties {ids:?}",
                p.party
            )));
        }
        if parties.iter().any(|q| q.party == p.party) {
            return Err(bad(format!("party {} is listed twice", p.party)));
        }
        let endpoint = |what: &str, text: &str| {
            Endpoint::parse(text).map_err(|e| bad(format!("party {} {what} {text:?}: {e}", p.party)))
        };
        parties.push(CommitterParty {
            party: p.party,
            sidecar: endpoint("sidecar", &p.sidecar)?,
            sigverifier: endpoint("sigverifier", &p.sigverifier)?,
            vcservice: endpoint("vcservice", &p.vcservice)?,
        });
    }
    Ok(Committers {
        meta_policy: policy::policy_of(&key),
        parties,
    })
}

/// The port of party `p`'s committer node `offset` (0 sidecar, 1 sigverifier, 2
/// vcservice) in a generated network: after every ordering port, 3 per party.
pub fn committer_port(base_port: u16, parties: u32, shards: u32, p: PartyId, offset: u32) -> Option<u16> {
    let ordering = u64::from(parties) * (u64::from(shards) + 3);
    let port = u64::from(base_port) + ordering + u64::from(p.checked_sub(1)?) * 3 + u64::from(offset);
    u16::try_from(port).ok()
}

/// The section of a generated network: every party may run a committer.
pub(crate) fn generated(
    meta_key: &crypto::PublicKey,
    host: &str,
    base_port: u16,
    parties: u32,
    shards: u32,
) -> Result<CommitterFile> {
    let endpoint = |p: PartyId, offset: u32| {
        let port = committer_port(base_port, parties, shards, p, offset).ok_or_else(|| {
            bad(format!(
                "party {p}'s committer nodes would need a port above 65535"
            ))
        })?;
        Ok::<_, Error>(if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        })
    };
    let parties = (1..=parties)
        .map(|p| {
            Ok(CommitterPartyFile {
                party: p,
                sidecar: endpoint(p, 0)?,
                sigverifier: endpoint(p, 1)?,
                vcservice: endpoint(p, 2)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(CommitterFile {
        meta_policy: meta_key.to_string(),
        parties,
    })
}

/// `<dir>/keys/admin/meta.key`: the key that endorses `_meta` txs.
pub fn meta_key_path(dir: &Path) -> std::path::PathBuf {
    dir.join("keys").join("admin").join("meta.key")
}
