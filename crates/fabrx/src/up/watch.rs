//! The shell of `fabrx status --watch` (docs/metrics.md "Watching a network"): every
//! interval it scrapes each node's `/metrics` (plain HTTP, the address `network.json`
//! records), hands the bodies to [`devnet::status`] and redraws the table: the
//! screen is cleared first on a terminal, otherwise one table follows another. Ctrl-C
//! ends it.

use super::NodeEntry;
use devnet::status::{NodeId, Row, Sample, State, render, row};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest `/metrics` body read (a node's is a few kB).
const MAX_BODY: u64 = 8 << 20;
/// Longest a scrape may take, whatever the interval.
const MAX_SCRAPE: Duration = Duration::from_secs(5);

/// How to watch.
pub(super) struct Watch {
    /// Time between two scrapes of every node.
    pub interval: Duration,
    /// One JSON object per node and round instead of the table.
    pub json: bool,
}

/// Scrapes and redraws until Ctrl-C.
pub(super) async fn run(nodes: &[NodeEntry], watch: &Watch) -> anyhow::Result<()> {
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let start = Instant::now();
    let timeout = watch.interval.min(MAX_SCRAPE);
    let terminal = std::io::stdout().is_terminal() && !watch.json;
    let mut previous: HashMap<String, Sample> = HashMap::new();
    loop {
        let round = async {
            let samples = scrape_all(nodes, start, timeout).await;
            let rows = rows(nodes, &samples, &previous);
            match draw(&rows, watch.json, terminal) {
                // The reader went away (`| head`): done.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(false),
                r => r?,
            }
            previous.extend(samples.into_iter().filter_map(|(name, s)| Some((name, s?))));
            tokio::time::sleep(watch.interval).await;
            std::io::Result::Ok(true)
        };
        tokio::select! {
            r = &mut ctrl_c => return r.map_err(Into::into),
            r = round => if !r? { return Ok(()) },
        }
    }
}

/// Every node's sample of this round, by node name (`None`: down or no address).
async fn scrape_all(
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

/// The table's rows, in `network.json` order.
fn rows(
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

/// Prints one round: the table (after clearing a terminal) or one JSON line per node.
fn draw(rows: &[Row], json: bool, terminal: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        for r in rows {
            let line = serde_json::json!({
                "name": r.name, "role": r.role, "party": r.party, "shard": r.shard,
                "state": r.state.name(), "per_second": r.per_second,
                "queue": r.queue.map(|(_, v)| v), "queue_name": r.queue.map(|(n, _)| n),
            });
            writeln!(out, "{line}")?;
        }
    } else {
        if terminal {
            // Cursor home, clear the screen.
            write!(out, "\x1b[H\x1b[2J")?;
        }
        write!(out, "{}", render(rows))?;
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
