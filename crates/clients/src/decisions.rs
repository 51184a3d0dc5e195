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
}
