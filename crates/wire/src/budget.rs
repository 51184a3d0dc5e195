//! What a message will cost once decoded, computed from its bytes before decoding.
//!
//! A protobuf message of many tiny elements decodes into far more memory than it occupies
//! on the wire: an empty `Read` is 2 bytes on the wire and a 40-byte struct (plus the
//! spare capacity of the vector holding it) in memory, so a 64 MiB message of them once
//! became 5.7 GB. [`scan`] walks the encoded bytes with a small schema of the message
//! (which fields are nested messages), without allocating, and returns an upper bound of
//! the decoded size and the number of elements; [`check`] refuses a message over its
//! [`Budget`] before a single element is allocated. The codec of every fabrx gRPC service
//! ([`crate::codec::BoundedCodec`]) runs it on each incoming message whose type has a
//! schema here.
//!
//! The bound follows how prost allocates: a repeated field of `c` elements is a vector
//! whose capacity is at least 4 and at most the next power of two of `c`, and growing it
//! briefly holds the old buffer too (1.5× the capacity); a bytes or string field takes its
//! length (at least 8 bytes); a singular nested message lives inside its parent. Fields
//! the schema does not know are skipped by the decoder too, and cost nothing.

use crate::pb;
use std::mem::size_of;

/// How a field of a message is decoded.
#[derive(Debug)]
pub enum Kind {
    /// A singular nested message (held inline in its parent's struct).
    Message(&'static Schema),
    /// A repeated nested message (a vector of structs).
    Repeated(&'static Schema),
    /// A singular bytes or string field.
    Bytes,
    /// A repeated bytes or string field (a vector of vectors).
    RepeatedBytes,
    /// A packed repeated scalar of `elem`-byte elements.
    Packed {
        /// Size of one decoded element.
        elem: usize,
    },
}

/// One field of interest of a message.
#[derive(Debug)]
pub struct Field {
    /// The field number.
    pub number: u32,
    /// How it decodes.
    pub kind: Kind,
}

/// The shape of a message type, as far as memory is concerned.
#[derive(Debug)]
pub struct Schema {
    /// The message name, for error messages.
    pub name: &'static str,
    /// Size of the decoded struct.
    pub base: usize,
    /// Its length-delimited fields (all others are scalars and cost nothing extra).
    pub fields: &'static [Field],
}

/// The most a single decoded message may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Upper bound of the decoded size, in bytes.
    pub max_decoded_bytes: usize,
    /// Most nested messages and repeated bytes elements, at every depth together.
    pub max_items: usize,
}

/// The decoded cost of a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Upper bound of the decoded size, in bytes.
    pub bytes: usize,
    /// Nested messages and repeated bytes elements.
    pub items: usize,
}

/// Why a message was refused before decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// The bytes are not a well-formed protobuf encoding.
    #[error("{message} does not decode: malformed protobuf at byte {offset}")]
    Malformed {
        /// The message type.
        message: &'static str,
        /// Where the walk stopped.
        offset: usize,
    },
    /// The decoded message would exceed its budget.
    #[error(
        "{message}: decoding would take at least {bytes} bytes in {items} elements; \
         the limit is {max_bytes} bytes and {max_items} elements"
    )]
    OverBudget {
        /// The message type.
        message: &'static str,
        /// Decoded bytes counted when the limit was crossed.
        bytes: usize,
        /// Elements counted when the limit was crossed.
        items: usize,
        /// The byte limit.
        max_bytes: usize,
        /// The element limit.
        max_items: usize,
    },
}

/// Refuses `buf` (an encoded `schema` message) when decoding it would exceed `budget`.
pub fn check(buf: &[u8], schema: &'static Schema, budget: Budget) -> Result<Cost, BudgetError> {
    let mut walk = Walk {
        top: schema.name,
        budget,
        cost: Cost {
            bytes: schema.base,
            items: 0,
        },
    };
    walk.message(buf, 0, schema)?;
    Ok(walk.cost)
}

/// The decoded cost of `buf` without a limit (for tests and tools).
pub fn scan(buf: &[u8], schema: &'static Schema) -> Result<Cost, BudgetError> {
    check(
        buf,
        schema,
        Budget {
            max_decoded_bytes: usize::MAX,
            max_items: usize::MAX,
        },
    )
}

struct Walk {
    top: &'static str,
    budget: Budget,
    cost: Cost,
}

impl Walk {
    fn malformed(&self, offset: usize) -> BudgetError {
        BudgetError::Malformed {
            message: self.top,
            offset,
        }
    }

    fn charge(&mut self, bytes: usize, items: usize) -> Result<(), BudgetError> {
        self.cost.bytes = self.cost.bytes.saturating_add(bytes);
        self.cost.items = self.cost.items.saturating_add(items);
        if self.cost.bytes > self.budget.max_decoded_bytes || self.cost.items > self.budget.max_items {
            return Err(BudgetError::OverBudget {
                message: self.top,
                bytes: self.cost.bytes,
                items: self.cost.items,
                max_bytes: self.budget.max_decoded_bytes,
                max_items: self.budget.max_items,
            });
        }
        Ok(())
    }

    /// Walks the fields of one message occupying `buf`, which starts at `base` of the
    /// whole buffer (for error offsets).
    fn message(&mut self, buf: &[u8], base: usize, schema: &'static Schema) -> Result<(), BudgetError> {
        // Occurrences of each schema field in this message instance (schemas are small).
        let mut counts = [0usize; MAX_FIELDS];
        let mut pos = 0usize;
        while pos < buf.len() {
            let key = varint(buf, &mut pos).ok_or_else(|| self.malformed(base + pos))?;
            let number = u32::try_from(key >> 3).map_err(|_| self.malformed(base + pos))?;
            match key & 7 {
                0 => {
                    varint(buf, &mut pos).ok_or_else(|| self.malformed(base + pos))?;
                }
                1 => pos = skip(buf, pos, 8).ok_or_else(|| self.malformed(base + pos))?,
                5 => pos = skip(buf, pos, 4).ok_or_else(|| self.malformed(base + pos))?,
                2 => {
                    let len = varint(buf, &mut pos).ok_or_else(|| self.malformed(base + pos))?;
                    let len = usize::try_from(len).map_err(|_| self.malformed(base + pos))?;
                    let start = pos;
                    pos = skip(buf, pos, len).ok_or_else(|| self.malformed(base + start))?;
                    let field = schema.fields.iter().enumerate().find(|(_, f)| f.number == number);
                    if let Some((i, f)) = field {
                        if let Some(c) = counts.get_mut(i) {
                            *c = c.saturating_add(1);
                        }
                        self.field(&buf[start..pos], base + start, &f.kind)?;
                    }
                }
                // Groups (3, 4) and undefined wire types.
                _ => return Err(self.malformed(base + pos)),
            }
        }
        for (f, &count) in schema.fields.iter().zip(counts.iter()) {
            match f.kind {
                Kind::Repeated(child) => self.charge(vec_bytes(count, child.base), 0)?,
                Kind::RepeatedBytes => self.charge(vec_bytes(count, size_of::<Vec<u8>>()), 0)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn field(&mut self, body: &[u8], at: usize, kind: &Kind) -> Result<(), BudgetError> {
        match kind {
            Kind::Message(child) | Kind::Repeated(child) => {
                self.charge(0, 1)?;
                self.message(body, at, child)
            }
            Kind::Bytes => self.charge(body.len().max(8), 0),
            Kind::RepeatedBytes => self.charge(body.len().max(8), 1),
            // At most one element per encoded byte.
            Kind::Packed { elem } => self.charge(vec_bytes(body.len(), *elem), 0),
        }
    }
}

/// Most fields a schema lists.
const MAX_FIELDS: usize = 8;

/// The most a vector of `count` elements of `elem` bytes holds while prost fills it:
/// its capacity (at least 4, at most the next power of two) plus the half-size buffer it
/// grew from.
fn vec_bytes(count: usize, elem: usize) -> usize {
    if count == 0 {
        return 0;
    }
    let cap = count.checked_next_power_of_two().unwrap_or(usize::MAX).max(4);
    cap.saturating_add(cap / 2).saturating_mul(elem)
}

/// Reads a varint at `*pos`, advancing it; `None` when truncated or longer than 10 bytes.
fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn skip(buf: &[u8], pos: usize, len: usize) -> Option<usize> {
    let end = pos.checked_add(len)?;
    (end <= buf.len()).then_some(end)
}

macro_rules! schema {
    ($name:ident, $ty:ty, [$($num:literal => $kind:expr),* $(,)?]) => {
        #[doc = concat!("The schema of `", stringify!($ty), "`.")]
        pub static $name: Schema = Schema {
            name: stringify!($ty),
            base: size_of::<$ty>(),
            fields: &[$(Field { number: $num, kind: $kind }),*],
        };
    };
}

use Kind::{Bytes, Message, Packed, Repeated, RepeatedBytes};

schema!(READ, pb::Read, [1 => Bytes]);
schema!(READ_WRITE, pb::ReadWrite, [1 => Bytes, 3 => Bytes]);
schema!(WRITE, pb::Write, [1 => Bytes, 2 => Bytes]);
schema!(IDENTITY, pb::Identity, [1 => Bytes, 2 => Bytes, 3 => Bytes]);
schema!(ENDORSEMENT, pb::EndorsementWithIdentity, [1 => Bytes, 2 => Message(&IDENTITY)]);
schema!(ENDORSEMENTS, pb::Endorsements, [1 => Repeated(&ENDORSEMENT)]);
schema!(TX_NAMESPACE, pb::TxNamespace, [
    1 => Bytes,
    3 => Repeated(&READ),
    4 => Repeated(&READ_WRITE),
    5 => Repeated(&WRITE),
]);
schema!(TX, pb::Tx, [1 => Repeated(&TX_NAMESPACE), 2 => Repeated(&ENDORSEMENTS), 3 => RepeatedBytes]);
schema!(VC_TX, pb::VcTx, [1 => Bytes, 4 => Message(&TX)]);
schema!(VC_BATCH, pb::VcBatch, [1 => Repeated(&VC_TX)]);
schema!(VERIFY_TX, pb::VerifyTx, [1 => Bytes, 2 => Message(&TX)]);
schema!(POLICY_UPDATE, pb::PolicyUpdate, [1 => Bytes, 2 => Bytes]);
schema!(VERIFY_BATCH, pb::VerifyBatch, [2 => Repeated(&VERIFY_TX)]);
schema!(VERIFY_STREAM_REQUEST, pb::VerifyStreamRequest, [
    1 => Message(&POLICY_UPDATE),
    2 => Message(&VERIFY_BATCH),
]);
schema!(VERIFY_RESULT, pb::VerifyResult, [2 => Packed { elem: size_of::<u32>() }]);
schema!(STATUS_QUERY, pb::StatusQuery, [1 => RepeatedBytes]);
schema!(SUBSCRIBE_REQUEST, pb::SubscribeRequest, [1 => RepeatedBytes]);
schema!(TX_STATUS, pb::TxStatus, [1 => Bytes]);
schema!(TX_STATUS_BATCH, pb::TxStatusBatch, [1 => Repeated(&TX_STATUS)]);
schema!(POLICY_LIST, pb::PolicyList, [1 => Repeated(&POLICY_UPDATE)]);
schema!(COORDINATOR_BLOCK, pb::CoordinatorBlock, [2 => Repeated(&VC_TX)]);
schema!(SUBMIT_REQUEST, pb::SubmitRequest, [2 => Bytes]);
schema!(FABRIC_ENVELOPE, crate::fabric::RawEnvelope, [1 => Bytes, 2 => Bytes]);
schema!(SUBMIT_RESPONSE, pb::SubmitResponse, [3 => Bytes]);
schema!(INTAKE_REQUEST, pb::IntakeRequest, [2 => Bytes]);
schema!(SUBMIT_BATCH, pb::SubmitBatch, [1 => Repeated(&SUBMIT_REQUEST)]);
schema!(SUBMIT_ANSWERS, pb::SubmitAnswers, [1 => Repeated(&SUBMIT_RESPONSE)]);
schema!(INTAKE_BATCH, pb::IntakeBatch, [1 => Repeated(&INTAKE_REQUEST)]);
schema!(INTAKE_RESPONSE, pb::IntakeResponse, []);
schema!(INTAKE_ANSWERS, pb::IntakeAnswers, [1 => Repeated(&INTAKE_RESPONSE)]);
schema!(BATCH, pb::Batch, [4 => RepeatedBytes, 6 => Bytes, 8 => Bytes, 9 => Bytes]);
schema!(BATCH_ATTESTATION_FRAGMENT, pb::BatchAttestationFragment, [4 => Bytes, 7 => Bytes]);
schema!(FORWARD_REQUEST, pb::ForwardRequest, [1 => Bytes]);
schema!(FETCH_REQUEST, pb::FetchRequest, [4 => Bytes]);
schema!(ROWS_QUERY, pb::RowsQuery, [1 => Bytes, 2 => RepeatedBytes]);
schema!(OWNED_QUERY, pb::OwnedQuery, [1 => Bytes, 2 => Bytes, 3 => Bytes]);
schema!(STATE_ROW, pb::StateRow, [1 => Bytes, 2 => Bytes]);
schema!(ROWS_RESULT, pb::RowsResult, [1 => Repeated(&STATE_ROW)]);
schema!(TOKEN_OUTPUT, pb::TokenOutput, [1 => Bytes, 2 => Bytes]);
schema!(TOKEN_REQUEST, pb::TokenRequest, [
    2 => Bytes,
    3 => Bytes,
    4 => RepeatedBytes,
    5 => Repeated(&TOKEN_OUTPUT),
    6 => Bytes,
]);
schema!(ENDORSE_REQUEST, pb::EndorseRequest, [1 => Message(&TOKEN_REQUEST)]);
schema!(ENDORSE_RESPONSE, pb::EndorseResponse, [1 => Bytes, 3 => Bytes, 5 => Bytes]);
