//! Connection-level limits shared by every `fabrx node` server (docs/limits.md).

use clap::Args;
use std::time::Duration;
use wire::server::ServerLimits;

/// Flags of a node's gRPC server.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Most client connections open at once; at the bound a new connection evicts a
    /// silent or the longest-idle one.
    #[arg(long, default_value_t = ServerLimits::default().max_connections)]
    pub max_connections: usize,
    /// A connection without traffic for this many milliseconds is closed.
    #[arg(long, default_value_t = 120_000)]
    pub idle_timeout_ms: u64,
}

impl ServerArgs {
    /// The limits these flags select.
    pub fn limits(&self) -> ServerLimits {
        ServerLimits {
            max_connections: self.max_connections.max(1),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms.max(1)),
            ..ServerLimits::default()
        }
    }
}
