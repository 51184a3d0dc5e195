//! Config updates a router hands on to the consenters (docs/reconfiguration.md "Ordering
//! an update"): an operator who reaches only the routers submits an update through one.
//! The router does not judge the update — the consenters check it against the config in
//! force and its admin signatures — it only makes sure that what it hands on is a config
//! update (a client cannot slip a BAF or complaint through it), and bounds how many it
//! hands on at once.

use std::sync::Arc;

use prost::Message as _;
use tokio::sync::Semaphore;
use tonic::Status;
use wire::pb;

/// Hands a config update on to the consenters and answers as they do.
#[tonic::async_trait]
pub trait ConfigUpdates: Send + Sync {
    /// Submits `request` (a consenter request of kind `config_update`) and answers with
    /// the consenter's answer, or the refusal.
    async fn submit(&self, request: Vec<u8>) -> Result<pb::BftSubmitResponse, Status>;
}

/// Config updates handed on at once by one router; more are answered
/// `RESOURCE_EXHAUSTED` (each waits for a decision, up to the consenters' timeout).
pub const MAX_CONCURRENT_UPDATES: usize = 4;

/// The router's side of `Router.SubmitConfigUpdate`.
pub struct ConfigUpdateGate {
    updates: Arc<dyn ConfigUpdates>,
    slots: Semaphore,
}

impl ConfigUpdateGate {
    /// A gate handing updates on to `updates`.
    pub fn new(updates: Arc<dyn ConfigUpdates>) -> ConfigUpdateGate {
        ConfigUpdateGate {
            updates,
            slots: Semaphore::new(MAX_CONCURRENT_UPDATES),
        }
    }

    /// Checks that `request` is a config update, then hands it on.
    pub async fn submit(&self, request: Vec<u8>) -> Result<pb::BftSubmitResponse, Status> {
        check(&request)?;
        let _slot = self.slots.try_acquire().map_err(|_| {
            Status::resource_exhausted(format!(
                "this router already hands on {MAX_CONCURRENT_UPDATES} config updates; retry later"
            ))
        })?;
        self.updates.submit(request).await
    }
}

/// `request` decodes as a consenter request of kind `config_update`.
pub fn check(request: &[u8]) -> Result<(), Status> {
    let decoded = pb::ConsenterRequest::decode(request)
        .map_err(|_| Status::invalid_argument("not a consenter request"))?;
    match decoded.kind {
        Some(pb::consenter_request::Kind::ConfigUpdate(u)) if !u.is_empty() => Ok(()),
        Some(pb::consenter_request::Kind::ConfigUpdate(_)) => {
            Err(Status::invalid_argument("an empty config update"))
        }
        _ => Err(Status::invalid_argument(
            "a router hands on config updates only (BAFs and complaints come from batchers)",
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Slow {
        calls: AtomicUsize,
        release: tokio::sync::Notify,
    }

    #[tonic::async_trait]
    impl ConfigUpdates for Slow {
        async fn submit(&self, _request: Vec<u8>) -> Result<pb::BftSubmitResponse, Status> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.release.notified().await;
            Ok(pb::BftSubmitResponse {
                accepted: true,
                decided_seq: 7,
            })
        }
    }

    fn update(bytes: &[u8]) -> Vec<u8> {
        pb::ConsenterRequest {
            kind: Some(pb::consenter_request::Kind::ConfigUpdate(bytes.to_vec())),
        }
        .encode_to_vec()
    }

    #[test]
    fn only_config_updates_pass() {
        assert!(check(&update(b"{}")).is_ok());
        assert_eq!(
            check(&update(b"")).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            check(&[0xff, 0xff]).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let complaint = pb::ConsenterRequest {
            kind: Some(pb::consenter_request::Kind::Complaint(pb::Complaint::default())),
        }
        .encode_to_vec();
        let refused = check(&complaint).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(refused.message().contains("config updates only"), "{refused}");
        let empty = pb::ConsenterRequest { kind: None }.encode_to_vec();
        assert!(check(&empty).is_err());
    }

    #[tokio::test]
    async fn at_most_a_few_updates_are_handed_on_at_once() {
        let slow = Arc::new(Slow {
            calls: AtomicUsize::new(0),
            release: tokio::sync::Notify::new(),
        });
        let gate = Arc::new(ConfigUpdateGate::new(slow.clone()));
        let mut waiting = Vec::new();
        for _ in 0..MAX_CONCURRENT_UPDATES {
            let gate = Arc::clone(&gate);
            waiting.push(tokio::spawn(async move { gate.submit(update(b"{}")).await }));
        }
        while slow.calls.load(Ordering::SeqCst) < MAX_CONCURRENT_UPDATES {
            tokio::task::yield_now().await;
        }
        let refused = gate.submit(update(b"{}")).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        // A refused request takes no slot and reaches no consenter.
        let junk = gate.submit(vec![0xff]).await.unwrap_err();
        assert_eq!(junk.code(), tonic::Code::InvalidArgument);
        assert_eq!(slow.calls.load(Ordering::SeqCst), MAX_CONCURRENT_UPDATES);
        for _ in 0..MAX_CONCURRENT_UPDATES {
            slow.release.notify_one();
        }
        for w in waiting {
            assert_eq!(w.await.unwrap().unwrap().decided_seq, 7);
        }
        // Slots come back once the answers are given.
        slow.release.notify_one();
        assert_eq!(gate.submit(update(b"{}")).await.unwrap().decided_seq, 7);
    }
}
