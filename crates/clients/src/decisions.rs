//! Following the consenters' decision stream without trusting the one being followed: a
//! follower (an assembler, a batcher) that reads one consenter's `Consenter.Decisions`
//! checks now and then whether another consenter holds decisions its own source has not
//! given it — a source that keeps its stream open and silent, trickles decisions or
//! replays old ones is then left for one that is ahead ([`ahead`], [`probe_from`]).

use std::time::Duration;
use tonic::transport::Channel;
use wire::pb;
use wire::pb::consenter_client::ConsenterClient;

/// How often a follower checks the other consenters.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);

/// How long a probed consenter may take to serve its first decision.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The decision to probe for at a check: the source served `next - at_last_check`
/// decisions since the last check, and is left for a consenter that is ahead of it by at
/// least as many (`next` itself when it served none). A source that serves less than half
/// of what the network decides — silent, or trickling at any rate — is left within a
/// check or two; a source that keeps up is ahead of or level with the others by then.
/// (A fixed margin, 16 decisions, let a consenter trickling one decision per check keep
/// its followers up to 16 decisions behind, many seconds on a quiet network.)
pub fn probe_from(next: u64, at_last_check: u64) -> u64 {
    next.saturating_add(next.saturating_sub(at_last_check))
}

/// Which of `consenters` (index, channel) serves, within [`PROBE_TIMEOUT`], a decision
/// numbered `from` or later that `verify` accepts (a decision a quorum certified: a
/// Byzantine consenter cannot lure a follower away with made-up ones). `None` when none
/// does (the network is idle, or the source is not behind).
pub async fn ahead(
    consenters: &[(usize, Channel)],
    from: u64,
    max_message_bytes: usize,
    verify: impl Fn(&pb::Decision) -> bool,
) -> Option<usize> {
    let mut probes = tokio::task::JoinSet::new();
    for (i, ch) in consenters {
        let mut client = ConsenterClient::new(ch.clone()).max_decoding_message_size(max_message_bytes);
        let i = *i;
        probes.spawn(async move {
            let first = async {
                let mut stream = client
                    .decisions(pb::DecisionsRequest { from })
                    .await
                    .ok()?
                    .into_inner();
                stream.message().await.ok().flatten()
            };
            (i, tokio::time::timeout(PROBE_TIMEOUT, first).await.ok().flatten())
        });
    }
    while let Some(done) = probes.join_next().await {
        if let Ok((i, Some(d))) = done
            && d.number >= from
            && verify(&d)
        {
            return Some(i);
        }
    }
    None
}

/// A verifier of probed decisions, shared with the probe running beside the stream.
pub type Verify = std::sync::Arc<dyn Fn(&pb::Decision) -> bool + Send + Sync>;

type Probe = std::pin::Pin<Box<dyn std::future::Future<Output = Option<usize>> + Send>>;

/// A follower's checks of the other consenters, run beside its stream: every
/// [`CHECK_EVERY`] a probe ([`ahead`]) starts, and the follower goes on reading its source
/// while the probe waits (up to [`PROBE_TIMEOUT`]). A follower that awaited the probe in
/// its read loop stopped reading for the whole timeout at every check of an active network
/// — where the probed decision does not exist yet — and delayed what it orders by up to
/// 2 s every 5 s.
pub struct Checks {
    others: Vec<(usize, Channel)>,
    max_message_bytes: usize,
    verify: Verify,
    every: tokio::time::Interval,
    at_last_check: u64,
    /// The running probe and the decision it looks for.
    probe: Option<(u64, Probe)>,
}

impl Checks {
    /// Checks of `others` for a follower whose next decision is `next`; the first check
    /// is [`CHECK_EVERY`] from now.
    pub fn new(others: Vec<(usize, Channel)>, max_message_bytes: usize, verify: Verify, next: u64) -> Checks {
        Checks::every(others, max_message_bytes, verify, next, CHECK_EVERY)
    }

    /// [`Checks::new`] with another period (tests).
    pub fn every(
        others: Vec<(usize, Channel)>,
        max_message_bytes: usize,
        verify: Verify,
        next: u64,
        period: Duration,
    ) -> Checks {
        let start = tokio::time::Instant::now() + period;
        Checks {
            others,
            max_message_bytes,
            verify,
            every: tokio::time::interval_at(start, period),
            at_last_check: next,
            probe: None,
        }
    }

    /// Resolves with a consenter that holds a decision the follower, now at `next`, had
    /// not reached when the probe found it, and that decision's number; pending while
    /// there is none (and for ever without other consenters). Cancel-safe: a running
    /// probe is kept across calls, so the caller may poll this beside its stream and
    /// drop it whenever a decision arrives.
    pub async fn ahead(&mut self, next: u64) -> (usize, u64) {
        if self.others.is_empty() {
            return std::future::pending().await;
        }
        loop {
            if let Some((from, probe)) = &mut self.probe {
                let from = *from;
                let found = probe.await;
                self.probe = None;
                if let Some(i) = found {
                    return (i, from);
                }
                continue;
            }
            self.every.tick().await;
            let from = probe_from(next, self.at_last_check);
            self.at_last_check = next;
            let (others, max, verify) = (self.others.clone(), self.max_message_bytes, self.verify.clone());
            let probe: Probe = Box::pin(async move { ahead(&others, from, max, |d| verify(d)).await });
            self.probe = Some((from, probe));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use tokio_stream::wrappers::TcpListenerStream;
    use wire::pb::consenter_server::{Consenter, ConsenterServer};

    /// A stand-in consenter holding decisions `0..height` (unsigned: the test's `verify`
    /// accepts by number), or holding the stream open and silent.
    struct Fake {
        height: u64,
        silent: bool,
    }

    type Decisions = Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::Decision, tonic::Status>> + Send>>;

    #[tonic::async_trait]
    impl Consenter for Fake {
        type DecisionsStream = Decisions;

        async fn decisions(
            &self,
            r: tonic::Request<pb::DecisionsRequest>,
        ) -> Result<tonic::Response<Decisions>, tonic::Status> {
            let from = r.into_inner().from;
            if self.silent {
                return Ok(tonic::Response::new(Box::pin(tokio_stream::pending())));
            }
            let held: Vec<Result<pb::Decision, tonic::Status>> = (from..self.height)
                .map(|number| {
                    Ok(pb::Decision {
                        number,
                        ..Default::default()
                    })
                })
                .collect();
            Ok(tonic::Response::new(Box::pin(tokio_stream::StreamExt::chain(
                tokio_stream::iter(held),
                tokio_stream::pending(),
            ))))
        }
    }

    async fn consenter(height: u64, silent: bool) -> Channel {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ConsenterServer::new(Fake { height, silent }))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        crate::channel::lazy(&at.to_string(), crate::channel::DEFAULT_CONNECT_TIMEOUT).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_consenter_ahead_is_found_and_silent_or_forged_ones_are_not() {
        let others = vec![
            (1, consenter(0, true).await),
            (2, consenter(5, false).await),
            (3, consenter(40, false).await),
        ];
        let any = |_: &pb::Decision| true;
        // The source gave nothing since the last check, at decision 4: anyone holding 4.
        let from = probe_from(4, 4);
        let found = ahead(&others, from, 1 << 20, any).await;
        assert!(matches!(found, Some(2 | 3)), "{found:?}");
        // The source served 6 since (10, was 4): only a consenter 6 ahead (16) counts.
        assert_eq!(ahead(&others, probe_from(10, 4), 1 << 20, any).await, Some(3));
        // A source trickling one decision per check is left for one a decision ahead.
        assert_eq!(probe_from(3, 2), 4);
        let found = ahead(&others, probe_from(3, 2), 1 << 20, any).await;
        assert!(matches!(found, Some(2 | 3)), "{found:?}");
        // Nobody that far ahead, or decisions that do not verify: stay.
        assert_eq!(ahead(&others, 100, 1 << 20, any).await, None);
        assert_eq!(ahead(&others, 4, 1 << 20, |_| false).await, None);
    }

    /// A follower keeps reading its source while a check's probe waits: the others hold
    /// nothing ahead (an active network, where the probed decision is not decided yet),
    /// so each probe waits out its 2 s; the source's decisions, one every 10 ms, are read
    /// without a gap meanwhile. A probe awaited in the read loop stopped it for 2 s at
    /// every check. A consenter that is ahead is still found.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_source_is_read_while_a_probe_waits() {
        let others = vec![(1, consenter(0, true).await), (2, consenter(3, false).await)];
        let any: Verify = std::sync::Arc::new(|_: &pb::Decision| true);
        let period = Duration::from_millis(100);
        let mut checks = Checks::every(others.clone(), 1 << 20, any.clone(), 3, period);
        let mut source = tokio::time::interval(Duration::from_millis(10));
        let mut next = 3u64;
        let mut last = tokio::time::Instant::now();
        let mut longest = Duration::ZERO;
        let until = last + Duration::from_millis(1500);
        while tokio::time::Instant::now() < until {
            tokio::select! {
                _ = source.tick() => {
                    longest = longest.max(last.elapsed());
                    last = tokio::time::Instant::now();
                    next += 1;
                }
                found = checks.ahead(next) => panic!("nobody is ahead: {found:?}"),
            }
        }
        assert!(
            longest < Duration::from_millis(100),
            "a gap of {longest:?} in reading the source"
        );
        // A follower stuck at decision 1 finds the consenter holding 3.
        let mut checks = Checks::every(others, 1 << 20, any, 1, period);
        let found = tokio::time::timeout(Duration::from_secs(5), checks.ahead(1)).await;
        assert_eq!(found.ok(), Some((2, 1)));
    }
}
