//! The `fabrx` binary composes the library crates; it holds no protocol logic.

use clap::Parser;

/// Command line of the `fabrx` binary.
#[derive(Debug, Parser)]
#[command(name = "fabrx", version, about = "fabrx: sharded BFT ordering and a scalable committer")]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
