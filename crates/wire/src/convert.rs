//! Conversions between generated messages and domain types.

use crate::pb;
use crate::{Error, Result};
use std::sync::Arc;
use types::{Endorsement, Height, NamespacePolicy, Read, ReadWrite, Tx, TxNamespace, TxOutcome, VcTx, Write};

impl From<pb::Tx> for Tx {
    fn from(tx: pb::Tx) -> Tx {
        Tx {
            namespaces: tx.namespaces.into_iter().map(Into::into).collect(),
            endorsements: tx
                .endorsements
                .into_iter()
                .map(|e| e.endorsements_with_identity.into_iter().map(Into::into).collect())
                .collect(),
            metadata: tx.metadata,
        }
    }
}

impl From<pb::TxNamespace> for TxNamespace {
    fn from(ns: pb::TxNamespace) -> TxNamespace {
        TxNamespace {
            ns_id: ns.ns_id,
            ns_version: ns.ns_version,
            reads_only: ns
                .reads_only
                .into_iter()
                .map(|r| Read {
                    key: r.key,
                    version: r.version,
                })
                .collect(),
            read_writes: ns
                .read_writes
                .into_iter()
                .map(|r| ReadWrite {
                    key: r.key,
                    version: r.version,
                    value: r.value,
                })
                .collect(),
            blind_writes: ns
                .blind_writes
                .into_iter()
                .map(|w| Write {
                    key: w.key,
                    value: w.value,
                })
                .collect(),
        }
    }
}

impl From<pb::EndorsementWithIdentity> for Endorsement {
    fn from(e: pb::EndorsementWithIdentity) -> Endorsement {
        let (msp_id, identity) = match e.identity {
            None => (String::new(), Vec::new()),
            Some(id) => (id.msp_id, identity_bytes(id.creator)),
        };
        Endorsement {
            signature: e.endorsement,
            msp_id,
            identity,
        }
    }
}

fn identity_bytes(creator: Option<pb::identity::Creator>) -> Vec<u8> {
    match creator {
        None => Vec::new(),
        Some(pb::identity::Creator::Certificate(c)) => c,
        Some(pb::identity::Creator::CertificateId(id)) => id.into_bytes(),
    }
}

impl From<&Tx> for pb::Tx {
    fn from(tx: &Tx) -> pb::Tx {
        pb::Tx {
            namespaces: tx.namespaces.iter().map(Into::into).collect(),
            endorsements: tx
                .endorsements
                .iter()
                .map(|set| pb::Endorsements {
                    endorsements_with_identity: set.iter().map(Into::into).collect(),
                })
                .collect(),
            metadata: tx.metadata.clone(),
        }
    }
}

impl From<&TxNamespace> for pb::TxNamespace {
    fn from(ns: &TxNamespace) -> pb::TxNamespace {
        pb::TxNamespace {
            ns_id: ns.ns_id.clone(),
            ns_version: ns.ns_version,
            reads_only: ns
                .reads_only
                .iter()
                .map(|r| pb::Read {
                    key: r.key.clone(),
                    version: r.version,
                })
                .collect(),
            read_writes: ns
                .read_writes
                .iter()
                .map(|r| pb::ReadWrite {
                    key: r.key.clone(),
                    version: r.version,
                    value: r.value.clone(),
                })
                .collect(),
            blind_writes: ns
                .blind_writes
                .iter()
                .map(|w| pb::Write {
                    key: w.key.clone(),
                    value: w.value.clone(),
                })
                .collect(),
        }
    }
}

impl From<&Endorsement> for pb::EndorsementWithIdentity {
    fn from(e: &Endorsement) -> pb::EndorsementWithIdentity {
        let identity = (!e.msp_id.is_empty() || !e.identity.is_empty()).then(|| pb::Identity {
            msp_id: e.msp_id.clone(),
            creator: Some(pb::identity::Creator::Certificate(e.identity.clone())),
        });
        pb::EndorsementWithIdentity {
            endorsement: e.signature.clone(),
            identity,
        }
    }
}

impl TryFrom<pb::NamespacePolicy> for NamespacePolicy {
    type Error = Error;
    fn try_from(p: pb::NamespacePolicy) -> Result<NamespacePolicy> {
        Ok(NamespacePolicy {
            scheme: p.scheme.parse()?,
            public_key: p.public_key,
        })
    }
}

impl From<&NamespacePolicy> for pb::NamespacePolicy {
    fn from(p: &NamespacePolicy) -> pb::NamespacePolicy {
        pb::NamespacePolicy {
            scheme: p.scheme.name().to_string(),
            public_key: p.public_key.clone(),
        }
    }
}

impl TryFrom<pb::TxStatus> for TxOutcome {
    type Error = Error;
    fn try_from(s: pb::TxStatus) -> Result<TxOutcome> {
        Ok(TxOutcome::new(
            types::TxId(s.tx_id),
            types::Status::from_code(s.code)?,
            Height::new(s.block, s.index),
        ))
    }
}

impl From<&TxOutcome> for pb::TxStatus {
    fn from(o: &TxOutcome) -> pb::TxStatus {
        pb::TxStatus {
            tx_id: o.id.0.clone(),
            code: o.status.code(),
            block: o.height.block,
            index: o.height.index,
        }
    }
}

/// The wire form of a batch of outcomes.
pub fn outcomes_to_wire(outcomes: &[TxOutcome]) -> pb::TxStatusBatch {
    pb::TxStatusBatch {
        statuses: outcomes.iter().map(pb::TxStatus::from).collect(),
    }
}

/// The stored form of a block without an orderer (the sidecar's block store): its txs
/// with their heights as a `VcBatch`. Fails only for a block of more than `u32::MAX` txs.
pub fn block_to_vc_batch(block: &types::Block) -> Result<pb::VcBatch> {
    let txs = block
        .block_txs()?
        .into_iter()
        .map(|t| pb::VcTx::from(&VcTx::from(t)))
        .collect();
    Ok(pb::VcBatch { txs })
}

impl TryFrom<pb::VcTx> for VcTx {
    type Error = Error;
    /// Rejects a tx without a body or with an undefined preliminary status code
    /// (0 = none: validate and commit).
    fn try_from(t: pb::VcTx) -> Result<VcTx> {
        let prelim = match t.prelim_status {
            0 => None,
            code => Some(types::Status::from_code(code)?),
        };
        let tx = t.tx.ok_or(Error::MissingField {
            message: "VcTx",
            field: "tx",
        })?;
        Ok(VcTx {
            id: types::TxId(t.tx_id),
            height: Height::new(t.block, t.index),
            tx: Arc::new(tx.into()),
            prelim,
        })
    }
}

impl From<&VcTx> for pb::VcTx {
    fn from(t: &VcTx) -> pb::VcTx {
        pb::VcTx {
            tx_id: t.id.0.clone(),
            block: t.height.block,
            index: t.height.index,
            tx: Some(pb::Tx::from(t.tx.as_ref())),
            prelim_status: t.prelim.map_or(0, |s| s.code()),
        }
    }
}

impl TryFrom<pb::ConfigUpdate> for NamespacePolicy {
    type Error = Error;
    fn try_from(c: pb::ConfigUpdate) -> Result<NamespacePolicy> {
        c.meta_policy
            .ok_or(Error::MissingField {
                message: "ConfigUpdate",
                field: "meta_policy",
            })?
            .try_into()
    }
}
