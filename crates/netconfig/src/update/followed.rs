//! Which changes an update may make: those every role applies at the switch
//! (docs/reconfiguration.md "What each role follows"). Any other change — a party added or
//! removed, an endpoint, the TLS CA or the certificates of the committer's nodes, router
//! limits, the committer's or the token's section — would be ordered and then applied by
//! some roles and not by others (or by a node only after its next restart), so the
//! network would run on two configs at once. Such an update is refused, naming each
//! change, until the roles follow it. The ordering nodes' TLS certificates are followed
//! (ADR 0019), under the rules of `super::tls`; so is the entry of a party the update
//! adds, under the rules of `super::joining` (its other sections — the committer's nodes,
//! the token services, its Fabric organization — are not), and the removal of a party,
//! under the rules of `super::leaving`.

use crate::file::NetworkFile;
use types::PartyId;

/// The changes from `current` to `next` that the roles do not follow through an update,
/// one line each (the lines of [`super::diff`]); empty when every change is followed.
/// `joining` is the party the update adds, as `super::joining::check` accepted it: its
/// entry is followed. `leaving` is the party it removes, as `super::leaving::check`
/// accepted it: its removal (and its id in `left_parties`) is followed.
pub(super) fn not_followed(
    current: &NetworkFile,
    next: &NetworkFile,
    joining: Option<PartyId>,
    leaving: Option<PartyId>,
) -> Vec<String> {
    let mut rest = next.clone();
    rest.sequence = current.sequence;
    rest.parties.retain(|p| Some(p.id) != joining);
    rest.left_parties.clone_from(&current.left_parties);
    // Keys: consenter and batcher signing keys, and the admins' keys.
    for p in &mut rest.parties {
        let Some(was) = current.parties.iter().find(|c| c.id == p.id) else {
            continue;
        };
        p.consenter.public_key.clone_from(&was.consenter.public_key);
        p.admin_key.clone_from(&was.admin_key);
        for b in &mut p.batchers {
            if let Some(old) = was.batchers.iter().find(|o| o.shard == b.shard) {
                b.public_key.clone_from(&old.public_key);
            }
        }
    }
    // The batchers' parameters they take at the switch.
    let (b, was) = (&mut rest.batching, &current.batching);
    b.max_batch_requests = was.max_batch_requests;
    b.max_batch_bytes = was.max_batch_bytes;
    b.batch_timeout_ms = was.batch_timeout_ms;
    b.forward_timeout_ms = was.forward_timeout_ms;
    b.complain_timeout_ms = was.complain_timeout_ms;
    // The consensus block, all but the node's tick (read at start).
    let tick_ms = rest.consensus.tick_ms;
    rest.consensus = current.consensus.clone();
    rest.consensus.tick_ms = tick_ms;
    // The policy for the update after this one.
    rest.update_policy.clone_from(&current.update_policy);
    // The keys retired (only the update rules read them).
    rest.retired_keys.clone_from(&current.retired_keys);
    // The ordering nodes' TLS certificates (the CA and the others' are compared).
    let mut base = current.clone();
    base.parties.retain(|p| Some(p.id) != leaving);
    for tls in [base.tls.as_mut(), rest.tls.as_mut()].into_iter().flatten() {
        tls.certificates.retain(|c| !crate::tls::rotate::rotates(&c.role));
    }
    super::diff(&base, &rest)
}
