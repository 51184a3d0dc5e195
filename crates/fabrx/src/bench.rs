//! `fabrx bench`: the shell of the benchmarks in `devnet::bench`. `fabrx bench vc`
//! (committed tx/s of the validator-committer for each backend, at 1 read + 2 writes per
//! tx and several batch sizes, and set-based SQL against one-statement-per-key on
//! PostgreSQL) prints a Markdown table (docs/benchmarks.md); the suites print their
//! summary.

use clap::{Args, Subcommand};
use devnet::bench::vc;

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// The validator-committer alone.
    Vc(VcBenchArgs),
    /// The ordering service alone, for each network shape in rate steps: start,
    /// warm up, load, collect, tear down (docs/benchmarks.md "Suites").
    Ordering(crate::bench_suite::SuiteArgs),
    /// The committer: bad signatures, double spends, tx size, inputs and outputs.
    Committer(crate::bench_suite::SuiteArgs),
    /// The whole network in rate steps.
    E2e(crate::bench_suite::SuiteArgs),
}

/// Arguments of `fabrx bench vc`.
#[derive(Debug, Args)]
pub struct VcBenchArgs {
    /// PostgreSQL URL to measure too (the embedded store is always measured).
    #[arg(long)]
    pg: Option<String>,
    /// Transactions per configuration.
    #[arg(long, default_value_t = 20_000)]
    txs: usize,
    /// Batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "100,500,2000")]
    batch_sizes: Vec<usize>,
    /// Concurrent batches in flight (commit workers).
    #[arg(long, default_value = "4", value_parser = crate::server_args::positive_usize)]
    workers: std::num::NonZeroUsize,
}

/// Runs a benchmark.
pub async fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Vc(args) => run_vc(args).await,
        Bench::Ordering(a) => suite(devnet::bench::Suite::Ordering, &a).await,
        Bench::Committer(a) => suite(devnet::bench::Suite::Committer, &a).await,
        Bench::E2e(a) => suite(devnet::bench::Suite::E2e, &a).await,
    }
}

async fn suite(which: devnet::bench::Suite, args: &crate::bench_suite::SuiteArgs) -> anyhow::Result<()> {
    let options = args.options();
    let summary = tokio::task::spawn_blocking(move || devnet::bench::run(which, &options)).await??;
    println!("{}", summary.display());
    Ok(())
}

/// `fabrx bench vc`: runs `devnet::bench::vc` and prints its Markdown table, a row as
/// each configuration is measured.
async fn run_vc(args: VcBenchArgs) -> anyhow::Result<()> {
    let options = vc::Options {
        pg: args.pg,
        txs: args.txs,
        batch_sizes: args.batch_sizes,
        workers: args.workers,
    };
    vc::run(&options, |event| match event {
        vc::Event::Ready { .. } => println!("{}", vc::HEADER),
        vc::Event::Measured(row) => println!("{}", row.markdown()),
    })
    .await?;
    Ok(())
}
