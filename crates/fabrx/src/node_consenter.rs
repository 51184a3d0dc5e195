//! `fabrx node consenter`: one Arma consenter (crates/consenter, docs/consenter.md): the
//! BFT engine running the Arma application, serving `BftConsensus` (peers, Submit,
//! Status) and `Consenter.Decisions` on one address.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use consenter::keys::NodeKeys;

/// Arguments of `fabrx node consenter`: either `--network FILE --party P` (every network
/// parameter from the network config, docs/network-config.md) or the flags of the flag
/// mode (`--id`, `--peers`, `--parties`, `--shards`, `--batcher-keys`, keys, engine flags).
#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("flag_mode")
        .multiple(true)
        .args([
            "id", "peers", "seed_prefix", "chain_id", "parties", "shards", "batcher_keys",
            "max_seqs_ahead", "batch_max", "batch_interval_ms", "request_timeout_ms",
            "heartbeat_interval_ms", "heartbeat_timeout_ms", "view_change_timeout_ms",
            "tick_ms",
        ])
        .conflicts_with("config")
))]
pub struct ConsenterArgs {
    /// The network config file (`fabrx network generate` writes
    /// `<dir>/config/network-config.json`); needs `--party`. The key file defaults to
    /// `<dir>/keys/party-<P>/consenter.key` and the peer keys to
    /// `<dir>/config/consenter-peer-keys.txt`.
    #[arg(
        long = "network",
        visible_alias = "config",
        value_name = "FILE",
        requires = "party",
        value_parser = crate::server_args::network_file
    )]
    config: Option<PathBuf>,
    /// This consenter's party (1..N), with `--network`.
    #[arg(long, requires = "config")]
    party: Option<u32>,
    /// With `--network` (the genesis config): the config that adds this party to the
    /// running network (the next config of `fabrx network party add`, after the update
    /// was ordered). The node takes its entry, key, endpoint and TLS identity from it,
    /// catches up from the other consenters and votes from the decision that added it
    /// (docs/reconfiguration.md "Adding a party").
    #[arg(long, requires = "config", value_name = "FILE")]
    join: Option<PathBuf>,
    /// This consenter's replica id I (index into --peers); replica I is the consenter of
    /// party I + 1.
    #[arg(long, required_unless_present = "config")]
    id: Option<u32>,
    /// `host:port` of every consenter, comma separated (index = replica id); this
    /// consenter listens on its own entry unless --listen is given.
    #[arg(long, value_delimiter = ',', required_unless_present = "config")]
    peers: Vec<String>,
    /// Bind here instead of this consenter's --peers entry (e.g. `0.0.0.0:7050`) or its
    /// endpoint in the network config.
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
    #[arg(long, required_unless_present_any = ["key_file", "config"])]
    seed_prefix: Option<String>,
    /// With `--network`: another consenter key file this node holds for a key rotation
    /// (docs/reconfiguration.md): once a config update lists its public key for this
    /// party, the node signs with it from that update's decision on. Repeat it for each
    /// rotation: the node replays the decisions from the genesis config on, so it holds
    /// the key of every config it was in.
    #[arg(long, requires = "config", value_name = "FILE")]
    next_key_file: Vec<PathBuf>,
    /// Chain name, bound with the public keys into every signature (and every decision
    /// certificate: verifiers need it).
    #[arg(long, default_value = consenter::keys::DEFAULT_CHAIN)]
    chain_id: String,
    /// Number of parties N of the network (parties 1..=N).
    #[arg(long, required_unless_present = "config")]
    parties: Option<u32>,
    /// Number of shards S (shards 0..S).
    #[arg(long, required_unless_present = "config")]
    shards: Option<u32>,
    /// The batchers' public keys: one `<party> <shard> [<scheme>] <hex>` line per party
    /// and shard (scheme defaults to ed25519; `#` comments). docs/consenter.md.
    #[arg(long, required_unless_present = "config")]
    batcher_keys: Option<PathBuf>,
    /// BAFs are counted for at most this many seqs past a shard's last ordered one.
    #[arg(long, default_value_t = 64)]
    max_seqs_ahead: u64,
    /// The leader cuts a proposal at this many requests (BAFs and complaints).
    #[arg(long, default_value_t = 1000)]
    batch_max: usize,
    /// The leader cuts a non-empty proposal after this many milliseconds (the network
    /// config's default, `consensus.batch_interval_ms`).
    #[arg(long, default_value_t = 50)]
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
    /// How long Submit waits for the decision (DEADLINE_EXCEEDED beyond).
    #[arg(long, default_value_t = 30_000)]
    submit_timeout_ms: u64,
    /// Decisions streams served at once (RESOURCE_EXHAUSTED beyond).
    #[arg(long, default_value_t = 256)]
    max_decision_streams: usize,
    /// Open gRPC connections at once (more are closed at accept).
    #[arg(long, default_value = "1024", value_parser = crate::server_args::positive_usize)]
    max_connections: std::num::NonZeroUsize,
    /// Prometheus `/metrics` listen address (off when absent; docs/metrics.md).
    #[arg(long)]
    metrics: Option<String>,
}

/// The engine configuration from the flags (replica `id`).
fn engine(args: &ConsenterArgs, id: u32) -> bft::Config {
    let n = u32::try_from(args.peers.len()).unwrap_or(u32::MAX);
    let mut engine = bft::Config::new(id, n);
    engine.max_batch_count = args.batch_max;
    engine.batch_interval_ms = args.batch_interval_ms;
    engine.request_timeout_ms = args.request_timeout_ms;
    engine.heartbeat_interval_ms = args.heartbeat_interval_ms;
    engine.heartbeat_timeout_ms = args.heartbeat_timeout_ms;
    engine.view_change_timeout_ms = args.view_change_timeout_ms;
    engine
}

/// The node's resource bounds from the flags (both modes).
fn limits(args: &ConsenterArgs) -> consenter::replica::NodeLimits {
    consenter::replica::NodeLimits {
        submit_timeout: Duration::from_millis(args.submit_timeout_ms),
        max_connections: args.max_connections,
        ..consenter::replica::NodeLimits::default()
    }
}

/// The Decisions streams' bounds from the flags (both modes).
fn streams(args: &ConsenterArgs) -> consenter::decisions_service::StreamLimits {
    consenter::decisions_service::StreamLimits {
        max_streams: args.max_decision_streams,
        ..consenter::decisions_service::StreamLimits::default()
    }
}

/// Flag mode: the node configuration from the flags (reads the batcher keys).
fn flag_config(args: ConsenterArgs) -> anyhow::Result<consenter::node::Config> {
    let (Some(id), Some(parties), Some(shards), Some(batcher_keys)) =
        (args.id, args.parties, args.shards, args.batcher_keys.clone())
    else {
        anyhow::bail!("give --network and --party, or --id, --peers, --parties, --shards and --batcher-keys");
    };
    if parties as usize != args.peers.len() {
        anyhow::bail!(
            "--parties {} but {} --peers: one consenter per party",
            parties,
            args.peers.len()
        );
    }
    let text = std::fs::read_to_string(&batcher_keys)
        .with_context(|| format!("reading {}", batcher_keys.display()))?;
    let keys = consenter::node::parse_batcher_keys(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", batcher_keys.display()))?;
    let arma = consenter::application::ArmaConfig::new(
        arma::Parties::contiguous(parties),
        shards,
        args.max_seqs_ahead,
        keys,
    )?;
    let data = consenter::node::DataDir(&args.data_dir);
    data.create()
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let node = consenter::replica::ReplicaConfig {
        engine: engine(&args, id),
        keys: match (
            args.key_file.clone(),
            args.peer_keys.clone(),
            args.seed_prefix.clone(),
        ) {
            (Some(key), Some(peers), _) => NodeKeys::Files { key, peers },
            (_, _, Some(prefix)) => NodeKeys::Seeded { prefix },
            _ => anyhow::bail!("give --key-file with --peer-keys, or --seed-prefix"),
        },
        peers: args.peers.clone(),
        wal: data.wal(),
        decisions: data.decisions(),
        chain: args.chain_id.clone(),
        tick: Duration::from_millis(args.tick_ms),
        limits: limits(&args),
        channel_capacity: 4096,
    };
    Ok(consenter::node::Config {
        node,
        arma,
        state: data.state(),
        listen: args.listen,
        streams: streams(&args),
        snapshot_interval: Duration::from_secs(1),
        retain_decisions: consenter::node::DEFAULT_RETAIN_DECISIONS,
        next_key_files: Vec::new(),
        reconfig: None,
    })
}

/// Config mode: party P's consenter from the network config file (docs/network-config.md).
fn file_config(args: &ConsenterArgs, path: &Path, party: u32) -> anyhow::Result<consenter::node::Config> {
    let config = netconfig::NetworkConfig::load(path)
        .with_context(|| format!("loading the network config {}", path.display()))?;
    let dir = netconfig::tls::network_dir(path);
    let key_file = match &args.key_file {
        Some(file) => file.clone(),
        None => netconfig::key_file_path(&dir, netconfig::Node::Consenter(party))
            .context("a consenter has a key file")?,
    };
    if let Some(join) = &args.join {
        return joining_config(args, &config, path, join, party, key_file);
    }
    config.install_tls(path, wire::tls::Role::Consenter, party, None)?;
    let peer_keys = args
        .peer_keys
        .clone()
        .unwrap_or_else(|| netconfig::peer_keys_path(&dir));
    consenter::node::DataDir(&args.data_dir)
        .create()
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let paths = netconfig::ArmaConsenterPaths {
        key_file: key_file.clone(),
        peer_keys,
        data_dir: args.data_dir.clone(),
    };
    let mut cfg = config
        .arma_node_config(party, paths, args.listen)
        .with_context(|| format!("party {party}'s consenter"))?;
    cfg.node.limits = limits(args);
    cfg.streams = streams(args);
    let own = config
        .read_node_key(netconfig::Node::Consenter(party), &key_file)
        .with_context(|| format!("party {party}'s consenter key"))?;
    cfg.reconfig = Some(reconfig(&config, party, own, &args.next_key_file)?);
    cfg.next_key_files = next_key_files(&key_file, &args.next_key_file);
    Ok(cfg)
}

/// Where the node looks for a next key when a set names one it does not hold: the
/// `--next-key-file`s, then `<key file>` with `.next.key` in place of `.key` (the
/// batchers' convention), read at that switch.
fn next_key_files(key_file: &Path, given: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = given.to_vec();
    let default = key_file.with_extension("next.key");
    if !files.contains(&default) {
        files.push(default);
    }
    files
}

/// `--join`: party P's consenter joining the network of genesis config `genesis` (at
/// `path`) with the config that adds it (`join`).
fn joining_config(
    args: &ConsenterArgs,
    genesis: &netconfig::NetworkConfig,
    path: &Path,
    join: &Path,
    party: u32,
    key_file: PathBuf,
) -> anyhow::Result<consenter::node::Config> {
    let joined = netconfig::NetworkConfig::load(join)
        .with_context(|| format!("loading the joining config {}", join.display()))?;
    genesis.check_join(&joined, party)?;
    // Its TLS identity and the table of the config that adds it; the genesis config the
    // application starts from is older, so the TLS section does not go back to it.
    if joined.install_tls(path, wire::tls::Role::Consenter, party, None)? {
        netconfig::tls::follow::follow(&joined);
    }
    consenter::node::DataDir(&args.data_dir)
        .create()
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let paths = netconfig::join::JoiningConsenterPaths {
        key_file: key_file.clone(),
        data_dir: args.data_dir.clone(),
    };
    let mut cfg = genesis
        .joining_consenter_config(&joined, party, paths, args.listen)
        .with_context(|| format!("party {party}'s joining consenter"))?;
    cfg.node.limits = limits(args);
    cfg.streams = streams(args);
    let own = joined
        .read_node_key(netconfig::Node::Consenter(party), &key_file)
        .with_context(|| format!("party {party}'s consenter key"))?;
    cfg.reconfig = Some(reconfig(genesis, party, own, &args.next_key_file)?);
    cfg.next_key_files = next_key_files(&key_file, &args.next_key_file);
    Ok(cfg)
}

/// What lets the consenter order config updates: the network's rules, the config file
/// as the genesis config (sequence 0: a consenter holds later configs in its state, where
/// ordering or state transfer put them) and the consenter keys this node holds.
fn reconfig(
    config: &netconfig::NetworkConfig,
    party: u32,
    own: crypto::SigningKey,
    next_key_files: &[PathBuf],
) -> anyhow::Result<consenter::application::Reconfig> {
    if config.sequence() != 0 {
        anyhow::bail!(
            "the network config has sequence {}: a consenter starts from the network's genesis config \
             (sequence 0), and config updates reach it through ordering or state transfer \
             (docs/reconfiguration.md)",
            config.sequence()
        );
    }
    let mut keys = vec![own];
    for next in next_key_files {
        keys.push(
            crypto::read_key_file(next).with_context(|| format!("the next key file {}", next.display()))?,
        );
    }
    Ok(consenter::application::Reconfig {
        rules: std::sync::Arc::new(netconfig::update::NetworkRules::new()),
        genesis: std::sync::Arc::new(netconfig::update::config_bytes(config)),
        chain: config.cluster_keys().chain_id(),
        keys,
        party,
    })
}

/// Runs the consenter until it fails or the process is stopped (SIGTERM, Ctrl-C). Once
/// it listens it prints one JSON line on stdout:
/// `{"ready":"consenter","event":"ready","role":"consenter","id":…,"party":…,"listen":"…"}`.
pub async fn run(args: ConsenterArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let metrics = args.metrics.clone();
    let data_dir = args.data_dir.clone();
    let (id, cfg) = match (&args.config, args.party) {
        (Some(path), Some(party)) => {
            let cfg = file_config(&args, path, party)?;
            (party.saturating_sub(1), cfg)
        }
        _ => (args.id.unwrap_or(0), flag_config(args)?),
    };
    let deps = consenter::node::Deps {
        registry: crate::runner::metrics_with_data_dir(
            "consenter",
            metrics.as_deref(),
            &[("party", id.saturating_add(1))],
            &data_dir,
        )
        .await?,
    };
    let node = consenter::node::spawn(cfg, deps)
        .await
        .context("starting the consenter")?;
    let ready = serde_json::json!({
        "ready": "consenter",
        "event": "ready",
        "role": "consenter",
        "id": id,
        "party": id.saturating_add(1),
        "listen": node.listen.to_string(),
    });
    crate::runner::serve(node, "the consenter", Some(ready), &mut stopping).await
}
