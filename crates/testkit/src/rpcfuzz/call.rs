//! Raw-bytes calls of any gRPC method: the codec, the call and its outcome.

use bytes::{Buf, BufMut, Bytes};
use std::time::Duration;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// A gRPC codec whose messages are raw bytes in both directions.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

/// Encoder of [`RawCodec`]: writes the bytes as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawEncoder;

/// Decoder of [`RawCodec`]: returns the message bytes as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Status OK after `responses` messages.
    Ok {
        /// Response messages received.
        responses: usize,
    },
    /// A non-OK status after `responses` messages.
    Failed {
        /// The status code.
        code: tonic::Code,
        /// Response messages received before the status.
        responses: usize,
    },
    /// Not finished by the deadline.
    TimedOut {
        /// Response messages received before the deadline.
        responses: usize,
    },
}

/// Calls `path` (`/package.Service/Method`) with `messages` as the request stream (closed
/// after the last one), reads every response and the final status, and gives up after
/// `deadline`. A unary method is called the same way: tonic's unary client would turn
/// "OK without a message" into a client-made `INTERNAL`, hiding what the server did.
pub async fn call(
    channel: &Channel,
    path: &'static str,
    messages: Vec<Bytes>,
    deadline: Duration,
) -> Outcome {
    call_detailed(channel, path, messages, deadline).await.0
}

/// [`call`], with the message of a non-OK status (empty otherwise).
pub async fn call_detailed(
    channel: &Channel,
    path: &'static str,
    messages: Vec<Bytes>,
    deadline: Duration,
) -> (Outcome, String) {
    let mut responses = 0usize;
    let attempt = async {
        let mut grpc = tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(usize::MAX);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let request = tonic::Request::new(tokio_stream::iter(messages));
        let mut stream = grpc
            .streaming(request, PathAndQuery::from_static(path), RawCodec)
            .await?
            .into_inner();
        while stream.message().await?.is_some() {
            responses += 1;
        }
        Ok::<(), tonic::Status>(())
    };
    match tokio::time::timeout(deadline, attempt).await {
        Ok(Ok(())) => (Outcome::Ok { responses }, String::new()),
        Ok(Err(status)) => (
            Outcome::Failed {
                code: status.code(),
                responses,
            },
            status.message().to_string(),
        ),
        Err(_) => (Outcome::TimedOut { responses }, String::new()),
    }
}
