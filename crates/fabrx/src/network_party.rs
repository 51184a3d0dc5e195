//! `fabrx network party add`: a party joining (docs/reconfiguration.md "Adding a party").
//! Issues the joiner's keys and TLS certificates into the network directory and writes
//! the next config that adds it, which is then proposed, signed and submitted like any
//! update. `fabrx network party remove`: a party leaving ("Removing a party"); writes
//! the next config without it. Files only; the deciding logic is
//! `netconfig::generate::party` and `netconfig::update::without_party`.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use netconfig::NetworkConfig;
use netconfig::generate::party::{PartySpec, add_party};

/// `fabrx network party …` commands.
#[derive(Debug, Subcommand)]
pub enum PartyCmd {
    /// Issue party N + 1's keys (`<dir>/keys/party-<P>/`) and TLS certificates (with the
    /// network CA, `<dir>/tls/`), and write the next config that adds it, its endpoints
    /// past every port in use (on a Kubernetes network: its Services, and its Secret
    /// manifest `<dir>/k8s/party<P>/secret.yaml`).
    Add(AddArgs),
    /// Write the next config without party P: its router, batchers, consenter and
    /// assembler leave the ordering (their TLS certificates out, their keys retired, its
    /// id never given again). Propose, sign and submit it like any update; the party's
    /// ordering nodes stop themselves at the decision that puts it in force.
    Remove(RemoveArgs),
}

/// Arguments of `fabrx network party remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The config in force (`fabrx network update current --out`), or the network
    /// directory for its genesis config.
    #[arg(long)]
    network: PathBuf,
    /// The party that leaves.
    #[arg(long)]
    party: u32,
    /// The next config to write (an existing file is refused).
    #[arg(long)]
    out: PathBuf,
}

/// Arguments of `fabrx network party add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The config in force (`fabrx network update current --out`), or the network
    /// directory for its genesis config.
    #[arg(long)]
    network: PathBuf,
    /// The network directory holding `tls/ca.key`, where the party's keys and
    /// certificates are written. Default: `--network` when it is a directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The next config to write (an existing file is refused).
    #[arg(long)]
    out: PathBuf,
    /// Derive the party's keys from this seed, as `fabrx network generate --seed` does:
    /// tests and demos only (anyone who knows the seed has every key).
    #[arg(long)]
    seed: Option<u64>,
    /// The host its endpoints name (default: the host of party N's router). Not on a
    /// Kubernetes network.
    #[arg(long)]
    host: Option<String>,
    /// The Kubernetes namespace pattern the network was generated with (`generate --k8s`):
    /// the joiner's endpoints are its Services in namespace PATTERN with `{party}` = N + 1,
    /// and its Secret manifest is written to `<dir>/k8s/party<N+1>/secret.yaml`. Default:
    /// read from the config when `<dir>/k8s/shared/` exists. Checked against every
    /// endpoint of the config.
    #[arg(long, value_name = "PATTERN", conflicts_with = "host")]
    k8s: Option<String>,
    /// The cluster's DNS domain, with `--k8s`.
    #[arg(long, default_value = netconfig::k8s::DEFAULT_CLUSTER_DOMAIN, requires = "k8s")]
    k8s_domain: String,
}

/// Runs a `fabrx network party` command.
pub fn run(cmd: PartyCmd) -> anyhow::Result<()> {
    match cmd {
        PartyCmd::Add(args) => add(args),
        PartyCmd::Remove(args) => remove(&args),
    }
}

fn remove(args: &RemoveArgs) -> anyhow::Result<()> {
    let current = load(&args.network)?;
    if args.out.exists() {
        bail!("{} already exists: choose another --out", args.out.display());
    }
    let next = netconfig::update::without_party(&current, args.party)
        .with_context(|| format!("removing party {}", args.party))?;
    let text = serde_json::to_string_pretty(&next)? + "\n";
    std::fs::write(&args.out, text).with_context(|| format!("writing {}", args.out.display()))?;
    let f = (next.parties.len().saturating_sub(1)) / 3;
    println!(
        "party {}: the next config, sequence {}, without it is {} (parties {:?}, f = {f}): propose it with `fabrx network update propose`",
        args.party,
        next.sequence,
        args.out.display(),
        next.parties.iter().map(|p| p.id).collect::<Vec<_>>()
    );
    Ok(())
}

fn add(args: AddArgs) -> anyhow::Result<()> {
    let current = load(&args.network)?;
    if args.out.exists() {
        bail!("{} already exists: choose another --out", args.out.display());
    }
    let dir = match (&args.dir, args.network.is_dir()) {
        (Some(d), _) => d.clone(),
        (None, true) => args.network.clone(),
        (None, false) => bail!("--dir: the network directory holding tls/ca.key and keys/"),
    };
    let k8s = match &args.k8s {
        Some(pattern) => Some(netconfig::k8s::K8sLayout::new(pattern, &args.k8s_domain)?),
        None => None,
    };
    let ports_in_use = devnet_ports(&dir)?;
    let spec = PartySpec {
        dir,
        host: args.host,
        k8s,
        seed: args.seed,
        ports_in_use,
    };
    let added = add_party(&current, &spec)?;
    let text = serde_json::to_string_pretty(&added.next)? + "\n";
    std::fs::write(&args.out, text).with_context(|| format!("writing {}", args.out.display()))?;
    let p = added.party;
    let certs = if added.certificates.is_empty() {
        String::new()
    } else {
        format!(", TLS certificates {}", added.certificates.join(", "))
    };
    println!(
        "party {p}: keys in {}{certs}; the next config, sequence {}, is {}: propose it with `fabrx network update propose`",
        spec.dir.join("keys").join(format!("party-{p}")).display(),
        added.next.sequence,
        args.out.display()
    );
    if let Some(k) = &added.k8s {
        println!(
            "kubernetes: party {p}'s namespace is {}; its secret (give it to party {p} only): {}",
            k.namespace,
            k.secret.display()
        );
    }
    Ok(())
}

/// The ports of every address a devnet's `network.json` in `dir` records (each node's
/// listen and metrics address), so that the joiner's endpoints go past the metrics ports
/// `fabrx up` placed above the config's. None without that file.
fn devnet_ports(dir: &Path) -> anyhow::Result<Vec<u16>> {
    let Some(file) = devnet::file::NetworkFile::load(dir)? else {
        return Ok(Vec::new());
    };
    let port = |addr: &str| addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
    Ok(file
        .nodes
        .iter()
        .flat_map(|n| std::iter::once(n.listen.as_str()).chain(n.metrics.as_deref()))
        .filter_map(port)
        .collect())
}

fn load(path: &Path) -> anyhow::Result<NetworkConfig> {
    let file = if path.is_dir() {
        netconfig::config_path(path)
    } else {
        path.to_path_buf()
    };
    NetworkConfig::load(&file).with_context(|| format!("the network config {}", file.display()))
}
