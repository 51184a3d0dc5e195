//! `fabrx loadgen`: drives load at a target.

use clap::Args;

/// Arguments (being written).
#[derive(Debug, Args)]
pub struct LoadgenArgs {}

/// Runs the command.
pub async fn run(_args: LoadgenArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
