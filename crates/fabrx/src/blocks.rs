//! `fabrx blocks`: reads party P's assembler Deliver stream and prints one JSON line per
//! block, each block verified on its own and against the previous one (docs/contracts.md
//! "Contracts"; docs/assembler.md). Exits non-zero if any block fails verification.

use anyhow::Context;
use clap::Args;
use prost::Message as _;
use std::path::PathBuf;
use wire::pb;

/// Arguments of `fabrx blocks`.
#[derive(Debug, Args)]
pub struct BlocksArgs {
    /// The network directory (`fabrx up --dir`, `fabrx network generate --dir`), or its
    /// config file.
    #[arg(long, value_parser = crate::server_args::network_dir)]
    network: PathBuf,
    /// Whose assembler to read (1..N).
    #[arg(long)]
    party: u32,
    /// The first block.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// The last block (inclusive). Default: the last block held now, or follow with
    /// `--follow`.
    #[arg(long)]
    to: Option<u64>,
    /// Print the tx ids of each block's requests.
    #[arg(long)]
    tx_ids: bool,
    /// Keep printing new blocks as they are appended.
    #[arg(long)]
    follow: bool,
    /// One JSON object per line (the only output format; accepted for uniformity).
    #[arg(long)]
    json: bool,
}

/// Prints the blocks; fails if one does not verify.
pub async fn run(args: BlocksArgs) -> anyhow::Result<()> {
    let path = netconfig::config_path(&args.network);
    let config = netconfig::NetworkConfig::load(&path)
        .with_context(|| format!("loading the network config {}", path.display()))?;
    config.install_client_tls(&args.network)?;
    let endpoint = assembler_of(&config, args.party, &path).await?;
    let keys = config.cluster_keys();
    let rules: std::sync::Arc<dyn arma::ConfigRules> =
        std::sync::Arc::new(netconfig::update::NetworkRules::new());
    let mut sets = arma::ConsenterSets::new(&keys, Some(rules.clone()));
    let channel = wire::server::connect(&wire::server::client_endpoint(endpoint.clone())?)
        .await
        .with_context(|| format!("connecting to party {}'s assembler at {endpoint}", args.party))?;
    // The block before `from`, to check that `from` chains to it.
    let mut previous = None;
    if let Some(before) = args.from.checked_sub(1) {
        let anchor = read(&channel, before, Some(before), true, false).await?;
        if let Some(b) = anchor.first() {
            previous = match sets.verify_block(b, None) {
                Ok(v) => Some((v.header.number, v.hash)),
                // Certified by a set a config update put in force: learn the sets from
                // the config blocks before it.
                Err(_) => {
                    sets = arma::ConsenterSets::new(&keys, Some(rules));
                    Some(learn_sets(&channel, before, &mut sets).await?)
                }
            };
        }
    }
    let request = pb::DeliverRequest {
        from: args.from,
        to: args.to,
        headers_only: !args.tx_ids,
        to_end: args.to.is_none() && !args.follow,
    };
    let mut stream = clients::deliver::open(channel, request, MAX_BLOCK_BYTES)
        .await
        .with_context(|| format!("Deliver from party {}'s assembler", args.party))?;
    let mut failed = 0u64;
    let mut printed = 0u64;
    while let Some(block) = stream.message().await.context("the Deliver stream failed")? {
        let (line, verified, next) = describe(&block, previous, &mut sets, args.tx_ids);
        if !crate::out::line(&line.to_string()) {
            // The reader stopped reading (`| head`): nothing more to show.
            return Ok(());
        }
        printed += 1;
        if !verified {
            failed += 1;
        }
        previous = next;
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {printed} blocks failed verification");
    }
    Ok(())
}

/// Party `party`'s assembler endpoint: from the config file, or — for a party that joined
/// later (docs/reconfiguration.md "Adding a party") — from the config in force as f + 1
/// consenters answer it, whose TLS section this process then follows.
async fn assembler_of(
    config: &netconfig::NetworkConfig,
    party: u32,
    path: &std::path::Path,
) -> anyhow::Result<String> {
    let in_force;
    let config = if config.party(party).is_ok() {
        config
    } else {
        in_force = netconfig::in_force::in_force_config(config)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "party {party} is not in {} and the config in force is unknown: {e}",
                    path.display()
                )
            })?
            .0;
        netconfig::tls::follow::follow(&in_force);
        &in_force
    };
    Ok(config
        .party(party)?
        .assembler
        .as_ref()
        .with_context(|| format!("party {party} has no assembler"))?
        .uri())
}

/// Largest Deliver message read (a block with all its requests).
const MAX_BLOCK_BYTES: usize = 64 << 20;

/// Reads blocks `from..=to` at once.
async fn read(
    channel: &tonic::transport::Channel,
    from: u64,
    to: Option<u64>,
    headers_only: bool,
    to_end: bool,
) -> anyhow::Result<Vec<pb::OrderedBlock>> {
    let request = pb::DeliverRequest {
        from,
        to,
        headers_only,
        to_end,
    };
    let mut stream = clients::deliver::open(channel.clone(), request, MAX_BLOCK_BYTES).await?;
    let mut out = Vec::new();
    while let Some(b) = stream.message().await? {
        out.push(b);
    }
    Ok(out)
}

/// Verifies blocks `0..=last` (headers and config blocks) to learn the consenter sets in
/// force up to `last`; gives the number and hash of `last`.
async fn learn_sets(
    channel: &tonic::transport::Channel,
    last: u64,
    sets: &mut arma::ConsenterSets,
) -> anyhow::Result<(u64, [u8; 32])> {
    let request = pb::DeliverRequest {
        from: 0,
        to: Some(last),
        headers_only: true,
        to_end: true,
    };
    let mut stream = clients::deliver::open(channel.clone(), request, MAX_BLOCK_BYTES).await?;
    let mut previous = None;
    while let Some(b) = stream.message().await? {
        let v = sets.verify_block(&b, previous).with_context(|| {
            format!(
                "block {} (before --from) does not verify",
                b.header.unwrap_or_default().number
            )
        })?;
        previous = Some((v.header.number, v.hash));
    }
    previous
        .filter(|(n, _)| *n == last)
        .with_context(|| format!("the assembler did not serve blocks 0..={last}"))
}

/// One block's JSON line, whether it verified, and the chain anchor for the next one.
fn describe(
    block: &pb::OrderedBlock,
    previous: Option<(u64, [u8; 32])>,
    sets: &mut arma::ConsenterSets,
    tx_ids: bool,
) -> (serde_json::Value, bool, Option<(u64, [u8; 32])>) {
    let header = block.header.clone().unwrap_or_default();
    let checked = sets.verify_block(block, previous);
    let config = header.shard == arma::CONFIG_SHARD;
    let (verified, signers, hash, error) = match &checked {
        Ok(v) => {
            let carried = if config { 0 } else { block.requests.len() };
            let count_ok = !v.with_requests || carried == v.header.tx_count as usize;
            let signers: Vec<u32> = v.signers.iter().map(|r| r + 1).collect();
            (count_ok, signers, hex::encode(v.hash), None)
        }
        Err(e) => (false, Vec::new(), String::new(), Some(e.to_string())),
    };
    let mut line = serde_json::json!({
        "number": header.number,
        "shard": header.shard,
        "primary": header.primary,
        "seq": header.seq,
        "tx_count": header.tx_count,
        "hash": hash,
        "previous_hash": hex::encode(&header.previous_hash),
        "signers": signers,
        "verified": verified,
    });
    if config {
        line["config"] = serde_json::Value::Bool(true);
    }
    if let Some(e) = error {
        line["error"] = serde_json::Value::String(e);
    }
    if tx_ids && !config {
        let ids: Vec<String> = block
            .requests
            .iter()
            .map(|r| {
                pb::Envelope::decode(r.as_slice())
                    .map(|e| e.tx_id)
                    .unwrap_or_default()
            })
            .collect();
        line["tx_ids"] = serde_json::json!(ids);
    }
    let next = checked.ok().map(|v| (v.header.number, v.hash)).or(previous);
    (line, verified, next)
}
