//! The committer and token services label their metrics with their party
//! (docs/metrics.md): a generated network, then `fabrx node sigverifier`, `vcservice`,
//! `query` and `endorser` as processes with `/metrics`; every sample line of each carries
//! `party="P"` of the node's party, and a verifier started without a party carries none.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{Net, Proc};

use std::time::{Duration, Instant};

/// A loopback address with a port free right now.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// The body of `GET /metrics` at `addr`, retried until the node serves it.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = (|| -> std::io::Result<String> {
            let mut sock = std::net::TcpStream::connect(addr)?;
            sock.set_read_timeout(Some(Duration::from_secs(10)))?;
            let request = format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
            sock.write_all(request.as_bytes())?;
            let mut response = String::new();
            sock.read_to_string(&mut response)?;
            Ok(response)
        })();
        if let Ok(response) = attempt {
            let (head, body) = response.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            return body.to_owned();
        }
        assert!(Instant::now() < deadline, "no /metrics on {addr}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sample lines of `text` (no comments): the role's own (prefix `prefix`, at least
/// one), and besides them only the metrics every node exports (`fabrx_build_info`, the
/// `process_*` metrics), which must be there too, and those of a node's data directory
/// (`fabrx_data_dir_*`).
fn samples<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert!(
        lines.iter().any(|l| l.starts_with(prefix)),
        "no {prefix} samples in\n{text}"
    );
    for l in &lines {
        assert!(
            l.starts_with(prefix)
                || l.starts_with("fabrx_build_info{")
                || l.starts_with("process_")
                || l.starts_with("fabrx_data_dir_"),
            "{l}"
        );
    }
    for every_node in [
        "fabrx_build_info{",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(every_node)),
            "no {every_node} in\n{text}"
        );
    }
    lines
}

fn assert_party(text: &str, prefix: &str, party: u32) {
    let label = format!("party=\"{party}\"");
    for l in samples(text, prefix) {
        assert!(l.contains(&label), "{label} not in {l}");
    }
}

#[test]
fn committer_and_token_services_label_their_metrics_with_their_party() {
    let mut net = Net::generate();
    let config = net.config_path();
    let dir = net.dir.path().to_path_buf();
    let party = 2u32;

    let verifier_metrics = free_addr();
    let argv = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let mut verifier = Proc::start(
        "sigverifier",
        argv(&[
            "node",
            "sigverifier",
            "--listen",
            "127.0.0.1:0",
            "--network",
            &config,
            "--party",
            "2",
            "--metrics",
            &verifier_metrics,
        ]),
        &dir,
    );
    let bare_metrics = free_addr();
    let mut bare = Proc::start(
        "sigverifier-bare",
        argv(&[
            "node",
            "sigverifier",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            &bare_metrics,
        ]),
        &dir,
    );

    let vc_metrics = free_addr();
    let vc_toml = dir.join("vcservice.toml");
    std::fs::write(
        &vc_toml,
        format!(
            "listen = \"127.0.0.1:0\"\nmetrics_listen = \"{vc_metrics}\"\ndb = \"embedded:{}\"\n",
            dir.join("vc-db").display()
        ),
    )
    .unwrap();
    let vc_toml = vc_toml.display().to_string();
    let mut vcservice = Proc::start(
        "vcservice",
        argv(&["node", "vcservice", "--config", &vc_toml, "--party", "2"]),
        &dir,
    );

    let query_metrics = free_addr();
    net.start(
        "query",
        argv(&[
            "node",
            "query",
            "--party",
            "2",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            &query_metrics,
        ]),
    );
    // Endorser 2 belongs to party 2 in a generated network.
    let endorser_party = net.config.endorser(2).unwrap().party;
    assert_eq!(endorser_party, party);
    let endorser_metrics = free_addr();
    net.start(
        "endorser",
        argv(&[
            "node",
            "endorser",
            "--index",
            "2",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            &endorser_metrics,
        ]),
    );

    verifier.wait_ready("sigverifier");
    bare.wait_ready("sigverifier");
    vcservice.wait_ready("vcservice");
    net.proc("query").wait_ready("query");
    net.proc("endorser").wait_ready("endorser");

    assert_party(&scrape(&verifier_metrics), "fabrx_sigverifier_", party);
    assert_party(&scrape(&vc_metrics), "fabrx_vcservice_", party);
    assert_party(&scrape(&query_metrics), "fabrx_query_", party);
    assert_party(&scrape(&endorser_metrics), "fabrx_endorser_", party);
    for l in samples(&scrape(&bare_metrics), "fabrx_sigverifier_") {
        assert!(!l.contains("party="), "a verifier without a party: {l}");
    }
}
