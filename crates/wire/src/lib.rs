//! Protobuf/gRPC messages of fabrx generated from `proto/`, and their conversions to the
//! domain types of crate `types`. Generated structs stay at this edge: the rest of fabrx
//! works with `types`.

pub mod budget;
pub mod codec;
pub mod convert;
pub mod decode;
pub mod encode;
pub mod fabric;
pub mod limits;
pub mod node;
pub mod server;
pub mod tls;

/// Generated code of package `fabrx.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("fabrx.v1");
}

pub use decode::{
    ProstDecoder, SELF_CERTIFIED_MSP, check_decoded_envelope, check_envelope_bytes, encode_policy,
    self_certified_key,
};

/// Errors converting wire messages into domain types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A required message field was absent.
    #[error("{message}.{field} is required")]
    MissingField {
        /// The message type.
        message: &'static str,
        /// The field name.
        field: &'static str,
    },
    /// A status code outside the defined set.
    #[error(transparent)]
    Domain(#[from] types::Error),
}

/// Result alias of the `wire` crate.
pub type Result<T> = std::result::Result<T, Error>;
