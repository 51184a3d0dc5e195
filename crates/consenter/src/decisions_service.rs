//! `Consenter.Decisions`: a consenter's decisions, in order, from a decision number,
//! then following new ones (docs/consenter.md "The Decisions stream").
//!
//! Every stream reads the Arma decisions log ([`ArmaLogReader`]) at its own pace and
//! learns of new decisions through the log's watch channel: nothing is buffered per
//! stream beyond `buffer` decisions in its response channel, so a slow reader is
//! back-pressured (its stream stops reading the log) and costs no memory. At most
//! `max_streams` streams run at once (RESOURCE_EXHAUSTED beyond).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::debug;
use wire::pb;
use wire::pb::consenter_server::{Consenter, ConsenterServer};

use crate::arma_log::ArmaLogReader;

/// Bounds of the Decisions streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    /// Streams served at once.
    pub max_streams: usize,
    /// Decisions read ahead per stream (its response channel).
    pub buffer: std::num::NonZeroUsize,
    /// Largest encoded decision sent (the server's encoding limit).
    pub max_message_bytes: usize,
}

impl Default for StreamLimits {
    fn default() -> StreamLimits {
        StreamLimits {
            max_streams: 256,
            buffer: std::num::NonZeroUsize::new(16).unwrap_or(std::num::NonZeroUsize::MIN),
            max_message_bytes: 64 << 20,
        }
    }
}

/// The `Consenter` gRPC service of an Arma consenter node.
#[derive(Clone)]
pub struct DecisionsService {
    log: ArmaLogReader,
    streams: Arc<Semaphore>,
    limits: StreamLimits,
}

impl DecisionsService {
    /// Serves the decisions of `log`.
    pub fn new(log: ArmaLogReader, limits: StreamLimits) -> DecisionsService {
        DecisionsService {
            log,
            streams: Arc::new(Semaphore::new(limits.max_streams.min(Semaphore::MAX_PERMITS))),
            limits,
        }
    }

    /// The tonic server, with the request (1 KiB) and decision size limits.
    pub fn into_server(self) -> ConsenterServer<DecisionsService> {
        let max = self.limits.max_message_bytes;
        ConsenterServer::new(self)
            .max_decoding_message_size(1 << 10)
            .max_encoding_message_size(max)
    }
}

type Item = Result<pb::Decision, Status>;

#[tonic::async_trait]
impl Consenter for DecisionsService {
    type DecisionsStream = ReceiverStream<Item>;

    async fn decisions(
        &self,
        request: Request<pb::DecisionsRequest>,
    ) -> Result<Response<Self::DecisionsStream>, Status> {
        let from = request.into_inner().from.max(1);
        let permit = self.streams.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{} Decisions streams are open at this consenter; retry later",
                self.limits.max_streams
            ))
        })?;
        let (tx, rx) = mpsc::channel(self.limits.buffer.get());
        tokio::spawn(follow(self.log.clone(), from, tx, permit));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Most decisions read from the log in one blocking read.
const READ_CHUNK: u64 = 32;

/// Sends decisions from `next` on, in order, waiting for new ones; ends when the client
/// is gone or the log fails (with a status) or its writer stops.
async fn follow(log: ArmaLogReader, mut next: u64, tx: mpsc::Sender<Item>, _permit: OwnedSemaphorePermit) {
    let mut watch = log.watch();
    loop {
        let last = *watch.borrow_and_update();
        let first = log.first();
        if next < first {
            // Pruned, or skipped by a state-transfer snapshot: another consenter (or an
            // assembler's ledger) holds them.
            let _ = tx
                .send(Err(Status::out_of_range(format!(
                    "this consenter holds decisions from {first} on; decision {next} was pruned here \
                     (ask another consenter, or start at {first} or later)"
                ))))
                .await;
            return;
        }
        while next <= last {
            let upto = last.min(next.saturating_add(READ_CHUNK - 1));
            let reader = log.clone();
            let chunk = tokio::task::spawn_blocking(move || {
                (next..=upto)
                    .map(|n| reader.read(n))
                    .collect::<crate::Result<Vec<_>>>()
            })
            .await;
            let decisions = match chunk {
                Ok(Ok(d)) => d,
                Ok(Err(e)) => {
                    let _ = tx
                        .send(Err(Status::internal(format!("decisions log: {e}"))))
                        .await;
                    return;
                }
                Err(_) => return,
            };
            for d in decisions.into_iter().flatten() {
                next = d.number.saturating_add(1);
                if tx.send(Ok(d)).await.is_err() {
                    debug!(next, "Decisions stream closed by the client");
                    return;
                }
            }
            if next <= upto {
                let first = log.first();
                let status = if next < first {
                    // Pruned while we read.
                    Status::out_of_range(format!(
                        "this consenter holds decisions from {first} on; decision {next} was pruned here"
                    ))
                } else {
                    // The index promised a record the log did not return.
                    Status::internal("decisions log index out of step")
                };
                let _ = tx.send(Err(status)).await;
                return;
            }
        }
        tokio::select! {
            changed = watch.changed() => if changed.is_err() {
                let _ = tx.send(Err(Status::unavailable("the consenter is stopping"))).await;
                return;
            },
            () = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arma_log::ArmaLog;
    use tokio_stream::StreamExt as _;

    fn decision(number: u64) -> pb::Decision {
        pb::Decision {
            number,
            requests_root: vec![0; 32],
            ..pb::Decision::default()
        }
    }

    async fn open(service: &DecisionsService, from: u64) -> Result<ReceiverStream<Item>, Status> {
        service
            .decisions(Request::new(pb::DecisionsRequest { from }))
            .await
            .map(Response::into_inner)
    }

    #[tokio::test]
    async fn streams_follow_in_order_and_are_bounded_in_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = ArmaLog::open(&dir.path().join("arma")).expect("open");
        for n in 1..=40 {
            log.append(&decision(n)).expect("append");
        }
        let limits = StreamLimits {
            max_streams: 2,
            buffer: std::num::NonZeroUsize::new(4).unwrap_or(std::num::NonZeroUsize::MIN),
            max_message_bytes: 1 << 20,
        };
        let service = DecisionsService::new(log.reader(), limits);
        // A stream from the middle, read slowly while the log grows: every decision,
        // in order, none twice.
        let mut slow = open(&service, 30).await.expect("stream");
        let mut all = open(&service, 0).await.expect("from 0 is from 1");
        let Err(third) = open(&service, 1).await else {
            panic!("a third stream over max_streams");
        };
        assert_eq!(third.code(), tonic::Code::ResourceExhausted);
        for n in 41..=60 {
            log.append(&decision(n)).expect("append");
        }
        let mut got = Vec::new();
        while got.len() < 31 {
            let d = slow.next().await.expect("open").expect("decision");
            got.push(d.number);
        }
        assert_eq!(got, (30..=60).collect::<Vec<_>>());
        let first = all.next().await.expect("open").expect("decision");
        assert_eq!(first.number, 1);
        // A client that goes away frees its stream.
        drop(all);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let again = loop {
            match open(&service, 60).await {
                Ok(s) => break s,
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                Err(e) => panic!("stream never freed: {e:?}"),
            }
        };
        let mut again = again;
        assert_eq!(again.next().await.expect("open").expect("decision").number, 60);
        // The writer gone: UNAVAILABLE after the last decision.
        drop(log);
        let end = again.next().await.expect("a status");
        assert_eq!(end.err().map(|s| s.code()), Some(tonic::Code::Unavailable));
    }
}
