//! The `fabrx` binary composes the library crates; it holds no protocol logic.

mod bench;
mod bench_suite;
mod blocks;
mod committer;
mod config_follow;
mod join_args;
mod keygen;
mod latency_proxy;
mod loadgen_cmd;
mod loadgen_mock;
mod loadgen_network;
mod loadgen_sink;
mod network;
mod network_party;
mod network_tls;
mod network_update;
mod node;
mod node_assembler;
mod node_batcher;
mod node_bft;
mod node_consenter;
mod node_endorser;
mod node_query;
mod node_router;
mod node_sidecar;
mod node_sigverifier;
mod out;
mod report_files;
mod runner;
mod server_args;
mod up;
mod wallet_cmd;

use clap::{Parser, Subcommand};

/// Every process of the binary allocates with mimalloc instead of glibc's malloc: the
/// committer's decoded txs are allocated on one thread and freed on another, by the
/// hundred thousand, which glibc's arenas serve with more locking, consolidation and page
/// faults (docs/benchmarks.md, "A faster allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line of the `fabrx` binary.
#[derive(Debug, Parser)]
#[command(
    name = "fabrx",
    version,
    about = "fabrx: sharded BFT ordering and a scalable committer"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks (results go to docs/benchmarks.md).
    Bench {
        #[command(subcommand)]
        what: bench::Bench,
    },
    /// Start a network on this machine, every node its own process (docs/network.md).
    Up(up::UpArgs),
    /// Stop the nodes `fabrx up` started.
    Down(up::DirArgs),
    /// Each node's liveness (`--watch`: throughput and queues from its metrics).
    Status(up::StatusArgs),
    /// Print and verify party P's blocks from its assembler (docs/assembler.md).
    Blocks(blocks::BlocksArgs),
    /// The committer without an orderer.
    Committer {
        #[command(subcommand)]
        cmd: committer::CommitterCmd,
    },
    /// Create the committer's schema in a database (idempotent).
    InitDb(node::InitDbArgs),
    /// Create a node's key file and print its public key.
    Keygen(keygen::KeygenArgs),
    /// Forward TCP connections with a fixed one-way delay: emulated regions (docs/benchmarks.md).
    LatencyProxy(latency_proxy::LatencyProxyArgs),
    /// Load generator (see docs/loadgen.md).
    Loadgen(loadgen_cmd::LoadgenArgs),
    /// Network files: `fabrx network generate` (see docs/network-config.md) and config
    /// updates, `fabrx network update` (docs/reconfiguration.md).
    Network {
        #[command(subcommand)]
        cmd: network::NetworkCmd,
    },
    /// Issue, transfer and show balances of tokens (docs/token.md).
    Wallet(wallet_cmd::WalletArgs),
    /// Run one node of a fabrx network.
    Node {
        #[command(subcommand)]
        role: node::Role,
    },
}

/// Runs the command; an error is printed as one line with its causes (no backtrace, even
/// with `RUST_BACKTRACE` set: it is a message to an operator, not a crash) and the exit
/// code is 1.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `e` and its causes on one line, `: ` between them. A cause whose text its parent's
/// message already carries (an error type that prints its source) is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Nodes, networks and loads log what they do; a command that answers an operator
    // (blocks, network files, wallet, status) prints its answer and logs only warnings,
    // so that its output is not interleaved with a library's progress lines.
    let default_filter = match &cli.command {
        Command::Blocks(_)
        | Command::Network { .. }
        | Command::Wallet(_)
        | Command::Keygen(_)
        | Command::Status(_)
        | Command::Down(_) => "warn",
        _ => "info,sqlx=warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: node logs are files (`fabrx up`: logs/<node>.log).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        match cli.command {
            Command::Bench { what } => bench::run(what).await,
            Command::Blocks(args) => blocks::run(args).await,
            Command::Up(args) => tokio::task::spawn_blocking(move || up::up(args)).await?,
            Command::Down(args) => tokio::task::spawn_blocking(move || up::down(args)).await?,
            Command::Status(args) => tokio::task::spawn_blocking(move || up::status(args)).await?,
            Command::Committer { cmd } => committer::run(cmd).await,
            Command::InitDb(args) => node::init_db(args).await,
            Command::Keygen(args) => keygen::run(args),
            Command::LatencyProxy(args) => latency_proxy::run(args).await,
            Command::Loadgen(args) => loadgen_cmd::run(args).await,
            Command::Network { cmd } => tokio::task::spawn_blocking(move || network::run(cmd)).await?,
            Command::Node { role } => node::run(role).await,
            Command::Wallet(args) => wallet_cmd::run(args).await,
        }
    })
}

#[cfg(test)]
mod tests {
    /// An error type that prints its source in its own message, as many do.
    #[derive(Debug)]
    struct Ledger(std::io::Error);

    impl std::fmt::Display for Ledger {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "ledger journal: {}", self.0)
        }
    }

    impl std::error::Error for Ledger {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_its_parent_already_printed_is_not_repeated() {
        let locked = std::io::Error::other("journal x is locked");
        let e = anyhow::Error::from(Ledger(locked)).context("starting the assembler");
        assert_eq!(
            super::one_line(&e),
            "starting the assembler: ledger journal: journal x is locked"
        );
        let plain = anyhow::anyhow!("disk full").context("writing the log");
        assert_eq!(super::one_line(&plain), "writing the log: disk full");
    }
}
