//! `fabrx loadgen --target network` (docs/loadgen.md "A network"): a workload's txs sent
//! as envelopes to the routers of every party, each counted submitted once a quorum
//! (2f + 1) of routers acknowledged it, and confirmed by its final status on a
//! committer's notification stream — or, in an ordering-only network, by its tx id in
//! an assembler's Deliver stream.
//!
//! The counts are of what happened in this run. A router's `ALREADY_EXISTS` (its
//! batcher holds the request already) is a refusal with its reason, unless the committer
//! (or the orderer) then decides the tx in this run: another party's batch or forward
//! brought the request to that batcher first. A status counts only when the committer
//! decided it in this run: a status from a block before the run began (the same tx id
//! sent by an earlier run) is counted apart as decided before the run.
//!
//! Open loop at a rate or in rate steps (or as fast as the in-flight bound allows),
//! bounded everywhere:
//! at most `max_in_flight` txs are sent and not yet confirmed (or refused), and every
//! channel is sized by that bound. One persistent stream per router and one
//! notification stream, each reopened after a failure (the txs a failed router stream
//! held count as that router's errors; a reopened notification stream subscribes
//! again to every id still unconfirmed).
//!
//! `links` holds those streams and the probes of where the committer or the ledger
//! stood when the run began, `tally` what the run counts; this module paces the run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prost::Message as _;
use types::{Tx, TxId};
use wire::pb;

use crate::Histogram;
use crate::series::{Schedule, Series};

mod blocks;
mod links;
mod load;
mod many;
mod tally;

pub(crate) use links::{Decided, channel, watch_sidecar};
pub use load::{Load, envelope_tx_id};
use tally::Tally;

/// Where the network listens (`http://host:port` each).
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Every party's router.
    pub routers: Vec<String>,
    /// A committing party's sidecar; none: the network only orders.
    pub sidecar: Option<String>,
    /// An assembler, to confirm ordering when there is no sidecar.
    pub assembler: String,
}

/// How to send.
#[derive(Debug, Clone)]
pub struct Pace {
    /// When each tx is due (open loop at a rate or in rate steps; unpaced: as fast as
    /// `max_in_flight` allows). Sending stops at the end of the schedule's steps.
    pub schedule: Schedule,
    /// Txs sent and not yet confirmed or refused, at most.
    pub max_in_flight: std::num::NonZeroUsize,
    /// Stop sending after this long; none: send every tx.
    pub duration: Option<Duration>,
    /// After the last send, wait this long at most for the outstanding statuses.
    pub drain: Duration,
    /// With a fixed-rate schedule: the rate, changeable while the run goes on (the
    /// loadgen's HTTP port, docs/loadgen.md "Changing the rate while it runs").
    pub control: Option<Arc<RateControl>>,
    /// Due txs wait at most this long for more before they are sent ([`LINGER`] by
    /// default; zero: sent at every wake-up).
    pub linger: Duration,
}

/// The rate of a fixed-rate run, changed from outside while it runs. A change takes
/// effect within 100 ms and starts a fresh schedule from that instant: txs still due at
/// the old rate are not caught up.
#[derive(Debug)]
pub struct RateControl {
    bits: AtomicU64,
    changes: AtomicU64,
}

/// The highest rate [`RateControl::set`] takes, txs per second.
pub const MAX_RATE: f64 = 100_000_000.0;

impl RateControl {
    /// A control starting at `rate` (txs per second).
    pub fn new(rate: f64) -> RateControl {
        RateControl {
            bits: AtomicU64::new(rate.to_bits()),
            changes: AtomicU64::new(0),
        }
    }

    /// The current rate.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }

    /// Changes the rate; refused unless positive, finite and at most [`MAX_RATE`].
    pub fn set(&self, rate: f64) -> Result<(), String> {
        if !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE) {
            return Err(format!("{rate} is not a rate in (0, {MAX_RATE}] txs per second"));
        }
        self.bits.store(rate.to_bits(), Ordering::Relaxed);
        self.changes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Changes made so far.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }
}

/// When each tx is due: the schedule, or with a [`RateControl`] a fixed rate counted
/// from the last change.
struct Pacer<'a> {
    schedule: &'a Schedule,
    start: Instant,
    control: Option<&'a RateControl>,
    /// Since `anchor.0`, tx `anchor.1` onwards at `anchor.2` txs per second.
    anchor: (Instant, usize, f64),
}

impl<'a> Pacer<'a> {
    /// Refused: a control without a fixed-rate schedule.
    fn new(
        schedule: &'a Schedule,
        start: Instant,
        control: Option<&'a RateControl>,
    ) -> crate::Result<Pacer<'a>> {
        if control.is_some() && !matches!(schedule, Schedule::Fixed { .. }) {
            return Err(crate::Error::InvalidParam {
                flag: "rate",
                detail: "the rate can be changed at run time only in a run at a fixed --rate".into(),
            });
        }
        let rate = control.map_or(0.0, RateControl::get);
        Ok(Pacer {
            schedule,
            start,
            control,
            anchor: (start, 0, rate),
        })
    }

    /// Picks up a rate change: from `now`, tx `next` onwards at the new rate.
    fn refresh(&mut self, now: Instant, next: usize) {
        if let Some(c) = self.control {
            let rate = c.get();
            if rate.to_bits() != self.anchor.2.to_bits() {
                self.anchor = (now, next, rate);
            }
        }
    }

    fn due(&self, i: usize) -> Option<Instant> {
        match self.control {
            Some(_) => {
                let (at, first, rate) = self.anchor;
                let secs = i.saturating_sub(first) as f64 / rate;
                Some(at + Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX / 4))
            }
            None => self.schedule.due(i as u64).map(|d| self.start + d),
        }
    }
}

/// What one run saw.
#[derive(Debug, Clone, Default)]
pub struct NetworkRun {
    /// Txs sent to the routers.
    pub sent: u64,
    /// Txs a quorum of routers admitted (an `ALREADY_EXISTS` counts towards it only
    /// for a tx decided in this run).
    pub submitted: u64,
    /// Txs too many routers refused for a quorum.
    pub refused: u64,
    /// Submitted txs (a quorum admitted them) without any final status when the run
    /// ended: acknowledged and not delivered (0 in a correct run that drained).
    pub admitted_never_confirmed: u64,
    /// Refused txs by the reason of the answer that made a quorum impossible (a gRPC
    /// code's name, e.g. `AlreadyExists`, or `unavailable`, `stream failed`).
    pub refused_reasons: BTreeMap<String, u64>,
    /// Final statuses by name (`ORDERED` when only the orderer confirms), decided in
    /// this run.
    pub statuses: BTreeMap<String, u64>,
    /// Txs with a final status decided in this run.
    pub confirmed: u64,
    /// Txs whose only status is one the committer decided before this run began (in a
    /// block below its next block when the run started): an earlier run sent the same
    /// tx id. Neither confirmed nor committed by this run.
    pub decided_before_run: u64,
    /// Refusals and failures by router (its index) and reason: every router's answer
    /// that was not an admission.
    pub router_errors: BTreeMap<String, u64>,
    /// From the first send to the last confirmation (or the end of the drain).
    pub seconds: f64,
    /// Send-to-confirmation latency of confirmed txs, in microseconds.
    pub latency_us: Histogram,
    /// The statuses of the txs by index, decided in this run (`None`: not confirmed by
    /// this run).
    pub outcome: Vec<Option<Arc<str>>>,
    /// The statuses decided before this run, by tx index (empty when there were none).
    pub before: Vec<Option<Arc<str>>>,
    /// Per second and per rate step.
    pub series: Series,
    /// The run ended because nothing moved for the drain time while its in-flight bound
    /// was full (txs sent and never confirmed held every slot).
    pub stalled: bool,
}

impl NetworkRun {
    /// Sent txs without any final status, of this run or before it (txs are sent in
    /// index order).
    pub fn never_confirmed(&self) -> u64 {
        let sent = usize::try_from(self.sent)
            .unwrap_or(usize::MAX)
            .min(self.outcome.len());
        let before = |i: usize| self.before.get(i).is_some_and(Option::is_some);
        (0..sent)
            .filter(|&i| self.outcome[i].is_none() && !before(i))
            .count()
            .try_into()
            .unwrap_or(u64::MAX)
    }

    /// The status of tx `i`: decided in this run, or else before it (`false`).
    pub fn status_of(&self, i: usize) -> Option<(&str, bool)> {
        match self.outcome.get(i).and_then(Option::as_deref) {
            Some(s) => Some((s, true)),
            None => self.before.get(i).and_then(Option::as_deref).map(|s| (s, false)),
        }
    }
}

/// Progress once a second.
#[derive(Debug, Clone, Copy)]
pub struct NetProgress {
    /// Seconds since the first send.
    pub elapsed: f64,
    /// Txs sent.
    pub sent: u64,
    /// Txs a quorum admitted so far.
    pub submitted: u64,
    /// Txs with a final status decided in this run.
    pub confirmed: u64,
}

/// The envelope of tx `id` (unsigned: the routers of a generated network are open).
pub fn envelope(id: &TxId, tx: &Tx) -> Vec<u8> {
    pb::Envelope {
        signature: vec![],
        payload: pb::Tx::from(tx).encode_to_vec(),
        identity: Some(pb::Identity {
            msp_id: "loadgen".into(),
            creator: Some(pb::identity::Creator::CertificateId("loadgen".into())),
        }),
        tx_id: id.0.clone(),
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
    .encode_to_vec()
}

/// Sends `txs` (ids and envelopes) and waits for their statuses.
pub async fn run(
    endpoints: &Endpoints,
    txs: &[(String, Arc<Vec<u8>>)],
    pace: Pace,
    progress: impl FnMut(NetProgress),
) -> crate::Result<NetworkRun> {
    run_load(endpoints, Arc::new(Load::from(txs)), pace, progress).await
}

/// Sends the txs of `load` and waits for their statuses.
pub async fn run_load(
    endpoints: &Endpoints,
    load: Arc<Load>,
    pace: Pace,
    mut progress: impl FnMut(NetProgress),
) -> crate::Result<NetworkRun> {
    let n = endpoints.routers.len();
    let bound = pace.max_in_flight.get();
    let txs = load.len();
    let mut links = links::links(endpoints, &load, bound).await?;
    let start = Instant::now();
    let mut pacer = Pacer::new(&pace.schedule, start, pace.control.as_deref())?;
    let mut t = Tally::new(txs, start, &pace.schedule, n, links.first_block);
    let mut next = 0usize;
    let mut last_send = start;
    let mut last_progress = start;
    loop {
        let now = Instant::now();
        pacer.refresh(now, next);
        let due = |i: usize| pacer.due(i);
        let up = time_is_up(&pace, now.duration_since(start));
        let sending = next < txs && links.can_subscribe() && due(next).is_some() && !up;
        // What is due, as far as the routers' links and the in-flight bound have room;
        // sent once it is a message's worth, or `pace.linger` after the last send.
        let room = if sending { links.room(now) } else { 0 };
        let mut end = next;
        while end - next < room
            && end < txs
            && t.in_flight + (end - next) < bound
            && due(end).is_some_and(|d| d <= now)
        {
            end += 1;
        }
        let count = end - next;
        let flush = count >= LINGER_TXS
            || now >= last_send + pace.linger
            || end >= txs
            || due(end).is_none()
            || t.in_flight + count >= bound;
        let lingering = count > 0 && !flush;
        if count > 0 && flush {
            t.in_flight += count;
            t.send(&links, next..end, now)?;
            next = end;
            last_send = now;
        }
        let done_sending = next >= txs || due(next).is_none() || up;
        if t.over(done_sending, now, last_send, pace.drain, bound) {
            break;
        }
        if now.duration_since(last_progress) >= Duration::from_secs(1) {
            last_progress = now;
            progress(NetProgress {
                elapsed: now.duration_since(start).as_secs_f64(),
                sent: t.out.sent,
                submitted: t.out.submitted,
                confirmed: t.out.confirmed,
            });
        }
        let tick = now + Duration::from_millis(100);
        let wake = if done_sending || t.in_flight >= bound || !links.can_subscribe() {
            tick
        } else if room == 0 {
            // A router's link is full: look again soon.
            now + Duration::from_millis(5)
        } else if lingering {
            last_send + pace.linger
        } else {
            due(next).unwrap_or(tick).max(now).min(tick)
        };
        tokio::select! {
            Some(acks) = links.acks.recv() => t.on_acks(&acks),
            Some(decided) = links.events.recv() => t.on_statuses(decided),
            () = tokio::time::sleep_until(wake.into()) => {}
        }
    }
    links.tasks.abort_all();
    t.finish();
    let end = t.last_confirm.max(last_send).duration_since(start);
    t.out.seconds = end.as_secs_f64();
    t.out.series = t.recorder.finish(end);
    Ok(t.out)
}

/// How long due txs may wait for more before they are sent, unless [`Pace::linger`]
/// says otherwise: at a rate of R tx/s a message to each router carries about
/// R · linger txs (200 at 10,000 tx/s) instead of the handful due at each wake-up.
/// Every message costs each router and its batchers system calls and wake-ups, and
/// the routers forward a message's requests to a shard's batcher as one message, so
/// fewer, larger client messages make every node on the request path cheaper per tx
/// (docs/benchmarks.md "The client's linger"). The wait is the client's: latency is
/// counted from the send, so a tx's latency as its sender sees it is up to this much
/// longer.
pub const LINGER: Duration = Duration::from_millis(20);

/// Due txs are sent at once when there are this many.
pub const LINGER_TXS: usize = 1024;

/// Whether sending is over by `elapsed`: the run's duration or its schedule's end
/// passed.
fn time_is_up(pace: &Pace, elapsed: Duration) -> bool {
    pace.duration.is_some_and(|d| elapsed >= d) || pace.schedule.end().is_some_and(|e| elapsed >= e)
}

/// A failure of the network driver.
pub(crate) fn failed(detail: &str) -> crate::Error {
    crate::Error::InvalidParam {
        flag: "network",
        detail: detail.to_string(),
    }
}

fn stopped(what: &str) -> crate::Error {
    crate::Error::InvalidParam {
        flag: "network",
        detail: format!("{what} stopped"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_change_starts_a_fresh_schedule_from_its_instant() {
        let schedule = Schedule::Fixed { rate: 10.0 };
        let start = Instant::now();
        let ms = Duration::from_millis;
        let plain = Pacer::new(&schedule, start, None).unwrap();
        assert_eq!(plain.due(10), Some(start + ms(1000)));
        let control = RateControl::new(10.0);
        let mut p = Pacer::new(&schedule, start, Some(&control)).unwrap();
        assert!(Pacer::new(&Schedule::Unpaced, start, Some(&control)).is_err());
        assert_eq!(p.due(10), Some(start + ms(1000)));
        p.refresh(start + ms(300), 3);
        assert_eq!(p.due(10), Some(start + ms(1000)), "no change, no new anchor");
        control.set(20.0).unwrap();
        p.refresh(start + ms(500), 5);
        assert_eq!(p.due(5), Some(start + ms(500)));
        assert_eq!(p.due(7), Some(start + ms(600)));
        assert_eq!(control.changes(), 1);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_RATE * 2.0] {
            assert!(control.set(bad).is_err(), "{bad}");
        }
        assert_eq!(control.get(), 20.0);
    }

    #[test]
    fn quorum_is_two_f_plus_one() {
        let quorum = types::quorum::client_acks;
        assert_eq!(quorum(0), 1);
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(3), 1);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(7), 5);
        assert_eq!(quorum(10), 7);
    }
}
