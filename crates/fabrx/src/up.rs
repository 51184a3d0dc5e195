//! `fabrx up / down / status` (docs/contracts.md "Contracts"; docs/network.md): a whole network
//! on this machine, every node its own OS process on loopback.
//!
//! `up` generates the network into `--dir` when it has none, starts every node that is
//! not already running (its own process group, stdout to `logs/<name>.out` where the
//! node prints its ready line, stderr to `logs/<name>.log`), waits for each ready line
//! (checked, not slept for: a node that exits first fails `up` with its log's tail),
//! writes `network.json` and prints a table. Every node serves Prometheus `/metrics` on
//! loopback, one port span above its own port ([`metrics`]; docs/metrics.md). `down` stops them (SIGTERM, then SIGKILL
//! after 10 s); `status` shows each node's liveness, `status --watch` its throughput and
//! queue depth from its metrics ([`watch`]).

mod metrics;
mod watch;

use anyhow::{Context, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Arguments of `fabrx up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Number of parties N (a new network only).
    #[arg(long, default_value_t = 4)]
    parties: u32,
    /// Number of shards S (a new network only).
    #[arg(long, default_value_t = 2)]
    shards: u32,
    /// The network directory: config, keys, data, logs and `network.json`.
    #[arg(long, default_value = "./fabrx-net")]
    dir: PathBuf,
    /// The committers' database: `embedded` (each party its own store) or
    /// `postgres://…/NAME` (party 1 in NAME, party p in NAME_partyP, created when missing).
    #[arg(long, default_value = "embedded")]
    db: String,
    /// Committing parties (their sidecar, verifier and vcservice); 0: ordering only.
    #[arg(long, default_value_t = 1)]
    committers: u32,
    /// Reproducible keys (tests and demos only).
    #[arg(long)]
    seed: Option<u64>,
    /// Plain TCP instead of mutual TLS on every link (a new network only): for
    /// experiments only.
    #[arg(long)]
    insecure: bool,
    /// Start only the committing parties' nodes: their blocks come from a mock orderer
    /// (`fabrx loadgen --target mock-orderer`) serving on party 1's assembler endpoint.
    #[arg(long)]
    no_orderer: bool,
    /// Do not start the token application (endorsers, query services, the token
    /// namespace and the issuer wallet): an ordering and committer network only.
    #[arg(long)]
    no_token: bool,
    /// First port of a new network (party p takes 3 + S ports from base + (p − 1)·(3 + S);
    /// the committers' and token services' follow; each node's `/metrics` port is its
    /// port plus the width of that range).
    #[arg(long, default_value_t = 7050)]
    base_port: u16,
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

use devnet::file::{NetworkFile, NodeEntry};

const READY: Duration = Duration::from_secs(60);

fn load(dir: &Path) -> anyhow::Result<Option<NetworkFile>> {
    Ok(NetworkFile::load(dir)?)
}

/// Whether `pid` runs the node whose argv is `argv` (its `/proc` command line).
fn alive(pid: u32, argv: &[String]) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
    args.len() == argv.len() && args.iter().zip(argv).all(|(a, b)| *a == b.as_bytes())
}

/// The nodes of an ordering network (consenters and batchers first, then routers and
/// assemblers), with pid 0 (not started).
fn ordering_nodes(config: &netconfig::NetworkConfig, dir: &Path, exe: &str) -> Vec<NodeEntry> {
    let config_path = netconfig::config_path(dir).display().to_string();
    let mut nodes = Vec::new();
    let mut add = |role: &str, party: u32, shard: Option<u32>, listen: String| {
        let name = match shard {
            Some(s) => format!("{role}-{party}-{s}"),
            None => format!("{role}-{party}"),
        };
        let data_dir = dir.join("data").join(&name);
        let mut argv = vec![
            exe.to_owned(),
            "node".into(),
            role.into(),
            "--config".into(),
            config_path.clone(),
        ];
        argv.extend(["--party".into(), party.to_string()]);
        if let Some(s) = shard {
            argv.extend(["--shard".into(), s.to_string()]);
        }
        if role != "router" {
            argv.extend(["--data-dir".into(), data_dir.display().to_string()]);
        }
        nodes.push(NodeEntry {
            log: dir.join("logs").join(format!("{name}.log")),
            name,
            role: role.into(),
            party,
            shard,
            pid: 0,
            argv,
            cwd: dir.to_path_buf(),
            listen,
            metrics: None,
            data_dir,
        });
    };
    for p in config.parties() {
        add("consenter", p.id, None, p.consenter.to_string());
        for s in 0..config.shards().get() {
            let listen = config
                .batcher(p.id, s)
                .map(|b| b.endpoint.to_string())
                .unwrap_or_default();
            add("batcher", p.id, Some(s), listen);
        }
    }
    for p in config.parties() {
        add("router", p.id, None, p.router.to_string());
        let listen = p.assembler.as_ref().map(ToString::to_string).unwrap_or_default();
        add("assembler", p.id, None, listen);
    }
    nodes
}

/// The nodes of committing parties 1..=`committers`: per party a validator-committer
/// (its config file `vcservice.toml` in its data directory), a signature verifier and
/// a sidecar reading the orderer, with pid 0 (not started).
fn committer_nodes(
    config: &netconfig::NetworkConfig,
    dir: &Path,
    exe: &str,
    committers: u32,
) -> anyhow::Result<Vec<NodeEntry>> {
    let config_path = netconfig::config_path(dir).display().to_string();
    let mut nodes = Vec::new();
    for p in 1..=committers {
        let c = config.committer_party(p)?;
        let entry = |role: &str, listen: &netconfig::Endpoint, argv: Vec<String>| {
            let name = format!("{role}-{p}");
            NodeEntry {
                log: dir.join("logs").join(format!("{name}.log")),
                data_dir: dir.join("data").join(&name),
                name,
                role: role.into(),
                party: p,
                shard: None,
                pid: 0,
                argv,
                cwd: dir.to_path_buf(),
                listen: listen.to_string(),
                metrics: None,
            }
        };
        let node_argv = |role: &str, rest: Vec<String>| {
            let mut argv = vec![exe.to_owned(), "node".into(), role.into()];
            argv.extend(rest);
            argv
        };
        let vc_dir = dir.join("data").join(format!("vcservice-{p}"));
        nodes.push(entry(
            "vcservice",
            &c.vcservice,
            node_argv(
                "vcservice",
                vec![
                    "--config".into(),
                    vc_dir.join("vcservice.toml").display().to_string(),
                    "--network".into(),
                    config_path.clone(),
                    "--party".into(),
                    p.to_string(),
                ],
            ),
        ));
        nodes.push(entry(
            "sigverifier",
            &c.sigverifier,
            node_argv(
                "sigverifier",
                vec![
                    "--listen".into(),
                    c.sigverifier.to_string(),
                    "--network".into(),
                    config_path.clone(),
                    "--party".into(),
                    p.to_string(),
                ],
            ),
        ));
        let store = dir.join("data").join(format!("sidecar-{p}")).join("store");
        nodes.push(entry(
            "sidecar",
            &c.sidecar,
            node_argv(
                "sidecar",
                vec![
                    "--network".into(),
                    config_path.clone(),
                    "--party".into(),
                    p.to_string(),
                    "--store".into(),
                    store.display().to_string(),
                    "--vcservice".into(),
                    c.vcservice.to_string(),
                    "--verifier".into(),
                    c.sigverifier.to_string(),
                    "--listen".into(),
                    c.sidecar.listen_addr().to_string(),
                ],
            ),
        ));
    }
    Ok(nodes)
}

/// The token application's nodes of a network with committing parties 1..=`committers`:
/// each committing party's query service and every endorser, with pid 0 (not started).
fn token_nodes(
    config: &netconfig::NetworkConfig,
    dir: &Path,
    exe: &str,
    committers: u32,
) -> anyhow::Result<Vec<NodeEntry>> {
    let Ok(app) = config.token() else {
        return Ok(Vec::new());
    };
    if committers == 0 {
        return Ok(Vec::new());
    }
    let config_path = netconfig::config_path(dir).display().to_string();
    let entry = |name: String, role: &str, party: u32, listen: String, rest: Vec<String>| {
        let mut argv = vec![
            exe.to_owned(),
            "node".into(),
            role.into(),
            "--config".into(),
            config_path.clone(),
        ];
        argv.extend(rest);
        NodeEntry {
            log: dir.join("logs").join(format!("{name}.log")),
            data_dir: dir.join("data").join(&name),
            name,
            role: role.into(),
            party,
            shard: None,
            pid: 0,
            argv,
            cwd: dir.to_path_buf(),
            listen,
            metrics: None,
        }
    };
    let mut nodes = Vec::new();
    for p in 1..=committers {
        let listen = config.query_endpoint(p)?.to_string();
        nodes.push(entry(
            format!("query-{p}"),
            "query",
            p,
            listen,
            vec!["--party".into(), p.to_string()],
        ));
    }
    for e in &app.endorsers {
        nodes.push(entry(
            format!("endorser-{}", e.index),
            "endorser",
            e.party,
            e.endpoint.to_string(),
            vec!["--index".into(), e.index.to_string()],
        ));
    }
    Ok(nodes)
}

/// Creates the token namespace (its `_meta` tx, endorsed by the administrator key, sent
/// to every router; a network that has it already answers with the first creation's
/// status) and the issuer's wallet `<dir>/wallets/issuer` when it has none.
fn token_setup(dir: &Path, config: &netconfig::NetworkConfig) -> anyhow::Result<()> {
    let Ok(app) = config.token() else {
        return Ok(());
    };
    let admin = crypto::read_key_file(&netconfig::meta_key_path(dir)).with_context(|| {
        format!(
            "reading the administrator key {}",
            netconfig::meta_key_path(dir).display()
        )
    })?;
    let (id, envelope) = token::namespace::create_envelope(&app.namespace, &config.token_policy()?, &admin);
    let net = crate::wallet_cmd::token_network(dir)?;
    let rt = tokio::runtime::Handle::current();
    let status = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let sent = net.submit(&envelope).await;
            if sent.acks >= sent.quorum
                && let Some((status, _)) = net.wait_status(&id, Duration::from_secs(10)).await?
            {
                return Ok::<_, anyhow::Error>(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "the token namespace was not created within 60 s ({} of {} routers accepted it)",
                    sent.acks,
                    net.routers.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })?;
    anyhow::ensure!(
        status == types::Status::Committed,
        "creating the token namespace {:?} ended {}",
        app.namespace,
        status.name()
    );
    let issuer_wallet = dir.join("wallets").join("issuer");
    if !issuer_wallet.exists() {
        let key =
            crypto::read_key_file(&netconfig::issuer_key_path(dir)).context("reading the issuer key")?;
        wallet::Wallet::create_with_key(&issuer_wallet, "issuer".into(), &key)?;
    }
    Ok(())
}

/// Writes a validator-committer's config file when it has none: its listen address,
/// metrics address and database (`embedded`: a store in its data directory). A file
/// that exists is kept, and its metrics address is what `node.metrics` records.
fn write_vcservice_config(node: &mut NodeEntry, db: &str) -> anyhow::Result<()> {
    let path = node.data_dir.join("vcservice.toml");
    if path.exists() {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let config = vcservice::config::VcConfig::from_toml(&text)
            .with_context(|| format!("parsing {}", path.display()))?;
        node.metrics = config.metrics_listen;
        return Ok(());
    }
    let db = match db {
        "embedded" => format!("embedded:{}", node.data_dir.join("db").display()),
        url => party_database(url, node.party)?,
    };
    let metrics = node
        .metrics
        .as_ref()
        .map_or_else(String::new, |m| format!("metrics_listen = {m:?}\n"));
    let text = format!(
        "# Written by `fabrx up`; edit and restart the node to change it (docs/vcservice.md).\n\
         listen = {listen:?}\n{metrics}db = {db:?}\n",
        listen = node.listen,
    );
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// Starts `node` in its own process group; stdout (the ready line) to `<log>.out`.
/// The child is returned so readiness can tell an exit from a slow start; it is never
/// waited for to the end (it outlives `fabrx up`; `fabrx down` stops it).
fn start(node: &mut NodeEntry) -> anyhow::Result<std::process::Child> {
    let out = node.log.with_extension("out");
    let stdout = std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .with_context(|| format!("opening {}", node.log.display()))?;
    let (exe, args) = node.argv.split_first().context("an empty argv")?;
    use std::os::unix::process::CommandExt;
    let child = Command::new(exe)
        .args(args)
        .current_dir(&node.cwd)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", node.name))?;
    node.pid = child.id();
    Ok(child)
}

/// Waits for `node`'s ready line; fails with its log's tail if it exits first.
fn wait_ready(node: &NodeEntry, child: &mut std::process::Child) -> anyhow::Result<serde_json::Value> {
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
            bail!(
                "{} did not become ready ({}); the end of {}:\n{}",
                node.name,
                match exited {
                    Some(status) => format!("it exited: {status}"),
                    None => "timed out".to_owned(),
                },
                node.log.display(),
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The committers' database flag: the embedded store, or one PostgreSQL database for a
/// single committing party.
fn check_db(args: &UpArgs) -> anyhow::Result<()> {
    if args.db == "embedded" {
        return Ok(());
    }
    if !args.db.starts_with("postgres://") && !args.db.starts_with("postgresql://") {
        bail!("--db must be `embedded` or a postgres:// URL, not {:?}", args.db);
    }
    Ok(())
}

/// The database of committing party `p` on the PostgreSQL server of `url`: party 1's
/// is the database `url` names, party p's the database `<name>_party<p>` next to it; each
/// is created when missing (each party keeps its own state: a party's committer must not
/// see another's writes).
fn party_database(url: &str, p: u32) -> anyhow::Result<String> {
    let party_url = if p == 1 {
        url.to_owned()
    } else {
        devnet::pg::sibling_database(url, &format!("_party{p}"))?.0
    };
    devnet::pg::ensure_database(&party_url)?;
    Ok(party_url)
}

/// Creates `--dir` and generates the network there when it has none; returns the
/// directory's absolute path.
fn prepare(args: &UpArgs) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(args.dir.join("logs")).context("creating the network directory")?;
    let dir = std::fs::canonicalize(&args.dir).context("resolving --dir")?;
    if !netconfig::config_path(&dir).exists() {
        netconfig::generate(&netconfig::GenerateSpec {
            parties: args.parties,
            shards: args.shards,
            host: "127.0.0.1".into(),
            base_port: args.base_port,
            seed: args.seed,
            chain: consenter::keys::DEFAULT_CHAIN.into(),
            dir: dir.clone(),
            tls: !args.insecure,
        })
        .with_context(|| format!("generating a network in {}", dir.display()))?;
    }
    Ok(dir)
}

/// Gives `nodes` their `/metrics` addresses: every node the config names sets the port
/// span ([`metrics`]).
fn assign_metrics(nodes: &mut [NodeEntry], config: &netconfig::NetworkConfig, dir: &Path, exe: &str) {
    let mut all = ordering_nodes(config, dir, exe);
    all.extend(committer_nodes(config, dir, exe, config.n()).unwrap_or_default());
    all.extend(token_nodes(config, dir, exe, config.n()).unwrap_or_default());
    if let Some(span) = metrics::span(&all) {
        metrics::assign(nodes, span);
    }
}

/// Nodes of a previous `up` that still run are kept, as they were started (pid, argv,
/// metrics address).
fn keep_running(nodes: &mut [NodeEntry], dir: &Path) -> anyhow::Result<()> {
    let previous = load(dir)?.map(|f| f.nodes).unwrap_or_default();
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

/// `fabrx up`.
pub fn up(args: UpArgs) -> anyhow::Result<()> {
    check_db(&args)?;
    let dir = prepare(&args)?;
    let config_path = netconfig::config_path(&dir);
    let config = netconfig::NetworkConfig::load(&config_path)?;
    let exe = std::env::current_exe().context("locating the fabrx binary")?;
    if args.committers > config.n() {
        bail!(
            "--committers {} is more than the network's {} parties",
            args.committers,
            config.n()
        );
    }
    let exe_text = exe.display().to_string();
    if args.no_orderer && args.committers == 0 {
        bail!("--no-orderer starts only committing parties: give --committers 1 or more");
    }
    let mut nodes = if args.no_orderer {
        Vec::new()
    } else {
        ordering_nodes(&config, &dir, &exe_text)
    };
    nodes.extend(committer_nodes(&config, &dir, &exe_text, args.committers)?);
    // The token application needs the orderer (its namespace is created through it).
    if !args.no_token && !args.no_orderer {
        nodes.extend(token_nodes(&config, &dir, &exe_text, args.committers)?);
    }
    assign_metrics(&mut nodes, &config, &dir, &exe_text);
    keep_running(&mut nodes, &dir)?;
    let mut started = Vec::new();
    let phases = [
        &["consenter", "batcher"][..],
        &["router", "assembler"][..],
        &["vcservice", "sigverifier"][..],
        &["sidecar", "query"][..],
        &["endorser"][..],
    ];
    for phase in phases {
        let mut children = Vec::new();
        for node in nodes
            .iter_mut()
            .filter(|n| phase.contains(&n.role.as_str()) && n.pid == 0)
        {
            std::fs::create_dir_all(&node.data_dir)
                .with_context(|| format!("creating {}", node.data_dir.display()))?;
            if node.role == "vcservice" {
                write_vcservice_config(node, &args.db)?;
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
    if args.committers > 0 && !args.no_orderer && !args.no_token {
        token_setup(&dir, &config)?;
    }
    print_nodes(&nodes, args.json, |n| {
        if started.contains(&n.name) {
            "started"
        } else {
            "running"
        }
    });
    Ok(())
}

fn write(dir: &Path, config: &netconfig::NetworkConfig, nodes: &[NodeEntry]) -> anyhow::Result<()> {
    let file = NetworkFile {
        parties: config.n(),
        shards: config.shards().get(),
        nodes: nodes.to_vec(),
    };
    Ok(file.write(dir)?)
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
    let Some(file) = load(&args.dir)? else {
        bail!("no network.json in {}", args.dir.display());
    };
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
    print_nodes(&file.nodes, args.json, |_| "stopped");
    Ok(())
}

fn signal(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `fabrx status`: each node's liveness, or with `--watch` its metrics until Ctrl-C.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let StatusArgs {
        dir: args,
        watch,
        interval,
    } = args;
    let Some(file) = load(&args.dir)? else {
        bail!("no network.json in {}", args.dir.display());
    };
    if watch {
        let watch = watch::Watch {
            interval: Duration::from_secs(interval.get()),
            json: args.json,
        };
        return tokio::runtime::Handle::current().block_on(watch::run(&file.nodes, &watch));
    }
    let config_path = netconfig::config_path(&args.dir);
    let config = netconfig::NetworkConfig::load(&config_path)?;
    crate::tls_setup::install_client(&config, &args.dir)?;
    let rt = tokio::runtime::Handle::current();
    for n in &file.nodes {
        let up = alive(n.pid, &n.argv);
        let height = if up {
            rt.block_on(devnet::height::height(&n.role, &n.listen))
        } else {
            None
        };
        let state = if up { "running" } else { "down" };
        if args.json {
            let line = serde_json::json!({
                "name": n.name, "role": n.role, "party": n.party, "shard": n.shard,
                "pid": n.pid, "listen": n.listen, "state": state, "height": height, "log": n.log,
            });
            if !crate::out::line(&line.to_string()) {
                return Ok(());
            }
        } else {
            let h = height.map_or_else(String::new, |h| format!("height {h}"));
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
