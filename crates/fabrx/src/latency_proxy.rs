//! `fabrx latency-proxy` (docs/benchmarks.md "Multi-region (emulated on one machine)"):
//! the command-line shell over `devnet::proxy`, a TCP forwarder that adds a fixed
//! one-way delay to the bytes of every connection, in each direction.
//!
//! Once every route listens it prints one line to stdout,
//! `{"ready":"latency-proxy","delay_ms":D,"routes":[{"listen":…,"target":…},…]}`, and
//! serves until SIGTERM or Ctrl-C, when it logs the connections it accepted and the bytes
//! it forwarded.

use clap::Args;
use devnet::proxy::{Limits, Route};
use std::num::NonZeroUsize;
use std::time::Duration;
use tracing::info;

/// Arguments of `fabrx latency-proxy`.
#[derive(Debug, Args)]
pub struct LatencyProxyArgs {
    /// A route `LISTEN=TARGET`: listen on LISTEN (`ip:port`; port 0 picks one, printed in
    /// the ready line) and forward each connection to TARGET (`host:port`). Repeat for
    /// several routes in one process.
    #[arg(long = "route", required = true, value_parser = devnet::proxy::parse_route)]
    routes: Vec<Route>,
    /// One-way delay added to the bytes of each direction, in milliseconds (0: none).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Connections open at once over all routes; more wait to be accepted.
    #[arg(long, default_value = "1024")]
    max_connections: NonZeroUsize,
    /// Bytes held per connection and direction; reading that side stops while full. It
    /// caps a connection's throughput at this over the delay (8 MiB / 40 ms: 200 MiB/s).
    #[arg(long, default_value = "8388608")]
    max_buffer_bytes: NonZeroUsize,
    /// Close a connection after this many seconds without a byte in either direction.
    #[arg(long, default_value_t = 600, value_parser = crate::server_args::positive_u64)]
    idle_timeout_s: u64,
}

/// `fabrx latency-proxy`: binds every route, prints the ready line, serves until SIGTERM
/// or Ctrl-C (exit 0).
pub async fn run(args: LatencyProxyArgs) -> anyhow::Result<()> {
    let mut stopping = crate::runner::Stopping::install()?;
    let limits = Limits {
        delay: Duration::from_millis(args.delay_ms),
        max_buffer_bytes: args.max_buffer_bytes,
        idle_timeout: Duration::from_secs(args.idle_timeout_s),
    };
    let proxy = devnet::proxy::spawn(&args.routes, limits, args.max_connections).await?;
    let routes: Vec<serde_json::Value> = proxy
        .routes
        .iter()
        .map(|(addr, target)| serde_json::json!({"listen": addr.to_string(), "target": target}))
        .collect();
    let ready = serde_json::json!({"ready": "latency-proxy", "delay_ms": args.delay_ms, "routes": routes});
    println!("{ready}");
    stopping.wait().await;
    info!(
        connections = proxy.connections(),
        bytes = proxy.bytes(),
        "latency proxy stopping"
    );
    proxy.stop();
    Ok(())
}
