//! What an endorser checks before it signs (docs/token.md "Endorsement").
//!
//! [`check_request`] needs only the request, the endorser's policy and the time: shape,
//! expiry, the outputs' owners valid keys, the creator's signature, an issue's issuer, a
//! transfer's inputs distinct, quantities positive and sums without overflow.
//! [`check_inputs`] then takes the committed rows of the inputs: each exists, is unspent
//! (version 0, a token), is the token its key names (the key is a hash of the whole token,
//! so a row that claims another owner or quantity is caught here, whoever served it), is
//! owned by the creator, all inputs and outputs have one type, and the sums balance.

use crate::request::{Action, Request};
use crate::value::Token;
use crate::{Address, address_text};
use std::collections::HashSet;

pub use crate::rejection::{Reason, Rejection};

/// What an endorser enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The keys that may issue.
    pub issuers: Vec<Address>,
}

/// Whether `owner` is a valid Ed25519 public key (a token sent elsewhere could never be
/// spent: value burnt by a typo).
pub fn is_valid_owner(owner: &Address) -> bool {
    crypto::PublicKey::from_bytes(crypto::Scheme::Ed25519, owner).is_ok()
}

/// The stateless checks, at time `now` (seconds since the Unix epoch).
pub fn check_request(request: &Request, policy: &Policy, now: u64) -> Result<(), Rejection> {
    if request.outputs.is_empty() {
        return Err(Rejection::new(
            Reason::Malformed,
            "a request must create at least one token",
        ));
    }
    if request.expires_at < now {
        return Err(Rejection::new(
            Reason::Expired,
            format!(
                "the request expired {} s ago",
                now.saturating_sub(request.expires_at)
            ),
        ));
    }
    if request.expires_at.saturating_sub(now) > crate::request::MAX_VALIDITY_SECS {
        return Err(Rejection::new(
            Reason::Expired,
            format!(
                "the request is valid for {} s; endorsers accept at most {} s",
                request.expires_at.saturating_sub(now),
                crate::request::MAX_VALIDITY_SECS
            ),
        ));
    }
    if let Some(o) = request.outputs.iter().find(|o| !is_valid_owner(&o.owner)) {
        return Err(Rejection::new(
            Reason::BadOwner,
            format!(
                "output owner {} is not a valid public key",
                address_text(&o.owner)
            ),
        ));
    }
    let mut total: u64 = 0;
    for o in &request.outputs {
        if o.quantity == 0 {
            return Err(Rejection::new(Reason::Malformed, "an output of quantity 0"));
        }
        total = total
            .checked_add(o.quantity)
            .ok_or_else(|| Rejection::new(Reason::Malformed, "the outputs' sum overflows"))?;
    }
    match request.action {
        Action::Issue => {
            if !request.inputs.is_empty() {
                return Err(Rejection::new(Reason::Malformed, "an issue spends no inputs"));
            }
            if !policy.issuers.contains(&request.creator) {
                return Err(Rejection::new(
                    Reason::NotIssuer,
                    format!("{} is not an authorised issuer", address_text(&request.creator)),
                ));
            }
        }
        Action::Transfer => {
            if request.inputs.is_empty() {
                return Err(Rejection::new(
                    Reason::Malformed,
                    "a transfer spends at least one input",
                ));
            }
            let mut seen = HashSet::with_capacity(request.inputs.len());
            if !request.inputs.iter().all(|k| seen.insert(k)) {
                return Err(Rejection::new(Reason::Malformed, "an input is listed twice"));
            }
            let first = &request.outputs[0].token_type;
            if request.outputs.iter().any(|o| &o.token_type != first) {
                return Err(Rejection::new(
                    Reason::Unbalanced,
                    "outputs of more than one type",
                ));
            }
        }
    }
    request.verify_signature()
}

/// A committed row of an input: its value and version (`None`: absent).
pub type InputRow<'a> = Option<(&'a [u8], u64)>;

/// The checks against the committed state: `rows[i]` is input `i`'s row.
pub fn check_inputs(request: &Request, rows: &[InputRow<'_>]) -> Result<(), Rejection> {
    if request.action == Action::Issue {
        return Ok(());
    }
    if rows.len() != request.inputs.len() {
        return Err(Rejection::new(
            Reason::StateUnavailable,
            "not every input was read",
        ));
    }
    let mut sum: u64 = 0;
    let token_type = &request.outputs[0].token_type;
    for (key, row) in request.inputs.iter().zip(rows) {
        let name = String::from_utf8_lossy(key);
        let Some((value, version)) = row else {
            return Err(Rejection::new(
                Reason::UnknownInput,
                format!("input {name} does not exist"),
            ));
        };
        if *version != 0 || Token::decode(value).is_err() {
            return Err(Rejection::new(
                Reason::SpentInput,
                format!("input {name} was spent"),
            ));
        }
        let Some(token) = crate::value::verified(key, value) else {
            return Err(Rejection::new(
                Reason::StateUnavailable,
                format!("the row read for input {name} is not the token its key names"),
            ));
        };
        if token.owner != request.creator {
            return Err(Rejection::new(
                Reason::NotOwner,
                format!("input {name} belongs to {}", address_text(&token.owner)),
            ));
        }
        if &token.token_type != token_type {
            return Err(Rejection::new(
                Reason::Unbalanced,
                format!(
                    "input {name} is {:?}, the outputs {token_type:?}",
                    token.token_type
                ),
            ));
        }
        sum = sum
            .checked_add(token.quantity)
            .ok_or_else(|| Rejection::new(Reason::Malformed, "the inputs' sum overflows"))?;
    }
    let out = request
        .outputs
        .iter()
        .try_fold(0u64, |acc, o| acc.checked_add(o.quantity))
        .ok_or_else(|| Rejection::new(Reason::Malformed, "the outputs' sum overflows"))?;
    if sum != out {
        return Err(Rejection::new(
            Reason::Unbalanced,
            format!("inputs hold {sum}, outputs {out}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Output, unix_now};
    use crate::value::SPENT;

    fn key(name: &str) -> crypto::SigningKey {
        crypto::derive_signing_key(crypto::Scheme::Ed25519, name)
    }

    fn addr(k: &crypto::SigningKey) -> Address {
        k.public_key().as_bytes().try_into().unwrap()
    }

    fn payee() -> Address {
        addr(&key("payee"))
    }

    fn out(owner: Address, q: u64) -> Output {
        Output {
            owner,
            token_type: "EUR".into(),
            quantity: q,
        }
    }

    fn held(owner: Address, q: u64, index: u32) -> Token {
        Token {
            owner,
            token_type: "EUR".into(),
            quantity: q,
            tx_id: "t0".into(),
            index,
            sender: None,
        }
    }

    fn check(r: &Request, policy: &Policy) -> Result<(), Rejection> {
        check_request(r, policy, unix_now())
    }

    #[test]
    fn only_issuers_issue() {
        let (issuer, mallory) = (key("issuer"), key("mallory"));
        let policy = Policy {
            issuers: vec![addr(&issuer)],
        };
        let issue = |k: &crypto::SigningKey| {
            Request::new(
                Action::Issue,
                b"n".to_vec(),
                addr(k),
                vec![],
                vec![out(payee(), 10)],
            )
            .sign(k)
        };
        check(&issue(&issuer), &policy).unwrap();
        assert_eq!(
            check(&issue(&mallory), &policy).unwrap_err().reason,
            Reason::NotIssuer
        );
        // A request claiming the issuer's key but signed by another is refused.
        let mut forged = issue(&mallory);
        forged.creator = addr(&issuer);
        assert_eq!(check(&forged, &policy).unwrap_err().reason, Reason::BadSignature);
    }

    #[test]
    fn expired_too_long_lived_and_unspendable_outputs_are_refused() {
        let issuer = key("issuer");
        let policy = Policy {
            issuers: vec![addr(&issuer)],
        };
        let now = unix_now();
        let at = |expires: u64, owner: Address| {
            Request::new(
                Action::Issue,
                b"n".to_vec(),
                addr(&issuer),
                vec![],
                vec![out(owner, 1)],
            )
            .expiring_at(expires)
            .sign(&issuer)
        };
        check_request(&at(now, payee()), &policy, now).unwrap();
        let reason = |r: &Request| check_request(r, &policy, now).unwrap_err().reason;
        assert_eq!(reason(&at(now - 1, payee())), Reason::Expired);
        assert_eq!(
            reason(&at(now + crate::request::MAX_VALIDITY_SECS + 1, payee())),
            Reason::Expired
        );
        // Not a point of the curve: nobody could ever sign for it.
        let invalid = (0u8..=255)
            .map(|b| [b; 32])
            .find(|a| !is_valid_owner(a))
            .expect("some 32-byte string is not a point");
        assert_eq!(reason(&at(now + 60, invalid)), Reason::BadOwner);
    }

    #[test]
    fn transfers_must_balance_be_owned_unspent_and_what_their_keys_name() {
        let alice = key("alice");
        let a = addr(&alice);
        let policy = Policy { issuers: vec![] };
        let (t1, t2) = (held(a, 60, 0), held(a, 40, 1));
        let transfer = |outs: Vec<Output>| {
            Request::new(Action::Transfer, b"n".to_vec(), a, vec![t1.key(), t2.key()], outs).sign(&alice)
        };
        let r = transfer(vec![out(payee(), 30), out(a, 70)]);
        check(&r, &policy).unwrap();
        let (v1, v2) = (t1.encode(), t2.encode());
        check_inputs(&r, &[Some((&v1, 0)), Some((&v2, 0))]).unwrap();
        let reason = |rows: &[InputRow<'_>]| check_inputs(&r, rows).unwrap_err().reason;
        assert_eq!(reason(&[Some((&v1, 0)), None]), Reason::UnknownInput);
        assert_eq!(reason(&[Some((&v1, 0)), Some((SPENT, 1))]), Reason::SpentInput);
        assert_eq!(reason(&[Some((&v1, 0)), Some((&v2, 1))]), Reason::SpentInput);
        // A row that says the token is someone else's, or holds more, or another type: it
        // is not the token the key names, whoever served it.
        let mut lie = t2.clone();
        lie.owner = payee();
        let lie_owner = lie.encode();
        assert_eq!(
            reason(&[Some((&v1, 0)), Some((&lie_owner, 0))]),
            Reason::StateUnavailable
        );
        let mut lie = t2.clone();
        lie.quantity = 1_000;
        let lie_more = lie.encode();
        assert_eq!(
            reason(&[Some((&v1, 0)), Some((&lie_more, 0))]),
            Reason::StateUnavailable
        );
        // The real token of another owner under its own key.
        let bobs = held(payee(), 40, 1);
        let rb = Request::new(
            Action::Transfer,
            b"n".to_vec(),
            a,
            vec![t1.key(), bobs.key()],
            vec![out(a, 100)],
        )
        .sign(&alice);
        let vb = bobs.encode();
        assert_eq!(
            check_inputs(&rb, &[Some((&v1, 0)), Some((&vb, 0))])
                .unwrap_err()
                .reason,
            Reason::NotOwner
        );
        let less = held(a, 39, 1);
        let rl = Request::new(
            Action::Transfer,
            b"n".to_vec(),
            a,
            vec![t1.key(), less.key()],
            vec![out(a, 100)],
        )
        .sign(&alice);
        let vl = less.encode();
        assert_eq!(
            check_inputs(&rl, &[Some((&v1, 0)), Some((&vl, 0))])
                .unwrap_err()
                .reason,
            Reason::Unbalanced
        );
        let mut usd = t2.clone();
        usd.token_type = "USD".into();
        let ru = Request::new(
            Action::Transfer,
            b"n".to_vec(),
            a,
            vec![t1.key(), usd.key()],
            vec![out(a, 100)],
        )
        .sign(&alice);
        let vu = usd.encode();
        assert_eq!(
            check_inputs(&ru, &[Some((&v1, 0)), Some((&vu, 0))])
                .unwrap_err()
                .reason,
            Reason::Unbalanced
        );
    }

    #[test]
    fn zero_overflowing_and_duplicate_inputs_are_malformed() {
        let alice = key("alice");
        let a = addr(&alice);
        let policy = Policy { issuers: vec![a] };
        let zero = Request::new(Action::Issue, b"n".to_vec(), a, vec![], vec![out(a, 0)]).sign(&alice);
        assert_eq!(check(&zero, &policy).unwrap_err().reason, Reason::Malformed);
        let over = Request::new(
            Action::Issue,
            b"n".to_vec(),
            a,
            vec![],
            vec![out(a, u64::MAX), out(a, 1)],
        )
        .sign(&alice);
        assert_eq!(check(&over, &policy).unwrap_err().reason, Reason::Malformed);
        let dup = Request::new(
            Action::Transfer,
            b"n".to_vec(),
            a,
            vec![b"k".to_vec(), b"k".to_vec()],
            vec![out(a, 1)],
        )
        .sign(&alice);
        assert_eq!(check(&dup, &policy).unwrap_err().reason, Reason::Malformed);
        let none = Request::new(Action::Issue, b"n".to_vec(), a, vec![], vec![]).sign(&alice);
        assert_eq!(check(&none, &policy).unwrap_err().reason, Reason::Malformed);
        // Inputs whose sum overflows.
        let (b1, b2) = (held(a, u64::MAX, 0), held(a, u64::MAX, 1));
        let r = Request::new(
            Action::Transfer,
            b"n".to_vec(),
            a,
            vec![b1.key(), b2.key()],
            vec![out(a, 1)],
        )
        .sign(&alice);
        let (v1, v2) = (b1.encode(), b2.encode());
        assert_eq!(
            check_inputs(&r, &[Some((&v1, 0)), Some((&v2, 0))])
                .unwrap_err()
                .reason,
            Reason::Malformed
        );
    }
}
