//! `fabrx network update …`: the steps of a network config update
//! (docs/reconfiguration.md) — propose, sign, merge, show, verify offline, and submit to
//! the consenters, who order it. The deciding logic is `netconfig::update`; this reads
//! and writes the files, prints, and sends.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use netconfig::NetworkConfig;
use netconfig::update::{self, ConfigUpdate};
use std::path::{Path, PathBuf};
use types::PartyId;

/// Largest update file read: a network config (at most 64 MiB) as a JSON string, with room
/// for its escapes and the signatures.
const MAX_UPDATE_BYTES: u64 = 160 << 20;

/// `fabrx network update …` commands.
#[derive(Debug, Subcommand)]
pub enum UpdateCmd {
    /// Write the unsigned update that replaces the config in force with an edited one.
    Propose(ProposeArgs),
    /// Add one party's admin signature to an update.
    Sign(SignArgs),
    /// Prove the new node keys an update brings in are held: each key file given (or found
    /// under `--keys-dir`) whose public key the update brings in signs a proof into it.
    Prove(ProveArgs),
    /// Join the signatures of two copies of one update.
    Merge(MergeArgs),
    /// Print what an update changes, who signed it, and whether it is valid now.
    Show(ShowArgs),
    /// Check an update against the config in force; exits non-zero with the reason when
    /// it is not valid.
    Verify(VerifyArgs),
    /// Submit a signed update to a consenter, which orders it: every node switches to its
    /// config at the decision that holds it. Exits non-zero with the reason when refused.
    Submit(SubmitArgs),
    /// Write the network config in force, as f+1 of the consenters answer it alike: the
    /// file to edit for the next update (it carries the keys earlier updates retired).
    Current(CurrentArgs),
}

/// Arguments of `fabrx network update current`.
#[derive(Debug, Args)]
pub struct CurrentArgs {
    /// The network directory `fabrx network generate` wrote (its genesis config gives the
    /// consenters, its client TLS identity authenticates the calls).
    #[arg(long)]
    network: PathBuf,
    /// Write the config here (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Arguments of `fabrx network update submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The update file (signed by enough admins).
    #[arg(long)]
    update: PathBuf,
    /// The network directory `fabrx network generate` wrote (its config gives the
    /// consenters' endpoints, its client TLS identity authenticates the call).
    #[arg(long)]
    network: PathBuf,
    /// Submit to this party's consenter (default: each consenter in party order until
    /// one answers); with `--router`, to this party's router.
    #[arg(long)]
    party: Option<PartyId>,
    /// Submit through a router instead of a consenter (for an operator who reaches only
    /// the routers): the router hands the update on to the consenters, its own party's
    /// first, and answers as they do.
    #[arg(long)]
    router: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fabrx network update propose`.
#[derive(Debug, Args)]
pub struct ProposeArgs {
    /// The config in force: a network config file, or a directory `fabrx network
    /// generate` wrote.
    #[arg(long)]
    network: PathBuf,
    /// The next config: the config in force, edited, with `sequence` one more.
    #[arg(long)]
    next: PathBuf,
    /// The update file to write (an existing file is refused).
    #[arg(long)]
    out: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fabrx network update sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The update file; signed in place unless `--out` is given.
    #[arg(long)]
    update: PathBuf,
    /// The signing party.
    #[arg(long)]
    party: PartyId,
    /// The party's admin key file (`keys/party-<P>/admin.key` of a generated network).
    #[arg(long)]
    key: PathBuf,
    /// Write the signed update here instead of over `--update`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The config in force: checks that the key is the party's admin key and that the
    /// update is for this network before signing.
    #[arg(long)]
    network: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fabrx network update prove`.
#[derive(Debug, Args)]
pub struct ProveArgs {
    /// The update file; proofs are added in place unless `--out` is given.
    #[arg(long)]
    update: PathBuf,
    /// The config in force (a file, or the network directory for its genesis config): the
    /// keys to prove are the consenter and batcher keys the update's next config names
    /// and this one does not.
    #[arg(long)]
    network: PathBuf,
    /// A node key file to prove with (repeatable).
    #[arg(long)]
    key: Vec<PathBuf>,
    /// A directory searched for key files (`*.key`, e.g. `keys/party-5` or `keys`): each
    /// one whose public key the update brings in proves it; the others are left alone.
    #[arg(long)]
    keys_dir: Option<PathBuf>,
    /// Write the update here instead of over `--update`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fabrx network update merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// One copy of the update.
    a: PathBuf,
    /// The other copy.
    b: PathBuf,
    /// The merged update file to write (may be `a` or `b`).
    #[arg(long)]
    out: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fabrx network update show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The update file.
    #[arg(long)]
    update: PathBuf,
    /// The config in force: to print the changes and check the signatures.
    #[arg(long)]
    network: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fabrx network update verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The update file.
    #[arg(long)]
    update: PathBuf,
    /// The config in force.
    #[arg(long)]
    network: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs a `fabrx network update` command.
pub fn run(cmd: UpdateCmd) -> anyhow::Result<()> {
    match cmd {
        UpdateCmd::Propose(args) => propose(&args),
        UpdateCmd::Sign(args) => sign(&args),
        UpdateCmd::Prove(args) => prove(&args),
        UpdateCmd::Merge(args) => merge(&args),
        UpdateCmd::Show(args) => show(&args),
        UpdateCmd::Verify(args) => verify(&args),
        // Run from `main`'s runtime, on a blocking thread.
        UpdateCmd::Submit(args) => tokio::runtime::Handle::current().block_on(submit(&args)),
        UpdateCmd::Current(args) => tokio::runtime::Handle::current().block_on(current(&args)),
    }
}

/// Sends the update to a consenter and waits for its decision, then says whether that
/// decision put the update's config in force (another update of the same sequence may
/// have been applied first). A consenter that refuses the update (it may lag behind the
/// config in force, or be faulty) is not the last word: the next one is asked.
async fn submit(args: &SubmitArgs) -> anyhow::Result<()> {
    let u = read_update(&args.update)?;
    let genesis = load_for_calls(&args.network)?;
    let config = in_force_or(genesis).await;
    let request = consenter::application::encode_config_update(u.to_json().as_bytes());
    let parties: Vec<PartyId> = match args.party {
        Some(p) => vec![p],
        None => config.parties().iter().map(|p| p.id).collect(),
    };
    let mut failures = Vec::new();
    let mut refusals = Vec::new();
    let via = if args.router { "router" } else { "consenter" };
    for party in parties {
        let consenter = config.party(party)?.consenter.uri();
        let endpoint = if args.router {
            config.party(party)?.router.uri()
        } else {
            consenter.clone()
        };
        let sent = if args.router {
            submit_via_router(&endpoint, request.clone()).await
        } else {
            submit_to(&endpoint, request.clone()).await
        };
        match sent {
            // Decided before this answer (by this submission, after an earlier try timed
            // out, or by another): the consenter no longer knows in which decision.
            Ok(0) => return decided_earlier(&config, &u, party, via).await,
            Ok(decided) => {
                // Decision numbers are the network's: any consenter serves the decision.
                let in_force = put_in_force(&consenter, decided, u.config.as_bytes()).await;
                return report_decided(args.json, &u, (party, via), decided, in_force);
            }
            Err(e)
                if e.code() == tonic::Code::InvalidArgument || e.code() == tonic::Code::PermissionDenied =>
            {
                refusals.push(format!(
                    "party {party}'s {via} refused the config update: {}",
                    e.message()
                ));
                // A router already asked f + 1 consenters: its refusal is the network's.
                if args.router {
                    break;
                }
            }
            Err(e) => failures.push(format!(
                "party {party} ({endpoint}): {:?}: {}",
                e.code(),
                e.message()
            )),
        }
    }
    if let Some(first) = refusals.first() {
        bail!("{first} (and {} more refusals)", refusals.len() - 1);
    }
    bail!("no {via} ordered the config update: {}", failures.join("; "))
}

/// Asks every consenter for the config in force and writes the one f+1 of them answer
/// byte for byte (at least one correct consenter among them), pretty-printed.
async fn current(args: &CurrentArgs) -> anyhow::Result<()> {
    let config = load_for_calls(&args.network)?;
    let (in_force, parties) = netconfig::in_force::in_force_config(&config)
        .await
        .map_err(|reason| anyhow::anyhow!(reason))?;
    let pretty = serde_json::to_string_pretty(in_force.file())? + "\n";
    match &args.out {
        Some(path) => std::fs::write(path, pretty).with_context(|| format!("writing {}", path.display()))?,
        None => print!("{pretty}"),
    }
    eprintln!(
        "config sequence {} in force, as the consenters of parties {parties:?} answer",
        in_force.sequence()
    );
    Ok(())
}

/// A channel to the consenter at `endpoint` (with the client TLS identity installed).
async fn connect(endpoint: &str) -> anyhow::Result<tonic::transport::Channel> {
    wire::server::connect(&wire::server::client_endpoint(endpoint.to_string())?)
        .await
        .context("connecting")
}

/// Whether decision `decided`, as the consenter at `endpoint` serves it, carries `config`
/// as the config it put in force.
async fn put_in_force(endpoint: &str, decided: u64, config: &[u8]) -> anyhow::Result<bool> {
    let channel = connect(endpoint).await?;
    let mut stream = wire::pb::consenter_client::ConsenterClient::new(channel)
        .max_decoding_message_size(consenter::transport::MAX_MESSAGE_BYTES)
        .decisions(wire::pb::DecisionsRequest { from: decided })
        .await
        .context("opening its decisions")?
        .into_inner();
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), stream.message())
        .await
        .context("no decision within 10 s")?
        .context("reading its decisions")?
        .context("its decisions ended")?;
    if first.number != decided {
        bail!("it served decision {} for {decided}", first.number);
    }
    Ok(first.config == config)
}

/// The update was decided before the answer, in a decision the consenter no longer
/// names: whether its config is in force is asked of the consenters.
async fn decided_earlier(
    config: &NetworkConfig,
    u: &ConfigUpdate,
    party: PartyId,
    via: &str,
) -> anyhow::Result<()> {
    let in_force = crate::config_follow::in_force(config)
        .await
        .map(|(bytes, _)| bytes == u.config.as_bytes());
    match in_force {
        Ok(true) => {
            println!(
                "ordered: the config update for sequence {} is in force (party {party}'s {via} knew it decided, not in which decision)",
                u.sequence
            );
            Ok(())
        }
        Ok(false) => bail!(
            "the config update for sequence {} was decided, but its config is not the one in force: another update for that sequence was applied first; `fabrx status` shows the config epoch in force",
            u.sequence
        ),
        Err(e) => bail!(
            "the config update for sequence {} was decided (party {party}'s {via}); whether its config is in force is not known: {e}",
            u.sequence
        ),
    }
}

/// Prints what decision `decided` did with the update, and fails unless it put the
/// update's config in force.
fn report_decided(
    json: bool,
    u: &ConfigUpdate,
    (party, via): (PartyId, &str),
    decided: u64,
    in_force: anyhow::Result<bool>,
) -> anyhow::Result<()> {
    if json {
        let line = serde_json::json!({
            "submitted": true,
            "via": via,
            "party": party,
            "decided_seq": decided,
            "sequence": u.sequence,
            "in_force": in_force.as_ref().ok().copied(),
        });
        println!("{line}");
    } else {
        println!(
            "ordered: the config update for sequence {} is in decision {decided} (party {party}'s {via})",
            u.sequence
        );
    }
    match in_force {
        Ok(true) => Ok(()),
        Ok(false) => bail!(
            "decision {decided} did not put this update's config in force: another update for sequence {} was applied first, or this one is no longer valid; nothing of it changed",
            u.sequence
        ),
        Err(e) => bail!("whether decision {decided} put the config in force is not known: {e}"),
    }
}

/// One `Router.SubmitConfigUpdate` call; the decided seq or the status.
async fn submit_via_router(endpoint: &str, request: Vec<u8>) -> Result<u64, tonic::Status> {
    let channel = connect(endpoint)
        .await
        .map_err(|e| tonic::Status::unavailable(format!("{e:#}")))?;
    let answer = wire::pb::router_client::RouterClient::new(channel)
        .max_encoding_message_size(usize::try_from(MAX_UPDATE_BYTES).unwrap_or(usize::MAX))
        .submit_config_update(wire::pb::BftSubmitRequest { request })
        .await?
        .into_inner();
    decided_seq(&answer, "router")
}

/// The decision an answer names, unless it did not accept the update.
fn decided_seq(answer: &wire::pb::BftSubmitResponse, who: &str) -> Result<u64, tonic::Status> {
    if !answer.accepted {
        return Err(tonic::Status::internal(format!(
            "the {who} answered without accepting"
        )));
    }
    Ok(answer.decided_seq)
}

/// One Submit call; the decided seq or the status.
async fn submit_to(endpoint: &str, request: Vec<u8>) -> Result<u64, tonic::Status> {
    let channel = connect(endpoint)
        .await
        .map_err(|e| tonic::Status::unavailable(format!("{e:#}")))?;
    let answer = wire::pb::bft_consensus_client::BftConsensusClient::new(channel)
        .max_encoding_message_size(usize::try_from(MAX_UPDATE_BYTES).unwrap_or(usize::MAX))
        .submit(wire::pb::BftSubmitRequest { request })
        .await?
        .into_inner();
    decided_seq(&answer, "consenter")
}

/// The network config for a command that calls the nodes: `path` is the network
/// directory, whose client TLS identity (`tls/`) is installed for the calls. A config file
/// serves only a network without TLS: with TLS the calls would fail on the handshake with
/// errors that do not say why.
fn load_for_calls(path: &Path) -> anyhow::Result<NetworkConfig> {
    let config = load_network(path)?;
    if path.is_dir() {
        config.install_client_tls(path)?;
    } else if config.file().tls.is_some() {
        bail!(
            "--network {}: give the network directory (its tls/ holds the client TLS identity these calls need), not a config file",
            path.display()
        );
    }
    Ok(config)
}

/// The config in force as f + 1 consenters answer it (a party that joined is in it, one
/// whose endpoints moved is where it is now), its TLS section followed from now on;
/// `genesis` itself when they do not answer alike (the calls then say what failed).
async fn in_force_or(genesis: NetworkConfig) -> NetworkConfig {
    match netconfig::in_force::in_force_config(&genesis).await {
        Ok((config, _)) if config.sequence() == genesis.sequence() => genesis,
        Ok((config, _)) => {
            netconfig::tls::follow::follow(&config);
            config
        }
        Err(reason) => {
            tracing::warn!(%reason, "the config in force is not known: the consenters of the given config are asked");
            genesis
        }
    }
}

/// The network config file at `path`, parsed but not validated (at most the size a
/// network config may have).
fn read_network_file(path: &Path) -> anyhow::Result<netconfig::NetworkFile> {
    let what = || format!("the next config {}", path.display());
    let size = std::fs::metadata(path).with_context(what)?.len();
    if size > MAX_UPDATE_BYTES {
        bail!("{}: {size} bytes, more than a network config may have", what());
    }
    let text = std::fs::read_to_string(path).with_context(what)?;
    serde_json::from_str(&text).with_context(what)
}

/// The network config at `path`: the file, or `config/network-config.json` of a directory.
fn load_network(path: &Path) -> anyhow::Result<NetworkConfig> {
    let file = if path.is_dir() {
        netconfig::config_path(path)
    } else {
        path.to_path_buf()
    };
    NetworkConfig::load(&file).with_context(|| format!("the network config {}", file.display()))
}

fn read_update(path: &Path) -> anyhow::Result<ConfigUpdate> {
    let context = || format!("the config update {}", path.display());
    let size = std::fs::metadata(path).with_context(context)?.len();
    if size > MAX_UPDATE_BYTES {
        bail!(
            "the config update {}: {size} bytes, more than an update ({MAX_UPDATE_BYTES})",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).with_context(context)?;
    ConfigUpdate::from_json(&text).with_context(context)
}

/// Writes `update` to `path` through a rename, so that a reader never sees half a file.
fn write_update(path: &Path, update: &ConfigUpdate) -> anyhow::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::write(&partial, update.to_json()).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

/// `parties 1, 2` / `party 3` / `nobody`.
fn parties_text(parties: &[PartyId]) -> String {
    let list: Vec<String> = parties.iter().map(ToString::to_string).collect();
    match list.len() {
        0 => "nobody".into(),
        1 => format!("party {}", list.join("")),
        _ => format!("parties {}", list.join(", ")),
    }
}

fn propose(args: &ProposeArgs) -> anyhow::Result<()> {
    let current = load_network(&args.network)?;
    // Read as a file only: `update::propose` checks it in the rules' order (sequence,
    // chain, shards, then the whole config), so a changed shard count is refused as such
    // rather than as a party with a batcher missing.
    let next_file = read_network_file(&args.next)?;
    let update = update::propose(&current, &next_file).with_context(|| {
        format!(
            "proposing {} as the next config of {}",
            args.next.display(),
            against(&args.network, &current)
        )
    })?;
    if args.out.exists() {
        bail!("{} already exists: choose another --out", args.out.display());
    }
    write_update(&args.out, &update)?;
    let next = update.next_file().context("the proposed update's next config")?;
    let changes = update::diff(current.file(), &next);
    if args.json {
        let line = serde_json::json!({
            "update": args.out,
            "chain": update.chain,
            "sequence": update.sequence,
            "config_sha256": hex::encode(update.config_digest()),
            "changes": changes,
            "needed": current.update_signatures(),
        });
        println!("{line}");
        return Ok(());
    }
    println!(
        "config update {} of chain {}: sequence {} → {}, {} change{}",
        args.out.display(),
        update.chain,
        update.sequence,
        next.sequence,
        changes.len(),
        if changes.len() == 1 { "" } else { "s" }
    );
    for change in &changes {
        println!("  {change}");
    }
    println!(
        "it needs the signatures of {} parties' admins (`fabrx network update sign`)",
        current.update_signatures()
    );
    Ok(())
}

fn sign(args: &SignArgs) -> anyhow::Result<()> {
    let mut update = read_update(&args.update)?;
    let key = match &args.network {
        Some(network) => {
            let current = load_network(network)?;
            update::validate_unsigned(&current, &update)
                .with_context(|| format!("the config update {}", args.update.display()))?;
            if current.party(args.party).is_err() {
                bail!(
                    "party {} cannot sign: the signers of an update are the parties of the config in force ({}), and a party the update adds is not one yet",
                    args.party,
                    network.display()
                );
            }
            current.read_admin_key(args.party, &args.key)?
        }
        None => crypto::read_key_file(&args.key)
            .with_context(|| format!("the key file {}", args.key.display()))?,
    };
    update::sign(&mut update, args.party, &key);
    let out = args.out.as_ref().unwrap_or(&args.update);
    write_update(out, &update)?;
    if args.json {
        let line = serde_json::json!({ "update": out, "party": args.party, "signers": update.signers() });
        println!("{line}");
        return Ok(());
    }
    println!(
        "party {} signed {}; signed by {}",
        args.party,
        out.display(),
        parties_text(&update.signers())
    );
    Ok(())
}

/// Most key files `prove` reads under `--keys-dir` (a network directory's `keys/` holds
/// a few per party).
const MAX_KEY_FILES: usize = 4096;

fn prove(args: &ProveArgs) -> anyhow::Result<()> {
    let mut update = read_update(&args.update)?;
    let current = load_network(&args.network)?;
    let next = update::validate_unsigned(&current, &update)
        .with_context(|| format!("the config update {}", args.update.display()))?;
    let needed = update::new_node_keys(&current, &next);
    let mut files = args.key.clone();
    if let Some(dir) = &args.keys_dir {
        key_files(dir, &mut files)?;
    }
    let mut proven = Vec::new();
    for file in &files {
        let key = match crypto::read_key_file(file) {
            Ok(key) => key,
            // Under --keys-dir a file that is not a node key (or not readable) is passed
            // over; one named with --key is an error.
            Err(e) if !args.key.contains(file) => {
                tracing::debug!(file = %file.display(), %e, "not a key file");
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("the key file {}", file.display())),
        };
        let public = key.public_key();
        match needed.iter().find(|(_, k)| *k == public) {
            Some((holder, _)) => {
                update::prove(&mut update, &key);
                proven.push(holder.clone());
            }
            None if args.key.contains(file) => bail!(
                "{}: its key {public} is not one the update brings in (the new node keys are those its next config names and {} does not)",
                file.display(),
                args.network.display()
            ),
            None => {}
        }
    }
    let missing: Vec<&String> = needed
        .iter()
        .filter(|(_, k)| !update.proofs.iter().any(|p| p.key == *k))
        .map(|(holder, _)| holder)
        .collect();
    let out = args.out.as_ref().unwrap_or(&args.update);
    write_update(out, &update)?;
    if args.json {
        let line = serde_json::json!({ "update": out, "proven": proven, "missing": missing });
        println!("{line}");
        return Ok(());
    }
    println!(
        "{} new key{} proven in {}{}",
        proven.len(),
        if proven.len() == 1 { "" } else { "s" },
        out.display(),
        if proven.is_empty() {
            String::new()
        } else {
            format!(" ({})", proven.join(", "))
        }
    );
    if missing.is_empty() {
        println!("every new node key of the update is proven");
    } else {
        let list: Vec<&str> = missing.iter().map(|h| h.as_str()).collect();
        println!("still to prove, by their holders: {}", list.join(", "));
    }
    Ok(())
}

/// The `*.key` files under `dir`, recursively (no links followed), at most
/// [`MAX_KEY_FILES`].
fn key_files(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", d.display()))?;
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "key") {
                out.push(path);
                if out.len() > MAX_KEY_FILES {
                    bail!("more than {MAX_KEY_FILES} key files under {}", dir.display());
                }
            }
        }
    }
    out.sort();
    Ok(())
}

fn merge(args: &MergeArgs) -> anyhow::Result<()> {
    let a = read_update(&args.a)?;
    let b = read_update(&args.b)?;
    let merged = update::merge(&a, &b)
        .with_context(|| format!("merging {} and {}", args.a.display(), args.b.display()))?;
    write_update(&args.out, &merged)?;
    if args.json {
        let line = serde_json::json!({ "update": args.out, "signers": merged.signers() });
        println!("{line}");
        return Ok(());
    }
    println!(
        "merged into {}; signed by {}",
        args.out.display(),
        parties_text(&merged.signers())
    );
    Ok(())
}

/// What `show` and `verify` say of an update against the config in force.
struct Verdict {
    changes: Vec<String>,
    signatures: Vec<(PartyId, Option<String>)>,
    next: Result<NetworkConfig, update::UpdateError>,
    needed: u32,
}

fn verdict(current: &NetworkConfig, u: &ConfigUpdate) -> Verdict {
    let changes = match u.next_file() {
        Ok(next) => update::diff(current.file(), &next),
        Err(e) => vec![format!("(the next config cannot be read: {e})")],
    };
    let signatures = update::signature_verdicts(current, u)
        .map(|(party, v)| (party, v.err().map(|e| e.to_string())))
        .collect();
    Verdict {
        changes,
        signatures,
        next: update::validate(current, u),
        needed: current.update_signatures(),
    }
}

fn show(args: &ShowArgs) -> anyhow::Result<()> {
    let u = read_update(&args.update)?;
    let current = args.network.as_deref().map(load_network).transpose()?;
    let v = current.as_ref().map(|c| verdict(c, &u));
    let digest = hex::encode(u.config_digest());
    if args.json {
        let line = serde_json::json!({
            "chain": u.chain,
            "sequence": u.sequence,
            "config_sha256": digest,
            "signers": u.signers(),
            "changes": v.as_ref().map(|v| &v.changes),
            "signatures": v.as_ref().map(|v| v.signatures.iter()
                .map(|(party, e)| serde_json::json!({ "party": party, "valid": e.is_none(), "reason": e }))
                .collect::<Vec<_>>()),
            "needed": v.as_ref().map(|v| v.needed),
            "valid": v.as_ref().map(|v| v.next.is_ok()),
            "reason": v.as_ref().and_then(|v| v.next.as_ref().err().map(ToString::to_string)),
        });
        println!("{line}");
        return Ok(());
    }
    println!(
        "config update of chain {}, replacing sequence {}",
        u.chain, u.sequence
    );
    println!("config sha256 {digest}");
    println!("signed by {}", parties_text(&u.signers()));
    let Some(v) = v else {
        println!("(give --network with the config in force to see the changes and check the signatures)");
        return Ok(());
    };
    println!("changes:");
    for change in &v.changes {
        println!("  {change}");
    }
    if v.changes.is_empty() {
        println!("  (none)");
    }
    for (party, e) in &v.signatures {
        match e {
            None => println!("party {party}: signature valid"),
            Some(reason) => println!("party {party}: {reason}"),
        }
    }
    let Some((path, current)) = args.network.as_deref().zip(current.as_ref()) else {
        return Ok(());
    };
    let against = against(path, current);
    match &v.next {
        Ok(_) => println!(
            "valid against {against}: yes (the update policy needs {})",
            v.needed
        ),
        Err(e) => println!("valid against {against}: no: {e}"),
    }
    Ok(())
}

/// What an update was checked against, for the operator: the config's sequence, and for
/// a network directory that it is the genesis config, not necessarily the one in force.
fn against(path: &Path, config: &NetworkConfig) -> String {
    if path.is_dir() {
        format!(
            "the genesis config of {} (sequence {}; on a running network check against the config in force, which `fabrx network update current` writes)",
            path.display(),
            config.sequence()
        )
    } else {
        format!("{} (config sequence {})", path.display(), config.sequence())
    }
}

fn verify(args: &VerifyArgs) -> anyhow::Result<()> {
    let u = read_update(&args.update)?;
    let current = load_network(&args.network)?;
    let next = update::validate(&current, &u);
    if args.json {
        let line = serde_json::json!({
            "valid": next.is_ok(),
            "reason": next.as_ref().err().map(ToString::to_string),
            "sequence": u.sequence,
            "next_sequence": next.as_ref().ok().map(NetworkConfig::sequence),
            "signers": u.signers(),
            "needed": current.update_signatures(),
        });
        println!("{line}");
    }
    let next = next.with_context(|| {
        format!(
            "the config update {} is not valid against {}",
            args.update.display(),
            against(&args.network, &current)
        )
    })?;
    if !args.json {
        println!(
            "valid: the config update replaces sequence {} with {}; signed by {}, the update policy needs {}",
            u.sequence,
            next.sequence(),
            parties_text(&u.signers()),
            current.update_signatures()
        );
    }
    Ok(())
}
