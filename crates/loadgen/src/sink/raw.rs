//! The sink's two busy calls without a copy per request, so that the sink stays cheap
//! next to the client it measures: `Router.SubmitMany` read as the requests' ids (and,
//! on the router that orders, their envelopes) and answered from the ids alone;
//! `Assembler.Deliver` sent from blocks encoded once when they are cut. Every other
//! call goes to the generated servers.

use std::pin::Pin;
use std::sync::Arc;

use prost::Message as _;
use prost::bytes::{Buf as _, BufMut, Bytes};
use tokio_stream::{Stream, StreamExt as _};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{BoxFuture, Context, Poll, Service, StdError, http};
use tonic::server::NamedService;
use wire::pb;

use super::{RouterMode, SinkRouterService};

/// A `SubmitBatch` as a sink router reads it.
pub(super) struct RawBatch {
    /// Each request's id.
    pub(super) ids: Vec<u64>,
    /// Each request's envelope (only when the router orders).
    pub(super) envelopes: Vec<Vec<u8>>,
}

/// Reads an encoded `SubmitBatch`: the requests' ids, and their envelopes when `keep`.
pub(super) fn scan_batch(mut raw: &[u8], keep: bool) -> Option<RawBatch> {
    let mut batch = RawBatch {
        ids: Vec::new(),
        envelopes: Vec::new(),
    };
    while let Some((field, value)) = next(&mut raw)? {
        let (1, Value::Bytes(mut request)) = (field, value) else {
            continue;
        };
        let (mut id, mut envelope) = (0u64, &[][..]);
        while let Some((f, v)) = next(&mut request)? {
            match (f, v) {
                (1, Value::Varint(v)) => id = v,
                (2, Value::Bytes(e)) => envelope = e,
                _ => {}
            }
        }
        batch.ids.push(id);
        if keep {
            batch.envelopes.push(envelope.to_vec());
        }
    }
    Some(batch)
}

/// One protobuf field's value.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The next field of `raw`: `Some(None)` at its end, `None` when it is not protobuf.
fn next<'a>(raw: &mut &'a [u8]) -> Option<Option<(u64, Value<'a>)>> {
    fn varint(raw: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = raw.split_first()?;
            *raw = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    if raw.is_empty() {
        return Some(None);
    }
    let key = varint(raw)?;
    let value = match key & 7 {
        0 => Value::Varint(varint(raw)?),
        1 | 5 => {
            *raw = raw.get(if key & 7 == 1 { 8 } else { 4 }..)?;
            Value::Fixed
        }
        2 => {
            let len = usize::try_from(varint(raw)?).ok()?;
            let v = raw.get(..len)?;
            *raw = raw.get(len..)?;
            Value::Bytes(v)
        }
        _ => return None,
    };
    Some(Some((key >> 3, value)))
}

fn put_varint(out: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// The answers to one message: every id, with one code.
pub(super) struct RawAnswers {
    ids: Vec<u64>,
    code: u32,
}

impl RawAnswers {
    /// Writes them as a `SubmitAnswers`.
    fn write(&self, out: &mut impl BufMut) {
        let mut answer = Vec::with_capacity(16);
        for &id in &self.ids {
            answer.clear();
            answer.put_u8(0x08);
            put_varint(&mut answer, id);
            if self.code != 0 {
                answer.put_u8(0x10);
                put_varint(&mut answer, u64::from(self.code));
            }
            out.put_u8(0x0a);
            put_varint(out, answer.len() as u64);
            out.put_slice(&answer);
        }
    }
}

/// [`RawBatch`] in, [`RawAnswers`] out.
struct ManyCodec {
    keep: bool,
}

impl Codec for ManyCodec {
    type Encode = RawAnswers;
    type Decode = RawBatch;
    type Encoder = AnswersEncoder;
    type Decoder = BatchDecoder;

    fn encoder(&mut self) -> AnswersEncoder {
        AnswersEncoder
    }

    fn decoder(&mut self) -> BatchDecoder {
        BatchDecoder { keep: self.keep }
    }
}

struct AnswersEncoder;

impl Encoder for AnswersEncoder {
    type Item = RawAnswers;
    type Error = tonic::Status;

    fn encode(&mut self, item: RawAnswers, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        item.write(dst);
        Ok(())
    }
}

struct BatchDecoder {
    keep: bool,
}

/// The bytes of a whole message, checked contiguous.
fn whole<'a>(buf: &'a DecodeBuf<'_>) -> Result<&'a [u8], tonic::Status> {
    let chunk = buf.chunk();
    if chunk.len() == buf.remaining() {
        Ok(chunk)
    } else {
        Err(tonic::Status::internal("a message's buffer is not contiguous"))
    }
}

impl Decoder for BatchDecoder {
    type Item = RawBatch;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<RawBatch>, tonic::Status> {
        let batch = scan_batch(whole(buf)?, self.keep)
            .ok_or_else(|| tonic::Status::invalid_argument("SubmitBatch does not decode"))?;
        let len = buf.remaining();
        buf.advance(len);
        Ok(Some(batch))
    }
}

type AnswerStream = Pin<Box<dyn Stream<Item = Result<RawAnswers, tonic::Status>> + Send>>;

/// `SubmitMany` of one sink router.
struct SubmitMany(SinkRouterService);

impl tonic::server::StreamingService<RawBatch> for SubmitMany {
    type Response = RawAnswers;
    type ResponseStream = AnswerStream;
    type Future = BoxFuture<tonic::Response<AnswerStream>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<RawBatch>>) -> Self::Future {
        let svc = self.0.clone();
        Box::pin(async move {
            let mut inbound = request.into_inner();
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            tokio::spawn(async move {
                if svc.mode == RouterMode::Hang {
                    tx.closed().await;
                    drop(inbound);
                    return;
                }
                let code = svc.code() as u32;
                while let Some(Ok(batch)) = inbound.next().await {
                    svc.stats.on_batch(batch.ids.len());
                    if let Some(order) = &svc.order
                        && order.send(batch.envelopes).await.is_err()
                    {
                        return;
                    }
                    let answers = RawAnswers { ids: batch.ids, code };
                    if tx.send(Ok(answers)).await.is_err() {
                        return;
                    }
                }
            });
            Ok(tonic::Response::new(
                Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)) as AnswerStream,
            ))
        })
    }
}

/// A sink router's calls: `SubmitMany` here, `Submit` to the generated server.
#[derive(Clone)]
pub(super) struct RouterRoutes {
    pub(super) inner: pb::router_server::RouterServer<SinkRouterService>,
    pub(super) svc: SinkRouterService,
}

impl NamedService for RouterRoutes {
    const NAME: &'static str = "fabrx.v1.Router";
}

impl<B> Service<http::Request<B>> for RouterRoutes
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != "/fabrx.v1.Router/SubmitMany" {
            return self.inner.call(req);
        }
        let svc = self.svc.clone();
        Box::pin(async move {
            let keep = svc.order.is_some();
            let mut grpc = tonic::server::Grpc::new(ManyCodec { keep })
                .max_decoding_message_size(wire::limits::SUBMIT_BATCH.max_bytes);
            Ok(grpc.streaming(SubmitMany(svc), req).await)
        })
    }
}

/// A block of the sink: its header, and the whole block encoded once.
pub(super) struct Encoded {
    /// The header alone (what a `headers_only` Deliver sends).
    pub(super) header: pb::OrderedHeader,
    /// The encoded `OrderedBlock`.
    pub(super) bytes: Bytes,
    /// The bytes of its requests (what the sink's window counts).
    pub(super) request_bytes: usize,
}

impl Encoded {
    /// Encodes `block` once.
    pub(super) fn new(block: &pb::OrderedBlock) -> Encoded {
        Encoded {
            header: block.header.clone().unwrap_or_default(),
            bytes: Bytes::from(block.encode_to_vec()),
            request_bytes: block.requests.iter().map(Vec::len).sum(),
        }
    }

    /// The block as Deliver sends it (`headers_only`: without its requests).
    pub(super) fn message(&self, headers_only: bool) -> Bytes {
        if headers_only {
            let block = pb::OrderedBlock {
                header: Some(self.header.clone()),
                requests: vec![],
                proof: None,
            };
            Bytes::from(block.encode_to_vec())
        } else {
            self.bytes.clone()
        }
    }
}

/// Encoded blocks out (each written as it is), `DeliverRequest` in.
struct BlocksCodec;

impl Codec for BlocksCodec {
    type Encode = Bytes;
    type Decode = pb::DeliverRequest;
    type Encoder = BytesEncoder;
    type Decoder = wire::codec::BoundedDecoder<pb::DeliverRequest>;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        wire::codec::BoundedCodec::<pb::DeliverRequest, pb::DeliverRequest>::default().decoder()
    }
}

struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

type BlockStream = Pin<Box<dyn Stream<Item = Result<Bytes, tonic::Status>> + Send>>;

/// `Deliver` of the sink's assembler.
struct Deliver(Arc<super::Ledger>);

impl tonic::server::ServerStreamingService<pb::DeliverRequest> for Deliver {
    type Response = Bytes;
    type ResponseStream = BlockStream;
    type Future = BoxFuture<tonic::Response<BlockStream>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<pb::DeliverRequest>) -> Self::Future {
        let ledger = self.0.clone();
        Box::pin(async move {
            let rx = super::deliver(ledger, request.into_inner());
            Ok(tonic::Response::new(
                Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)) as BlockStream,
            ))
        })
    }
}

/// The sink assembler's calls: `Deliver` here, the rest to the generated server.
#[derive(Clone)]
pub(super) struct AssemblerRoutes {
    pub(super) inner: pb::assembler_server::AssemblerServer<super::SinkAssembler>,
    pub(super) ledger: Arc<super::Ledger>,
}

impl NamedService for AssemblerRoutes {
    const NAME: &'static str = "fabrx.v1.Assembler";
}

impl<B> Service<http::Request<B>> for AssemblerRoutes
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != "/fabrx.v1.Assembler/Deliver" {
            return self.inner.call(req);
        }
        let ledger = self.ledger.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(BlocksCodec).max_encoding_message_size(64 << 20);
            Ok(grpc.server_streaming(Deliver(ledger), req).await)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_read_as_ids_and_envelopes_and_answered_by_id() {
        let batch = pb::SubmitBatch {
            requests: vec![
                pb::SubmitRequest {
                    id: 5,
                    envelope: vec![1, 2, 3],
                },
                pb::SubmitRequest {
                    id: 0,
                    envelope: vec![],
                },
                pb::SubmitRequest {
                    id: 1 << 40,
                    envelope: vec![9; 300],
                },
            ],
        };
        let raw = batch.encode_to_vec();
        let read = scan_batch(&raw, true).unwrap();
        assert_eq!(read.ids, vec![5, 0, 1 << 40]);
        assert_eq!(read.envelopes, vec![vec![1, 2, 3], vec![], vec![9; 300]]);
        assert!(scan_batch(&raw, false).unwrap().envelopes.is_empty());
        assert!(scan_batch(&raw[..raw.len() - 1], false).is_none());
        for code in [0u32, 6] {
            let mut out = Vec::new();
            RawAnswers {
                ids: read.ids.clone(),
                code,
            }
            .write(&mut out);
            let answers = pb::SubmitAnswers::decode(out.as_slice()).unwrap().answers;
            let got: Vec<(u64, u32)> = answers.iter().map(|a| (a.id, a.code)).collect();
            assert_eq!(got, vec![(5, code), (0, code), (1 << 40, code)]);
        }
    }
}
