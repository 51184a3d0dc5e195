//! `host:port` endpoints as the network config lists them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// A validated `host:port` (a DNS name, an IPv4 address or a bracketed IPv6 address, and
/// a non-zero port).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    text: String,
    port: u16,
}

impl Endpoint {
    /// Parses `text`; the error is what is wrong with it.
    pub fn parse(text: &str) -> Result<Endpoint, &'static str> {
        let (host, port) = text.rsplit_once(':').ok_or("is not host:port")?;
        let port: u16 = port.parse().map_err(|_| "has no valid port")?;
        if port == 0 {
            return Err("has port 0");
        }
        if host.is_empty() {
            return Err("has no host");
        }
        let bare = match host.strip_prefix('[') {
            Some(inner) => inner.strip_suffix(']').ok_or("has an unclosed '['")?,
            None if host.contains(':') => return Err("has an IPv6 host without brackets ([::1]:7050)"),
            None => host,
        };
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':');
        if bare.is_empty() || !bare.chars().all(allowed) {
            return Err("has a host with characters other than letters, digits, '.', '-', '_'");
        }
        if bare.contains(':') && bare.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("has an IPv6 host that does not parse (brackets: [::1]:7050)");
        }
        Ok(Endpoint {
            text: text.to_string(),
            port,
        })
    }

    /// The `host:port` text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The gRPC URI a client dials: `http://host:port`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.text)
    }

    /// The address a node with this endpoint listens on: the endpoint itself when its
    /// host is an IP address, else every interface (`0.0.0.0`) on its port (a DNS name
    /// resolves to this machine from outside, not necessarily from inside).
    pub fn listen_addr(&self) -> SocketAddr {
        self.text
            .parse()
            .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), self.port))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
