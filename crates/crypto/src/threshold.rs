//! t-of-n threshold BLS (min_pk) with a trusted dealer.
//!
//! The dealer picks a random polynomial `f` of degree `t-1` over the BLS12-381 scalar
//! field; the group secret is `f(0)`, share `i` (for `i` in `1..=n`) is `f(i)`. A share
//! holder signs like any BLS signer (same purpose DST), giving a partial signature
//! `σ_i = f(i)·H(m)`. Any `t` partials combine by Lagrange interpolation in the exponent,
//! `σ = Σ λ_i(0)·σ_i = f(0)·H(m)`, which is an ordinary BLS signature under the group key.
//! Scalar arithmetic uses the pure-Rust `bls12_381` field; the G1/G2 multi-scalar
//! multiplications go through blst's safe `MultiPoint` API.

use bls12_381::Scalar;
use blst::MultiPoint;
use blst::min_pk::{PublicKey as BlsPublicKey, SecretKey, Signature as BlsSignature};
use rand::{CryptoRng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::keys::{PublicInner, SecretInner};
use crate::purpose::THRESHOLD_DEAL_PREFIX;
use crate::{CryptoError, PublicKey, Purpose, Result, Scheme, Signature, SigningKey, bls, sign};

/// Upper bound on the number of shares a dealer hands out.
pub const MAX_SHARES: u32 = 1024;

/// Bits of a BLS12-381 scalar (the group order r is a 255-bit prime).
const SCALAR_BITS: usize = 255;

/// One holder's secret share: index `i` in `1..=n` and the BLS key `f(i)`.
#[derive(Clone, Debug)]
pub struct KeyShare {
    index: u32,
    key: SigningKey,
}

impl KeyShare {
    /// Rebuilds a share from its index and BLS signing key (e.g. loaded from config).
    pub fn new(index: u32, key: SigningKey) -> Result<KeyShare> {
        if key.scheme() != Scheme::Bls12381 {
            return Err(CryptoError::SchemeMismatch {
                expected: Scheme::Bls12381,
                got: key.scheme(),
            });
        }
        if index == 0 || index > MAX_SHARES {
            return Err(CryptoError::ShareIndexOutOfRange {
                index,
                shares: MAX_SHARES,
            });
        }
        Ok(KeyShare { index, key })
    }

    /// The share index (1-based).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The share's BLS signing key.
    pub fn signing_key(&self) -> &SigningKey {
        &self.key
    }

    /// The share's public key, against which its partial signatures verify.
    pub fn public_key(&self) -> PublicKey {
        self.key.public_key()
    }
}

/// A partial signature by share `index`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartialSignature {
    /// Index of the share that produced it (1-based).
    pub index: u32,
    /// The share's BLS signature.
    pub signature: Signature,
}

/// The public side of a threshold key set: threshold, group key and every share's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThresholdPublicKeys {
    threshold: u32,
    group: PublicKey,
    shares: Vec<PublicKey>,
}

impl ThresholdPublicKeys {
    /// Builds and checks the public key set: `1 <= threshold <= shares.len() <= MAX_SHARES`,
    /// all keys BLS, and all share keys on one degree `threshold-1` polynomial whose value
    /// at 0 is the group key (interpolated in G1 from shares `1..=threshold`).
    pub fn new(threshold: u32, group: PublicKey, shares: Vec<PublicKey>) -> Result<Self> {
        let n = u32::try_from(shares.len()).unwrap_or(u32::MAX);
        check_params(threshold, n)?;
        let group_point = bls_public(&group)?;
        let points = shares.iter().map(bls_public).collect::<Result<Vec<_>>>()?;
        let basis: Vec<u32> = (1..=threshold).collect();
        let base_points = &points[..threshold as usize];
        if interpolate_g1(base_points, &basis, 0) != group_point.compress() {
            return Err(CryptoError::InconsistentShares { index: 0 });
        }
        for j in threshold + 1..=n {
            if interpolate_g1(base_points, &basis, j) != points[j as usize - 1].compress() {
                return Err(CryptoError::InconsistentShares { index: j });
            }
        }
        Ok(ThresholdPublicKeys {
            threshold,
            group,
            shares,
        })
    }

    /// The threshold t.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// The number of shares n.
    pub fn share_count(&self) -> u32 {
        self.shares.len() as u32
    }

    /// The group public key; aggregated signatures verify under it with plain BLS.
    pub fn group_public_key(&self) -> &PublicKey {
        &self.group
    }

    /// The public key of share `index` (1-based).
    pub fn share_public_key(&self, index: u32) -> Result<&PublicKey> {
        self.check_index(index)?;
        Ok(&self.shares[index as usize - 1])
    }

    fn check_index(&self, index: u32) -> Result<()> {
        if index == 0 || index > self.share_count() {
            return Err(CryptoError::ShareIndexOutOfRange {
                index,
                shares: self.share_count(),
            });
        }
        Ok(())
    }
}

/// A dealer's output: the public key set and every holder's secret share.
#[derive(Clone, Debug)]
pub struct ThresholdKeySet {
    /// Threshold, group key and share keys.
    pub public: ThresholdPublicKeys,
    /// Secret shares, `shares[i-1]` has index `i`.
    pub shares: Vec<KeyShare>,
}

/// Deals a t-of-n key set deterministically from a seed (tests, demos, fixtures).
///
/// The polynomial coefficients come from ChaCha20 seeded with
/// `SHA-256("fabrx/threshold-deal/v1/" ‖ t ‖ "/" ‖ n ‖ "/" ‖ seed)` (t, n in decimal),
/// each coefficient reduced from 64 bytes of output.
pub fn deal_threshold_keys(threshold: u32, shares: u32, seed: &str) -> Result<ThresholdKeySet> {
    let mut hasher = Sha256::new();
    hasher.update(THRESHOLD_DEAL_PREFIX);
    hasher.update(format!("{threshold}/{shares}/").as_bytes());
    hasher.update(seed.as_bytes());
    let mut rng = ChaCha20Rng::from_seed(hasher.finalize().into());
    deal_threshold_keys_with_rng(threshold, shares, &mut rng)
}

/// Deals a t-of-n key set from a cryptographic RNG.
pub fn deal_threshold_keys_with_rng<R: RngCore + CryptoRng>(
    threshold: u32,
    shares: u32,
    rng: &mut R,
) -> Result<ThresholdKeySet> {
    check_params(threshold, shares)?;
    loop {
        let coefficients: Vec<Scalar> = (0..threshold).map(|_| random_scalar(rng)).collect();
        let secrets: Vec<Option<SecretKey>> = (0..=shares)
            .map(|x| to_secret_key(&eval(&coefficients, x)))
            .collect();
        // A zero group secret or share has probability ~n/2^255; redraw if it happens.
        let Some(all) = secrets.into_iter().collect::<Option<Vec<_>>>() else {
            continue;
        };
        let group = PublicKey::from_inner(PublicInner::Bls12381(all[0].sk_to_pk()));
        let key_shares: Vec<KeyShare> = all[1..]
            .iter()
            .zip(1..)
            .map(|(sk, index)| KeyShare {
                index,
                key: SigningKey(SecretInner::Bls12381(sk.clone())),
            })
            .collect();
        let public = ThresholdPublicKeys {
            threshold,
            group,
            shares: key_shares.iter().map(KeyShare::public_key).collect(),
        };
        return Ok(ThresholdKeySet {
            public,
            shares: key_shares,
        });
    }
}

/// A share holder's partial signature on a namespace endorsement.
pub fn sign_namespace_endorsement_partial(share: &KeyShare, message: &[u8]) -> PartialSignature {
    sign_partial(Purpose::NamespaceEndorsement, share, message)
}

/// Verifies a partial namespace-endorsement signature against its share's public key.
pub fn verify_namespace_endorsement_partial(
    keys: &ThresholdPublicKeys,
    message: &[u8],
    partial: &PartialSignature,
) -> Result<()> {
    let key = keys.share_public_key(partial.index)?;
    sign::verify(Purpose::NamespaceEndorsement, key, message, &partial.signature)
}

fn sign_partial(purpose: Purpose, share: &KeyShare, message: &[u8]) -> PartialSignature {
    let SecretInner::Bls12381(sk) = &share.key.0 else {
        unreachable!("KeyShare holds only BLS keys (checked at construction)")
    };
    PartialSignature {
        index: share.index,
        signature: bls::sign(sk, purpose, message),
    }
}

/// Combines partial signatures into the group signature.
///
/// Needs at least `t` partials with distinct indices in `1..=n` (duplicates anywhere in
/// the list are rejected); the first `t` are interpolated. Partials are not verified
/// here: verify the result under the group key, and on failure check the partials one
/// by one ([`verify_namespace_endorsement_partial`]) to find the bad share.
pub fn aggregate_partials(keys: &ThresholdPublicKeys, partials: &[PartialSignature]) -> Result<Signature> {
    let mut seen = std::collections::HashSet::with_capacity(partials.len());
    for p in partials {
        keys.check_index(p.index)?;
        if !seen.insert(p.index) {
            return Err(CryptoError::DuplicateShareIndex { index: p.index });
        }
    }
    let t = keys.threshold as usize;
    if partials.len() < t {
        return Err(CryptoError::NotEnoughPartials {
            needed: keys.threshold,
            got: partials.len() as u32,
        });
    }
    let chosen = &partials[..t];
    // Decompression (a square root in Fp2) costs about a third of a scalar
    // multiplication: spread it over the rayon pool.
    let sigs = chosen
        .par_iter()
        .map(|p| bls::parse_signature(&p.signature))
        .collect::<Result<Vec<BlsSignature>>>()?;
    let indices: Vec<u32> = chosen.iter().map(|p| p.index).collect();
    let scalars = lagrange_scalar_bytes(&indices, 0);
    let combined = sigs.as_slice().mult(&scalars, SCALAR_BITS).to_signature();
    Ok(bls::to_signature(&combined))
}

fn check_params(threshold: u32, shares: u32) -> Result<()> {
    if threshold == 0 || threshold > shares || shares > MAX_SHARES {
        return Err(CryptoError::InvalidThreshold { threshold, shares });
    }
    Ok(())
}

fn bls_public(key: &PublicKey) -> Result<&BlsPublicKey> {
    match key.inner() {
        PublicInner::Bls12381(k) => Ok(k),
        _ => Err(CryptoError::SchemeMismatch {
            expected: Scheme::Bls12381,
            got: key.scheme(),
        }),
    }
}

fn random_scalar<R: RngCore>(rng: &mut R) -> Scalar {
    let mut wide = [0u8; 64];
    rng.fill_bytes(&mut wide);
    Scalar::from_bytes_wide(&wide)
}

/// Horner evaluation of the polynomial at `x`.
fn eval(coefficients: &[Scalar], x: u32) -> Scalar {
    let x = Scalar::from(u64::from(x));
    coefficients
        .iter()
        .rev()
        .fold(Scalar::zero(), |acc, c| acc * x + c)
}

/// A nonzero scalar as a blst secret key (blst wants big-endian; `bls12_381` gives LE).
fn to_secret_key(s: &Scalar) -> Option<SecretKey> {
    let mut be = s.to_bytes();
    be.reverse();
    SecretKey::from_bytes(&be).ok()
}

/// Lagrange basis coefficients `λ_i(x) = Π_{j≠i} (x - j) / (i - j)` for distinct indices.
/// The denominators are inverted together (Montgomery's trick: one field inversion).
fn lagrange_coefficients(indices: &[u32], x: u32) -> Vec<Scalar> {
    let x = Scalar::from(u64::from(x));
    let fractions: Vec<(Scalar, Scalar)> = indices
        .iter()
        .map(|&i| {
            let xi = Scalar::from(u64::from(i));
            indices
                .iter()
                .filter(|&&j| j != i)
                .fold((Scalar::one(), Scalar::one()), |(num, den), &j| {
                    let xj = Scalar::from(u64::from(j));
                    (num * (x - xj), den * (xi - xj))
                })
        })
        .collect();
    // prefix[k] = den_0 · … · den_{k-1}
    let mut prefix = Vec::with_capacity(fractions.len() + 1);
    prefix.push(Scalar::one());
    for (_, den) in &fractions {
        let last = prefix[prefix.len() - 1];
        prefix.push(last * den);
    }
    // Distinct indices below r make every denominator, hence the product, nonzero.
    let mut inv = prefix[fractions.len()].invert().unwrap();
    let mut out = vec![Scalar::zero(); fractions.len()];
    for k in (0..fractions.len()).rev() {
        let (num, den) = fractions[k];
        out[k] = num * inv * prefix[k];
        inv *= den;
    }
    out
}

/// The coefficients as concatenated 32-byte little-endian scalars, blst's MSM format.
fn lagrange_scalar_bytes(indices: &[u32], x: u32) -> Vec<u8> {
    lagrange_coefficients(indices, x)
        .iter()
        .flat_map(|s| s.to_bytes())
        .collect()
}

/// Interpolates G1 points (share public keys at `indices`) at `x`; compressed result.
fn interpolate_g1(points: &[&BlsPublicKey], indices: &[u32], x: u32) -> [u8; 48] {
    let owned: Vec<BlsPublicKey> = points.iter().map(|p| **p).collect();
    let scalars = lagrange_scalar_bytes(indices, x);
    owned
        .as_slice()
        .mult(&scalars, SCALAR_BITS)
        .to_public_key()
        .compress()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lagrange_coefficients_at_zero_sum_to_one() {
        for indices in [vec![1], vec![1, 2, 3], vec![2, 5, 9, 10], vec![7, 3]] {
            let sum = lagrange_coefficients(&indices, 0)
                .iter()
                .fold(Scalar::zero(), |a, b| a + b);
            assert_eq!(sum, Scalar::one(), "{indices:?}");
        }
    }

    #[test]
    fn batch_inversion_matches_one_by_one() {
        let indices = [3u32, 1, 8, 5];
        let got = lagrange_coefficients(&indices, 2);
        for (k, &i) in indices.iter().enumerate() {
            let xi = Scalar::from(u64::from(i));
            let expected = indices
                .iter()
                .filter(|&&j| j != i)
                .fold(Scalar::one(), |acc, &j| {
                    let xj = Scalar::from(u64::from(j));
                    acc * (Scalar::from(2u64) - xj) * (xi - xj).invert().unwrap()
                });
            assert_eq!(got[k], expected, "index {i}");
        }
    }

    #[test]
    fn interpolation_recovers_the_polynomial() {
        // f(x) = 5 + 3x + 2x^2
        let f = [Scalar::from(5u64), Scalar::from(3u64), Scalar::from(2u64)];
        assert_eq!(eval(&f, 0), Scalar::from(5u64));
        assert_eq!(eval(&f, 2), Scalar::from(19u64));
        for (indices, x) in [(vec![1, 2, 3], 0), (vec![4, 2, 9], 0), (vec![1, 2, 3], 7)] {
            let lambdas = lagrange_coefficients(&indices, x);
            let got = indices
                .iter()
                .zip(&lambdas)
                .fold(Scalar::zero(), |acc, (&i, l)| acc + eval(&f, i) * l);
            assert_eq!(got, eval(&f, x), "{indices:?} at {x}");
        }
    }

    #[test]
    fn scalars_map_to_blst_keys_big_endian() {
        let sk = to_secret_key(&Scalar::from(1u64)).unwrap();
        let mut expected = [0u8; 32];
        expected[31] = 1;
        assert_eq!(sk.to_bytes(), expected);
        assert!(to_secret_key(&Scalar::zero()).is_none());
    }
}
