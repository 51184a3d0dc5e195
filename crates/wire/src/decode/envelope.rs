//! An `Envelope` decoded without copying: its fields borrowed from the encoding, so
//! the payload is decoded in place instead of first being copied into a
//! `pb::Envelope`.
//!
//! [`decode_envelope`] accepts and refuses exactly what `pb::Envelope::decode` does,
//! with the same field values (prost's rules, as in [`super::direct`]: wire types,
//! unknown fields skipped, the last value of a singular field, an identity given twice
//! merged, the last oneof member, UTF-8 strings, the recursion limit; the payload type
//! is an `int32` varint truncated as prost truncates it). [`check_envelope_ref`] is
//! [`super::check_decoded_envelope`] over it. Tests compare both with the prost path
//! (`crates/wire/tests/direct_decode.rs`).

use super::direct::{Malformed, Result, bytes_ref, skip, string_ref};
use crate::pb;
use prost::encoding::{WireType, check_wire_type, decode_key, decode_varint, encode_key, encode_varint};
use types::Status;
use types::check::{CheckedPayload, EnvelopeParts, PayloadKind, check_envelope};

/// The creator of an [`IdentityRef`] (the `creator` oneof).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreatorRef<'a> {
    /// `certificate`.
    Certificate(&'a [u8]),
    /// `certificate_id`.
    CertificateId(&'a str),
}

/// An `Identity`, borrowed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdentityRef<'a> {
    /// `msp_id`.
    pub msp_id: &'a str,
    /// The `creator` oneof, if set.
    pub creator: Option<CreatorRef<'a>>,
}

/// An `Envelope`, borrowed from its encoding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnvelopeRef<'a> {
    /// `payload`.
    pub payload: &'a [u8],
    /// `signature`.
    pub signature: &'a [u8],
    /// `identity`, if present.
    pub identity: Option<IdentityRef<'a>>,
    /// `tx_id`.
    pub tx_id: &'a str,
    /// `nonce`.
    pub nonce: &'a [u8],
    /// `payload_type` as prost holds it (an `i32`, any value).
    pub payload_type: i32,
}

impl EnvelopeRef<'_> {
    /// The owned message (what `pb::Envelope::decode` gives for the same bytes).
    pub fn to_pb(&self) -> pb::Envelope {
        pb::Envelope {
            payload: self.payload.to_vec(),
            signature: self.signature.to_vec(),
            identity: self.identity.map(|i| pb::Identity {
                msp_id: i.msp_id.to_string(),
                creator: i.creator.map(|c| match c {
                    CreatorRef::Certificate(b) => pb::identity::Creator::Certificate(b.to_vec()),
                    CreatorRef::CertificateId(s) => pb::identity::Creator::CertificateId(s.to_string()),
                }),
            }),
            tx_id: self.tx_id.to_string(),
            nonce: self.nonce.to_vec(),
            payload_type: self.payload_type,
        }
    }

    /// The creator's key when the envelope is in the self-certified MSP
    /// ([`super::self_certified_key`]).
    pub fn self_certified_key(&self) -> Option<&[u8]> {
        let id = self.identity.as_ref()?;
        if id.msp_id != super::SELF_CERTIFIED_MSP {
            return None;
        }
        Some(match id.creator {
            Some(CreatorRef::Certificate(c)) => c,
            _ => &[],
        })
    }
}

/// Decodes an encoded `fabrx.v1.Envelope`, borrowing its fields; `None` where
/// `pb::Envelope::decode` fails.
pub fn decode_envelope(mut buf: &[u8]) -> Option<EnvelopeRef<'_>> {
    let mut env = EnvelopeRef::default();
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        envelope_field(&mut env, tag, wire_type, &mut buf, super::direct::RECURSION_LIMIT).ok()?;
    }
    Some(env)
}

fn envelope_field<'a>(
    env: &mut EnvelopeRef<'a>,
    tag: u32,
    wire_type: WireType,
    buf: &mut &'a [u8],
    depth: u32,
) -> Result<()> {
    match tag {
        1 => env.payload = bytes_ref(wire_type, buf)?,
        2 => env.signature = bytes_ref(wire_type, buf)?,
        3 => {
            // A singular message given twice is merged into the first.
            check_wire_type(WireType::LengthDelimited, wire_type)?;
            if depth == 0 {
                return Err(Malformed);
            }
            let mut id = env.identity.unwrap_or_default();
            let mut inner = bytes_ref(wire_type, buf)?;
            while !inner.is_empty() {
                let (tag, wire_type) = decode_key(&mut inner)?;
                identity_field(&mut id, tag, wire_type, &mut inner, depth - 1)?;
            }
            env.identity = Some(id);
        }
        4 => env.tx_id = string_ref(wire_type, buf)?,
        5 => env.nonce = bytes_ref(wire_type, buf)?,
        6 => {
            check_wire_type(WireType::Varint, wire_type)?;
            // prost's int32: the varint truncated to 32 bits.
            env.payload_type = decode_varint(buf)? as i32;
        }
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

fn identity_field<'a>(
    id: &mut IdentityRef<'a>,
    tag: u32,
    wire_type: WireType,
    buf: &mut &'a [u8],
    depth: u32,
) -> Result<()> {
    match tag {
        1 => id.msp_id = string_ref(wire_type, buf)?,
        2 => id.creator = Some(CreatorRef::Certificate(bytes_ref(wire_type, buf)?)),
        3 => id.creator = Some(CreatorRef::CertificateId(string_ref(wire_type, buf)?)),
        _ => skip(wire_type, tag, buf, depth)?,
    }
    Ok(())
}

/// The identity as prost encodes it (the creator bytes the tx id rule hashes): the MSP
/// id unless empty, then the oneof member when set, even empty.
fn encode_identity(id: &IdentityRef<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    let put = |tag: u32, v: &[u8], out: &mut Vec<u8>| {
        encode_key(tag, WireType::LengthDelimited, out);
        encode_varint(v.len() as u64, out);
        out.extend_from_slice(v);
    };
    if !id.msp_id.is_empty() {
        put(1, id.msp_id.as_bytes(), &mut out);
    }
    match id.creator {
        Some(CreatorRef::Certificate(c)) => put(2, c, &mut out),
        Some(CreatorRef::CertificateId(s)) => put(3, s.as_bytes(), &mut out),
        None => {}
    }
    out
}

/// Structurally checks a borrowed envelope: [`super::check_decoded_envelope`] without
/// the owned message.
pub fn check_envelope_ref(
    env: &EnvelopeRef<'_>,
    dec: &super::ProstDecoder,
) -> std::result::Result<CheckedPayload, Status> {
    let creator = env.identity.as_ref().map(encode_identity).unwrap_or_default();
    let kind = match pb::PayloadType::try_from(env.payload_type) {
        Ok(pb::PayloadType::Tx) => PayloadKind::Tx,
        Ok(pb::PayloadType::Config) => PayloadKind::Config,
        _ => PayloadKind::Unsupported(env.payload_type),
    };
    let parts = EnvelopeParts {
        kind,
        tx_id: env.tx_id,
        nonce: env.nonce,
        creator: &creator,
        payload: env.payload,
        self_certified: env.self_certified_key().is_some(),
    };
    check_envelope(&parts, dec)
}
