//! What a batcher answers to a forwarded request, and the code its refusals give a client.

use std::fmt;

/// A batcher's answer to one forwarded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatcherAnswer {
    /// The batcher holds the request (in its mempool): the router acks the client.
    Admitted,
    /// The batcher refused it.
    Refused(BatcherRefusal),
}

/// Why a batcher refused a request (the batcher core's `RefuseReason`, as the
/// `IntakeRefusal` of the wire protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatcherRefusal {
    /// Pending, in an unordered batch, or ordered recently.
    Duplicate,
    /// The mempool holds its maximum number of requests.
    MempoolFullRequests,
    /// The request would take the mempool over its byte bound.
    MempoolFullBytes,
    /// Larger than the batcher's maximum.
    TooLarge,
    /// The batcher maps it to another shard (router and batcher disagree on the shards).
    WrongShard,
    /// A refusal without a reason this router knows (a newer batcher).
    Unspecified,
}

impl BatcherRefusal {
    /// The gRPC code a client sees.
    pub fn code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            BatcherRefusal::Duplicate => Code::AlreadyExists,
            BatcherRefusal::MempoolFullRequests | BatcherRefusal::MempoolFullBytes => Code::ResourceExhausted,
            BatcherRefusal::TooLarge => Code::InvalidArgument,
            BatcherRefusal::WrongShard => Code::FailedPrecondition,
            BatcherRefusal::Unspecified => Code::Unknown,
        }
    }

    /// The stable name of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            BatcherRefusal::Duplicate => "duplicate",
            BatcherRefusal::MempoolFullRequests => "mempool full (requests)",
            BatcherRefusal::MempoolFullBytes => "mempool full (bytes)",
            BatcherRefusal::TooLarge => "too large",
            BatcherRefusal::WrongShard => "wrong shard",
            BatcherRefusal::Unspecified => "unspecified",
        }
    }
}

impl fmt::Display for BatcherRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<wire::pb::IntakeRefusal> for BatcherRefusal {
    fn from(r: wire::pb::IntakeRefusal) -> Self {
        use wire::pb::IntakeRefusal as R;
        match r {
            R::Duplicate => BatcherRefusal::Duplicate,
            R::MempoolFullRequests => BatcherRefusal::MempoolFullRequests,
            R::MempoolFullBytes => BatcherRefusal::MempoolFullBytes,
            R::TooLarge => BatcherRefusal::TooLarge,
            R::WrongShard => BatcherRefusal::WrongShard,
            R::Unspecified => BatcherRefusal::Unspecified,
        }
    }
}

impl From<BatcherRefusal> for wire::pb::IntakeRefusal {
    fn from(r: BatcherRefusal) -> Self {
        use wire::pb::IntakeRefusal as R;
        match r {
            BatcherRefusal::Duplicate => R::Duplicate,
            BatcherRefusal::MempoolFullRequests => R::MempoolFullRequests,
            BatcherRefusal::MempoolFullBytes => R::MempoolFullBytes,
            BatcherRefusal::TooLarge => R::TooLarge,
            BatcherRefusal::WrongShard => R::WrongShard,
            BatcherRefusal::Unspecified => R::Unspecified,
        }
    }
}

impl BatcherAnswer {
    /// The answer carried by an `IntakeResponse` (an unknown refusal number is
    /// `Unspecified`).
    pub fn from_wire(r: &wire::pb::IntakeResponse) -> BatcherAnswer {
        if r.admitted {
            return BatcherAnswer::Admitted;
        }
        let reason =
            wire::pb::IntakeRefusal::try_from(r.refusal).unwrap_or(wire::pb::IntakeRefusal::Unspecified);
        BatcherAnswer::Refused(reason.into())
    }

    /// The `IntakeResponse` of this answer to request `id`.
    pub fn to_wire(self, id: u64) -> wire::pb::IntakeResponse {
        match self {
            BatcherAnswer::Admitted => wire::pb::IntakeResponse {
                id,
                admitted: true,
                refusal: 0,
            },
            BatcherAnswer::Refused(r) => wire::pb::IntakeResponse {
                id,
                admitted: false,
                refusal: wire::pb::IntakeRefusal::from(r) as i32,
            },
        }
    }
}
