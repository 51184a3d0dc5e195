//! A request's content: the bytes its shard and its dedup key are computed over
//! (ADR 0015). For a fabrx envelope that is the envelope without its signature field
//! (field 2, `Envelope.signature`): a client that signs a request again (an ECDSA
//! signature differs each time), or anyone who swaps the signature, changes neither the
//! request's shard nor its identity for dedup, as Arma maps a request by the bytes its
//! client signs. Bytes that are not a well-formed top-level protobuf message with at
//! most [`MAX_SKIPPED`] signature fields are their own content. Scanning the top-level
//! fields allocates nothing.

/// The protobuf field number of `Envelope.signature`.
const SIGNATURE_FIELD: u64 = 2;

/// Signature fields skipped at most; a request with more is its own content.
pub const MAX_SKIPPED: usize = 2;

/// The pieces of a request's content, in order (at most `MAX_SKIPPED + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pieces<'a> {
    pieces: [&'a [u8]; MAX_SKIPPED + 1],
    len: usize,
}

impl<'a> Pieces<'a> {
    /// The pieces.
    pub fn as_slice(&self) -> &[&'a [u8]] {
        &self.pieces[..self.len]
    }

    fn whole(request: &'a [u8]) -> Pieces<'a> {
        Pieces {
            pieces: [request, &[], &[]],
            len: 1,
        }
    }
}

/// Reads a varint at `at`; returns it and the position after it.
fn varint(bytes: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(at)?;
        at = at.checked_add(1)?;
        value |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some((value, at));
        }
    }
    None
}

/// The end of the field whose key ends at `at`, with wire type `wire`.
fn field_end(bytes: &[u8], wire: u64, at: usize) -> Option<usize> {
    let end = match wire {
        0 => varint(bytes, at)?.1,
        1 => at.checked_add(8)?,
        2 => {
            let (len, after) = varint(bytes, at)?;
            after.checked_add(usize::try_from(len).ok()?)?
        }
        5 => at.checked_add(4)?,
        _ => return None,
    };
    (end <= bytes.len()).then_some(end)
}

/// Whether the top-level fields of `bytes`, walked as [`pieces`] walks them, include
/// field `number` with wire type `wire` before anything malformed (false for bytes that
/// are not a well-formed protobuf message up to it).
pub(crate) fn has_field(bytes: &[u8], number: u64, wire: u64) -> bool {
    let mut at = 0;
    while at < bytes.len() {
        let Some((key, after_key)) = varint(bytes, at) else {
            return false;
        };
        let (field, w) = (key >> 3, key & 7);
        if field == 0 {
            return false;
        }
        if field == number && w == wire {
            return true;
        }
        let Some(end) = field_end(bytes, w, after_key) else {
            return false;
        };
        at = end;
    }
    false
}

/// The content of `request` (see the module doc).
pub fn pieces(request: &[u8]) -> Pieces<'_> {
    let mut out = Pieces {
        pieces: [&[], &[], &[]],
        len: 0,
    };
    let mut start = 0;
    let mut at = 0;
    while at < request.len() {
        let Some((key, after_key)) = varint(request, at) else {
            return Pieces::whole(request);
        };
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Pieces::whole(request);
        }
        let Some(end) = field_end(request, wire, after_key) else {
            return Pieces::whole(request);
        };
        if field == SIGNATURE_FIELD && wire == 2 {
            if out.len >= MAX_SKIPPED {
                return Pieces::whole(request);
            }
            out.pieces[out.len] = &request[start..at];
            out.len += 1;
            start = end;
        }
        at = end;
    }
    out.pieces[out.len] = &request[start..];
    out.len += 1;
    out
}

/// The shard of `request` among `shards`: `types::digest::shard_of` over its content.
pub fn shard_of(request: &[u8], shards: u32) -> types::Result<types::ShardId> {
    types::digest::shard_of_pieces(pieces(request).as_slice(), shards)
}

/// A request's dedup key and its shard among `shards`, from one scan of its content
/// (what a batcher checks of every request it admits or verifies).
pub fn keys(request: &[u8], shards: u32) -> (crate::RequestDigest, types::Result<types::ShardId>) {
    let content = pieces(request);
    (
        crate::RequestDigest::of_content(&content),
        types::digest::shard_of_pieces(content.as_slice(), shards),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prost::Message;
    use wire::pb;

    fn envelope(signature: Vec<u8>, tx: &str) -> Vec<u8> {
        pb::Envelope {
            payload: b"the tx".to_vec(),
            signature,
            identity: Some(pb::Identity {
                msp_id: "org1".into(),
                creator: Some(pb::identity::Creator::CertificateId("alice".into())),
            }),
            tx_id: tx.into(),
            nonce: vec![9; 8],
            payload_type: pb::PayloadType::Tx as i32,
        }
        .encode_to_vec()
    }

    fn joined(p: Pieces<'_>) -> Vec<u8> {
        p.as_slice().concat()
    }

    #[test]
    fn the_signature_is_not_content_and_everything_else_is() {
        let a = envelope(vec![1; 64], "tx-1");
        let b = envelope(vec![2; 70], "tx-1");
        let unsigned = envelope(vec![], "tx-1");
        let other = envelope(vec![1; 64], "tx-2");
        assert_eq!(joined(pieces(&a)), unsigned);
        assert_eq!(joined(pieces(&a)), joined(pieces(&b)));
        assert_ne!(joined(pieces(&a)), joined(pieces(&other)));
        for shards in 1..8 {
            assert_eq!(shard_of(&a, shards).unwrap(), shard_of(&b, shards).unwrap());
        }
        assert_eq!(crate::RequestDigest::of(&a), crate::RequestDigest::of(&b));
        assert_ne!(crate::RequestDigest::of(&a), crate::RequestDigest::of(&other));
    }

    #[test]
    fn bytes_that_do_not_parse_are_their_own_content() {
        for opaque in [&b"req-7-3"[..], b"", &[0xff; 12], &[0x00, 0x01], &[0x12, 0x05, 1]] {
            assert_eq!(joined(pieces(opaque)), opaque.to_vec(), "{opaque:?}");
            assert_eq!(
                shard_of(opaque, 5).unwrap(),
                types::digest::shard_of(opaque, 5).unwrap()
            );
        }
        // More signature fields than it skips: its own content.
        let many = [0x12, 0x01, 7, 0x12, 0x01, 8, 0x12, 0x01, 9];
        assert_eq!(joined(pieces(&many)), many.to_vec());
        // Two are skipped.
        let two = [0x0a, 0x01, 5, 0x12, 0x01, 7, 0x12, 0x01, 8, 0x22, 0x01, b'x'];
        assert_eq!(joined(pieces(&two)), vec![0x0a, 0x01, 5, 0x22, 0x01, b'x']);
    }
}
