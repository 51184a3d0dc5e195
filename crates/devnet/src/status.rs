//! The metrics of `fabrx status --watch` (docs/metrics.md "Watching a network"): scrape
//! every node's `/metrics` ([`scrape`], plain HTTP, the address `network.json` records),
//! parse a node's Prometheus text, pick its role's throughput counter and queue gauge,
//! turn two samples into a rate and the nodes into the table's [`rows`], render the
//! table. Only [`scrape`] touches sockets and the clock; the shell (`up/watch.rs`) runs
//! the rounds and draws.

use crate::file::NodeEntry;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest `/metrics` body read (a node's is a few kB).
const MAX_BODY: u64 = 8 << 20;

/// Why a scrape's body is not Prometheus text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// A sample line whose value is missing or is not a number.
    BadValue {
        /// 1-based line number.
        line: usize,
    },
    /// A `{` without its closing `}`.
    UnclosedLabels {
        /// 1-based line number.
        line: usize,
    },
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::BadValue { line } => write!(f, "line {line}: no number after the metric name"),
            ParseError::UnclosedLabels { line } => write!(f, "line {line}: unclosed label set"),
        }
    }
}

impl std::error::Error for ParseError {}

/// One scrape of a node: every metric name with the sum of its series (over all label
/// values), and when it was taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Seconds since some fixed origin (the shell's start).
    pub at: f64,
    sums: HashMap<String, f64>,
}

impl Sample {
    /// Parses the Prometheus text exposition `text` scraped at `at`.
    pub fn parse(text: &str, at: f64) -> Result<Sample, ParseError> {
        let mut sums: HashMap<String, f64> = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, value) = split_sample(line, i + 1)?;
            *sums.entry(name.to_owned()).or_default() += value;
        }
        Ok(Sample { at, sums })
    }

    /// The sum of metric `name`'s series; `None` when the node does not export it.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.sums.get(name).copied()
    }
}

/// A sample line's metric name and value (labels skipped, a trailing timestamp ignored).
fn split_sample(line: &str, number: usize) -> Result<(&str, f64), ParseError> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    if rest.starts_with('{') {
        let close = labels_end(rest).ok_or(ParseError::UnclosedLabels { line: number })?;
        rest = &rest[close + 1..];
    }
    let value = rest
        .split_whitespace()
        .next()
        .and_then(parse_value)
        .ok_or(ParseError::BadValue { line: number })?;
    Ok((name, value))
}

/// The byte index of the `}` closing the label set that `s` starts with (quoted values
/// may hold `}` and escaped quotes).
fn labels_end(s: &str) -> Option<usize> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// A sample value: a float, `+Inf`, `-Inf` or `NaN`.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// What the table shows for one role: its main throughput counter and queue gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleMetrics {
    /// The counter whose rate is the `TX/S` column.
    pub throughput: &'static str,
    /// The gauge of the `QUEUE` column and its short name; `None`: the role has none.
    pub queue: Option<(&'static str, &'static str)>,
}

/// The metrics of `role` (a `network.json` role); `None` for a role without metrics.
pub fn role_metrics(role: &str) -> Option<RoleMetrics> {
    let (throughput, queue) = match role {
        "router" => (
            "fabrx_router_requests_admitted_total",
            Some(("fabrx_router_in_flight_requests", "in flight")),
        ),
        "batcher" => (
            "fabrx_batcher_requests_admitted_total",
            Some(("fabrx_batcher_mempool_requests", "mempool")),
        ),
        "consenter" => ("fabrx_consenter_headers_ordered_total", None),
        "assembler" => (
            "fabrx_assembler_txs_appended_total",
            Some(("fabrx_assembler_queued_headers", "headers")),
        ),
        "sidecar" => (
            "fabrx_sidecar_txs_total",
            Some(("fabrx_sidecar_graph_pending", "graph")),
        ),
        "sigverifier" => (
            "fabrx_sigverifier_txs_total",
            Some(("fabrx_sigverifier_batches_in_flight", "batches")),
        ),
        "vcservice" => (
            "fabrx_vcservice_txs_total",
            Some(("fabrx_vcservice_queue_depth", "queued")),
        ),
        "query" => (
            "fabrx_query_requests_total",
            Some(("fabrx_query_in_flight", "in flight")),
        ),
        "endorser" => ("fabrx_endorser_requests_total", None),
        _ => return None,
    };
    Some(RoleMetrics { throughput, queue })
}

/// The per-second rate of counter `name` from `previous` to `current`; a counter that
/// went down restarted with its node, so its whole current value is the increase (as
/// Prometheus `rate()` does). A counter a sample lacks is 0 there (a labelled counter has
/// no series before its first event). `None` without a previous sample, or when no time
/// passed.
pub fn rate(previous: Option<&Sample>, current: &Sample, name: &str) -> Option<f64> {
    let previous = previous?;
    let seconds = current.at - previous.at;
    if seconds <= 0.0 {
        return None;
    }
    let before = previous.value(name).unwrap_or(0.0);
    let now = current.value(name).unwrap_or(0.0);
    let increase = if now >= before { now - before } else { now };
    Some(increase / seconds)
}

/// Whether a node answered its scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its `/metrics` answered with Prometheus text.
    Up,
    /// No answer, an error status or a body that does not parse.
    Down,
    /// `network.json` gives it no metrics address.
    NoMetrics,
}

impl State {
    /// The table's word for it.
    pub fn name(self) -> &'static str {
        match self {
            State::Up => "up",
            State::Down => "down",
            State::NoMetrics => "no-metrics",
        }
    }
}

/// One node's line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Node name (`router-1`, `batcher-2-0`).
    pub name: String,
    /// Its role.
    pub role: String,
    /// Its party.
    pub party: u32,
    /// Its shard (batchers).
    pub shard: Option<u32>,
    /// Whether it answered.
    pub state: State,
    /// Rate of its role's throughput counter, per second.
    pub per_second: Option<f64>,
    /// Its role's queue gauge: short name and value.
    pub queue: Option<(&'static str, f64)>,
}

/// A node of `network.json` as the table needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeId {
    /// Node name.
    pub name: String,
    /// Its role.
    pub role: String,
    /// Its party.
    pub party: u32,
    /// Its shard, if any.
    pub shard: Option<u32>,
}

/// The row of `node` from its scrape now (`None`: down or no address, as `state` says)
/// and its previous good scrape.
pub fn row(node: &NodeId, state: State, previous: Option<&Sample>, current: Option<&Sample>) -> Row {
    let metrics = role_metrics(&node.role);
    let (per_second, queue) = match (current, metrics) {
        (Some(current), Some(m)) => (
            rate(previous, current, m.throughput),
            m.queue
                .and_then(|(gauge, label)| current.value(gauge).map(|v| (label, v))),
        ),
        _ => (None, None),
    };
    Row {
        name: node.name.clone(),
        role: node.role.clone(),
        party: node.party,
        shard: node.shard,
        state: if current.is_some() { State::Up } else { state },
        per_second,
        queue,
    }
}

/// The table: a header line and one line per row; `-` where a value is unknown.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:<11} {:<6} {:<10} {:>10}  QUEUE",
        "NODE", "ROLE", "P/S", "STATE", "TX/S"
    );
    for r in rows {
        let at = match r.shard {
            Some(s) => format!("{}/{s}", r.party),
            None => r.party.to_string(),
        };
        let per_second = r.per_second.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        let queue = r
            .queue
            .map_or_else(|| "-".to_owned(), |(label, v)| format!("{label} {v}"));
        let _ = writeln!(
            out,
            "{:<14} {:<11} {:<6} {:<10} {:>10}  {queue}",
            r.name,
            r.role,
            at,
            r.state.name(),
            per_second
        );
    }
    out
}

/// Every node's sample of this round, by node name (`None`: down, no address, or a
/// body that is not Prometheus text); each scrape gives up after `timeout` and is
/// stamped with the seconds since `start`.
pub async fn scrape(
    nodes: &[NodeEntry],
    start: Instant,
    timeout: Duration,
) -> HashMap<String, Option<Sample>> {
    let mut tasks = tokio::task::JoinSet::new();
    for n in nodes {
        let (name, addr) = (n.name.clone(), n.metrics.clone());
        tasks.spawn(async move {
            let Some(addr) = addr else {
                return (name, None);
            };
            let body = tokio::time::timeout(timeout, get_metrics(&addr))
                .await
                .ok()
                .flatten();
            let at = start.elapsed().as_secs_f64();
            (name, body.and_then(|b| Sample::parse(&b, at).ok()))
        });
    }
    let mut samples = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        if let Ok((name, sample)) = done {
            samples.insert(name, sample);
        }
    }
    samples
}

/// The body of `GET /metrics` at `addr` when it answers `200`.
async fn get_metrics(addr: &str) -> Option<String> {
    let mut sock = tokio::net::TcpStream::connect(addr).await.ok()?;
    // One write: the endpoint answers after its first read.
    let request = format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    sock.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    sock.take(MAX_BODY).read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8(response).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.lines().next()?.split_whitespace().nth(1)?;
    (status == "200").then(|| body.to_owned())
}

/// The table's rows, in `network.json` order, from this round's `samples` ([`scrape`])
/// and each node's `previous` good one.
pub fn rows(
    nodes: &[NodeEntry],
    samples: &HashMap<String, Option<Sample>>,
    previous: &HashMap<String, Sample>,
) -> Vec<Row> {
    nodes
        .iter()
        .map(|n| {
            let id = NodeId {
                name: n.name.clone(),
                role: n.role.clone(),
                party: n.party,
                shard: n.shard,
            };
            let state = if n.metrics.is_some() {
                State::Down
            } else {
                State::NoMetrics
            };
            let current = samples.get(&n.name).and_then(Option::as_ref);
            row(&id, state, previous.get(&n.name), current)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTER: &str = "\
# HELP fabrx_router_requests_admitted_total Requests admitted
# TYPE fabrx_router_requests_admitted_total counter
fabrx_router_requests_admitted_total{party=\"1\"} 100
fabrx_router_in_flight_requests{party=\"1\",shard=\"0\"} 3
fabrx_router_in_flight_requests{party=\"1\",shard=\"1\"} 4
fabrx_router_requests_refused_total{party=\"1\",reason=\"a } \\\" b\"} 7 1700000000000
fabrx_router_streams 2
";

    fn node(name: &str, role: &str, shard: Option<u32>) -> NodeId {
        NodeId {
            name: name.into(),
            role: role.into(),
            party: 1,
            shard,
        }
    }

    #[test]
    fn parse_sums_each_metric_over_its_label_values() {
        let s = Sample::parse(ROUTER, 1.0).unwrap();
        assert_eq!(s.value("fabrx_router_requests_admitted_total"), Some(100.0));
        assert_eq!(s.value("fabrx_router_in_flight_requests"), Some(7.0));
        assert_eq!(s.value("fabrx_router_requests_refused_total"), Some(7.0));
        assert_eq!(s.value("fabrx_router_streams"), Some(2.0));
        assert_eq!(s.value("fabrx_router_missing"), None);
        assert_eq!(
            Sample::parse("x_bucket{le=\"+Inf\"} +Inf\n", 0.0)
                .unwrap()
                .value("x_bucket"),
            Some(f64::INFINITY)
        );
    }

    #[test]
    fn parse_rejects_what_is_not_prometheus_text() {
        let cases = [
            ("<html>oops</html>\n", ParseError::BadValue { line: 1 }),
            ("a 1\nb{x=\"1\" 2\n", ParseError::UnclosedLabels { line: 2 }),
            ("a\n", ParseError::BadValue { line: 1 }),
            ("a{x=\"}\"} one\n", ParseError::BadValue { line: 1 }),
        ];
        for (text, want) in cases {
            assert_eq!(Sample::parse(text, 0.0), Err(want), "{text:?}");
        }
        assert_eq!(Sample::parse("", 0.0).unwrap().value("a"), None);
    }

    #[test]
    fn rate_is_the_increase_per_second_and_survives_a_restart() {
        let name = "fabrx_sidecar_txs_total";
        let at = |t: f64, v: f64| Sample::parse(&format!("{name} {v}\n"), t).unwrap();
        let table: [(Option<Sample>, Sample, Option<f64>); 6] = [
            (None, at(1.0, 10.0), None),
            (Some(at(1.0, 10.0)), at(3.0, 50.0), Some(20.0)),
            // Restarted: 6 since the restart.
            (Some(at(1.0, 10.0)), at(3.0, 6.0), Some(3.0)),
            (Some(at(3.0, 10.0)), at(3.0, 20.0), None),
            // No series yet, then 5: from 0.
            (Some(Sample::parse("", 1.0).unwrap()), at(2.0, 5.0), Some(5.0)),
            (Some(at(1.0, 4.0)), Sample::parse("", 2.0).unwrap(), Some(0.0)),
        ];
        for (previous, current, want) in table {
            assert_eq!(rate(previous.as_ref(), &current, name), want);
        }
    }

    #[test]
    fn every_role_of_network_json_has_its_throughput_counter() {
        for role in [
            "router",
            "batcher",
            "consenter",
            "assembler",
            "sidecar",
            "sigverifier",
            "vcservice",
            "query",
            "endorser",
        ] {
            let m = role_metrics(role).unwrap();
            assert!(m.throughput.starts_with(&format!("fabrx_{role}_")), "{m:?}");
            assert!(m.throughput.ends_with("_total"), "{m:?}");
        }
        assert_eq!(role_metrics("mystery"), None);
    }

    #[test]
    fn rows_from_samples_and_the_rendered_table() {
        let before = Sample::parse(ROUTER, 10.0).unwrap();
        let after = Sample::parse(&ROUTER.replace("} 100", "} 150"), 12.0).unwrap();
        let router = row(
            &node("router-1", "router", None),
            State::Up,
            Some(&before),
            Some(&after),
        );
        assert_eq!(
            router,
            Row {
                name: "router-1".into(),
                role: "router".into(),
                party: 1,
                shard: None,
                state: State::Up,
                per_second: Some(25.0),
                queue: Some(("in flight", 7.0)),
            }
        );
        let first = row(&node("router-1", "router", None), State::Up, None, Some(&before));
        assert_eq!((first.per_second, first.queue), (None, Some(("in flight", 7.0))));
        let down = row(
            &node("batcher-1-0", "batcher", Some(0)),
            State::Down,
            Some(&before),
            None,
        );
        assert_eq!(
            (down.state, down.per_second, down.queue),
            (State::Down, None, None)
        );
        let consenter = row(
            &node("consenter-1", "consenter", None),
            State::NoMetrics,
            None,
            None,
        );
        let table = render(&[router, down, consenter]);
        let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            lines,
            vec![
                vec!["NODE", "ROLE", "P/S", "STATE", "TX/S", "QUEUE"],
                vec!["router-1", "router", "1", "up", "25.0", "in", "flight", "7"],
                vec!["batcher-1-0", "batcher", "1/0", "down", "-", "-"],
                vec!["consenter-1", "consenter", "1", "no-metrics", "-", "-"],
            ]
        );
    }

    /// A one-shot HTTP server answering `response` to its first connection.
    async fn serve_once(response: &'static str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf).await;
            let _ = sock.write_all(response.as_bytes()).await;
        });
        addr
    }

    #[tokio::test]
    async fn get_metrics_takes_the_body_of_a_200_only() {
        let ok = serve_once("HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\na 1\n").await;
        assert_eq!(get_metrics(&ok).await.as_deref(), Some("a 1\n"));
        let err = serve_once("HTTP/1.1 500 Oops\r\n\r\na 1\n").await;
        assert_eq!(get_metrics(&err).await, None);
        let garbage = serve_once("nonsense").await;
        assert_eq!(get_metrics(&garbage).await, None);
        // Nobody listens there any more.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        assert_eq!(get_metrics(&closed).await, None);
    }

    fn entry(name: &str, role: &str, metrics: Option<String>) -> NodeEntry {
        NodeEntry {
            name: name.into(),
            role: role.into(),
            party: 1,
            shard: None,
            pid: 0,
            argv: Vec::new(),
            cwd: "/".into(),
            listen: "127.0.0.1:1".into(),
            metrics,
            data_dir: "/".into(),
            log: "/log".into(),
        }
    }

    #[tokio::test]
    async fn scrape_and_rows_mark_each_node_up_down_or_without_metrics() {
        let up = serve_once("HTTP/1.1 200 OK\r\n\r\nfabrx_router_requests_admitted_total 5\n").await;
        let down = serve_once("HTTP/1.1 503 Busy\r\n\r\n").await;
        let nodes = [
            entry("router-1", "router", Some(up)),
            entry("sidecar-1", "sidecar", Some(down)),
            entry("consenter-1", "consenter", None),
        ];
        let samples = scrape(&nodes, Instant::now(), Duration::from_secs(5)).await;
        assert_eq!(samples.len(), 3);
        assert_eq!(
            samples["router-1"]
                .as_ref()
                .and_then(|s| s.value("fabrx_router_requests_admitted_total")),
            Some(5.0)
        );
        let states: Vec<(String, State)> = rows(&nodes, &samples, &HashMap::new())
            .into_iter()
            .map(|r| (r.name, r.state))
            .collect();
        assert_eq!(
            states,
            vec![
                ("router-1".to_string(), State::Up),
                ("sidecar-1".to_string(), State::Down),
                ("consenter-1".to_string(), State::NoMetrics),
            ]
        );
    }
}
