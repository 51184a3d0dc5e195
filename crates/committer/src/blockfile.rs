//! The JSON Lines block format of `fabrx committer apply` (docs/committer-apply.md).
//!
//! Keys, values and metadata are UTF-8 strings, or hex when they start with `0x`. Keys
//! are derived from seeds ([`crypto::derive_signing_key`], [`crypto::deal_threshold_keys`]),
//! and each namespace is signed by its `signer` over the canonical bytes of
//! `types::endorsement`.

use crate::{Error, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use types::endorsement::namespace_signing_bytes;
use types::{Block, Endorsement, NamespacePolicy, Read, ReadWrite, Tx, TxId, TxNamespace, Write};

/// A key or signer description: `{"scheme":"ed25519"|"ecdsa-p256","seed":…}` or
/// `{"scheme":"bls-threshold","seed":…,"t":3,"n":5[,"shares":[1,2,3]]}`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KeySpec {
    /// `ed25519`, `ecdsa-p256` or `bls-threshold`.
    pub scheme: String,
    /// Seed the key derives from.
    pub seed: String,
    /// Threshold (bls-threshold).
    #[serde(default)]
    pub t: Option<u32>,
    /// Number of shares (bls-threshold).
    #[serde(default)]
    pub n: Option<u32>,
    /// Share indices that sign (bls-threshold signers).
    #[serde(default)]
    pub shares: Option<Vec<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenesisLine {
    genesis: Genesis,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Genesis {
    meta_policy: KeySpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockLine {
    block: u64,
    txs: Vec<TxSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TxSpec {
    id: String,
    #[serde(default)]
    namespaces: Vec<NsSpec>,
    #[serde(default)]
    metadata: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NsSpec {
    ns: String,
    #[serde(default)]
    version: u64,
    #[serde(default)]
    reads: Vec<ReadSpec>,
    #[serde(default)]
    read_writes: Vec<ReadWriteSpec>,
    #[serde(default)]
    blind_writes: Vec<WriteSpec>,
    #[serde(default)]
    signer: Option<KeySpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadSpec {
    key: String,
    #[serde(default)]
    version: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadWriteSpec {
    key: String,
    #[serde(default)]
    version: Option<u64>,
    value: ValueSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteSpec {
    key: String,
    value: ValueSpec,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ValueSpec {
    Text(String),
    Policy { policy: KeySpec },
}

/// A parsed block file.
#[derive(Debug, Clone)]
pub struct BlockFile {
    /// The policy that endorses `_meta` txs.
    pub meta_policy: NamespacePolicy,
    /// The blocks in file order.
    pub blocks: Vec<Block>,
}

/// Decodes a key, value or metadata string: hex after `0x`, else UTF-8 bytes.
pub fn decode_bytes(s: &str) -> std::result::Result<Vec<u8>, String> {
    match s.strip_prefix("0x") {
        Some(h) => hex::decode(h).map_err(|e| format!("bad hex {s:?}: {e}")),
        None => Ok(s.as_bytes().to_vec()),
    }
}

/// Encodes bytes for output: UTF-8 text when it is, else `0x` hex.
pub fn encode_bytes(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if !s.starts_with("0x") => s.to_string(),
        _ => format!("0x{}", hex::encode(b)),
    }
}

/// Derives keys from seeds, caching threshold deals (dealing is the slow part).
#[derive(Default)]
pub struct Keyring {
    deals: HashMap<(String, u32, u32), crypto::ThresholdKeySet>,
}

impl Keyring {
    fn deal(&mut self, seed: &str, t: u32, n: u32) -> std::result::Result<&crypto::ThresholdKeySet, String> {
        let key = (seed.to_string(), t, n);
        if !self.deals.contains_key(&key) {
            let set = crypto::deal_threshold_keys(t, n, seed).map_err(|e| format!("threshold deal: {e}"))?;
            self.deals.insert(key.clone(), set);
        }
        Ok(&self.deals[&key])
    }

    /// The namespace policy a key spec describes.
    pub fn policy(&mut self, spec: &KeySpec) -> std::result::Result<NamespacePolicy, String> {
        match spec.scheme.as_str() {
            "ed25519" | "ecdsa-p256" => {
                let scheme = if spec.scheme == "ed25519" {
                    crypto::Scheme::Ed25519
                } else {
                    crypto::Scheme::EcdsaP256
                };
                Ok(policy::policy_of(
                    &crypto::derive_signing_key(scheme, &spec.seed).public_key(),
                ))
            }
            "bls-threshold" => {
                let (t, n) = threshold_params(spec)?;
                let set = self.deal(&spec.seed, t, n)?;
                Ok(policy::policy_of(set.public.group_public_key()))
            }
            other => Err(format!("unknown scheme {other:?}")),
        }
    }

    /// Signs `msg` as a namespace endorsement by the signer a key spec describes.
    pub fn sign(&mut self, spec: &KeySpec, msg: &[u8]) -> std::result::Result<Vec<u8>, String> {
        match spec.scheme.as_str() {
            "ed25519" => Ok(sign_single(crypto::Scheme::Ed25519, &spec.seed, msg)),
            "ecdsa-p256" => Ok(sign_single(crypto::Scheme::EcdsaP256, &spec.seed, msg)),
            "bls-threshold" => {
                let (t, n) = threshold_params(spec)?;
                let shares = spec.shares.clone().unwrap_or_else(|| (1..=t).collect());
                let set = self.deal(&spec.seed, t, n)?;
                let mut partials = Vec::new();
                for i in shares {
                    let share = set
                        .shares
                        .iter()
                        .find(|s| s.index() == i)
                        .ok_or_else(|| format!("share {i} out of 1..={n}"))?;
                    partials.push(crypto::sign_namespace_endorsement_partial(share, msg));
                }
                // Too few shares cannot aggregate: the namespace goes unsigned (113).
                Ok(crypto::aggregate_partials(&set.public, &partials)
                    .map(|s| s.into_bytes())
                    .unwrap_or_default())
            }
            other => Err(format!("unknown scheme {other:?}")),
        }
    }
}

fn sign_single(scheme: crypto::Scheme, seed: &str, msg: &[u8]) -> Vec<u8> {
    crypto::sign_namespace_endorsement(&crypto::derive_signing_key(scheme, seed), msg).into_bytes()
}

fn threshold_params(spec: &KeySpec) -> std::result::Result<(u32, u32), String> {
    match (spec.t, spec.n) {
        (Some(t), Some(n)) => Ok((t, n)),
        _ => Err("bls-threshold needs \"t\" and \"n\"".into()),
    }
}

/// The default meta policy: Ed25519 from seed "admin".
pub fn default_meta_policy() -> KeySpec {
    KeySpec {
        scheme: "ed25519".into(),
        seed: "admin".into(),
        t: None,
        n: None,
        shares: None,
    }
}

/// Parses a block file.
pub fn parse(text: &str) -> Result<BlockFile> {
    let mut keys = Keyring::default();
    let mut meta_spec = default_meta_policy();
    let mut blocks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |detail: String| Error::BlockFile {
            line: line_no,
            detail,
        };
        if line.trim().is_empty() {
            continue;
        }
        if blocks.is_empty()
            && let Ok(g) = serde_json::from_str::<GenesisLine>(line)
        {
            meta_spec = g.genesis.meta_policy;
            continue;
        }
        let b: BlockLine = serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
        let mut txs = Vec::with_capacity(b.txs.len());
        for t in b.txs {
            txs.push(build_tx(&mut keys, t).map_err(err)?);
        }
        blocks.push(Block::unordered(b.block, txs));
    }
    let meta_policy = keys
        .policy(&meta_spec)
        .map_err(|detail| Error::BlockFile { line: 1, detail })?;
    Ok(BlockFile { meta_policy, blocks })
}

fn build_tx(keys: &mut Keyring, t: TxSpec) -> std::result::Result<(TxId, Arc<Tx>), String> {
    let id = TxId(t.id);
    let metadata = t
        .metadata
        .iter()
        .map(|m| decode_bytes(m))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut namespaces = Vec::new();
    let mut signers = Vec::new();
    for n in t.namespaces {
        let mut ns = TxNamespace {
            ns_id: n.ns,
            ns_version: n.version,
            ..Default::default()
        };
        for r in n.reads {
            ns.reads_only.push(Read {
                key: decode_bytes(&r.key)?,
                version: r.version,
            });
        }
        for rw in n.read_writes {
            let value = value_bytes(keys, rw.value)?;
            ns.read_writes.push(ReadWrite {
                key: decode_bytes(&rw.key)?,
                version: rw.version,
                value,
            });
        }
        for w in n.blind_writes {
            let value = value_bytes(keys, w.value)?;
            ns.blind_writes.push(Write {
                key: decode_bytes(&w.key)?,
                value,
            });
        }
        namespaces.push(ns);
        signers.push(n.signer);
    }
    let mut endorsements = Vec::with_capacity(namespaces.len());
    for (ns, signer) in namespaces.iter().zip(signers) {
        let set = match signer {
            None => Vec::new(),
            Some(spec) => {
                let sig = keys.sign(&spec, &namespace_signing_bytes(&id, ns, &metadata))?;
                vec![Endorsement {
                    signature: sig,
                    ..Default::default()
                }]
            }
        };
        endorsements.push(set);
    }
    Ok((
        id,
        Arc::new(Tx {
            namespaces,
            endorsements,
            metadata,
        }),
    ))
}

fn value_bytes(keys: &mut Keyring, v: ValueSpec) -> std::result::Result<Vec<u8>, String> {
    match v {
        ValueSpec::Text(s) => decode_bytes(&s),
        ValueSpec::Policy { policy } => Ok(wire::encode_policy(&keys.policy(&policy)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_genesis_blocks_and_values() {
        let text = r#"{"genesis":{"meta_policy":{"scheme":"ecdsa-p256","seed":"root"}}}
{"block":0,"txs":[{"id":"ns","namespaces":[{"ns":"_meta","read_writes":[{"key":"token","value":{"policy":{"scheme":"bls-threshold","seed":"grp","t":2,"n":3}}}],"signer":{"scheme":"ecdsa-p256","seed":"root"}}]}]}
{"block":1,"txs":[{"id":"t1","namespaces":[{"ns":"token","reads":[{"key":"k1","version":0},{"key":"k2"}],"read_writes":[{"key":"0x6b33","version":1,"value":"v"}],"blind_writes":[{"key":"k4","value":"0xff"}],"signer":{"scheme":"bls-threshold","seed":"grp","t":2,"n":3,"shares":[1,3]}}],"metadata":["m"]}]}
"#;
        let f = parse(text).unwrap();
        assert_eq!(f.meta_policy.scheme, types::PolicyScheme::EcdsaP256);
        assert_eq!(f.blocks.len(), 2);
        let (id, tx) = &f.blocks[1].txs[0];
        assert_eq!(id.as_str(), "t1");
        let ns = &tx.namespaces[0];
        assert_eq!(ns.reads_only[1].version, None);
        assert_eq!(ns.read_writes[0].key, b"k3");
        assert_eq!(ns.blind_writes[0].value, vec![0xff]);
        assert_eq!(tx.metadata, vec![b"m".to_vec()]);
        // The threshold signature verifies under the group key of the policy.
        let mut policies = policy::Policies::new();
        let group = Keyring::default()
            .policy(&KeySpec {
                scheme: "bls-threshold".into(),
                seed: "grp".into(),
                t: Some(2),
                n: Some(3),
                shares: None,
            })
            .unwrap();
        policies.set("token", &group).unwrap();
        assert_eq!(policies.verify_tx(id, tx), Ok(()));
    }

    #[test]
    fn missing_signer_means_no_endorsement_and_errors_name_the_line() {
        let f = parse(r#"{"block":0,"txs":[{"id":"t","namespaces":[{"ns":"a","blind_writes":[{"key":"k","value":"v"}]}]}]}"#)
            .unwrap();
        assert!(f.blocks[0].txs[0].1.endorsements[0].is_empty());
        let e = parse("{\"block\":0,\"txs\":[]}\n{\"block\":1,\"txz\":[]}").unwrap_err();
        assert!(e.to_string().starts_with("line 2:"), "{e}");
        assert!(parse(r#"{"block":0,"txs":[{"id":"t","namespaces":[{"ns":"a","blind_writes":[{"key":"0xzz","value":"v"}]}]}]}"#).is_err());
    }

    #[test]
    fn bytes_round_trip() {
        assert_eq!(decode_bytes("0x00ff").unwrap(), vec![0, 255]);
        assert_eq!(encode_bytes(&[0, 255]), "0x00ff");
        assert_eq!(encode_bytes(b"abc"), "abc");
        assert_eq!(decode_bytes(&encode_bytes(b"0xabc")).unwrap(), b"0xabc");
    }
}
