//! Protobuf encodings written straight from the domain types: the same bytes as
//! converting each value to its [`crate::pb`] message and encoding that, without the deep
//! copy the conversion makes of every key, value and signature.
//!
//! - [`vc_batch`]: a `VcBatch` (the sidecar encodes each block once this way for its
//!   store and each vcservice batch once for the wire);
//! - [`verify_batch_request`]: a `VerifyStreamRequest` carrying a `VerifyBatch` (the
//!   sigverifier client's batches);
//! - [`Encoded`]: a message encoded already, sent as its bytes by a gRPC client;
//! - [`TxBody`]: one tx's `Tx` message, encoded once (as part of its block's stored form,
//!   [`stored_block`]) and spliced as it is into the `VcBatch` ([`vc_batch_with_bodies`])
//!   and `VerifyStreamRequest` ([`verify_batch_request_with_bodies`]) that carry the tx, so
//!   a tx is walked and copied once instead of once per message.
//!
//! Proto3 rules as prost applies them: a scalar, string or bytes field at its default
//! is left out, an `optional` field is written when set (even 0), a set message field
//! (or oneof member) is written even when empty, every element of a repeated field is
//! written.

use prost::bytes::BufMut;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use std::sync::Arc;
use types::{Block, Endorsement, Read, ReadWrite, Tx, TxId, TxNamespace, VcTx, Write};

/// Bytes of a length-delimited field `tag` whose content is `len` bytes.
fn delimited_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn put_header(tag: u32, len: usize, buf: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

fn bytes_len(tag: u32, v: &[u8]) -> usize {
    if v.is_empty() {
        0
    } else {
        delimited_len(tag, v.len())
    }
}

fn put_bytes(tag: u32, v: &[u8], buf: &mut impl BufMut) {
    if !v.is_empty() {
        put_header(tag, v.len(), buf);
        buf.put_slice(v);
    }
}

fn varint_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(v)
    }
}

fn put_varint(tag: u32, v: u64, buf: &mut impl BufMut) {
    if v != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(v, buf);
    }
}

fn optional_len(tag: u32, v: Option<u64>) -> usize {
    v.map_or(0, |v| key_len(tag) + encoded_len_varint(v))
}

fn put_optional(tag: u32, v: Option<u64>, buf: &mut impl BufMut) {
    if let Some(v) = v {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(v, buf);
    }
}

fn read_len(r: &Read) -> usize {
    bytes_len(1, &r.key) + optional_len(2, r.version)
}

fn read_write_len(r: &ReadWrite) -> usize {
    bytes_len(1, &r.key) + optional_len(2, r.version) + bytes_len(3, &r.value)
}

fn write_len(w: &Write) -> usize {
    bytes_len(1, &w.key) + bytes_len(2, &w.value)
}

fn namespace_len(ns: &TxNamespace) -> usize {
    bytes_len(1, ns.ns_id.as_bytes())
        + varint_len(2, ns.ns_version)
        + ns.reads_only
            .iter()
            .map(|r| delimited_len(3, read_len(r)))
            .sum::<usize>()
        + ns.read_writes
            .iter()
            .map(|r| delimited_len(4, read_write_len(r)))
            .sum::<usize>()
        + ns.blind_writes
            .iter()
            .map(|w| delimited_len(5, write_len(w)))
            .sum::<usize>()
}

fn put_namespace(ns: &TxNamespace, buf: &mut impl BufMut) {
    put_bytes(1, ns.ns_id.as_bytes(), buf);
    put_varint(2, ns.ns_version, buf);
    for r in &ns.reads_only {
        put_header(3, read_len(r), buf);
        put_bytes(1, &r.key, buf);
        put_optional(2, r.version, buf);
    }
    for r in &ns.read_writes {
        put_header(4, read_write_len(r), buf);
        put_bytes(1, &r.key, buf);
        put_optional(2, r.version, buf);
        put_bytes(3, &r.value, buf);
    }
    for w in &ns.blind_writes {
        put_header(5, write_len(w), buf);
        put_bytes(1, &w.key, buf);
        put_bytes(2, &w.value, buf);
    }
}

/// Whether an endorsement carries an `Identity` (as `wire::convert` writes it).
fn has_identity(e: &Endorsement) -> bool {
    !e.msp_id.is_empty() || !e.identity.is_empty()
}

/// `Identity { msp_id, creator: certificate }`: the oneof is set, so the certificate is
/// written even when empty.
fn identity_len(e: &Endorsement) -> usize {
    bytes_len(1, e.msp_id.as_bytes()) + delimited_len(2, e.identity.len())
}

fn endorsement_len(e: &Endorsement) -> usize {
    let identity = if has_identity(e) {
        delimited_len(2, identity_len(e))
    } else {
        0
    };
    bytes_len(1, &e.signature) + identity
}

fn endorsements_len(set: &[Endorsement]) -> usize {
    set.iter().map(|e| delimited_len(1, endorsement_len(e))).sum()
}

fn put_endorsements(set: &[Endorsement], buf: &mut impl BufMut) {
    for e in set {
        put_header(1, endorsement_len(e), buf);
        put_bytes(1, &e.signature, buf);
        if has_identity(e) {
            put_header(2, identity_len(e), buf);
            put_bytes(1, e.msp_id.as_bytes(), buf);
            put_header(2, e.identity.len(), buf);
            buf.put_slice(&e.identity);
        }
    }
}

fn tx_len(tx: &Tx) -> usize {
    tx.namespaces
        .iter()
        .map(|n| delimited_len(1, namespace_len(n)))
        .sum::<usize>()
        + tx.endorsements
            .iter()
            .map(|s| delimited_len(2, endorsements_len(s)))
            .sum::<usize>()
        + tx.metadata
            .iter()
            .map(|m| delimited_len(3, m.len()))
            .sum::<usize>()
}

fn put_tx(tx: &Tx, buf: &mut impl BufMut) {
    for n in &tx.namespaces {
        put_header(1, namespace_len(n), buf);
        put_namespace(n, buf);
    }
    for s in &tx.endorsements {
        put_header(2, endorsements_len(s), buf);
        put_endorsements(s, buf);
    }
    for m in &tx.metadata {
        put_header(3, m.len(), buf);
        buf.put_slice(m);
    }
}

/// One tx's `Tx` message, encoded: the bytes [`put_tx`] writes for it, which are prost's
/// encoding of `pb::Tx::from(tx)`. Only this module makes one (from a decoded tx), so the
/// bytes are always that canonical encoding, whatever bytes the tx arrived as.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxBody(bytes::Bytes);

impl TxBody {
    /// `tx` encoded on its own (a block's txs are encoded together by [`stored_block`]).
    pub fn of(tx: &Tx) -> TxBody {
        let mut buf = Vec::with_capacity(tx_len(tx));
        put_tx(tx, &mut buf);
        TxBody(buf.into())
    }

    /// The encoded `Tx` message.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Where a tx's `Tx` field comes from: written from the decoded tx, or copied from its
/// [`TxBody`].
#[derive(Clone, Copy)]
enum Body<'a> {
    Decoded(&'a Tx),
    Encoded(&'a [u8]),
}

impl Body<'_> {
    /// `txs[i]`'s body: `bodies[i]` when there is one, else the decoded tx.
    fn pick<'a>(tx: &'a Tx, bodies: &'a [TxBody], i: usize) -> Body<'a> {
        bodies
            .get(i)
            .map_or(Body::Decoded(tx), |b| Body::Encoded(b.as_bytes()))
    }

    fn len(&self) -> usize {
        match self {
            Body::Decoded(tx) => tx_len(tx),
            Body::Encoded(b) => b.len(),
        }
    }

    fn put(&self, buf: &mut impl BufMut) {
        match self {
            Body::Decoded(tx) => put_tx(tx, buf),
            Body::Encoded(b) => buf.put_slice(b),
        }
    }
}

/// The fields of one `VcTx`, borrowed (from a [`VcTx`] or from a block's tx).
struct VcFields<'a> {
    id: &'a str,
    block: u64,
    index: u32,
    body: Body<'a>,
    prelim: u32,
}

impl<'a> VcFields<'a> {
    fn of(t: &'a VcTx, body: Body<'a>) -> VcFields<'a> {
        VcFields {
            id: t.id.0.as_str(),
            block: t.height.block,
            index: t.height.index,
            body,
            prelim: t.prelim.map_or(0, |s| s.code()),
        }
    }
}

/// Bytes of `t` as a `VcTx`, its `Tx` being `tx_len` bytes.
fn vc_tx_len(t: &VcFields<'_>, tx_len: usize) -> usize {
    bytes_len(1, t.id.as_bytes())
        + varint_len(2, t.block)
        + varint_len(3, u64::from(t.index))
        + delimited_len(4, tx_len)
        + varint_len(5, u64::from(t.prelim))
}

/// Writes `t` as a `VcTx` whose `Tx` is `tx_len` bytes; returns where in `buf` its `Tx`
/// message starts.
fn put_vc_tx(t: &VcFields<'_>, tx_len: usize, buf: &mut Vec<u8>) -> usize {
    put_bytes(1, t.id.as_bytes(), buf);
    put_varint(2, t.block, buf);
    put_varint(3, u64::from(t.index), buf);
    put_header(4, tx_len, buf);
    let start = buf.len();
    t.body.put(buf);
    put_varint(5, u64::from(t.prelim), buf);
    start
}

/// `txs` as one `VcBatch`, and where each tx's `Tx` message lies in it.
fn vc_fields_batch(txs: &[VcFields<'_>]) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let lens: Vec<(usize, usize)> = txs
        .iter()
        .map(|t| {
            let tx = t.body.len();
            (tx, vc_tx_len(t, tx))
        })
        .collect();
    let mut buf = Vec::with_capacity(lens.iter().map(|(_, l)| delimited_len(1, *l)).sum());
    let mut bodies = Vec::with_capacity(txs.len());
    for (t, (tx, len)) in txs.iter().zip(lens) {
        put_header(1, len, &mut buf);
        let start = put_vc_tx(t, tx, &mut buf);
        bodies.push(start..start + tx);
    }
    (buf, bodies)
}

/// `txs` as one encoded `VcBatch` message.
pub fn vc_batch(txs: &[VcTx]) -> Vec<u8> {
    vc_batch_with_bodies(txs, &[])
}

/// The bytes of [`vc_batch`], with `bodies[i]` spliced in as `txs[i]`'s `Tx` instead of
/// encoding it again. `bodies[i]` must be the [`TxBody`] of `txs[i].tx` (the caller pairs
/// them); the txs past the end of `bodies` are encoded from their decoded form.
pub fn vc_batch_with_bodies(txs: &[VcTx], bodies: &[TxBody]) -> Vec<u8> {
    let fields: Vec<VcFields<'_>> = txs
        .iter()
        .enumerate()
        .map(|(i, t)| VcFields::of(t, Body::pick(&t.tx, bodies, i)))
        .collect();
    vc_fields_batch(&fields).0
}

/// The fields of every tx of `block` at its height (no status).
fn block_fields(block: &Block) -> types::Result<Vec<VcFields<'_>>> {
    let number = block.number();
    block
        .txs
        .iter()
        .enumerate()
        .map(|(i, (id, tx))| {
            Ok(VcFields {
                id: id.0.as_str(),
                block: number,
                index: u32::try_from(i).map_err(|_| types::Error::TooManyTxs { block: number })?,
                body: Body::Decoded(tx),
                prelim: 0,
            })
        })
        .collect()
}

/// Every tx of `block` at its height (no status) as one encoded `VcBatch`: the bytes of
/// [`vc_batch`] over `block.block_txs()`, without copying each tx's id and handle
/// first. Fails as `block_txs` does, for a block of more than `u32::MAX` txs.
pub fn block_vc_batch(block: &Block) -> types::Result<Vec<u8>> {
    Ok(vc_fields_batch(&block_fields(block)?).0)
}

/// A block's stored form ([`block_vc_batch`]) and, by tx index, each tx's [`TxBody`]: a
/// view of those same bytes, not a copy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredBlock {
    /// The encoded `VcBatch`.
    pub bytes: bytes::Bytes,
    /// The `Tx` message of each tx, in block order.
    pub bodies: Vec<TxBody>,
}

/// [`block_vc_batch`], with each tx's body kept as a view of the bytes: each tx of the
/// block is encoded once, for the store and for every message that carries it.
pub fn stored_block(block: &Block) -> types::Result<StoredBlock> {
    let (buf, ranges) = vc_fields_batch(&block_fields(block)?);
    let bytes = bytes::Bytes::from(buf);
    let bodies = ranges.into_iter().map(|r| TxBody(bytes.slice(r))).collect();
    Ok(StoredBlock { bytes, bodies })
}

/// Bytes of a `VerifyTx { tx_id, tx }` whose `Tx` is `tx_len` bytes (the tx is always
/// set, as the conversion sets it).
fn verify_tx_len(id: &TxId, tx_len: usize) -> usize {
    bytes_len(1, id.0.as_bytes()) + delimited_len(2, tx_len)
}

/// `VerifyStreamRequest { batch: VerifyBatch { request_id, txs } }` as one encoded
/// message: what the sigverifier client sends for a batch.
pub fn verify_batch_request(request_id: u64, txs: &[(TxId, Arc<Tx>)]) -> Vec<u8> {
    verify_batch_request_with_bodies(request_id, txs, &[])
}

/// The bytes of [`verify_batch_request`], with `bodies[i]` spliced in as `txs[i]`'s `Tx`
/// (the caller pairs them, as for [`vc_batch_with_bodies`]); the txs past the end of
/// `bodies` are encoded from their decoded form.
pub fn verify_batch_request_with_bodies(
    request_id: u64,
    txs: &[(TxId, Arc<Tx>)],
    bodies: &[TxBody],
) -> Vec<u8> {
    let items: Vec<(&TxId, Body<'_>, usize, usize)> = txs
        .iter()
        .enumerate()
        .map(|(i, (id, tx))| {
            let body = Body::pick(tx, bodies, i);
            let tx_len = body.len();
            (id, body, tx_len, verify_tx_len(id, tx_len))
        })
        .collect();
    let batch_len = varint_len(1, request_id)
        + items
            .iter()
            .map(|(_, _, _, l)| delimited_len(2, *l))
            .sum::<usize>();
    let mut buf = Vec::with_capacity(delimited_len(2, batch_len));
    put_header(2, batch_len, &mut buf);
    put_varint(1, request_id, &mut buf);
    for (id, body, tx_len, len) in items {
        put_header(2, len, &mut buf);
        put_bytes(1, id.0.as_bytes(), &mut buf);
        put_header(2, tx_len, &mut buf);
        body.put(&mut buf);
    }
    buf
}

/// A message encoded already (by this module or by prost), sent as its bytes: a client
/// encodes it once, and a resubmission shares the bytes. Only ever sent, never decoded
/// (decoding skips every field).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Encoded(pub bytes::Bytes);

impl Encoded {
    /// `m` encoded by prost.
    pub fn of(m: &impl prost::Message) -> Encoded {
        Encoded::from(m.encode_to_vec())
    }
}

impl From<Vec<u8>> for Encoded {
    fn from(v: Vec<u8>) -> Encoded {
        Encoded(v.into())
    }
}

impl prost::Message for Encoded {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = bytes::Bytes::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;
    use prost::Message;
    use types::{Height, Status};

    fn endorsement(signature: &[u8], msp_id: &str, identity: &[u8]) -> Endorsement {
        Endorsement {
            signature: signature.to_vec(),
            msp_id: msp_id.into(),
            identity: identity.to_vec(),
        }
    }

    /// Every field at its default and not, optional versions unset, 0 and large, empty
    /// and non-empty identities, metadata with an empty element, long values.
    fn txs() -> Vec<VcTx> {
        let full = Tx {
            namespaces: vec![
                TxNamespace {
                    ns_id: "token".into(),
                    ns_version: 3,
                    reads_only: vec![
                        Read {
                            key: b"r".to_vec(),
                            version: None,
                        },
                        Read {
                            key: Vec::new(),
                            version: Some(0),
                        },
                    ],
                    read_writes: vec![ReadWrite {
                        key: b"coin".to_vec(),
                        version: Some(u64::MAX),
                        value: vec![7; 300],
                    }],
                    blind_writes: vec![
                        Write {
                            key: b"new".to_vec(),
                            value: Vec::new(),
                        },
                        Write {
                            key: b"k".to_vec(),
                            value: vec![1; 20_000],
                        },
                    ],
                },
                TxNamespace::default(),
            ],
            endorsements: vec![
                vec![
                    endorsement(&[9; 64], "", b""),
                    endorsement(b"s", "Org1", b""),
                    endorsement(b"", "", b"cert"),
                ],
                Vec::new(),
            ],
            metadata: vec![b"m".to_vec(), Vec::new()],
        };
        let vc = |id: &str, block: u64, index: u32, tx: Tx, prelim: Option<Status>| VcTx {
            id: TxId(id.into()),
            height: Height::new(block, index),
            tx: Arc::new(tx),
            prelim,
        };
        vec![
            vc("a", 0, 0, Tx::default(), None),
            vc("", 1, 1, Tx::default(), Some(Status::MalformedNoWrites)),
            vc("tx-2", u64::MAX, u32::MAX, full.clone(), None),
            vc("tx-3", 300, 128, full, Some(Status::AbortedSignatureInvalid)),
        ]
    }

    #[test]
    fn the_same_bytes_as_the_wire_messages() {
        let txs = txs();
        for n in 0..=txs.len() {
            let want = pb::VcBatch {
                txs: txs[..n].iter().map(pb::VcTx::from).collect(),
            }
            .encode_to_vec();
            assert_eq!(vc_batch(&txs[..n]), want, "first {n} txs");
        }
        for t in &txs {
            let want = pb::VcBatch {
                txs: vec![pb::VcTx::from(t)],
            }
            .encode_to_vec();
            assert_eq!(vc_batch(std::slice::from_ref(t)), want, "tx {}", t.id.0);
        }
    }

    #[test]
    fn verify_requests_are_the_wire_messages_bytes() {
        let txs: Vec<(TxId, Arc<Tx>)> = txs().into_iter().map(|t| (t.id, t.tx)).collect();
        for request_id in [0, 1, 300, u64::MAX] {
            for n in 0..=txs.len() {
                let want = pb::VerifyStreamRequest {
                    kind: Some(pb::verify_stream_request::Kind::Batch(pb::VerifyBatch {
                        request_id,
                        txs: txs[..n]
                            .iter()
                            .map(|(id, tx)| pb::VerifyTx {
                                tx_id: id.0.clone(),
                                tx: Some(pb::Tx::from(tx.as_ref())),
                            })
                            .collect(),
                    })),
                }
                .encode_to_vec();
                assert_eq!(
                    verify_batch_request(request_id, &txs[..n]),
                    want,
                    "request {request_id}, first {n} txs"
                );
            }
        }
    }

    #[test]
    fn an_encoded_message_is_sent_as_its_bytes() {
        let bytes = vc_batch(&txs());
        let sent = Encoded::from(bytes.clone());
        assert_eq!(sent.encoded_len(), bytes.len());
        assert_eq!(sent.encode_to_vec(), bytes);
        // Decoding (never done) skips the fields instead of failing.
        assert_eq!(Encoded::decode(bytes.as_slice()), Ok(Encoded::default()));
    }

    #[test]
    fn a_body_is_the_tx_message_as_prost_encodes_it() {
        for t in txs() {
            let want = pb::Tx::from(t.tx.as_ref()).encode_to_vec();
            assert_eq!(TxBody::of(&t.tx).as_bytes(), want.as_slice(), "tx {}", t.id.0);
        }
    }

    #[test]
    fn spliced_bodies_give_the_same_bytes() {
        let txs = txs();
        let bodies: Vec<TxBody> = txs.iter().map(|t| TxBody::of(&t.tx)).collect();
        let pairs: Vec<(TxId, Arc<Tx>)> = txs.iter().map(|t| (t.id.clone(), t.tx.clone())).collect();
        for n in 0..=txs.len() {
            // Any number of bodies, from none to one per tx.
            for b in 0..=n {
                assert_eq!(
                    vc_batch_with_bodies(&txs[..n], &bodies[..b]),
                    vc_batch(&txs[..n]),
                    "first {n} txs, {b} bodies"
                );
                for request_id in [0, 7, u64::MAX] {
                    assert_eq!(
                        verify_batch_request_with_bodies(request_id, &pairs[..n], &bodies[..b]),
                        verify_batch_request(request_id, &pairs[..n]),
                        "request {request_id}, first {n} txs, {b} bodies"
                    );
                }
            }
        }
    }

    #[test]
    fn a_stored_block_views_each_body_in_its_bytes() {
        let txs: Vec<(TxId, Arc<Tx>)> = txs().into_iter().map(|t| (t.id, t.tx)).collect();
        for n in 0..=txs.len() {
            for number in [0, 1, u64::MAX] {
                let block = Block::unordered(number, txs[..n].to_vec());
                let stored = stored_block(&block).unwrap();
                assert_eq!(stored.bytes, block_vc_batch(&block).unwrap());
                assert_eq!(stored.bodies.len(), n);
                for ((_, tx), body) in txs[..n].iter().zip(&stored.bodies) {
                    assert_eq!(body, &TxBody::of(tx));
                    let within = body.as_bytes().as_ptr_range();
                    let whole = stored.bytes.as_ptr_range();
                    assert!(
                        whole.start <= within.start && within.end <= whole.end,
                        "a view, not a copy"
                    );
                }
                // Spliced back from the stored bodies: the same messages.
                let vc: Vec<VcTx> = block.block_txs().unwrap().into_iter().map(VcTx::from).collect();
                assert_eq!(vc_batch_with_bodies(&vc, &stored.bodies), vc_batch(&vc));
                assert_eq!(
                    verify_batch_request_with_bodies(9, &txs[..n], &stored.bodies),
                    verify_batch_request(9, &txs[..n])
                );
            }
        }
    }

    #[test]
    fn a_block_is_its_txs_at_their_heights() {
        let txs: Vec<(TxId, Arc<Tx>)> = txs().into_iter().map(|t| (t.id, t.tx)).collect();
        for n in 0..=txs.len() {
            for number in [0, 1, 300, u64::MAX] {
                let block = Block::unordered(number, txs[..n].to_vec());
                let want: Vec<VcTx> = block.block_txs().unwrap().into_iter().map(VcTx::from).collect();
                assert_eq!(
                    block_vc_batch(&block).unwrap(),
                    vc_batch(&want),
                    "block {number}, {n} txs"
                );
                let pb_want = pb::VcBatch {
                    txs: want.iter().map(pb::VcTx::from).collect(),
                }
                .encode_to_vec();
                assert_eq!(block_vc_batch(&block).unwrap(), pb_want);
            }
        }
    }
}
