//! The token application's shared model (docs/token.md; DESIGN.md "The token
//! application"), used alike by the endorsers that check and sign and by the wallets that
//! build requests and aggregate signatures. Pure: no I/O.
//!
//! - [`value`]: a token as stored (an owned value, indexed by owner in the committer)
//!   and its key;
//! - [`request`]: the client's signed token request and the settlement tx id it fixes;
//! - [`settlement`]: the settlement tx every endorser builds byte for byte from a request;
//! - [`check`]: what an endorser checks before it signs, stateless and against the
//!   committed state.

pub mod check;
pub mod namespace;
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

/// An address as text: lowercase hex of the public key.
pub fn address_to_hex(a: &Address) -> String {
    hex::encode(a)
}

/// Parses an address written as 64 hex digits.
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
