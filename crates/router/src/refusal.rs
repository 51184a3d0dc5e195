//! Why the router refuses a request before forwarding it (a leaf: the admission checks
//! produce it, the crate's error wraps it).

/// Why the router refused a request before forwarding it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request has no bytes.
    #[error("empty request")]
    Empty,
    /// The request is larger than the configured maximum.
    #[error("request of {size} bytes is over the maximum of {max} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The maximum.
        max: usize,
    },
    /// The request's content is refused (`arma::admission`: envelope structure, client
    /// signatures).
    #[error(transparent)]
    Content(#[from] arma::admission::ContentError),
}

impl Refusal {
    /// The gRPC code a client sees.
    pub fn code(&self) -> tonic::Code {
        match self {
            Refusal::Content(
                arma::admission::ContentError::UnknownClient
                | arma::admission::ContentError::Fabric(
                    arma::fabric::FabricError::UnknownClient | arma::fabric::FabricError::BadSignature,
                ),
            ) => tonic::Code::PermissionDenied,
            Refusal::Empty | Refusal::TooLarge { .. } | Refusal::Content(_) => tonic::Code::InvalidArgument,
        }
    }
}
