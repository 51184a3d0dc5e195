//! The heights `fabrx status` shows (docs/network.md): an assembler's blocks held (found
//! by probing single headers, a binary search), a sidecar's next block to commit, a
//! consenter's last decision. Each probe has a short deadline; a node that does not
//! answer has no height.

use std::time::Duration;
use wire::pb;

const PROBE: Duration = Duration::from_secs(2);

/// The height of node `role` listening on `listen`, if it answers.
pub async fn height(role: &str, listen: &str) -> Option<u64> {
    let channel = clients::channel::lazy(listen, PROBE).ok()?;
    let probe = async {
        match role {
            "assembler" => assembler_height(channel).await,
            "sidecar" => {
                let mut c = pb::sidecar_client::SidecarClient::new(channel);
                let next = c.get_next_block(pb::LastCommittedRequest::default()).await.ok()?;
                Some(next.into_inner().number)
            }
            "consenter" => {
                let mut c = pb::bft_consensus_client::BftConsensusClient::new(channel);
                let s = c.status(pb::BftStatusRequest::default()).await.ok()?;
                Some(s.into_inner().last_decided)
            }
            _ => None,
        }
    };
    tokio::time::timeout(PROBE * 4, probe).await.ok().flatten()
}

/// A consenter's config epoch (config updates it has applied), if it answers.
pub async fn consenter_epoch(listen: &str) -> Option<u64> {
    let channel = clients::channel::lazy(listen, PROBE).ok()?;
    let probe = async {
        let mut c = pb::bft_consensus_client::BftConsensusClient::new(channel);
        let s = c.status(pb::BftStatusRequest::default()).await.ok()?;
        Some(s.into_inner().epoch)
    };
    tokio::time::timeout(PROBE * 4, probe).await.ok().flatten()
}

/// Blocks an assembler holds: the first number it has no block for.
async fn assembler_height(channel: tonic::transport::Channel) -> Option<u64> {
    let has = async |n: u64| clients::deliver::has_block(channel.clone(), n, PROBE).await;
    // Grow an upper bound, then bisect: [lo, hi) with block lo − 1 held, block hi not.
    let (mut lo, mut hi) = (0u64, 1u64);
    while has(hi - 1).await? {
        lo = hi;
        hi = hi.checked_mul(2)?;
    }
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if has(mid - 1).await? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}
