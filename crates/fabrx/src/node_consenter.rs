//! `fabrx node consenter`: one Arma consenter (crates/consenter, docs/consenter.md): the
//! BFT engine running the Arma application, serving `BftConsensus` (peers, Submit,
//! Status) and `Consenter.Decisions` on one address.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use consenter::keys::NodeKeys;

/// Arguments of `fabrx node consenter`.
#[derive(Debug, Args)]
pub struct ConsenterArgs {
    /// This consenter's replica id I (index into --peers); replica I is the consenter of
    /// party I + 1.
    #[arg(long)]
    id: u32,
    /// `host:port` of every consenter, comma separated (index = replica id); this
    /// consenter listens on its own entry unless --listen is given.
    #[arg(long, value_delimiter = ',', required = true)]
    peers: Vec<String>,
    /// Bind here instead of this consenter's --peers entry (e.g. `0.0.0.0:7050`).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Data directory (created if missing): `wal/` (the engine's WAL), `decisions/`
    /// (the Arma decisions log), `state.json` (the application's snapshot).
    #[arg(long)]
    data_dir: PathBuf,
    /// This consenter's key file (`fabrx keygen --out FILE`); needs `--peer-keys`.
    #[arg(long, requires = "peer_keys", conflicts_with = "seed_prefix")]
    key_file: Option<PathBuf>,
    /// Every consenter's public key, one `<scheme> <hex>` line each in replica order.
    #[arg(long, requires = "key_file")]
    peer_keys: Option<PathBuf>,
    /// Tests and demos only: replica i's Ed25519 key is derived from "<prefix><i>".
    #[arg(long, required_unless_present = "key_file")]
    seed_prefix: Option<String>,
    /// Chain name, bound with the public keys into every signature (and every decision
    /// certificate: verifiers need it).
    #[arg(long, default_value = consenter::keys::DEFAULT_CHAIN)]
    chain_id: String,
    /// Number of parties N of the network (parties 1..=N).
    #[arg(long)]
    parties: u32,
    /// Number of shards S (shards 0..S).
    #[arg(long)]
    shards: u32,
    /// The batchers' public keys: one `<party> <shard> [<scheme>] <hex>` line per party
    /// and shard (scheme defaults to ed25519; `#` comments). docs/consenter.md.
    #[arg(long)]
    batcher_keys: PathBuf,
    /// BAFs are counted for at most this many seqs past a shard's last ordered one.
    #[arg(long, default_value_t = 64)]
    max_seqs_ahead: u64,
    /// The leader cuts a proposal at this many requests (BAFs and complaints).
    #[arg(long, default_value_t = 1000)]
    batch_max: usize,
    /// The leader cuts a non-empty proposal after this many milliseconds.
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
    /// Clock tick of the replica.
    #[arg(long, default_value_t = 10)]
    tick_ms: u64,
    /// How long Submit waits for the decision (DEADLINE_EXCEEDED beyond).
    #[arg(long, default_value_t = 30_000)]
    submit_timeout_ms: u64,
    /// Decisions streams served at once (RESOURCE_EXHAUSTED beyond).
    #[arg(long, default_value_t = 256)]
    max_decision_streams: usize,
    /// Open gRPC connections at once (more are closed at accept).
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
}

/// The engine configuration from the arguments.
fn engine(args: &ConsenterArgs) -> bft::Config {
    let n = u32::try_from(args.peers.len()).unwrap_or(u32::MAX);
    let mut engine = bft::Config::new(args.id, n);
    engine.max_batch_count = args.batch_max;
    engine.batch_interval_ms = args.batch_interval_ms;
    engine.request_timeout_ms = args.request_timeout_ms;
    engine.heartbeat_interval_ms = args.heartbeat_interval_ms;
    engine.heartbeat_timeout_ms = args.heartbeat_timeout_ms;
    engine.view_change_timeout_ms = args.view_change_timeout_ms;
    engine
}

/// The node configuration from the arguments (reads the batcher keys).
fn config(args: ConsenterArgs) -> anyhow::Result<consenter::arma_node::ArmaNodeConfig> {
    if args.parties as usize != args.peers.len() {
        anyhow::bail!(
            "--parties {} but {} --peers: one consenter per party",
            args.parties,
            args.peers.len()
        );
    }
    let text = std::fs::read_to_string(&args.batcher_keys)
        .with_context(|| format!("reading {}", args.batcher_keys.display()))?;
    let keys = consenter::arma_node::parse_batcher_keys(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.batcher_keys.display()))?;
    let arma = consenter::arma::ArmaConfig::new(args.parties, args.shards, args.max_seqs_ahead, keys)?;
    std::fs::create_dir_all(args.data_dir.join("wal"))
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let limits = consenter::node::NodeLimits {
        submit_timeout: Duration::from_millis(args.submit_timeout_ms),
        max_connections: args.max_connections,
        ..consenter::node::NodeLimits::default()
    };
    let node = consenter::node::NodeConfig {
        engine: engine(&args),
        keys: match (args.key_file, args.peer_keys, args.seed_prefix) {
            (Some(key), Some(peers), _) => NodeKeys::Files { key, peers },
            (_, _, Some(prefix)) => NodeKeys::Seeded { prefix },
            _ => anyhow::bail!("give --key-file with --peer-keys, or --seed-prefix"),
        },
        peers: args.peers,
        wal: args.data_dir.join("wal").join("replica.wal"),
        decisions: args.data_dir.join("decisions"),
        chain: args.chain_id,
        tick: Duration::from_millis(args.tick_ms.max(1)),
        limits,
        channel_capacity: 4096,
    };
    Ok(consenter::arma_node::ArmaNodeConfig {
        node,
        arma,
        state: args.data_dir.join("state.json"),
        listen: args.listen,
        streams: consenter::decisions_service::StreamLimits {
            max_streams: args.max_decision_streams,
            ..consenter::decisions_service::StreamLimits::default()
        },
        snapshot_interval: Duration::from_secs(1),
    })
}

/// Runs the consenter until it fails or the process is stopped. Once it listens it
/// prints one JSON line on stdout:
/// `{"event":"ready","role":"consenter","id":…,"party":…,"listen":"…"}`.
pub async fn run(args: ConsenterArgs) -> anyhow::Result<()> {
    let id = args.id;
    let cfg = config(args)?;
    let node = consenter::arma_node::spawn(cfg)
        .await
        .context("starting the consenter")?;
    let ready = serde_json::json!({
        "event": "ready",
        "role": "consenter",
        "id": id,
        "party": id.saturating_add(1),
        "listen": node.listen.to_string(),
    });
    println!("{ready}");
    tokio::select! {
        r = node.wait() => r.context("the consenter failed"),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
