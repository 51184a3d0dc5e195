//! Reads of committed state for the query service (`VcService.ReadRows`,
//! `VcService.OwnedRows`): the checks of a request and the bounds of an answer, pure.
//!
//! An answer is bounded twice: by rows (a page of owned rows holds at most
//! [`OWNED_PAGE_MAX`] rows) and by bytes (keys and values together at most
//! [`READ_MAX_BYTES`], well under `wire::limits::ROWS_RESULT`), cut in key order with
//! `more` set (`Backend::read_rows`).

use crate::model::{OwnedPage, Snapshot};
use tonic::Status as GrpcStatus;
use types::check::{MAX_KEY_LEN, is_valid_namespace_id};
use types::owned::OWNER_LEN;
use wire::pb;

/// Most rows of one page of owned rows; a request for more (or for 0) gets this many.
pub const OWNED_PAGE_MAX: usize = 1000;

/// Reads a vcservice serves at once (each holds at most [`READ_MAX_BYTES`] of rows);
/// more wait their turn.
pub const MAX_CONCURRENT_READS: usize = 16;

/// Most keys of one `ReadRows` request (the decoding limit of `RowsQuery` allows no more).
pub const READ_MAX_KEYS: usize = 65_536;

/// Most bytes of keys and values in one answer. With the protobuf framing of at most
/// [`READ_MAX_KEYS`] rows (under 32 bytes a row) an answer stays under half of
/// `wire::limits::ROWS_RESULT.max_bytes`.
pub const READ_MAX_BYTES: usize = 12 << 20;

/// Framing bytes of a `StateRow` in a `RowsResult`, at most: tags, lengths, the version.
const ROW_FRAMING_BYTES: usize = 32;

const _: () = assert!(
    READ_MAX_BYTES + types::check::MAX_VALUE_LEN + MAX_KEY_LEN + READ_MAX_KEYS * ROW_FRAMING_BYTES
        <= wire::limits::ROWS_RESULT.max_bytes / 2
);

/// A checked `ReadRows` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowsRequest {
    /// The namespace.
    pub namespace: String,
    /// The keys (each at most `MAX_KEY_LEN` bytes, not empty).
    pub keys: Vec<Vec<u8>>,
}

/// A checked `OwnedRows` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRequest {
    /// The namespace.
    pub namespace: String,
    /// The owner key (`OWNER_LEN` bytes).
    pub owner: Vec<u8>,
    /// The page: `limit` clamped to `1..=OWNED_PAGE_MAX`, `max_bytes` [`READ_MAX_BYTES`].
    pub page: OwnedPage,
}

fn check_namespace(ns: &str) -> Result<(), GrpcStatus> {
    if is_valid_namespace_id(ns) {
        Ok(())
    } else {
        Err(GrpcStatus::invalid_argument(format!(
            "namespace id {:?} is not ^[a-z0-9_]{{1,60}}$",
            ns.chars().take(80).collect::<String>()
        )))
    }
}

fn check_key(what: &str, key: &[u8]) -> Result<(), GrpcStatus> {
    if key.len() > MAX_KEY_LEN {
        return Err(GrpcStatus::invalid_argument(format!(
            "{what} of {} bytes is longer than {MAX_KEY_LEN}",
            key.len()
        )));
    }
    Ok(())
}

/// Checks a `RowsQuery`: a valid namespace id, at most [`READ_MAX_KEYS`] keys of at most
/// `MAX_KEY_LEN` bytes each, none empty.
pub fn rows_request(q: pb::RowsQuery) -> Result<RowsRequest, GrpcStatus> {
    check_namespace(&q.namespace)?;
    if q.keys.len() > READ_MAX_KEYS {
        return Err(GrpcStatus::invalid_argument(format!(
            "{} keys; at most {READ_MAX_KEYS} per request",
            q.keys.len()
        )));
    }
    for k in &q.keys {
        check_key("key", k)?;
        if k.is_empty() {
            return Err(GrpcStatus::invalid_argument("empty key"));
        }
    }
    Ok(RowsRequest {
        namespace: q.namespace,
        keys: q.keys,
    })
}

/// Checks an `OwnedQuery`: a valid namespace id, an owner of `OWNER_LEN` bytes, an
/// `after_key` of at most `MAX_KEY_LEN` bytes; clamps the limit to `1..=OWNED_PAGE_MAX`.
pub fn owned_request(q: pb::OwnedQuery) -> Result<OwnedRequest, GrpcStatus> {
    check_namespace(&q.namespace)?;
    if q.owner.len() != OWNER_LEN {
        return Err(GrpcStatus::invalid_argument(format!(
            "owner of {} bytes; an owner key is {OWNER_LEN} bytes",
            q.owner.len()
        )));
    }
    check_key("after_key", &q.after_key)?;
    let limit = match usize::try_from(q.limit) {
        Ok(0) | Err(_) => OWNED_PAGE_MAX,
        Ok(n) => n.min(OWNED_PAGE_MAX),
    };
    Ok(OwnedRequest {
        namespace: q.namespace,
        owner: q.owner,
        page: OwnedPage {
            after_key: q.after_key,
            limit,
            max_bytes: READ_MAX_BYTES,
        },
    })
}

/// The wire form of a snapshot.
pub fn snapshot_to_wire(s: Snapshot) -> pb::RowsResult {
    pb::RowsResult {
        rows: s
            .rows
            .into_iter()
            .map(|r| pb::StateRow {
                key: r.key,
                value: r.value,
                version: r.version,
            })
            .collect(),
        more: s.more,
        last_committed_block: s.last_committed_block,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn owned(owner: Vec<u8>, after_key: Vec<u8>, limit: u32) -> pb::OwnedQuery {
        pb::OwnedQuery {
            namespace: "token".into(),
            owner,
            after_key,
            limit,
            ..Default::default()
        }
    }

    #[test]
    fn owned_limits_are_clamped_and_bad_input_refused() {
        let limit = |l| owned_request(owned(vec![1; 32], vec![], l)).unwrap().page.limit;
        assert_eq!(
            (limit(0), limit(1), limit(999), limit(5000), limit(u32::MAX)),
            (OWNED_PAGE_MAX, 1, 999, OWNED_PAGE_MAX, OWNED_PAGE_MAX)
        );
        for bad in [
            owned(vec![1; 31], vec![], 1),
            owned(vec![1; 33], vec![], 1),
            owned(vec![], vec![], 1),
            owned(vec![1; 32], vec![0; MAX_KEY_LEN + 1], 1),
            pb::OwnedQuery {
                namespace: "Bad-NS".into(),
                ..owned(vec![1; 32], vec![], 1)
            },
        ] {
            assert_eq!(owned_request(bad).unwrap_err().code(), Code::InvalidArgument);
        }
    }

    #[test]
    fn rows_requests_are_checked() {
        let q = |ns: &str, keys: Vec<Vec<u8>>| pb::RowsQuery {
            namespace: ns.into(),
            keys,
        };
        assert_eq!(
            rows_request(q("token", vec![b"a".to_vec()])).unwrap().keys,
            vec![b"a".to_vec()]
        );
        for bad in [
            q("", vec![]),
            q("a".repeat(61).as_str(), vec![]),
            q("token", vec![vec![]]),
            q("token", vec![vec![1; MAX_KEY_LEN + 1]]),
            q("token", vec![vec![1]; READ_MAX_KEYS + 1]),
        ] {
            assert_eq!(rows_request(bad).unwrap_err().code(), Code::InvalidArgument);
        }
    }
}
