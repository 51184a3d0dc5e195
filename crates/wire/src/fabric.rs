//! Fabric's messages and its ordering API (`proto/fabric/`, docs/fabric.md): `common`
//! (envelopes, blocks, config), `orderer` (`AtomicBroadcast`: `Broadcast`, `Deliver`).
//!
//! A Fabric envelope arrives as a [`RawEnvelope`]: the bytes the client sent, kept whole,
//! so that a router forwards exactly them and a block's data hash is the one Fabric's
//! rule gives over what the client signed and sent. [`EnvelopeParts`] decodes its two
//! fields without copying them.

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};
use prost::{DecodeError, Message};

/// Fabric's `common` package (and the `msp` messages fabrx needs).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod common {
    tonic::include_proto!("common");
}

/// Fabric's `orderer` package: `AtomicBroadcast`, `SeekInfo`, the assembler's block
/// metadata.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod orderer {
    tonic::include_proto!("orderer");
}

/// A `common.Envelope` as the bytes it was sent in. Decoding keeps every byte (no field
/// is parsed: [`EnvelopeParts::decode`] does that); encoding writes them back unchanged.
/// Nested in another message (`ConfigEnvelope.last_update`) it keeps its `payload` and
/// `signature` fields and drops the others.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RawEnvelope {
    /// The encoded envelope.
    pub bytes: Bytes,
}

impl std::fmt::Debug for RawEnvelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawEnvelope({} bytes)", self.bytes.len())
    }
}

impl RawEnvelope {
    /// The envelope of `payload` signed with `signature` (fields 1 and 2, in order).
    pub fn from_parts(payload: &[u8], signature: &[u8]) -> RawEnvelope {
        let parts = EnvelopeParts {
            payload: Bytes::copy_from_slice(payload),
            signature: Bytes::copy_from_slice(signature),
        };
        RawEnvelope {
            bytes: Bytes::from(parts.encode_to_vec()),
        }
    }

    /// Its two fields.
    pub fn parts(&self) -> Result<EnvelopeParts, DecodeError> {
        EnvelopeParts::decode(self.bytes.clone())
    }
}

impl Message for RawEnvelope {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.bytes);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Only reached when the envelope is nested in another message.
        if (tag == 1 || tag == 2) && wire_type == WireType::LengthDelimited {
            let mut value = Vec::new();
            prost::encoding::bytes::merge(wire_type, &mut value, buf, ctx)?;
            let mut out = Vec::with_capacity(self.bytes.len() + value.len() + 11);
            out.extend_from_slice(&self.bytes);
            prost::encoding::bytes::encode(tag, &value, &mut out);
            self.bytes = Bytes::from(out);
            Ok(())
        } else {
            prost::encoding::skip_field(wire_type, tag, buf, ctx)
        }
    }

    fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    fn clear(&mut self) {
        self.bytes = Bytes::new();
    }

    fn merge(&mut self, mut buf: impl Buf) -> Result<(), DecodeError>
    where
        Self: Sized,
    {
        // The whole message, as sent (the codec has already bounded its size).
        let rest = buf.remaining();
        let more = buf.copy_to_bytes(rest);
        if self.bytes.is_empty() {
            self.bytes = more;
        } else {
            let mut out = Vec::with_capacity(self.bytes.len() + more.len());
            out.extend_from_slice(&self.bytes);
            out.extend_from_slice(&more);
            self.bytes = Bytes::from(out);
        }
        Ok(())
    }
}

/// The fields of a `common.Envelope`.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct EnvelopeParts {
    /// A serialized `common.Payload`.
    #[prost(bytes = "bytes", tag = "1")]
    pub payload: Bytes,
    /// The creator's signature over `payload`.
    #[prost(bytes = "bytes", tag = "2")]
    pub signature: Bytes,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_raw_envelope_keeps_the_bytes_it_was_sent_in() {
        // Signature before payload and an unknown field: not what prost would write.
        let mut sent = Vec::new();
        prost::encoding::bytes::encode(2, &b"sig".to_vec(), &mut sent);
        prost::encoding::bytes::encode(1, &b"payload".to_vec(), &mut sent);
        prost::encoding::uint64::encode(9, &7, &mut sent);
        let raw = RawEnvelope::decode(sent.as_slice()).unwrap();
        assert_eq!(raw.bytes.as_ref(), sent.as_slice());
        assert_eq!(raw.encode_to_vec(), sent);
        let parts = raw.parts().unwrap();
        assert_eq!(parts.payload.as_ref(), b"payload");
        assert_eq!(parts.signature.as_ref(), b"sig");
    }

    #[test]
    fn a_nested_raw_envelope_keeps_its_two_fields() {
        let env = RawEnvelope::from_parts(b"p", b"s");
        let cfg = common::ConfigEnvelope {
            config: None,
            last_update: Some(env.clone()),
        };
        let back = common::ConfigEnvelope::decode(cfg.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back.last_update, Some(env));
    }
}
