//! The gRPC codec of every fabrx service and client: prost encoding, and a decoder that
//! refuses a message before decoding it when it is larger than its type allows or would
//! decode into more memory than its [`crate::budget::Budget`] (see `docs/limits.md`).
//!
//! Generated services and clients use it through `codec_path` in `build.rs`, so no
//! service can forget it. A refused message ends the call with `RESOURCE_EXHAUSTED`
//! (too large) or `INVALID_ARGUMENT` (not protobuf), with the reason in the message.

use crate::budget::{self, BudgetError};
use crate::limits::{self, MessageLimit};
use bytes::Buf;
use prost::Message;
use std::any::TypeId;
use std::marker::PhantomData;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// Prost encoding with bounded decoding.
#[derive(Debug, Clone, Copy)]
pub struct BoundedCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for BoundedCodec<T, U> {
    fn default() -> Self {
        BoundedCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder {
            limit: limits::message_limit(TypeId::of::<U>()),
            _pd: PhantomData,
        }
    }
}

/// Decodes `U` after checking its size and decoded cost.
#[derive(Debug)]
pub struct BoundedDecoder<U> {
    limit: Option<MessageLimit>,
    _pd: PhantomData<U>,
}

impl<U: Message + Default> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        if let Some(limit) = self.limit {
            admit(buf, limit)?;
        }
        U::decode(buf)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("message does not decode: {e}")))
    }
}

/// Checks one whole encoded message against its limit.
fn admit(buf: &DecodeBuf<'_>, limit: MessageLimit) -> Result<(), Status> {
    let len = buf.remaining();
    if len > limit.max_bytes {
        return Err(Status::resource_exhausted(format!(
            "{}: message of {len} bytes is over the limit of {} bytes",
            limit.schema.name, limit.max_bytes
        )));
    }
    let chunk = buf.chunk();
    if chunk.len() != len {
        // tonic hands a decoder one contiguous buffer; refuse rather than decode unchecked.
        return Err(Status::internal("message buffer is not contiguous"));
    }
    let result = budget::check(chunk, limit.schema, limit.budget);
    result.map(|_| ()).map_err(|e| match e {
        BudgetError::Malformed { .. } => Status::invalid_argument(e.to_string()),
        BudgetError::OverBudget { .. } => Status::resource_exhausted(e.to_string()),
    })
}
