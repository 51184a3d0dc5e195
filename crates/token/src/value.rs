//! A token as stored in the committed state.
//!
//! Its value is an *owned value* (`types::owned`), so the committer indexes it by owner:
//!
//! ```text
//! "fxtk1" ‖ owner (32) ‖ u64be(quantity) ‖ u16be(len type) ‖ type
//!         ‖ u16be(len tx id) ‖ tx id ‖ u32be(index) ‖ u8(has sender) [‖ sender (32)]
//! ```
//!
//! The tx id, index and sender (the creator of a transfer; none for an issue) make each
//! token self-describing: a wallet learns from the committed state alone who paid it, in
//! which tx. A spent token's row holds [`SPENT`], which is not an owned value, so it
//! leaves its owner's index in the same commit that spends it.
//!
//! The key of a token is a hash of its whole value:
//! `hex SHA-256("fabrx/token/v2" ‖ value)` ([`token_key`]; ADR 0013). The value names the
//! creating tx and the output index, so two tokens never share a key; and because the key
//! binds owner, type and quantity, a row read from anyone (a query service, a peer) is
//! checked against the key it was asked for ([`verified`]): nobody can answer that a
//! token belongs to someone else or holds more than it does. The committer checks that
//! the key exists unspent (version 0) when a settlement spends it, so the content an
//! endorser checked is the content spent.

use crate::{Address, KEY_LEN, MAX_TYPE_LEN};
use sha2::{Digest, Sha256};
use types::owned::OWNED_MAGIC;

/// The value a spent token's row holds (written by the settlement tx that spends it).
pub const SPENT: &[u8] = b"fabrx-token-spent";

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Its owner.
    pub owner: Address,
    /// Its type (e.g. a currency code).
    pub token_type: String,
    /// How much.
    pub quantity: u64,
    /// The tx that created it.
    pub tx_id: String,
    /// Its output index in that tx.
    pub index: u32,
    /// Who paid it (the transfer's creator); `None` for an issued token.
    pub sender: Option<Address>,
}

/// The key of the token stored as `value`: `hex SHA-256("fabrx/token/v2" ‖ value)`.
pub fn token_key(value: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(types::tags::TOKEN_KEY);
    h.update(value);
    hex::encode(h.finalize()).into_bytes()
}

/// The token a row holds when the row is what `key` names: the value decodes as a token
/// and hashes to `key`. `None` for anything else (a spent marker, another token's value,
/// a forged one).
pub fn verified(key: &[u8], value: &[u8]) -> Option<Token> {
    if token_key(value) != key {
        return None;
    }
    Token::decode(value).ok()
}

/// Why a stored value is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a token value: {0}")]
pub struct NotAToken(pub &'static str);

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], NotAToken> {
        if self.buf.len() < n {
            return Err(NotAToken("truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], NotAToken> {
        self.take(N)?.try_into().map_err(|_| NotAToken("truncated"))
    }

    fn short_text(&mut self, max: usize) -> Result<String, NotAToken> {
        let len = usize::from(u16::from_be_bytes(self.array()?));
        if len > max {
            return Err(NotAToken("text too long"));
        }
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| NotAToken("text not UTF-8"))
    }
}

impl Token {
    /// The stored value.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(96 + self.token_type.len() + self.tx_id.len());
        out.extend_from_slice(OWNED_MAGIC);
        out.extend_from_slice(&self.owner);
        out.extend_from_slice(&self.quantity.to_be_bytes());
        put_short(&mut out, self.token_type.as_bytes());
        put_short(&mut out, self.tx_id.as_bytes());
        out.extend_from_slice(&self.index.to_be_bytes());
        match &self.sender {
            None => out.push(0),
            Some(s) => {
                out.push(1);
                out.extend_from_slice(s);
            }
        }
        out
    }

    /// Decodes a stored value; every byte must be accounted for.
    pub fn decode(value: &[u8]) -> Result<Token, NotAToken> {
        let mut r = Reader { buf: value };
        if r.take(OWNED_MAGIC.len())? != OWNED_MAGIC {
            return Err(NotAToken("no token magic"));
        }
        let owner: Address = r.array()?;
        let quantity = u64::from_be_bytes(r.array()?);
        let token_type = r.short_text(MAX_TYPE_LEN)?;
        let tx_id = r.short_text(types::txid::MAX_TX_ID_LEN)?;
        let index = u32::from_be_bytes(r.array()?);
        let sender = match r.array::<1>()?[0] {
            0 => None,
            1 => Some(r.array::<KEY_LEN>()?),
            _ => return Err(NotAToken("bad sender flag")),
        };
        if !r.buf.is_empty() {
            return Err(NotAToken("trailing bytes"));
        }
        Ok(Token {
            owner,
            token_type,
            quantity,
            tx_id,
            index,
            sender,
        })
    }

    /// Its key in the token namespace (a hash of its whole value).
    pub fn key(&self) -> Vec<u8> {
        token_key(&self.encode())
    }
}

fn put_short(out: &mut Vec<u8>, b: &[u8]) {
    // Callers bound the lengths (type ≤ 64, tx id ≤ 256 bytes).
    let len = u16::try_from(b.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&b[..usize::from(len)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(sender: Option<Address>) -> Token {
        Token {
            owner: [3; 32],
            token_type: "EUR".into(),
            quantity: 1000,
            tx_id: "ab12".into(),
            index: 2,
            sender,
        }
    }

    #[test]
    fn a_token_round_trips_and_is_an_owned_value_of_its_owner() {
        for t in [token(None), token(Some([9; 32]))] {
            let v = t.encode();
            assert_eq!(Token::decode(&v), Ok(t.clone()));
            assert_eq!(types::owned::owner_of(&v), Some([3u8; 32].as_slice()));
        }
        assert_eq!(types::owned::owner_of(SPENT), None);
    }

    #[test]
    fn truncated_or_padded_values_are_not_tokens() {
        let v = token(Some([9; 32])).encode();
        for cut in 0..v.len() {
            assert!(Token::decode(&v[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = v.clone();
        long.push(0);
        assert!(Token::decode(&long).is_err());
        assert!(Token::decode(SPENT).is_err());
    }

    #[test]
    fn a_key_is_the_hash_of_the_whole_token() {
        let t = token(None);
        let mut h = Sha256::new();
        h.update(b"fabrx/token/v2");
        h.update(t.encode());
        assert_eq!(t.key(), hex::encode(h.finalize()).into_bytes());
        // Every field is bound: another owner, quantity, type, index or sender is another key.
        let mut variants = vec![t.clone(); 5];
        variants[0].owner = [4; 32];
        variants[1].quantity += 1;
        variants[2].token_type = "USD".into();
        variants[3].index = 3;
        variants[4].sender = Some([9; 32]);
        for v in &variants {
            assert_ne!(v.key(), t.key(), "{v:?}");
        }
    }

    #[test]
    fn a_row_is_verified_against_the_key_it_was_read_for() {
        let t = token(Some([9; 32]));
        assert_eq!(verified(&t.key(), &t.encode()), Some(t.clone()));
        let mut lie = t.clone();
        lie.owner = [7; 32];
        assert_eq!(verified(&t.key(), &lie.encode()), None, "another owner");
        lie = t.clone();
        lie.quantity = 1_000_000;
        assert_eq!(verified(&t.key(), &lie.encode()), None, "more value");
        assert_eq!(verified(&t.key(), SPENT), None);
        assert_eq!(verified(&token_key(SPENT), SPENT), None, "not a token");
    }
}
