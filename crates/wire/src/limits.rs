//! Message-size limits that a service and its clients must agree on.

/// Largest gRPC message a sigverifier accepts or sends (a batch of txs), and so the
/// largest its clients send.
pub const SIGVERIFIER_MAX_MESSAGE_BYTES: usize = 256 << 20;
