//! The record frame and the torn-tail rule, as pure functions over bytes.
//!
//! A record is `len: u32 LE ‖ len_crc: u32 LE ‖ crc: u32 LE ‖ payload`, where
//! `len_crc = crc32c(len)` and `crc = crc32c(len ‖ payload)` (see the crate docs).

use crate::le::u32_le;

/// CRC-32C (Castagnoli), the checksum of every frame: the processor's CRC-32C
/// instruction where it has one (SSE 4.2, ARMv8), a table otherwise. A table sliced by
/// 16 was still 2 % of a batcher's CPU (it frames every batch it persists).
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    ::crc32c::crc32c(bytes)
}

/// Length of a record header in bytes: `len ‖ len_crc ‖ crc`.
pub const HEADER_LEN: usize = 12;

/// A record header whose length field passed its own CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// Payload length.
    pub len: u32,
    /// CRC-32C over `len ‖ payload`.
    pub crc: u32,
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32_le(&buf[at..at + 4])
}

impl Header {
    /// The header at the start of `buf`, if it is whole and its length CRC holds.
    pub fn parse(buf: &[u8]) -> Option<Header> {
        let h = buf.get(..HEADER_LEN)?;
        (crc32c(&h[..4]) == u32_at(h, 4)).then(|| Header {
            len: u32_at(h, 0),
            crc: u32_at(h, 8),
        })
    }

    /// Whether `payload` is the one this header was written for.
    pub fn matches(&self, payload: &[u8]) -> bool {
        payload.len() == self.len as usize && record_crc(payload) == self.crc
    }
}

fn record_crc(payload: &[u8]) -> u32 {
    let len = crc32c(&(payload.len() as u32).to_le_bytes());
    ::crc32c::crc32c_append(len, payload)
}

/// Appends the frame of `payload` (header and payload) to `out`. The caller has checked
/// that the length fits the configured maximum (hence a `u32`).
pub(crate) fn encode(payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc32c(&len).to_le_bytes());
    out.extend_from_slice(&record_crc(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// A whole, valid record found by [`scan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// Offset of the header in the segment.
    pub offset: u64,
    /// Payload length.
    pub len: u32,
}

/// The valid records of a segment image and where the valid prefix ends. Bytes after
/// `valid` are a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Records in order.
    pub records: Vec<Found>,
    /// Length of the valid prefix.
    pub valid: u64,
}

/// A bad record that is not a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Corruption {
    /// Offset of the bad record's header.
    pub offset: u64,
    /// Index of the bad record in the segment (0 for its first record).
    pub index: u64,
    /// What is wrong.
    pub detail: String,
}

fn all_zero(buf: &[u8]) -> bool {
    buf.iter().all(|b| *b == 0)
}

/// Applies the torn-tail rule to a segment image (see the crate docs): stops at a torn
/// tail, fails on a bad record followed by more non-zero bytes or on a record longer
/// than `max_len`.
pub(crate) fn scan(buf: &[u8], max_len: u32) -> Result<Scan, Corruption> {
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        let corrupt = |detail: String| Corruption {
            offset: pos as u64,
            index: records.len() as u64,
            detail,
        };
        let rest = &buf[pos..];
        if rest.len() < HEADER_LEN {
            break; // a header cut short
        }
        let Some(header) = Header::parse(rest) else {
            if all_zero(&rest[HEADER_LEN..]) {
                break; // a torn or zero-filled header at the end
            }
            return Err(corrupt("bad record header followed by more data".into()));
        };
        if header.len > max_len {
            return Err(corrupt(format!(
                "record of {} bytes over the maximum of {max_len}",
                header.len
            )));
        }
        let end = pos + HEADER_LEN + header.len as usize;
        if end > buf.len() {
            break; // the header made it to disk, the payload did not
        }
        if !header.matches(&buf[pos + HEADER_LEN..end]) {
            if all_zero(&buf[end..]) {
                break; // the last record is torn (or zero-filled)
            }
            return Err(corrupt("record CRC mismatch followed by more data".into()));
        }
        records.push(Found {
            offset: pos as u64,
            len: header.len,
        });
        pos = end;
    }
    Ok(Scan {
        records,
        valid: pos as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(payloads: &[&[u8]]) -> (Vec<u8>, Vec<usize>) {
        let mut out = Vec::new();
        let mut starts = Vec::new();
        for p in payloads {
            starts.push(out.len());
            encode(p, &mut out);
        }
        (out, starts)
    }

    /// The frames on disk are the same whichever implementation wrote them: the
    /// instruction-based CRC-32C equals the reference table's CRC-32/ISCSI, on the
    /// standard check string and on every length and alignment up to 300 bytes, and a
    /// record's CRC equals the reference over `len ‖ payload`.
    #[test]
    fn crc32c_is_the_reference_crc() {
        let reference = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let bytes: Vec<u8> = (0..400u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..8 {
            for len in 0..300 {
                let slice = &bytes[start..start + len];
                assert_eq!(crc32c(slice), reference.checksum(slice), "{start}+{len}");
                let mut framed = (len as u32).to_le_bytes().to_vec();
                framed.extend_from_slice(slice);
                assert_eq!(record_crc(slice), reference.checksum(&framed), "{start}+{len}");
            }
        }
    }

    #[test]
    fn header_round_trip_and_zeroes_are_invalid() {
        let mut out = Vec::new();
        encode(b"hello", &mut out);
        let h = Header::parse(&out).expect("valid header");
        assert_eq!(h.len, 5);
        assert!(h.matches(&out[HEADER_LEN..]));
        assert!(!h.matches(b"hellO"));
        assert_eq!(Header::parse(&[0u8; HEADER_LEN]), None);
        assert_eq!(Header::parse(&out[..HEADER_LEN - 1]), None);
    }

    #[test]
    fn empty_payload_is_a_record() {
        let (buf, _) = frames(&[b"", b"x", b""]);
        let s = scan(&buf, 10).expect("valid");
        assert_eq!(s.records.len(), 3);
        assert_eq!(s.valid, buf.len() as u64);
    }

    #[test]
    fn every_cut_of_the_last_record_is_torn() {
        let (buf, starts) = frames(&[b"first", b"second record", b"third"]);
        for cut in starts[2]..buf.len() {
            let s = scan(&buf[..cut], 100).expect("torn, not corrupt");
            assert_eq!((s.records.len(), s.valid), (2, starts[2] as u64), "cut {cut}");
        }
    }

    #[test]
    fn every_flip_before_the_last_record_is_corruption() {
        let (buf, starts) = frames(&[b"first", b"second record", b"third"]);
        for i in 0..starts[2] {
            let mut bad = buf.clone();
            bad[i] ^= 0x04;
            let err = scan(&bad, 100).expect_err("corrupt");
            let (offset, index) = if i < starts[1] { (0, 0) } else { (starts[1], 1) };
            assert_eq!((err.offset, err.index), (offset as u64, index), "flip {i}");
        }
    }

    #[test]
    fn zero_filled_tails_are_torn() {
        let (good, _) = frames(&[b"a", b"bb"]);
        // Zeros where a header would be.
        let zeros = [good.clone(), vec![0u8; 100]].concat();
        assert_eq!(scan(&zeros, 100).expect("torn").valid, good.len() as u64);
        // A whole header whose payload was never written, then more zeros.
        let mut partial = good.clone();
        encode(&[7u8; 40], &mut partial);
        partial.truncate(good.len() + HEADER_LEN);
        partial.extend_from_slice(&[0u8; 80]);
        assert_eq!(scan(&partial, 100).expect("torn").valid, good.len() as u64);
        // A record followed by zeros and then data is corruption.
        let mut bad = zeros.clone();
        bad.push(1);
        assert_eq!(scan(&bad, 100).expect_err("corrupt").offset, good.len() as u64);
    }

    #[test]
    fn oversized_record_is_corruption() {
        let (buf, _) = frames(&[b"0123456789"]);
        assert_eq!(scan(&buf, 9).expect_err("too long").offset, 0);
        assert_eq!(scan(&buf, 10).expect("fits").records.len(), 1);
    }
}
