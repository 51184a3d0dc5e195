//! The settlement tx: what a request becomes on the ledger.
//!
//! Every endorser builds it byte for byte from the request alone, so their partial
//! signatures over its endorsement bytes aggregate into one signature under the
//! namespace's group key. One namespace (the token namespace at its policy version):
//!
//! - for each input, a read-write at version 0 that writes [`SPENT`]: the input must be
//!   unspent when the tx's turn comes, and a second spend of it aborts
//!   `ABORTED_MVCC_CONFLICT`;
//! - for each output `i`, a read-write of the token's key (a hash of the whole token,
//!   which names the tx id and `i`) that requires the key to be absent and writes the
//!   token;
//! - metadata: the signed request, so an auditor can check who asked for what.

use crate::request::{Action, Request};
use crate::value::{SPENT, Token};
use prost::Message as _;
use types::{Endorsement, ReadWrite, Tx, TxId, TxNamespace};
use wire::pb;

/// A request's settlement tx, unendorsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// Its id (the request's).
    pub tx_id: TxId,
    /// The tx without endorsements.
    pub tx: Tx,
    /// The tokens it creates, in output order.
    pub outputs: Vec<Token>,
}

impl Settlement {
    /// The settlement tx of `request` in namespace `ns` at policy version `ns_version`.
    pub fn build(request: &Request, ns: &str, ns_version: u64) -> Settlement {
        let tx_id = request.tx_id();
        let sender = match request.action {
            Action::Issue => None,
            Action::Transfer => Some(request.creator),
        };
        let outputs: Vec<Token> = request
            .outputs
            .iter()
            .zip(0u32..)
            .map(|(o, index)| Token {
                owner: o.owner,
                token_type: o.token_type.clone(),
                quantity: o.quantity,
                tx_id: tx_id.clone(),
                index,
                sender,
            })
            .collect();
        let mut read_writes: Vec<ReadWrite> = request
            .inputs
            .iter()
            .map(|k| ReadWrite {
                key: k.clone(),
                version: Some(0),
                value: SPENT.to_vec(),
            })
            .collect();
        read_writes.extend(outputs.iter().map(|t| ReadWrite {
            key: t.key(),
            version: None,
            value: t.encode(),
        }));
        let tx = Tx {
            namespaces: vec![TxNamespace {
                ns_id: ns.into(),
                ns_version,
                reads_only: vec![],
                read_writes,
                blind_writes: vec![],
            }],
            endorsements: vec![vec![]],
            metadata: vec![request.to_pb().encode_to_vec()],
        };
        Settlement {
            tx_id: TxId(tx_id),
            tx,
            outputs,
        }
    }

    /// The bytes the namespace endorsement signs (each endorser's partial signature and
    /// the aggregate).
    pub fn endorsement_bytes(&self) -> Vec<u8> {
        types::endorsement::namespace_signing_bytes(&self.tx_id, &self.tx.namespaces[0], &self.tx.metadata)
    }

    /// The tx with the aggregate signature as its namespace endorsement.
    pub fn endorsed(&self, aggregate: &[u8]) -> Tx {
        let mut tx = self.tx.clone();
        tx.endorsements = vec![vec![Endorsement {
            signature: aggregate.to_vec(),
            msp_id: String::new(),
            identity: Vec::new(),
        }]];
        tx
    }
}

/// The envelope a wallet submits to the routers: the endorsed settlement tx under the
/// request's id, nonce and creator identity, signed by the creator (purpose
/// `ClientRequest`, over the payload).
pub fn envelope(
    request: &Request,
    settlement: &Settlement,
    aggregate: &[u8],
    key: &crypto::SigningKey,
) -> Vec<u8> {
    let payload = pb::Tx::from(&settlement.endorsed(aggregate)).encode_to_vec();
    let signature = crypto::sign_client_request(key, &payload).into_bytes();
    pb::Envelope {
        payload,
        signature,
        identity: Some(request.identity()),
        tx_id: settlement.tx_id.0.clone(),
        nonce: request.nonce.clone(),
        payload_type: pb::PayloadType::Tx as i32,
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Output;

    fn key() -> crypto::SigningKey {
        crypto::derive_signing_key(crypto::Scheme::Ed25519, "settlement-test")
    }

    fn transfer() -> Request {
        let k = key();
        let creator = k.public_key().as_bytes().try_into().unwrap();
        Request::new(
            Action::Transfer,
            b"n".to_vec(),
            creator,
            vec![b"in-1".to_vec(), b"in-2".to_vec()],
            vec![
                Output {
                    owner: crypto::derive_signing_key(crypto::Scheme::Ed25519, "payee")
                        .public_key()
                        .as_bytes()
                        .try_into()
                        .unwrap(),
                    token_type: "EUR".into(),
                    quantity: 3,
                },
                Output {
                    owner: creator,
                    token_type: "EUR".into(),
                    quantity: 4,
                },
            ],
        )
        .sign(&k)
    }

    #[test]
    fn every_builder_gets_the_same_bytes() {
        let r = transfer();
        let a = Settlement::build(&r, "token", 0);
        let b = Settlement::build(&r.clone(), "token", 0);
        assert_eq!(a, b);
        assert_eq!(a.endorsement_bytes(), b.endorsement_bytes());
        assert_ne!(
            a.endorsement_bytes(),
            Settlement::build(&r, "token", 1).endorsement_bytes()
        );
    }

    #[test]
    fn inputs_are_spent_at_version_zero_and_outputs_must_be_absent() {
        let s = Settlement::build(&transfer(), "token", 0);
        let rws = &s.tx.namespaces[0].read_writes;
        assert_eq!(rws.len(), 4);
        assert_eq!((rws[0].version, rws[0].value.as_slice()), (Some(0), SPENT));
        assert_eq!(rws[2].key, crate::token_key(&rws[2].value));
        assert_eq!(rws[2].version, None);
        let t = Token::decode(&rws[3].value).unwrap();
        assert_eq!((t.quantity, t.index, t.sender), (4, 1, Some(transfer().creator)));
    }

    #[test]
    fn the_envelope_passes_the_structural_checks_under_the_derived_id() {
        let r = transfer();
        let s = Settlement::build(&r, "token", 0);
        let env = envelope(&r, &s, &[1; 96], &key());
        let (id, outcome) = wire::check_envelope_bytes(&env, &wire::ProstDecoder::default());
        assert_eq!(id, s.tx_id.0);
        assert!(outcome.is_ok(), "{outcome:?}");
    }
}
