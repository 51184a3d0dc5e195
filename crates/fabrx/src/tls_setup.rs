//! Installs a process's TLS identity from the network directory (wire::tls,
//! netconfig::tls; docs/tls.md): nodes at start, clients before they connect. A network
//! generated with `--insecure` has no `tls` section and nothing is installed.

use anyhow::Context;
use std::path::Path;
use wire::tls::{Peer, Role};

/// Installs the identity of `role` of `party` (and `shard`) in the network whose config
/// file is `config_path`; returns whether TLS is on.
pub fn install(
    config: &netconfig::NetworkConfig,
    config_path: &Path,
    role: Role,
    party: u32,
    shard: Option<u32>,
) -> anyhow::Result<bool> {
    let me = Peer { role, party, shard };
    let Some(tls) = config
        .node_tls(config_path, me)
        .with_context(|| format!("reading the TLS identity of {me}"))?
    else {
        return Ok(false);
    };
    wire::tls::install(tls).with_context(|| format!("installing the TLS identity of {me}"))?;
    Ok(true)
}

/// Installs the clients' identity (`tls/client.*`) of the network in `dir`.
pub fn install_client(config: &netconfig::NetworkConfig, dir: &Path) -> anyhow::Result<bool> {
    install(config, &netconfig::config_path(dir), Role::Client, 0, None)
}
