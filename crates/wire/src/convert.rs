//! Conversions between generated messages and domain types.

use crate::pb;
use crate::{Error, Result};
use types::{Endorsement, NamespacePolicy, Read, ReadWrite, Tx, TxNamespace, Write};

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

impl TryFrom<pb::TxStatus> for (types::TxId, types::Status, types::Height) {
    type Error = Error;
    fn try_from(s: pb::TxStatus) -> Result<Self> {
        Ok((
            types::TxId(s.tx_id),
            types::Status::from_code(s.code)?,
            types::Height::new(s.block, s.index),
        ))
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
