//! `fabrx node bft`: one replica of a BFT consensus cluster.

use clap::Args;

/// Arguments (being written).
#[derive(Debug, Args)]
pub struct BftArgs {}

/// Runs the command.
pub async fn run(_args: BftArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
