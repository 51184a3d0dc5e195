//! Client submissions that wait for their decision. `Submit` answers only once the
//! request is decided (its `Decided` entry is in this replica's WAL, so it survives a
//! restart), or with an error status when the node cannot hold it or it is not decided
//! in time (docs/adr/0007-bft-submit-answers-when-decided.md). [`Waiters`] holds the
//! clients waiting per request digest; the bytes of undecided requests this replica
//! holds for its clients are bounded by a semaphore.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bft::{Decision, Digest, Refusal, Seq};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// How a waiting submission ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Decided at `seq`.
    Decided {
        /// The sequence that holds the request.
        seq: Seq,
    },
    /// The replica did not take the request.
    Refused(Refusal),
    /// The replica skipped ahead by state transfer to `through` and dropped the
    /// requests it held: the request may be among the skipped decisions.
    Skipped {
        /// The installed checkpoint's sequence.
        through: Seq,
    },
}

/// Why a submission could not even wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// The undecided bytes this replica holds for clients are at their bound.
    Bytes {
        /// The bound.
        limit: usize,
    },
    /// As many clients wait as allowed.
    Waiting {
        /// The bound.
        limit: usize,
    },
}

/// Bounds of waiting submissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubmitLimits {
    /// Bytes of undecided client requests held at once.
    pub max_bytes: usize,
    /// Clients waiting at once.
    pub max_waiting: usize,
}

/// The waiting clients by request digest, and how many there are.
#[derive(Default)]
struct Waiting {
    map: HashMap<Digest, Vec<oneshot::Sender<Outcome>>>,
    count: usize,
}

impl Waiting {
    fn take(&mut self, digest: &Digest) -> Vec<oneshot::Sender<Outcome>> {
        let txs = self.map.remove(digest).unwrap_or_default();
        self.count = self.count.saturating_sub(txs.len());
        txs
    }
}

/// Clients waiting for their requests, by request digest.
pub struct Waiters {
    map: Mutex<Waiting>,
    bytes: Arc<Semaphore>,
    limits: SubmitLimits,
}

/// One waiting submission; dropping it (answered, timed out, client gone) releases
/// its bytes and its entry.
pub struct Ticket {
    rx: oneshot::Receiver<Outcome>,
    digest: Digest,
    waiters: Arc<Waiters>,
    _bytes: OwnedSemaphorePermit,
}

impl Waiters {
    /// No one waiting yet.
    pub fn new(limits: SubmitLimits) -> Arc<Waiters> {
        Arc::new(Waiters {
            map: Mutex::new(Waiting::default()),
            bytes: Arc::new(Semaphore::new(limits.max_bytes.min(Semaphore::MAX_PERMITS))),
            limits,
        })
    }

    /// Registers a client waiting for `digest` (a request of `len` bytes).
    pub fn register(self: &Arc<Self>, digest: Digest, len: usize) -> Result<Ticket, Full> {
        let full_bytes = Full::Bytes {
            limit: self.limits.max_bytes,
        };
        let permits = u32::try_from(len.max(1)).map_err(|_| full_bytes)?;
        let permit = self
            .bytes
            .clone()
            .try_acquire_many_owned(permits)
            .map_err(|_| full_bytes)?;
        let (tx, rx) = oneshot::channel();
        let mut waiting = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.count >= self.limits.max_waiting {
            return Err(Full::Waiting {
                limit: self.limits.max_waiting,
            });
        }
        waiting.map.entry(digest).or_default().push(tx);
        waiting.count += 1;
        Ok(Ticket {
            rx,
            digest,
            waiters: self.clone(),
            _bytes: permit,
        })
    }

    /// Answers everyone waiting for a request of `decision`.
    pub fn decided(&self, decision: &Decision) {
        let mut waiting = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.map.is_empty() {
            return;
        }
        for r in &decision.proposal.requests {
            for tx in waiting.take(&Digest::of_request(r)) {
                let _ = tx.send(Outcome::Decided { seq: decision.seq() });
            }
        }
    }

    /// Answers everyone waiting for `digest` with a refusal.
    pub fn refused(&self, digest: Digest, reason: Refusal) {
        let txs = self.map.lock().unwrap_or_else(|e| e.into_inner()).take(&digest);
        for tx in txs {
            let _ = tx.send(Outcome::Refused(reason));
        }
    }

    /// Answers everyone waiting: this replica installed a snapshot through `through`
    /// and dropped its pending requests, so it cannot tell them their outcome.
    pub fn skipped(&self, through: Seq) {
        let mut waiting = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let map = std::mem::take(&mut waiting.map);
        waiting.count = 0;
        drop(waiting);
        for tx in map.into_values().flatten() {
            let _ = tx.send(Outcome::Skipped { through });
        }
    }

    /// Clients waiting now.
    pub fn waiting(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).count
    }
}

impl Ticket {
    /// Waits for the outcome; `None` if the node stopped answering.
    pub async fn outcome(&mut self) -> Option<Outcome> {
        (&mut self.rx).await.ok()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.rx.close();
        let mut waiting = self.waiters.map.lock().unwrap_or_else(|e| e.into_inner());
        let Waiting { map, count } = &mut *waiting;
        if let Some(txs) = map.get_mut(&self.digest) {
            let before = txs.len();
            txs.retain(|tx| !tx.is_closed());
            *count = count.saturating_sub(before - txs.len());
            if txs.is_empty() {
                map.remove(&self.digest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bft::{Certificate, InstanceId, Phase, Proposal};

    fn decision(seq: Seq, requests: &[&[u8]]) -> Decision {
        Decision {
            proposal: Arc::new(Proposal {
                instance: InstanceId(0),
                seq,
                requests: requests.iter().map(|r| r.to_vec()).collect(),
                metadata: vec![],
            }),
            certificate: Certificate {
                phase: Phase::Commit,
                instance: InstanceId(0),
                view: 0,
                seq,
                digest: Digest::default(),
                signatures: vec![],
            },
        }
    }

    #[tokio::test]
    async fn waiters_are_answered_and_bounded_in_bytes_and_count() {
        let w = Waiters::new(SubmitLimits {
            max_bytes: 10,
            max_waiting: 2,
        });
        let a = Digest::of_request(b"aaaaaa");
        let mut t1 = w.register(a, 6).unwrap();
        assert_eq!(
            w.register(Digest::of_request(b"b"), 6).err(),
            Some(Full::Bytes { limit: 10 })
        );
        let mut t2 = w.register(a, 1).unwrap();
        assert_eq!(w.register(a, 1).err(), Some(Full::Waiting { limit: 2 }));
        w.decided(&decision(4, &[b"x", b"aaaaaa"]));
        assert_eq!(t1.outcome().await, Some(Outcome::Decided { seq: 4 }));
        assert_eq!(t2.outcome().await, Some(Outcome::Decided { seq: 4 }));
        drop((t1, t2));
        assert_eq!(w.waiting(), 0);
        // bytes are released with the tickets
        let mut t3 = w.register(Digest::of_request(b"c"), 10).unwrap();
        w.refused(Digest::of_request(b"c"), Refusal::PoolFull);
        assert_eq!(t3.outcome().await, Some(Outcome::Refused(Refusal::PoolFull)));

        // a client that gives up leaves no entry behind
        let t4 = w.register(Digest::of_request(b"d"), 1);
        drop(t3);
        drop(t4);
        assert_eq!(w.waiting(), 0);
    }

    #[tokio::test]
    async fn a_snapshot_install_answers_everyone_waiting() {
        let w = Waiters::new(SubmitLimits {
            max_bytes: 10,
            max_waiting: 2,
        });
        let mut t1 = w.register(Digest::of_request(b"d"), 1).unwrap();
        let mut t2 = w.register(Digest::of_request(b"e"), 1).unwrap();
        w.skipped(9);
        assert_eq!(t1.outcome().await, Some(Outcome::Skipped { through: 9 }));
        assert_eq!(t2.outcome().await, Some(Outcome::Skipped { through: 9 }));
        assert_eq!(w.waiting(), 0);
        assert!(w.register(Digest::of_request(b"f"), 1).is_ok(), "room again");
    }
}
