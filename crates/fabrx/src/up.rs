//! `fabrx up / down / status` (docs/contracts.md; docs/network.md): the command-line
//! shell over `devnet::up` (starting and stopping a network of processes) and
//! `devnet::height` (the heights `status` shows); `status --watch` redraws a table from
//! every node's metrics ([`watch`]).

mod watch;

use anyhow::Context;
use clap::Args;
use devnet::file::NodeEntry;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Number of parties N of a new network [default: 4]. Given for a directory that
    /// holds a network already, it must match that network.
    #[arg(long)]
    parties: Option<u32>,
    /// Number of shards S of a new network [default: 2]; on an existing network it must
    /// match.
    #[arg(long)]
    shards: Option<u32>,
    /// The network directory: config, keys, data, logs and `network.json`.
    #[arg(long, default_value = "./fabrx-net")]
    dir: PathBuf,
    /// The committers' database: `embedded` (each party its own store) or
    /// `postgres://…/NAME` (party 1 in NAME, party p in NAME_partyP, created when missing).
    #[arg(long, default_value = "embedded")]
    db: String,
    /// Committing parties (their sidecar, verifier and vcservice); 0: ordering only
    /// [default: 1]. On a network `fabrx up` started before: as its `network.json`
    /// records (given, it must match).
    #[arg(long)]
    committers: Option<u32>,
    /// Reproducible keys (tests and demos only).
    #[arg(long)]
    seed: Option<u64>,
    /// Plain TCP instead of mutual TLS on every link (a new network only; refused for a
    /// network that has TLS): for experiments only.
    #[arg(long)]
    insecure: bool,
    /// Start only the committing parties' nodes: their blocks come from a mock orderer
    /// (`fabrx loadgen --target mock-orderer`) serving on party 1's assembler endpoint.
    #[arg(long)]
    no_orderer: bool,
    /// Do not start the token application (endorsers, query services, the token
    /// namespace and the issuer wallet): an ordering and committer network only. On a
    /// network `fabrx up` started before without it, implied.
    #[arg(long)]
    no_token: bool,
    /// First port of a new network (party p takes 3 + S ports from base + (p − 1)·(3 + S);
    /// the committers' and token services' follow; each node's `/metrics` port is its
    /// port plus the width of that range) [default: 7050]; on an existing network it
    /// must match.
    #[arg(long)]
    base_port: Option<u16>,
    /// One JSON object per line instead of the table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fabrx down` and `fabrx status`.
#[derive(Debug, Args)]
pub struct DirArgs {
    /// The network directory.
    #[arg(long, default_value = "./fabrx-net")]
    dir: PathBuf,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fabrx status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Keep scraping every node's `/metrics` and redraw a table of liveness, throughput
    /// and queue depth until Ctrl-C (docs/metrics.md "Watching a network").
    #[arg(long)]
    watch: bool,
    /// Seconds between two scrapes, with `--watch`.
    #[arg(long, default_value = "2", requires = "watch")]
    interval: std::num::NonZeroU64,
}

/// What `network.json` records of a network `fabrx up` started: its committing parties
/// (those with a sidecar) and whether it runs the token application.
struct Started {
    committers: u32,
    token: bool,
}

impl Started {
    fn of(dir: &std::path::Path) -> anyhow::Result<Option<Started>> {
        let Some(file) = devnet::file::NetworkFile::load(dir)? else {
            return Ok(None);
        };
        let committers: std::collections::BTreeSet<u32> = file
            .nodes
            .iter()
            .filter(|n| n.role == "sidecar")
            .map(|n| n.party)
            .collect();
        Ok(Some(Started {
            committers: u32::try_from(committers.len()).unwrap_or(u32::MAX),
            token: file
                .nodes
                .iter()
                .any(|n| n.role == "endorser" || n.role == "query"),
        }))
    }
}

impl UpArgs {
    fn options(&self, started: Option<&Started>) -> devnet::up::Options {
        devnet::up::Options {
            parties: self.parties.unwrap_or(4),
            shards: self.shards.unwrap_or(2),
            dir: self.dir.clone(),
            db: self.db.clone(),
            committers: self.committers.or(started.map(|s| s.committers)).unwrap_or(1),
            seed: self.seed,
            insecure: self.insecure,
            no_orderer: self.no_orderer,
            no_token: self.no_token || started.is_some_and(|s| !s.token),
            base_port: self.base_port.unwrap_or(7050),
        }
    }

    /// The flags of a new network given for a directory that holds another one: they
    /// would be ignored, so they are refused, naming what the directory holds.
    fn clashes(&self, started: Option<&Started>) -> anyhow::Result<Vec<String>> {
        let path = netconfig::config_path(&self.dir);
        if !path.exists() {
            return Ok(Vec::new());
        }
        let config = netconfig::NetworkConfig::load(&path)
            .with_context(|| format!("loading the network config {}", path.display()))?;
        let mut clashes = Vec::new();
        if let Some(p) = self.parties.filter(|p| *p != config.n()) {
            clashes.push(format!("--parties {p} (it has {})", config.n()));
        }
        if let Some(s) = self.shards.filter(|s| *s != config.shards().get()) {
            clashes.push(format!("--shards {s} (it has {})", config.shards()));
        }
        let first = config.parties().first().map(|p| p.router.port());
        if let (Some(b), Some(first)) = (self.base_port, first)
            && b != first
        {
            clashes.push(format!("--base-port {b} (its first port is {first})"));
        }
        if self.insecure && config.tls_enabled() {
            clashes.push("--insecure (it uses mutual TLS)".into());
        }
        if let (Some(c), Some(started)) = (self.committers, started)
            && c != started.committers
        {
            clashes.push(format!("--committers {c} (it runs {})", started.committers));
        }
        Ok(clashes)
    }
}

/// `fabrx up`.
pub fn up(args: UpArgs) -> anyhow::Result<()> {
    let started = Started::of(&args.dir)?;
    let clashes = args.clashes(started.as_ref())?;
    anyhow::ensure!(
        clashes.is_empty(),
        "{} holds a network already, and {} would apply to a new one only: use another --dir, \
         or leave the flags out to start this one",
        args.dir.display(),
        clashes.join(", ")
    );
    let exe = std::env::current_exe().context("locating the fabrx binary")?;
    let launched = devnet::up::up(&args.options(started.as_ref()), &exe)?;
    print_nodes(&launched.nodes, args.json, |n| {
        if launched.started.contains(&n.name) {
            "started"
        } else {
            "running"
        }
    });
    Ok(())
}

fn print_nodes(nodes: &[NodeEntry], json: bool, state: impl Fn(&NodeEntry) -> &'static str) {
    for n in nodes {
        if json {
            let line = serde_json::json!({
                "name": n.name, "role": n.role, "party": n.party, "shard": n.shard,
                "pid": n.pid, "listen": n.listen, "state": state(n), "log": n.log,
            });
            if !crate::out::line(&line.to_string()) {
                return;
            }
        } else if !crate::out::line(&format!(
            "{:<14} {:<11} pid {:<8} {:<22} {}",
            n.name,
            n.role,
            n.pid,
            n.listen,
            state(n)
        )) {
            return;
        }
    }
}

/// `fabrx down`: SIGTERM to every running node, SIGKILL to those alive after 10 s.
pub fn down(args: DirArgs) -> anyhow::Result<()> {
    let file = devnet::up::down(&args.dir)?;
    print_nodes(&file.nodes, args.json, |_| "stopped");
    Ok(())
}

/// `fabrx status`: each node's liveness, or with `--watch` its metrics until Ctrl-C.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let StatusArgs {
        dir: args,
        watch,
        interval,
    } = args;
    let file = devnet::up::started(&args.dir)?;
    if watch {
        let watch = watch::Watch {
            interval: Duration::from_secs(interval.get()),
            json: args.json,
        };
        return tokio::runtime::Handle::current().block_on(watch::run(&file.nodes, &watch));
    }
    let config_path = netconfig::config_path(&args.dir);
    let config = netconfig::NetworkConfig::load(&config_path)?;
    config.install_client_tls(&args.dir)?;
    let rt = tokio::runtime::Handle::current();
    for n in &file.nodes {
        let up = devnet::up::alive(n.pid, &n.argv);
        let height = if up {
            rt.block_on(devnet::height::height(&n.role, &n.listen))
        } else {
            None
        };
        let epoch = if up && n.role == "consenter" {
            rt.block_on(devnet::height::consenter_epoch(&n.listen))
        } else {
            None
        };
        let state = if up { "running" } else { "down" };
        if args.json {
            let line = serde_json::json!({
                "name": n.name, "role": n.role, "party": n.party, "shard": n.shard,
                "pid": n.pid, "listen": n.listen, "state": state, "height": height, "log": n.log,
                "config_epoch": epoch,
            });
            if !crate::out::line(&line.to_string()) {
                return Ok(());
            }
        } else {
            let mut h = height.map_or_else(String::new, |h| format!("height {h}"));
            if let Some(e) = epoch {
                h.push_str(&format!(" · config epoch {e}"));
            }
            let text = format!(
                "{:<14} {:<11} pid {:<8} {:<22} {state:<8} {h}",
                n.name, n.role, n.pid, n.listen
            );
            if !crate::out::line(&text) {
                return Ok(());
            }
        }
    }
    Ok(())
}
