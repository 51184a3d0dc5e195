//! Namespace endorsers of a workload: one key per scheme, usable from many threads.

use crate::{Error, Result};
use types::NamespacePolicy;

/// Signs namespace endorsements for one policy.
pub(crate) enum Signer {
    /// Ed25519 or ECDSA P-256: one key.
    Single(Box<crypto::SigningKey>),
    /// t-of-n threshold BLS: the first t shares sign, their partials are aggregated.
    Threshold(Box<crypto::ThresholdKeySet>),
}

impl Signer {
    /// Ed25519 or ECDSA P-256 key derived from `seed`.
    pub(crate) fn single(scheme: crypto::Scheme, seed: &str) -> Signer {
        Signer::Single(Box::new(crypto::derive_signing_key(scheme, seed)))
    }

    /// A t-of-n group dealt from `seed`.
    pub(crate) fn threshold(t: u32, n: u32, seed: &str) -> Result<Signer> {
        let set = crypto::deal_threshold_keys(t, n, seed).map_err(|e| Error::Keys {
            detail: format!("threshold deal {t}-of-{n}: {e}"),
        })?;
        Ok(Signer::Threshold(Box::new(set)))
    }

    /// The namespace policy this signer satisfies.
    pub(crate) fn policy(&self) -> NamespacePolicy {
        match self {
            Signer::Single(key) => policy::policy_of(&key.public_key()),
            Signer::Threshold(set) => policy::policy_of(set.public.group_public_key()),
        }
    }

    /// An endorsement of `msg` (the canonical namespace bytes).
    pub(crate) fn sign(&self, msg: &[u8]) -> Result<Vec<u8>> {
        match self {
            Signer::Single(key) => Ok(crypto::sign_namespace_endorsement(key, msg).into_bytes()),
            Signer::Threshold(set) => {
                let t = set.public.threshold() as usize;
                let partials: Vec<_> = set
                    .shares
                    .iter()
                    .take(t)
                    .map(|s| crypto::sign_namespace_endorsement_partial(s, msg))
                    .collect();
                crypto::aggregate_partials(&set.public, &partials)
                    .map(|s| s.into_bytes())
                    .map_err(|e| Error::Keys {
                        detail: format!("aggregate partials: {e}"),
                    })
            }
        }
    }
}
