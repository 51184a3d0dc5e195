//! The client side of `Router.SubmitMany`: a batch of a run's txs is written as one
//! `SubmitBatch` straight from the [`Load`] (each request's envelope copied once, into
//! the message; no per-tx allocation), and a `SubmitAnswers` is read as the ids and
//! codes of its answers, in one scan.
//!
//! Also the per-link set of txs sent and not yet answered ([`Pending`]): one bit per tx
//! of the run.

use std::ops::Range;
use std::sync::Arc;

use prost::bytes::{Buf as _, BufMut};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use super::load::{Field, Load, next_field};

/// Most txs in one `SubmitBatch` (the wire allows 16 Ki).
pub(super) const MAX_BATCH_TXS: usize = 1024;
/// Most envelope bytes in one `SubmitBatch` (the wire allows 4 MiB; one larger envelope
/// still goes alone).
pub(super) const MAX_BATCH_BYTES: usize = 1 << 20;

/// The path of `Router.SubmitMany`.
pub(super) const SUBMIT_MANY: &str = "/fabrx.v1.Router/SubmitMany";

/// Txs of a load to send in one `SubmitBatch`, each with its index as the request id.
pub(super) struct Batch {
    pub(super) load: Arc<Load>,
    pub(super) txs: Vec<Range<usize>>,
}

impl Batch {
    /// Txs in the batch.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.txs.iter().map(ExactSizeIterator::len).sum()
    }

    /// Writes the batch as an encoded `SubmitBatch`.
    pub(super) fn write(&self, out: &mut impl BufMut) {
        for i in self.txs.iter().cloned().flatten() {
            let id = i as u64;
            let env = self.load.envelope_len(i);
            let len = 1 + varint_len(id) + 1 + varint_len(env as u64) + env;
            // requests = 1 (length-delimited): SubmitRequest { id = 1, envelope = 2 }.
            out.put_u8(0x0a);
            put_varint(out, len as u64);
            out.put_u8(0x08);
            put_varint(out, id);
            out.put_u8(0x12);
            put_varint(out, env as u64);
            self.load.write_envelope(i, out);
        }
    }
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(out: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Batches out, `SubmitAnswers` in.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ManyCodec;

impl Codec for ManyCodec {
    type Encode = Batch;
    type Decode = Answers;
    type Encoder = BatchEncoder;
    type Decoder = AnswersDecoder;

    fn encoder(&mut self) -> BatchEncoder {
        BatchEncoder
    }

    fn decoder(&mut self) -> AnswersDecoder {
        AnswersDecoder
    }
}

/// Writes a [`Batch`].
#[derive(Debug)]
pub(super) struct BatchEncoder;

impl Encoder for BatchEncoder {
    type Item = Batch;
    type Error = tonic::Status;

    fn encode(&mut self, item: Batch, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        item.write(dst);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(64 << 10, 32 << 10)
    }
}

/// The answers of one `SubmitAnswers` message: each request's id and code, in the
/// message's order (an answer's reason is not kept).
pub(super) type Answers = Vec<(u64, u32)>;

/// Reads `SubmitAnswers` as [`Answers`], scanning the message once: no answer is
/// allocated. A message is at most `SUBMIT_ANSWERS`' size (the channel's limit), and
/// each answer takes 2 bytes of it at least, so what is kept is bounded by it.
#[derive(Debug)]
pub(super) struct AnswersDecoder;

impl Decoder for AnswersDecoder {
    type Item = Answers;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Answers>, tonic::Status> {
        let len = buf.remaining();
        let chunk = buf.chunk();
        if chunk.len() != len {
            return Err(tonic::Status::internal(
                "an answer message's buffer is not contiguous",
            ));
        }
        let answers =
            answers(chunk).ok_or_else(|| tonic::Status::invalid_argument("SubmitAnswers does not decode"))?;
        buf.advance(len);
        Ok(Some(answers))
    }
}

/// The id and code of each answer of an encoded `SubmitAnswers`; `None`: not one.
pub(super) fn answers(mut raw: &[u8]) -> Option<Answers> {
    let mut out = Vec::with_capacity(raw.len() / 4);
    while let Some((field, value)) = next_field(&mut raw)? {
        // answers = 1: SubmitResponse { id = 1, code = 2, reason = 3 }.
        let (1, Field::Bytes(mut answer)) = (field, value) else {
            continue;
        };
        let (mut id, mut code) = (0u64, 0u32);
        while let Some((f, v)) = next_field(&mut answer)? {
            match (f, v) {
                (1, Field::Varint(v)) => id = v,
                (2, Field::Varint(v)) => code = v as u32,
                _ => {}
            }
        }
        out.push((id, code));
    }
    Some(out)
}

/// The txs a link sent and has no answer for: one bit per tx of the run.
pub(super) struct Pending {
    words: Vec<u64>,
    count: usize,
}

impl Pending {
    /// None pending, of `txs` txs.
    pub(super) fn new(txs: usize) -> Pending {
        Pending {
            words: vec![0; txs.div_ceil(64)],
            count: 0,
        }
    }

    /// Marks tx `i` (of the run) pending.
    pub(super) fn insert(&mut self, i: usize) {
        if let Some(w) = self.words.get_mut(i / 64) {
            let bit = 1u64 << (i % 64);
            if *w & bit == 0 {
                *w |= bit;
                self.count += 1;
            }
        }
    }

    /// Whether tx `i` was pending; it is not any more.
    pub(super) fn take(&mut self, i: usize) -> bool {
        let Some(w) = self.words.get_mut(i / 64) else {
            return false;
        };
        let bit = 1u64 << (i % 64);
        let was = *w & bit != 0;
        *w &= !bit;
        if was {
            self.count -= 1;
        }
        was
    }

    /// Txs pending.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.count
    }

    /// Every pending tx, in index order.
    pub(super) fn indexes(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.count);
        for (k, &w) in self.words.iter().enumerate() {
            let mut bits = w;
            while bits != 0 {
                out.push(k * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
        out
    }

    /// Takes every pending tx, in index order.
    pub(super) fn drain(&mut self) -> Vec<usize> {
        let out = self.indexes();
        self.words.iter_mut().for_each(|w| *w = 0);
        self.count = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use wire::pb;

    #[test]
    fn answers_are_read_as_ids_and_codes() {
        let msg = pb::SubmitAnswers {
            answers: vec![
                pb::SubmitResponse {
                    id: 300,
                    code: 0,
                    reason: String::new(),
                },
                pb::SubmitResponse {
                    id: 0,
                    code: 6,
                    reason: "held already".into(),
                },
                pb::SubmitResponse {
                    id: u64::MAX,
                    code: 8,
                    reason: String::new(),
                },
            ],
        };
        let raw = msg.encode_to_vec();
        assert_eq!(answers(&raw), Some(vec![(300, 0), (0, 6), (u64::MAX, 8)]));
        assert_eq!(answers(&[]), Some(vec![]));
        assert_eq!(answers(&raw[..raw.len() - 1]), None, "truncated");
    }

    #[test]
    fn a_batch_is_the_submit_batch_of_its_txs() {
        let load = Arc::new(Load::from_envelopes(
            (0..300).map(|i| (format!("t{i}"), vec![i as u8; i % 200])),
        ));
        let batch = Batch {
            load: load.clone(),
            txs: vec![0..2, 127..129, 250..300],
        };
        let mut out = Vec::new();
        batch.write(&mut out);
        let decoded = pb::SubmitBatch::decode(out.as_slice()).unwrap();
        let want: Vec<pb::SubmitRequest> = batch
            .txs
            .iter()
            .cloned()
            .flatten()
            .map(|i| pb::SubmitRequest {
                id: i as u64,
                envelope: load.envelope(i),
            })
            .collect();
        assert_eq!(decoded.requests, want);
        assert_eq!(batch.len(), 54);
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
    }

    #[test]
    fn pending_txs_are_taken_once() {
        let mut p = Pending::new(200);
        for i in [3, 64, 199, 3] {
            p.insert(i);
        }
        assert_eq!(p.len(), 3);
        assert!(p.take(64));
        assert!(!p.take(64), "answered twice");
        assert!(!p.take(5), "never sent");
        assert!(!p.take(10_000), "not a tx of the run");
        assert_eq!(p.indexes(), vec![3, 199]);
        assert_eq!(p.drain(), vec![3, 199]);
        assert_eq!(p.len(), 0);
    }
}
