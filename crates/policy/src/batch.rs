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
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use types::endorsement::namespace_signing_bytes;
use types::{Endorsement, Status, Tx, TxId};

/// Largest number of signatures of one scheme handed to one `crypto` batch call. A batch
/// that fails (one bad signature) is re-checked one by one inside `crypto`, so smaller
/// chunks bound what one bad signature costs, larger chunks amortise more of the batch
/// equation. Chunks run in parallel on rayon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunks {
    /// Ed25519 (one batch equation per chunk, or smaller ones: [`Groups`]).
    pub ed25519: NonZeroUsize,
    /// ECDSA P-256 (no batch equation: only the unit of parallel work).
    pub ecdsa_p256: NonZeroUsize,
    /// BLS12-381 (one multi-pairing per chunk).
    pub bls12_381: NonZeroUsize,
}

impl Chunks {
    /// The same chunk size for every scheme.
    pub fn uniform(n: NonZeroUsize) -> Chunks {
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
        .get()
    }
}

impl Default for Chunks {
    /// Measured on 2 cores at batch 500 (docs/benchmarks.md, "Signature verifier"): a BLS
    /// single verification costs ~2 batched ones, so small BLS chunks keep a bad signature
    /// cheap while the final exponentiation stays amortised.
    fn default() -> Chunks {
        let n = |v: usize| NonZeroUsize::new(v).unwrap_or(NonZeroUsize::MIN);
        Chunks {
            ed25519: n(64),
            ecdsa_p256: n(64),
            bls12_381: n(16),
        }
    }
}

/// Batch sizes that follow the share of bad signatures seen lately (an exponentially
/// weighted average over calls). One bad signature fails its whole batch equation, which
/// is then re-checked in halves (Ed25519) or one by one (BLS): with few bad signatures
/// large batches are cheapest, with many the re-checks cost more than the batch saves,
/// and at a high enough share checking each signature alone is cheapest. The sizes per
/// share come from the `in_groups` bench of the crypto crate (docs/benchmarks.md,
/// "Bad signatures and batch size"). Shared by the calls of one verifier; lock-free.
#[derive(Debug)]
pub struct Adaptive {
    chunks: Chunks,
    /// The estimated bad share, in units of 1/[`SHARE_ONE`].
    share: AtomicU32,
}

/// The fixed-point one of [`Adaptive`]'s share.
const SHARE_ONE: u32 = 1 << 20;

/// Signatures at which one call's share counts for half of the new estimate.
const SHARE_HALF_WEIGHT: u64 = 1024;

/// Ed25519 batch sizes: the size for a share below each bound (bounds in parts per
/// thousand of bad signatures; above the last, one by one). From the `in_groups` bench
/// (512 signatures, one thread): all good, 64 takes 8.5 ms and one by one 18.2 ms; at 1 %
/// bad, 8 is best (12.7 ms) and 64 takes 24 ms; at 5 %, 4 (16.7 ms); from 10 %, one by
/// one (19.5 ms; 2 takes 20.5 ms).
const ED25519_BY_SHARE: [(u32, usize); 6] = [(1, 64), (3, 32), (8, 16), (25, 8), (65, 4), (85, 2)];

/// BLS batch sizes, as [`ED25519_BY_SHARE`]. A failing BLS batch is re-checked one by
/// one. Bench (128 signatures): all good, 16 takes 46 ms and one by one 126 ms; at 5 %
/// bad, 4 is best (116 ms); at 10 %, 4 and one by one are even (136 ms); at 20 %, one
/// by one (139 ms; 4 takes 177 ms).
const BLS_BY_SHARE: [(u32, usize); 3] = [(10, 16), (20, 8), (120, 4)];

impl Adaptive {
    /// Starts at `chunks`' sizes (no bad signature seen).
    pub fn new(chunks: Chunks) -> Adaptive {
        Adaptive {
            chunks,
            share: AtomicU32::new(0),
        }
    }

    /// The estimated share of bad signatures, 0.0 to 1.0.
    pub fn bad_share(&self) -> f64 {
        f64::from(self.share.load(Ordering::Relaxed)) / f64::from(SHARE_ONE)
    }

    /// The batch sizes for the current estimate.
    pub fn groups(&self) -> Groups {
        groups_for(self.chunks, self.share.load(Ordering::Relaxed))
    }

    /// Folds in one call: `bad` of `checked` signatures failed. A call of
    /// [`SHARE_HALF_WEIGHT`] signatures moves the estimate halfway to its own share.
    pub fn observe(&self, checked: usize, bad: usize) {
        if checked == 0 {
            return;
        }
        let checked = u64::try_from(checked).unwrap_or(u64::MAX);
        let bad = u64::try_from(bad).unwrap_or(u64::MAX).min(checked);
        let sample = u64::try_from(u128::from(bad) * u128::from(SHARE_ONE) / u128::from(checked))
            .unwrap_or(u64::from(SHARE_ONE));
        let weight = checked.min(1 << 24);
        let total = weight.saturating_add(SHARE_HALF_WEIGHT);
        // Relaxed read-modify-write: concurrent calls may drop one another's update,
        // which only delays the estimate.
        let old = u64::from(self.share.load(Ordering::Relaxed));
        let new = (old.saturating_mul(SHARE_HALF_WEIGHT) + sample.saturating_mul(weight)) / total;
        self.share.store(
            u32::try_from(new.min(u64::from(SHARE_ONE))).unwrap_or(SHARE_ONE),
            Ordering::Relaxed,
        );
    }
}

/// The batch sizes for an estimated bad share of `share` / [`SHARE_ONE`].
pub fn groups_for(chunks: Chunks, share: u32) -> Groups {
    let per_mille = u64::from(share).saturating_mul(1000) / u64::from(SHARE_ONE);
    let pick = |table: &[(u32, usize)], largest: usize| {
        table
            .iter()
            .find(|(bound, _)| per_mille < u64::from(*bound))
            .map_or(1, |(_, size)| *size)
            .min(largest)
            .max(1)
    };
    let mut groups = Groups::whole(chunks);
    groups.ed25519 = pick(&ED25519_BY_SHARE, groups.ed25519);
    groups.bls12_381 = pick(&BLS_BY_SHARE, groups.bls12_381);
    groups
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
    verify_in_groups(policies, txs, Groups::whole(chunks)).0
}

/// [`verify_batch`] with batch sizes from `adaptive`'s estimate of the bad-signature
/// share, which it then updates with what this call saw. The same verdicts.
pub fn verify_batch_adaptive(
    policies: &Policies,
    txs: &[(TxId, Arc<Tx>)],
    adaptive: &Adaptive,
) -> Vec<Option<Status>> {
    let (verdicts, seen) = verify_in_groups(policies, txs, adaptive.groups());
    adaptive.observe(seen.checked, seen.bad);
    verdicts
}

/// Signatures checked by one call, and how many of them were bad.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    checked: usize,
    bad: usize,
}

/// The unit of parallel work per scheme, and the largest batch equation within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Groups {
    /// Signatures of one scheme per rayon task.
    pub chunks: Chunks,
    /// Ed25519 signatures per batch equation (at most `chunks.ed25519`; 1 = one by one).
    pub ed25519: usize,
    /// BLS signatures per multi-pairing (at most `chunks.bls12_381`; 1 = one by one).
    pub bls12_381: usize,
}

impl Groups {
    /// One batch equation per chunk.
    pub fn whole(chunks: Chunks) -> Groups {
        Groups {
            chunks,
            ed25519: chunks.of(crypto::Scheme::Ed25519),
            bls12_381: chunks.of(crypto::Scheme::Bls12381),
        }
    }

    fn of(&self, scheme: crypto::Scheme) -> usize {
        match scheme {
            crypto::Scheme::Ed25519 => self.ed25519,
            crypto::Scheme::EcdsaP256 => 1,
            crypto::Scheme::Bls12381 => self.bls12_381,
        }
    }
}

fn verify_in_groups(
    policies: &Policies,
    txs: &[(TxId, Arc<Tx>)],
    groups: Groups,
) -> (Vec<Option<Status>>, Seen) {
    let mut seen = Seen::default();
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
        let verdicts = check_round(&plans, &slots, round, groups);
        seen.checked = seen.checked.saturating_add(verdicts.len());
        seen.bad = seen
            .bad
            .saturating_add(verdicts.iter().filter(|ok| !**ok).count());
        for ((t, n), ok) in slots.into_iter().zip(verdicts) {
            if ok && let Some(checks) = &mut plans[t] {
                checks[n].endorsed = true;
            }
        }
    }
    let verdicts = plans
        .into_iter()
        .map(|p| match p {
            Some(_) => None,
            None => Some(Status::AbortedSignatureInvalid),
        })
        .collect();
    (verdicts, seen)
}

/// Checks endorsement `round` of every slot; verdicts in slot order.
fn check_round(
    plans: &[Option<Vec<NsCheck<'_>>>],
    slots: &[Slot],
    round: usize,
    groups: Groups,
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
        work.extend(group.chunks(groups.chunks.of(group[0].1.key.scheme())));
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
            let size = part.first().map_or(1, |(_, c, _)| groups.of(c.key.scheme()));
            let verdicts = crypto::verify_namespace_endorsements_in_groups(&items, size);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn share(per_mille: u32) -> u32 {
        u32::try_from(u64::from(per_mille) * u64::from(SHARE_ONE) / 1000).unwrap_or(SHARE_ONE)
    }

    #[test]
    fn batches_shrink_as_the_bad_share_grows_and_stay_within_the_chunks() {
        let chunks = Chunks::default();
        let at = |per_mille| groups_for(chunks, share(per_mille));
        assert_eq!(at(0), Groups::whole(chunks));
        assert_eq!((at(0).ed25519, at(0).bls12_381), (64, 16));
        assert_eq!((at(2).ed25519, at(2).bls12_381), (32, 16));
        assert_eq!((at(11).ed25519, at(11).bls12_381), (8, 8));
        assert_eq!((at(50).ed25519, at(50).bls12_381), (4, 4));
        assert_eq!((at(100).ed25519, at(100).bls12_381), (1, 4));
        assert_eq!((at(300).ed25519, at(300).bls12_381), (1, 1));
        assert_eq!(at(1000).ed25519, 1);
        let mut previous = usize::MAX;
        for per_mille in 0..=1000 {
            let g = at(per_mille);
            assert!(g.ed25519 <= previous && g.ed25519 >= 1, "{per_mille}");
            assert!(g.bls12_381 >= 1 && g.bls12_381 <= chunks.bls12_381.get());
            previous = g.ed25519;
        }
        // Never larger than the chunk, which stays the unit of parallel work.
        let three = NonZeroUsize::new(3).unwrap();
        let small = groups_for(Chunks::uniform(three), 0);
        assert_eq!(
            (small.ed25519, small.bls12_381, small.chunks),
            (3, 3, Chunks::uniform(three))
        );
    }

    #[test]
    fn the_estimate_follows_what_calls_see() {
        let a = Adaptive::new(Chunks::default());
        assert_eq!(a.groups().ed25519, 64);
        a.observe(0, 0);
        assert!(a.bad_share().abs() < f64::EPSILON);
        // A share of 10 % in calls of 500: about there after a few calls.
        for _ in 0..6 {
            a.observe(500, 50);
        }
        assert!((a.bad_share() - 0.1).abs() < 0.01, "{}", a.bad_share());
        assert_eq!(a.groups().ed25519, 1);
        // One clean call of 1024 halves the distance to 0; clean calls bring it back.
        a.observe(1024, 0);
        assert!((a.bad_share() - 0.05).abs() < 0.006, "{}", a.bad_share());
        for _ in 0..20 {
            a.observe(500, 0);
        }
        assert_eq!(a.groups().ed25519, 64);
        // Out of range inputs are clamped, never a panic.
        a.observe(usize::MAX, usize::MAX);
        assert!(a.bad_share() > 0.999, "{}", a.bad_share());
        a.observe(10, 20);
        assert!(a.bad_share() <= 1.0);
    }
}
