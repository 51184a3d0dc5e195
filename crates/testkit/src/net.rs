//! Listening addresses for servers a test starts in its own process.
//!
//! A port picked by binding `127.0.0.1:0` and closing the socket is not reserved: until
//! the server binds it, the kernel may hand it out again, and it hands loopback ports to
//! outgoing connections too (their source is `127.0.0.1` whatever loopback address they
//! go to). A multi-node test whose nodes dial each other while others still start can so
//! lose one node's port to a peer's outgoing connection, and the cluster then misses a
//! quorum. [`loopback_addr`] picks the port on an address of `127.0.0.0/8` other than
//! `127.0.0.1`, a fresh one each call, where neither outgoing connections nor other
//! callers in this process take ports.

use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `ip:port` on a loopback address of its own (not `127.0.0.1`) with a port the kernel
/// reported free there.
///
/// # Panics
/// If no socket can be bound on the loopback (a test fixture: the test cannot run).
#[must_use]
#[allow(
    clippy::expect_used,
    reason = "a test fixture that cannot bind fails the test using it"
)]
pub fn loopback_addr() -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // The second octet from the process id spreads test binaries that run at once.
    let a = 1 + std::process::id() % 254;
    let b = (n / 254) % 256;
    let c = 1 + n % 254;
    let l =
        std::net::TcpListener::bind(format!("127.{a}.{b}.{c}:0")).expect("a listener on a loopback address");
    l.local_addr().expect("the listener's address").to_string()
}

#[cfg(test)]
mod tests {
    use super::loopback_addr;

    #[test]
    fn each_call_gives_another_address_off_127_0_0_1() {
        let addrs: Vec<String> = (0..600).map(|_| loopback_addr()).collect();
        let ips: std::collections::HashSet<&str> = addrs
            .iter()
            .map(|a| a.rsplit_once(':').map_or("", |(ip, _)| ip))
            .collect();
        assert_eq!(ips.len(), addrs.len());
        assert!(
            addrs
                .iter()
                .all(|a| a.starts_with("127.") && !a.starts_with("127.0.0.1:"))
        );
    }
}
