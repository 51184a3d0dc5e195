//! `fabrx node sigverifier`.

use clap::Args;

/// Arguments (being written).
#[derive(Debug, Args)]
pub struct SigverifierArgs {}

/// Runs the command.
pub async fn run(_args: SigverifierArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
