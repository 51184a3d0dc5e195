//! `fabrx network generate`: writes a new network's shared config and per-node key files
//! (crates/netconfig, docs/network-config.md). It only writes files. `fabrx network
//! update …`: the offline steps of a config update (`crate::network_update`); `fabrx
//! network tls …` and `fabrx network party add` write the next config of a TLS rotation
//! and of a party joining (`crate::network_tls`, `crate::network_party`).

use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// `fabrx network …` commands.
#[derive(Debug, Subcommand)]
pub enum NetworkCmd {
    /// Generate keys and the network config into a directory (nothing is started).
    Generate(GenerateArgs),
    /// Propose, sign, merge, show and verify a network config update (docs/reconfiguration.md).
    Update {
        #[command(subcommand)]
        cmd: crate::network_update::UpdateCmd,
    },
    /// The next config of a TLS certificate rotation: add the ordering nodes' next
    /// certificates, or retire their old ones (docs/reconfiguration.md).
    Tls {
        #[command(subcommand)]
        cmd: crate::network_tls::TlsCmd,
    },
    /// The next config of a party joining: issue party N + 1's keys and certificates and
    /// write the config that adds it (docs/reconfiguration.md "Adding a party").
    Party {
        #[command(subcommand)]
        cmd: crate::network_party::PartyCmd,
    },
}

/// Arguments of `fabrx network generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Number of parties N.
    #[arg(long, default_value_t = 4)]
    parties: u32,
    /// Number of shards S.
    #[arg(long, default_value_t = 2)]
    shards: u32,
    /// Directory to write into (`config/network-config.json`, `keys/party-<p>/…`); one
    /// that already holds a network config is refused.
    #[arg(long)]
    dir: PathBuf,
    /// Derive every key from this seed instead of the OS's random source: reproducible
    /// networks for tests and demos only (anyone who knows the seed has every key).
    #[arg(long)]
    seed: Option<u64>,
    /// First port; party p takes the 3 + S ports from base + (p − 1)·(3 + S): router,
    /// consenter, assembler, then one batcher per shard.
    #[arg(long, default_value_t = 7050)]
    base_port: u16,
    /// Host every endpoint names.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Chain name (bound into every consenter signature).
    #[arg(long, default_value = consenter::keys::DEFAULT_CHAIN)]
    chain: String,
    /// Plain TCP instead of mutual TLS on every link: for experiments only (no CA, no
    /// certificates; any process can call any node).
    #[arg(long)]
    insecure: bool,
    /// Lay the network out for Kubernetes (docs/deploy.md): party p's nodes in namespace
    /// PATTERN with `{party}` replaced by p (e.g. `fabrx-party{party}`), every endpoint a
    /// Service DNS name on a fixed port per role (`router.fabrx-party1.svc.cluster.local:7050`),
    /// plus `<dir>/k8s/shared/` (public) and `<dir>/k8s/party<p>/secret.yaml` (party p's
    /// keys). `--host` and `--base-port` are then unused.
    #[arg(long, value_name = "NAMESPACE_PATTERN", conflicts_with_all = ["host", "base_port"])]
    k8s: Option<String>,
    /// The cluster's DNS domain, with `--k8s`.
    #[arg(long, default_value = netconfig::k8s::DEFAULT_CLUSTER_DOMAIN, requires = "k8s")]
    k8s_domain: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs a `fabrx network` command.
pub fn run(cmd: NetworkCmd) -> anyhow::Result<()> {
    match cmd {
        NetworkCmd::Generate(args) => generate(args),
        NetworkCmd::Update { cmd } => crate::network_update::run(cmd),
        NetworkCmd::Tls { cmd } => crate::network_tls::run(cmd),
        NetworkCmd::Party { cmd } => crate::network_party::run(cmd),
    }
}

fn generate(args: GenerateArgs) -> anyhow::Result<()> {
    let spec = netconfig::GenerateSpec {
        parties: args.parties,
        shards: args.shards,
        host: args.host,
        base_port: args.base_port,
        seed: args.seed,
        chain: args.chain,
        dir: args.dir,
        tls: !args.insecure,
    };
    let (g, k8s) = match &args.k8s {
        None => (netconfig::generate(&spec), None),
        Some(pattern) => {
            let layout = netconfig::k8s::K8sLayout::new(pattern, &args.k8s_domain)?;
            match netconfig::k8s::generate_k8s(&spec, &layout) {
                Ok(k) => (Ok(k.network.clone()), Some(k)),
                Err(e) => (Err(e), None),
            }
        }
    };
    let g = g.with_context(|| format!("generating a network in {}", spec.dir.display()))?;
    if args.json {
        let key_files: Vec<serde_json::Value> = g
            .key_files
            .iter()
            .map(|(node, path)| serde_json::json!({ "node": node.to_string(), "path": path }))
            .collect();
        let line = serde_json::json!({
            "config": g.config_path,
            "peer_keys": g.peer_keys_path,
            "parties": spec.parties,
            "shards": spec.shards,
            "seeded": spec.seed.is_some(),
            "key_files": key_files,
            "admin_keys": g.admin_key_files.iter()
                .map(|(party, path)| serde_json::json!({ "party": party, "path": path }))
                .collect::<Vec<_>>(),
            "k8s": k8s.as_ref().map(|k| serde_json::json!({
                "shared": k.shared_dir,
                "secrets": k.secrets.iter()
                    .map(|(p, path)| serde_json::json!({ "party": p, "path": path }))
                    .collect::<Vec<_>>(),
            })),
        });
        println!("{line}");
        return Ok(());
    }
    println!(
        "network of {} parties and {} shards: {}",
        spec.parties,
        spec.shards,
        g.config_path.display()
    );
    println!("consenter peer keys: {}", g.peer_keys_path.display());
    for (node, path) in &g.key_files {
        println!("{node}: {}", path.display());
    }
    for (party, path) in &g.admin_key_files {
        println!("party {party} admin (signs config updates): {}", path.display());
    }
    if let Some(k) = &k8s {
        println!("kubernetes, shared with every party: {}", k.shared_dir.display());
        for (party, path) in &k.secrets {
            println!(
                "kubernetes, party {party}'s secret (give it to party {party} only): {}",
                path.display()
            );
        }
    }
    if spec.seed.is_some() {
        println!("keys derived from a seed: for tests and demos only");
    }
    Ok(())
}
