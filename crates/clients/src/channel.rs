//! Opening a channel to a fabrx service: the one way every role and tool does it.

use std::time::Duration;
use tonic::transport::Channel;

/// How long connecting may take unless the caller says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Why an endpoint cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("endpoint {endpoint:?}: {reason}")]
pub struct BadEndpoint {
    /// The endpoint as given.
    pub endpoint: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A channel to `endpoint` (`host:port`, or a URI `http://host:port`), connected on its
/// first call and reconnected by the transport: keepalive pings while idle, the
/// network's TLS when the process has one installed (`wire::tls`), and `connect_timeout`
/// for each connection attempt.
pub fn lazy(endpoint: &str, connect_timeout: Duration) -> Result<Channel, BadEndpoint> {
    let uri = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    let ep = wire::server::client_endpoint(uri).map_err(|e| BadEndpoint {
        endpoint: endpoint.to_string(),
        reason: e.to_string(),
    })?;
    Ok(wire::server::connect_lazy(&ep.connect_timeout(connect_timeout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn host_port_and_uris_are_accepted_and_garbage_is_named() {
        assert!(lazy("127.0.0.1:1", DEFAULT_CONNECT_TIMEOUT).is_ok());
        assert!(lazy("http://127.0.0.1:1", DEFAULT_CONNECT_TIMEOUT).is_ok());
        let e = lazy("http://bad host:1", DEFAULT_CONNECT_TIMEOUT).unwrap_err();
        assert_eq!(e.endpoint, "http://bad host:1");
    }
}
