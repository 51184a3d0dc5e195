//! The configs a node starts from: the network's genesis config (`--network`) and, for a
//! party that joined later, the config that adds it (`--join`, docs/reconfiguration.md
//! "Adding a party").

use std::path::Path;

use anyhow::Context;
use netconfig::NetworkConfig;

/// The genesis config at `path` and the joining config at `join` (checked against it for
/// `party`). A genesis file of another sequence is refused: every node starts from the
/// genesis config.
pub fn load(
    path: &Path,
    join: Option<&Path>,
    party: u32,
) -> anyhow::Result<(NetworkConfig, Option<NetworkConfig>)> {
    let genesis = NetworkConfig::load(path)
        .with_context(|| format!("loading the network config {}", path.display()))?;
    let Some(join) = join else {
        if genesis.sequence() != 0 {
            anyhow::bail!(
                "{} has sequence {}: a node starts from the network's genesis config (sequence 0); a \
                 party that joined later starts with --network GENESIS --join FILE (docs/reconfiguration.md)",
                path.display(),
                genesis.sequence()
            );
        }
        return Ok((genesis, None));
    };
    let joined = NetworkConfig::load(join)
        .with_context(|| format!("loading the joining config {}", join.display()))?;
    genesis.check_join(&joined, party)?;
    Ok((genesis, Some(joined)))
}

/// Installs the node's TLS identity from `config` (files under `path`'s network
/// directory); a joining node then follows `config`'s TLS section, newer than any config
/// it meets first.
pub fn install_tls(
    config: &NetworkConfig,
    path: &Path,
    role: wire::tls::Role,
    party: u32,
    shard: Option<u32>,
    joining: bool,
) -> anyhow::Result<()> {
    if config.install_tls(path, role, party, shard)? && joining {
        netconfig::tls::follow::follow(config);
    }
    Ok(())
}
