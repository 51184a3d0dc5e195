//! The Arma consenter application (Arma §4.4; docs/consenter.md) on the BFT engine.
//!
//! The consenters order batch attestation fragments (BAFs) and complaints, never
//! payloads. Each BFT request is one [`Item`]; the state machine ([`ArmaState`]) counts
//! BAFs per `(shard, term, primary, seq)` and digest, turns f+1 of them into an ordered
//! block header, takes two primary-signed digests for one seq as equivocation, and f+1
//! complaints of a term as a term change. The headers of a decision are committed to by
//! its metadata, which the decision's quorum certificate signs ([`DecisionProof`],
//! ADR 0009).
//!
//! Pure: no tokio, disk or clock. The node shell persists [`ArmaState`] snapshots and
//! the [`Applied`] outcomes and serves them.
//!
//! * `request` — decoding and verifying BAFs and complaints.
//! * `state` — the state machine.
//! * `app` — the `bft::Application`.
//!
//! Headers, metadata and proofs live in the shared `arma` crate (re-exported here).

mod app;
mod config;
mod error;
mod request;
mod state;

pub use ::arma::{
    CertifiedConfig, ConfigChange, ConfigRules, ConfigView, DecisionProof, Metadata, OrderedHeader, Outcome,
    TermChange,
};
pub use app::{Applied, ArmaApp, Reconfig};
pub use config::{ArmaConfig, Knobs};
pub use error::{ArmaError, ArmaResult};
pub use request::{
    Item, PRIMARY_SIGNATURES, PrimarySignatures, decode, decode_verified, decode_verified_with, encode_baf,
    encode_complaint, encode_config_update,
};
pub use state::{ArmaState, ShardState};
