//! The contract every role's node follows (docs/ARCHITECTURE.md "One node contract").
//!
//! Each role crate has a module `node` with
//! - `Config`: where and how the node serves, validated once inside `spawn`;
//! - `Deps`: what it may be handed instead of creating it (metrics, links, a listener);
//! - `spawn(config: Config, deps: Deps) -> Result<Handle>`: validates, binds, starts;
//! - `Handle`, a [`Node`]: the address it serves on, a future that resolves when the
//!   node stops on its own, and `stop()`.
//!
//! The `fabrx` binary's runner is the same for every role: flags → `Config` → `spawn` →
//! ready line → wait for a signal or [`Node::failed`] → [`Node::stop`]. A test of the
//! binary's crate checks at compile time that every role exposes this shape.
//!
//! [`serve`] is the one way a node serves gRPC: the listener with the connection limits
//! of [`crate::server`], mutual TLS when this process installed it, and a shutdown that
//! closes connections within a grace period.

use crate::server::{Builder, ConnStats, Connections, ServerLimits};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running node of any role.
pub trait Node: Send + Sized {
    /// Why the node stopped.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The address it serves on (the bound one when the config asked for port 0).
    fn addr(&self) -> SocketAddr;

    /// Resolves when the node stops on its own (a storage failure, a task it depends on
    /// ended, its server failed): `Err` with the reason, `Ok` when it ended cleanly.
    /// Never resolves while the node runs; cancel-safe, so a runner may select on it.
    fn failed(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Stops the node and waits until its tasks ended and its files are closed; returns
    /// the error it had stopped on, if any.
    fn stop(self) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// A listener could not be bound, or its address read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot listen on {addr}: {reason}")]
pub struct ListenError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// The operating system's reason.
    pub reason: String,
}

/// Binds `addr`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    TcpListener::bind(addr).await.map_err(|e| ListenError {
        addr,
        reason: e.to_string(),
    })
}

/// The routes of a server: [`crate::server::builder`] with services added.
pub type Routes =
    tonic::transport::server::Router<tower_layer::Stack<crate::tls::AuthLayer, tower_layer::Identity>>;

/// How long [`Serving::stop`] lets open calls end before the server is aborted.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// How long [`Serving::stop`] waits for closed connections to be dropped.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// A gRPC server started by [`serve`].
pub struct Serving {
    addr: SocketAddr,
    stats: Arc<ConnStats>,
    connections: Connections,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    ended: Option<Result<(), ServeError>>,
}

/// The server stopped on its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the gRPC server stopped: {reason}")]
pub struct ServeError {
    /// What the transport or the task reported.
    pub reason: String,
}

/// Serves the routes `add` puts on a builder with `limits`, on `listener`, until
/// [`Serving::stop`]. Needs a tokio runtime.
pub fn serve(
    listener: TcpListener,
    limits: &ServerLimits,
    add: impl FnOnce(&mut Builder) -> Routes,
) -> Result<Serving, ListenError> {
    let addr = listener.local_addr().map_err(|e| ListenError {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        reason: e.to_string(),
    })?;
    let (incoming, stats, connections) = crate::server::incoming_closable(listener, limits);
    let (tx, rx) = oneshot::channel();
    let routes = add(&mut crate::server::builder(limits));
    let task = tokio::spawn(routes.serve_with_incoming_shutdown(incoming, async {
        let _ = rx.await;
    }));
    Ok(Serving {
        addr,
        stats,
        connections,
        shutdown: Some(tx),
        task: Some(task),
        ended: None,
    })
}

impl Serving {
    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its connection counters.
    pub fn stats(&self) -> &Arc<ConnStats> {
        &self.stats
    }

    /// Resolves when the server ends without [`Serving::stop`] (cancel-safe).
    pub async fn ended(&mut self) -> Result<(), ServeError> {
        if let Some(r) = &self.ended {
            return r.clone();
        }
        let Some(task) = self.task.as_mut() else {
            return std::future::pending().await;
        };
        let r = match task.await {
            Ok(Ok(())) => Err(ServeError {
                reason: "ended".to_string(),
            }),
            Ok(Err(e)) => Err(ServeError {
                reason: e.to_string(),
            }),
            Err(e) => Err(ServeError {
                reason: e.to_string(),
            }),
        };
        self.task = None;
        self.ended = Some(r.clone());
        r
    }

    /// Stops accepting and lets open calls end for up to `grace` (zero: at once); then
    /// closes every connection still open, so long-lived streams end with it, and waits
    /// (briefly) until they are dropped.
    pub async fn stop(mut self, grace: Duration) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(grace, &mut task).await.is_err()
        {
            task.abort();
            let _ = task.await;
        }
        self.connections.close_all();
        let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
        while self.connections.open() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The handle of a node that is only a gRPC server (the endorser, the query service,
/// the sigverifier, the vcservice): it fails when its server ends, and stops by closing
/// the server after its grace period. `E` is the role's error, made from the
/// [`ServeError`].
pub struct Server<E> {
    /// The address it serves on.
    pub addr: SocketAddr,
    serving: Serving,
    grace: Duration,
    error: std::marker::PhantomData<fn() -> E>,
}

impl<E> Server<E> {
    /// The handle of `serving`, stopped with `grace` ([`DEFAULT_GRACE`] unless the role's
    /// calls are long-lived streams that should be cut at once).
    pub fn new(serving: Serving, grace: Duration) -> Server<E> {
        Server {
            addr: serving.addr(),
            serving,
            grace,
            error: std::marker::PhantomData,
        }
    }
}

impl<E> Node for Server<E>
where
    E: From<ServeError> + std::error::Error + Send + Sync + 'static,
{
    type Error = E;

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    async fn failed(&mut self) -> Result<(), E> {
        Ok(self.serving.ended().await?)
    }

    async fn stop(self) -> Result<(), E> {
        self.serving.stop(self.grace).await;
        Ok(())
    }
}

/// A task of a node, awaited at most once: a finished `JoinHandle` must not be polled
/// again, so [`Task::join`] gives its result the first time and then never resolves.
#[derive(Debug)]
pub struct Task<T> {
    handle: Option<JoinHandle<T>>,
}

impl<T> Task<T> {
    /// Tracks `handle`.
    pub fn new(handle: JoinHandle<T>) -> Task<T> {
        Task { handle: Some(handle) }
    }

    /// Waits for the task (cancel-safe): its result the first time; after that it never
    /// resolves.
    pub async fn join(&mut self) -> Result<T, tokio::task::JoinError> {
        let Some(handle) = self.handle.as_mut() else {
            return std::future::pending().await;
        };
        let r = handle.await;
        self.handle = None;
        r
    }

    /// Waits for the task to end: its result, or `None` when it was joined before.
    pub async fn wait(&mut self) -> Option<Result<T, tokio::task::JoinError>> {
        let handle = self.handle.take()?;
        Some(handle.await)
    }

    /// Lets the task end within `grace` (zero: at once), then aborts it; its result
    /// (`cancelled` when aborted), or `None` when it was joined before.
    pub async fn finish(&mut self, grace: Duration) -> Option<Result<T, tokio::task::JoinError>> {
        let mut handle = self.handle.take()?;
        match tokio::time::timeout(grace, &mut handle).await {
            Ok(r) => Some(r),
            Err(_) => {
                handle.abort();
                Some(handle.await)
            }
        }
    }

    /// Whether it was joined already.
    pub fn joined(&self) -> bool {
        self.handle.is_none()
    }

    /// Whether it ended (joined or not).
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Aborts it (no effect once it ended).
    pub fn abort(&self) {
        if let Some(h) = &self.handle {
            h.abort();
        }
    }
}

#[cfg(test)]
mod task_tests {
    #![allow(clippy::unwrap_used)]
    use super::Task;
    use std::time::Duration;

    #[tokio::test]
    async fn a_task_is_joined_once_then_never_resolves() {
        let mut t = Task::new(tokio::spawn(async { 7 }));
        assert_eq!(t.join().await.unwrap(), 7);
        assert!(t.joined() && t.is_finished());
        let again = tokio::time::timeout(Duration::from_millis(50), t.join()).await;
        assert!(again.is_err(), "a joined task must not resolve again");
        assert!(t.wait().await.is_none() && t.finish(Duration::ZERO).await.is_none());
    }

    #[tokio::test]
    async fn finish_aborts_a_task_that_outlives_its_grace() {
        let mut t: Task<()> = Task::new(tokio::spawn(std::future::pending()));
        let r = t.finish(Duration::from_millis(20)).await.unwrap();
        assert!(r.unwrap_err().is_cancelled());
        let mut quick = Task::new(tokio::spawn(async { 3 }));
        assert_eq!(quick.finish(Duration::from_secs(5)).await.unwrap().unwrap(), 3);
    }
}
