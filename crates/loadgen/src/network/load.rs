//! The txs of a network run: each tx's id and envelope, by index. Either envelopes built
//! ahead (a signed workload's, one buffer for all of them) or generated from a template
//! (one envelope with the tx id patched in at send time: a copy, no allocation), for
//! loads whose payload does not matter (a sink, a network that only orders).
//!
//! The links write a tx's envelope straight into the message they send
//! ([`Load::write_envelope`]) and find a tx's index from the id a block or a status
//! names ([`Load::index_of`]); nothing per tx is cloned on the way.

use std::borrow::Cow;
use std::collections::HashMap;

use prost::Message as _;
use prost::bytes::BufMut;
use wire::pb;

/// The txs of a run, by index.
#[derive(Debug)]
pub struct Load {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// Envelopes built ahead, back to back in one buffer.
    Built {
        ids: Vec<String>,
        index: HashMap<String, usize>,
        bytes: Vec<u8>,
        /// Where each envelope ends in `bytes`.
        ends: Vec<usize>,
    },
    /// One envelope, tx `i`'s id patched in.
    Template(Template),
}

/// An envelope whose tx id is `<prefix><i>` with `i` in `digits` decimal digits.
#[derive(Debug)]
struct Template {
    prefix: String,
    digits: usize,
    count: usize,
    envelope: Vec<u8>,
    /// Where the digits of the id are in `envelope`.
    digits_at: usize,
}

/// The fewest digits of a template's tx index.
const MIN_DIGITS: usize = 8;

impl Load {
    /// Txs with these ids and envelopes, copied into one buffer. Ids should be distinct:
    /// a repeated id is found as its last tx.
    pub fn from_envelopes<S: Into<String>, E: AsRef<[u8]>>(txs: impl IntoIterator<Item = (S, E)>) -> Load {
        let mut ids = Vec::new();
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for (id, env) in txs {
            ids.push(id.into());
            bytes.extend_from_slice(env.as_ref());
            ends.push(bytes.len());
        }
        let index = ids.iter().enumerate().map(|(i, id)| (id.clone(), i)).collect();
        Load {
            kind: Kind::Built {
                ids,
                index,
                bytes,
                ends,
            },
        }
    }

    /// `count` txs with ids `<prefix><i>` (`i` zero-padded to a fixed width) and
    /// envelopes of about `size` bytes: an unsigned envelope whose payload is a tx with
    /// one blind write padded to the size and one endorsement that no key made (its
    /// content does not matter to a sink or to ordering; it passes a router's
    /// structural checks, a committer would refuse its signature). Built once; each
    /// tx's envelope is this one with its id patched in.
    pub fn template(prefix: &str, count: usize, size: usize) -> Load {
        let digits = count.saturating_sub(1).to_string().len().max(MIN_DIGITS);
        let envelope = |id: String, pad: usize| {
            let tx = pb::Tx {
                namespaces: vec![pb::TxNamespace {
                    ns_id: "loadgen".into(),
                    ns_version: 0,
                    reads_only: vec![],
                    read_writes: vec![],
                    blind_writes: vec![pb::Write {
                        key: b"k".to_vec(),
                        value: vec![0x5a; pad],
                    }],
                }],
                // One endorsement with a signature, as the routers' structural checks
                // ask (nobody verifies it: an ordering-only network or a sink).
                endorsements: vec![pb::Endorsements {
                    endorsements_with_identity: vec![pb::EndorsementWithIdentity {
                        endorsement: vec![0x5a; 64],
                        identity: None,
                    }],
                }],
                metadata: vec![],
            };
            envelope_of(id, tx.encode_to_vec())
        };
        let id = |c: char| format!("{prefix}{}", c.to_string().repeat(digits));
        let plain = envelope(id('0'), 0).len();
        let mut pad = size.saturating_sub(plain);
        // A longer value may take a longer length prefix: trim what it added.
        while pad > 0 && envelope(id('0'), pad).len() > size {
            pad -= 1;
        }
        let zeros = envelope(id('0'), pad);
        let nines = envelope(id('9'), pad);
        let digits_at = zeros.iter().zip(&nines).position(|(a, b)| a != b).unwrap_or(0);
        Load {
            kind: Kind::Template(Template {
                prefix: prefix.to_string(),
                digits,
                count,
                envelope: zeros,
                digits_at,
            }),
        }
    }

    /// Txs in the load.
    pub fn len(&self) -> usize {
        match &self.kind {
            Kind::Built { ends, .. } => ends.len(),
            Kind::Template(t) => t.count,
        }
    }

    /// Whether the load has no tx.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tx `i`'s id (`i < len()`).
    pub fn id(&self, i: usize) -> Cow<'_, str> {
        match &self.kind {
            Kind::Built { ids, .. } => Cow::Borrowed(ids.get(i).map_or("", String::as_str)),
            Kind::Template(t) => Cow::Owned(format!("{}{i:0w$}", t.prefix, w = t.digits)),
        }
    }

    /// The index of the tx with id `id`, if it is one of this load's.
    pub fn index_of(&self, id: &[u8]) -> Option<usize> {
        match &self.kind {
            Kind::Built { index, .. } => std::str::from_utf8(id).ok().and_then(|id| index.get(id).copied()),
            Kind::Template(t) => {
                let digits = id.strip_prefix(t.prefix.as_bytes())?;
                if digits.len() != t.digits || !digits.iter().all(u8::is_ascii_digit) {
                    return None;
                }
                let i = digits.iter().try_fold(0usize, |n, d| {
                    n.checked_mul(10)?.checked_add(usize::from(d - b'0'))
                })?;
                (i < t.count).then_some(i)
            }
        }
    }

    /// The length of tx `i`'s envelope.
    pub fn envelope_len(&self, i: usize) -> usize {
        match &self.kind {
            Kind::Built { ends, .. } => {
                let start = i.checked_sub(1).and_then(|p| ends.get(p)).copied().unwrap_or(0);
                ends.get(i).map_or(0, |end| end - start)
            }
            Kind::Template(t) => t.envelope.len(),
        }
    }

    /// Writes tx `i`'s envelope into `out`.
    pub fn write_envelope(&self, i: usize, out: &mut impl BufMut) {
        match &self.kind {
            Kind::Built { bytes, ends, .. } => {
                let start = i.checked_sub(1).and_then(|p| ends.get(p)).copied().unwrap_or(0);
                let end = ends.get(i).copied().unwrap_or(start);
                out.put_slice(&bytes[start..end]);
            }
            Kind::Template(t) => {
                let mut digits = [b'0'; 20];
                let w = t.digits.min(digits.len());
                let mut n = i;
                for d in digits[..w].iter_mut().rev() {
                    *d = b'0' + (n % 10) as u8;
                    n /= 10;
                }
                out.put_slice(&t.envelope[..t.digits_at]);
                out.put_slice(&digits[..w]);
                out.put_slice(&t.envelope[t.digits_at + w..]);
            }
        }
    }

    /// Tx `i`'s envelope, as a new buffer.
    pub fn envelope(&self, i: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.envelope_len(i));
        self.write_envelope(i, &mut out);
        out
    }
}

impl From<&[(String, std::sync::Arc<Vec<u8>>)]> for Load {
    fn from(txs: &[(String, std::sync::Arc<Vec<u8>>)]) -> Load {
        Load::from_envelopes(txs.iter().map(|(id, env)| (id.clone(), env.as_slice())))
    }
}

/// An unsigned envelope (the routers of a generated network are open) of a tx payload.
pub(crate) fn envelope_of(tx_id: String, payload: Vec<u8>) -> Vec<u8> {
    pb::Envelope {
        signature: vec![],
        payload,
        identity: Some(pb::Identity {
            msp_id: "loadgen".into(),
            creator: Some(pb::identity::Creator::CertificateId("loadgen".into())),
        }),
        tx_id,
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
    .encode_to_vec()
}

/// The tx id of an encoded envelope (its field 4), read without decoding the rest.
pub fn envelope_tx_id(mut raw: &[u8]) -> Option<&[u8]> {
    const TX_ID: u64 = 4;
    let mut found = None;
    while let Some((field, value)) = next_field(&mut raw)? {
        if let (TX_ID, Field::Bytes(id)) = (field, value) {
            // The last occurrence wins, as in a decoder.
            found = Some(id);
        }
    }
    found
}

/// One protobuf field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field<'a> {
    /// A varint.
    Varint(u64),
    /// A length-delimited value.
    Bytes(&'a [u8]),
    /// A fixed-size value.
    Fixed,
}

/// Reads the next field off the front of `raw`: `Some(None)` at the end, `None` when
/// `raw` is not protobuf.
pub(super) fn next_field<'a>(raw: &mut &'a [u8]) -> Option<Option<(u64, Field<'a>)>> {
    if raw.is_empty() {
        return Some(None);
    }
    let key = varint(raw)?;
    let value = match key & 7 {
        0 => Field::Varint(varint(raw)?),
        1 => {
            *raw = raw.get(8..)?;
            Field::Fixed
        }
        2 => {
            let len = usize::try_from(varint(raw)?).ok()?;
            let value = raw.get(..len)?;
            *raw = raw.get(len..)?;
            Field::Bytes(value)
        }
        5 => {
            *raw = raw.get(4..)?;
            Field::Fixed
        }
        _ => return None,
    };
    Some(Some((key >> 3, value)))
}

/// Reads one varint off the front of `raw`.
fn varint(raw: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = raw.split_first()?;
        *raw = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_envelope_is_the_envelope_of_its_id() {
        let load = Load::template("run7-", 1_000, 300);
        assert_eq!(load.len(), 1_000);
        for i in [0, 7, 999] {
            let raw = load.envelope(i);
            assert_eq!(raw.len(), load.envelope_len(i));
            assert!((290..=300).contains(&raw.len()), "{}", raw.len());
            let env = pb::Envelope::decode(raw.as_slice()).unwrap();
            assert_eq!(env.tx_id, format!("run7-{i:08}"));
            assert_eq!(env.tx_id, load.id(i));
            assert_eq!(envelope_tx_id(&raw), Some(env.tx_id.as_bytes()));
            assert_eq!(load.index_of(env.tx_id.as_bytes()), Some(i));
            assert!(pb::Tx::decode(env.payload.as_slice()).is_ok());
            // What a router checks of a request's content.
            let (id, checked) = wire::check_envelope_bytes(&raw, &wire::ProstDecoder::default());
            assert_eq!(id, env.tx_id);
            assert!(checked.is_ok(), "{checked:?}");
        }
        for stranger in [
            &b"run7-00001000"[..],
            b"run7-0000001",
            b"run8-00000001",
            b"run7-0000000x",
        ] {
            assert_eq!(
                load.index_of(stranger),
                None,
                "{}",
                String::from_utf8_lossy(stranger)
            );
        }
        assert_eq!(Load::template("t-", 123_456_789, 10).id(5), "t-000000005");
    }

    #[test]
    fn built_envelopes_are_found_by_index_and_id() {
        let load = Load::from_envelopes([("a", vec![1u8, 2]), ("bb", vec![]), ("c", vec![3])]);
        assert_eq!(load.len(), 3);
        assert_eq!(
            (0..3).map(|i| load.envelope(i)).collect::<Vec<_>>(),
            vec![vec![1, 2], vec![], vec![3]]
        );
        assert_eq!(load.id(1), "bb");
        assert_eq!(load.index_of(b"c"), Some(2));
        assert_eq!(load.index_of(b"d"), None);
    }

    #[test]
    fn the_tx_id_is_read_from_any_envelope_and_garbage_has_none() {
        let mut env = pb::Envelope {
            tx_id: "x-1".into(),
            payload: vec![9; 200],
            nonce: vec![1; 3],
            signature: vec![2; 64],
            payload_type: 1,
            ..pb::Envelope::default()
        };
        assert_eq!(envelope_tx_id(&env.encode_to_vec()), Some(&b"x-1"[..]));
        env.tx_id.clear();
        assert_eq!(envelope_tx_id(&env.encode_to_vec()), None);
        assert_eq!(envelope_tx_id(&[0x22, 0x05, b'a']), None, "truncated");
        assert_eq!(envelope_tx_id(&[0xff; 11]), None, "an endless varint");
    }
}
