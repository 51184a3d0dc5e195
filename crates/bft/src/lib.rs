//! fabrx BFT consensus engine: a PBFT-family protocol that decides one sequence
//! number at a time (in the style of SmartBFT / BFT-SMaRt's Mod-SMaRt), written as a
//! pure state machine.
//!
//! * [`Replica::handle`] takes an [`Input`] (a client request, a peer message, or a
//!   clock tick) and returns [`Output`]s (persist, send, deliver). No I/O, no clock.
//! * [`Output::Persist`] entries must be made durable (see [`wal`]) before the
//!   outputs that follow them are executed.
//! * Decisions carry a commit certificate checked by [`verify_decision`].
//!
//! See `docs/bft.md` for the protocol description.

pub mod app;
pub mod certificate;
pub mod checkpoint;
mod codec;
pub mod crypto;
mod error;
pub mod membership;
pub mod messages;
pub mod replica;
#[cfg(feature = "shell")]
pub mod shell;
pub mod tags;
pub mod types;
pub mod wal;

pub use app::{Application, NullApp, ProposalContext};
pub use certificate::{Certificate, Decision, Phase, Prepared, verify_decision, vote_bytes};
pub use checkpoint::{CheckpointVote, StableCheckpoint, checkpoint_bytes};
pub use crypto::{Signature, Signer, Verifier};
pub use error::{Error, Result};
pub use membership::{Membership, set_chain};
pub use messages::{Message, NewView, ViewChange, Vote};
pub use replica::{Complaint, Counters, Input, Output, Refusal, Replica, Status};
pub use types::{
    ChainId, Config, Digest, EngineParams, InstanceId, MAX_MEMBERS, Members, MembersError, Proposal, Quorum,
    ReplicaId, Seq, View, proposal_digest,
};
pub use wal::{FileWal, MemWal, Wal, WalEntry};
