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
    /// The envelope does not decode or fails a structural check.
    #[error("malformed envelope: {status}")]
    Malformed {
        /// The status the committer would give it (`MALFORMED_*`).
        status: types::Status,
    },
    /// Signatures are required and the envelope names no identity of the network.
    #[error("the envelope's identity is not a client of the network")]
    UnknownClient,
    /// The signature over the payload does not verify with the client's key.
    #[error("the client signature over the payload does not verify")]
    BadSignature,
}

impl From<arma::admission::ContentError> for Refusal {
    fn from(e: arma::admission::ContentError) -> Refusal {
        use arma::admission::ContentError;
        match e {
            ContentError::Malformed { status } => Refusal::Malformed { status },
            ContentError::UnknownClient => Refusal::UnknownClient,
            ContentError::BadSignature => Refusal::BadSignature,
        }
    }
}

impl Refusal {
    /// The gRPC code a client sees.
    pub fn code(&self) -> tonic::Code {
        match self {
            Refusal::UnknownClient => tonic::Code::PermissionDenied,
            Refusal::Empty | Refusal::TooLarge { .. } | Refusal::Malformed { .. } | Refusal::BadSignature => {
                tonic::Code::InvalidArgument
            }
        }
    }
}
