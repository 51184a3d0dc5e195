//! The rules of a party joining through an update (ADR 0018 "A party joining: the cores
//! first, then the nodes"; docs/reconfiguration.md "Adding a party"). An update may add
//! one party, with the id after every id used (ids of parties that left are never given
//! again), and its entry is then followed ([`super::followed`]) when:
//!
//! * it has an admin key (the next config stays updatable by its parties), an assembler
//!   endpoint and one batcher per shard (its router and consenter are required fields);
//! * none of its nodes has an endpoint that a node of the config in force has, among the
//!   ordering nodes, the committer's nodes and the token services ([`endpoints_in_use`]);
//! * none of its keys is one a node or admin of the config in force holds (a key never
//!   changes holder: [`UpdateError::KeyMoved`]); keys retired before are refused by the
//!   next config itself (`RetiredKeyInUse`);
//! * with a `tls` section, each of its ordering nodes (router, consenter, assembler, one
//!   batcher per shard) has exactly one certificate, checked as a rotated one is: its PEM
//!   is the certificate the fingerprint names, signed by the network CA, naming
//!   `fabrx-node`, with a fingerprint nobody holds ([`super::tls::check_joiner`]).
//!
//! Several parties at once or another id are refused here; a party removed is left to
//! [`super::leaving`].

use std::collections::BTreeSet;

use types::PartyId;

use super::{Result, UpdateError};
use crate::config::NetworkConfig;
use crate::endpoint::Endpoint;
use crate::error::Node;
use crate::file::{NetworkFile, PartyFile};

/// Every endpoint of `file` with who has it, in file order: each party's router,
/// consenter, assembler and batchers, the committer's nodes, the token endorsers and
/// query services.
pub fn endpoints_in_use(file: &NetworkFile) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in &file.parties {
        out.extend(party_endpoints(p));
    }
    for c in file.committer.iter().flat_map(|c| &c.parties) {
        for (what, e) in [
            ("sidecar", &c.sidecar),
            ("sigverifier", &c.sigverifier),
            ("vcservice", &c.vcservice),
        ] {
            out.push((format!("party {} {what}", c.party), e.clone()));
        }
    }
    if let Some(t) = &file.token {
        for e in &t.endorsers {
            out.push((format!("token endorser {}", e.index), e.endpoint.clone()));
        }
        for q in &t.query {
            out.push((format!("party {} query service", q.party), q.endpoint.clone()));
        }
    }
    out
}

/// A party's ordering nodes' endpoints with their node, in the generated layout's order.
fn party_endpoints(p: &PartyFile) -> Vec<(String, String)> {
    let mut out = vec![
        (Node::Router(p.id).to_string(), p.router.clone()),
        (Node::Consenter(p.id).to_string(), p.consenter.endpoint.clone()),
    ];
    if let Some(a) = &p.assembler {
        out.push((Node::Assembler(p.id).to_string(), a.clone()));
    }
    for b in &p.batchers {
        let node = Node::Batcher {
            party: p.id,
            shard: b.shard,
        };
        out.push((node.to_string(), b.endpoint.clone()));
    }
    out
}

/// The party `next` adds to `current`, when it adds one under the rules of the module;
/// `None` when it adds none, or when it removes one (that change is not followed and
/// reported as such). The first rule broken is the error.
pub(super) fn check(config: &NetworkConfig, next: &NetworkFile) -> Result<Option<PartyId>> {
    let current = config.file();
    let had: BTreeSet<PartyId> = current.parties.iter().map(|p| p.id).collect();
    let has: BTreeSet<PartyId> = next.parties.iter().map(|p| p.id).collect();
    if had.iter().any(|id| !has.contains(id)) {
        return Ok(None);
    }
    let added: Vec<PartyId> = has.difference(&had).copied().collect();
    let party = match added.as_slice() {
        [] => return Ok(None),
        [one] => *one,
        _ => return Err(UpdateError::JoinSeveralParties { parties: added }),
    };
    // The consenter transport and the joining consenter still link the replicas by
    // position: with a gap, a joiner would link to the wrong ones (docs/reconfiguration.md
    // "Removing a party", not done).
    if let Some(&left) = current.left_parties.last() {
        return Err(UpdateError::JoinAfterLeave { party, left });
    }
    let expected = config.next_party_id();
    if party != expected {
        return Err(UpdateError::JoinNotNextSlot { party, expected });
    }
    for entry in next.parties.iter().filter(|p| p.id == party) {
        check_entry(config, next, entry)?;
    }
    Ok(Some(party))
}

/// The joiner's entry: complete, on endpoints and keys nobody has, its TLS certificates.
fn check_entry(config: &NetworkConfig, next: &NetworkFile, p: &PartyFile) -> Result<()> {
    let (current, party) = (config.file(), p.id);
    if p.admin_key.is_none() {
        return Err(UpdateError::JoinWithoutAdminKey { party });
    }
    if p.assembler.is_none() {
        return Err(UpdateError::JoinWithoutAssembler { party });
    }
    if let Some(shard) = (0..current.shards).find(|s| !p.batchers.iter().any(|b| b.shard == *s)) {
        return Err(UpdateError::JoinWithoutBatcher { party, shard });
    }
    let in_use: Vec<(String, Endpoint)> = endpoints_in_use(current)
        .into_iter()
        .filter_map(|(holder, e)| Some((holder, Endpoint::parse(&e).ok()?)))
        .collect();
    for (node, endpoint) in party_endpoints(p) {
        // An endpoint that does not parse is left to the next config's own validation.
        let Ok(parsed) = Endpoint::parse(&endpoint) else {
            continue;
        };
        if let Some((holder, _)) = in_use.iter().find(|(_, e)| e.collides(&parsed)) {
            return Err(UpdateError::JoinEndpointInUse {
                party,
                node,
                endpoint,
                holder: holder.clone(),
            });
        }
    }
    check_keys(config, p)?;
    if let (Some(old), Some(new)) = (&current.tls, &next.tls) {
        super::tls::check_joiner(old, new, party, current.shards)?;
    }
    Ok(())
}

/// None of the joiner's keys is held by a node or admin of `current` (keys that do not
/// parse are left to the next config's own validation).
fn check_keys(current: &NetworkConfig, p: &PartyFile) -> Result<()> {
    let held = crate::config::named_keys(current.parties());
    let mut joiner = vec![(Node::Consenter(p.id).to_string(), p.consenter.public_key.as_str())];
    for b in &p.batchers {
        let node = Node::Batcher {
            party: p.id,
            shard: b.shard,
        };
        joiner.push((node.to_string(), b.public_key.as_str()));
    }
    let admin = format!("the admin of party {}", p.id);
    joiner.extend(p.admin_key.as_deref().map(|k| (admin.clone(), k)));
    for (holder, text) in joiner {
        let Ok(key) = text.parse::<crypto::PublicKey>() else {
            continue;
        };
        if let Some((was, _)) = held.iter().find(|(_, k)| **k == key) {
            return Err(UpdateError::KeyMoved {
                key: key.to_string(),
                from: was.clone(),
                to: holder,
            });
        }
    }
    Ok(())
}
