//! Purpose-named signing and verification: thin wrappers over one private generic pair.

use rayon::prelude::*;

use crate::keys::{PublicInner, SecretInner};
use crate::{PublicKey, Purpose, Result, Scheme, Signature, SigningKey, bls, ecdsa, ed25519};

fn sign(purpose: Purpose, key: &SigningKey, message: &[u8]) -> Signature {
    match &key.0 {
        SecretInner::Ed25519(k) => ed25519::sign(k, purpose, message),
        SecretInner::EcdsaP256(k) => ecdsa::sign(k, purpose, message),
        SecretInner::Bls12381(k) => bls::sign(k, purpose, message),
    }
}

pub(crate) fn verify(purpose: Purpose, key: &PublicKey, message: &[u8], sig: &Signature) -> Result<()> {
    match key.inner() {
        PublicInner::Ed25519(k) => ed25519::verify(k, purpose, message, sig),
        PublicInner::EcdsaP256(k) => ecdsa::verify(k, purpose, message, sig),
        PublicInner::Bls12381(k) => bls::verify(k, purpose, message, sig),
    }
}

/// Signs a namespace endorsement (a transaction's namespace read-write set).
pub fn sign_namespace_endorsement(key: &SigningKey, message: &[u8]) -> Signature {
    sign(Purpose::NamespaceEndorsement, key, message)
}

/// Verifies a namespace endorsement.
pub fn verify_namespace_endorsement(key: &PublicKey, message: &[u8], sig: &Signature) -> Result<()> {
    verify(Purpose::NamespaceEndorsement, key, message, sig)
}

/// Signs a client request.
pub fn sign_client_request(key: &SigningKey, message: &[u8]) -> Signature {
    sign(Purpose::ClientRequest, key, message)
}

/// Verifies a client request signature.
pub fn verify_client_request(key: &PublicKey, message: &[u8], sig: &Signature) -> Result<()> {
    verify(Purpose::ClientRequest, key, message, sig)
}

/// Signs a batch attestation fragment (BAF).
pub fn sign_batch_attestation(key: &SigningKey, message: &[u8]) -> Signature {
    sign(Purpose::BatchAttestation, key, message)
}

/// Verifies a batch attestation fragment signature.
pub fn verify_batch_attestation(key: &PublicKey, message: &[u8], sig: &Signature) -> Result<()> {
    verify(Purpose::BatchAttestation, key, message, sig)
}

/// Signs a BFT consensus message.
pub fn sign_consensus_message(key: &SigningKey, message: &[u8]) -> Signature {
    sign(Purpose::ConsensusMessage, key, message)
}

/// Verifies a BFT consensus message signature.
pub fn verify_consensus_message(key: &PublicKey, message: &[u8], sig: &Signature) -> Result<()> {
    verify(Purpose::ConsensusMessage, key, message, sig)
}

/// Signs an ordering decision (one vote towards a decision certificate).
pub fn sign_decision_certificate(key: &SigningKey, message: &[u8]) -> Signature {
    sign(Purpose::DecisionCertificate, key, message)
}

/// Verifies one consenter's signature on an ordering decision.
pub fn verify_decision_certificate(key: &PublicKey, message: &[u8], sig: &Signature) -> Result<()> {
    verify(Purpose::DecisionCertificate, key, message, sig)
}

/// Signs a block header.
pub fn sign_block_header(key: &SigningKey, message: &[u8]) -> Signature {
    sign(Purpose::BlockHeader, key, message)
}

/// Verifies one consenter's signature on a block header.
pub fn verify_block_header(key: &PublicKey, message: &[u8], sig: &Signature) -> Result<()> {
    verify(Purpose::BlockHeader, key, message, sig)
}

/// Signs a network config update (a party admin's approval; docs/reconfiguration.md).
pub fn sign_config_update(key: &SigningKey, message: &[u8]) -> Signature {
    sign(Purpose::ConfigUpdate, key, message)
}

/// Verifies a party admin's signature on a network config update.
pub fn verify_config_update(key: &PublicKey, message: &[u8], sig: &Signature) -> Result<()> {
    verify(Purpose::ConfigUpdate, key, message, sig)
}

/// One (key, message, signature) triple of a batch verification.
#[derive(Debug, Clone, Copy)]
pub struct SignedMessage<'a> {
    /// The claimed signer.
    pub public_key: &'a PublicKey,
    /// The signed message (without any purpose prefix).
    pub message: &'a [u8],
    /// The signature to check.
    pub signature: &'a Signature,
}

/// Verifies many namespace endorsements; `result[i]` tells whether `items[i]` is valid.
///
/// Same verdicts as [`verify_namespace_endorsement`] one by one, faster: Ed25519 uses
/// batch verification (one chunk per rayon thread), BLS a random-linear-combination
/// multi-pairing, ECDSA P-256 verifies in parallel on rayon. A failing Ed25519 batch
/// falls back to its halves as batches, then to its items one by one; a failing BLS
/// batch to its items one by one. Run it off async worker threads.
pub fn verify_namespace_endorsements(items: &[SignedMessage<'_>]) -> Vec<bool> {
    verify_many(Purpose::NamespaceEndorsement, items)
}

/// Verifies many namespace endorsements on the calling thread, in batches of at most
/// `group` signatures of one scheme (`result[i]`: whether `items[i]` is valid; the same
/// verdicts as [`verify_namespace_endorsements`]).
///
/// The caller chooses the batch size, e.g. from the share of bad signatures it has seen:
/// a failing Ed25519 batch is re-checked in halves down to a few items, a failing BLS
/// batch one by one, so with many bad signatures small batches cost less. A `group` of 0
/// or 1 verifies every signature on its own, without a batch equation; ECDSA P-256
/// signatures are always checked one by one. No rayon here: callers parallelise over
/// their own chunks.
pub fn verify_namespace_endorsements_in_groups(items: &[SignedMessage<'_>], group: usize) -> Vec<bool> {
    let purpose = Purpose::NamespaceEndorsement;
    let one_by_one = |indices: &[usize]| -> Vec<(usize, bool)> {
        indices
            .iter()
            .map(|&i| (i, verify_one(purpose, &items[i])))
            .collect()
    };
    if group <= 1 {
        let all: Vec<usize> = (0..items.len()).collect();
        return verdicts_of(items.len(), one_by_one(&all));
    }
    let split = by_scheme(items);
    let mut results = one_by_one(&split.ecdsa);
    for part in split.ed25519.chunks(group) {
        results.extend(ed25519_verdicts(purpose, part, &one_by_one));
    }
    for part in split.bls.chunks(group) {
        results.extend(bls_verdicts(purpose, part, &one_by_one));
    }
    verdicts_of(items.len(), results)
}

/// Verifies many client request signatures (see [`verify_namespace_endorsements`]).
pub fn verify_client_requests(items: &[SignedMessage<'_>]) -> Vec<bool> {
    verify_many(Purpose::ClientRequest, items)
}

/// Verifies client request signatures of self-certified creators, whose identity is
/// their raw Ed25519 public key: `result[i]` for `items[i] = (key bytes, message,
/// signature)`, a key that is not an Ed25519 key being invalid. The parsed ones are
/// checked as one batch ([`verify_client_requests`]).
pub fn verify_client_requests_by_ed25519_key(items: &[(&[u8], &[u8], &[u8])]) -> Vec<bool> {
    let parsed: Vec<Option<(PublicKey, Signature)>> = items
        .iter()
        .map(|(key, _, sig)| {
            PublicKey::from_bytes(Scheme::Ed25519, key)
                .ok()
                .map(|pk| (pk, Signature::from_bytes(*sig)))
        })
        .collect();
    let batch: Vec<SignedMessage<'_>> = parsed
        .iter()
        .zip(items)
        .filter_map(|(p, (_, message, _))| {
            p.as_ref().map(|(public_key, signature)| SignedMessage {
                public_key,
                message,
                signature,
            })
        })
        .collect();
    let mut verdicts = verify_client_requests(&batch).into_iter();
    parsed
        .iter()
        .map(|p| p.is_some() && verdicts.next().unwrap_or(false))
        .collect()
}

/// Verifies many batch attestation fragments (see [`verify_namespace_endorsements`]).
pub fn verify_batch_attestations(items: &[SignedMessage<'_>]) -> Vec<bool> {
    verify_many(Purpose::BatchAttestation, items)
}

/// An Ed25519 item of [`verify_many`]: its index and (key, message, signature).
type EdItem<'a> = (usize, (&'a ed25519_dalek::VerifyingKey, &'a [u8], &'a Signature));

/// Checks items (by index) one by one: `(index, valid)`.
type OneByOne<'f> = dyn Fn(&[usize]) -> Vec<(usize, bool)> + Sync + 'f;

/// Below this many items, a failed Ed25519 batch is checked one by one.
const ED25519_ONE_BY_ONE: usize = 8;

/// Verdicts of Ed25519 items: one batch; when it fails, each half as a batch of its own,
/// down to [`ED25519_ONE_BY_ONE`] items checked one by one. A bad signature then costs a
/// few batches of the halves around it instead of a single verification of every item.
fn ed25519_verdicts(purpose: Purpose, part: &[EdItem<'_>], one_by_one: &OneByOne<'_>) -> Vec<(usize, bool)> {
    let triples: Vec<_> = part.iter().map(|(_, t)| *t).collect();
    if ed25519::verify_batch(purpose, &triples) {
        return part.iter().map(|(i, _)| (*i, true)).collect();
    }
    if part.len() <= ED25519_ONE_BY_ONE {
        let indices: Vec<usize> = part.iter().map(|(i, _)| *i).collect();
        return one_by_one(&indices);
    }
    let (left, right) = part.split_at(part.len() / 2);
    let mut out = ed25519_verdicts(purpose, left, one_by_one);
    out.extend(ed25519_verdicts(purpose, right, one_by_one));
    out
}

fn verify_many(purpose: Purpose, items: &[SignedMessage<'_>]) -> Vec<bool> {
    let split = by_scheme(items);
    let one_by_one = |indices: &[usize]| -> Vec<(usize, bool)> {
        indices
            .par_iter()
            .map(|&i| (i, verify_one(purpose, &items[i])))
            .collect()
    };
    let mut results = one_by_one(&split.ecdsa);
    if !split.ed25519.is_empty() {
        let chunk = split.ed25519.len().div_ceil(rayon::current_num_threads().max(1));
        let ed_results: Vec<Vec<(usize, bool)>> = split
            .ed25519
            .par_chunks(chunk)
            .map(|part| ed25519_verdicts(purpose, part, &one_by_one))
            .collect();
        results.extend(ed_results.into_iter().flatten());
    }
    if !split.bls.is_empty() {
        results.extend(bls_verdicts(purpose, &split.bls, &one_by_one));
    }
    verdicts_of(items.len(), results)
}

/// A BLS item of [`verify_many`]: its index and (key, message, signature).
type BlsItem<'a> = (usize, (&'a blst::min_pk::PublicKey, &'a [u8], &'a Signature));

/// The items of one call, by scheme (indices into the call's items).
struct ByScheme<'a> {
    ed25519: Vec<EdItem<'a>>,
    ecdsa: Vec<usize>,
    bls: Vec<BlsItem<'a>>,
}

fn by_scheme<'a>(items: &[SignedMessage<'a>]) -> ByScheme<'a> {
    let mut split = ByScheme {
        ed25519: Vec::new(),
        ecdsa: Vec::new(),
        bls: Vec::new(),
    };
    for (i, item) in items.iter().enumerate() {
        match item.public_key.inner() {
            PublicInner::Ed25519(k) => split.ed25519.push((i, (k, item.message, item.signature))),
            PublicInner::EcdsaP256(_) => split.ecdsa.push(i),
            PublicInner::Bls12381(k) => split.bls.push((i, (k, item.message, item.signature))),
        }
    }
    split
}

/// One item checked on its own.
fn verify_one(purpose: Purpose, item: &SignedMessage<'_>) -> bool {
    verify(purpose, item.public_key, item.message, item.signature).is_ok()
}

/// Verdicts of BLS items: one multi-pairing; when it fails, each item on its own.
fn bls_verdicts(purpose: Purpose, part: &[BlsItem<'_>], one_by_one: &OneByOne<'_>) -> Vec<(usize, bool)> {
    let triples: Vec<_> = part.iter().map(|(_, t)| *t).collect();
    if bls::verify_batch(purpose, &triples) {
        part.iter().map(|(i, _)| (*i, true)).collect()
    } else {
        let indices: Vec<usize> = part.iter().map(|(i, _)| *i).collect();
        one_by_one(&indices)
    }
}

/// `(index, valid)` pairs as a vector of `n` verdicts (an index never given: invalid).
fn verdicts_of(n: usize, results: Vec<(usize, bool)>) -> Vec<bool> {
    let mut verdicts = vec![false; n];
    for (i, ok) in results {
        verdicts[i] = ok;
    }
    verdicts
}
