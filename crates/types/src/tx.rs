//! The transaction model (FX §3.5), mirroring the `Tx` protobuf family.

use std::fmt;

/// A transaction id: a client-chosen string (see [`crate::txid`] for the derivation rule).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TxId(pub String);

impl TxId {
    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for TxId {
    fn from(s: &str) -> Self {
        TxId(s.to_string())
    }
}

impl From<String> for TxId {
    fn from(s: String) -> Self {
        TxId(s)
    }
}

/// A transaction: namespaces, one endorsement set per namespace (same order), metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tx {
    /// The namespaces the transaction reads and writes.
    pub namespaces: Vec<TxNamespace>,
    /// One endorsement set per namespace, in the order of `namespaces`.
    pub endorsements: Vec<Vec<Endorsement>>,
    /// Opaque application metadata.
    pub metadata: Vec<Vec<u8>>,
}

/// The reads and writes of a transaction in one namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxNamespace {
    /// Namespace id, `^[a-z0-9_]{1,60}$`.
    pub ns_id: String,
    /// The namespace (policy) version the transaction was endorsed against.
    pub ns_version: u64,
    /// Keys only read.
    pub reads_only: Vec<Read>,
    /// Keys read and then written.
    pub read_writes: Vec<ReadWrite>,
    /// Keys written without reading.
    pub blind_writes: Vec<Write>,
}

/// A read of `key`; `version: None` means "the key must not exist".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Read {
    /// The key.
    pub key: Vec<u8>,
    /// The version read, or `None` for "absent".
    pub version: Option<u64>,
}

/// A read of `key` at `version` (`None`: must not exist) that writes `value`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReadWrite {
    /// The key.
    pub key: Vec<u8>,
    /// The version read, or `None` for "absent".
    pub version: Option<u64>,
    /// The value written.
    pub value: Vec<u8>,
}

/// A blind write of `value` to `key`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Write {
    /// The key.
    pub key: Vec<u8>,
    /// The value written.
    pub value: Vec<u8>,
}

/// One endorsement of a namespace: a signature and optionally the signer's identity.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Endorsement {
    /// The signature bytes.
    pub signature: Vec<u8>,
    /// The signer's organisation (may be empty).
    pub msp_id: String,
    /// The signer's certificate or key bytes (may be empty).
    pub identity: Vec<u8>,
}

impl TxNamespace {
    /// Every key of this namespace's read and write sets, in set order.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.reads_only
            .iter()
            .map(|r| r.key.as_slice())
            .chain(self.read_writes.iter().map(|r| r.key.as_slice()))
            .chain(self.blind_writes.iter().map(|w| w.key.as_slice()))
    }

    /// Whether the namespace writes anything.
    pub fn has_writes(&self) -> bool {
        !self.read_writes.is_empty() || !self.blind_writes.is_empty()
    }
}
