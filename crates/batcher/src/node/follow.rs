//! Putting a config in force in the core: at the decision that did, and again at a
//! restart (docs/reconfiguration.md): its batching parameters, the shard's batcher keys,
//! and this batcher's next signing key when the config names a new one for it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crypto::{PublicKey, SigningKey};
use tracing::{error, info, warn};
use types::{PartyId, ShardId};

use crate::Batcher;

/// The batcher keys of `shard` in `view`, by party.
pub(super) fn shard_keys(view: &arma::ConfigView, shard: ShardId) -> BTreeMap<PartyId, PublicKey> {
    view.batcher_keys
        .iter()
        .filter(|((_, s), _)| *s == shard)
        .map(|((p, _), k)| (*p, k.clone()))
        .collect()
}

/// The key this batcher signs with under a config that names `named` for it: the current
/// one if it is that, else the first of `next` that is, else none.
pub(super) fn pick_key(
    named: Option<&PublicKey>,
    current: &SigningKey,
    next: impl IntoIterator<Item = SigningKey>,
) -> Option<SigningKey> {
    let named = named?;
    if current.public_key() == *named {
        return Some(current.clone());
    }
    next.into_iter().find(|k| k.public_key() == *named)
}

/// Puts `view` in force in `core`. The next key files are read only when the config
/// names another key for this batcher than the one it signs with. Nothing here stops the node: a
/// parameter or key set the core refuses leaves the old ones (logged), and a node without
/// its new key keeps signing with the old one (logged as an error: the consenters refuse
/// what it signs until its operator gives it the key and restarts it).
pub(super) fn apply(
    core: &mut Batcher,
    view: &arma::ConfigView,
    next_key_files: &[PathBuf],
    decision: Option<u64>,
) {
    let b = &view.batching;
    match core.set_batching(b) {
        Ok(()) if decision.is_some() => info!(
            ?decision,
            epoch = view.sequence,
            batch_timeout_ms = b.batch_timeout_ms,
            max_batch_requests = b.max_batch_requests,
            max_batch_bytes = b.max_batch_bytes,
            "a config update put new batching parameters in force"
        ),
        Ok(()) => info!(
            epoch = view.sequence,
            batch_timeout_ms = b.batch_timeout_ms,
            max_batch_requests = b.max_batch_requests,
            max_batch_bytes = b.max_batch_bytes,
            "the batching parameters of the config in force are back in force"
        ),
        Err(e) => warn!(?decision, error = %e, "the new batching parameters are refused; the old ones stay"),
    }
    let cfg = core.config();
    let (party, shard) = (cfg.party, cfg.shard);
    let keys = shard_keys(view, shard);
    if keys == cfg.keys {
        core.set_config_sequence(view.sequence);
        return;
    }
    let named = keys.get(&party).cloned();
    let current = core.signing_key().clone();
    let rotating = named.as_ref().is_some_and(|k| *k != current.public_key());
    let next: Vec<SigningKey> = if rotating {
        next_key_files
            .iter()
            .filter_map(|path| match crypto::read_key_file(path) {
                Ok(k) => Some(k),
                Err(e) => {
                    error!(path = %path.display(), error = %e, "the config in force names a new key for this batcher; a next key file cannot be read");
                    None
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let key = match pick_key(named.as_ref(), &current, next) {
        Some(k) => k,
        None => {
            error!(
                party,
                shard,
                "the config in force names a batcher key for this node that it does not hold \
                 (put it in a next key file): it keeps signing with its old key, which the \
                 consenters and the other batchers refuse from now on"
            );
            current
        }
    };
    let rotated = key.public_key() != core.signing_key().public_key();
    // The config's sequence goes with its keys: a batcher that refuses the keys keeps
    // signing under the config it still follows (the consenters then refuse its BAFs,
    // which is what its operator must see).
    match core.set_keys(keys, key) {
        Ok(()) if rotated => {
            core.set_config_sequence(view.sequence);
            info!(
                ?decision,
                party, shard, "this batcher signs with its next key from now on"
            );
        }
        Ok(()) => {
            core.set_config_sequence(view.sequence);
            info!(
                ?decision,
                party, shard, "the batcher keys of the config in force are in force"
            );
        }
        Err(e) => error!(
            ?decision,
            error = %e,
            "the batcher keys of the config in force are refused: this batcher keeps the old keys and \
             signs under the old config, which the consenters refuse"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_named_for_this_batcher_is_picked_from_what_it_holds() {
        let k = |s: &str| crypto::derive_signing_key(crypto::Scheme::Ed25519, s);
        let (old, new, other) = (k("old"), k("new"), k("other"));
        let pick = |named: &SigningKey, next: Vec<SigningKey>| {
            pick_key(Some(&named.public_key()), &old, next).map(|k| k.public_key())
        };
        assert_eq!(pick(&old, vec![new.clone()]), Some(old.public_key()));
        assert_eq!(pick(&new, vec![new.clone()]), Some(new.public_key()));
        assert_eq!(pick(&new, vec![other.clone()]), None);
        assert_eq!(pick(&new, vec![]), None);
        // A second rotation: the node holds several next keys and takes the one named.
        assert_eq!(
            pick(&new, vec![other.clone(), new.clone()]),
            Some(new.public_key())
        );
        assert_eq!(
            pick(&other, vec![other.clone(), new.clone()]),
            Some(other.public_key())
        );
        assert!(pick_key(None, &old, vec![new]).is_none());
    }
}
