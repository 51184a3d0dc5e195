//! The one retry classification of fabrx clients: which answers of a call mean "another
//! endpoint, or the same one later, may succeed" and which are final.
//!
//! | class | gRPC codes | why |
//! |---|---|---|
//! | retry | `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`, `UNKNOWN`, `ABORTED`, `INTERNAL`, `RESOURCE_EXHAUSTED`, and no answer within the call's timeout | the endpoint is down, slow, overloaded, restarting, or its store failed: nothing was decided about the request |
//! | final | `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNIMPLEMENTED`, `DATA_LOSS`, `OK` | an answer about the request itself: every endpoint would give it |
//!
//! Who uses it: [`crate::Failover`] (the query service over its vcservices, the sidecar's
//! commit stage over its vcservices) and the sidecar's verifier pool. Readers that
//! cross-check services of other parties (the endorser's state reads, the wallet's f+1
//! agreement) do not trust one service's "final" answer: they ask the next service on
//! any failure, because a Byzantine service could otherwise block them with a refusal.

use tonic::Code;

/// What to do after a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Try another endpoint, or this one after a pause.
    Retry,
    /// The answer stands: pass it on.
    Final,
}

/// The class of an answer with gRPC code `code` (see the module's table).
pub fn classify(code: Code) -> Class {
    match code {
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown
        | Code::Aborted
        | Code::Internal
        | Code::ResourceExhausted => Class::Retry,
        Code::Ok
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::DataLoss => Class::Final,
    }
}

/// Whether a call that failed with `status` is worth another attempt.
pub fn retryable(status: &tonic::Status) -> bool {
    classify(status.code()) == Class::Retry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_answers_are_final_and_endpoint_trouble_is_retried() {
        assert!(retryable(&tonic::Status::unavailable("down")));
        assert!(retryable(&tonic::Status::resource_exhausted("busy")));
        assert!(!retryable(&tonic::Status::invalid_argument("bad")));
        assert!(!retryable(&tonic::Status::permission_denied("no")));
        let all = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        assert_eq!(all.iter().filter(|c| classify(**c) == Class::Retry).count(), 7);
    }
}
