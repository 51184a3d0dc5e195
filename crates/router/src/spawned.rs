//! A task that runs on its own and is aborted when its handle is dropped: how a client
//! stream's forwarded groups keep going (their batcher answers them and they give back
//! their room in the shard's bounds) while the stream waits for its client to read the
//! answers before them, and stop when the stream is gone.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A spawned task, aborted when dropped (the stream is gone: nobody wants its answers).
pub(crate) struct Spawned<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Future for Spawned<T> {
    type Output = std::result::Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for Spawned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
