//! Batched, parallel verification of many txs: the same verdicts as
//! [`Policies::verify_tx`] tx by tx, with the signature checks of the whole batch handed
//! to `crypto::verify_namespace_endorsements` (Ed25519 batch equation, BLS multi-pairing,
//! ECDSA P-256 one by one; all on rayon) instead of one call per signature.
//!
//! A namespace is endorsed when *any* of its endorsements verifies, and `verify_tx` stops
//! at the first that does. The batch path does the same in rounds: round `r` checks
//! endorsement `r` of every namespace not yet endorsed, of every tx not yet failed. With
//! the usual one endorsement per namespace (an aggregated t-of-n BLS signature, or one
//! endorser) that is one round.

use crate::Policies;
use crypto::{PublicKey, Signature, SignedMessage};
use rayon::prelude::*;
use std::sync::Arc;
use types::endorsement::namespace_signing_bytes;
use types::{Endorsement, Status, Tx, TxId};

/// Largest number of signatures of one scheme handed to one `crypto` batch call. A batch
/// that fails (one bad signature) is re-checked one by one inside `crypto`, so smaller
/// chunks bound what one bad signature costs, larger chunks amortise more of the batch
/// equation. Chunks run in parallel on rayon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunks {
    /// Ed25519 (batch equation; `crypto` splits a chunk once more per rayon thread).
    pub ed25519: usize,
    /// ECDSA P-256 (no batch equation: only the unit of parallel work).
    pub ecdsa_p256: usize,
    /// BLS12-381 (one multi-pairing per chunk).
    pub bls12_381: usize,
}

impl Chunks {
    /// The same chunk size for every scheme (at least 1).
    pub fn uniform(n: usize) -> Chunks {
        let n = n.max(1);
        Chunks {
            ed25519: n,
            ecdsa_p256: n,
            bls12_381: n,
        }
    }

    fn of(&self, scheme: crypto::Scheme) -> usize {
        match scheme {
            crypto::Scheme::Ed25519 => self.ed25519,
            crypto::Scheme::EcdsaP256 => self.ecdsa_p256,
            crypto::Scheme::Bls12381 => self.bls12_381,
        }
        .max(1)
    }
}

impl Default for Chunks {
    /// Measured on 2 cores at batch 500 (docs/benchmarks.md, "Signature verifier"): a BLS
    /// single verification costs ~2 batched ones, so small BLS chunks keep a bad signature
    /// cheap while the final exponentiation stays amortised.
    fn default() -> Chunks {
        Chunks {
            ed25519: 64,
            ecdsa_p256: 64,
            bls12_381: 16,
        }
    }
}

/// What must verify for one namespace of a tx.
struct NsCheck<'a> {
    key: &'a PublicKey,
    message: Vec<u8>,
    endorsements: &'a [Endorsement],
    endorsed: bool,
}

/// The namespace checks of a tx, or `None` when it fails without any signature check
/// (no namespace at all, a namespace without policy or without endorsements).
fn plan<'a>(policies: &'a Policies, id: &TxId, tx: &'a Tx) -> Option<Vec<NsCheck<'a>>> {
    if tx.namespaces.is_empty() {
        // Nothing is endorsed, so nothing is valid (see `Policies::verify_tx`).
        return None;
    }
    tx.namespaces
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let key = policies.key(&ns.ns_id)?;
            let endorsements = tx.endorsements.get(i).filter(|e| !e.is_empty())?;
            Some(NsCheck {
                key,
                message: namespace_signing_bytes(id, ns, &tx.metadata),
                endorsements,
                endorsed: false,
            })
        })
        .collect()
}

/// One signature to check in a round: (tx index, namespace index).
type Slot = (usize, usize);

/// Verifies `txs` under `policies` on the current rayon pool (call it inside
/// `ThreadPool::install`, or use [`crate::Verifier`]). `result[i]` is `None` when
/// `txs[i]` is valid, else `Some(Status::AbortedSignatureInvalid)`; exactly
/// `policies.verify_tx(id, tx).err()` for each tx.
pub fn verify_batch(policies: &Policies, txs: &[(TxId, Arc<Tx>)], chunks: Chunks) -> Vec<Option<Status>> {
    let mut plans: Vec<Option<Vec<NsCheck<'_>>>> =
        txs.par_iter().map(|(id, tx)| plan(policies, id, tx)).collect();
    for round in 0.. {
        let mut slots: Vec<Slot> = Vec::new();
        for (t, p) in plans.iter_mut().enumerate() {
            let Some(checks) = p else { continue };
            let exhausted = checks
                .iter()
                .any(|c| !c.endorsed && round >= c.endorsements.len());
            if exhausted {
                // A namespace ran out of endorsements: the tx fails, skip its other checks.
                *p = None;
                continue;
            }
            slots.extend(
                checks
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| !c.endorsed)
                    .map(|(n, _)| (t, n)),
            );
        }
        if slots.is_empty() {
            break;
        }
        let verdicts = check_round(&plans, &slots, round, chunks);
        for ((t, n), ok) in slots.into_iter().zip(verdicts) {
            if ok && let Some(checks) = &mut plans[t] {
                checks[n].endorsed = true;
            }
        }
    }
    plans
        .into_iter()
        .map(|p| match p {
            Some(_) => None,
            None => Some(Status::AbortedSignatureInvalid),
        })
        .collect()
}

/// Checks endorsement `round` of every slot; verdicts in slot order.
fn check_round(
    plans: &[Option<Vec<NsCheck<'_>>>],
    slots: &[Slot],
    round: usize,
    chunks: Chunks,
) -> Vec<bool> {
    // (slot index, check, signature), grouped by scheme so each chunk is one scheme.
    let mut owned: Vec<(usize, &NsCheck<'_>, Signature)> = slots
        .iter()
        .enumerate()
        // Slots name only planned txs; a slot that did not would stay unverified (false).
        .filter_map(|(i, &(t, n))| {
            let c = plans.get(t)?.as_ref()?.get(n)?;
            let sig = c.endorsements.get(round)?;
            Some((i, c, Signature::from_bytes(sig.signature.clone())))
        })
        .collect();
    owned.sort_by_key(|(i, c, _)| (scheme_rank(c.key.scheme()), *i));
    let mut work: Vec<&[(usize, &NsCheck<'_>, Signature)]> = Vec::new();
    for group in owned.chunk_by(|a, b| a.1.key.scheme() == b.1.key.scheme()) {
        work.extend(group.chunks(chunks.of(group[0].1.key.scheme())));
    }
    let checked: Vec<(usize, bool)> = work
        .par_iter()
        .flat_map_iter(|part| {
            let items: Vec<SignedMessage<'_>> = part
                .iter()
                .map(|(_, c, sig)| SignedMessage {
                    public_key: c.key,
                    message: &c.message,
                    signature: sig,
                })
                .collect();
            let verdicts = crypto::verify_namespace_endorsements(&items);
            part.iter().map(|(i, _, _)| *i).zip(verdicts).collect::<Vec<_>>()
        })
        .collect();
    let mut verdicts = vec![false; slots.len()];
    for (i, ok) in checked {
        verdicts[i] = ok;
    }
    verdicts
}

fn scheme_rank(s: crypto::Scheme) -> u8 {
    match s {
        crypto::Scheme::Ed25519 => 0,
        crypto::Scheme::EcdsaP256 => 1,
        crypto::Scheme::Bls12381 => 2,
    }
}
