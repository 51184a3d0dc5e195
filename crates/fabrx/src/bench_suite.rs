//! The flags of `fabrx bench ordering|committer|e2e` (docs/benchmarks.md "Suites"); the
//! suites themselves are `devnet::bench`.

use clap::Args;
use std::path::PathBuf;

/// Flags of every suite.
#[derive(Debug, Clone, Args)]
pub struct SuiteArgs {
    /// Where the suite writes (created; existing run directories are replaced).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Small and fast: a first look, or a test.
    #[arg(long)]
    quick: bool,
    /// Offered rates of the network suites, txs per second [default: per suite].
    #[arg(long, value_delimiter = ',', value_name = "R1,R2,…")]
    rates: Vec<f64>,
    /// Length of each rate step, seconds [default: 10; --quick: 2].
    #[arg(long, value_name = "SECS")]
    step_seconds: Option<f64>,
    /// Ordering suite: the network shapes, parties x shards [default: 4x1,4x2].
    #[arg(long, value_delimiter = ',', value_name = "PxS,…")]
    shapes: Vec<String>,
    /// Size of each load tx's envelope in the network suites, bytes.
    #[arg(long, default_value_t = 300)]
    tx_size: usize,
    /// Committer suite: load blocks of 500 txs per run [default: 100; --quick: 4 of 50].
    #[arg(long)]
    blocks: Option<usize>,
    /// Committer suite: the committer in this process (`--target committer`) instead
    /// of its processes behind the mock orderer.
    #[arg(long)]
    in_process: bool,
    /// Namespace signature scheme of the load: ed25519, ecdsa-p256 or bls-threshold.
    #[arg(long, default_value = "ed25519")]
    scheme: String,
    /// The committers' database (committer and e2e suites): a PostgreSQL URL naming a
    /// database NAME on a server this user may create databases on; each network gets a
    /// fresh database NAME_bK, dropped after it [default: the embedded store].
    #[arg(long, value_name = "postgres://…/NAME")]
    db: Option<String>,
    /// First port of the suite's networks.
    #[arg(long, default_value_t = 27050)]
    base_port: u16,
    /// Keep each network's directory (logs, data) after its runs.
    #[arg(long)]
    keep: bool,
}

impl SuiteArgs {
    /// The suite options these flags select.
    pub fn options(&self) -> devnet::bench::Options {
        devnet::bench::Options {
            out: self.out.clone(),
            quick: self.quick,
            rates: self.rates.clone(),
            step_seconds: self.step_seconds,
            shapes: self.shapes.clone(),
            tx_size: self.tx_size,
            blocks: self.blocks,
            in_process: self.in_process,
            scheme: self.scheme.clone(),
            db: self.db.clone(),
            base_port: self.base_port,
            keep: self.keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        opts: SuiteArgs,
    }

    #[test]
    fn flags_select_the_options_and_no_flag_the_defaults() {
        let parse = |flags: &[&str]| {
            let mut argv = vec!["bench"];
            argv.extend(flags);
            Cli::parse_from(argv).opts.options()
        };
        assert_eq!(parse(&[]), devnet::bench::Options::default());
        let o = parse(&[
            "--shapes",
            "4x1,7x2",
            "--rates",
            "10,20",
            "--quick",
            "--in-process",
        ]);
        assert_eq!(o.shapes, vec!["4x1".to_string(), "7x2".to_string()]);
        assert_eq!(o.rates, vec![10.0, 20.0]);
        assert!(o.quick && o.in_process);
    }
}
