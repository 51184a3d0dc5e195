//! Range checks of the batching, consensus and router parameters. The relations the roles
//! check themselves (batch bytes at least request bytes, and so on) are checked again by
//! building each role's config at load; the ones here are those a conversion needs
//! (non-zero, fits the type) and those no role checks (consensus message sizes, router
//! against batcher limits).

use crate::error::{Error, Result};
use crate::file::NetworkFile;

/// The most bytes a router or batcher accepts in one request: the router's wire limit.
const MAX_REQUEST_BYTES: u64 = wire::limits::ROUTER_MAX_ENVELOPE_BYTES as u64;
/// A day: no timeout or interval of the network is longer.
const MAX_MS: u64 = 86_400_000;
/// Ten minutes: no consensus timeout is longer (a leader that fails, or censors, stalls
/// the network for up to about that long, doubling per view change; and a config update
/// that would fix a wrong value must be ordered first).
const MAX_CONSENSUS_TIMEOUT_MS: u64 = 600_000;
/// A consenter request (a BAF, a complaint, a config update) may always be this large.
const MIN_CONSENSUS_REQUEST_BYTES: u64 = 64 << 10;
/// How many times `batching.max_unordered_batches` the consenters count BAFs ahead at
/// most (each seq ahead holds up to a vote per party, in every consenter's state).
const MAX_SEQS_AHEAD_FACTOR: u64 = 16;
/// ... or this many, whichever is more.
const MAX_SEQS_AHEAD_FLOOR: u64 = 1024;

fn positive(field: &'static str, value: u64) -> Result<()> {
    if value == 0 {
        return Err(Error::OutOfRange {
            field,
            value,
            problem: "must be positive",
        });
    }
    Ok(())
}

fn millis(field: &'static str, value: u64) -> Result<()> {
    positive(field, value)?;
    if value > MAX_MS {
        return Err(Error::OutOfRange {
            field,
            value,
            problem: "must be at most a day (86400000 ms)",
        });
    }
    Ok(())
}

fn at_most(field: &'static str, value: u64, max: u64, problem: &'static str) -> Result<()> {
    if value > max {
        return Err(Error::OutOfRange {
            field,
            value,
            problem,
        });
    }
    Ok(())
}

fn at_least(field: &'static str, value: u64, other: &'static str, minimum: u64) -> Result<()> {
    if value < minimum {
        return Err(Error::TooSmall {
            field,
            value,
            other,
            minimum,
        });
    }
    Ok(())
}

/// Checks every parameter of `file`.
pub(crate) fn check(file: &NetworkFile) -> Result<()> {
    batching(file)?;
    consensus(file)?;
    routing(file)
}

fn batching(file: &NetworkFile) -> Result<()> {
    let b = &file.batching;
    positive("batching.max_request_bytes", b.max_request_bytes)?;
    at_most(
        "batching.max_request_bytes",
        b.max_request_bytes,
        MAX_REQUEST_BYTES,
        "must be at most the router's wire limit (2 MiB − 64 bytes)",
    )?;
    positive("batching.max_batch_requests", u64::from(b.max_batch_requests))?;
    positive("batching.max_batch_bytes", b.max_batch_bytes)?;
    millis("batching.batch_timeout_ms", b.batch_timeout_ms)?;
    positive("batching.window", u64::from(b.window))?;
    positive(
        "batching.max_unordered_batches",
        u64::from(b.max_unordered_batches),
    )?;
    positive("batching.mempool_max_requests", b.mempool_max_requests)?;
    positive("batching.mempool_max_bytes", b.mempool_max_bytes)?;
    positive("batching.ordered_memory", b.ordered_memory)?;
    let usize_max = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
    at_most(
        "batching.mempool_max_requests",
        b.mempool_max_requests,
        usize_max,
        "does not fit this machine",
    )?;
    at_most(
        "batching.ordered_memory",
        b.ordered_memory,
        usize_max,
        "does not fit this machine",
    )?;
    millis("batching.forward_timeout_ms", b.forward_timeout_ms)?;
    millis("batching.complain_timeout_ms", b.complain_timeout_ms)
}

fn consensus(file: &NetworkFile) -> Result<()> {
    let c = &file.consensus;
    positive("consensus.batch_max", c.batch_max)?;
    positive("consensus.batch_max_bytes", c.batch_max_bytes)?;
    millis("consensus.batch_interval_ms", c.batch_interval_ms)?;
    millis("consensus.request_timeout_ms", c.request_timeout_ms)?;
    millis("consensus.heartbeat_interval_ms", c.heartbeat_interval_ms)?;
    millis("consensus.heartbeat_timeout_ms", c.heartbeat_timeout_ms)?;
    millis("consensus.view_change_timeout_ms", c.view_change_timeout_ms)?;
    positive("consensus.max_request_bytes", c.max_request_bytes)?;
    positive("consensus.max_pending", c.max_pending)?;
    positive("consensus.max_pending_bytes", c.max_pending_bytes)?;
    millis("consensus.tick_ms", c.tick_ms)?;
    bounds(file)?;
    at_least(
        "consensus.max_seqs_ahead",
        c.max_seqs_ahead,
        "batching.max_unordered_batches",
        u64::from(file.batching.max_unordered_batches),
    )?;
    at_least(
        "consensus.heartbeat_timeout_ms",
        c.heartbeat_timeout_ms,
        "consensus.heartbeat_interval_ms",
        c.heartbeat_interval_ms.saturating_add(1),
    )?;
    at_least(
        "consensus.max_pending_bytes",
        c.max_pending_bytes,
        "consensus.max_request_bytes",
        c.max_request_bytes,
    )?;
    // The consenter's own check (crates/consenter node.rs `check_sizes`): a new view, a
    // quorum of view changes each with a prepared proposal, must fit one message.
    let quorum = u64::from(bft::Quorum::new(u32::try_from(file.parties.len()).unwrap_or(u32::MAX)).q);
    let decision = c
        .batch_max_bytes
        .max(c.max_request_bytes)
        .saturating_add(64 << 10);
    let limit = consenter::transport::MAX_MESSAGE_BYTES as u64;
    at_most(
        "consensus.batch_max_bytes",
        decision.saturating_mul(quorum),
        limit,
        "(plus 64 KiB, times the BFT quorum) must fit the consenter's 64 MiB message limit",
    )
}

/// The consensus parameters an update could set to stall the network for good or to grow
/// every consenter's state: timeouts between three ticks and ten minutes, requests large
/// enough for a config update, a bound on the seqs counted ahead.
fn bounds(file: &NetworkFile) -> Result<()> {
    let c = &file.consensus;
    for (field, value) in [
        ("consensus.request_timeout_ms", c.request_timeout_ms),
        ("consensus.heartbeat_timeout_ms", c.heartbeat_timeout_ms),
        ("consensus.view_change_timeout_ms", c.view_change_timeout_ms),
    ] {
        at_most(
            field,
            value,
            MAX_CONSENSUS_TIMEOUT_MS,
            "must be at most ten minutes (600000 ms)",
        )?;
        at_least(
            field,
            value,
            "three times consensus.tick_ms",
            c.tick_ms.saturating_mul(3),
        )?;
    }
    at_least(
        "consensus.heartbeat_interval_ms",
        c.heartbeat_interval_ms,
        "consensus.tick_ms",
        c.tick_ms,
    )?;
    // A config update carries the whole next config (as a JSON string) and signatures:
    // a request bound below that would refuse every update, for good.
    let config_bytes = crate::update::canonical_json(file).len() as u64;
    at_least(
        "consensus.max_request_bytes",
        c.max_request_bytes,
        "64 KiB and twice the config's canonical size (a config update must fit)",
        MIN_CONSENSUS_REQUEST_BYTES.max(config_bytes.saturating_mul(2)),
    )?;
    at_most(
        "consensus.max_seqs_ahead",
        c.max_seqs_ahead,
        u64::from(file.batching.max_unordered_batches)
            .saturating_mul(MAX_SEQS_AHEAD_FACTOR)
            .max(MAX_SEQS_AHEAD_FLOOR),
        "must be at most 1024 or 16 times batching.max_unordered_batches, the larger (every consenter holds the votes of that many seqs ahead)",
    )?;
    Ok(())
}

fn routing(file: &NetworkFile) -> Result<()> {
    let r = &file.router;
    positive("router.max_request_bytes", r.max_request_bytes)?;
    at_most(
        "router.max_request_bytes",
        r.max_request_bytes,
        file.batching.max_request_bytes,
        "must be at most batching.max_request_bytes (else the batcher refuses what the router admits)",
    )?;
    positive("router.shard_max_in_flight", r.shard_max_in_flight)?;
    positive("router.shard_max_in_flight_bytes", r.shard_max_in_flight_bytes)?;
    positive("router.stream_max_in_flight", r.stream_max_in_flight)?;
    let usize_max = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
    at_most(
        "router.shard_max_in_flight",
        r.shard_max_in_flight,
        usize_max,
        "does not fit this machine",
    )?;
    at_most(
        "router.stream_max_in_flight",
        r.stream_max_in_flight,
        usize_max,
        "does not fit this machine",
    )?;
    millis("router.answer_timeout_ms", r.answer_timeout_ms)
}
