//! One call over several equivalent endpoints (a party's validator-committers, …): the
//! endpoint that answered last is asked first ([`Order::Sticky`]), or each call starts at
//! the next endpoint in turn to spread the load ([`Order::RoundRobin`]); on an answer
//! [`crate::retry`] classes as retry, or none within the call's timeout, the next one is
//! asked, each at most once per call; a final answer is passed on at once. When none
//! answers, the error names every endpoint and why. A caller that must not give up
//! (the sidecar's commit stage) calls again, with its own backoff.

use crate::retry;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tracing::warn;

/// Which endpoint a call asks first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The one that answered last (a client that wants one warm connection).
    Sticky,
    /// The next one in turn (a stage that spreads its load over the endpoints).
    RoundRobin,
}

/// Endpoints of one service with their clients.
#[derive(Debug)]
pub struct Failover<C> {
    what: &'static str,
    endpoints: Vec<(String, C)>,
    preferred: AtomicUsize,
    call_timeout: Duration,
    order: Order,
}

/// How a call over the endpoints failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailoverError {
    /// An endpoint gave a final answer (passed on as it was).
    #[error("{endpoint}: {code:?}: {message}")]
    Final {
        /// Who answered.
        endpoint: String,
        /// The answer's code.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
    /// No endpoint answered (each one's reason, in the order asked).
    #[error("no {what} answered: {}", .reasons.join("; "))]
    NoneAnswered {
        /// The service.
        what: &'static str,
        /// `endpoint: reason` per endpoint.
        reasons: Vec<String>,
    },
}

impl FailoverError {
    /// The gRPC status a server passing this on should answer.
    pub fn to_status(&self) -> tonic::Status {
        match self {
            FailoverError::Final { code, message, .. } => tonic::Status::new(*code, message.clone()),
            FailoverError::NoneAnswered { .. } => tonic::Status::unavailable(self.to_string()),
        }
    }
}

impl<C: Clone> Failover<C> {
    /// `endpoints` (name, client) of service `what` (at least one: `None` otherwise);
    /// each call attempt may take `call_timeout`.
    pub fn new(
        what: &'static str,
        endpoints: Vec<(String, C)>,
        call_timeout: Duration,
    ) -> Option<Failover<C>> {
        if endpoints.is_empty() {
            return None;
        }
        Some(Failover {
            what,
            endpoints,
            preferred: AtomicUsize::new(0),
            call_timeout,
            order: Order::Sticky,
        })
    }

    /// The same endpoints, asked first in `order`.
    pub fn with_order(mut self, order: Order) -> Failover<C> {
        self.order = order;
        self
    }

    /// The service's name.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The endpoints' names, in configuration order.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.endpoints.iter().map(|(e, _)| e.as_str())
    }

    /// Calls `f` with each endpoint's client until one answers (see the module doc).
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, FailoverError>
    where
        F: Fn(C) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let n = self.endpoints.len();
        let first = match self.order {
            Order::Sticky => self.preferred.load(Ordering::Relaxed),
            Order::RoundRobin => self.preferred.fetch_add(1, Ordering::Relaxed),
        } % n;
        let mut reasons = Vec::new();
        for i in (0..n).map(|k| (first + k) % n) {
            let (endpoint, client) = &self.endpoints[i];
            let reason = match tokio::time::timeout(self.call_timeout, f(client.clone())).await {
                Ok(Ok(answer)) => {
                    if self.order == Order::Sticky {
                        self.preferred.store(i, Ordering::Relaxed);
                    }
                    return Ok(answer);
                }
                Ok(Err(s)) if !retry::retryable(&s) => {
                    return Err(FailoverError::Final {
                        endpoint: endpoint.clone(),
                        code: s.code(),
                        message: s.message().to_string(),
                    });
                }
                Ok(Err(s)) => format!("{:?}: {}", s.code(), s.message()),
                Err(_) => format!("no answer within {:?}", self.call_timeout),
            };
            warn!(endpoint = %endpoint, what = self.what, reason = %reason, "call lost; resubmitting to the next endpoint");
            reasons.push(format!("{endpoint}: {reason}"));
        }
        Err(FailoverError::NoneAnswered {
            what: self.what,
            reasons,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    /// A stand-in client: endpoint `i` answers with `answers[i]`.
    #[derive(Clone)]
    struct Fake {
        at: usize,
        calls: Arc<AtomicU32>,
    }

    fn pool(n: usize) -> (Failover<Fake>, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let endpoints = (0..n)
            .map(|at| {
                (
                    format!("e{at}"),
                    Fake {
                        at,
                        calls: calls.clone(),
                    },
                )
            })
            .collect();
        (
            Failover::new("fake", endpoints, Duration::from_millis(200)).unwrap(),
            calls,
        )
    }

    #[tokio::test]
    async fn the_next_endpoint_answers_final_answers_stand_and_the_last_good_is_asked_first() {
        let (p, calls) = pool(3);
        // e0 down, e1 answers.
        let got = p
            .call(|c: Fake| async move {
                c.calls.fetch_add(1, Ordering::Relaxed);
                match c.at {
                    0 => Err(tonic::Status::unavailable("down")),
                    _ => Ok(c.at),
                }
            })
            .await;
        assert_eq!(got, Ok(1));
        assert_eq!(calls.swap(0, Ordering::Relaxed), 2);
        // Next call starts at e1; a final answer is not retried elsewhere.
        let got: Result<usize, _> = p
            .call(|c: Fake| async move {
                c.calls.fetch_add(1, Ordering::Relaxed);
                Err(tonic::Status::invalid_argument(format!("bad at {}", c.at)))
            })
            .await;
        assert!(matches!(got, Err(FailoverError::Final { ref endpoint, .. }) if endpoint == "e1"));
        assert_eq!(calls.swap(0, Ordering::Relaxed), 1);
        // A hang counts as a failure; none answering names all.
        let got: Result<usize, _> = p
            .call(|c: Fake| async move {
                if c.at == 2 {
                    std::future::pending::<()>().await;
                }
                Err(tonic::Status::resource_exhausted("busy"))
            })
            .await;
        let Err(FailoverError::NoneAnswered { reasons, .. }) = got else {
            panic!("{got:?}");
        };
        assert_eq!(reasons.len(), 3);
        assert!(
            reasons.iter().any(|r| r.contains("no answer within")),
            "{reasons:?}"
        );
        assert!(Failover::<Fake>::new("x", vec![], Duration::from_secs(1)).is_none());
    }

    #[tokio::test]
    async fn round_robin_starts_each_call_at_the_next_endpoint() {
        let (p, _) = pool(3);
        let p = p.with_order(Order::RoundRobin);
        let mut first = Vec::new();
        for _ in 0..4 {
            first.push(
                p.call(|c: Fake| async move { Ok::<_, tonic::Status>(c.at) })
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(first, vec![0, 1, 2, 0]);
        // A down endpoint is skipped within the call.
        let got = p
            .call(|c: Fake| async move {
                if c.at == 1 {
                    Err(tonic::Status::unavailable("down"))
                } else {
                    Ok(c.at)
                }
            })
            .await;
        assert_eq!(got, Ok(2));
    }
}
