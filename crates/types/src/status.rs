//! Transaction status codes, numbered as in Fabric-X (docs/contracts.md "Status codes").

use crate::{Error, Result};
use std::fmt;
use std::str::FromStr;

macro_rules! statuses {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal => $name:literal, )*) => {
        /// The final status of a transaction. The discriminant is the wire code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        pub enum Status {
            $( $(#[$doc])* $variant = $code, )*
        }

        impl Status {
            /// Every status, in code order.
            pub const ALL: &'static [Status] = &[$(Status::$variant,)*];

            /// The wire code of this status.
            pub fn code(self) -> u32 {
                self as u32
            }

            /// The status with wire code `code`.
            pub fn from_code(code: u32) -> Result<Status> {
                match code {
                    $( $code => Ok(Status::$variant), )*
                    _ => Err(Error::UnknownStatusCode { code }),
                }
            }

            /// The canonical upper-case name, as printed by tools (`"COMMITTED"`).
            pub fn name(self) -> &'static str {
                match self {
                    $( Status::$variant => $name, )*
                }
            }
        }

        impl FromStr for Status {
            type Err = Error;
            fn from_str(s: &str) -> Result<Status> {
                match s {
                    $( $name => Ok(Status::$variant), )*
                    _ => Err(Error::UnknownStatusName { name: s.to_string() }),
                }
            }
        }
    };
}

statuses! {
    /// The transaction's writes are in the state.
    Committed = 1 => "COMMITTED",
    /// A namespace endorsement did not satisfy the namespace policy.
    AbortedSignatureInvalid = 2 => "ABORTED_SIGNATURE_INVALID",
    /// A read did not match the committed state at the transaction's turn.
    AbortedMvccConflict = 3 => "ABORTED_MVCC_CONFLICT",
    /// The id was already used by another transaction (never stored).
    RejectedDuplicateTxId = 100 => "REJECTED_DUPLICATE_TX_ID",
    /// The envelope could not be decoded, or its tx id is not well formed (never stored).
    MalformedBadEnvelope = 101 => "MALFORMED_BAD_ENVELOPE",
    /// The envelope carries no tx id (never stored).
    MalformedMissingTxId = 102 => "MALFORMED_MISSING_TX_ID",
    /// The envelope's payload type is not one the committer handles.
    MalformedUnsupportedEnvelopePayload = 103 => "MALFORMED_UNSUPPORTED_ENVELOPE_PAYLOAD",
    /// The payload does not decode as a transaction, or exceeds a size limit.
    MalformedBadEnvelopePayload = 104 => "MALFORMED_BAD_ENVELOPE_PAYLOAD",
    /// The tx id does not match the id derived from the envelope's nonce and creator.
    MalformedTxIdConflict = 105 => "MALFORMED_TX_ID_CONFLICT",
    /// The transaction has no namespaces.
    MalformedEmptyNamespaces = 106 => "MALFORMED_EMPTY_NAMESPACES",
    /// A namespace appears twice in the transaction.
    MalformedDuplicateNamespace = 107 => "MALFORMED_DUPLICATE_NAMESPACE",
    /// A namespace id does not match `^[a-z0-9_]{1,60}$`.
    MalformedNamespaceIdInvalid = 108 => "MALFORMED_NAMESPACE_ID_INVALID",
    /// Blind writes to the `_meta` namespace.
    MalformedBlindWritesNotAllowed = 109 => "MALFORMED_BLIND_WRITES_NOT_ALLOWED",
    /// A namespace with reads but no writes.
    MalformedNoWrites = 110 => "MALFORMED_NO_WRITES",
    /// An empty key.
    MalformedEmptyKey = 111 => "MALFORMED_EMPTY_KEY",
    /// The same key twice in one namespace's read and write sets.
    MalformedDuplicateKeyInReadWriteSet = 112 => "MALFORMED_DUPLICATE_KEY_IN_READ_WRITE_SET",
    /// A namespace without an endorsement.
    MalformedMissingSignature = 113 => "MALFORMED_MISSING_SIGNATURE",
    /// A `_meta` write whose key or policy value is invalid.
    MalformedNamespacePolicyInvalid = 114 => "MALFORMED_NAMESPACE_POLICY_INVALID",
    /// A configuration transaction that does not decode or holds an invalid policy.
    MalformedConfigTxInvalid = 115 => "MALFORMED_CONFIG_TX_INVALID",
}

impl Status {
    /// Whether the committer stores this status under the tx id. Codes 100–102 are never
    /// stored: a duplicate or missing id must not overwrite the first tx's status.
    pub fn is_stored(self) -> bool {
        !matches!(
            self,
            Status::RejectedDuplicateTxId | Status::MalformedBadEnvelope | Status::MalformedMissingTxId
        )
    }

    /// Whether the status is one of the structural `MALFORMED_*` codes.
    pub fn is_malformed(self) -> bool {
        (101..=115).contains(&self.code())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        assert_eq!(Status::ALL.len(), 19);
        for &s in Status::ALL {
            assert_eq!(Status::from_code(s.code()), Ok(s));
            assert_eq!(s.name().parse::<Status>(), Ok(s));
        }
        assert_eq!(Status::Committed.code(), 1);
        assert_eq!(Status::AbortedMvccConflict.code(), 3);
        assert_eq!(Status::MalformedConfigTxInvalid.code(), 115);
        assert_eq!(Status::from_code(4), Err(Error::UnknownStatusCode { code: 4 }));
    }

    #[test]
    fn only_id_problems_are_not_stored() {
        let unstored: Vec<u32> = Status::ALL
            .iter()
            .filter(|s| !s.is_stored())
            .map(|s| s.code())
            .collect();
        assert_eq!(unstored, vec![100, 101, 102]);
    }
}
