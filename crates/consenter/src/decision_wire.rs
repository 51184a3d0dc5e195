//! A consenter decision on the wire: what a consenter serves ([`to_pb_decision`]); the
//! receivers' side (conversions and [`verify_pb_decision`]) lives in the shared `arma`
//! crate so batchers and assemblers check decisions without depending on this crate.

use wire::pb;

use crate::application::Applied;

pub use arma::{DecisionWireError, VerifiedDecision, verify_pb_decision};

/// What a consenter serves for decision `decision`, whose application outcome is
/// `applied`: the certificate's signatures come from the decision the engine delivered.
pub fn to_pb_decision(applied: &Applied, decision: &bft::Decision) -> pb::Decision {
    pb::Decision {
        headers: applied
            .outcome
            .headers
            .iter()
            .map(pb::OrderedHeader::from)
            .collect(),
        signatures: decision
            .certificate
            .signatures
            .iter()
            .map(|(signer, sig)| pb::ConsenterSignature {
                signer: *signer,
                signature: sig.0.clone(),
            })
            .collect(),
        number: applied.decision,
        view: decision.certificate.view,
        requests_root: applied.requests_root.to_vec(),
        metadata: applied.metadata.clone(),
        terms: applied.outcome.terms.iter().map(pb::TermChange::from).collect(),
        config: applied
            .outcome
            .config
            .as_ref()
            .map(|c| c.config.clone())
            .unwrap_or_default(),
    }
}
