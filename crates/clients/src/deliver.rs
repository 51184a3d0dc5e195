//! An assembler's `Deliver` service as its clients read it: one way to open a stream
//! ([`open`]), and the probe of whether an assembler holds a block ([`has_block`]).
//! Verifying the blocks read is the reader's business (`arma::verify_pb_block`).

use std::time::Duration;
use tonic::transport::Channel;
use wire::pb;
use wire::pb::assembler_client::AssemblerClient;

/// Largest answer a probe reads: one block header.
const PROBE_MESSAGE_BYTES: usize = 1 << 20;

/// Opens a `Deliver` stream at `channel` for `request`, accepting messages of at most
/// `max_message_bytes` (a whole block with its requests, or a header).
pub async fn open(
    channel: Channel,
    request: pb::DeliverRequest,
    max_message_bytes: usize,
) -> Result<tonic::Streaming<pb::OrderedBlock>, tonic::Status> {
    let mut client = AssemblerClient::new(channel).max_decoding_message_size(max_message_bytes);
    Ok(client.deliver(request).await?.into_inner())
}

/// Whether the assembler at `channel` holds block `number` (asked for its header alone,
/// within `timeout`): `Some(true)` or `Some(false)` when it answered, `None` when it did
/// not (unreachable, refused, too slow).
pub async fn has_block(channel: Channel, number: u64, timeout: Duration) -> Option<bool> {
    let request = pb::DeliverRequest {
        from: number,
        to: Some(number),
        headers_only: true,
        to_end: true,
    };
    let probe = async {
        let mut stream = open(channel, request, PROBE_MESSAGE_BYTES).await.ok()?;
        let block = stream.message().await.ok()?;
        Some(block.and_then(|b| b.header).is_some_and(|h| h.number == number))
    };
    tokio::time::timeout(timeout, probe).await.ok().flatten()
}
