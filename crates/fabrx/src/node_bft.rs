//! `fabrx node bft`: one replica of a BFT consensus cluster that orders opaque client
//! requests (crates/consenter; protocol in docs/bft.md).

use consenter::keys::NodeKeys;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

/// Arguments of `fabrx node bft`.
#[derive(Debug, Args)]
pub struct BftArgs {
    /// This replica's id (index into --peers).
    #[arg(long)]
    id: u32,
    /// `host:port` of every replica, comma separated (index = replica id); this
    /// replica listens on its own entry (peer streams, Submit and Status).
    #[arg(long, value_delimiter = ',', required = true)]
    peers: Vec<String>,
    /// Directory of the write-ahead log (created if missing).
    #[arg(long)]
    wal: PathBuf,
    /// Decisions log directory: a journal of one JSON record per decided sequence (seq,
    /// view, digest, requests).
    #[arg(long)]
    decisions: PathBuf,
    /// This replica's key file (`fabrx keygen --out FILE`); needs `--peer-keys`.
    #[arg(long, requires = "peer_keys", conflicts_with = "seed_prefix")]
    key_file: Option<PathBuf>,
    /// Every replica's public key, one `<scheme> <hex>` line each in replica order (the
    /// lines `fabrx keygen` prints).
    #[arg(long, requires = "key_file")]
    peer_keys: Option<PathBuf>,
    /// Tests and demos only: replica i's Ed25519 key is derived from the seed
    /// "<prefix><i>" (anyone who knows the prefix has every key).
    #[arg(long, required_unless_present = "key_file")]
    seed_prefix: Option<String>,
    /// The leader cuts a batch at this many requests.
    #[arg(long, default_value_t = 1000)]
    batch_max: usize,
    /// The leader cuts a non-empty batch after this many milliseconds.
    #[arg(long, default_value_t = 20)]
    batch_interval_ms: u64,
    /// A request not ordered within this time makes a replica complain (view change).
    #[arg(long, default_value_t = 3000)]
    request_timeout_ms: u64,
    /// Heartbeat interval.
    #[arg(long, default_value_t = 200)]
    heartbeat_interval_ms: u64,
    /// A follower that hears nothing from the leader this long starts a view change.
    #[arg(long, default_value_t = 2000)]
    heartbeat_timeout_ms: u64,
    /// Base time to wait for a new view (doubles per attempt).
    #[arg(long, default_value_t = 2000)]
    view_change_timeout_ms: u64,
    /// Shortest time between two of the replica's timer wake-ups (it wakes at its next
    /// deadline, not every tick).
    #[arg(long, default_value_t = 10, value_parser = crate::server_args::positive_u64)]
    tick_ms: u64,
    /// Messages kept per peer while it is slow or down (oldest dropped beyond).
    #[arg(long, default_value = "4096", value_parser = crate::server_args::positive_usize)]
    peer_queue: std::num::NonZeroUsize,
    /// Chain name, bound with the public keys into every signature: clusters that
    /// share keys must use different names.
    #[arg(long, default_value = consenter::keys::DEFAULT_CHAIN)]
    chain_id: String,
    /// Outgoing bytes kept per peer while it is slow or down (oldest dropped beyond).
    #[arg(long, default_value_t = 32 << 20)]
    peer_queue_bytes: usize,
    /// Outgoing bytes kept over all peers (the largest queue loses its oldest first).
    #[arg(long, default_value_t = 96 << 20)]
    total_queue_bytes: usize,
    /// Bytes of pending requests (client and forwarded) the replica holds for ordering.
    #[arg(long, default_value_t = 64 << 20)]
    max_pending_bytes: usize,
    /// Bytes of undecided requests of clients waiting in Submit at once
    /// (RESOURCE_EXHAUSTED beyond).
    #[arg(long, default_value_t = 64 << 20)]
    submit_bytes: usize,
    /// How long Submit waits for the decision (DEADLINE_EXCEEDED beyond).
    #[arg(long, default_value_t = 30_000)]
    submit_timeout_ms: u64,
    /// Open gRPC connections at once (more are closed at accept).
    #[arg(long, default_value = "1024", value_parser = crate::server_args::positive_usize)]
    max_connections: std::num::NonZeroUsize,
    /// A connection that sends nothing this long is closed.
    #[arg(long, default_value_t = 120)]
    idle_timeout_s: u64,
}

/// Runs the replica until it fails or the process is stopped.
pub async fn run(args: BftArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    std::fs::create_dir_all(&args.wal).with_context(|| format!("creating {}", args.wal.display()))?;
    let n = args.peers.len() as u32;
    let mut engine = bft::Config::new(args.id, n);
    engine.max_batch_count = args.batch_max;
    engine.batch_interval_ms = args.batch_interval_ms;
    engine.request_timeout_ms = args.request_timeout_ms;
    engine.heartbeat_interval_ms = args.heartbeat_interval_ms;
    engine.heartbeat_timeout_ms = args.heartbeat_timeout_ms;
    engine.view_change_timeout_ms = args.view_change_timeout_ms;
    engine.max_pending_bytes = args.max_pending_bytes;
    let limits = consenter::replica::NodeLimits {
        peer_queue_messages: args.peer_queue,
        peer_queue_bytes: args.peer_queue_bytes,
        total_queue_bytes: args.total_queue_bytes,
        submit_bytes: args.submit_bytes,
        submit_timeout: Duration::from_millis(args.submit_timeout_ms),
        max_connections: args.max_connections,
        idle_timeout: Duration::from_secs(args.idle_timeout_s),
        ..consenter::replica::NodeLimits::default()
    };
    let cfg = consenter::replica::ReplicaConfig {
        engine,
        peers: args.peers,
        keys: match (args.key_file, args.peer_keys, args.seed_prefix) {
            (Some(key), Some(peers), _) => NodeKeys::Files { key, peers },
            (_, _, Some(prefix)) => NodeKeys::Seeded { prefix },
            _ => anyhow::bail!("give --key-file with --peer-keys, or --seed-prefix"),
        },
        wal: args.wal.join("replica.wal"),
        decisions: args.decisions,
        chain: args.chain_id,
        tick: Duration::from_millis(args.tick_ms),
        limits,
        channel_capacity: 4096,
    };
    let node = consenter::replica::spawn(cfg)
        .await
        .context("starting the bft replica")?;
    crate::runner::serve(node, "the bft replica", None, &mut stopping).await
}
