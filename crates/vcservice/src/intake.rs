//! What the vcservice accepts from upstream, decided before anything touches storage.
//!
//! The vcservice decides `COMMITTED` and `ABORTED_MVCC_CONFLICT` itself; an upstream
//! component (the sidecar, the coordinator) may only hand over a status that aborts a tx
//! without validation: a bad signature, a duplicate id, or a `MALFORMED_*` code. A batch
//! carrying any other preliminary status is refused as a whole (`INVALID_ARGUMENT`): a
//! tx stored `COMMITTED` with its writes never applied would corrupt the state. Every tx's
//! id is checked whatever its preliminary status: an id that is not well formed can never
//! be stored, so such a tx is answered `MALFORMED_BAD_ENVELOPE` (or
//! `MALFORMED_MISSING_TX_ID`) and never reaches the database.

use crate::model::VcTx;
use tonic::Status as GrpcStatus;
use types::Status;
use types::check::check_tx_id;
use wire::pb;

/// Whether upstream may decide `status` for a tx.
pub fn is_upstream_status(status: Status) -> bool {
    !matches!(status, Status::Committed | Status::AbortedMvccConflict)
}

/// At most the first 64 characters of an id, printable, for error messages.
fn shown(id: &str) -> String {
    let short: String = id.chars().take(64).collect();
    format!("{short:?}")
}

/// Converts and checks one tx of a batch.
pub fn admit_tx(t: pb::VcTx) -> Result<VcTx, GrpcStatus> {
    let shown_id = shown(&t.tx_id);
    let mut vtx =
        VcTx::try_from(t).map_err(|e| GrpcStatus::invalid_argument(format!("tx {shown_id}: {e}")))?;
    if vtx.height.block > crate::MAX_BLOCK_NUMBER {
        return Err(GrpcStatus::invalid_argument(format!(
            "tx {shown_id}: block number {} is above the largest storable block number {}",
            vtx.height.block,
            crate::MAX_BLOCK_NUMBER
        )));
    }
    if let Some(s) = vtx.prelim
        && !is_upstream_status(s)
    {
        return Err(GrpcStatus::invalid_argument(format!(
            "tx {shown_id}: preliminary status {s} is decided by the vcservice, not upstream"
        )));
    }
    if let Err(status) = check_tx_id(vtx.id.as_str()) {
        vtx.prelim = Some(status);
    }
    Ok(vtx)
}

/// Converts and checks every tx of a batch.
pub fn admit_batch(batch: pb::VcBatch) -> Result<Vec<VcTx>, GrpcStatus> {
    batch.txs.into_iter().map(admit_tx).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire_tx(id: &str, prelim: u32) -> pb::VcTx {
        pb::VcTx {
            tx_id: id.to_string(),
            block: 3,
            index: 1,
            tx: Some(pb::Tx::default()),
            prelim_status: prelim,
        }
    }

    #[test]
    fn upstream_may_only_abort() {
        for s in Status::ALL {
            let r = admit_tx(wire_tx("t1", s.code()));
            match s {
                Status::Committed | Status::AbortedMvccConflict => {
                    let e = r.unwrap_err();
                    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{s}");
                }
                _ => assert_eq!(r.unwrap().prelim, Some(*s)),
            }
        }
        assert_eq!(admit_tx(wire_tx("t1", 0)).unwrap().prelim, None);
        assert_eq!(
            admit_tx(wire_tx("t1", 9999)).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn ids_are_checked_whatever_the_upstream_status() {
        let long = "a".repeat(3000);
        for id in [long.as_str(), "nul\0byte", "has space"] {
            for prelim in [
                0,
                Status::AbortedSignatureInvalid.code(),
                Status::MalformedNoWrites.code(),
            ] {
                let v = admit_tx(wire_tx(id, prelim)).unwrap();
                assert_eq!(v.prelim, Some(Status::MalformedBadEnvelope), "{id:?} {prelim}");
                assert!(!v.prelim.unwrap().is_stored());
            }
        }
        let v = admit_tx(wire_tx("", Status::AbortedSignatureInvalid.code())).unwrap();
        assert_eq!(v.prelim, Some(Status::MalformedMissingTxId));
    }

    #[test]
    fn block_numbers_beyond_storage_are_refused() {
        let mut t = wire_tx("t1", 0);
        t.block = u64::MAX;
        assert_eq!(admit_tx(t).unwrap_err().code(), tonic::Code::InvalidArgument);
        let mut t = wire_tx("t1", 0);
        t.block = crate::MAX_BLOCK_NUMBER;
        assert!(admit_tx(t).is_ok());
    }
}
