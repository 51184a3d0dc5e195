//! The one discrete-event kernel every simulation of fabrx runs on: the BFT engine's
//! ([`super::World`]) and the ordering core's (the `ordersim` crate).
//!
//! A kernel owns what the worlds share: the virtual clock, the queue of scheduled events
//! ordered by virtual time and then by the order they were scheduled in, the seeded
//! `ChaCha8Rng` every random choice of a run draws from, and the fault model of the
//! network between nodes ([`Faults`]): before the global stabilisation time (GST)
//! messages are lost, duplicated, cut by partitions and delayed up to a wide bound; at GST
//! partitions heal, loss and duplication stop and delays become bounded tightly.
//!
//! A world keeps its own event type, nodes, shells and checker. It implements [`Sim`] and
//! [`run`] drives it: pop the next event, advance the clock, step the world, ask whether
//! the run reached its end, until the liveness deadline passes.
//!
//! Pure: no I/O, no threads, no wall clock. The same seed gives the same run.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fmt;

use rand::Rng;
use rand::distributions::uniform::SampleUniform;
use rand_chacha::ChaCha8Rng;

/// Every node's clock ticks this often (ms), from a random offset below it.
pub const TICK_MS: u64 = 10;

/// A crashed node stays down at least this long (ms)…
pub const MIN_DOWNTIME_MS: u64 = 20;

/// …and less than this long (ms) before it restarts.
pub const MAX_DOWNTIME_MS: u64 = 600;

/// Events that may be pending at once: a run that schedules more is runaway (a message
/// storm the scenario did not intend) and stops with [`Stop::Flooded`] instead of eating
/// the machine's memory.
pub const MAX_PENDING: usize = 1 << 22;

/// The fault model of the links between nodes, drawn from a seed by each world's
/// scenario.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Faults {
    /// Probability of losing a message before GST.
    pub loss: f64,
    /// Probability of delivering a message twice before GST.
    pub duplicate: f64,
    /// Largest message delay before GST (ms).
    pub max_delay_ms: u64,
    /// Largest message delay after GST (ms).
    pub max_delay_after_gst_ms: u64,
    /// Probability per fault draw ([`Kernel::maybe_partition`]) of cutting the network
    /// anew into two sides before GST.
    pub partition: f64,
}

impl Faults {
    /// Draws a network's faults from a scenario's seed stream: loss, duplication and
    /// partition probabilities below those of `bounds` (all zero in a `calm` scenario),
    /// delays of 1 ms up to below the bounds' delays. `world` draws the world's own fault
    /// probabilities (crashes) with the function it is given, which answers a
    /// probability below its argument (zero when calm). It runs after the delays and
    /// before the partition probability, the order the scenarios always drew in, so that
    /// every seed keeps its scenario.
    pub fn draw<T>(
        rng: &mut ChaCha8Rng,
        calm: bool,
        bounds: &Faults,
        world: impl FnOnce(&mut dyn FnMut(f64) -> f64) -> T,
    ) -> (Faults, T) {
        let probability = |rng: &mut ChaCha8Rng, below: f64| {
            if calm || below <= 0.0 {
                0.0
            } else {
                rng.gen_range(0.0..below)
            }
        };
        let loss = probability(rng, bounds.loss);
        let duplicate = probability(rng, bounds.duplicate);
        let max_delay_ms = rng.gen_range(1..bounds.max_delay_ms.max(2));
        let max_delay_after_gst_ms = rng.gen_range(1..bounds.max_delay_after_gst_ms.max(2));
        let own = world(&mut |below| probability(rng, below));
        let partition = probability(rng, bounds.partition);
        let faults = Faults {
            loss,
            duplicate,
            max_delay_ms,
            max_delay_after_gst_ms,
            partition,
        };
        (faults, own)
    }
}

/// An event due at `time`; `seq` orders events due at the same time by when they were
/// scheduled.
struct Scheduled<E> {
    time: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Scheduled<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.time, self.seq).cmp(&(o.time, o.seq))
    }
}

/// The clock, the event queue, the random stream and the network of one run.
pub struct Kernel<E> {
    now: u64,
    seq: u64,
    steps: u64,
    queue: BinaryHeap<Reverse<Scheduled<E>>>,
    rng: ChaCha8Rng,
    faults: Faults,
    /// The side of the partition each node is on (all 0: no partition).
    side: Vec<u8>,
    after_gst: bool,
}

impl<E> Kernel<E> {
    /// A kernel at time 0 with no event scheduled, drawing from `rng`, whose network of
    /// `nodes` nodes (ids `0..nodes`) follows `faults`.
    pub fn new(rng: ChaCha8Rng, faults: Faults, nodes: usize) -> Kernel<E> {
        Kernel {
            now: 0,
            seq: 0,
            steps: 0,
            queue: BinaryHeap::new(),
            rng,
            faults,
            side: vec![0; nodes],
            after_gst: false,
        }
    }

    /// The virtual time (ms): when the event being stepped was due.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Events popped so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Events scheduled and not yet popped.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// True once [`Kernel::stabilise`] ran: faults have stopped.
    pub fn after_gst(&self) -> bool {
        self.after_gst
    }

    /// The run's random stream: every random choice of a world draws from it, so the
    /// seed decides the whole run.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// Schedules `event` at virtual time `at` (an `at` in the past is due at once,
    /// after the events already due).
    pub fn schedule(&mut self, at: u64, event: E) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            time: at.max(self.now),
            seq: self.seq,
            event,
        }));
    }

    /// Schedules `event` `after` ms from now.
    pub fn schedule_in(&mut self, after: u64, event: E) {
        self.schedule(self.now.saturating_add(after), event);
    }

    /// A node's first tick: at a random offset below [`TICK_MS`], so that nodes do not
    /// tick in lockstep.
    pub fn first_tick(&mut self, tick: E) {
        let at = self.rng.gen_range(0..TICK_MS);
        self.schedule(at, tick);
    }

    /// A node's next tick, [`TICK_MS`] from now.
    pub fn next_tick(&mut self, tick: E) {
        self.schedule_in(TICK_MS, tick);
    }

    /// Before GST, with probability `p`, picks which of `count` nodes crashes now (the
    /// world decides whether that node can crash); after GST nothing crashes.
    pub fn maybe_crash<T>(&mut self, p: f64, count: T) -> Option<T>
    where
        T: SampleUniform + PartialOrd + Default,
    {
        if self.after_gst || !self.rng.gen_bool(p) {
            return None;
        }
        Some(self.rng.gen_range(T::default()..count))
    }

    /// Schedules the restart of a node that crashed now, after a random downtime.
    pub fn restart_later(&mut self, restart: E) {
        let down = self.rng.gen_range(MIN_DOWNTIME_MS..MAX_DOWNTIME_MS);
        self.schedule_in(down, restart);
    }

    /// Takes the next event due and advances the clock to its time; `None` when nothing
    /// is scheduled.
    pub fn pop(&mut self) -> Option<E> {
        let Reverse(s) = self.queue.pop()?;
        self.now = s.time;
        self.steps += 1;
        Some(s.event)
    }

    /// True iff a message from a client (outside every partition) is lost: before GST,
    /// with the loss probability.
    pub fn lossy(&mut self) -> bool {
        !self.after_gst && self.rng.gen_bool(self.faults.loss)
    }

    /// True iff a message from node `from` to node `to` is dropped: before GST, when a
    /// partition separates them or else with the loss probability. A node's message to
    /// itself stays local and is never dropped.
    pub fn dropped(&mut self, from: u32, to: u32) -> bool {
        from != to && !self.after_gst && (self.partitioned(from, to) || self.rng.gen_bool(self.faults.loss))
    }

    /// True iff a partition separates `a` and `b` (never after GST).
    pub fn partitioned(&self, a: u32, b: u32) -> bool {
        let side = |n: u32| self.side.get(n as usize).copied().unwrap_or(0);
        side(a) != side(b)
    }

    /// How many copies of a sent message the network delivers: two with the
    /// duplication probability before GST, else one.
    pub fn copies(&mut self) -> usize {
        if !self.after_gst && self.rng.gen_bool(self.faults.duplicate) {
            2
        } else {
            1
        }
    }

    /// When a message that left at `sent` arrives: 1 ms to the largest delay later (the
    /// bound before or after GST), so messages overtake each other.
    pub fn arrival(&mut self, sent: u64) -> u64 {
        let max = if self.after_gst {
            self.faults.max_delay_after_gst_ms
        } else {
            self.faults.max_delay_ms
        };
        sent.saturating_add(self.rng.gen_range(1..=max.max(1)))
    }

    /// Sends a message from node `from` to node `to`: unless the network drops it,
    /// schedules the event `deliver` makes once per copy, each at its own arrival time.
    pub fn send(&mut self, from: u32, to: u32, deliver: impl Fn() -> E) {
        self.send_over(from, to, Some, deliver);
    }

    /// [`Kernel::send`] over a link that decides when the message has left: `depart`
    /// gets the time it is handed to the link and answers when its last byte is on the
    /// wire, or `None` if the link does not take it (then nothing is delivered).
    pub fn send_over(
        &mut self,
        from: u32,
        to: u32,
        depart: impl FnOnce(u64) -> Option<u64>,
        deliver: impl Fn() -> E,
    ) {
        if self.dropped(from, to) {
            return;
        }
        let copies = self.copies();
        let Some(sent) = depart(self.now) else {
            return;
        };
        for _ in 0..copies {
            let at = self.arrival(sent);
            self.schedule(at, deliver());
        }
    }

    /// Before GST, with the partition probability, puts every node on a random one of
    /// two sides (possibly all on one: the partition healed).
    pub fn maybe_partition(&mut self) {
        if self.after_gst || !self.rng.gen_bool(self.faults.partition) {
            return;
        }
        for s in self.side.iter_mut() {
            *s = self.rng.gen_range(0..2);
        }
    }

    /// GST: partitions heal; from now on no message is lost or duplicated and delays
    /// keep to the bound after GST.
    pub fn stabilise(&mut self) {
        self.after_gst = true;
        self.side.iter_mut().for_each(|s| *s = 0);
    }
}

/// A world the kernel drives.
pub trait Sim {
    /// The world's own events.
    type Event;
    /// What a violated property reads as.
    type Error;
    /// The world's kernel.
    fn kernel(&mut self) -> &mut Kernel<Self::Event>;
    /// Executes one event at the kernel's current time; `Err` is a violated property.
    fn step(&mut self, event: Self::Event) -> Result<(), Self::Error>;
    /// After every step: `Ok(true)` once the run reached its end with every end-state
    /// property holding, `Ok(false)` to go on.
    fn done(&mut self) -> Result<bool, Self::Error>;
}

/// Why a run stopped without reaching its end.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop<E> {
    /// The world found a violated property.
    Violated(E),
    /// The next event was due after the liveness deadline (virtual ms).
    Deadline {
        /// The deadline.
        deadline: u64,
        /// When the next event was due.
        now: u64,
    },
    /// Nothing was scheduled any more (a world whose nodes tick never gets here).
    Drained,
    /// More than [`MAX_PENDING`] events were pending.
    Flooded {
        /// Events pending.
        pending: usize,
    },
}

impl<E: fmt::Display> fmt::Display for Stop<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Violated(e) => e.fmt(f),
            Stop::Deadline { deadline, now } => {
                write!(
                    f,
                    "liveness: an event at {now} ms is past the deadline of {deadline} ms"
                )
            }
            Stop::Drained => f.write_str("event queue ran dry"),
            Stop::Flooded { pending } => write!(f, "runaway: {pending} events pending"),
        }
    }
}

/// Steps `sim` event by event until it is done (`Ok`) or stops: a violated property, an
/// event due after `deadline`, an empty queue or a flood of events.
pub fn run<S: Sim>(sim: &mut S, deadline: u64) -> Result<(), Stop<S::Error>> {
    while let Some(event) = sim.kernel().pop() {
        let now = sim.kernel().now();
        if now > deadline {
            return Err(Stop::Deadline { deadline, now });
        }
        sim.step(event).map_err(Stop::Violated)?;
        if sim.done().map_err(Stop::Violated)? {
            return Ok(());
        }
        let pending = sim.kernel().pending();
        if pending > MAX_PENDING {
            return Err(Stop::Flooded { pending });
        }
    }
    Err(Stop::Drained)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    const STORMY: Faults = Faults {
        loss: 0.3,
        duplicate: 0.3,
        max_delay_ms: 50,
        max_delay_after_gst_ms: 5,
        partition: 1.0,
    };

    fn kernel(seed: u64) -> Kernel<u32> {
        Kernel::new(ChaCha8Rng::seed_from_u64(seed), STORMY, 4)
    }

    #[test]
    fn events_come_by_time_then_in_the_order_scheduled() {
        let mut k = kernel(1);
        k.schedule(5, 1);
        k.schedule(3, 2);
        k.schedule(5, 3);
        k.schedule(3, 4);
        let order: Vec<(u32, u64)> = std::iter::from_fn(|| k.pop().map(|e| (e, k.now()))).collect();
        assert_eq!(order, [(2, 3), (4, 3), (1, 5), (3, 5)]);
        assert_eq!(k.steps(), 4);
    }

    #[test]
    fn the_clock_never_runs_back() {
        let mut k = kernel(1);
        k.schedule(10, 1);
        assert_eq!(k.pop(), Some(1));
        k.schedule(4, 2);
        assert_eq!(k.pop(), Some(2));
        assert_eq!(k.now(), 10);
    }

    /// Sends 200 messages between random nodes and returns when each arrives.
    fn traffic(k: &mut Kernel<u32>) -> Vec<(u64, u32)> {
        for i in 0..200 {
            k.maybe_partition();
            let (from, to) = (i % 4, (i / 4) % 4);
            k.send(from, to, || i);
        }
        std::iter::from_fn(|| k.pop().map(|e| (k.now(), e))).collect()
    }

    #[test]
    fn a_seed_replays_exactly_and_another_seed_differs() {
        assert_eq!(traffic(&mut kernel(7)), traffic(&mut kernel(7)));
        assert_ne!(traffic(&mut kernel(7)), traffic(&mut kernel(8)));
    }

    #[test]
    fn before_gst_messages_are_lost_duplicated_and_late() {
        let got = traffic(&mut kernel(3));
        let mut counts = [0u32; 200];
        for (_, e) in &got {
            counts[*e as usize] += 1;
        }
        assert!(counts.contains(&0), "nothing was lost");
        assert!(counts.contains(&2), "nothing was duplicated");
        assert!(
            got.iter().any(|(t, _)| *t > 5),
            "no delay above the bound after GST"
        );
        // Messages to oneself are never dropped.
        for i in (0..200).filter(|i| i % 4 == (i / 4) % 4) {
            assert!(counts[i as usize] >= 1, "node {} lost a message to itself", i % 4);
        }
    }

    #[test]
    fn after_gst_every_message_arrives_once_within_the_bound() {
        let mut k = kernel(3);
        for _ in 0..20 {
            k.maybe_partition();
        }
        k.stabilise();
        assert!((0..4).all(|a| (0..4).all(|b| !k.partitioned(a, b))));
        let got = traffic(&mut k);
        let mut seen: Vec<u32> = got.iter().map(|(_, e)| *e).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..200).collect::<Vec<_>>());
        assert!(got.iter().all(|(t, _)| (1..=5).contains(t)));
        assert!(!k.lossy());
    }

    #[test]
    fn a_link_that_refuses_a_message_delivers_nothing_and_one_that_queues_delays_it() {
        let mut k = kernel(5);
        k.stabilise();
        k.send_over(0, 1, |_| None, || 1);
        k.send_over(0, 1, |now| Some(now + 100), || 2);
        assert_eq!(k.pop(), Some(2));
        assert!(k.now() > 100);
        assert_eq!(k.pop(), None);
    }

    #[test]
    fn crashes_and_partitions_happen_only_before_gst() {
        let mut k = kernel(9);
        assert!((0..50).all(|_| k.maybe_crash(1.0, 4u32).is_some_and(|id| id < 4)));
        assert_eq!(k.maybe_crash(0.0, 4u32), None);
        while (0..4).all(|b| !k.partitioned(0, b)) {
            k.maybe_partition();
        }
        k.stabilise();
        assert_eq!(k.maybe_crash(1.0, 4u32), None);
        k.maybe_partition();
        assert!((0..4).all(|b| !k.partitioned(0, b)));
    }

    #[test]
    fn a_calm_network_has_delays_but_no_faults() {
        let draw = |calm| Faults::draw(&mut ChaCha8Rng::seed_from_u64(4), calm, &STORMY, |p| p(0.5));
        let (calm, crash) = draw(true);
        assert_eq!(
            (calm.loss, calm.duplicate, calm.partition, crash),
            (0.0, 0.0, 0.0, 0.0)
        );
        assert!((1..50).contains(&calm.max_delay_ms));
        let (stormy, crash) = draw(false);
        assert!(stormy.loss > 0.0 && stormy.loss < 0.3 && crash > 0.0 && crash < 0.5);
    }

    /// Counts to `goal` with one event a ms; fails at `fail_at`.
    struct Counter {
        k: Kernel<u32>,
        goal: u32,
        fail_at: Option<u32>,
    }

    impl Sim for Counter {
        type Event = u32;
        type Error = String;
        fn step(&mut self, event: u32) -> Result<(), String> {
            if self.fail_at == Some(event) {
                return Err(format!("failed at {event}"));
            }
            self.k.schedule_in(1, event + 1);
            Ok(())
        }
        fn done(&mut self) -> Result<bool, String> {
            Ok(self.k.now() >= u64::from(self.goal))
        }
        fn kernel(&mut self) -> &mut Kernel<u32> {
            &mut self.k
        }
    }

    fn counter(goal: u32, fail_at: Option<u32>) -> Counter {
        let mut k = kernel(0);
        k.schedule(0, 0);
        Counter { k, goal, fail_at }
    }

    #[test]
    fn run_ends_when_done_and_stops_at_the_deadline_or_a_violation() {
        let mut c = counter(10, None);
        assert_eq!(run(&mut c, 100), Ok(()));
        assert_eq!(c.k.steps(), 11);
        assert_eq!(
            run(&mut counter(10, None), 5),
            Err(Stop::Deadline { deadline: 5, now: 6 })
        );
        assert_eq!(
            run(&mut counter(10, Some(3)), 100),
            Err(Stop::Violated("failed at 3".to_string()))
        );
        let mut empty = counter(10, None);
        empty.k.pop();
        assert_eq!(run(&mut empty, 100), Err(Stop::Drained));
    }
}
