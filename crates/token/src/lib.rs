//! The token application's shared model (docs/token.md; docs/contracts.md "The token
//! application"), used alike by the endorsers that check and sign and by the wallets that
//! build requests and aggregate signatures. Pure: no I/O.
//!
//! - [`value`]: a token as stored (an owned value, indexed by owner in the committer)
//!   and its key;
//! - [`request`]: the client's signed token request and the settlement tx id it fixes;
//! - [`settlement`]: the settlement tx every endorser builds byte for byte from a request;
//! - [`check`]: what an endorser checks before it signs, stateless and against the
//!   committed state;
//! - [`read`]: signed reads: who may read whose tokens from a query service.

pub mod check;
pub mod namespace;
pub mod read;
pub mod rejection;
pub mod request;
pub mod settlement;
pub mod value;

pub use check::{Policy, Reason, Rejection, check_inputs, check_request};
pub use request::{Action, Output, Request};
pub use settlement::{Settlement, envelope};
pub use value::{SPENT, Token, token_key};

/// The namespace of the token application in a network that `fabrx up` creates.
pub const DEFAULT_NAMESPACE: &str = "token";

/// Most inputs a request may spend.
pub const MAX_INPUTS: usize = 64;
/// Most outputs a request may create.
pub const MAX_OUTPUTS: usize = 64;
/// Longest token type name, in bytes.
pub const MAX_TYPE_LEN: usize = 64;
/// Length of an owner's (Ed25519) public key.
pub const KEY_LEN: usize = types::owned::OWNER_LEN;

/// An Ed25519 public key of a token owner or issuer.
pub type Address = [u8; KEY_LEN];

/// A public key as lowercase hex (configuration files; no checksum).
pub fn address_to_hex(a: &Address) -> String {
    hex::encode(a)
}

/// Length of an address as people write it: 64 hex digits of the key, 8 of the checksum.
pub const ADDRESS_TEXT_LEN: usize = 72;

fn checksum(a: &Address) -> [u8; 4] {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(types::tags::ADDRESS);
    h.update(a);
    let d = h.finalize();
    [d[0], d[1], d[2], d[3]]
}

/// An address as people write it: the key's 64 hex digits and 8 of a checksum
/// (`SHA-256("fabrx/address/v1" ‖ key)`), so a mistyped address is refused instead of
/// paid (docs/token.md "Addresses").
pub fn address_text(a: &Address) -> String {
    let mut s = hex::encode(a);
    s.push_str(&hex::encode(checksum(a)));
    s
}

/// Parses an address as people write it ([`address_text`]): 72 hex digits whose
/// checksum matches, naming a valid public key.
pub fn parse_address(text: &str) -> Result<Address, Rejection> {
    let t = text.trim();
    let bad = |why: &str| Rejection::new(Reason::Malformed, format!("address {t:?}: {why}"));
    if t.len() != ADDRESS_TEXT_LEN {
        return Err(bad(&format!(
            "{} characters; an address is {ADDRESS_TEXT_LEN} hex digits (`fabrx wallet address`)",
            t.len()
        )));
    }
    let bytes = hex::decode(t).map_err(|_| bad("not hex"))?;
    let (key, sum) = bytes.split_at(KEY_LEN);
    let key: Address = key.try_into().map_err(|_| bad("too short"))?;
    if sum != checksum(&key) {
        return Err(bad("the checksum does not match (a mistyped address?)"));
    }
    if !check::is_valid_owner(&key) {
        return Err(bad("not a valid public key"));
    }
    Ok(key)
}

/// Parses a raw public key written as 64 hex digits (configuration files; no checksum).
pub fn address_from_hex(text: &str) -> Result<Address, Rejection> {
    let bytes = hex::decode(text.trim())
        .map_err(|e| Rejection::new(Reason::Malformed, format!("address {text:?} is not hex: {e}")))?;
    bytes.as_slice().try_into().map_err(|_| {
        Rejection::new(
            Reason::Malformed,
            format!("address {text:?} is {} bytes, not {KEY_LEN}", bytes.len()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_round_trips_and_a_typo_is_refused() {
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, "address-test");
        let a: Address = key.public_key().as_bytes().try_into().unwrap();
        let text = address_text(&a);
        assert_eq!(text.len(), ADDRESS_TEXT_LEN);
        assert_eq!(parse_address(&text), Ok(a));
        for i in 0..text.len() {
            let mut typo = text.clone().into_bytes();
            typo[i] = if typo[i] == b'0' { b'1' } else { b'0' };
            let typo = String::from_utf8(typo).unwrap();
            assert!(parse_address(&typo).is_err(), "a typo at {i} is caught");
        }
        assert!(parse_address(&address_to_hex(&a)).is_err(), "no checksum");
        assert!(parse_address("not-an-address").is_err());
    }
}
