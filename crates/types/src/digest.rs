//! Batch digests and the request → shard mapping.

use crate::{Error, Result};
use sha2::{Digest, Sha256};

/// A SHA-256 digest.
pub type Digest32 = [u8; 32];

/// Digest of a batch: SHA-256 over the concatenation of `u32be(len) ‖ tx bytes` for every
/// request in order. The length prefix makes the digest injective over request lists.
pub fn batch_digest<T: AsRef<[u8]>>(requests: &[T]) -> Digest32 {
    let mut h = Sha256::new();
    for r in requests {
        let r = r.as_ref();
        h.update((r.len() as u32).to_be_bytes());
        h.update(r);
    }
    h.finalize().into()
}

/// CRC-64 as computed by Go's `crc64.Checksum(_, crc64.MakeTable(crc64.ECMA))` (the
/// reflected ECMA-182 polynomial, also catalogued as CRC-64/XZ), so that fabrx and Go
/// clients agree on shards. Computed with carry-less multiplication where the CPU has it
/// (`crc64fast`; tables otherwise): the slice-by-16 tables cost 3.5 % of a router's CPU
/// and 2 % of a batcher's (docs/benchmarks.md), and the byte-at-a-time table 5 % before.
/// The reference implementation (`crc::CRC_64_XZ`) checks it in the tests.
pub fn crc64(payload: &[u8]) -> u64 {
    let mut digest = crc64fast::Digest::new();
    digest.write(payload);
    digest.sum64()
}

/// The shard of bytes given in pieces: [`shard_of`] of their concatenation.
pub fn shard_of_pieces(pieces: &[&[u8]], shards: u32) -> Result<u32> {
    if shards == 0 {
        return Err(Error::NoShards { shards });
    }
    let mut digest = crc64fast::Digest::new();
    for p in pieces {
        digest.write(p);
    }
    Ok(((digest.sum64() & 0xffff) as u32) % shards)
}

/// The shard of a request: `(crc64(payload) & 0xffff) mod shards`.
pub fn shard_of(payload: &[u8], shards: u32) -> Result<u32> {
    if shards == 0 {
        return Err(Error::NoShards { shards });
    }
    Ok(((crc64(payload) & 0xffff) as u32) % shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The fast CRC and the reference implementation agree, whole and in pieces.
        #[test]
        fn crc64_is_the_reference_crc(data in proptest::collection::vec(proptest::num::u8::ANY, 0..2048), cut in 0usize..2048) {
            const REFERENCE: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_XZ);
            let want = REFERENCE.checksum(&data);
            proptest::prop_assert_eq!(crc64(&data), want);
            let cut = cut.min(data.len());
            let (a, b) = data.split_at(cut);
            let shards = 7;
            proptest::prop_assert_eq!(shard_of_pieces(&[a, b], shards).unwrap(), ((want & 0xffff) as u32) % shards);
        }
    }

    #[test]
    fn crc_check_value() {
        // The catalogue check value of CRC-64/XZ (Go's crc64 with the ECMA table).
        assert_eq!(crc64(b"123456789"), 0x995d_c9bb_df19_39fa);
    }

    #[test]
    fn shard_mapping() {
        let low16 = (crc64(b"123456789") & 0xffff) as u32; // 0x39fa = 14842
        assert_eq!(low16, 0x39fa);
        assert_eq!(shard_of(b"123456789", 1).unwrap(), 0);
        assert_eq!(shard_of(b"123456789", 2).unwrap(), 14842 % 2);
        assert_eq!(shard_of(b"123456789", 7).unwrap(), 14842 % 7);
        assert_eq!(shard_of(b"x", 0), Err(Error::NoShards { shards: 0 }));
        // Spread: 4 shards all receive some of 1000 distinct payloads.
        let mut seen = [0u32; 4];
        for i in 0..1000u32 {
            seen[shard_of(&i.to_be_bytes(), 4).unwrap() as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 150), "{seen:?}");
    }

    #[test]
    fn batch_digest_is_length_prefixed() {
        let empty: [&[u8]; 0] = [];
        assert_eq!(batch_digest(&empty)[..], Sha256::digest(b"")[..]);
        let d = batch_digest(&[b"ab".as_slice()]);
        let mut manual = Vec::new();
        manual.extend_from_slice(&2u32.to_be_bytes());
        manual.extend_from_slice(b"ab");
        assert_eq!(d[..], Sha256::digest(&manual)[..]);
        // Re-splitting the same bytes changes the digest.
        assert_ne!(
            batch_digest(&[b"ab".as_slice(), b"c"]),
            batch_digest(&[b"a".as_slice(), b"bc"])
        );
        assert_ne!(
            batch_digest(&[b"a".as_slice()]),
            batch_digest(&[b"a".as_slice(), b""])
        );
    }
}
