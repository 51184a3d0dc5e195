//! The shell of `fabrx status --watch` (docs/metrics.md "Watching a network"): every
//! interval it has [`devnet::status`] scrape each node's `/metrics` and make the rows,
//! and redraws the table: the screen is cleared first on a terminal, otherwise one
//! table follows another. Ctrl-C ends it.

use super::NodeEntry;
use devnet::status::{Row, Sample, render, rows, scrape};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

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
            let samples = scrape(nodes, start, timeout).await;
            let table = rows(nodes, &samples, &previous);
            match draw(&table, watch.json, terminal) {
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
