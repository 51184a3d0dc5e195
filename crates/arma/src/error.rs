//! Errors of checking decisions.

/// Why decision metadata or a decision proof was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The decision metadata does not decode.
    #[error("malformed decision metadata: {what}")]
    Metadata {
        /// What is wrong.
        what: &'static str,
    },
    /// A decision proof does not prove its headers.
    #[error("decision {decision}: {reason}")]
    Proof {
        /// The decision number.
        decision: u64,
        /// Why.
        reason: String,
    },
}

/// Results of checking decisions.
pub type ProofResult<T> = std::result::Result<T, ProofError>;
