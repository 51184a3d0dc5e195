//! The endorser's deciding logic: pure, no I/O.

use crypto::{KeyShare, PartialSignature, ThresholdPublicKeys};
use token::check::InputRow;
use token::{Policy, Rejection, Request, Settlement, check_inputs, check_request};

/// An endorsement: the settlement tx id and this share's partial signature over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endorsement {
    /// The settlement tx id.
    pub tx_id: String,
    /// The partial signature.
    pub partial: PartialSignature,
}

/// One endorser's share, namespace and policy.
#[derive(Debug, Clone)]
pub struct EndorserCore {
    share: KeyShare,
    namespace: String,
    ns_version: u64,
    policy: Policy,
}

impl EndorserCore {
    /// An endorser holding `share` of the group `public`, which must be the share's
    /// (checked: the share's key is the set's key at its index).
    pub fn new(
        share: KeyShare,
        public: &ThresholdPublicKeys,
        namespace: String,
        ns_version: u64,
        policy: Policy,
    ) -> Result<EndorserCore, String> {
        let expected = public
            .share_public_key(share.index())
            .map_err(|e| format!("share {}: {e}", share.index()))?;
        if *expected != share.public_key() {
            return Err(format!(
                "share {} does not belong to the namespace's threshold key set",
                share.index()
            ));
        }
        if !types::check::is_valid_namespace_id(&namespace) {
            return Err(format!("namespace {namespace:?} is not a valid namespace id"));
        }
        Ok(EndorserCore {
            share,
            namespace,
            ns_version,
            policy,
        })
    }

    /// The namespace it endorses.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Its share index (1..n).
    pub fn index(&self) -> u32 {
        self.share.index()
    }

    /// The stateless checks at time `now` (seconds since the Unix epoch: shape, expiry,
    /// issuer, the creator's signature); on success the request as checked, whose inputs'
    /// committed rows [`EndorserCore::endorse`] needs.
    pub fn prepare(&self, request: &Request, now: u64) -> Result<Prepared, Rejection> {
        check_request(request, &self.policy, now)?;
        Ok(Prepared {
            request: request.clone(),
        })
    }

    /// The checks against the inputs' committed rows (`rows[i]` for input `i`; each row
    /// is checked against its key, so it may come from any source), then the partial
    /// signature over the settlement tx.
    pub fn endorse(&self, prepared: &Prepared, rows: &[InputRow<'_>]) -> Result<Endorsement, Rejection> {
        let request = &prepared.request;
        check_inputs(request, rows)?;
        let settlement = Settlement::build(request, &self.namespace, self.ns_version);
        let partial =
            crypto::sign_namespace_endorsement_partial(&self.share, &settlement.endorsement_bytes());
        Ok(Endorsement {
            tx_id: settlement.tx_id.0,
            partial,
        })
    }
}

/// A request that passed [`EndorserCore::prepare`]: only `prepare` makes one, so
/// [`EndorserCore::endorse`] never signs a request whose stateless checks did not pass.
#[derive(Debug, Clone)]
pub struct Prepared {
    request: Request,
}

impl Prepared {
    /// The keys of the inputs, whose committed rows the endorsement needs, in order.
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.request.inputs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use token::{Action, Output, Reason, Token};

    fn addr(k: &crypto::SigningKey) -> token::Address {
        k.public_key().as_bytes().try_into().unwrap()
    }

    #[test]
    fn t_endorsers_make_a_signature_the_group_key_verifies() {
        let set = crypto::deal_threshold_keys(3, 5, "endorser-core").unwrap();
        let issuer = crypto::derive_signing_key(crypto::Scheme::Ed25519, "issuer");
        let alice = crypto::derive_signing_key(crypto::Scheme::Ed25519, "alice");
        let policy = Policy {
            issuers: vec![addr(&issuer)],
        };
        let cores: Vec<EndorserCore> = set
            .shares
            .iter()
            .map(|s| EndorserCore::new(s.clone(), &set.public, "token".into(), 0, policy.clone()).unwrap())
            .collect();
        let held = Token {
            owner: addr(&alice),
            token_type: "EUR".into(),
            quantity: 10,
            tx_id: "t0".into(),
            index: 0,
            sender: None,
        };
        let request = Request::new(
            Action::Transfer,
            b"n".to_vec(),
            addr(&alice),
            vec![held.key()],
            vec![Output {
                owner: addr(&issuer),
                token_type: "EUR".into(),
                quantity: 10,
            }],
        )
        .sign(&alice);
        let value = held.encode();
        let partials: Vec<_> = cores[1..4]
            .iter()
            .map(|c| {
                c.endorse(
                    &c.prepare(&request, token::request::unix_now()).unwrap(),
                    &[Some((&value, 0))],
                )
                .unwrap()
                .partial
            })
            .collect();
        let sig = crypto::aggregate_partials(&set.public, &partials).unwrap();
        let bytes = Settlement::build(&request, "token", 0).endorsement_bytes();
        crypto::verify_namespace_endorsement(set.public.group_public_key(), &bytes, &sig).unwrap();
        // Two shares are not enough.
        assert!(crypto::aggregate_partials(&set.public, &partials[..2]).is_err());
        // A spent input is refused by every endorser.
        let e = cores[0]
            .endorse(
                &cores[0].prepare(&request, token::request::unix_now()).unwrap(),
                &[Some((token::SPENT, 1))],
            )
            .unwrap_err();
        assert_eq!(e.reason, Reason::SpentInput);
    }

    #[test]
    fn a_share_of_another_set_is_refused() {
        let a = crypto::deal_threshold_keys(3, 5, "set-a").unwrap();
        let b = crypto::deal_threshold_keys(3, 5, "set-b").unwrap();
        let policy = Policy { issuers: vec![] };
        assert!(
            EndorserCore::new(a.shares[0].clone(), &b.public, "token".into(), 0, policy.clone()).is_err()
        );
        assert!(EndorserCore::new(a.shares[0].clone(), &a.public, "Bad NS".into(), 0, policy).is_err());
    }
}
