//! What a run did second by second, and step by step (docs/loadgen.md "Reports" and
//! "Rate steps"). Pure: times arrive as offsets from the start of the run, nothing here
//! reads a clock.
//!
//! - [`Schedule`] says when tx `i` is due: as fast as the target takes it, at one fixed
//!   rate, or in rate steps of equal length (open loop).
//! - [`Recorder`] counts, per wall-clock second of the run, the txs sent, acknowledged
//!   and confirmed (committed, ordered, aborted by reason) and the latency percentiles of
//!   the txs confirmed in that second; with rate steps it also aggregates each step.
//!   Memory is one row of counters per second (capped at [`MAX_SECONDS`]) plus the
//!   latency histograms of the last two seconds and one histogram per step.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Histogram;

/// Rows a series holds at most (a week); later events count in the last row.
pub const MAX_SECONDS: u64 = 7 * 24 * 3600;

/// Rate steps a schedule may have at most.
pub const MAX_STEPS: usize = 1000;

/// When the txs of a run are due.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// Every tx is due at the start: sent as fast as the target (or its in-flight
    /// bound) takes them.
    Unpaced,
    /// Open loop at one rate, txs per second.
    Fixed {
        /// Txs per second.
        rate: f64,
    },
    /// Open loop in consecutive steps of `step` each, step `k` at `rates[k]` txs per
    /// second; the schedule ends after the last step.
    Steps {
        /// Txs per second of each step.
        rates: Vec<f64>,
        /// How long each step lasts.
        step: Duration,
    },
}

impl Schedule {
    /// Rate steps of `step_seconds` each; refused unless every rate and the step length
    /// are positive and finite, and each step sends at least one tx.
    pub fn steps(rates: &[f64], step_seconds: f64) -> crate::Result<Schedule> {
        let invalid = |flag, detail: String| crate::Error::InvalidParam { flag, detail };
        if rates.is_empty() || rates.len() > MAX_STEPS {
            return Err(invalid("rates", format!("give 1 to {MAX_STEPS} rates")));
        }
        if !(step_seconds.is_finite() && step_seconds > 0.0 && step_seconds <= MAX_SECONDS as f64) {
            return Err(invalid(
                "step-seconds",
                format!("{step_seconds} is not a positive number of seconds"),
            ));
        }
        for r in rates {
            if !(r.is_finite() && *r > 0.0) {
                return Err(invalid("rates", format!("{r} is not a positive rate")));
            }
            if (r * step_seconds).round() < 1.0 {
                return Err(invalid(
                    "rates",
                    format!("{r} tx/s for {step_seconds} s sends no tx"),
                ));
            }
        }
        Ok(Schedule::Steps {
            rates: rates.to_vec(),
            step: Duration::from_secs_f64(step_seconds),
        })
    }

    /// Txs step `k` sends (its rate × its length, rounded).
    fn step_txs(rate: f64, step: Duration) -> u64 {
        (rate * step.as_secs_f64()).round() as u64
    }

    /// Txs the whole schedule sends; `None` when it has no end of its own.
    pub fn total(&self) -> Option<u64> {
        match self {
            Schedule::Steps { rates, step } => {
                Some(rates.iter().map(|r| Schedule::step_txs(*r, *step)).sum())
            }
            _ => None,
        }
    }

    /// When tx `i` (from 0) is due, from the start of the run; `None` after the last step.
    pub fn due(&self, i: u64) -> Option<Duration> {
        match self {
            Schedule::Unpaced => Some(Duration::ZERO),
            Schedule::Fixed { rate } => Some(Duration::from_secs_f64(i as f64 / rate)),
            Schedule::Steps { rates, step } => {
                let mut first = 0u64;
                for (k, r) in rates.iter().enumerate() {
                    let n = Schedule::step_txs(*r, *step);
                    if i < first + n {
                        let into = (i - first) as f64 / r;
                        return Some(step.mul_f64(k as f64) + Duration::from_secs_f64(into));
                    }
                    first += n;
                }
                None
            }
        }
    }

    /// When the schedule's last step ends, from the start of the run; `None` when it has
    /// no end of its own. Txs not sent by then (the target held them back) are not sent.
    pub fn end(&self) -> Option<Duration> {
        match self {
            Schedule::Steps { rates, step } => {
                Some(step.saturating_mul(u32::try_from(rates.len()).unwrap_or(u32::MAX)))
            }
            _ => None,
        }
    }

    /// The rate steps (empty unless [`Schedule::Steps`]).
    pub fn rates(&self) -> &[f64] {
        match self {
            Schedule::Steps { rates, .. } => rates,
            _ => &[],
        }
    }

    /// The step the instant `at` falls in, if any.
    fn step_of(&self, at: Duration) -> Option<usize> {
        let Schedule::Steps { rates, step } = self else {
            return None;
        };
        let k = (at.as_secs_f64() / step.as_secs_f64()).floor();
        (k >= 0.0 && (k as usize) < rates.len()).then_some(k as usize)
    }
}

/// One second of a run: what happened between `second` and `second + 1` seconds after
/// the start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SecondRow {
    /// Seconds since the start of the run.
    pub second: u64,
    /// Txs sent (due, for a paced committer run; served, for the mock orderer).
    pub sent: u64,
    /// Txs the target acknowledged (a quorum of routers; pulled by the committer
    /// pipeline; served by the mock orderer).
    pub acked: u64,
    /// Txs with a final status.
    pub confirmed: u64,
    /// Of those, `COMMITTED`.
    pub committed: u64,
    /// Of those, `ORDERED` (a network without a committer).
    pub ordered: u64,
    /// Of those, any other status, by status name.
    pub aborted: BTreeMap<String, u64>,
    /// Median latency of the txs confirmed in this second, ms (none confirmed: `None`).
    pub p50_ms: Option<f64>,
    /// 90th percentile of the same.
    pub p90_ms: Option<f64>,
    /// 99th percentile of the same.
    pub p99_ms: Option<f64>,
}

/// One rate step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    /// Step number, from 0.
    pub step: usize,
    /// Offered rate, txs per second.
    pub rate: f64,
    /// Length of the step, seconds.
    pub seconds: f64,
    /// Txs sent during the step.
    pub sent: u64,
    /// Final statuses received during the step.
    pub confirmed: u64,
    /// Of those, `COMMITTED`.
    pub committed: u64,
    /// `confirmed / seconds`.
    pub tps: f64,
    /// `committed / seconds`.
    pub goodput_tps: f64,
    /// Median latency of the txs sent during the step (whenever confirmed), ms.
    pub p50_ms: Option<f64>,
    /// 90th percentile of the same.
    pub p90_ms: Option<f64>,
    /// 99th percentile of the same.
    pub p99_ms: Option<f64>,
}

/// The per-second rows and the rate steps of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// One row per second, from second 0 to the end of the run, without gaps.
    pub seconds: Vec<SecondRow>,
    /// One row per rate step (empty without rate steps).
    pub steps: Vec<StepRow>,
}

/// Latency quantiles in ms, rounded to 0.1 ms.
fn quantiles_ms(h: &Histogram) -> [Option<f64>; 3] {
    [0.5, 0.9, 0.99].map(|q| h.quantile(q).map(|us| (us as f64 / 100.0).round() / 10.0))
}

#[derive(Debug, Clone)]
struct StepAcc {
    sent: u64,
    confirmed: u64,
    committed: u64,
    latency_us: Histogram,
}

/// Aggregates the events of a run into a [`Series`].
#[derive(Debug, Clone)]
pub struct Recorder {
    schedule: Schedule,
    rows: Vec<SecondRow>,
    /// Latency histograms of the newest seconds (at most two), oldest first.
    open: VecDeque<(u64, Histogram)>,
    steps: Vec<StepAcc>,
    late: u64,
}

fn second_of(at: Duration) -> u64 {
    at.as_secs().min(MAX_SECONDS - 1)
}

impl Recorder {
    /// An empty recorder for a run paced by `schedule` (its steps, if any, are
    /// aggregated).
    pub fn new(schedule: &Schedule) -> Recorder {
        let steps = schedule
            .rates()
            .iter()
            .map(|_| StepAcc {
                sent: 0,
                confirmed: 0,
                committed: 0,
                latency_us: Histogram::new(),
            })
            .collect();
        Recorder {
            schedule: schedule.clone(),
            rows: Vec::new(),
            open: VecDeque::new(),
            steps,
            late: 0,
        }
    }

    fn row(&mut self, second: u64) -> &mut SecondRow {
        let i = second as usize;
        while self.rows.len() <= i {
            let second = self.rows.len() as u64;
            self.rows.push(SecondRow {
                second,
                ..SecondRow::default()
            });
        }
        &mut self.rows[i]
    }

    /// `n` txs sent at `at`.
    pub fn on_sent(&mut self, at: Duration, n: u64) {
        self.row(second_of(at)).sent += n;
        if let Some(k) = self.schedule.step_of(at) {
            self.steps[k].sent += n;
        }
    }

    /// `n` txs acknowledged by the target at `at`.
    pub fn on_acked(&mut self, at: Duration, n: u64) {
        self.row(second_of(at)).acked += n;
    }

    /// `n` txs sent at `sent_at` got their final status `status` (a status name:
    /// `COMMITTED`, `ORDERED` or an abort reason) at `at`. Events should come roughly in
    /// time order: the latency of a tx confirmed more than a second before the newest
    /// confirmation is not in its second's percentiles (it still counts everywhere else).
    pub fn on_final(&mut self, at: Duration, sent_at: Duration, status: &str, n: u64) {
        if n == 0 {
            return;
        }
        let s = second_of(at);
        let row = self.row(s);
        row.confirmed += n;
        match status {
            "COMMITTED" => row.committed += n,
            "ORDERED" => row.ordered += n,
            other => *row.aborted.entry(other.to_string()).or_default() += n,
        }
        let latency_us = u64::try_from(at.saturating_sub(sent_at).as_micros()).unwrap_or(u64::MAX);
        if let Some(h) = self.histogram(s) {
            h.record(latency_us, n);
        }
        if let Some(k) = self.schedule.step_of(at) {
            self.steps[k].confirmed += n;
            if status == "COMMITTED" {
                self.steps[k].committed += n;
            }
        }
        if let Some(k) = self.schedule.step_of(sent_at) {
            self.steps[k].latency_us.record(latency_us, n);
        }
    }

    /// The open histogram of second `s`, closing the seconds that fall out of the window;
    /// `None` (and one more late tx) when `s` is closed already.
    fn histogram(&mut self, s: u64) -> Option<&mut Histogram> {
        let newest = self.open.back().map(|(t, _)| *t);
        if newest.is_none_or(|n| s > n) {
            while self.open.front().is_some_and(|(t, _)| *t + 1 < s) {
                self.close_oldest();
            }
            self.open.push_back((s, Histogram::new()));
        }
        match self.open.iter_mut().find(|(t, _)| *t == s) {
            Some((_, h)) => Some(h),
            None => {
                self.late += 1;
                None
            }
        }
    }

    fn close_oldest(&mut self) {
        if let Some((s, h)) = self.open.pop_front() {
            let [p50, p90, p99] = quantiles_ms(&h);
            let row = self.row(s);
            (row.p50_ms, row.p90_ms, row.p99_ms) = (p50, p90, p99);
        }
    }

    /// Final events whose latency came too late for their second's percentiles.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// The series of a run that ended `end` after its start: a row for every second up
    /// to the end (at least one), and one row per rate step.
    pub fn finish(mut self, end: Duration) -> Series {
        while !self.open.is_empty() {
            self.close_oldest();
        }
        let last = (end.as_secs_f64().ceil() as u64).clamp(1, MAX_SECONDS);
        self.row(last - 1);
        let (rates, step) = match &self.schedule {
            Schedule::Steps { rates, step } => (rates.clone(), step.as_secs_f64()),
            _ => (Vec::new(), 0.0),
        };
        let steps = self
            .steps
            .iter()
            .zip(rates)
            .enumerate()
            .map(|(k, (a, rate))| {
                let [p50, p90, p99] = quantiles_ms(&a.latency_us);
                StepRow {
                    step: k,
                    rate,
                    seconds: step,
                    sent: a.sent,
                    confirmed: a.confirmed,
                    committed: a.committed,
                    tps: a.confirmed as f64 / step,
                    goodput_tps: a.committed as f64 / step,
                    p50_ms: p50,
                    p90_ms: p90,
                    p99_ms: p99,
                }
            })
            .collect();
        Series {
            seconds: self.rows,
            steps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn schedules_say_when_each_tx_is_due() {
        assert_eq!(Schedule::Unpaced.due(1000), Some(Duration::ZERO));
        assert_eq!(Schedule::Unpaced.total(), None);
        assert_eq!(Schedule::Fixed { rate: 100.0 }.due(50), Some(ms(500)));
        let s = Schedule::steps(&[10.0, 20.0], 2.0).unwrap();
        assert_eq!(s.total(), Some(60));
        // Step 0: 20 txs, 100 ms apart; step 1 from 2 s: 40 txs, 50 ms apart.
        assert_eq!(s.due(0), Some(ms(0)));
        assert_eq!(s.due(19), Some(ms(1900)));
        assert_eq!(s.due(20), Some(ms(2000)));
        assert_eq!(s.due(21), Some(ms(2050)));
        assert_eq!(s.due(59), Some(ms(3950)));
        assert_eq!(s.due(60), None);
        assert_eq!(s.step_of(ms(1999)), Some(0));
        assert_eq!(s.step_of(ms(2000)), Some(1));
        assert_eq!(s.step_of(ms(4000)), None);
        assert_eq!(s.end(), Some(ms(4000)));
        assert_eq!(Schedule::Fixed { rate: 1.0 }.end(), None);
    }

    #[test]
    fn senseless_steps_are_refused() {
        let cases: &[(&[f64], f64, &str)] = &[
            (&[], 10.0, "rates"),
            (&[100.0, 0.0], 10.0, "rates"),
            (&[100.0, f64::NAN], 10.0, "rates"),
            (&[-5.0], 10.0, "rates"),
            (&[0.01], 10.0, "sends no tx"),
            (&[100.0], 0.0, "step-seconds"),
            (&[100.0], f64::INFINITY, "step-seconds"),
        ];
        for (rates, secs, needle) in cases {
            let err = Schedule::steps(rates, *secs).unwrap_err().to_string();
            assert!(err.contains(needle), "{rates:?} {secs}: {err}");
        }
    }

    #[test]
    fn rows_count_each_second_and_fill_gaps() {
        let mut r = Recorder::new(&Schedule::Unpaced);
        r.on_sent(ms(100), 3);
        r.on_acked(ms(200), 3);
        r.on_final(ms(900), ms(100), "COMMITTED", 2);
        r.on_final(ms(2500), ms(100), "ABORTED_MVCC_CONFLICT", 1);
        let s = r.finish(ms(3200));
        assert_eq!(s.seconds.len(), 4, "seconds 0..=3");
        assert_eq!(
            s.seconds.iter().map(|r| r.second).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        let r0 = &s.seconds[0];
        assert_eq!((r0.sent, r0.acked, r0.confirmed, r0.committed), (3, 3, 2, 2));
        assert_eq!(r0.p50_ms, Some(800.0));
        assert_eq!(
            s.seconds[1],
            SecondRow {
                second: 1,
                ..SecondRow::default()
            }
        );
        let r2 = &s.seconds[2];
        assert_eq!(r2.confirmed, 1);
        assert_eq!(
            r2.aborted,
            BTreeMap::from([("ABORTED_MVCC_CONFLICT".to_string(), 1)])
        );
        assert!(r2.p99_ms.is_some_and(|p| (p - 2400.0).abs() <= 2400.0 / 64.0));
        assert!(s.steps.is_empty());
        let total: u64 = s.seconds.iter().map(|r| r.confirmed).sum();
        assert_eq!(total, 3);
    }

    #[test]
    fn percentiles_are_of_the_txs_confirmed_in_that_second() {
        let mut r = Recorder::new(&Schedule::Unpaced);
        // Second 0: latencies 1..=100 ms; second 5: all 2 ms.
        for i in 0..100u64 {
            r.on_final(ms(400 + i), ms(400 + i) - ms(i + 1), "COMMITTED", 1);
        }
        for i in 0..100u64 {
            r.on_final(ms(5000 + i), ms(4998 + i), "COMMITTED", 1);
        }
        // An event far behind the newest second still counts, without its latency.
        r.on_final(ms(1000), ms(0), "COMMITTED", 1);
        assert_eq!(r.late(), 1);
        let s = r.finish(ms(5100));
        assert_eq!(s.seconds.len(), 6);
        let q = |p: Option<f64>| p.unwrap();
        assert!((q(s.seconds[0].p50_ms) - 50.0).abs() <= 1.0, "{:?}", s.seconds[0]);
        assert!((q(s.seconds[0].p90_ms) - 90.0).abs() <= 1.5, "{:?}", s.seconds[0]);
        assert!((q(s.seconds[0].p99_ms) - 99.0).abs() <= 1.6, "{:?}", s.seconds[0]);
        assert_eq!(s.seconds[1].confirmed, 1);
        assert_eq!(s.seconds[1].p50_ms, None);
        assert_eq!(s.seconds[5].p99_ms, Some(2.0));
        assert_eq!(s.seconds[3].p50_ms, None);
    }

    #[test]
    fn steps_count_throughput_in_their_window_and_latency_by_send() {
        let sched = Schedule::steps(&[10.0, 20.0], 2.0).unwrap();
        let mut r = Recorder::new(&sched);
        for i in 0..60 {
            let sent = sched.due(i).unwrap();
            r.on_sent(sent, 1);
            // Step 0's txs take 100 ms; step 1's 1 s (some land after the run's steps).
            let lat = if sent < Duration::from_secs(2) {
                ms(100)
            } else {
                ms(1000)
            };
            let status = if i % 10 == 0 {
                "ABORTED_SIGNATURE_INVALID"
            } else {
                "COMMITTED"
            };
            r.on_final(sent + lat, sent, status, 1);
        }
        let s = r.finish(ms(5000));
        assert_eq!(s.steps.len(), 2);
        let (a, b) = (&s.steps[0], &s.steps[1]);
        assert_eq!((a.step, a.rate, a.seconds, a.sent), (0, 10.0, 2.0, 20));
        assert_eq!((b.step, b.rate, b.sent), (1, 20.0, 40));
        // Step 0 window [0, 2 s): its last tx ends at 2.0 s, in step 1's window.
        assert_eq!(a.confirmed, 19);
        assert_eq!(a.tps, 9.5);
        assert_eq!(a.p50_ms, Some(100.0));
        // Step 1 window [2, 4 s): step 0's last tx, and step 1's sent before 3 s.
        assert_eq!(b.confirmed, 1 + 20);
        assert_eq!(b.p99_ms, Some(1000.0));
        // Txs 0 and 10 abort in step 0's window, 20 and 30 in step 1's.
        assert_eq!((a.committed, b.committed), (17, 19));
        assert_eq!(s.seconds.iter().map(|r| r.sent).sum::<u64>(), 60);
        assert_eq!(s.seconds.iter().map(|r| r.confirmed).sum::<u64>(), 60);
    }
}
