//! A `Tx` payload decoded straight into [`types::Tx`], without the intermediate
//! [`crate::pb`] messages (a vector of each message type per tx, then the conversion).
//!
//! It accepts and refuses exactly what `pb::Tx::decode` (prost) followed by the
//! conversion `Tx::from(pb::Tx)` accepts and refuses, and gives the same tx: it uses
//! prost's own key and varint decoding and applies prost's rules for everything else:
//!
//! - a known field with another wire type than its own is an error; an unknown field is
//!   skipped (groups included, nested up to the recursion limit);
//! - a singular field given twice keeps its last value; a singular message field given
//!   twice is merged (an `Identity`'s fields, last value each); a oneof keeps the last
//!   member given;
//! - a string field must be UTF-8 (each occurrence);
//! - a nested message must end exactly at its length; a length past the end of the
//!   input is an error;
//! - nesting (messages and groups together) is limited to prost's recursion limit (100).
//!
//! Tests compare it with prost on generated, mutated and random inputs
//! (`crates/wire/tests/direct_decode.rs`).

use prost::bytes::Buf;
use prost::encoding::{WireType, check_wire_type, decode_key, decode_varint};
use types::{Endorsement, Read, ReadWrite, Tx, TxNamespace, Write};

/// prost's recursion limit (`prost::RECURSION_LIMIT`).
pub(super) const RECURSION_LIMIT: u32 = 100;

/// The input is not a well-formed `Tx` (what prost calls a `DecodeError`).
pub(super) struct Malformed;

impl From<prost::DecodeError> for Malformed {
    fn from(_: prost::DecodeError) -> Malformed {
        Malformed
    }
}

pub(super) type Result<T> = std::result::Result<T, Malformed>;

/// Decodes an encoded `fabrx.v1.Tx` into the domain type; `None` where prost's decode
/// fails.
pub fn decode_tx(mut buf: &[u8]) -> Option<Tx> {
    let mut tx = Tx::default();
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        tx_field(&mut tx, tag, wire_type, &mut buf, RECURSION_LIMIT).ok()?;
    }
    Some(tx)
}

/// A field's handler: `(value, tag, wire type, input, depth left)`.
type FieldFn<T> = fn(&mut T, u32, WireType, &mut &[u8], u32) -> Result<()>;

/// A length-delimited message merged into `value` (prost's `message::merge`): the wire
/// type, the recursion limit, then its fields, which must end exactly at its length.
fn message<T>(
    wire_type: WireType,
    buf: &mut &[u8],
    depth: u32,
    value: &mut T,
    field: FieldFn<T>,
) -> Result<()> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    if depth == 0 {
        return Err(Malformed);
    }
    let mut inner = delimited(buf)?;
    while !inner.is_empty() {
        let (tag, wire_type) = decode_key(&mut inner)?;
        field(value, tag, wire_type, &mut inner, depth - 1)?;
    }
    Ok(())
}

/// The next `len`-prefixed bytes of `buf` (the length a varint), consumed.
fn delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8]> {
    let len = decode_varint(buf)?;
    let len = usize::try_from(len).map_err(|_| Malformed)?;
    if len > buf.len() {
        return Err(Malformed);
    }
    let (bytes, rest) = buf.split_at(len);
    *buf = rest;
    Ok(bytes)
}

/// A `bytes` field, borrowed (prost's `bytes::merge` without the copy).
pub(super) fn bytes_ref<'a>(wire_type: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8]> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    delimited(buf)
}

/// A `string` field, borrowed: bytes that are UTF-8.
pub(super) fn string_ref<'a>(wire_type: WireType, buf: &mut &'a [u8]) -> Result<&'a str> {
    std::str::from_utf8(bytes_ref(wire_type, buf)?).map_err(|_| Malformed)
}

/// A `bytes` field (prost's `bytes::merge`).
fn bytes(wire_type: WireType, buf: &mut &[u8]) -> Result<Vec<u8>> {
    Ok(bytes_ref(wire_type, buf)?.to_vec())
}

/// A `string` field: bytes that are UTF-8.
fn string(wire_type: WireType, buf: &mut &[u8]) -> Result<String> {
    Ok(string_ref(wire_type, buf)?.to_owned())
}

/// A `uint64` field (prost's `uint64::merge`).
fn uint64(wire_type: WireType, buf: &mut &[u8]) -> Result<u64> {
    check_wire_type(WireType::Varint, wire_type)?;
    Ok(decode_varint(buf)?)
}

/// An unknown field skipped (prost's `skip_field`, with the same recursion count).
pub(super) fn skip(wire_type: WireType, tag: u32, buf: &mut &[u8], depth: u32) -> Result<()> {
    if depth == 0 {
        return Err(Malformed);
    }
    let len = match wire_type {
        WireType::Varint => {
            decode_varint(buf)?;
            0
        }
        WireType::ThirtyTwoBit => 4,
        WireType::SixtyFourBit => 8,
        WireType::LengthDelimited => decode_varint(buf)?,
        WireType::StartGroup => loop {
            let (inner_tag, inner_wire_type) = decode_key(buf)?;
            match inner_wire_type {
                WireType::EndGroup if inner_tag == tag => break 0,
                WireType::EndGroup => return Err(Malformed),
                _ => skip(inner_wire_type, inner_tag, buf, depth - 1)?,
            }
        },
        WireType::EndGroup => return Err(Malformed),
    };
    let len = usize::try_from(len).map_err(|_| Malformed)?;
    if len > buf.remaining() {
        return Err(Malformed);
    }
    buf.advance(len);
    Ok(())
}

/// Pushes `item`, growing a full vector by its length (at least 1) instead of to at
/// least 4 elements as `Vec::push` does: a decoded tx lives until it is committed and
/// most of its vectors hold one or two elements, so the spare room would be most of
/// their memory. Growth stays geometric (amortized constant per push).
fn push_compact<T>(v: &mut Vec<T>, item: T) {
    if v.len() == v.capacity() {
        v.reserve_exact(v.len().max(1));
    }
    v.push(item);
}

fn tx_field(tx: &mut Tx, tag: u32, wire_type: WireType, buf: &mut &[u8], depth: u32) -> Result<()> {
    match tag {
        1 => {
            let mut ns = TxNamespace::default();
            message(wire_type, buf, depth, &mut ns, namespace_field)?;
            push_compact(&mut tx.namespaces, ns);
        }
        2 => {
            let mut set = Vec::new();
            message(wire_type, buf, depth, &mut set, endorsements_field)?;
            push_compact(&mut tx.endorsements, set);
        }
        3 => push_compact(&mut tx.metadata, bytes(wire_type, buf)?),
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

fn namespace_field(
    ns: &mut TxNamespace,
    tag: u32,
    wire_type: WireType,
    buf: &mut &[u8],
    depth: u32,
) -> Result<()> {
    match tag {
        1 => ns.ns_id = string(wire_type, buf)?,
        2 => ns.ns_version = uint64(wire_type, buf)?,
        3 => {
            let mut r = Read {
                key: Vec::new(),
                version: None,
            };
            message(wire_type, buf, depth, &mut r, read_field)?;
            push_compact(&mut ns.reads_only, r);
        }
        4 => {
            let mut r = ReadWrite {
                key: Vec::new(),
                version: None,
                value: Vec::new(),
            };
            message(wire_type, buf, depth, &mut r, read_write_field)?;
            push_compact(&mut ns.read_writes, r);
        }
        5 => {
            let mut w = Write {
                key: Vec::new(),
                value: Vec::new(),
            };
            message(wire_type, buf, depth, &mut w, write_field)?;
            push_compact(&mut ns.blind_writes, w);
        }
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

fn read_field(r: &mut Read, tag: u32, wire_type: WireType, buf: &mut &[u8], depth: u32) -> Result<()> {
    match tag {
        1 => r.key = bytes(wire_type, buf)?,
        2 => r.version = Some(uint64(wire_type, buf)?),
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

fn read_write_field(
    r: &mut ReadWrite,
    tag: u32,
    wire_type: WireType,
    buf: &mut &[u8],
    depth: u32,
) -> Result<()> {
    match tag {
        1 => r.key = bytes(wire_type, buf)?,
        2 => r.version = Some(uint64(wire_type, buf)?),
        3 => r.value = bytes(wire_type, buf)?,
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

fn write_field(w: &mut Write, tag: u32, wire_type: WireType, buf: &mut &[u8], depth: u32) -> Result<()> {
    match tag {
        1 => w.key = bytes(wire_type, buf)?,
        2 => w.value = bytes(wire_type, buf)?,
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

fn endorsements_field(
    set: &mut Vec<Endorsement>,
    tag: u32,
    wire_type: WireType,
    buf: &mut &[u8],
    depth: u32,
) -> Result<()> {
    match tag {
        1 => {
            let mut e = Endorsement::default();
            message(wire_type, buf, depth, &mut e, endorsement_field)?;
            push_compact(set, e);
        }
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

/// `EndorsementWithIdentity`: an absent identity and an empty one both give an empty
/// MSP id and identity (as the conversion does); a repeated identity is merged.
fn endorsement_field(
    e: &mut Endorsement,
    tag: u32,
    wire_type: WireType,
    buf: &mut &[u8],
    depth: u32,
) -> Result<()> {
    match tag {
        1 => e.signature = bytes(wire_type, buf)?,
        2 => message(wire_type, buf, depth, e, identity_field)?,
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

/// `Identity { msp_id, oneof creator { certificate, certificate_id } }` into an
/// endorsement's MSP id and identity bytes (the last creator member given).
fn identity_field(
    e: &mut Endorsement,
    tag: u32,
    wire_type: WireType,
    buf: &mut &[u8],
    depth: u32,
) -> Result<()> {
    match tag {
        1 => e.msp_id = string(wire_type, buf)?,
        2 => e.identity = bytes(wire_type, buf)?,
        3 => e.identity = string(wire_type, buf)?.into_bytes(),
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;
    use prost::Message;

    fn write(i: u8) -> pb::Write {
        pb::Write {
            key: vec![i],
            value: vec![i; 3],
        }
    }

    #[test]
    fn decoded_vectors_grow_by_their_length() {
        for n in 1..=9u8 {
            let tx = pb::Tx {
                namespaces: vec![pb::TxNamespace {
                    ns_id: "token".into(),
                    blind_writes: (0..n).map(write).collect(),
                    ..Default::default()
                }],
                endorsements: vec![pb::Endorsements {
                    endorsements_with_identity: vec![pb::EndorsementWithIdentity {
                        endorsement: vec![9; 64],
                        identity: None,
                    }],
                }],
                metadata: vec![],
            };
            let decoded = decode_tx(&tx.encode_to_vec()).unwrap();
            assert_eq!(decoded, Tx::from(tx.clone()), "{n} writes");
            assert_eq!(decoded.namespaces.capacity(), 1);
            assert_eq!(decoded.endorsements.capacity(), 1);
            assert_eq!(decoded.endorsements[0].capacity(), 1);
            let writes = &decoded.namespaces[0].blind_writes;
            // 1, 2, 4, 8, 16: the next power of two.
            assert_eq!(
                writes.capacity(),
                usize::from(n).next_power_of_two(),
                "{n} writes"
            );
        }
    }
}
