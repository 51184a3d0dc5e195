//! Owned values: the value format whose owner the committer indexes.
//!
//! A committed value that starts with [`OWNED_MAGIC`] followed by a 32-byte owner key
//! (the token application's tokens, docs/token.md) is *owned*: the validator-committer
//! keeps an index from (namespace, owner) to its key, updated in the same atomic commit
//! as the row, so a wallet finds its unspent tokens without a scan. A value that does not
//! start with the magic (a spent marker, any other application's value) is in no owner's
//! index. What follows the owner is the application's business.

/// The first bytes of an owned value.
pub const OWNED_MAGIC: &[u8; 5] = b"fxtk1";

/// Length of the owner key in an owned value.
pub const OWNER_LEN: usize = 32;

/// The owner an owned value names, or `None` when the value is not owned.
pub fn owner_of(value: &[u8]) -> Option<&[u8]> {
    let rest = value.strip_prefix(OWNED_MAGIC.as_slice())?;
    rest.get(..OWNER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_with_the_magic_and_a_whole_owner_are_owned() {
        let mut v = OWNED_MAGIC.to_vec();
        v.extend_from_slice(&[7u8; OWNER_LEN]);
        assert_eq!(owner_of(&v), Some([7u8; OWNER_LEN].as_slice()));
        v.extend_from_slice(b"rest");
        assert_eq!(owner_of(&v), Some([7u8; OWNER_LEN].as_slice()));
        assert_eq!(owner_of(&v[..OWNED_MAGIC.len() + OWNER_LEN - 1]), None);
        assert_eq!(owner_of(b"fxtk2xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"), None);
        assert_eq!(owner_of(b""), None);
        assert_eq!(owner_of(b"spent"), None);
    }
}
