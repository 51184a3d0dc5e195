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

    /// The host, without brackets.
    fn host(&self) -> &str {
        let host = self.text.rsplit_once(':').map_or(self.text.as_str(), |(h, _)| h);
        host.trim_start_matches('[').trim_end_matches(']')
    }

    /// Whether a node at `self` and one at `other` could be the same socket, as far as can
    /// be told without resolving a name (which would make the answer depend on the machine
    /// that asks, and every consenter must give the same one): the same port and the same
    /// host, names compared without case, IP addresses by value (`[::1]` and
    /// `[0:0:0:0:0:0:0:1]`), `localhost` as `127.0.0.1` and `::1`, and an unspecified
    /// address (`0.0.0.0`, `[::]`) as every host. Two different names are taken to be two
    /// hosts.
    pub fn collides(&self, other: &Endpoint) -> bool {
        if self.port != other.port {
            return false;
        }
        let ip = |e: &Endpoint| -> Vec<IpAddr> {
            let host = e.host();
            if host.eq_ignore_ascii_case("localhost") {
                return vec![
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
                ];
            }
            host.parse::<IpAddr>().into_iter().collect()
        };
        let (a, b) = (ip(self), ip(other));
        if a.iter().chain(&b).any(IpAddr::is_unspecified) {
            return true;
        }
        match (a.is_empty(), b.is_empty()) {
            (true, true) => self.host().eq_ignore_ascii_case(other.host()),
            (false, false) => a.iter().any(|x| b.contains(x)),
            _ => false,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn e(text: &str) -> Endpoint {
        Endpoint::parse(text).unwrap()
    }

    #[test]
    fn endpoints_collide_by_port_and_host_without_resolving_names() {
        let same = [
            ("127.0.0.1:7050", "127.0.0.1:7050"),
            ("localhost:7050", "127.0.0.1:7050"),
            ("LocalHost:7050", "[::1]:7050"),
            ("[::1]:7050", "[0:0:0:0:0:0:0:1]:7050"),
            ("0.0.0.0:7050", "node-a.example:7050"),
            ("[::]:7050", "10.0.0.1:7050"),
            ("Node-A.example:7050", "node-a.EXAMPLE:7050"),
        ];
        for (a, b) in same {
            assert!(e(a).collides(&e(b)), "{a} {b}");
            assert!(e(b).collides(&e(a)), "{b} {a}");
        }
        let apart = [
            ("127.0.0.1:7050", "127.0.0.1:7051"),
            ("127.0.0.1:7050", "127.0.0.2:7050"),
            ("localhost:7050", "10.0.0.1:7050"),
            ("node-a.example:7050", "node-b.example:7050"),
            ("node-a.example:7050", "10.0.0.1:7050"),
        ];
        for (a, b) in apart {
            assert!(!e(a).collides(&e(b)), "{a} {b}");
            assert!(!e(b).collides(&e(a)), "{b} {a}");
        }
    }
}
