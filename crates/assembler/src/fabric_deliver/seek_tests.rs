//! The request checks and the seek resolution, as tables.

use super::*;
use wire::fabric::orderer::{SeekNewest, SeekNextCommit, SeekOldest, SeekSpecified};

fn oldest() -> Option<SeekPosition> {
    Some(SeekPosition {
        r#type: Some(Position::Oldest(SeekOldest {})),
    })
}

fn newest() -> Option<SeekPosition> {
    Some(SeekPosition {
        r#type: Some(Position::Newest(SeekNewest {})),
    })
}

fn next_commit() -> Option<SeekPosition> {
    Some(SeekPosition {
        r#type: Some(Position::NextCommit(SeekNextCommit {})),
    })
}

fn at(number: u64) -> Option<SeekPosition> {
    Some(SeekPosition {
        r#type: Some(Position::Specified(SeekSpecified { number })),
    })
}

fn info(start: Option<SeekPosition>, stop: Option<SeekPosition>, behavior: SeekBehavior) -> SeekInfo {
    SeekInfo {
        start,
        stop,
        behavior: behavior as i32,
        error_response: 0,
        content_type: SeekContentType::Block as i32,
    }
}

fn seek(start: u64, stop: u64, behavior: Behavior) -> Seek {
    Seek {
        start,
        stop,
        behavior,
        content: Content::Block,
    }
}

const WAIT: SeekBehavior = SeekBehavior::BlockUntilReady;
const FAIL: SeekBehavior = SeekBehavior::FailIfNotReady;

#[test]
fn positions_resolve_against_the_height() {
    // A chain of 10 blocks: 0 (genesis) ..= 9.
    let height = 10;
    let rows: Vec<(SeekInfo, Result<Seek, Refusal>)> = vec![
        (info(oldest(), newest(), WAIT), Ok(seek(0, 9, Behavior::Wait))),
        (info(oldest(), oldest(), WAIT), Ok(seek(0, 0, Behavior::Wait))),
        (info(newest(), newest(), WAIT), Ok(seek(9, 9, Behavior::Wait))),
        (info(at(3), at(5), FAIL), Ok(seek(3, 5, Behavior::FailIfNotReady))),
        (info(at(3), oldest(), WAIT), Ok(seek(3, 3, Behavior::Wait))),
        // Past the end: waits (armageddon's "follow for good" is stop = u64::MAX).
        (
            info(at(12), at(u64::MAX), WAIT),
            Ok(seek(12, u64::MAX, Behavior::Wait)),
        ),
        (
            info(next_commit(), at(u64::MAX), WAIT),
            Ok(seek(10, u64::MAX, Behavior::Wait)),
        ),
        (info(at(5), next_commit(), WAIT), Ok(seek(5, 10, Behavior::Wait))),
        // FAIL_IF_NOT_READY with the start held, the stop not: allowed (NOT_FOUND comes
        // when the stream reaches the end).
        (
            info(at(9), at(20), FAIL),
            Ok(seek(9, 20, Behavior::FailIfNotReady)),
        ),
    ];
    for (i, (request, expected)) in rows.into_iter().enumerate() {
        assert_eq!(resolve(&request, height), expected, "row {i}: {request:?}");
    }
}

#[test]
fn impossible_or_incomplete_requests_are_refused() {
    let height = 10;
    let bad = |r: Result<Seek, Refusal>| matches!(r, Err(Refusal::BadRequest(_)));
    let not_found = |r: Result<Seek, Refusal>| matches!(r, Err(Refusal::NotFound(_)));
    // The stop before the start.
    assert!(bad(resolve(&info(at(5), at(4), WAIT), height)));
    assert!(bad(resolve(&info(at(12), newest(), WAIT), height)));
    assert!(bad(resolve(&info(next_commit(), newest(), WAIT), height)));
    // No stop (Fabric requires one), no start, or a position without a type.
    assert!(bad(resolve(&info(oldest(), None, WAIT), height)));
    assert!(bad(resolve(&info(None, newest(), WAIT), height)));
    assert!(bad(resolve(
        &info(Some(SeekPosition { r#type: None }), newest(), WAIT),
        height
    )));
    // FAIL_IF_NOT_READY and a start past the newest block.
    assert!(not_found(resolve(&info(at(10), at(11), FAIL), height)));
    assert!(not_found(resolve(
        &info(next_commit(), at(u64::MAX), FAIL),
        height
    )));
}

#[test]
fn the_content_type_selects_headers_with_signatures() {
    let mut request = info(oldest(), newest(), WAIT);
    request.content_type = SeekContentType::HeaderWithSig as i32;
    assert_eq!(
        resolve(&request, 3).map(|s| s.content),
        Ok(Content::HeaderWithSig)
    );
}

/// A request envelope: `kind` header on `channel`, bound to `tls_cert_hash`, carrying
/// `data` as its payload data.
fn envelope(kind: i32, channel: &str, tls_cert_hash: &[u8], data: Vec<u8>) -> Vec<u8> {
    let channel_header = common::ChannelHeader {
        r#type: kind,
        channel_id: channel.into(),
        tls_cert_hash: tls_cert_hash.to_vec(),
        ..Default::default()
    };
    let payload = common::Payload {
        header: Some(common::Header {
            channel_header: channel_header.encode_to_vec(),
            signature_header: common::SignatureHeader::default().encode_to_vec(),
        }),
        data,
    };
    wire::fabric::RawEnvelope::from_parts(&payload.encode_to_vec(), b"not checked")
        .bytes
        .to_vec()
}

const SEEK: i32 = common::HeaderType::DeliverSeekInfo as i32;

#[test]
fn a_request_must_be_a_seek_info_on_the_channel() {
    let good = info(oldest(), newest(), WAIT);
    let data = good.encode_to_vec();
    assert_eq!(
        parse_request(&envelope(SEEK, "arma", &[], data.clone()), "arma", None),
        Ok(good)
    );
    // Another header type.
    let config = common::HeaderType::Config as i32;
    let r = parse_request(&envelope(config, "arma", &[], data.clone()), "arma", None);
    assert!(matches!(r, Err(Refusal::BadRequest(_))), "{r:?}");
    // Data that is not a SeekInfo (a wire type SeekInfo cannot have at field 1).
    let r = parse_request(&envelope(SEEK, "arma", &[], vec![0x0d, 1, 2, 3, 4]), "arma", None);
    assert!(matches!(r, Err(Refusal::BadRequest(_))), "{r:?}");
    // Not an envelope at all.
    let r = parse_request(&[0xff, 0xff, 0xff], "arma", None);
    assert!(matches!(r, Err(Refusal::BadRequest(_))), "{r:?}");
    // Another channel.
    let r = parse_request(&envelope(SEEK, "other", &[], data), "arma", None);
    assert!(matches!(r, Err(Refusal::NotFound(_))), "{r:?}");
}

#[test]
fn a_request_bound_to_another_certificate_is_forbidden() {
    let data = info(oldest(), newest(), WAIT).encode_to_vec();
    let mine = [7u8; 32];
    let theirs = [8u8; 32];
    let bound_to = |hash: &[u8]| envelope(SEEK, "arma", hash, data.clone());
    assert!(parse_request(&bound_to(&mine), "arma", Some(&mine)).is_ok());
    let r = parse_request(&bound_to(&theirs), "arma", Some(&mine));
    assert!(matches!(r, Err(Refusal::Forbidden(_))), "{r:?}");
    // Unbound, or without mutual TLS: nothing to compare.
    assert!(parse_request(&bound_to(&[]), "arma", Some(&mine)).is_ok());
    assert!(parse_request(&bound_to(&theirs), "arma", None).is_ok());
}

#[test]
fn each_refusal_has_its_status() {
    let s = |r: Refusal| r.status();
    assert_eq!(s(Refusal::BadRequest(String::new())), common::Status::BadRequest);
    assert_eq!(s(Refusal::NotFound(String::new())), common::Status::NotFound);
    assert_eq!(s(Refusal::Forbidden(String::new())), common::Status::Forbidden);
    assert_eq!(
        s(Refusal::Unavailable(String::new())),
        common::Status::ServiceUnavailable
    );
    assert_eq!(
        s(Refusal::Internal(String::new())),
        common::Status::InternalServerError
    );
}
