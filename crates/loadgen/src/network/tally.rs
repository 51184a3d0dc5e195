//! What a network run counts as the routers answer and the statuses arrive: each tx's
//! answers, its refusal and the reason, its status of this run or of an earlier one,
//! and at the end the summary's counts (`super::NetworkRun`).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::links::{Decided, Links};
use super::{NetworkRun, failed, stopped};
use crate::Histogram;
use crate::series::{Recorder, Schedule};

/// One router's answers to some txs (one answer message's, or the failures of a link).
pub(super) struct Acks {
    pub(super) router: usize,
    /// Each tx (its index) with the router's answer.
    pub(super) answers: Vec<(usize, Answer)>,
}

/// What a router answered to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// Its batcher admitted the request.
    Admitted,
    /// Its batcher held the request already (`ALREADY_EXISTS`): brought by another
    /// party's batch or forward in this run, or sent by an earlier run.
    Duplicate,
    /// Refused or failed, with the reason.
    Failed(Reason),
}

/// Why a router did not admit a tx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Reason {
    /// Refused with this gRPC code (never `OK`).
    Code(i32),
    /// Its link could not open a stream.
    Unavailable,
    /// Its stream failed before the answer came.
    StreamFailed,
    /// Not handed to the router: its link's queue was full for `STUCK_AFTER`.
    Backlog,
}

impl Reason {
    /// The name the summary counts it under (a gRPC code's name, or `unavailable`,
    /// `stream failed`, `backlog`).
    pub(super) fn name(self) -> String {
        match self {
            Reason::Code(c) => format!("{:?}", tonic::Code::from_i32(c)),
            Reason::Unavailable => "unavailable".into(),
            Reason::StreamFailed => "stream failed".into(),
            Reason::Backlog => BACKLOG.into(),
        }
    }
}

impl Answer {
    /// The answer a `Submit` response's code gives.
    pub(super) fn of_code(code: u32) -> Answer {
        match tonic::Code::from_i32(code as i32) {
            tonic::Code::Ok => Answer::Admitted,
            tonic::Code::AlreadyExists => Answer::Duplicate,
            other => Answer::Failed(Reason::Code(other as i32)),
        }
    }

    /// The reason a refusal is counted under.
    fn reason(self) -> Option<Reason> {
        match self {
            Answer::Admitted => None,
            Answer::Duplicate => Some(Reason::Code(tonic::Code::AlreadyExists as i32)),
            Answer::Failed(r) => Some(r),
        }
    }
}

/// The reason of an `ALREADY_EXISTS` answer.
#[cfg(test)]
const DUPLICATE: &str = "AlreadyExists";

/// The reason of a tx not handed to a router whose link's queue was full.
pub(super) const BACKLOG: &str = "backlog";

/// Per-tx progress.
#[derive(Clone, Copy, Default)]
struct TxState {
    sent_at: Option<Instant>,
    ok: u16,
    duplicate: u16,
    failed: u16,
    /// No quorum of admissions is possible any more; the reason (an index into
    /// `Tally::reasons`) of the answer that made it so.
    refused: Option<u16>,
    /// Its in-flight slot was given back.
    counted: bool,
}

/// What the run counts as acks and statuses arrive.
pub(super) struct Tally {
    state: Vec<TxState>,
    pub(super) out: NetworkRun,
    pub(super) in_flight: usize,
    start: Instant,
    pub(super) last_confirm: Instant,
    pub(super) recorder: Recorder,
    /// Routers, and admissions a tx needs.
    n: usize,
    q: usize,
    /// The reasons of refused txs (`TxState::refused` indexes it).
    reasons: Vec<Reason>,
    /// Every answer that was not an admission, by router and reason.
    errors: HashMap<(usize, Reason), u64>,
    /// Statuses in blocks below this were decided before the run.
    first_block: u64,
    /// Router answers still due for the txs sent (every router answers every tx, if
    /// only with a failure of its link).
    answers_due: usize,
}

impl Tally {
    /// Nothing counted yet of `txs` txs, to be sent to `n` routers from `start`;
    /// statuses in blocks from `first_block` on are this run's.
    pub(super) fn new(txs: usize, start: Instant, schedule: &Schedule, n: usize, first_block: u64) -> Tally {
        Tally {
            state: vec![TxState::default(); txs],
            out: NetworkRun {
                latency_us: Histogram::new(),
                outcome: vec![None; txs],
                ..NetworkRun::default()
            },
            in_flight: 0,
            start,
            last_confirm: start,
            recorder: Recorder::new(schedule),
            n,
            q: types::quorum::client_acks(n),
            reasons: Vec::new(),
            errors: HashMap::new(),
            first_block,
            answers_due: 0,
        }
    }

    /// Subscribes to txs `range` and hands them to every router's link, never
    /// waiting: this loop alone reads the links' answers, so waiting on a link that
    /// waits on them would stop the run for good. The caller checks that the status
    /// watcher's queue and the links have room (`Links::can_subscribe`, `Links::room`);
    /// a link still without room is one left full for `STUCK_AFTER`: it takes what fits,
    /// and the rest is answered at once as failed for it with the reason `backlog` (the
    /// txs still reach a quorum through the others).
    pub(super) fn send(&mut self, links: &Links, range: Range<usize>, now: Instant) -> crate::Result<()> {
        links.ids.try_send(range.clone()).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => failed("the status watcher's queue was full"),
            mpsc::error::TrySendError::Closed(_) => stopped("the status watcher"),
        })?;
        let len = range.len();
        self.out.sent = self.out.sent.saturating_add(len as u64);
        self.answers_due = self
            .answers_due
            .saturating_add(len.saturating_mul(links.routers.len()));
        self.recorder
            .on_sent(now.saturating_duration_since(self.start), len as u64);
        for s in &mut self.state[range.clone()] {
            s.sent_at = Some(now);
        }
        for (router, link) in links.routers.iter().enumerate() {
            let taken = link.offer(range.clone()).map_err(|()| stopped("a router link"))?;
            if taken < len {
                let answers = (range.start + taken..range.end)
                    .map(|tx| (tx, Answer::Failed(Reason::Backlog)))
                    .collect();
                self.on_acks(&Acks { router, answers });
            }
        }
        Ok(())
    }

    /// Whether the run is over: nothing left to send, every tx confirmed (or refused)
    /// and every router's answer in (so that each tx is counted by all of them), or the
    /// drain time passed since the last send; or stalled — every in-flight slot held by
    /// txs that are not confirmed, and nothing confirmed or sent for the drain time
    /// (they will not be: stop rather than wait forever).
    pub(super) fn over(
        &mut self,
        done_sending: bool,
        now: Instant,
        last_send: Instant,
        drain: Duration,
        bound: usize,
    ) -> bool {
        let settled = self.in_flight == 0 && self.answers_due == 0;
        if done_sending && (settled || now.duration_since(last_send) >= drain) {
            return true;
        }
        self.out.stalled =
            self.in_flight >= bound && now.duration_since(self.last_confirm.max(last_send)) >= drain;
        self.out.stalled
    }

    /// Counts one router's answers.
    pub(super) fn on_acks(&mut self, acks: &Acks) {
        let elapsed = self.start.elapsed();
        for &(tx, answer) in &acks.answers {
            self.on_ack(acks.router, tx, answer, elapsed);
        }
    }

    /// Counts router `router`'s answer to tx `tx`, `elapsed` into the run.
    fn on_ack(&mut self, router: usize, tx: usize, answer: Answer, elapsed: Duration) {
        let Some(s) = self.state.get_mut(tx) else {
            return;
        };
        self.answers_due = self.answers_due.saturating_sub(1);
        let reason = answer.reason();
        if let Some(r) = reason {
            *self.errors.entry((router, r)).or_default() += 1;
        }
        match on_ack(s, answer, self.n, self.q) {
            AckEffect::Admitted => {
                self.out.submitted += 1;
                self.recorder.on_acked(elapsed, 1);
            }
            AckEffect::Refused => {
                let reason = reason.unwrap_or(Reason::Backlog);
                let index = match self.reasons.iter().position(|r| *r == reason) {
                    Some(i) => i,
                    None => {
                        self.reasons.push(reason);
                        self.reasons.len() - 1
                    }
                };
                s.refused = Some(u16::try_from(index).unwrap_or(u16::MAX));
                // Its slot is free: no quorum will take it (a status still counts if
                // it arrives: a minority of routers may have forwarded it). Unless a
                // batcher said it holds the request: then a status comes (this run's,
                // or an earlier run's at once), and the run waits for it.
                if !s.counted && s.duplicate == 0 {
                    s.counted = true;
                    self.in_flight = self.in_flight.saturating_sub(1);
                }
            }
            AckEffect::None => {}
        }
    }

    /// Counts the statuses of one watcher message, decided by now.
    pub(super) fn on_statuses(&mut self, decided: Vec<Decided>) {
        let now = Instant::now();
        for d in decided {
            self.on_status_at(d.index, d, now);
        }
    }

    /// Counts tx `i`'s status, decided by now.
    #[cfg(test)]
    fn on_status(&mut self, i: usize, decided: Decided) {
        self.on_status_at(i, decided, Instant::now());
    }

    fn on_status_at(&mut self, i: usize, decided: Decided, now: Instant) {
        if self.out.outcome.get(i).is_none_or(Option::is_some) {
            return;
        }
        let status = decided.status;
        if decided.block < self.first_block {
            // An earlier run's: not this run's confirmation, but nothing more will come.
            if self.out.before.is_empty() {
                self.out.before = vec![None; self.out.outcome.len()];
            }
            if self.out.before[i].replace(status).is_none() {
                self.out.decided_before_run += 1;
            }
            let s = &mut self.state[i];
            if !s.counted {
                s.counted = true;
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            return;
        }
        let s = &mut self.state[i];
        if let Some(at) = s.sent_at {
            let us = u64::try_from(now.duration_since(at).as_micros()).unwrap_or(u64::MAX);
            self.out.latency_us.record(us, 1);
            let since = |t: Instant| t.saturating_duration_since(self.start);
            self.recorder.on_final(since(now), since(at), &status, 1);
        }
        if !s.counted {
            s.counted = true;
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        match self.out.statuses.get_mut(&*status) {
            Some(n) => *n += 1,
            None => {
                self.out.statuses.insert(status.to_string(), 1);
            }
        }
        self.out.outcome[i] = Some(status);
        self.out.confirmed += 1;
        self.last_confirm = now;
    }

    /// The final counts of the sent txs: submitted when a quorum admitted the tx (its
    /// duplicates count only when it was decided in this run: the batchers held it from
    /// this run's send), refused with its reason when no quorum could.
    pub(super) fn finish(&mut self) {
        let sent = usize::try_from(self.out.sent)
            .unwrap_or(usize::MAX)
            .min(self.state.len());
        let (mut submitted, mut refused, mut lost) = (0u64, 0u64, 0u64);
        let mut reasons = BTreeMap::new();
        for (i, s) in self.state[..sent].iter().enumerate() {
            let this_run = self.out.outcome[i].is_some();
            let held = usize::from(s.ok) + if this_run { usize::from(s.duplicate) } else { 0 };
            if held >= self.q {
                submitted += 1;
                let before = self.out.before.get(i).is_some_and(Option::is_some);
                if !this_run && !before {
                    lost += 1;
                }
            } else if let Some(r) = s.refused {
                refused += 1;
                let reason = self
                    .reasons
                    .get(usize::from(r))
                    .map_or_else(String::new, |r| r.name());
                *reasons.entry(reason).or_default() += 1;
            }
        }
        self.out.submitted = submitted;
        self.out.refused = refused;
        self.out.admitted_never_confirmed = lost;
        self.out.refused_reasons = reasons;
        self.out.router_errors = self
            .errors
            .iter()
            .map(|((router, r), n)| (format!("router {}: {}", router + 1, r.name()), *n))
            .collect();
    }
}

/// What one router's answer did to its tx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckEffect {
    /// The tx reached a quorum of admissions.
    Admitted,
    /// No quorum of admissions is possible any more: the tx is refused (until the end of
    /// the run shows its duplicates were this run's).
    Refused,
    /// Neither yet.
    None,
}

/// Counts one router's answer for a tx that `n` routers answer and `q` must admit.
fn on_ack(s: &mut TxState, answer: Answer, n: usize, q: usize) -> AckEffect {
    match answer {
        Answer::Admitted => {
            s.ok = s.ok.saturating_add(1);
            if usize::from(s.ok) == q {
                return AckEffect::Admitted;
            }
        }
        Answer::Duplicate | Answer::Failed(_) => {
            if answer == Answer::Duplicate {
                s.duplicate = s.duplicate.saturating_add(1);
            } else {
                s.failed = s.failed.saturating_add(1);
            }
            let not_admitted = usize::from(s.failed) + usize::from(s.duplicate);
            if not_admitted == n - q + 1 && usize::from(s.ok) < q {
                return AckEffect::Refused;
            }
        }
    }
    AckEffect::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_ends_after_its_drain_or_when_stalled_at_its_bound() {
        let start = Instant::now();
        let secs = Duration::from_secs;
        let mut t = tally(0, start);
        t.in_flight = 10;
        let drain = secs(60);
        // Still sending, below the bound: never over, however long it is quiet.
        assert!(!t.over(false, start + secs(600), start, drain, 20));
        // Done sending: over once the drain passed since the last send.
        assert!(!t.over(true, start + secs(59), start, drain, 20));
        assert!(t.over(true, start + secs(60), start, drain, 20));
        assert!(!t.out.stalled);
        // At the bound with nothing confirmed or sent for the drain: stalled.
        assert!(!t.over(false, start + secs(30), start, drain, 10));
        t.last_confirm = start + secs(20);
        assert!(
            !t.over(false, start + secs(70), start, drain, 10),
            "a confirmation at 20 s"
        );
        assert!(t.over(false, start + secs(80), start, drain, 10));
        assert!(t.out.stalled);
        // Done sending, every tx settled, but a router's answer still due: not yet over.
        t.in_flight = 0;
        t.answers_due = 1;
        assert!(!t.over(true, start + secs(1), start, drain, 10));
        t.answers_due = 0;
        assert!(t.over(true, start + secs(1), start, drain, 10));
    }

    /// A tally of `txs` sent txs to 4 routers (a quorum of 3), statuses in blocks from 10
    /// on decided in the run.
    fn tally(txs: usize, start: Instant) -> Tally {
        let mut t = Tally::new(txs, start, &Schedule::Unpaced, 4, 10);
        t.out.sent = txs as u64;
        t.in_flight = txs;
        t
    }

    fn ack(tx: usize, router: usize, answer: Answer) -> Acks {
        Acks {
            router,
            answers: vec![(tx, answer)],
        }
    }

    fn decided(id: &str, status: &str, block: u64) -> Decided {
        Decided {
            index: usize::from(id == "b"),
            status: status.into(),
            block,
        }
    }

    #[test]
    fn a_tx_is_submitted_at_a_quorum_and_refused_when_none_is_possible() {
        let mut t = tally(2, Instant::now());
        let unavailable = Answer::Failed(Reason::Code(tonic::Code::Unavailable as i32));
        for r in 0..3 {
            t.on_acks(&ack(0, r, Answer::Admitted));
        }
        t.on_acks(&ack(0, 3, unavailable));
        assert_eq!((t.out.submitted, t.in_flight), (1, 2));
        t.on_acks(&ack(1, 0, Answer::Admitted));
        t.on_acks(&ack(1, 1, unavailable));
        assert_eq!(t.in_flight, 2, "one refusal leaves a quorum possible");
        t.on_acks(&ack(1, 2, unavailable));
        assert_eq!(t.in_flight, 1, "the refused tx gave back its slot");
        t.finish();
        assert_eq!((t.out.submitted, t.out.refused), (1, 1));
        assert_eq!(
            t.out.refused_reasons,
            BTreeMap::from([("Unavailable".to_string(), 1)])
        );
        assert_eq!(t.out.router_errors.values().sum::<u64>(), 3);
    }

    #[test]
    fn a_rerun_is_refused_as_duplicates_and_its_earlier_statuses_are_not_its_commits() {
        // Every router answers ALREADY_EXISTS; the committer's statuses are from blocks
        // before the run (the first run's).
        let mut t = tally(2, Instant::now());
        for tx in 0..2 {
            for r in 0..4 {
                t.on_acks(&ack(tx, r, Answer::Duplicate));
            }
        }
        assert_eq!(t.in_flight, 2, "a held request's status is awaited");
        t.on_status(0, decided("a", "COMMITTED", 3));
        t.on_status(1, decided("b", "COMMITTED", 9));
        assert_eq!(t.in_flight, 0);
        t.finish();
        let out = &t.out;
        assert_eq!((out.submitted, out.refused, out.confirmed), (0, 2, 0));
        assert!(out.statuses.is_empty(), "{:?}", out.statuses);
        assert_eq!(out.decided_before_run, 2);
        assert_eq!(out.never_confirmed(), 0);
        assert_eq!(out.status_of(1), Some(("COMMITTED", false)));
        assert_eq!(out.refused_reasons, BTreeMap::from([(DUPLICATE.to_string(), 2)]));
        assert_eq!(
            out.router_errors,
            (1..=4)
                .map(|r| (format!("router {r}: AlreadyExists"), 2))
                .collect::<BTreeMap<_, _>>()
        );
    }

    #[test]
    fn duplicates_of_a_tx_decided_in_the_run_count_towards_its_quorum() {
        // Two routers' batchers had the request from another party's batch already.
        let mut t = tally(2, Instant::now());
        for (r, a) in [
            Answer::Admitted,
            Answer::Duplicate,
            Answer::Duplicate,
            Answer::Admitted,
        ]
        .iter()
        .enumerate()
        {
            t.on_acks(&ack(0, r, *a));
            t.on_acks(&ack(1, r, *a));
        }
        t.on_status(0, decided("a", "COMMITTED", 10));
        t.finish();
        assert_eq!((t.out.submitted, t.out.refused, t.out.confirmed), (1, 1, 1));
        assert_eq!(t.out.statuses, BTreeMap::from([("COMMITTED".to_string(), 1)]));
        assert_eq!(t.out.status_of(0), Some(("COMMITTED", true)));
        assert_eq!(t.out.never_confirmed(), 1);
    }

    #[test]
    fn a_router_answer_is_read_from_its_code() {
        assert_eq!(Answer::of_code(0), Answer::Admitted);
        assert_eq!(
            Answer::of_code(tonic::Code::AlreadyExists as u32),
            Answer::Duplicate
        );
        assert_eq!(
            Answer::of_code(tonic::Code::ResourceExhausted as u32),
            Answer::Failed(Reason::Code(tonic::Code::ResourceExhausted as i32))
        );
    }
}
