//! `fabrx loadgen --target sink` (docs/loadgen.md "A sink: what the load client
//! costs"): the shell around `devnet::load::sink`. It makes throwaway TLS identities
//! (unless `--insecure`), starts the sink as another `fabrx` process (`fabrx loadgen
//! serve-sink`, hidden: the command's own helper), reads where it listens from its first
//! line, runs the load, stops the sink and prints the summary. `serve-sink` ends when
//! its stdin closes, so a client that dies takes its sink with it.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use devnet::load::sink::{self, Listening, Options};
use loadgen::series::Schedule;

use crate::loadgen_network::Output;

/// Flags of the hidden `fabrx loadgen serve-sink`.
#[derive(Debug, Args)]
pub struct ServeSinkArgs {
    /// The throwaway network directory to take party 1's router identity from (none:
    /// plain TCP).
    #[arg(long, value_name = "DIR")]
    tls: Option<PathBuf>,
}

/// `fabrx loadgen serve-sink`: serves the sink, prints where on stdout (one JSON line),
/// and stops when stdin closes.
pub async fn serve(args: &ServeSinkArgs) -> anyhow::Result<()> {
    let (running, listening) = sink::serve(args.tls.as_deref()).await?;
    println!("{}", serde_json::to_string(&listening)?);
    // Until the client closes our stdin (or dies).
    tokio::task::spawn_blocking(|| {
        let mut sink = std::io::sink();
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut sink);
    })
    .await?;
    running.stop().await;
    Ok(())
}

/// The sink's process, stopped when dropped.
struct SinkProcess {
    child: Child,
}

impl SinkProcess {
    /// Starts `fabrx loadgen serve-sink` and reads where it listens.
    fn start(tls: Option<&Path>) -> anyhow::Result<(SinkProcess, Listening)> {
        let exe = std::env::current_exe().context("finding the fabrx binary")?;
        let mut cmd = Command::new(exe);
        cmd.args(["loadgen", "serve-sink"]);
        if let Some(dir) = tls {
            cmd.arg("--tls").arg(dir);
        }
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the sink's process")?;
        let mut process = SinkProcess { child };
        let stdout = process.child.stdout.take().context("the sink's stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .context("reading where the sink listens")?;
        let listening: Listening = serde_json::from_str(line.trim())
            .with_context(|| format!("the sink's process said {line:?}, not where it listens"))?;
        Ok((process, listening))
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SinkProcess {
    fn drop(&mut self) {
        // Closing its stdin stops it; after a grace period it is killed.
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the load against a sink in another process and prints the summary.
pub async fn run(
    options: Options,
    insecure: bool,
    schedule: Schedule,
    output: Output<'_>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a directory for the sink's TLS identities")?;
    let tls = (!insecure).then(|| dir.path().join("net"));
    if let Some(tls) = &tls {
        sink::make_tls(tls)?;
        sink::install_client_tls(Some(tls))?;
    }
    let (process, listening) = SinkProcess::start(tls.as_deref())?;
    eprintln!(
        "loadgen: sink in process {} ({} routers, {})",
        process.pid(),
        listening.routers.len(),
        if insecure { "plain TCP" } else { "mutual TLS" }
    );
    // On a worker of the runtime, next to the links' tasks, rather than on this thread:
    // the driver and its links hand each other messages all the time.
    let pid = process.pid();
    let outcome = tokio::spawn(async move {
        sink::run(
            &listening,
            Some(pid),
            &options,
            schedule,
            crate::loadgen_network::printer(),
        )
        .await
    })
    .await??;
    drop(process);
    let line = outcome.summary.line()?;
    if let Some(report) = output.report {
        let title = format!(
            "fabrx loadgen --target sink · {} txs · run {}",
            outcome.summary.sent, outcome.summary.tag
        );
        crate::report_files::write_report(report, &outcome.raw.series, &line, &title)?;
        outcome.write_raw(report)?;
    }
    crate::loadgen_network::print_summary(&outcome, &line, output.json);
    Ok(())
}
