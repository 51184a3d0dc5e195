//! An assembler's `Deliver` stream read for a run's txs alone: each block is scanned
//! where it arrives for its number and the tx ids of its requests, and only the indexes
//! of the run's txs among them are kept (no request is copied out of the message).

use std::sync::Arc;

use prost::Message as _;
use prost::bytes::Buf as _;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use wire::pb;

use super::load::{Field, Load, envelope_tx_id, next_field};

/// Largest block message read.
const MAX_BLOCK_BYTES: usize = 64 << 20;

/// What a block holds of a run: its number and the run's txs in it, in block order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BlockTxs {
    /// The block's number (none: a block without a header).
    pub(super) number: Option<u64>,
    /// The indexes of the run's txs the block holds.
    pub(super) txs: Vec<usize>,
}

/// Scans an encoded `OrderedBlock`; `None`: not one.
pub(super) fn block_txs(mut raw: &[u8], load: &Load) -> Option<BlockTxs> {
    let (mut number, mut txs) = (None, Vec::new());
    while let Some((field, value)) = next_field(&mut raw)? {
        match (field, value) {
            // header { number = 1 }
            (1, Field::Bytes(mut header)) => {
                while let Some((f, v)) = next_field(&mut header)? {
                    if let (1, Field::Varint(n)) = (f, v) {
                        number = Some(n);
                    }
                }
                number = number.or(Some(0));
            }
            (2, Field::Bytes(request)) => {
                if let Some(i) = envelope_tx_id(request).and_then(|id| load.index_of(id)) {
                    txs.push(i);
                }
            }
            _ => {}
        }
    }
    Some(BlockTxs { number, txs })
}

/// `DeliverRequest` out, [`BlockTxs`] in.
struct BlocksCodec {
    load: Arc<Load>,
}

impl Codec for BlocksCodec {
    type Encode = pb::DeliverRequest;
    type Decode = BlockTxs;
    type Encoder = RequestEncoder;
    type Decoder = BlocksDecoder;

    fn encoder(&mut self) -> RequestEncoder {
        RequestEncoder
    }

    fn decoder(&mut self) -> BlocksDecoder {
        BlocksDecoder {
            load: self.load.clone(),
        }
    }
}

struct RequestEncoder;

impl Encoder for RequestEncoder {
    type Item = pb::DeliverRequest;
    type Error = tonic::Status;

    fn encode(&mut self, item: pb::DeliverRequest, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(format!("encoding a Deliver request: {e}")))
    }
}

struct BlocksDecoder {
    load: Arc<Load>,
}

impl Decoder for BlocksDecoder {
    type Item = BlockTxs;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<BlockTxs>, tonic::Status> {
        let len = buf.remaining();
        let chunk = buf.chunk();
        if chunk.len() != len {
            return Err(tonic::Status::internal("a block's buffer is not contiguous"));
        }
        let block = block_txs(chunk, &self.load)
            .ok_or_else(|| tonic::Status::invalid_argument("the block does not decode"))?;
        buf.advance(len);
        Ok(Some(block))
    }
}

/// Opens a `Deliver` stream for `request` at `channel`, read for the txs of `load`.
pub(super) async fn open(
    channel: tonic::transport::Channel,
    request: pb::DeliverRequest,
    load: Arc<Load>,
) -> Result<tonic::Streaming<BlockTxs>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_BLOCK_BYTES);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/fabrx.v1.Assembler/Deliver");
    let mut req = tonic::Request::new(request);
    req.extensions_mut()
        .insert(tonic::GrpcMethod::new("fabrx.v1.Assembler", "Deliver"));
    Ok(grpc
        .server_streaming(req, path, BlocksCodec { load })
        .await?
        .into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_yields_its_number_and_the_runs_txs_in_it() {
        let load = Load::template("mine-", 100, 200);
        let stranger = Load::template("other-", 100, 200);
        let block = pb::OrderedBlock {
            header: Some(pb::OrderedHeader {
                number: 77,
                tx_count: 4,
                ..pb::OrderedHeader::default()
            }),
            requests: vec![
                load.envelope(5),
                stranger.envelope(6),
                load.envelope(99),
                vec![1, 2, 3],
            ],
            proof: None,
        };
        let raw = block.encode_to_vec();
        assert_eq!(
            block_txs(&raw, &load),
            Some(BlockTxs {
                number: Some(77),
                txs: vec![5, 99]
            })
        );
        let genesis = pb::OrderedBlock {
            header: Some(pb::OrderedHeader::default()),
            ..pb::OrderedBlock::default()
        };
        assert_eq!(
            block_txs(&genesis.encode_to_vec(), &load).map(|b| b.number),
            Some(Some(0)),
            "block 0: a header whose number is the default"
        );
        assert_eq!(block_txs(&raw[..raw.len() - 1], &load), None, "truncated");
    }
}
