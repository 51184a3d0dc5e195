//! The decision follower: reads `Consenter.Decisions` from its own party's consenter
//! (another one when that one fails or no longer holds the next decision), verifies every
//! decision's certificate and hands it to the main loop.

use std::sync::Arc;
use std::time::Duration;

use arma::{ConsenterSets, DecisionProof, VerifiedDecision};
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tracing::debug;
use wire::pb;
use wire::pb::consenter_client::ConsenterClient;

use super::MAX_MESSAGE_BYTES;

pub(super) type Decided = (VerifiedDecision, Arc<DecisionProof>);

pub(super) struct Follower {
    pub(super) consenters: Vec<Channel>,
    /// The consenter sets by decision (learned from switch decisions, persisted).
    pub(super) sets: ConsenterSets,
    pub(super) sets_path: std::path::PathBuf,
    pub(super) next: u64,
    pub(super) tx: mpsc::Sender<Decided>,
    pub(super) retry: Duration,
}

impl Follower {
    pub(super) async fn run(mut self) {
        let mut source = 0usize;
        loop {
            let before = self.next;
            let at = source % self.consenters.len();
            let channel = self.consenters[at].clone();
            let (reason, ahead) = self.follow(at, channel).await;
            if self.tx.is_closed() {
                return;
            }
            debug!(next = self.next, source = at, reason, "decision stream ended");
            if let Some(i) = ahead {
                // Another consenter holds what this one did not give: follow it.
                source = i;
                continue;
            }
            if self.next == before {
                // No progress from this consenter: try the next one after a pause.
                source = at.wrapping_add(1);
                tokio::time::sleep(self.retry).await;
            }
        }
    }

    /// Reads consenter `at`'s decisions until its stream fails, or until another
    /// consenter is found ahead (`clients::decisions`): a source that is silent, trickles
    /// or replays old decisions is left for it. Returns why, and the one ahead.
    async fn follow(&mut self, at: usize, channel: Channel) -> (String, Option<usize>) {
        use tokio_stream::StreamExt as _;
        let mut client = ConsenterClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
        let mut stream = match client.decisions(pb::DecisionsRequest { from: self.next }).await {
            Ok(s) => s.into_inner(),
            Err(s) => return (format!("open: {:?}: {}", s.code(), s.message()), None),
        };
        let others: Vec<(usize, Channel)> = self
            .consenters
            .iter()
            .cloned()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .collect();
        // The probe verifies with a copy of the sets: made again after each switch, or
        // every decision probed after it would fail under the set before.
        let checks_of = |sets: &arma::ConsenterSets, next: u64| {
            let probe = sets.clone();
            let verify: clients::decisions::Verify =
                std::sync::Arc::new(move |d: &pb::Decision| probe.check_decision(d).is_ok());
            clients::decisions::Checks::new(others.clone(), MAX_MESSAGE_BYTES, verify, next)
        };
        let mut checks = checks_of(&self.sets, self.next);
        loop {
            let next = self.next;
            let message = tokio::select! {
                m = stream.next() => m,
                (i, from) = checks.ahead(next) => {
                    if self.next <= from {
                        return (format!("consenter {i} holds decision {from}, which this one has not given"), Some(i));
                    }
                    continue;
                }
            };
            let d = match message {
                Some(Ok(d)) => d,
                None => return ("ended".into(), None),
                Some(Err(s)) => return (format!("{:?}: {}", s.code(), s.message()), None),
            };
            if d.number < self.next {
                continue;
            }
            if d.number > self.next {
                return (
                    format!("decision {} arrived while {} was expected", d.number, self.next),
                    None,
                );
            }
            let epoch = self.sets.epoch();
            let verified = match self.sets.verify_decision(&d) {
                Ok(v) => v,
                Err(e) => return (format!("decision {} does not verify: {e}", d.number), None),
            };
            if self.sets.epoch() != epoch
                && let Err(e) = clients::file::write_durably(&self.sets_path, &self.sets.encode())
            {
                return (
                    format!(
                        "persisting the consenter sets to {}: {e}",
                        self.sets_path.display()
                    ),
                    None,
                );
            }
            let proof = match DecisionProof::try_from(&d) {
                Ok(p) => Arc::new(p),
                Err(e) => return (format!("decision {}: {e}", d.number), None),
            };
            if self.tx.send((verified, proof)).await.is_err() {
                return ("node stopped".into(), None);
            }
            self.next = self.next.saturating_add(1);
            if self.sets.epoch() != epoch {
                checks = checks_of(&self.sets, self.next);
            }
        }
    }
}
