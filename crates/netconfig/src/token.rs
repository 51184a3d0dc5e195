//! The token application's section (`token` in the config file; docs/token.md): the
//! namespace, the t-of-n threshold BLS key set whose group key is its policy, where each
//! endorser (one per share, run by party `((i − 1) mod N) + 1`) and each committing
//! party's query service listen, and the keys that may issue.
//!
//! Secrets stay in files: `keys/endorsers/endorser-<i>.key` (share i, BLS) and
//! `keys/admin/issuer.key` (the first issuer's Ed25519 key).

use std::path::{Path, PathBuf};

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::file::{EndorserFile, QueryFile, TokenFile};
use types::PartyId;

/// Default threshold t of a generated network's endorsers.
pub const DEFAULT_THRESHOLD: u32 = 3;
/// Default number of endorsers n of a generated network.
pub const DEFAULT_ENDORSERS: u32 = 5;

/// One endorser, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndorserNode {
    /// Its share index (1..n).
    pub index: u32,
    /// The party that runs it.
    pub party: PartyId,
    /// Where it listens.
    pub endpoint: Endpoint,
}

/// The `token` section, parsed.
#[derive(Debug, Clone)]
pub struct TokenApp {
    /// The namespace.
    pub namespace: String,
    /// Its policy version.
    pub ns_version: u64,
    /// The threshold key set (checked consistent).
    pub public: crypto::ThresholdPublicKeys,
    /// The endorsers, in share order.
    pub endorsers: Vec<EndorserNode>,
    /// Keys that may issue.
    pub issuers: Vec<token::Address>,
    /// Query services by party.
    pub query: Vec<(PartyId, Endpoint)>,
}

fn bad(reason: String) -> Error {
    Error::Token { reason }
}

fn bls_key(text: &str, what: &str) -> Result<crypto::PublicKey> {
    let key: crypto::PublicKey = text.parse().map_err(|e| bad(format!("{what} {text:?}: {e}")))?;
    if key.scheme() != crypto::Scheme::Bls12381 {
        return Err(bad(format!("{what} is not a bls12-381 key")));
    }
    Ok(key)
}

/// Parses and checks the section against the parties in force `ids`.
pub(crate) fn parse(file: &TokenFile, ids: &[PartyId]) -> Result<TokenApp> {
    if !types::check::is_valid_namespace_id(&file.namespace) || file.namespace == types::META_NAMESPACE {
        return Err(bad(format!(
            "namespace {:?} is not a valid namespace id",
            file.namespace
        )));
    }
    let group = bls_key(&file.group_key, "group_key")?;
    let mut shares = Vec::with_capacity(file.endorsers.len());
    let mut endorsers = Vec::with_capacity(file.endorsers.len());
    for (i, e) in file.endorsers.iter().enumerate() {
        let expected = u32::try_from(i + 1).unwrap_or(u32::MAX);
        if e.index != expected {
            return Err(bad(format!("endorser {} listed at position {expected}", e.index)));
        }
        if !ids.contains(&e.party) {
            return Err(bad(format!(
                "endorser {} of party {} (the parties are {ids:?})",
                e.index, e.party
            )));
        }
        shares.push(bls_key(
            &e.public_key,
            &format!("endorser {} public_key", e.index),
        )?);
        endorsers.push(EndorserNode {
            index: e.index,
            party: e.party,
            endpoint: Endpoint::parse(&e.endpoint)
                .map_err(|err| bad(format!("endorser {}: {err}", e.index)))?,
        });
    }
    let public = crypto::ThresholdPublicKeys::new(file.threshold, group, shares)
        .map_err(|e| bad(format!("threshold key set: {e}")))?;
    let issuers = file
        .issuers
        .iter()
        .map(|h| token::address_from_hex(h).map_err(|e| bad(format!("issuer: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let query = file
        .query
        .iter()
        .map(|q| {
            if !ids.contains(&q.party) {
                return Err(bad(format!(
                    "query service of party {} (the parties are {ids:?})",
                    q.party
                )));
            }
            let ep =
                Endpoint::parse(&q.endpoint).map_err(|e| bad(format!("query of party {}: {e}", q.party)))?;
            Ok((q.party, ep))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(TokenApp {
        namespace: file.namespace.clone(),
        ns_version: file.ns_version,
        public,
        endorsers,
        issuers,
        query,
    })
}

/// `<dir>/keys/endorsers/endorser-<i>.key`: share i of the token namespace's key.
pub fn endorser_key_path(dir: &Path, index: u32) -> PathBuf {
    dir.join("keys")
        .join("endorsers")
        .join(format!("endorser-{index}.key"))
}

/// `<dir>/keys/admin/issuer.key`: the first issuer's key.
pub fn issuer_key_path(dir: &Path) -> PathBuf {
    dir.join("keys").join("admin").join("issuer.key")
}

/// The port of token service `k` of a generated network: after every ordering and
/// committer port; `k` = p − 1 for party p's query service, N + i − 1 for endorser i.
pub fn token_port(base_port: u16, parties: u32, shards: u32, k: u32) -> Option<u16> {
    let before = u64::from(parties) * (u64::from(shards) + 3) + u64::from(parties) * 3;
    u16::try_from(u64::from(base_port) + before + u64::from(k)).ok()
}

/// The party that runs endorser `index` in a generated network.
pub fn endorser_party(index: u32, parties: u32) -> PartyId {
    (index.saturating_sub(1) % parties.max(1)) + 1
}

/// What [`generated`] made: the section and the secrets to write.
pub(crate) struct GeneratedToken {
    pub file: TokenFile,
    pub shares: Vec<crypto::KeyShare>,
    pub issuer: crypto::SigningKey,
}

/// A generated network's section: t-of-n shares (seeded or random), one issuer.
pub(crate) fn generated(
    seed: Option<u64>,
    host: &str,
    base_port: u16,
    parties: u32,
    shards: u32,
) -> Result<GeneratedToken> {
    let (t, n) = (DEFAULT_THRESHOLD, DEFAULT_ENDORSERS);
    let set = match seed {
        Some(seed) => crypto::deal_threshold_keys(t, n, &format!("fabrx-net/{seed}/token")),
        None => crypto::deal_threshold_keys_with_rng(t, n, &mut rand::rngs::OsRng),
    }
    .map_err(|e| bad(format!("dealing the endorsers' shares: {e}")))?;
    let issuer = match seed {
        Some(seed) => {
            crypto::derive_signing_key(crypto::Scheme::Ed25519, &format!("fabrx-net/{seed}/admin/issuer"))
        }
        None => crypto::SigningKey::generate(crypto::Scheme::Ed25519, &mut rand::rngs::OsRng),
    };
    let endpoint = |k: u32| {
        let port = token_port(base_port, parties, shards, k).ok_or_else(|| Error::Generate {
            reason: format!(
                "the token services would need a port above 65535 (base port {base_port}, {parties} parties, {shards} shards)"
            ),
        })?;
        Ok::<_, Error>(if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        })
    };
    let endorsers = set
        .shares
        .iter()
        .map(|s| {
            Ok(EndorserFile {
                index: s.index(),
                party: endorser_party(s.index(), parties),
                endpoint: endpoint(parties + s.index() - 1)?,
                public_key: s.public_key().to_string(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let query = (1..=parties)
        .map(|p| {
            Ok(QueryFile {
                party: p,
                endpoint: endpoint(p - 1)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let file = TokenFile {
        namespace: token::DEFAULT_NAMESPACE.into(),
        ns_version: 0,
        threshold: t,
        group_key: set.public.group_public_key().to_string(),
        endorsers,
        issuers: vec![hex::encode(issuer.public_key().as_bytes())],
        query,
    };
    Ok(GeneratedToken {
        file,
        shares: set.shares,
        issuer,
    })
}
