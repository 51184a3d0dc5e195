//! What a `Broadcast` client is told (docs/router.md "Fabric Broadcast"): the Fabric
//! status and info of a request's final outcome, which refusals are waited out instead
//! of answered at once, and how long to wait between tries. Pure: no tokio, no clock.

use crate::answer::BatcherRefusal;
use crate::error::{Error, Result};
use crate::refusal::Refusal;
use crate::service::cut_reason;
use arma::admission::ContentError;
use arma::fabric::FabricError;
use std::time::Duration;
use wire::fabric::common::Status as FabricStatus;

/// The info of a request the batcher already holds or ordered: answered `SUCCESS`, as
/// the same content is in the ordering service.
pub const DUPLICATE_INFO: &str = "duplicate: already admitted";

/// The first wait before trying a request again after a full bound refused it.
pub const RETRY_FIRST: Duration = Duration::from_millis(5);

/// The longest wait between two tries.
pub const RETRY_MAX: Duration = Duration::from_millis(50);

/// The wait before try number `round + 1` of a request (`round` counts the tries that
/// were refused, from 0): [`RETRY_FIRST`] doubling to at most [`RETRY_MAX`]. Never
/// overflows.
pub fn retry_delay(round: u32) -> Duration {
    let factor = 1u32.checked_shl(round.min(16)).unwrap_or(u32::MAX);
    RETRY_FIRST
        .checked_mul(factor)
        .map_or(RETRY_MAX, |d| d.min(RETRY_MAX))
}

/// Whether `e` says a bound behind the router is full (the shard's in-flight requests or
/// bytes, the link's pending map, the batcher's mempool): room frees as answers come, so
/// a `Broadcast` request refused this way is tried again until its answer timeout.
pub fn waits_for_room(e: &Error) -> bool {
    matches!(
        e,
        Error::ShardFullRequests { .. }
            | Error::ShardFullBytes { .. }
            | Error::LinkBusy { .. }
            | Error::BatcherRefused {
                reason: BatcherRefusal::MempoolFullRequests | BatcherRefusal::MempoolFullBytes
            }
    )
}

/// The Fabric status of a request's final outcome and the info that says why, cut to
/// [`crate::service::MAX_REASON_BYTES`] (docs/router.md "Fabric Broadcast" has the
/// table). A refusal that [`waits_for_room`] is final only once the wait is over.
pub fn broadcast_status(result: &Result<()>) -> (FabricStatus, String) {
    let e = match result {
        Ok(()) => return (FabricStatus::Success, String::new()),
        Err(Error::BatcherRefused {
            reason: BatcherRefusal::Duplicate,
        }) => return (FabricStatus::Success, DUPLICATE_INFO.to_string()),
        Err(e) => e,
    };
    if waits_for_room(e) {
        let info = format!("no room within the answer timeout: {e}");
        return (FabricStatus::ServiceUnavailable, cut_reason(info));
    }
    (status_of_error(e), cut_reason(e.to_string()))
}

/// The status of an error (a duplicate aside).
fn status_of_error(e: &Error) -> FabricStatus {
    match e {
        Error::Refused(Refusal::TooLarge { .. })
        | Error::BatcherRefused {
            reason: BatcherRefusal::TooLarge,
        } => FabricStatus::RequestEntityTooLarge,
        Error::Refused(Refusal::Content(
            ContentError::UnknownClient
            | ContentError::BadSignature
            | ContentError::Fabric(FabricError::UnknownClient | FabricError::BadSignature),
        )) => FabricStatus::Forbidden,
        Error::Refused(Refusal::Empty | Refusal::Content(_)) => FabricStatus::BadRequest,
        Error::ShardFullRequests { .. }
        | Error::ShardFullBytes { .. }
        | Error::LinkBusy { .. }
        | Error::LinkDown { .. }
        | Error::NoAnswer { .. }
        | Error::BatcherRefused {
            reason: BatcherRefusal::MempoolFullRequests | BatcherRefusal::MempoolFullBytes,
        } => FabricStatus::ServiceUnavailable,
        Error::BatcherRefused {
            reason: BatcherRefusal::Duplicate,
        } => FabricStatus::Success,
        Error::BatcherRefused {
            reason: BatcherRefusal::WrongShard | BatcherRefusal::Unspecified,
        }
        | Error::UnknownShard { .. }
        | Error::Internal(_)
        | Error::InvalidConfig { .. }
        | Error::Listen { .. }
        | Error::Metrics(_)
        | Error::Serve(_) => FabricStatus::InternalServerError,
    }
}
