//! Decoding of envelopes and payloads for the structural checks of `types::check`.

mod direct;
mod envelope;

pub use direct::decode_tx;
pub use envelope::{CreatorRef, EnvelopeRef, IdentityRef, check_envelope_ref, decode_envelope};

use crate::pb;
use prost::Message;
use types::check::{CheckedPayload, EnvelopeParts, PayloadDecoder, PayloadKind, check_envelope};
use types::{NamespacePolicy, Status, Tx};

/// Protobuf decoder of payloads. `key_ok` decides whether a policy's public key is
/// usable (the committer passes a check backed by crate `crypto`); the default accepts
/// any non-empty key.
#[derive(Clone, Copy)]
pub struct ProstDecoder {
    /// Whether a policy's key parses for its scheme.
    pub key_ok: fn(&NamespacePolicy) -> bool,
}

impl Default for ProstDecoder {
    fn default() -> Self {
        ProstDecoder {
            key_ok: |p| !p.public_key.is_empty(),
        }
    }
}

impl PayloadDecoder for ProstDecoder {
    /// Straight into the domain type ([`decode_tx`]): the same outcome as
    /// `pb::Tx::decode` and the conversion, without the intermediate messages.
    fn decode_tx(&self, payload: &[u8]) -> Option<Tx> {
        decode_tx(payload)
    }

    fn decode_policy(&self, value: &[u8]) -> Option<NamespacePolicy> {
        let p: NamespacePolicy = pb::NamespacePolicy::decode(value).ok()?.try_into().ok()?;
        (self.key_ok)(&p).then_some(p)
    }

    fn decode_config(&self, payload: &[u8]) -> Option<NamespacePolicy> {
        let p: NamespacePolicy = pb::ConfigUpdate::decode(payload).ok()?.try_into().ok()?;
        (self.key_ok)(&p).then_some(p)
    }
}

/// Serialized form of a policy, as stored in a `_meta` row.
pub fn encode_policy(p: &NamespacePolicy) -> Vec<u8> {
    pb::NamespacePolicy::from(p).encode_to_vec()
}

/// The outcome of checking one raw envelope: its id (when it has one) and payload or status.
pub type EnvelopeCheck = (String, Result<CheckedPayload, Status>);

/// Decodes and structurally checks a raw envelope (101 when it does not decode).
pub fn check_envelope_bytes(raw: &[u8], dec: &ProstDecoder) -> EnvelopeCheck {
    let env = match pb::Envelope::decode(raw) {
        Ok(env) => env,
        Err(_) => return (String::new(), Err(Status::MalformedBadEnvelope)),
    };
    let outcome = check_decoded_envelope(&env, dec);
    (env.tx_id, outcome)
}

/// The MSP id of self-certified identities: the identity's certificate is the creator's
/// raw Ed25519 public key (32 bytes), as token wallets use it. An envelope in this MSP
/// must carry the creator's client-request signature over its payload; the committer's
/// intake checks it, and an envelope whose signature does not verify is
/// `MALFORMED_BAD_ENVELOPE`, never stored (docs/wire.md "Who can take an id").
pub const SELF_CERTIFIED_MSP: &str = "token";

/// The claimed creator key of an envelope in [`SELF_CERTIFIED_MSP`] (the certificate's
/// bytes, whatever their length: a wrong length fails the signature check), or `None`
/// for an envelope of any other MSP.
pub fn self_certified_key(env: &pb::Envelope) -> Option<&[u8]> {
    let id = env.identity.as_ref()?;
    if id.msp_id != SELF_CERTIFIED_MSP {
        return None;
    }
    Some(match &id.creator {
        Some(pb::identity::Creator::Certificate(c)) => c.as_slice(),
        _ => &[],
    })
}

/// Structurally checks a decoded envelope (`types::check::check_envelope` over its parts).
pub fn check_decoded_envelope(env: &pb::Envelope, dec: &ProstDecoder) -> Result<CheckedPayload, Status> {
    let creator = env
        .identity
        .as_ref()
        .map(|i| i.encode_to_vec())
        .unwrap_or_default();
    let kind = match pb::PayloadType::try_from(env.payload_type) {
        Ok(pb::PayloadType::Tx) => PayloadKind::Tx,
        Ok(pb::PayloadType::Config) => PayloadKind::Config,
        _ => PayloadKind::Unsupported(env.payload_type),
    };
    let parts = EnvelopeParts {
        kind,
        tx_id: &env.tx_id,
        nonce: &env.nonce,
        creator: &creator,
        payload: &env.payload,
        self_certified: self_certified_key(env).is_some(),
    };
    check_envelope(&parts, dec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use types::PolicyScheme;

    fn tx_bytes() -> Vec<u8> {
        let tx = pb::Tx {
            namespaces: vec![pb::TxNamespace {
                ns_id: "token".into(),
                ns_version: 0,
                reads_only: vec![],
                read_writes: vec![],
                blind_writes: vec![pb::Write {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                }],
            }],
            endorsements: vec![pb::Endorsements {
                endorsements_with_identity: vec![pb::EndorsementWithIdentity {
                    endorsement: vec![9; 64],
                    identity: None,
                }],
            }],
            metadata: vec![],
        };
        tx.encode_to_vec()
    }

    fn envelope(payload: Vec<u8>, kind: pb::PayloadType, id: &str) -> Vec<u8> {
        pb::Envelope {
            payload,
            signature: vec![],
            identity: None,
            tx_id: id.into(),
            nonce: vec![],
            payload_type: kind as i32,
        }
        .encode_to_vec()
    }

    #[test]
    fn decodes_and_checks() {
        let dec = ProstDecoder::default();
        let (id, out) = check_envelope_bytes(&envelope(tx_bytes(), pb::PayloadType::Tx, "t1"), &dec);
        assert_eq!(id, "t1");
        let CheckedPayload::Tx(tx) = out.unwrap() else {
            panic!("expected a tx")
        };
        assert_eq!(tx.namespaces[0].blind_writes[0].key, b"k");

        let cases: Vec<(Vec<u8>, Status)> = vec![
            (vec![0xff, 0xff, 0xff], Status::MalformedBadEnvelope),
            (
                envelope(tx_bytes(), pb::PayloadType::Unspecified, "t1"),
                Status::MalformedUnsupportedEnvelopePayload,
            ),
            (
                envelope(vec![0xff; 5], pb::PayloadType::Tx, "t1"),
                Status::MalformedBadEnvelopePayload,
            ),
            (
                envelope(vec![0xff; 5], pb::PayloadType::Config, "t1"),
                Status::MalformedConfigTxInvalid,
            ),
            (
                envelope(tx_bytes(), pb::PayloadType::Tx, ""),
                Status::MalformedMissingTxId,
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(check_envelope_bytes(&raw, &dec).1, Err(want));
        }
    }

    #[test]
    fn policy_round_trip() {
        let p = NamespacePolicy {
            scheme: PolicyScheme::EcdsaP256,
            public_key: vec![4; 33],
        };
        let dec = ProstDecoder::default();
        assert_eq!(dec.decode_policy(&encode_policy(&p)), Some(p));
        let unknown = pb::NamespacePolicy {
            scheme: "rsa".into(),
            public_key: vec![1],
        }
        .encode_to_vec();
        assert_eq!(dec.decode_policy(&unknown), None);
        let empty_key = pb::NamespacePolicy {
            scheme: "ed25519".into(),
            public_key: vec![],
        }
        .encode_to_vec();
        assert_eq!(dec.decode_policy(&empty_key), None);
    }
}
