//! The height of a transaction: (block number, index in block), with an
//! order-preserving byte encoding.

use crate::{Error, Result};

/// Where a transaction sits in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Height {
    /// Block number.
    pub block: u64,
    /// Index of the transaction in its block.
    pub index: u32,
}

impl Height {
    /// Length of the encoding in bytes.
    pub const ENCODED_LEN: usize = 12;

    /// A height.
    pub fn new(block: u64, index: u32) -> Height {
        Height { block, index }
    }

    /// `u64be(block) ‖ u32be(index)`: byte-wise order equals height order.
    pub fn to_bytes(self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[..8].copy_from_slice(&self.block.to_be_bytes());
        out[8..].copy_from_slice(&self.index.to_be_bytes());
        out
    }

    /// Decodes [`Height::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Height> {
        let arr: [u8; Self::ENCODED_LEN] = b.try_into().map_err(|_| Error::BadHeightLength {
            expected: Self::ENCODED_LEN,
            got: b.len(),
        })?;
        let mut block = [0u8; 8];
        block.copy_from_slice(&arr[..8]);
        let mut index = [0u8; 4];
        index.copy_from_slice(&arr[8..]);
        Ok(Height {
            block: u64::from_be_bytes(block),
            index: u32::from_be_bytes(index),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encoding_preserves_order(a in any::<(u64, u32)>(), b in any::<(u64, u32)>()) {
            let (ha, hb) = (Height::new(a.0, a.1), Height::new(b.0, b.1));
            prop_assert_eq!(ha.cmp(&hb), ha.to_bytes().cmp(&hb.to_bytes()));
            prop_assert_eq!(Height::from_bytes(&ha.to_bytes()).unwrap(), ha);
        }
    }

    #[test]
    fn rejects_bad_length() {
        assert_eq!(
            Height::from_bytes(&[0u8; 11]),
            Err(Error::BadHeightLength {
                expected: 12,
                got: 11
            })
        );
        assert!(Height::new(1, 0) > Height::new(0, u32::MAX));
    }
}
