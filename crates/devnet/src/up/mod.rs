//! `fabrx up / down` (docs/contracts.md; docs/network.md): a whole network on this
//! machine, every node its own OS process on loopback.
//!
//! [`up`] generates the network into its directory when it has none, starts every node
//! that is not already running (its own process group, stdout to `logs/<name>.out` where
//! the node prints its ready line, stderr to `logs/<name>.log`), waits for each ready line
//! (checked, not slept for: a node that exits first fails `up` with its log's tail),
//! writes `network.json` ([`crate::file`]) and creates the token namespace and the
//! issuer's wallet. Every node serves Prometheus `/metrics` on loopback, one port span
//! above its own port ([`metrics`]; docs/metrics.md). [`down`] stops them (SIGTERM, then
//! SIGKILL after 10 s).

mod metrics;

use crate::file::{NetworkFile, NodeEntry};
use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What `fabrx up` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Number of parties N (a new network only).
    pub parties: u32,
    /// Number of shards S (a new network only).
    pub shards: u32,
    /// The network directory: config, keys, data, logs and `network.json`.
    pub dir: PathBuf,
    /// The committers' database: `embedded` (each party its own store) or
    /// `postgres://…/NAME` (party 1 in NAME, party p in NAME_partyP, created when missing).
    pub db: String,
    /// Committing parties (their sidecar, verifier and vcservice); 0: ordering only.
    pub committers: u32,
    /// Reproducible keys (tests and demos only).
    pub seed: Option<u64>,
    /// Plain TCP instead of mutual TLS on every link (a new network only).
    pub insecure: bool,
    /// Start only the committing parties' nodes (their blocks come from a mock orderer).
    pub no_orderer: bool,
    /// Do not start the token application.
    pub no_token: bool,
    /// First port of a new network.
    pub base_port: u16,
}

/// What [`up`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    /// Every node of the network, in start order (as `network.json` lists them).
    pub nodes: Vec<NodeEntry>,
    /// The names of the nodes this call started (the others were running already).
    pub started: Vec<String>,
}

/// How long a node may take to print its ready line.
const READY: Duration = Duration::from_secs(60);

/// The order nodes start in: each phase's nodes serve before the next phase starts.
const PHASES: [&[&str]; 5] = [
    &["consenter", "batcher"],
    &["router", "assembler"],
    &["vcservice", "sigverifier"],
    &["sidecar", "query"],
    &["endorser"],
];

/// The network file of `dir`; an error when there is none.
pub fn started(dir: &Path) -> Result<NetworkFile> {
    NetworkFile::load(dir)?.ok_or_else(|| Error::Usage(format!("no network.json in {}", dir.display())))
}

/// Whether `pid` runs the node whose argv is `argv` (its `/proc` command line).
pub fn alive(pid: u32, argv: &[String]) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
    args.len() == argv.len() && args.iter().zip(argv).all(|(a, b)| *a == b.as_bytes())
}

/// The nodes of `processes` (`netconfig`'s topology), with pid 0 (not started): each
/// runs `exe node <role>` with the network config, its data directory `data/<name>` and
/// its log `logs/<name>.log` under `dir`.
fn entries(
    processes: &[netconfig::Process],
    config: &netconfig::NetworkConfig,
    dir: &Path,
    exe: &str,
) -> Result<Vec<NodeEntry>> {
    processes
        .iter()
        .map(|p| {
            let name = p.name();
            let data_dir = dir.join("data").join(&name);
            Ok(NodeEntry {
                argv: argv(p, config, dir, &data_dir, exe)?,
                log: dir.join("logs").join(format!("{name}.log")),
                data_dir,
                name,
                role: p.role.name().into(),
                party: p.party,
                shard: p.shard,
                pid: 0,
                cwd: dir.to_path_buf(),
                listen: p.listen.as_ref().map(ToString::to_string).unwrap_or_default(),
                metrics: None,
            })
        })
        .collect()
}

/// The command line of process `p`, whose data directory is `data_dir`.
fn argv(
    p: &netconfig::Process,
    config: &netconfig::NetworkConfig,
    dir: &Path,
    data_dir: &Path,
    exe: &str,
) -> Result<Vec<String>> {
    use wire::tls::Role;
    let path = |p: &Path| p.display().to_string();
    let mut argv = vec![
        exe.to_owned(),
        "node".into(),
        p.role.name().into(),
        "--network".into(),
        path(&netconfig::config_path(dir)),
    ];
    let party = p.party.to_string();
    let mut add = |flags: &[(&str, String)]| {
        for (flag, value) in flags {
            argv.extend([(*flag).to_owned(), value.clone()]);
        }
    };
    match p.role {
        Role::Router | Role::Query => add(&[("--party", party)]),
        Role::Consenter | Role::Assembler => add(&[("--party", party), ("--data-dir", path(data_dir))]),
        Role::Batcher => add(&[
            ("--party", party),
            ("--shard", p.shard.unwrap_or_default().to_string()),
            ("--data-dir", path(data_dir)),
        ]),
        Role::Endorser => add(&[("--index", p.index.unwrap_or_default().to_string())]),
        Role::Vcservice => add(&[
            ("--party", party),
            ("--config", path(&data_dir.join("vcservice.toml"))),
        ]),
        Role::Sigverifier => {
            let c = config.committer_party(p.party)?;
            add(&[("--party", party), ("--listen", c.sigverifier.to_string())]);
        }
        Role::Sidecar => {
            let c = config.committer_party(p.party)?;
            add(&[
                ("--party", party),
                ("--data-dir", path(&data_dir.join("store"))),
                ("--vcservice", c.vcservice.to_string()),
                ("--verifier", c.sigverifier.to_string()),
                ("--listen", c.sidecar.listen_addr().to_string()),
            ]);
        }
        Role::Client | Role::Wallet => {}
    }
    Ok(argv)
}

/// Whether `fabrx up` with `opts` starts processes of `role`: the ordering nodes unless
/// `--no-orderer`; the token nodes unless `--no-token` or `--no-orderer` (the token's
/// namespace is created through the orderer).
fn wanted(role: wire::tls::Role, opts: &Options) -> bool {
    use wire::tls::Role;
    match role {
        Role::Consenter | Role::Batcher | Role::Router | Role::Assembler => !opts.no_orderer,
        Role::Query | Role::Endorser => !opts.no_orderer && !opts.no_token,
        _ => true,
    }
}

/// Writes the vcservice's TOML file (listen address, metrics address, database) into
/// its data directory, unless it has one: an operator's edits are kept, and its metrics
/// address is read back.
fn write_vcservice_config(node: &mut NodeEntry, db: &str) -> Result<()> {
    let path = node.data_dir.join("vcservice.toml");
    let parse_error = |detail: String| Error::Parse {
        path: path.clone(),
        reason: detail,
    };
    if path.exists() {
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Io {
            path: path.clone(),
            source: e,
        })?;
        let config = vcservice::config::VcConfig::from_toml(&text).map_err(|e| parse_error(e.to_string()))?;
        node.metrics = config.metrics_listen;
        return Ok(());
    }
    let db = match db {
        "embedded" => format!("embedded:{}", node.data_dir.join("db").display()),
        url => party_database(url, node.party)?,
    };
    let mut config = vcservice::config::VcConfig::new(node.listen.clone(), db);
    config.metrics_listen.clone_from(&node.metrics);
    let text = format!(
        "# Written by `fabrx up`; edit and restart the node to change it (docs/vcservice.md).\n{}",
        config.to_toml().map_err(|e| parse_error(e.to_string()))?
    );
    std::fs::write(&path, text).map_err(|e| Error::Io { path, source: e })
}

/// Starts `node` in its own process group; stdout (the ready line) to `<log>.out`.
/// The child is returned so readiness can tell an exit from a slow start; it is never
/// waited for to the end (it outlives `fabrx up`; `fabrx down` stops it).
fn start(node: &mut NodeEntry) -> Result<std::process::Child> {
    let out = node.log.with_extension("out");
    let stdout = std::fs::File::create(&out).map_err(|e| Error::Io { path: out, source: e })?;
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .map_err(|e| Error::Io {
            path: node.log.clone(),
            source: e,
        })?;
    let Some((exe, args)) = node.argv.split_first() else {
        return Err(Error::Node {
            name: node.name.clone(),
            reason: "an empty command line".into(),
        });
    };
    use std::os::unix::process::CommandExt;
    let child = Command::new(exe)
        .args(args)
        .current_dir(&node.cwd)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::Node {
            name: node.name.clone(),
            reason: format!("starting {exe}: {e}"),
        })?;
    node.pid = child.id();
    Ok(child)
}

/// Waits for `node`'s ready line; fails with its log's tail if it exits first.
fn wait_ready(node: &NodeEntry, child: &mut std::process::Child) -> Result<serde_json::Value> {
    let out = node.log.with_extension("out");
    let deadline = Instant::now() + READY;
    loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(ready) = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v.get("ready").is_some())
        {
            return Ok(ready);
        }
        let exited = child.try_wait().ok().flatten();
        if exited.is_some() || Instant::now() > deadline {
            let log = std::fs::read_to_string(&node.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(Error::Node {
                name: node.name.clone(),
                reason: format!(
                    "did not become ready ({}); the end of {}:\n{}",
                    match exited {
                        Some(status) => format!("it exited: {status}"),
                        None => "timed out".to_owned(),
                    },
                    node.log.display(),
                    tail.join("\n")
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The database of committing party `p` on the PostgreSQL server of `url`: party 1's
/// is the database `url` names, party p's the database `<name>_party<p>` next to it; each
/// is created when missing (each party keeps its own state: a party's committer must not
/// see another's writes).
fn party_database(url: &str, p: u32) -> Result<String> {
    let party_url = if p == 1 {
        url.to_owned()
    } else {
        crate::pg::sibling_database(url, &format!("_party{p}"))?.0
    };
    crate::pg::ensure_database(&party_url)?;
    Ok(party_url)
}

/// Gives `nodes` their `/metrics` addresses: every node the config names sets the port
/// span ([`metrics`]).
fn assign_metrics(nodes: &mut [NodeEntry], config: &netconfig::NetworkConfig, dir: &Path, exe: &str) {
    // Every party committing when the config lists committer nodes for all, else the
    // ordering nodes alone.
    let every = config
        .topology(config.n())
        .or_else(|_| config.topology(0))
        .unwrap_or_default();
    let all = entries(&every, config, dir, exe).unwrap_or_default();
    if let Some(span) = metrics::span(&all) {
        metrics::assign(nodes, span);
    }
}

/// Nodes of a previous `up` that still run are kept, as they were started (pid, argv,
/// metrics address).
fn keep_running(nodes: &mut [NodeEntry], dir: &Path) -> Result<()> {
    let previous = NetworkFile::load(dir)?.map(|f| f.nodes).unwrap_or_default();
    for node in nodes {
        if let Some(old) = previous
            .iter()
            .find(|o| o.name == node.name && alive(o.pid, &o.argv))
        {
            node.pid = old.pid;
            node.argv.clone_from(&old.argv);
            node.metrics.clone_from(&old.metrics);
        }
    }
    Ok(())
}

/// The committers' database option: the embedded store, or a PostgreSQL URL.
fn check_db(db: &str) -> Result<()> {
    if db == "embedded" || db.starts_with("postgres://") || db.starts_with("postgresql://") {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "--db must be `embedded` or a postgres:// URL, not {db:?}"
    )))
}

/// Creates the network directory and generates the network there when it has none;
/// returns the directory's absolute path.
fn prepare(opts: &Options) -> Result<PathBuf> {
    let logs = opts.dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::Io {
        path: logs,
        source: e,
    })?;
    let dir = std::fs::canonicalize(&opts.dir).map_err(|e| Error::Io {
        path: opts.dir.clone(),
        source: e,
    })?;
    if !netconfig::config_path(&dir).exists() {
        netconfig::generate(&netconfig::GenerateSpec {
            parties: opts.parties,
            shards: opts.shards,
            host: "127.0.0.1".into(),
            base_port: opts.base_port,
            seed: opts.seed,
            chain: consenter::keys::DEFAULT_CHAIN.into(),
            dir: dir.clone(),
            tls: !opts.insecure,
        })?;
    }
    Ok(dir)
}

/// Starts the network `opts` describes with the node binary `exe` (every node runs
/// `exe node <role> …`), or the nodes of it that are not running. Needs a tokio runtime
/// handle (the token namespace is created through the routers) and must not run on
/// one of its worker threads.
pub fn up(opts: &Options, exe: &Path) -> Result<Launched> {
    check_db(&opts.db)?;
    if opts.no_orderer && opts.committers == 0 {
        return Err(Error::Usage(
            "--no-orderer starts only committing parties: give --committers 1 or more".into(),
        ));
    }
    // A new network is checked before anything is written for it.
    if !netconfig::config_path(&opts.dir).exists() && opts.committers > opts.parties {
        return Err(Error::Usage(format!(
            "--committers {} is more than --parties {}",
            opts.committers, opts.parties
        )));
    }
    let dir = prepare(opts)?;
    let config = netconfig::NetworkConfig::load(&netconfig::config_path(&dir))?;
    if opts.committers > config.n() {
        return Err(Error::Usage(format!(
            "--committers {} is more than the network's {} parties",
            opts.committers,
            config.n()
        )));
    }
    let exe_text = exe.display().to_string();
    let processes: Vec<netconfig::Process> = config
        .topology(opts.committers)?
        .into_iter()
        .filter(|p| wanted(p.role, opts))
        .collect();
    let mut nodes = entries(&processes, &config, &dir, &exe_text)?;
    assign_metrics(&mut nodes, &config, &dir, &exe_text);
    keep_running(&mut nodes, &dir)?;
    let mut started = Vec::new();
    for phase in PHASES {
        let mut children = Vec::new();
        for node in nodes
            .iter_mut()
            .filter(|n| phase.contains(&n.role.as_str()) && n.pid == 0)
        {
            std::fs::create_dir_all(&node.data_dir).map_err(|e| Error::Io {
                path: node.data_dir.clone(),
                source: e,
            })?;
            if node.role == "vcservice" {
                write_vcservice_config(node, &opts.db)?;
            }
            children.push((node.name.clone(), start(node)?));
            started.push(node.name.clone());
        }
        // Written before waiting: `fabrx down` finds whatever was started.
        write(&dir, &config, &nodes)?;
        for (name, mut child) in children {
            let Some(node) = nodes.iter().find(|n| n.name == name) else {
                continue;
            };
            let ready = wait_ready(node, &mut child)?;
            tracing::debug!(node = node.name, %ready, "ready");
        }
    }
    if opts.committers > 0 && !opts.no_orderer && !opts.no_token {
        crate::token::setup(&dir, &config)?;
    }
    Ok(Launched { nodes, started })
}

fn write(dir: &Path, config: &netconfig::NetworkConfig, nodes: &[NodeEntry]) -> Result<()> {
    NetworkFile {
        parties: config.n(),
        shards: config.shards().get(),
        nodes: nodes.to_vec(),
    }
    .write(dir)
}

/// `fabrx down`: SIGTERM to every running node of the network in `dir`, SIGKILL to those
/// alive after 10 s; returns the network file (every node now stopped).
pub fn down(dir: &Path) -> Result<NetworkFile> {
    let file = started(dir)?;
    let running: Vec<&NodeEntry> = file.nodes.iter().filter(|n| alive(n.pid, &n.argv)).collect();
    for n in &running {
        signal("TERM", n.pid);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while running.iter().any(|n| alive(n.pid, &n.argv)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for n in running.iter().filter(|n| alive(n.pid, &n.argv)) {
        signal("KILL", n.pid);
    }
    Ok(file)
}

fn signal(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
