//! `fabrx network tls add|retire`: the next config of a TLS certificate rotation (ADR
//! 0019, docs/reconfiguration.md "Rotating TLS certificates"). Files only; the config
//! they write is then proposed, signed and submitted like any update.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use netconfig::NetworkConfig;

/// `fabrx network tls …` commands.
#[derive(Debug, Subcommand)]
pub enum TlsCmd {
    /// Issue each ordering node (or each `--node`) a new certificate with the network CA
    /// (`<dir>/tls/ca.key`) into `<dir>/tls/<name>.pem|key`, and write the next config,
    /// which lists it beside the node's current one (update A).
    Add(TlsArgs),
    /// Write the next config without each ordering node's older certificate, for nodes
    /// that have two (update B).
    Retire(TlsArgs),
}

/// Arguments of `fabrx network tls add|retire`.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// The config in force (`fabrx network update current --out`), or the network
    /// directory for its genesis config.
    #[arg(long)]
    network: PathBuf,
    /// The network directory holding `tls/` (the CA's key for `add`, where the new
    /// certificates are written). Default: `--network` when it is a directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Only this node (`router-1`, `batcher-2-0`, `consenter-3`, `assembler-4`); repeat
    /// for several. Default: every router, batcher, consenter and assembler.
    #[arg(long = "node")]
    nodes: Vec<String>,
    /// The next config to write (an existing file is refused).
    #[arg(long)]
    out: PathBuf,
}

/// Runs a `fabrx network tls` command.
pub fn run(cmd: TlsCmd) -> anyhow::Result<()> {
    let (args, add) = match &cmd {
        TlsCmd::Add(a) => (a, true),
        TlsCmd::Retire(a) => (a, false),
    };
    let current = load(&args.network)?;
    if args.out.exists() {
        bail!("{} already exists: choose another --out", args.out.display());
    }
    let (next, names) = if add {
        let dir = match (&args.dir, args.network.is_dir()) {
            (Some(d), _) => d.clone(),
            (None, true) => args.network.clone(),
            (None, false) => bail!("--dir: the network directory holding tls/ca.key"),
        };
        netconfig::tls::rotate::add_next(&dir, current.file(), &args.nodes)?
    } else {
        netconfig::tls::rotate::retire_old(current.file(), &args.nodes)?
    };
    if names.is_empty() {
        bail!("no certificate to {}", if add { "add" } else { "retire" });
    }
    let text = serde_json::to_string_pretty(&next)? + "\n";
    std::fs::write(&args.out, text).with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "{} {} certificate{} ({}); the next config, sequence {}, is {}: propose it with `fabrx network update propose`",
        if add { "issued" } else { "retired" },
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        names.join(", "),
        next.sequence,
        args.out.display()
    );
    Ok(())
}

fn load(path: &Path) -> anyhow::Result<NetworkConfig> {
    let file = if path.is_dir() {
        netconfig::config_path(path)
    } else {
        path.to_path_buf()
    };
    NetworkConfig::load(&file).with_context(|| format!("the network config {}", file.display()))
}
