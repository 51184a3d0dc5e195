//! Probes of an assembler's `Deliver` service that more than one client needs.

use std::time::Duration;
use tonic::transport::Channel;
use wire::pb;
use wire::pb::assembler_client::AssemblerClient;

/// Largest answer a probe reads: one block header.
const PROBE_MESSAGE_BYTES: usize = 1 << 20;

/// Whether the assembler at `channel` holds block `number` (asked for its header alone,
/// within `timeout`): `Some(true)` or `Some(false)` when it answered, `None` when it did
/// not (unreachable, refused, too slow).
pub async fn has_block(channel: Channel, number: u64, timeout: Duration) -> Option<bool> {
    let mut client = AssemblerClient::new(channel).max_decoding_message_size(PROBE_MESSAGE_BYTES);
    let request = pb::DeliverRequest {
        from: number,
        to: Some(number),
        headers_only: true,
        to_end: true,
    };
    let probe = async {
        let mut stream = client.deliver(request).await.ok()?.into_inner();
        let block = stream.message().await.ok()?;
        Some(block.and_then(|b| b.header).is_some_and(|h| h.number == number))
    };
    tokio::time::timeout(timeout, probe).await.ok().flatten()
}
