//! The loop: the one task that owns the core, feeds it the time, router requests, peer
//! messages, persisted batches and decisions, and executes its outputs in order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tracing::{error, warn};
use types::{BatchId, PartyId};
use wire::pb;

use super::decisions::Decided;
use super::links::{PeerEvent, PeerSenders, PullWant, SubmitJob, SubmitView};
use super::metrics::gauge;
use super::served::Served;
use super::service::IntakeItem;
use super::store::{Done, Job, Progress};
use super::{Stats, bump};
use crate::codec::{ConsenterRequest, encode_consenter_request};
use crate::{Batcher, Error, Input, Output, RefuseReason, RequestDigest, Result};

fn stopped(reason: impl std::fmt::Display) -> Error {
    Error::Stopped {
        reason: reason.to_string(),
    }
}

/// Acks to the primary.
pub(super) type Acks = PeerSenders<pb::BatchAttestationFragment>;
/// Forwards to the primary.
pub(super) type Forwards = PeerSenders<pb::ForwardRequest>;

/// The loop's inputs.
pub(super) struct Queues {
    pub(super) rx_intake: mpsc::Receiver<IntakeItem>,
    pub(super) rx_peer: mpsc::Receiver<PeerEvent>,
    pub(super) rx_decided: mpsc::Receiver<Decided>,
}

/// The loop's state: the core and the ends of every queue it feeds.
pub(super) struct Node {
    pub(super) core: Batcher,
    pub(super) party: PartyId,
    pub(super) max_unordered: usize,
    pub(super) stats: Arc<Stats>,
    pub(super) served: Arc<Served>,
    pub(super) tx_persist: mpsc::Sender<Job>,
    pub(super) rx_done: mpsc::Receiver<Done>,
    /// Reports of the persister read while the loop waited for room in its queue (so
    /// neither waits for the other), fed before the next input.
    pub(super) deferred: VecDeque<Done>,
    pub(super) acks: Acks,
    /// The links to the other parties' nodes (grown at a switch that adds a party).
    pub(super) book: std::sync::Arc<super::book::Book>,
    pub(super) forwards: Forwards,
    pub(super) tx_submit: mpsc::Sender<SubmitJob>,
    pub(super) tx_want: watch::Sender<Option<PullWant>>,
    pub(super) tx_view: watch::Sender<SubmitView>,
    /// Where the shard's ordering stands (written to the progress log per decision).
    pub(super) progress: Progress,
    /// The last ordered batch of the current term, (primary, seq).
    pub(super) ordered_mark: Option<(PartyId, u64)>,
    pub(super) started: Instant,
    pub(super) tick: Duration,
    /// When the newest batches were persisted here (at most [`PERSISTED_KEPT`]), to
    /// measure how long each waits for its decision.
    pub(super) persisted_at: VecDeque<(BatchId, Instant)>,
    /// What it does wrong on purpose (only with the `testing` feature).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(super) faults: super::Faults,
    /// The pull task's answer for the compact batch being fed.
    pub(super) need_full: Option<tokio::sync::oneshot::Sender<()>>,
    /// Where the next signing keys are read at a key rotation.
    pub(super) next_key_files: Vec<std::path::PathBuf>,
    /// Since when a config in force removed this batcher's party: it serves what it holds
    /// for `arma::LEAVE_GRACE_MS`, acts no more, then stops.
    pub(super) leaving: Option<Instant>,
}

/// Batches whose persist instant is kept for the ordering latency; older ones (a
/// term's batches that were never ordered) fall out.
const PERSISTED_KEPT: usize = 4096;

/// The longest the core goes without hearing the time.
const IDLE_TICK: Duration = Duration::from_secs(1);

impl Node {
    pub(super) async fn run(mut self, initial: Vec<Output>, mut q: Queues) -> Result<()> {
        self.execute(initial).await?;
        self.publish();
        // The core hears the time when it may act on it (`next_deadline`), at most once
        // per `tick` and at least once per `IDLE_TICK`, not on a fixed beat: an idle or
        // steadily loaded batcher is not woken 200 times a second for nothing.
        let mut last_tick = tokio::time::Instant::now();
        let wake = tokio::time::sleep_until(self.wake_at(last_tick));
        tokio::pin!(wake);
        loop {
            if let Some(since) = self.leaving
                && since.elapsed() >= Duration::from_millis(arma::LEAVE_GRACE_MS)
            {
                return Err(Error::PartyLeft { party: self.party });
            }
            while let Some(done) = self.deferred.pop_front() {
                self.on_done(Some(done)).await?;
            }
            tokio::select! {
                biased;
                done = self.rx_done.recv() => self.on_done(done).await?,
                _ = &mut wake => {
                    last_tick = tokio::time::Instant::now();
                    if self.leaving.is_none() {
                        self.feed(Input::Tick(self.clock_ms())).await?;
                    }
                }
                decided = q.rx_decided.recv() => match decided {
                    Some(d) => self.on_decided(d).await?,
                    None => return Err(stopped("the decision follower ended")),
                },
                event = q.rx_peer.recv() => match event {
                    Some(e) => self.on_peer(e).await?,
                    None => return Err(stopped("the peer queue closed")),
                },
                item = q.rx_intake.recv() => match item {
                    Some(i) => self.on_intake(i).await?,
                    None => return Err(stopped("the intake queue closed")),
                },
            }
            let at = self.wake_at(last_tick);
            if at != wake.deadline() {
                wake.as_mut().reset(at);
            }
        }
    }

    /// The core's clock: ms since this node started.
    fn clock_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// When to tick next: at the core's next deadline, but not sooner than `tick` after
    /// the last tick (so a deadline the core cannot act on yet never spins) and not later
    /// than `IDLE_TICK` from now.
    fn wake_at(&self, last_tick: tokio::time::Instant) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        let latest = now + IDLE_TICK;
        let due = match self.core.next_deadline() {
            Some(ms) => tokio::time::Instant::from_std(self.started) + Duration::from_millis(ms),
            None => latest,
        };
        due.min(latest).max(last_tick + self.tick)
    }

    async fn on_done(&mut self, done: Option<Done>) -> Result<()> {
        match done {
            Some(Done::Persisted { id, digest }) => {
                bump(&self.stats.batches_persisted);
                if self.persisted_at.len() >= PERSISTED_KEPT {
                    self.persisted_at.pop_front();
                }
                self.persisted_at.push_back((id, Instant::now()));
                self.feed(Input::Persisted { id, digest }).await
            }
            Some(Done::Failed(e)) => {
                error!(error = %e, "persisting failed: the batcher stops");
                Err(e)
            }
            None => Err(stopped("the persister thread ended")),
        }
    }

    /// Queues a job for the persister; while its queue is full, keeps reading its
    /// reports so that the two never wait for each other.
    async fn persist(&mut self, job: Job) -> Result<()> {
        let (tx, rx) = (&self.tx_persist, &mut self.rx_done);
        loop {
            tokio::select! {
                permit = tx.reserve() => {
                    permit.map_err(|_| stopped("the persister thread ended"))?.send(job);
                    return Ok(());
                }
                done = rx.recv() => match done {
                    Some(Done::Failed(e)) => {
                        error!(error = %e, "persisting failed: the batcher stops");
                        return Err(e);
                    }
                    Some(d) => self.deferred.push_back(d),
                    None => return Err(stopped("the persister thread ended")),
                },
            }
        }
    }

    async fn feed(&mut self, input: Input) -> Result<()> {
        self.core.advance_clock(self.clock_ms());
        let outputs = self.core.handle(input);
        self.execute(outputs).await?;
        self.publish();
        Ok(())
    }

    async fn on_peer(&mut self, event: PeerEvent) -> Result<()> {
        let input = match event {
            PeerEvent::Forwarded { from, request } => Input::Forwarded { from, request },
            PeerEvent::Ack(baf) => Input::Baf(baf),
            PeerEvent::Pulled { from, batch } => Input::Batch { from, batch },
            PeerEvent::Compact {
                from,
                batch,
                need_full,
            } => {
                // Answered by `Output::NeedFullBatch`, dropped after the input otherwise.
                self.need_full = Some(need_full);
                let (id, digest, count) = (batch.id(), batch.header.digest, batch.digests.len());
                let fed = self.feed(Input::CompactBatch { from, batch }).await;
                let rebuilt =
                    self.need_full.take().is_some() && self.core.request_digests(id, &digest).is_some();
                if rebuilt {
                    // Its requests came from this party's router: none is checked again.
                    super::add(&self.stats.pulled_known, count as u64);
                }
                return fed;
            }
            PeerEvent::Refused {
                from,
                batch,
                index,
                reason,
            } => Input::RefusedBatch {
                from,
                batch,
                index,
                reason,
            },
        };
        self.feed(input).await
    }

    async fn on_intake(&mut self, item: IntakeItem) -> Result<()> {
        let IntakeItem {
            requests,
            mut answered,
            reply,
            bytes,
        } = item;
        answered.reserve(requests.len());
        self.core.advance_clock(self.clock_ms());
        for (id, request) in requests {
            // One request in, so the one answer among the outputs is its answer (the
            // core hashes the request; hashing it here as well cost a SHA-256 per
            // request).
            let outputs = self.core.handle(Input::Request(request));
            let answer = outputs.iter().find_map(|o| match o {
                Output::Admitted { .. } => Some(None),
                Output::Refused { reason, .. } => Some(Some(*reason)),
                _ => None,
            });
            answered.push(match answer {
                Some(None) => {
                    bump(&self.stats.admitted);
                    pb::IntakeResponse {
                        id,
                        admitted: true,
                        refusal: pb::IntakeRefusal::Unspecified as i32,
                    }
                }
                Some(Some(reason)) => {
                    bump(&self.stats.refused);
                    pb::IntakeResponse {
                        id,
                        admitted: false,
                        refusal: refusal(reason) as i32,
                    }
                }
                None => return Err(stopped("the core did not answer a request")),
            });
            self.execute(outputs).await?;
        }
        drop(bytes);
        reply.send(Ok(pb::IntakeAnswers { answers: answered }));
        self.publish();
        Ok(())
    }

    async fn on_decided(&mut self, decided: Decided) -> Result<()> {
        // A batcher whose party left reads nothing more.
        if self.leaving.is_some() {
            return Ok(());
        }
        let mut digests: Vec<RequestDigest> = Vec::new();
        for ordered in decided.ordered {
            bump(&self.stats.ordered_batches);
            if let Some(i) = self.persisted_at.iter().position(|(id, _)| *id == ordered.id)
                && let Some((_, at)) = self.persisted_at.remove(i)
            {
                self.stats.order_latency.observe(at.elapsed().as_secs_f64());
            }
            self.served.remove(ordered.id, &ordered.digest);
            if ordered.term == self.progress.term {
                self.progress.last_ordered_seq = self.progress.last_ordered_seq.max(ordered.id.seq);
                self.ordered_mark = Some((ordered.id.primary, self.progress.last_ordered_seq));
            }
            // A late equivocator forgets the victims of an ordered version A before its
            // core hears of it: they are not given back, so it never batches them again.
            #[cfg(feature = "testing")]
            if let Some(late) = &self.faults.late {
                for victim in late.on_ordered(ordered.term, ordered.id, &ordered.digest) {
                    self.core.remember_ordered(victim);
                }
            }
            let input = Input::Ordered {
                id: ordered.id,
                requests: ordered.requests,
            };
            self.feed(input).await?;
            digests.extend(self.core.take_newly_ordered());
        }
        // A config this decision put in force (its batching parameters, batcher keys and
        // this batcher's next key) before the term changes it brings: the core cuts and
        // signs the new term's first batches as soon as it enters the term.
        if let Some(view) = &decided.config {
            let party = self.core.config().party;
            if view.has_left(party) {
                tracing::info!(
                    party,
                    decision = decided.number,
                    grace_ms = arma::LEAVE_GRACE_MS,
                    "a config in force removed this batcher's party: it serves what it holds for a while, then stops"
                );
                self.leaving = Some(Instant::now());
                return Ok(());
            }
            self.book.follow(view);
            super::follow::apply(&mut self.core, view, &self.next_key_files, Some(decided.number));
        }
        for info in decided.terms {
            if info.term > self.progress.term {
                self.progress.term = info.term;
                self.progress.last_ordered_seq = info.last_ordered_seq;
                self.ordered_mark = None;
                self.served.forget_before(info.term);
                #[cfg(feature = "testing")]
                if let Some(late) = &self.faults.late {
                    late.forget_before(info.term);
                }
                // The new term is recorded before the core acts in it. The persister
                // appends in order, so no batch of the new term is fsynced (and so
                // served or attested) before this record: a restart restores them. The
                // record names this decision as the next one, so a restart reads it again.
                let record = Progress {
                    next_decision: decided.number,
                    ..self.progress
                };
                self.persist(Job::Progress(record, Vec::new())).await?;
            }
            self.feed(Input::TermChanged(info)).await?;
        }
        self.progress.next_decision = decided.number.saturating_add(1);
        bump(&self.stats.decisions);
        self.persist(Job::Progress(self.progress, digests)).await?;
        self.publish();
        Ok(())
    }

    async fn submit(
        &mut self,
        request: ConsenterRequest,
        term: u64,
        batch: Option<(PartyId, u64)>,
    ) -> Result<()> {
        let job = SubmitJob {
            bytes: Arc::new(encode_consenter_request(&request)),
            term,
            batch,
        };
        self.tx_submit
            .send(job)
            .await
            .map_err(|_| stopped("the consenter submitter ended"))
    }

    /// Executes the core's outputs in order (answers to the router are sent by
    /// `on_intake`; pulls follow the core's state, see `publish`).
    async fn execute(&mut self, outputs: Vec<Output>) -> Result<()> {
        for output in outputs {
            match output {
                Output::Persist(batch) => {
                    let counter = if batch.id().primary == self.party {
                        &self.stats.batches_cut
                    } else {
                        &self.stats.batches_accepted
                    };
                    bump(counter);
                    // A late equivocator persists version A of a batch with a victim too.
                    #[cfg(feature = "testing")]
                    if let Some(a) = self
                        .faults
                        .late
                        .as_ref()
                        .and_then(|l| l.split(&batch, &self.core.key))
                    {
                        self.persist(Job::Batch(a)).await?;
                    }
                    self.persist(Job::Batch(batch)).await?;
                }
                Output::Serve(batch) => self.serve(batch),
                Output::SendBaf(baf) => {
                    bump(&self.stats.bafs_sent);
                    // A late equivocator attests version A in place of B.
                    #[cfg(feature = "testing")]
                    let baf = match &self.faults.late {
                        Some(late) => late.baf(baf, &self.core.key),
                        None => baf,
                    };
                    let (term, id) = (baf.header.term, baf.header.id);
                    self.submit(baf.into(), term, Some((id.primary, id.seq))).await?;
                }
                Output::SendEvidence(baf) => {
                    // A late equivocator does not accuse itself.
                    #[cfg(feature = "testing")]
                    if self.faults.late.is_some() && baf.header.id.primary == self.party {
                        continue;
                    }
                    bump(&self.stats.bafs_sent);
                    let term = baf.header.term;
                    // Retried until the term changes: the id is ordered already.
                    self.submit(baf.into(), term, None).await?;
                }
                Output::AckPrimary { to, baf } => {
                    self.acks.send(to, (&baf).into());
                }
                Output::ForwardToPrimary { to, request } => {
                    let message = pb::ForwardRequest {
                        request: request.to_vec(),
                        from: self.party,
                    };
                    self.forwards.send(to, message);
                }
                Output::Complain(complaint) => {
                    bump(&self.stats.complaints);
                    let term = complaint.term;
                    self.submit(complaint.into(), term, None).await?;
                }
                Output::BatchRejected { from, error } => {
                    bump(&self.stats.batches_rejected);
                    warn!(from, error = %error, "a pulled batch failed verification");
                }
                Output::NeedFullBatch { .. } => {
                    if let Some(need_full) = self.need_full.take() {
                        let _ = need_full.send(());
                    }
                }
                Output::Pull(_) | Output::Admitted { .. } | Output::Refused { .. } => {}
            }
        }
        Ok(())
    }

    /// Serves a persisted batch; the primary serves its secondaries the compact form too
    /// (request digests, docs/batcher.md "Compact pulls"), from the digests the core
    /// already holds.
    fn serve(&mut self, batch: Arc<crate::SignedBatch>) {
        let packed = if batch.id().primary == self.party {
            self.core
                .request_digests(batch.id(), &batch.header.digest)
                .map(|d| Arc::new(crate::compact::pack_digests(d)))
        } else {
            None
        };
        // A late equivocator serves version A in place of B.
        #[cfg(feature = "testing")]
        let (batch, packed) = match self.faults.late.as_ref().and_then(|l| l.version_a(&batch.header)) {
            Some(a) => (a, None),
            None => (batch, packed),
        };
        self.served.insert_with_digests(batch, packed);
    }

    /// Publishes what the pull task and the submitter follow, and the gauges.
    fn publish(&mut self) {
        let core = &self.core;
        let want = match core.next_seq() {
            Some(seq) if !core.is_primary() && core.unordered_batches() < self.max_unordered => {
                Some(PullWant {
                    primary: core.primary(),
                    term: core.term(),
                    seq,
                })
            }
            _ => None,
        };
        self.tx_want
            .send_if_modified(|w| std::mem::replace(w, want) != want);
        let view = SubmitView {
            term: core.term(),
            ordered: self.ordered_mark,
        };
        self.tx_view
            .send_if_modified(|v| std::mem::replace(v, view) != view);
        let s = &self.stats;
        let (pending, pending_bytes) = core.pending();
        s.pending.set(gauge(pending as u64));
        s.pending_bytes.set(gauge(pending_bytes));
        let (in_flight, in_flight_bytes) = core.in_flight();
        s.in_flight.set(gauge(in_flight as u64));
        s.in_flight_bytes.set(gauge(in_flight_bytes));
        s.unordered_batches.set(gauge(core.unordered_batches() as u64));
        let term = gauge(core.term());
        if s.term.get() != term {
            s.term.set(term);
            bump(&s.term_changes);
        }
    }
}

fn refusal(reason: RefuseReason) -> pb::IntakeRefusal {
    match reason {
        RefuseReason::Duplicate => pb::IntakeRefusal::Duplicate,
        RefuseReason::MempoolFullRequests => pb::IntakeRefusal::MempoolFullRequests,
        RefuseReason::MempoolFullBytes => pb::IntakeRefusal::MempoolFullBytes,
        RefuseReason::TooLarge => pb::IntakeRefusal::TooLarge,
        RefuseReason::WrongShard => pb::IntakeRefusal::WrongShard,
    }
}
