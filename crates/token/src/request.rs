//! The client's signed token request.
//!
//! Signing bytes (signed by the creator under the crypto purpose `ClientRequest`):
//!
//! ```text
//! "fabrx/token-request/v2" ‖ u8(action) ‖ bytes(nonce) ‖ creator (32)
//!   ‖ u64be(expires_at)
//!   ‖ u32be(#inputs)  ‖ for each: bytes(key)
//!   ‖ u32be(#outputs) ‖ for each: owner (32) ‖ bytes(type) ‖ u64be(quantity)
//! ```
//! where `bytes(x) = u32be(len x) ‖ x` and `expires_at` is in seconds since the Unix
//! epoch: no endorser signs a request after it (nor one valid for more than
//! [`MAX_VALIDITY_SECS`]).
//!
//! The settlement tx's id follows the tx id rule of self-certified creators (docs/wire.md)
//! over the nonce and the creator's identity `Identity { msp_id: "token", certificate:
//! creator }`: `fxs1-` and 64 hex digits. The id alone does not protect it: an endorser
//! sees the nonce before the wallet submits. What does is the committer's rule for
//! reserved ids (docs/wire.md "Who can take an id"): any envelope that carries such an id
//! without being its creator's nonce-derived envelope signed by the creator over the
//! payload is `MALFORMED_BAD_ENVELOPE`, which is never stored, so only the creator's own
//! envelope can decide its id.

use crate::rejection::{Reason, Rejection};
use crate::{Address, KEY_LEN, MAX_INPUTS, MAX_OUTPUTS, MAX_TYPE_LEN};
use prost::Message as _;
use wire::pb;

/// The MSP id of token identities.
pub const TOKEN_MSP: &str = "token";

/// Length of a token key (64 hex digits of a SHA-256).
pub const INPUT_KEY_LEN: usize = 64;

/// Longest nonce, in bytes.
pub const MAX_NONCE_LEN: usize = 64;

/// Longest validity an endorser accepts: `expires_at` at most this far in the future.
pub const MAX_VALIDITY_SECS: u64 = 3600;

/// The validity a wallet gives its requests by default.
pub const DEFAULT_VALIDITY_SECS: u64 = 600;

/// Seconds since the Unix epoch, by this machine's clock.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// An authorised issuer creates tokens.
    Issue,
    /// An owner spends tokens into new ones.
    Transfer,
}

/// One token a request creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Its owner.
    pub owner: Address,
    /// Its type.
    pub token_type: String,
    /// How much.
    pub quantity: u64,
}

/// A token request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Issue or transfer.
    pub action: Action,
    /// A fresh random nonce (fixes the tx id).
    pub nonce: Vec<u8>,
    /// The creator's public key.
    pub creator: Address,
    /// No endorser signs the request after this time (seconds since the Unix epoch).
    pub expires_at: u64,
    /// Keys of the tokens spent.
    pub inputs: Vec<Vec<u8>>,
    /// Tokens created.
    pub outputs: Vec<Output>,
    /// The creator's signature over [`Request::signing_bytes`].
    pub signature: Vec<u8>,
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(b);
}

fn malformed(detail: impl Into<String>) -> Rejection {
    Rejection::new(Reason::Malformed, detail)
}

fn key_of(bytes: &[u8], what: &str) -> Result<Address, Rejection> {
    bytes
        .try_into()
        .map_err(|_| malformed(format!("{what} is {} bytes, not {KEY_LEN}", bytes.len())))
}

impl Request {
    /// An unsigned request expiring [`DEFAULT_VALIDITY_SECS`] from now (sign it with
    /// [`Request::sign`]; another expiry: [`Request::expiring_at`]).
    pub fn new(
        action: Action,
        nonce: Vec<u8>,
        creator: Address,
        inputs: Vec<Vec<u8>>,
        outputs: Vec<Output>,
    ) -> Request {
        Request {
            action,
            nonce,
            creator,
            expires_at: unix_now().saturating_add(DEFAULT_VALIDITY_SECS),
            inputs,
            outputs,
            signature: Vec::new(),
        }
    }

    /// The same request expiring at `expires_at` (unsigned: sign it after).
    pub fn expiring_at(mut self, expires_at: u64) -> Request {
        self.expires_at = expires_at;
        self.signature.clear();
        self
    }

    /// The bytes the creator signs.
    pub fn signing_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + 80 * self.outputs.len() + 72 * self.inputs.len());
        out.extend_from_slice(types::tags::TOKEN_REQUEST);
        out.push(match self.action {
            Action::Issue => 1,
            Action::Transfer => 2,
        });
        put_bytes(&mut out, &self.nonce);
        out.extend_from_slice(&self.creator);
        out.extend_from_slice(&self.expires_at.to_be_bytes());
        out.extend_from_slice(&u32::try_from(self.inputs.len()).unwrap_or(u32::MAX).to_be_bytes());
        for k in &self.inputs {
            put_bytes(&mut out, k);
        }
        out.extend_from_slice(
            &u32::try_from(self.outputs.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        for o in &self.outputs {
            out.extend_from_slice(&o.owner);
            put_bytes(&mut out, o.token_type.as_bytes());
            out.extend_from_slice(&o.quantity.to_be_bytes());
        }
        out
    }

    /// Signs the request with the creator's key (which must be `creator`'s).
    pub fn sign(mut self, key: &crypto::SigningKey) -> Request {
        self.signature = crypto::sign_client_request(key, &self.signing_bytes()).into_bytes();
        self
    }

    /// Whether the creator's signature verifies.
    pub fn verify_signature(&self) -> Result<(), Rejection> {
        let key = crypto::PublicKey::from_bytes(crypto::Scheme::Ed25519, &self.creator)
            .map_err(|e| Rejection::new(Reason::BadSignature, format!("creator key: {e}")))?;
        let sig = crypto::Signature::from_bytes(self.signature.clone());
        crypto::verify_client_request(&key, &self.signing_bytes(), &sig)
            .map_err(|e| Rejection::new(Reason::BadSignature, format!("creator's signature: {e}")))
    }

    /// The creator's identity as the envelope carries it.
    pub fn identity(&self) -> pb::Identity {
        identity_of(&self.creator)
    }

    /// The settlement tx's id: the tx id rule of self-certified creators over the nonce
    /// and the creator's identity (`fxs1-` and 64 hex digits).
    pub fn tx_id(&self) -> String {
        types::txid::derive_self_certified_tx_id(&self.nonce, &self.identity().encode_to_vec())
    }

    /// The request as the wire carries it.
    pub fn to_pb(&self) -> pb::TokenRequest {
        pb::TokenRequest {
            action: match self.action {
                Action::Issue => pb::TokenAction::Issue as i32,
                Action::Transfer => pb::TokenAction::Transfer as i32,
            },
            nonce: self.nonce.clone(),
            creator: self.creator.to_vec(),
            expires_at: self.expires_at,
            inputs: self.inputs.clone(),
            outputs: self
                .outputs
                .iter()
                .map(|o| pb::TokenOutput {
                    owner: o.owner.to_vec(),
                    token_type: o.token_type.clone(),
                    quantity: o.quantity,
                })
                .collect(),
            signature: self.signature.clone(),
        }
    }

    /// A request from the wire, with its shape checked (lengths, counts; not the
    /// signature or the state).
    pub fn from_pb(p: &pb::TokenRequest) -> Result<Request, Rejection> {
        let action = match pb::TokenAction::try_from(p.action) {
            Ok(pb::TokenAction::Issue) => Action::Issue,
            Ok(pb::TokenAction::Transfer) => Action::Transfer,
            _ => return Err(malformed(format!("unknown action {}", p.action))),
        };
        if p.nonce.is_empty() || p.nonce.len() > MAX_NONCE_LEN {
            return Err(malformed(format!(
                "nonce of {} bytes (1 to {MAX_NONCE_LEN})",
                p.nonce.len()
            )));
        }
        if p.inputs.len() > MAX_INPUTS || p.outputs.len() > MAX_OUTPUTS {
            return Err(malformed(format!(
                "{} inputs and {} outputs (at most {MAX_INPUTS} and {MAX_OUTPUTS})",
                p.inputs.len(),
                p.outputs.len()
            )));
        }
        if let Some(k) = p.inputs.iter().find(|k| k.len() != INPUT_KEY_LEN) {
            return Err(malformed(format!(
                "an input key of {} bytes; a token key is {INPUT_KEY_LEN} hex digits",
                k.len()
            )));
        }
        let outputs = p
            .outputs
            .iter()
            .map(|o| {
                Ok(Output {
                    owner: key_of(&o.owner, "an output's owner")?,
                    token_type: o.token_type.clone(),
                    quantity: o.quantity,
                })
            })
            .collect::<Result<Vec<_>, Rejection>>()?;
        for o in &outputs {
            if o.token_type.is_empty() || o.token_type.len() > MAX_TYPE_LEN {
                return Err(malformed(format!(
                    "token type {:?}: 1 to {MAX_TYPE_LEN} bytes",
                    o.token_type
                )));
            }
        }
        Ok(Request {
            action,
            nonce: p.nonce.clone(),
            creator: key_of(&p.creator, "the creator")?,
            expires_at: p.expires_at,
            inputs: p.inputs.clone(),
            outputs,
            signature: p.signature.clone(),
        })
    }
}

/// The identity a token key speaks as in envelopes.
pub fn identity_of(key: &Address) -> pb::Identity {
    pb::Identity {
        msp_id: TOKEN_MSP.into(),
        creator: Some(pb::identity::Creator::Certificate(key.to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> crypto::SigningKey {
        crypto::derive_signing_key(crypto::Scheme::Ed25519, "token-request-test")
    }

    fn addr(k: &crypto::SigningKey) -> Address {
        k.public_key().as_bytes().try_into().unwrap()
    }

    fn request() -> Request {
        let k = key();
        Request::new(
            Action::Transfer,
            b"nonce-1".to_vec(),
            addr(&k),
            vec![vec![b'a'; 64]],
            vec![Output {
                owner: [5; 32],
                token_type: "EUR".into(),
                quantity: 7,
            }],
        )
        .sign(&k)
    }

    #[test]
    fn a_signed_request_verifies_and_round_trips() {
        let r = request();
        r.verify_signature().unwrap();
        assert_eq!(Request::from_pb(&r.to_pb()).unwrap(), r);
        assert_eq!(r.tx_id().len(), 69);
        assert!(r.tx_id().starts_with(types::txid::SELF_CERTIFIED_ID_PREFIX));
    }

    #[test]
    fn any_change_breaks_the_signature() {
        let r = request();
        let mut more = r.clone();
        more.outputs[0].quantity = 8;
        assert!(more.verify_signature().is_err());
        let mut other_input = r.clone();
        other_input.inputs[0] = b"k2".to_vec();
        assert!(other_input.verify_signature().is_err());
        let mut issue = r.clone();
        issue.action = Action::Issue;
        assert!(issue.verify_signature().is_err());
        let mut nonce = r.clone();
        nonce.nonce = b"nonce-2".to_vec();
        assert!(nonce.verify_signature().is_err());
        let mut later = r;
        later.expires_at += 1;
        assert!(later.verify_signature().is_err());
    }

    #[test]
    fn ill_formed_requests_are_malformed() {
        let good = request().to_pb();
        let mut p = good.clone();
        p.action = 9;
        assert_eq!(Request::from_pb(&p).unwrap_err().reason, Reason::Malformed);
        let mut p = good.clone();
        p.creator = vec![1; 31];
        assert_eq!(Request::from_pb(&p).unwrap_err().reason, Reason::Malformed);
        let mut p = good.clone();
        p.nonce.clear();
        assert_eq!(Request::from_pb(&p).unwrap_err().reason, Reason::Malformed);
        let mut p = good.clone();
        p.outputs[0].token_type = "x".repeat(65);
        assert_eq!(Request::from_pb(&p).unwrap_err().reason, Reason::Malformed);
        let mut p = good.clone();
        p.inputs = vec![vec![1; 65]];
        assert_eq!(Request::from_pb(&p).unwrap_err().reason, Reason::Malformed);
        let mut p = good;
        p.inputs = vec![vec![1]; MAX_INPUTS + 1];
        assert_eq!(Request::from_pb(&p).unwrap_err().reason, Reason::Malformed);
    }
}
