//! What a Fabric Deliver request asks for (pure): the checks of a request envelope and
//! the resolution of its `SeekInfo` against the height of the Fabric chain
//! (docs/assembler.md "Fabric Deliver").

use arma::fabric::Content;
use prost::Message as _;
use wire::fabric::common;
use wire::fabric::orderer::seek_info::{SeekBehavior, SeekContentType};
use wire::fabric::orderer::seek_position::Type as Position;
use wire::fabric::orderer::{SeekInfo, SeekPosition};

/// Why a request ends without (all of) its blocks: each is answered with one status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request is malformed or asks for an impossible range (BAD_REQUEST).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// What it asks for is not here (NOT_FOUND).
    #[error("not found: {0}")]
    NotFound(String),
    /// The caller may not ask it (FORBIDDEN).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The node is stopping (SERVICE_UNAVAILABLE).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The ledger failed or holds a block that cannot be served (INTERNAL_SERVER_ERROR).
    #[error("internal: {0}")]
    Internal(String),
}

impl Refusal {
    /// The status it is answered with.
    pub fn status(&self) -> common::Status {
        match self {
            Refusal::BadRequest(_) => common::Status::BadRequest,
            Refusal::NotFound(_) => common::Status::NotFound,
            Refusal::Forbidden(_) => common::Status::Forbidden,
            Refusal::Unavailable(_) => common::Status::ServiceUnavailable,
            Refusal::Internal(_) => common::Status::InternalServerError,
        }
    }
}

/// What to do when a wanted block is not held yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// Wait for it (BLOCK_UNTIL_READY).
    Wait,
    /// Answer NOT_FOUND (FAIL_IF_NOT_READY).
    FailIfNotReady,
}

/// A resolved request: Fabric blocks `start..=stop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seek {
    /// The first block sent.
    pub start: u64,
    /// The last block sent (`u64::MAX`: follow for good).
    pub stop: u64,
    /// Waiting or failing on a block not held yet.
    pub behavior: Behavior,
    /// Whole blocks, or headers and metadata only.
    pub content: Content,
}

/// Checks a request envelope and returns its `SeekInfo`: it decodes
/// (`arma::fabric::decode_envelope`), its channel header is of type DELIVER_SEEK_INFO,
/// names `channel` (else NOT_FOUND, as for a channel the node does not serve), and, when
/// it carries a TLS certificate hash and the caller came over mutual TLS
/// (`caller_cert_hash`: SHA-256 of the caller's certificate DER), the two are equal
/// (else FORBIDDEN); its data is a `SeekInfo`. The signature over the payload is not
/// checked.
pub fn parse_request(
    bytes: &[u8],
    channel: &str,
    caller_cert_hash: Option<&[u8; 32]>,
) -> Result<SeekInfo, Refusal> {
    let (_, payload, header) =
        arma::fabric::decode_envelope(bytes).map_err(|e| Refusal::BadRequest(e.to_string()))?;
    let kind = header.channel.r#type;
    if kind != common::HeaderType::DeliverSeekInfo as i32 {
        return Err(Refusal::BadRequest(format!(
            "channel header type {kind} is not DELIVER_SEEK_INFO ({})",
            common::HeaderType::DeliverSeekInfo as i32
        )));
    }
    if header.channel.channel_id != channel {
        return Err(Refusal::NotFound(format!(
            "channel {:?} is not served here (this network's channel is {channel:?})",
            header.channel.channel_id
        )));
    }
    let bound = &header.channel.tls_cert_hash;
    if let Some(actual) = caller_cert_hash
        && !bound.is_empty()
        && bound.as_slice() != actual.as_slice()
    {
        return Err(Refusal::Forbidden(
            "the request's TLS certificate hash is not that of the caller's certificate".into(),
        ));
    }
    SeekInfo::decode(payload.data.as_slice())
        .map_err(|e| Refusal::BadRequest(format!("the payload data is not a SeekInfo: {e}")))
}

/// A position's block number in a chain of `height` blocks (`height ≥ 1`: the genesis
/// block is always held). NEXT_COMMIT is the block after the newest.
fn position<'a>(
    p: Option<&'a SeekPosition>,
    which: &str,
    height: u64,
) -> Result<(u64, &'a Position), Refusal> {
    let newest = height.saturating_sub(1);
    let kind = p
        .and_then(|p| p.r#type.as_ref())
        .ok_or_else(|| Refusal::BadRequest(format!("the SeekInfo has no {which} position")))?;
    let number = match kind {
        Position::Oldest(_) => 0,
        Position::Newest(_) => newest,
        Position::Specified(s) => s.number,
        Position::NextCommit(_) => height,
    };
    Ok((number, kind))
}

/// Resolves `info` in a Fabric chain of `height` blocks (blocks `0..height` held).
///
/// Start: OLDEST is 0, NEWEST the newest block, SPECIFIED its number, NEXT_COMMIT the
/// block after the newest. Stop: OLDEST is the start, NEWEST the newest block when the
/// request arrived (the start when both are NEWEST, so exactly one block is sent),
/// SPECIFIED its number (`u64::MAX`: follow for good), NEXT_COMMIT the block after the
/// newest. A missing start or stop, or a stop before the start, is BAD_REQUEST; with
/// FAIL_IF_NOT_READY, a start past the newest block is NOT_FOUND.
pub fn resolve(info: &SeekInfo, height: u64) -> Result<Seek, Refusal> {
    let (start, start_kind) = position(info.start.as_ref(), "start", height)?;
    let (stop, stop_kind) = position(info.stop.as_ref(), "stop", height)?;
    let stop = match (start_kind, stop_kind) {
        (_, Position::Oldest(_)) | (Position::Newest(_), Position::Newest(_)) => start,
        _ => stop,
    };
    if stop < start {
        return Err(Refusal::BadRequest(format!(
            "the stop block {stop} is before the start block {start}"
        )));
    }
    let behavior = if info.behavior == SeekBehavior::FailIfNotReady as i32 {
        Behavior::FailIfNotReady
    } else {
        Behavior::Wait
    };
    if behavior == Behavior::FailIfNotReady && start >= height {
        return Err(Refusal::NotFound(format!(
            "block {start} is past the newest block {}",
            height.saturating_sub(1)
        )));
    }
    let content = if info.content_type == SeekContentType::HeaderWithSig as i32 {
        Content::HeaderWithSig
    } else {
        Content::Block
    };
    Ok(Seek {
        start,
        stop,
        behavior,
        content,
    })
}

#[cfg(test)]
#[path = "seek_tests.rs"]
mod tests;
