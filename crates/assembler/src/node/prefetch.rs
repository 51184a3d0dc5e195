//! One prefetcher per shard pulls the current primary's batches from the party's own
//! batcher of that shard (`BatcherPeer.Pull`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;
use tracing::debug;
use types::{PartyId, ShardId};
use wire::pb;
use wire::pb::batcher_peer_client::BatcherPeerClient;

use super::MAX_MESSAGE_BYTES;
use crate::core::OfferedBatch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LaneView {
    pub(super) primary: PartyId,
    pub(super) term: u64,
    pub(super) from_seq: u64,
}

/// A verified decision with its proof.
pub(super) struct Prefetcher {
    pub(super) shard: ShardId,
    pub(super) batcher: Channel,
    pub(super) view: watch::Receiver<LaneView>,
    pub(super) tx: mpsc::Sender<OfferedBatch>,
    pub(super) retry: Duration,
}

impl Prefetcher {
    pub(super) async fn run(mut self) {
        loop {
            let view = *self.view.borrow_and_update();
            let pull = pull(self.shard, self.batcher.clone(), view, self.tx.clone());
            tokio::select! {
                reason = pull => {
                    if self.tx.is_closed() {
                        return;
                    }
                    debug!(shard = self.shard, reason, "prefetch stream ended");
                    tokio::time::sleep(self.retry).await;
                }
                changed = self.view.changed() => if changed.is_err() {
                    return;
                },
            }
        }
    }
}

/// Pulls the lane `view` of `shard` from `batcher` until the stream ends; returns why.
async fn pull(shard: ShardId, batcher: Channel, view: LaneView, tx: mpsc::Sender<OfferedBatch>) -> String {
    let mut client = BatcherPeerClient::new(batcher).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let request = pb::PullRequest {
        shard,
        primary: view.primary,
        term: view.term,
        from_seq: view.from_seq,
        // An assembler needs the requests.
        compact: false,
    };
    let mut stream = match client.pull(request).await {
        Ok(s) => s.into_inner(),
        Err(s) => return format!("open: {:?}: {}", s.code(), s.message()),
    };
    loop {
        match stream.message().await {
            Ok(Some(b)) => {
                if b.shard != shard || b.primary != view.primary {
                    return "a batch of another lane".into();
                }
                if tx.send(offered(b)).await.is_err() {
                    return "node stopped".into();
                }
            }
            Ok(None) => return "ended".into(),
            Err(s) => return format!("{:?}: {}", s.code(), s.message()),
        }
    }
}

/// A served batch as offered to the core (the core checks the digest).
pub(super) fn offered(b: pb::Batch) -> OfferedBatch {
    let mut digest = [0u8; 32];
    if b.digest.len() == 32 {
        digest.copy_from_slice(&b.digest);
    }
    OfferedBatch {
        shard: b.shard,
        primary: b.primary,
        seq: b.seq,
        digest,
        requests: b.requests.into_iter().map(Arc::from).collect(),
    }
}
