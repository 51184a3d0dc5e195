//! Domain-separation tags. Every hashed or signed byte string of the engine starts with
//! one of these, so a signature made for one purpose can never be replayed for another.

/// Prefix shared by all tags of this engine.
pub const PREFIX: &[u8] = b"fabrx/bft/v1/";
/// Digest of one client request.
pub const REQUEST: &[u8] = b"fabrx/bft/v1/request";
/// Digest of a proposal.
pub const PROPOSAL: &[u8] = b"fabrx/bft/v1/proposal";
/// Signed prepare vote.
pub const PREPARE: &[u8] = b"fabrx/bft/v1/prepare";
/// Signed commit vote (the votes a decision certificate is made of).
pub const COMMIT: &[u8] = b"fabrx/bft/v1/commit";
/// Signed view-change message.
pub const VIEW_CHANGE: &[u8] = b"fabrx/bft/v1/view-change";
