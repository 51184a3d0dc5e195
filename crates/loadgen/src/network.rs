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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use types::{Status, Tx, TxId};
use wire::pb;
use wire::pb::router_client::RouterClient;
use wire::pb::sidecar_client::SidecarClient;

use crate::Histogram;
use crate::series::{Recorder, Schedule, Series};

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
    pub outcome: Vec<Option<String>>,
    /// The statuses decided before this run, by tx index (empty when there were none).
    pub before: Vec<Option<String>>,
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

/// One router's answer to one tx.
struct Ack {
    tx: usize,
    router: usize,
    answer: Answer,
}

/// What a router answered to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// Its batcher admitted the request.
    Admitted,
    /// Its batcher held the request already (`ALREADY_EXISTS`): brought by another
    /// party's batch or forward in this run, or sent by an earlier run.
    Duplicate,
    /// Refused or failed, with the reason.
    Failed(String),
}

impl Answer {
    /// The answer a `Submit` response's code gives.
    fn of_code(code: u32) -> Answer {
        match tonic::Code::from_i32(code as i32) {
            tonic::Code::Ok => Answer::Admitted,
            tonic::Code::AlreadyExists => Answer::Duplicate,
            other => Answer::Failed(format!("{other:?}")),
        }
    }

    /// The reason a refusal is counted under.
    fn reason(&self) -> Option<&str> {
        match self {
            Answer::Admitted => None,
            Answer::Duplicate => Some(DUPLICATE),
            Answer::Failed(r) => Some(r),
        }
    }
}

/// The reason of an `ALREADY_EXISTS` answer.
const DUPLICATE: &str = "AlreadyExists";

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

/// The links to the network of one run.
struct Links {
    routers: Vec<mpsc::Sender<(usize, Arc<Vec<u8>>)>>,
    acks: mpsc::Receiver<Ack>,
    ids: mpsc::Sender<Vec<String>>,
    events: mpsc::Receiver<Decided>,
    tasks: tokio::task::JoinSet<()>,
    /// Statuses in blocks below this were decided before the run began.
    first_block: u64,
}

/// A final status the committer (or the orderer) reported for a tx id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decided {
    /// The tx id.
    pub id: String,
    /// The status's name (`ORDERED` from an assembler).
    pub status: String,
    /// The block it was decided in.
    pub block: u64,
}

/// Opens a stream to every router and the status watcher, every channel sized by
/// `bound` txs in flight, after asking where the committer (or the assembler's ledger)
/// stands: statuses in blocks below it are not this run's.
async fn links(endpoints: &Endpoints, bound: usize) -> crate::Result<Links> {
    let n = endpoints.routers.len();
    if n == 0 {
        return Err(crate::Error::InvalidParam {
            flag: "network",
            detail: "the network has no routers".into(),
        });
    }
    let (ack_tx, acks) = mpsc::channel::<Ack>(bound.saturating_mul(n).saturating_add(16));
    let mut routers = Vec::with_capacity(n);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, uri) in endpoints.routers.iter().enumerate() {
        let (tx, rx) = mpsc::channel(bound.saturating_add(16));
        routers.push(tx);
        tasks.spawn(router_link(i, channel(uri)?, rx, ack_tx.clone()));
    }
    let (ids, ids_rx) = mpsc::channel::<Vec<String>>(bound.saturating_add(16));
    let (ev_tx, events) = mpsc::channel::<Decided>(bound.saturating_add(16));
    let first_block = match &endpoints.sidecar {
        Some(uri) => {
            let channel = channel(uri)?;
            let first = committer_next_block(channel.clone()).await?;
            tasks.spawn(watch_sidecar(channel, ids_rx, ev_tx));
            first
        }
        None => {
            let channel = channel(&endpoints.assembler)?;
            let first = ledger_height(channel.clone()).await?;
            tasks.spawn(watch_assembler(channel, first, ids_rx, ev_tx));
            first
        }
    };
    Ok(Links {
        routers,
        acks,
        ids,
        events,
        tasks,
        first_block,
    })
}

/// How long the run waits for the committer or the assembler to say where it stands.
const STANDING_TIMEOUT: Duration = Duration::from_secs(30);

/// The committer's next block (`Sidecar.GetNextBlock`), asked until it answers or
/// [`STANDING_TIMEOUT`] passed.
async fn committer_next_block(channel: tonic::transport::Channel) -> crate::Result<u64> {
    let deadline = Instant::now() + STANDING_TIMEOUT;
    loop {
        let mut client = SidecarClient::new(channel.clone());
        match client.get_next_block(pb::LastCommittedRequest {}).await {
            Ok(r) => return Ok(r.into_inner().number),
            Err(status) if Instant::now() >= deadline => {
                return Err(failed(&format!(
                    "the committer's sidecar did not say its next block: {status}"
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}

/// The number of blocks the assembler at `channel` holds (the first block number it
/// does not hold), found by probing: doubling, then bisecting.
async fn ledger_height(channel: tonic::transport::Channel) -> crate::Result<u64> {
    let deadline = Instant::now() + STANDING_TIMEOUT;
    let has = |n: u64| {
        let channel = channel.clone();
        async move {
            loop {
                if let Some(held) =
                    clients::deliver::has_block(channel.clone(), n, Duration::from_secs(5)).await
                {
                    return Ok(held);
                }
                if Instant::now() >= deadline {
                    return Err(failed("the assembler did not answer whether it holds a block"));
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    if !has(0).await? {
        return Ok(0);
    }
    // Held: lo; not held: hi.
    let (mut lo, mut hi) = (0u64, 1u64);
    while has(hi).await? {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if has(mid).await? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(hi)
}

/// What the run counts as acks and statuses arrive.
struct Tally {
    state: Vec<TxState>,
    out: NetworkRun,
    in_flight: usize,
    start: Instant,
    last_confirm: Instant,
    recorder: Recorder,
    /// Routers, and admissions a tx needs.
    n: usize,
    q: usize,
    /// The reasons of refused txs (`TxState::refused` indexes it).
    reasons: Vec<String>,
    /// Statuses in blocks below this were decided before the run.
    first_block: u64,
    /// Router answers still due for the txs sent (every router answers every tx, if
    /// only with a failure of its link).
    answers_due: usize,
}

impl Tally {
    /// Nothing counted yet of `txs` txs, to be sent to `n` routers from `start`;
    /// statuses in blocks from `first_block` on are this run's.
    fn new(txs: usize, start: Instant, schedule: &Schedule, n: usize, first_block: u64) -> Tally {
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
            first_block,
            answers_due: 0,
        }
    }

    /// Subscribes to txs `range` and sends each to every router.
    async fn send(
        &mut self,
        links: &Links,
        txs: &[(String, Arc<Vec<u8>>)],
        range: std::ops::Range<usize>,
        now: Instant,
    ) -> crate::Result<()> {
        let ids = txs[range.clone()].iter().map(|(id, _)| id.clone()).collect();
        links
            .ids
            .send(ids)
            .await
            .map_err(|_| stopped("the status watcher"))?;
        for (i, (_, env)) in txs.iter().enumerate().take(range.end).skip(range.start) {
            self.state[i].sent_at = Some(now);
            for r in &links.routers {
                r.send((i, env.clone()))
                    .await
                    .map_err(|_| stopped("a router link"))?;
            }
        }
        self.out.sent = self.out.sent.saturating_add(range.len() as u64);
        self.answers_due = self
            .answers_due
            .saturating_add(range.len().saturating_mul(links.routers.len()));
        self.recorder
            .on_sent(now.saturating_duration_since(self.start), range.len() as u64);
        Ok(())
    }

    /// Whether the run is over: nothing left to send, every tx confirmed (or refused)
    /// and every router's answer in (so that each tx is counted by all of them), or the
    /// drain time passed since the last send; or stalled — every in-flight slot held by
    /// txs that are not confirmed, and nothing confirmed or sent for the drain time
    /// (they will not be: stop rather than wait forever).
    fn over(
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

    fn on_ack(&mut self, ack: &Ack) {
        self.answers_due = self.answers_due.saturating_sub(1);
        let s = &mut self.state[ack.tx];
        let reason = ack.answer.reason().map(|r| {
            *self
                .out
                .router_errors
                .entry(format!("router {}: {r}", ack.router + 1))
                .or_default() += 1;
            r.to_owned()
        });
        match on_ack(s, &ack.answer, self.n, self.q) {
            AckEffect::Admitted => {
                self.out.submitted += 1;
                self.recorder.on_acked(self.start.elapsed(), 1);
            }
            AckEffect::Refused => {
                let reason = reason.unwrap_or_default();
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

    fn on_status(&mut self, i: usize, decided: Decided) {
        if self.out.outcome[i].is_some() {
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
        let now = Instant::now();
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
        *self.out.statuses.entry(status.clone()).or_default() += 1;
        self.out.outcome[i] = Some(status);
        self.out.confirmed += 1;
        self.last_confirm = now;
    }

    /// The final counts of the sent txs: submitted when a quorum admitted the tx (its
    /// duplicates count only when it was decided in this run: the batchers held it from
    /// this run's send), refused with its reason when no quorum could.
    fn finish(&mut self) {
        let sent = usize::try_from(self.out.sent)
            .unwrap_or(usize::MAX)
            .min(self.state.len());
        let (mut submitted, mut refused) = (0u64, 0u64);
        let mut reasons = BTreeMap::new();
        for (i, s) in self.state[..sent].iter().enumerate() {
            let this_run = self.out.outcome[i].is_some();
            let held = usize::from(s.ok) + if this_run { usize::from(s.duplicate) } else { 0 };
            if held >= self.q {
                submitted += 1;
            } else if let Some(r) = s.refused {
                refused += 1;
                let reason = self.reasons.get(usize::from(r)).cloned().unwrap_or_default();
                *reasons.entry(reason).or_default() += 1;
            }
        }
        self.out.submitted = submitted;
        self.out.refused = refused;
        self.out.refused_reasons = reasons;
    }
}

/// Sends `txs` (ids and envelopes) and waits for their statuses.
pub async fn run(
    endpoints: &Endpoints,
    txs: &[(String, Arc<Vec<u8>>)],
    pace: Pace,
    mut progress: impl FnMut(NetProgress),
) -> crate::Result<NetworkRun> {
    let n = endpoints.routers.len();
    let bound = pace.max_in_flight.get();
    let mut links = links(endpoints, bound).await?;
    let index: HashMap<&str, usize> = txs
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.as_str(), i))
        .collect();
    let start = Instant::now();
    let mut pacer = Pacer::new(&pace.schedule, start, pace.control.as_deref())?;
    let mut t = Tally::new(txs.len(), start, &pace.schedule, n, links.first_block);
    let mut next = 0usize;
    let mut last_send = start;
    let mut last_progress = start;
    loop {
        let now = Instant::now();
        pacer.refresh(now, next);
        let due = |i: usize| pacer.due(i);
        let sending = next < txs.len()
            && due(next).is_some()
            && pace.duration.is_none_or(|d| now.duration_since(start) < d)
            && pace.schedule.end().is_none_or(|e| now.duration_since(start) < e);
        // Send what is due.
        let first = next;
        while sending && next < txs.len() && t.in_flight < bound && due(next).is_some_and(|d| d <= now) {
            next += 1;
            t.in_flight += 1;
        }
        if next > first {
            t.send(&links, txs, first..next, now).await?;
            last_send = now;
        }
        let done_sending = !sending || next >= txs.len() || due(next).is_none();
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
        let wake = if done_sending || t.in_flight >= bound {
            tick
        } else {
            due(next).unwrap_or(tick).max(now).min(tick)
        };
        tokio::select! {
            Some(ack) = links.acks.recv() => t.on_ack(&ack),
            Some(decided) = links.events.recv() => {
                if let Some(&i) = index.get(decided.id.as_str()) {
                    t.on_status(i, decided);
                }
            }
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
fn on_ack(s: &mut TxState, answer: &Answer, n: usize, q: usize) -> AckEffect {
    match answer {
        Answer::Admitted => {
            s.ok = s.ok.saturating_add(1);
            if usize::from(s.ok) == q {
                return AckEffect::Admitted;
            }
        }
        Answer::Duplicate | Answer::Failed(_) => {
            if *answer == Answer::Duplicate {
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

pub(crate) fn channel(uri: &str) -> crate::Result<tonic::transport::Channel> {
    clients::channel::lazy(uri, clients::channel::DEFAULT_CONNECT_TIMEOUT).map_err(|e| {
        crate::Error::InvalidParam {
            flag: "network",
            detail: e.to_string(),
        }
    })
}

/// One router's persistent Submit stream, reopened after a failure. Requests are
/// matched to answers by id (the tx index).
async fn router_link(
    router: usize,
    channel: tonic::transport::Channel,
    mut rx: mpsc::Receiver<(usize, Arc<Vec<u8>>)>,
    acks: mpsc::Sender<Ack>,
) {
    let fail = |tx: usize, reason: &str| Ack {
        tx,
        router,
        answer: Answer::Failed(reason.to_string()),
    };
    let mut outgoing: Option<(usize, Arc<Vec<u8>>)> = None;
    loop {
        let (req_tx, req_rx) = mpsc::channel::<pb::SubmitRequest>(256);
        let mut client = RouterClient::new(channel.clone());
        let opened =
            tokio::time::timeout(Duration::from_secs(5), client.submit(ReceiverStream::new(req_rx))).await;
        let mut responses = match opened {
            Ok(Ok(r)) => r.into_inner(),
            _ => {
                // Down: what arrives meanwhile is answered as failed, for a while.
                let until = tokio::time::Instant::now() + Duration::from_millis(500);
                if let Some((tx, _)) = outgoing.take() {
                    let _ = acks.send(fail(tx, "unavailable")).await;
                }
                while let Ok(Some((tx, _))) = tokio::time::timeout_at(until, rx.recv()).await {
                    let _ = acks.send(fail(tx, "unavailable")).await;
                }
                if rx.is_closed() && rx.is_empty() {
                    return;
                }
                continue;
            }
        };
        let mut pending: HashSet<usize> = HashSet::new();
        loop {
            tokio::select! {
                m = rx.recv(), if outgoing.is_none() => match m {
                    Some(m) => outgoing = Some(m),
                    None => return,
                },
                permit = req_tx.reserve(), if outgoing.is_some() => {
                    let (Ok(permit), Some((tx, env))) = (permit, outgoing.take()) else { break };
                    pending.insert(tx);
                    permit.send(pb::SubmitRequest { id: tx as u64, envelope: env.as_ref().clone() });
                }
                r = responses.message() => match r {
                    Ok(Some(resp)) => {
                        let tx = usize::try_from(resp.id).unwrap_or(usize::MAX);
                        if pending.remove(&tx) {
                            let answer = Answer::of_code(resp.code);
                            let _ = acks.send(Ack { tx, router, answer }).await;
                        }
                    }
                    _ => break,
                },
            }
        }
        for tx in pending {
            let _ = acks.send(fail(tx, "stream failed")).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The committer's notification stream: subscribes to every id sent, reopens after a
/// failure and subscribes again to the ids still unconfirmed.
pub(crate) async fn watch_sidecar(
    channel: tonic::transport::Channel,
    mut ids: mpsc::Receiver<Vec<String>>,
    events: mpsc::Sender<Decided>,
) {
    let mut waiting: HashSet<String> = HashSet::new();
    let mut outgoing: Vec<Vec<String>> = Vec::new();
    loop {
        let (req_tx, req_rx) = mpsc::channel::<pb::SubscribeRequest>(64);
        let mut client = SidecarClient::new(channel.clone()).max_decoding_message_size(16 << 20);
        let mut stream = match client.subscribe(ReceiverStream::new(req_rx)).await {
            Ok(s) => s.into_inner(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        // Everything still unconfirmed, again (a status decided meanwhile is sent too).
        let mut all: Vec<String> = waiting.iter().cloned().collect();
        while !all.is_empty() {
            let rest = all.split_off(all.len().min(1000));
            outgoing.push(std::mem::replace(&mut all, rest));
        }
        loop {
            tokio::select! {
                m = ids.recv(), if outgoing.is_empty() => match m {
                    Some(batch) => {
                        waiting.extend(batch.iter().cloned());
                        outgoing.push(batch);
                    }
                    None => return,
                },
                permit = req_tx.reserve(), if !outgoing.is_empty() => {
                    let Ok(permit) = permit else { break };
                    permit.send(pb::SubscribeRequest { tx_ids: outgoing.remove(0) });
                }
                e = stream.message() => match e {
                    Ok(Some(ev)) => {
                        let Some(st) = ev.status else { continue };
                        if waiting.remove(&st.tx_id) {
                            let name = Status::from_code(st.code)
                                .map_or_else(|_| format!("CODE_{}", st.code), |s| s.name().to_string());
                            let decided = Decided { id: st.tx_id, status: name, block: st.block };
                            if events.send(decided).await.is_err() {
                                return;
                            }
                        }
                    }
                    _ => break,
                },
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Without a committer: an assembler's Deliver stream from block `first` (its height
/// when the run began: earlier blocks cannot hold this run's txs), following; each tx
/// id of ours that appears in a block is `ORDERED`.
async fn watch_assembler(
    channel: tonic::transport::Channel,
    first: u64,
    mut ids: mpsc::Receiver<Vec<String>>,
    events: mpsc::Sender<Decided>,
) {
    let mut waiting: HashSet<String> = HashSet::new();
    let mut next = first;
    loop {
        let request = pb::DeliverRequest {
            from: next,
            to: None,
            headers_only: false,
            to_end: false,
        };
        let mut stream = match clients::deliver::open(channel.clone(), request, 64 << 20).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        loop {
            tokio::select! {
                m = ids.recv() => match m {
                    Some(batch) => waiting.extend(batch),
                    None => return,
                },
                b = stream.message() => match b {
                    Ok(Some(b)) => {
                        let block = b.header.as_ref().map_or(next, |h| h.number);
                        next = block.saturating_add(1);
                        for raw in &b.requests {
                            let Ok(env) = pb::Envelope::decode(raw.as_slice()) else { continue };
                            if waiting.remove(&env.tx_id) {
                                let decided = Decided { id: env.tx_id, status: "ORDERED".into(), block };
                                if events.send(decided).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    _ => break,
                },
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
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

    /// A tally of `txs` sent txs to 4 routers (a quorum of 3), statuses in blocks from 10
    /// on decided in the run.
    fn tally(txs: usize, start: Instant) -> Tally {
        let mut t = Tally::new(txs, start, &Schedule::Unpaced, 4, 10);
        t.out.sent = txs as u64;
        t.in_flight = txs;
        t
    }

    fn ack(tx: usize, router: usize, answer: &Answer) -> Ack {
        Ack {
            tx,
            router,
            answer: answer.clone(),
        }
    }

    fn decided(id: &str, status: &str, block: u64) -> Decided {
        Decided {
            id: id.into(),
            status: status.into(),
            block,
        }
    }

    #[test]
    fn a_tx_is_submitted_at_a_quorum_and_refused_when_none_is_possible() {
        let mut t = tally(2, Instant::now());
        let unavailable = Answer::Failed("Unavailable".into());
        for r in 0..3 {
            t.on_ack(&ack(0, r, &Answer::Admitted));
        }
        t.on_ack(&ack(0, 3, &unavailable));
        assert_eq!((t.out.submitted, t.in_flight), (1, 2));
        t.on_ack(&ack(1, 0, &Answer::Admitted));
        t.on_ack(&ack(1, 1, &unavailable));
        assert_eq!(t.in_flight, 2, "one refusal leaves a quorum possible");
        t.on_ack(&ack(1, 2, &unavailable));
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
                t.on_ack(&ack(tx, r, &Answer::Duplicate));
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
            t.on_ack(&ack(0, r, a));
            t.on_ack(&ack(1, r, a));
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
            Answer::Failed("ResourceExhausted".into())
        );
    }
}
