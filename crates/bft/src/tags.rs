//! Domain-separation tags. Every hashed or signed byte string of the engine starts with
//! one of these, so a signature made for one purpose can never be replayed for another.
//! The values live with every other fabrx tag in `types::tags`.

pub use ::types::tags::bft::{
    CHECKPOINT, COMMIT, PREFIX, PREPARE, PROPOSAL, REQUEST, SET_CHAIN, SNAPSHOT, VIEW_CHANGE,
};
