//! The envelope the fabrx process tests send to routers: tx `n` with the router tests'
//! structurally valid payload, unsigned (the generated networks' routers are open).

#[path = "../../../router/tests/common/mod.rs"]
mod router_common;

use prost::Message as _;
use wire::pb;

/// A structurally valid, unsigned envelope of tx `n`.
pub fn envelope(n: u64) -> Vec<u8> {
    pb::Envelope {
        signature: vec![],
        payload: router_common::payload(n),
        identity: Some(pb::Identity {
            msp_id: "org1".into(),
            creator: Some(pb::identity::Creator::CertificateId("alice".into())),
        }),
        tx_id: format!("tx-{n:08}"),
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
    .encode_to_vec()
}
