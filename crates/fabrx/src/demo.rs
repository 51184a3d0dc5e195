//! `fabrx demo`: a small CBDC token workload through the parts of the committer that
//! exist — structural checks (`types`/`wire`), namespace signature verification
//! (`sigverifier`, with a 3-of-5 threshold BLS policy) and the validator-committer
//! (`vcservice`, embedded RocksDB store unless `--db` names PostgreSQL). It prints one JSON
//! line per transaction and then the token state. `fabrx committer apply` (issue 4) will
//! supersede it with the full pipeline.

use anyhow::Context;
use clap::Args;
use crypto::{Scheme, ThresholdKeySet};
use prost::Message;
use serde_json::json;
use std::sync::Arc;
use types::check::CheckedPayload;
use types::endorsement::namespace_signing_bytes;
use types::{Endorsement, Height, NamespacePolicy, PolicyScheme, ReadWrite, Status, Tx, TxId, TxNamespace};
use vcservice::config::open_backend;
use vcservice::{Engine, EngineConfig, VcTx};
use wire::pb;

/// Arguments of `fabrx demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// `embedded:DIR` or `postgres://…` (default: embedded store in a temporary directory).
    #[arg(long)]
    db: Option<String>,
}

struct Keys {
    admin: crypto::SigningKey,
    bank: ThresholdKeySet,
    mallory: ThresholdKeySet,
}

fn rw(key: &str, version: Option<u64>, value: &[u8]) -> ReadWrite {
    ReadWrite {
        key: key.as_bytes().to_vec(),
        version,
        value: value.to_vec(),
    }
}

/// Signs every namespace of `tx` with `sign` and wraps it in an envelope.
fn envelope(id: &str, namespaces: Vec<TxNamespace>, sign: &dyn Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let tx_id = TxId(id.to_string());
    let endorsements = namespaces
        .iter()
        .map(|ns| {
            vec![Endorsement {
                signature: sign(&namespace_signing_bytes(&tx_id, ns, &[])),
                ..Default::default()
            }]
        })
        .collect();
    let tx = Tx {
        namespaces,
        endorsements,
        metadata: vec![],
    };
    pb::Envelope {
        payload: pb::Tx::from(&tx).encode_to_vec(),
        signature: vec![],
        identity: None,
        tx_id: id.to_string(),
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
    .encode_to_vec()
}

fn threshold_sign(bank: &ThresholdKeySet, shares: &[usize], msg: &[u8]) -> Vec<u8> {
    let partials: Vec<_> = shares
        .iter()
        .map(|&i| crypto::sign_namespace_endorsement_partial(&bank.shares[i - 1], msg))
        .collect();
    crypto::aggregate_partials(&bank.public, &partials)
        .map(|s| s.into_bytes())
        .unwrap_or_default()
}

fn token_ns(rws: Vec<ReadWrite>) -> TxNamespace {
    TxNamespace {
        ns_id: "cbdc".into(),
        ns_version: 0,
        read_writes: rws,
        ..Default::default()
    }
}

/// The blocks of the demo: create the namespace, issue, transfer, and some bad txs.
fn blocks(k: &Keys) -> Vec<Vec<Vec<u8>>> {
    let admin = |m: &[u8]| crypto::sign_namespace_endorsement(&k.admin, m).into_bytes();
    let bank = |m: &[u8]| threshold_sign(&k.bank, &[1, 3, 5], m);
    let forger = |m: &[u8]| threshold_sign(&k.mallory, &[1, 2, 3], m);
    let policy = NamespacePolicy {
        scheme: PolicyScheme::Bls12381,
        public_key: k.bank.public.group_public_key().to_bytes(),
    };
    let meta = TxNamespace {
        ns_id: "_meta".into(),
        read_writes: vec![rw("cbdc", None, &wire::encode_policy(&policy))],
        ..Default::default()
    };
    vec![
        vec![envelope("create-cbdc", vec![meta], &admin)],
        vec![envelope(
            "issue-1",
            vec![token_ns(vec![
                rw("coin/alice/1", None, b"100"),
                rw("coin/bob/1", None, b"50"),
            ])],
            &bank,
        )],
        vec![
            envelope(
                "alice-pays-carol",
                vec![token_ns(vec![
                    rw("coin/alice/1", Some(0), b"spent"),
                    rw("coin/carol/1", None, b"100"),
                ])],
                &bank,
            ),
            envelope(
                "alice-double-spend",
                vec![token_ns(vec![
                    rw("coin/alice/1", Some(0), b"spent"),
                    rw("coin/dave/1", None, b"100"),
                ])],
                &bank,
            ),
            envelope(
                "forged-issue",
                vec![token_ns(vec![rw("coin/mallory/1", None, b"1000000")])],
                &forger,
            ),
            envelope("empty-tx", vec![], &bank),
        ],
        vec![envelope(
            "bob-pays-carol",
            vec![token_ns(vec![
                rw("coin/bob/1", Some(0), b"spent"),
                rw("coin/carol/2", None, b"50"),
            ])],
            &bank,
        )],
    ]
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let db = args
        .db
        .unwrap_or_else(|| format!("embedded:{}", tmp.path().display()));
    let backend = open_backend(&db, 4, 0, true)?;
    backend.init_schema().await.context("creating schema")?;
    let engine = Engine::new(backend.clone(), EngineConfig::default(), None);
    let keys = Keys {
        admin: crypto::derive_signing_key(Scheme::Ed25519, "admin"),
        bank: crypto::deal_threshold_keys(3, 5, "central-bank")?,
        mallory: crypto::deal_threshold_keys(3, 5, "mallory")?,
    };
    let mut policies = sigverifier::Policies::new();
    let admin_policy = NamespacePolicy {
        scheme: PolicyScheme::Ed25519,
        public_key: keys.admin.public_key().to_bytes(),
    };
    policies.set(types::META_NAMESPACE, &admin_policy)?;
    let decoder = wire::ProstDecoder {
        key_ok: |p| sigverifier::parse_policy_key(p).is_some(),
    };
    for (block, envelopes) in blocks(&keys).into_iter().enumerate() {
        let mut batch = Vec::new();
        for (index, raw) in envelopes.iter().enumerate() {
            let (id, checked) = wire::check_envelope_bytes(raw, &decoder);
            let height = Height::new(block as u64, index as u32);
            let (tx, prelim) = match checked {
                Ok(CheckedPayload::Tx(tx)) => {
                    let sig = policies.verify_tx(&TxId(id.clone()), &tx).err();
                    (tx, sig)
                }
                Ok(CheckedPayload::Config(_)) => {
                    (Tx::default(), Some(Status::MalformedUnsupportedEnvelopePayload))
                }
                Err(status) => (Tx::default(), Some(status)),
            };
            batch.push(VcTx {
                id: TxId(id),
                height,
                tx: Arc::new(tx),
                prelim,
            });
        }
        let txs: Vec<Arc<Tx>> = batch.iter().map(|t| t.tx.clone()).collect();
        for (o, tx) in engine.process(batch).await?.into_iter().zip(txs) {
            println!(
                "{}",
                json!({"block": o.height.block, "index": o.height.index, "id": o.id.0,
                       "status": o.status.name(), "code": o.status.code()})
            );
            // Committed namespace policies reach the verifier before the next block.
            if o.status == Status::Committed {
                policies.apply_committed_meta(&tx, |v| {
                    pb::NamespacePolicy::decode(v)
                        .ok()
                        .and_then(|p| NamespacePolicy::try_from(p).ok())
                });
            }
        }
    }
    for row in backend.scan("cbdc").await? {
        println!(
            "{}",
            json!({"ns": "cbdc", "key": String::from_utf8_lossy(&row.key), "value": String::from_utf8_lossy(&row.value), "version": row.version})
        );
    }
    Ok(())
}
