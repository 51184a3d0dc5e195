//! What every `fabrx node <role>` runner shares: the signals that stop it, the loop it
//! ends in and its metrics endpoint.

use anyhow::Context;

/// The end of every role's runner: prints the ready line (when there is one), then
/// waits for SIGTERM or Ctrl-C (the node is stopped: exit 0) or for the node to stop on
/// its own (exit non-zero, with its reason).
pub async fn serve<N: wire::node::Node>(
    mut node: N,
    what: &str,
    ready: Option<serde_json::Value>,
    stopping: &mut Stopping,
) -> anyhow::Result<()> {
    if let Some(ready) = ready {
        println!("{ready}");
    }
    tokio::select! {
        r = node.failed() => {
            tracing::error!("{what} stopped: {r:?}");
            let stopped = node.stop().await;
            r.and(stopped).with_context(|| format!("{what} stopped"))?;
            anyhow::bail!("{what} stopped on its own")
        }
        () = stopping.wait() => {
            tracing::info!("{what} stopping");
            node.stop().await.with_context(|| format!("stopping {what}"))
        }
    }
}

/// SIGTERM and Ctrl-C (SIGINT), caught from the moment it is made: a node makes it before
/// it prints its ready line, so a supervisor that signals as soon as it reads that line
/// gets a clean stop (exit 0) rather than the default action of the signal.
pub struct Stopping {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Stopping {
    /// Installs both handlers now.
    pub fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// Waits for either signal (also one that arrived before this call).
    pub async fn wait(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// The node's metrics registry (`fabrx_<role>_…`, every series labelled with `labels`,
/// e.g. `party`, `shard`: docs/metrics.md), served on `addr` when one is given. The
/// caller hands it to the node, which makes its metrics in it.
pub async fn metrics(
    role: &str,
    addr: Option<&str>,
    labels: &[(&str, u32)],
) -> anyhow::Result<telemetry::Registry> {
    let labels: Vec<(&str, String)> = labels
        .iter()
        .map(|(name, value)| (*name, value.to_string()))
        .collect();
    let registry = telemetry::Registry::node(role, &labels)?;
    if let Some(addr) = addr {
        telemetry::http::serve(addr, registry.clone()).await?;
    }
    Ok(registry)
}

/// [`metrics`] of a node that keeps its state in `data_dir`: the registry also reports
/// the size and free space of the file system under it (`fabrx_data_dir_*`).
pub async fn metrics_with_data_dir(
    role: &str,
    addr: Option<&str>,
    labels: &[(&str, u32)],
    data_dir: &std::path::Path,
) -> anyhow::Result<telemetry::Registry> {
    let registry = metrics(role, addr, labels).await?;
    registry.data_dir(data_dir)?;
    Ok(registry)
}
