//! Little-endian integers from byte slices that the caller cut to size. A slice of the
//! wrong length reads as if zero-padded (longer is cut): callers slice exactly, and a
//! mistake gives a wrong value that a CRC or a range check catches, never a panic.

/// Little-endian `u32` of a 4-byte slice.
pub fn u32_le(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    let n = b.len().min(4);
    a[..n].copy_from_slice(&b[..n]);
    u32::from_le_bytes(a)
}

/// Little-endian `u64` of an 8-byte slice.
pub fn u64_le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_never_panics() {
        assert_eq!(u32_le(&[1, 0, 0, 0]), 1);
        assert_eq!(u64_le(&[0, 1, 0, 0, 0, 0, 0, 0]), 256);
        assert_eq!(u32_le(&[1]), 1);
        assert_eq!(u32_le(&[1, 0, 0, 0, 9]), 1);
        assert_eq!(u64_le(&[]), 0);
    }
}
