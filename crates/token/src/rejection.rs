//! Why an endorser refuses a request (a leaf: the request's own checks and the
//! endorser's checks both produce it).

/// Why an endorser refuses (the wire's `RejectReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Ill-formed request.
    Malformed,
    /// The creator's signature does not verify.
    BadSignature,
    /// An issue by a key that may not issue.
    NotIssuer,
    /// An input is not in the committed state.
    UnknownInput,
    /// An input was spent.
    SpentInput,
    /// An input belongs to someone else.
    NotOwner,
    /// Types differ or sums do not balance.
    Unbalanced,
    /// The committed state could not be read, or what was read is not what the key names.
    StateUnavailable,
    /// The request expired, or asks for too long a validity.
    Expired,
    /// An output's owner is not a valid public key.
    BadOwner,
}

impl Reason {
    /// The wire enum value.
    pub fn to_pb(self) -> wire::pb::RejectReason {
        use wire::pb::RejectReason as R;
        match self {
            Reason::Malformed => R::Malformed,
            Reason::BadSignature => R::BadSignature,
            Reason::NotIssuer => R::NotIssuer,
            Reason::UnknownInput => R::UnknownInput,
            Reason::SpentInput => R::SpentInput,
            Reason::NotOwner => R::NotOwner,
            Reason::Unbalanced => R::Unbalanced,
            Reason::StateUnavailable => R::StateUnavailable,
            Reason::Expired => R::Expired,
            Reason::BadOwner => R::BadOwner,
        }
    }

    /// From the wire enum value (`None` for unspecified or unknown).
    pub fn from_pb(v: i32) -> Option<Reason> {
        use wire::pb::RejectReason as R;
        Some(match R::try_from(v).ok()? {
            R::Malformed => Reason::Malformed,
            R::BadSignature => Reason::BadSignature,
            R::NotIssuer => Reason::NotIssuer,
            R::UnknownInput => Reason::UnknownInput,
            R::SpentInput => Reason::SpentInput,
            R::NotOwner => Reason::NotOwner,
            R::Unbalanced => Reason::Unbalanced,
            R::StateUnavailable => Reason::StateUnavailable,
            R::Expired => Reason::Expired,
            R::BadOwner => Reason::BadOwner,
            R::Unspecified => return None,
        })
    }

    /// Every reason.
    pub const ALL: [Reason; 10] = [
        Reason::Malformed,
        Reason::BadSignature,
        Reason::NotIssuer,
        Reason::UnknownInput,
        Reason::SpentInput,
        Reason::NotOwner,
        Reason::Unbalanced,
        Reason::StateUnavailable,
        Reason::Expired,
        Reason::BadOwner,
    ];

    /// A short name for messages and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::BadSignature => "bad signature",
            Reason::NotIssuer => "not an issuer",
            Reason::UnknownInput => "unknown input",
            Reason::SpentInput => "input already spent",
            Reason::NotOwner => "not the owner",
            Reason::Unbalanced => "unbalanced",
            Reason::StateUnavailable => "state unavailable",
            Reason::Expired => "expired",
            Reason::BadOwner => "bad owner",
        }
    }
}

/// An endorser's refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {detail}", reason.name())]
pub struct Rejection {
    /// Why.
    pub reason: Reason,
    /// Details for people.
    pub detail: String,
}

impl Rejection {
    /// A refusal.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Rejection {
        Rejection {
            reason,
            detail: detail.into(),
        }
    }
}
