//! The journal payload of one block (pure):
//!
//! ```text
//! number: u64 ‖ count: u32 ‖ count × (code: u32 ‖ id_len: u32 ‖ id) ‖ block bytes
//! ```
//!
//! integers little-endian; `code` is the tx's status code, `u32::MAX` for none.

use journal::le::{u32_le, u64_le};
use types::{Status, TxId};

use crate::{BlockEntry, LedgerTx, LedgerTxRef};

/// Bytes of a block record before its tx list: the journal's record header and the
/// block number.
pub const ENTRY_HEADER_LEN: usize = journal::HEADER_LEN + 8;

/// The code stored for a tx without a status.
const NO_STATUS: u32 = u32::MAX;

/// Encodes the payload of block `number`.
#[cfg(test)]
pub(crate) fn encode(number: u64, block: &[u8], txs: &[LedgerTx]) -> Vec<u8> {
    let refs: Vec<LedgerTxRef<'_>> = txs.iter().map(LedgerTx::borrowed).collect();
    encode_refs(number, block, &refs).0
}

/// Encodes the payload of block `number`, and returns the offset of each tx's
/// `code ‖ id_len ‖ id` in it (what [`decode`] gives as [`TxAt::offset`]).
pub(crate) fn encode_refs(number: u64, block: &[u8], txs: &[LedgerTxRef<'_>]) -> (Vec<u8>, Vec<u32>) {
    let ids: usize = txs.iter().map(|t| 8 + t.id.len()).sum();
    let mut out = Vec::with_capacity(12 + ids + block.len());
    let mut offsets = Vec::with_capacity(txs.len());
    out.extend_from_slice(&number.to_le_bytes());
    out.extend_from_slice(&(txs.len() as u32).to_le_bytes());
    for tx in txs {
        offsets.push(out.len() as u32);
        out.extend_from_slice(&tx.status.map_or(NO_STATUS, Status::code).to_le_bytes());
        out.extend_from_slice(&(tx.id.len() as u32).to_le_bytes());
        out.extend_from_slice(tx.id.as_bytes());
    }
    out.extend_from_slice(block);
    (out, offsets)
}

/// A tx of a decoded payload with the offset of its `code` field in the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxAt {
    /// The tx.
    pub tx: LedgerTx,
    /// Offset of `code ‖ id_len ‖ id` in the payload.
    pub offset: u32,
}

/// A decoded payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub number: u64,
    pub txs: Vec<TxAt>,
    /// Offset of the block bytes in the payload.
    pub block_at: usize,
}

impl Decoded {
    /// The entry, given the payload it was decoded from.
    pub fn into_entry(self, mut payload: Vec<u8>) -> BlockEntry {
        let block = payload.split_off(self.block_at);
        BlockEntry {
            number: self.number,
            block,
            txs: self.txs.into_iter().map(|t| t.tx).collect(),
        }
    }
}

fn take<'a>(p: &'a [u8], pos: &mut usize, n: usize, what: &str) -> Result<&'a [u8], String> {
    let v = pos
        .checked_add(n)
        .and_then(|end| p.get(*pos..end))
        .ok_or_else(|| format!("payload ends inside {what}"))?;
    *pos += n;
    Ok(v)
}

fn u32_of(b: &[u8]) -> u32 {
    u32_le(b)
}

/// The status of a stored code.
pub(crate) fn status_of(code: u32) -> Result<Option<Status>, String> {
    if code == NO_STATUS {
        return Ok(None);
    }
    Status::from_code(code).map(Some).map_err(|e| e.to_string())
}

/// Decodes a payload; `Err(detail)` if it is malformed.
pub(crate) fn decode(p: &[u8]) -> Result<Decoded, String> {
    let mut pos = 0usize;
    let number = u64_le(take(p, &mut pos, 8, "the block number")?);
    let count = u32_of(take(p, &mut pos, 4, "the tx count")?) as usize;
    let mut txs = Vec::with_capacity(count.min(p.len() / 8));
    for _ in 0..count {
        let offset = pos as u32;
        let code = u32_of(take(p, &mut pos, 4, "a status")?);
        let len = u32_of(take(p, &mut pos, 4, "a tx id length")?) as usize;
        let status = status_of(code)?;
        let raw = take(p, &mut pos, len, "a tx id")?;
        let id = String::from_utf8(raw.to_vec()).map_err(|_| "tx id is not UTF-8".to_string())?;
        txs.push(TxAt {
            tx: LedgerTx { id: TxId(id), status },
            offset,
        });
    }
    Ok(Decoded {
        number,
        txs,
        block_at: pos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_and_without_statuses() {
        let txs = vec![
            LedgerTx {
                id: TxId("a".into()),
                status: Some(Status::Committed),
            },
            LedgerTx {
                id: TxId(String::new()),
                status: None,
            },
            LedgerTx {
                id: TxId("é".into()),
                status: Some(Status::AbortedMvccConflict),
            },
        ];
        let payload = encode(7, b"block", &txs);
        let d = decode(&payload).unwrap();
        assert_eq!(d.number, 7);
        assert_eq!(d.txs[1].offset, 12 + 8 + 1);
        assert_eq!(
            d.into_entry(payload),
            BlockEntry {
                number: 7,
                block: b"block".to_vec(),
                txs
            }
        );
    }

    #[test]
    fn malformed_payloads_are_refused() {
        let payload = encode(
            1,
            b"",
            &[LedgerTx {
                id: TxId("abc".into()),
                status: None,
            }],
        );
        for cut in 0..payload.len() {
            assert!(decode(&payload[..cut]).is_err(), "cut {cut}");
        }
        let mut bad = payload.clone();
        bad[12] = 200; // unknown status code
        assert!(decode(&bad).is_err());
    }
}
