//! Which requests the query service forwards: the same rules as the validator-committer
//! applies (`vcservice::reads`), checked here first so a bad request costs no hop.

use tonic::Status;
use types::check::{MAX_KEY_LEN, is_valid_namespace_id};
use types::owned::OWNER_LEN;
use wire::pb;

/// Most rows of one page of owned rows; a request for more (or for 0) gets this many.
pub const OWNED_PAGE_MAX: u32 = 1000;

/// Most keys of one `GetRows` request.
pub const MAX_KEYS: usize = 65_536;

/// Most tx ids of one `GetTxStatus` request.
pub const MAX_TX_IDS: usize = 65_536;

fn namespace(ns: &str) -> Result<(), Status> {
    if is_valid_namespace_id(ns) {
        return Ok(());
    }
    Err(Status::invalid_argument(format!(
        "namespace id {:?} is not ^[a-z0-9_]{{1,60}}$",
        ns.chars().take(80).collect::<String>()
    )))
}

fn key(what: &str, k: &[u8]) -> Result<(), Status> {
    if k.len() > MAX_KEY_LEN {
        return Err(Status::invalid_argument(format!(
            "{what} of {} bytes is longer than {MAX_KEY_LEN}",
            k.len()
        )));
    }
    Ok(())
}

/// Checks a `GetRows` request: a valid namespace id, at most [`MAX_KEYS`] keys, each
/// not empty and at most `MAX_KEY_LEN` bytes.
pub fn rows_query(q: &pb::RowsQuery) -> Result<(), Status> {
    namespace(&q.namespace)?;
    if q.keys.len() > MAX_KEYS {
        return Err(Status::invalid_argument(format!(
            "{} keys; at most {MAX_KEYS} per request",
            q.keys.len()
        )));
    }
    for k in &q.keys {
        key("key", k)?;
        if k.is_empty() {
            return Err(Status::invalid_argument("empty key"));
        }
    }
    Ok(())
}

/// Checks a `GetOwned` request (a valid namespace id, an owner of `OWNER_LEN` bytes, an
/// `after_key` of at most `MAX_KEY_LEN` bytes) and clamps its limit to
/// `1..=`[`OWNED_PAGE_MAX`].
pub fn owned_query(mut q: pb::OwnedQuery) -> Result<pb::OwnedQuery, Status> {
    namespace(&q.namespace)?;
    if q.owner.len() != OWNER_LEN {
        return Err(Status::invalid_argument(format!(
            "owner of {} bytes; an owner key is {OWNER_LEN} bytes",
            q.owner.len()
        )));
    }
    key("after_key", &q.after_key)?;
    q.limit = match q.limit {
        0 => OWNED_PAGE_MAX,
        n => n.min(OWNED_PAGE_MAX),
    };
    Ok(q)
}

/// Checks a `GetTxStatus` request: at most [`MAX_TX_IDS`] ids. Ids that are not well
/// formed are left in: they have no status, so the answer leaves them out.
pub fn status_query(q: &pb::StatusQuery) -> Result<(), Status> {
    if q.tx_ids.len() > MAX_TX_IDS {
        return Err(Status::invalid_argument(format!(
            "{} tx ids; at most {MAX_TX_IDS} per request",
            q.tx_ids.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn owned(namespace: &str, owner: Vec<u8>, after_key: Vec<u8>, limit: u32) -> pb::OwnedQuery {
        pb::OwnedQuery {
            namespace: namespace.into(),
            owner,
            after_key,
            limit,
            ..Default::default()
        }
    }

    #[test]
    fn owned_limit_is_clamped() {
        let limit = |l| owned_query(owned("token", vec![0; 32], vec![], l)).unwrap().limit;
        assert_eq!(
            [limit(0), limit(1), limit(1000), limit(1001), limit(u32::MAX)],
            [1000, 1, 1000, 1000, 1000]
        );
    }

    #[test]
    fn bad_requests_are_invalid_argument() {
        let owned_bad = [
            owned("Token", vec![0; 32], vec![], 1),
            owned("", vec![0; 32], vec![], 1),
            owned(&"a".repeat(61), vec![0; 32], vec![], 1),
            owned("token", vec![0; 31], vec![], 1),
            owned("token", vec![0; 33], vec![], 1),
            owned("token", vec![0; 32], vec![0; MAX_KEY_LEN + 1], 1),
        ];
        for q in owned_bad {
            assert_eq!(owned_query(q).unwrap_err().code(), Code::InvalidArgument);
        }
        let rows = |ns: &str, keys: Vec<Vec<u8>>| pb::RowsQuery {
            namespace: ns.into(),
            keys,
        };
        for q in [
            rows("a-b", vec![]),
            rows("token", vec![vec![]]),
            rows("token", vec![vec![0; MAX_KEY_LEN + 1]]),
            rows("token", vec![vec![1]; MAX_KEYS + 1]),
        ] {
            assert_eq!(rows_query(&q).unwrap_err().code(), Code::InvalidArgument);
        }
        assert!(rows_query(&rows("token", vec![vec![1; MAX_KEY_LEN]])).is_ok());
        let ids = pb::StatusQuery {
            tx_ids: vec![String::new(); MAX_TX_IDS + 1],
        };
        assert_eq!(status_query(&ids).unwrap_err().code(), Code::InvalidArgument);
    }
}
