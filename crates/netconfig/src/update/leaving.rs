//! The rules of a party leaving through an update (ADR 0018 "A party leaving";
//! docs/reconfiguration.md "Removing a party"). An update may remove one party, and
//! nothing else about the parties list, when:
//!
//! * it adds no party (a party leaves in an update of its own) and at least one party
//!   stays;
//! * the next config's `left_parties` is the config in force's with the leaving party's
//!   id added (ids are never given again);
//!
//! Its ordering nodes' TLS certificates stay in the next config: its nodes must still
//! reach the others to read the decision that removes the party (and then stop
//! themselves). A later update drops them (`fabrx network tls retire` does), and none may
//! be added ([`super::tls`]).
//!
//! What leaves is the party's place in the ordering: its router, batchers, consenter and
//! assembler. The sections an update does not change (the committer's nodes, the token's
//! endorsers and query services, the Fabric organizations, the other TLS certificates)
//! stay as they are and may keep naming it: those nodes are outside the ordering, each
//! reads the config at its start, and they leave, if they do, through their own
//! section's procedure (docs/reconfiguration.md "Removing a party").
//!
//! Its keys are retired by the usual rule (keys the config in force names and the next
//! does not), so none of them can come back under another holder.

use std::collections::BTreeSet;

use types::PartyId;

use super::{Result, UpdateError};
use crate::config::NetworkConfig;
use crate::file::NetworkFile;

/// The next config of an update that removes `party` from `current` (`fabrx network
/// party remove`): the next sequence, without the party's entry (its TLS certificates
/// stay until a later update), its id in `left_parties`, and the keys it named retired
/// ([`super::propose`] checks the whole and fills `retired_keys`). The party must be in
/// force and not the only one.
pub fn without_party(current: &NetworkConfig, party: PartyId) -> Result<NetworkFile> {
    let mut next = current.file().clone();
    next.sequence = current
        .sequence()
        .checked_add(1)
        .ok_or(UpdateError::SequenceOverflow {
            current: current.sequence(),
        })?;
    let before = next.parties.len();
    next.parties.retain(|p| p.id != party);
    if next.parties.len() == before {
        return Err(UpdateError::UnknownLeaver {
            party,
            parties: current.party_list(),
        });
    }
    if next.parties.is_empty() {
        return Err(UpdateError::LeaveLastParty { party });
    }
    next.left_parties.push(party);
    next.left_parties.sort_unstable();
    super::propose(current, &next)?.next_file()
}

/// The party `next` removes from `config`, when it removes one under the rules of the
/// module; `None` when it removes none. The first rule broken is the error.
pub(super) fn check(config: &NetworkConfig, next: &NetworkFile) -> Result<Option<PartyId>> {
    let current = config.file();
    let had: BTreeSet<PartyId> = current.parties.iter().map(|p| p.id).collect();
    let has: BTreeSet<PartyId> = next.parties.iter().map(|p| p.id).collect();
    let removed: Vec<PartyId> = had.difference(&has).copied().collect();
    let party = match removed.as_slice() {
        [] => {
            if next.left_parties != current.left_parties {
                return Err(UpdateError::LeftParties {
                    listed: next.left_parties.clone(),
                    expected: current.left_parties.clone(),
                });
            }
            return Ok(None);
        }
        [one] => *one,
        _ => return Err(UpdateError::LeaveSeveralParties { parties: removed }),
    };
    if let Some(&joining) = has.difference(&had).next() {
        return Err(UpdateError::LeaveWithJoin {
            leaving: party,
            joining,
        });
    }
    if has.is_empty() {
        return Err(UpdateError::LeaveLastParty { party });
    }
    let mut expected = current.left_parties.clone();
    expected.push(party);
    expected.sort_unstable();
    if next.left_parties != expected {
        return Err(UpdateError::LeftParties {
            listed: next.left_parties.clone(),
            expected,
        });
    }
    Ok(Some(party))
}
