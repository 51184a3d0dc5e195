//! Status notifications (FX §3.1): clients watch tx ids and receive each one's final
//! status once.
//!
//! - [`NotifyCore`] is the pure, deterministic part: who waits for which id, and which
//!   subscriber gets which event when a block's statuses are published.
//! - [`Notifier`] is the shell: subscriptions with bounded channels, the lookup of
//!   statuses that are already final (the block store), and the slow-subscriber rule.
//!
//! # Semantics
//! - A watched id is answered exactly once per subscription: at once if its status is
//!   already final (the lookup knows it), otherwise by the first published status for it.
//!   Watching an id that is still pending in the same subscription is a no-op; watching it
//!   again after it was answered answers it again.
//! - The sidecar appends a block to the store *before* publishing it. A watch looks the
//!   id up and registers it under one lock, and publishing takes that lock too, so an id
//!   whose block completes concurrently is answered by exactly one of the two paths.
//! - Statuses that are never stored (100–102) are delivered when published but cannot be
//!   answered from the store later; statuses decided before the store's first block are
//!   unknown to it (the node may combine lookups).
//! - A subscriber's channel holds [`NotifierConfig::capacity`] events. Publishing never
//!   waits: a subscriber whose channel is full is dropped, and after its buffered events
//!   its [`Subscription::recv`] returns [`Error::SubscriptionLagged`]. Dropping a
//!   [`Subscription`] unsubscribes it.

use crate::store::StoreReader;
use crate::{Error, Result};
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use types::{Height, Status, TxId};

/// Identifies a subscriber.
pub type SubId = u64;

/// The final status of a tx, as sent to subscribers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxEvent {
    /// The tx id.
    pub id: TxId,
    /// Its final status ([`Status::name`] is the reason shown to clients).
    pub status: Status,
    /// Where it was decided.
    pub height: Height,
}

/// Where already final statuses are looked up.
pub trait StatusLookup: Send + Sync {
    /// The final status of `id`, if known.
    fn lookup(&self, id: &TxId) -> Option<(Status, Height)>;
}

impl StatusLookup for StoreReader {
    fn lookup(&self, id: &TxId) -> Option<(Status, Height)> {
        self.tx_status(id)
    }
}

/// A hash map keyed by client-chosen ids: foldhash, seeded at random per map (cheaper
/// than SipHash, and an outsider cannot predict the seed to aim ids at one bucket).
type IdMap<K, V> = HashMap<K, V, foldhash::quality::RandomState>;

/// The subscribers waiting for one id: nearly always one.
#[derive(Debug)]
enum Waiters {
    One(SubId),
    /// Two or more, in subscriber order.
    Many(BTreeSet<SubId>),
}

impl Waiters {
    fn contains(&self, sub: SubId) -> bool {
        match self {
            Waiters::One(s) => *s == sub,
            Waiters::Many(set) => set.contains(&sub),
        }
    }

    fn insert(&mut self, sub: SubId) {
        match self {
            Waiters::One(s) if *s == sub => {}
            Waiters::One(s) => *self = Waiters::Many(BTreeSet::from([*s, sub])),
            Waiters::Many(set) => {
                set.insert(sub);
            }
        }
    }

    /// Removes `sub`; whether none is left.
    fn remove(&mut self, sub: SubId) -> bool {
        match self {
            Waiters::One(s) => *s == sub,
            Waiters::Many(set) => {
                set.remove(&sub);
                set.is_empty()
            }
        }
    }
}

/// How many ids one subscriber waits for and the bytes they hold
/// ([`registration_bytes`]).
#[derive(Debug, Default, Clone, Copy)]
struct SubIds {
    count: usize,
    bytes: usize,
}

/// Who waits for what. Pure and deterministic: events come out in tx order, then in
/// subscriber order. Each watched id is held once, as a key of `waiting` (a subscriber
/// keeps only counts), so publishing a status looks it up once.
#[derive(Debug, Default)]
pub struct NotifyCore {
    waiting: IdMap<TxId, Waiters>,
    /// Only subscribers with pending ids have an entry.
    by_sub: IdMap<SubId, SubIds>,
    /// Bytes held for every registration.
    total_bytes: usize,
}

/// What one pending registration is charged in memory: the id and the map entry around
/// it, with room to spare (it was measured at about 300 bytes per 64-byte id when each id
/// was held twice; it is held once now, and the charge, hence every limit in ids, is
/// unchanged).
pub fn registration_bytes(id: &TxId) -> usize {
    id.0.len().saturating_mul(2).saturating_add(176)
}

impl NotifyCore {
    /// A core with no subscriptions.
    pub fn new() -> NotifyCore {
        NotifyCore::default()
    }

    /// `sub` watches `id`, whose final status is `known` if already decided. Returns the
    /// event to send at once, or `None` if `id` is now (or was already) pending for `sub`.
    pub fn watch(&mut self, sub: SubId, id: TxId, known: Option<(Status, Height)>) -> Option<TxEvent> {
        if let Some((status, height)) = known {
            // Answered now: a pending registration (if any) must not answer it again.
            self.unregister(sub, &id);
            return Some(TxEvent { id, status, height });
        }
        let cost = registration_bytes(&id);
        match self.waiting.entry(id) {
            Entry::Occupied(mut e) => {
                if e.get().contains(sub) {
                    return None;
                }
                e.get_mut().insert(sub);
            }
            Entry::Vacant(e) => {
                e.insert(Waiters::One(sub));
            }
        }
        let mine = self.by_sub.entry(sub).or_default();
        mine.count += 1;
        mine.bytes += cost;
        self.total_bytes += cost;
        None
    }

    /// Bytes held for `sub`'s pending registrations.
    pub fn bytes_of(&self, sub: SubId) -> usize {
        self.by_sub.get(&sub).map_or(0, |m| m.bytes)
    }

    /// Bytes held for every pending registration.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// Releases one registration of `sub` costing `cost` bytes (its id already left
    /// `waiting`, or `sub` left the id's waiters).
    fn release(&mut self, sub: SubId, cost: usize) {
        if let Some(mine) = self.by_sub.get_mut(&sub) {
            mine.count = mine.count.saturating_sub(1);
            mine.bytes = mine.bytes.saturating_sub(cost);
            if mine.count == 0 {
                self.by_sub.remove(&sub);
            }
        }
        self.total_bytes = self.total_bytes.saturating_sub(cost);
    }

    /// The final statuses of block `block`, in tx order: the events to send. Every
    /// answered registration is removed; an id occurring twice is answered by the first.
    /// The ids are moved into the events (copied only for an id with several waiters).
    pub fn publish(&mut self, block: u64, statuses: Vec<(TxId, Status)>) -> Vec<(SubId, TxEvent)> {
        let mut out = Vec::new();
        if self.waiting.is_empty() {
            return out;
        }
        // Look every id up first: these lookups do not depend on each other, so the
        // processor overlaps their cache misses (a large map is mostly out of cache),
        // and the removals below find their entries in the cache. It also counts the
        // events to come.
        let waited = statuses
            .iter()
            .filter(|(id, _)| self.waiting.contains_key(id))
            .count();
        if waited == 0 {
            return out;
        }
        out.reserve(waited);
        for (i, (id, status)) in statuses.into_iter().enumerate() {
            let Some(waiters) = self.waiting.remove(&id) else {
                continue;
            };
            let cost = registration_bytes(&id);
            let height = Height::new(block, i as u32);
            match waiters {
                Waiters::One(sub) => {
                    self.release(sub, cost);
                    out.push((sub, TxEvent { id, status, height }));
                }
                Waiters::Many(subs) => {
                    for sub in subs {
                        self.release(sub, cost);
                        let id = id.clone();
                        out.push((sub, TxEvent { id, status, height }));
                    }
                }
            }
        }
        out
    }

    /// Forgets every registration of `sub`; returns how many ids it was waiting for.
    /// A subscriber keeps no list of its ids, so this walks every watched id once
    /// (a few milliseconds at a million), and only when `sub` still waits for some.
    pub fn remove(&mut self, sub: SubId) -> usize {
        let Some(mine) = self.by_sub.remove(&sub) else {
            return 0;
        };
        self.waiting.retain(|_, w| !w.remove(sub));
        self.total_bytes = self.total_bytes.saturating_sub(mine.bytes);
        mine.count
    }

    /// Ids `sub` waits for.
    pub fn pending(&self, sub: SubId) -> usize {
        self.by_sub.get(&sub).map_or(0, |m| m.count)
    }

    /// Distinct ids anybody waits for.
    pub fn watched(&self) -> usize {
        self.waiting.len()
    }

    /// Removes `sub`'s registration of `id`, if any.
    fn unregister(&mut self, sub: SubId, id: &TxId) {
        let Some(w) = self.waiting.get_mut(id) else {
            return;
        };
        if !w.contains(sub) {
            return;
        }
        if w.remove(sub) {
            self.waiting.remove(id);
        }
        self.release(sub, registration_bytes(id));
    }
}

/// Configuration of a [`Notifier`].
#[derive(Debug, Clone, Copy)]
pub struct NotifierConfig {
    /// Events buffered per subscriber before it counts as lagging and is dropped.
    pub capacity: std::num::NonZeroUsize,
    /// Most bytes of pending registrations one subscription may hold
    /// ([`registration_bytes`] each); more ends its stream with `RESOURCE_EXHAUSTED`.
    pub max_bytes_per_subscription: usize,
    /// Most bytes of pending registrations of all subscriptions together.
    pub max_bytes_total: usize,
}

impl Default for NotifierConfig {
    fn default() -> Self {
        NotifierConfig {
            // 32 blocks of 500 txs: a reader that stalls for a second at 16,000 tx/s
            // keeps its subscription (at most about 5 MiB of events for 256-byte ids).
            capacity: std::num::NonZeroUsize::new(16_384).unwrap_or(std::num::NonZeroUsize::MIN),
            // About 220,000 pending ids of 64 bytes: a client may watch every tx of a
            // 200,000-tx run before its first block (below that, such a client was cut
            // off, re-subscribed, and registered every id again and again).
            max_bytes_per_subscription: 64 << 20,
            max_bytes_total: 256 << 20,
        }
    }
}

/// What one [`Notifier::publish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Events handed to subscriber channels.
    pub delivered: usize,
    /// Subscribers dropped because their channel was full.
    pub dropped: Vec<SubId>,
}

struct Sink {
    tx: mpsc::Sender<TxEvent>,
    lagged: Arc<AtomicBool>,
}

struct Shared {
    core: NotifyCore,
    sinks: HashMap<SubId, Sink>,
    next: SubId,
}

/// The notification hub. Cheap to clone; subscriptions end when every clone is dropped.
#[derive(Clone)]
pub struct Notifier {
    shared: Arc<Mutex<Shared>>,
    lookup: Arc<dyn StatusLookup>,
    config: NotifierConfig,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("subscribers", &self.subscribers())
            .finish()
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl Notifier {
    /// A notifier answering already final statuses from `lookup` (usually the block
    /// store's [`StoreReader`]).
    pub fn new(config: NotifierConfig, lookup: Arc<dyn StatusLookup>) -> Notifier {
        Notifier {
            shared: Arc::new(Mutex::new(Shared {
                core: NotifyCore::new(),
                sinks: HashMap::new(),
                next: 0,
            })),
            lookup,
            config,
        }
    }

    /// A new subscription, watching nothing yet.
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = mpsc::channel(self.config.capacity.get());
        let lagged = Arc::new(AtomicBool::new(false));
        let mut shared = lock(&self.shared);
        let id = shared.next;
        shared.next += 1;
        shared.sinks.insert(
            id,
            Sink {
                tx,
                lagged: lagged.clone(),
            },
        );
        Subscription {
            id,
            rx,
            lagged,
            capacity: self.config.capacity.get(),
            config: self.config,
            shared: Arc::downgrade(&self.shared),
            lookup: self.lookup.clone(),
        }
    }

    /// Delivers the final statuses of block `block` (in tx order) to the subscribers
    /// waiting for them. Never waits: a subscriber whose channel is full is dropped.
    /// Call it after the block is appended to the store.
    pub fn publish(&self, block: u64, statuses: Vec<(TxId, Status)>) -> PublishReport {
        let mut shared = lock(&self.shared);
        let events = shared.core.publish(block, statuses);
        let mut report = PublishReport::default();
        for (sub, event) in events {
            // A subscriber dropped by this publish gets nothing more (and is logged once).
            if report.dropped.contains(&sub) {
                continue;
            }
            let Some(sink) = shared.sinks.get(&sub) else {
                continue;
            };
            match sink.tx.try_send(event) {
                Ok(()) => report.delivered += 1,
                Err(TrySendError::Full(_)) => {
                    sink.lagged.store(true, Ordering::Release);
                    report.dropped.push(sub);
                    tracing::warn!(sub, block, "subscriber not reading; dropped");
                }
                Err(TrySendError::Closed(_)) => report.dropped.push(sub),
            }
        }
        for sub in &report.dropped {
            shared.sinks.remove(sub);
            shared.core.remove(*sub);
        }
        report
    }

    /// Live subscriptions.
    pub fn subscribers(&self) -> usize {
        lock(&self.shared).sinks.len()
    }

    /// Distinct ids awaited by some subscription.
    pub fn watched(&self) -> usize {
        lock(&self.shared).core.watched()
    }
}

/// One client's subscription: add ids with [`Subscription::watch`], receive published
/// statuses with [`Subscription::recv`]. Dropping it unsubscribes.
pub struct Subscription {
    id: SubId,
    rx: mpsc::Receiver<TxEvent>,
    lagged: Arc<AtomicBool>,
    capacity: usize,
    config: NotifierConfig,
    shared: Weak<Mutex<Shared>>,
    lookup: Arc<dyn StatusLookup>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("id", &self.id).finish()
    }
}

impl Subscription {
    /// This subscription's id.
    pub fn id(&self) -> SubId {
        self.id
    }

    /// Watches `ids`. Returns the events of ids whose status is already final (to send
    /// now, in the order given); the others arrive later through [`Subscription::recv`].
    /// Fails if the subscription was dropped for lagging or the notifier is gone.
    pub fn watch(&self, ids: impl IntoIterator<Item = TxId>) -> Result<Vec<TxEvent>> {
        let Some(shared) = self.shared.upgrade() else {
            return Err(Error::NotifierClosed);
        };
        let mut shared = lock(&shared);
        if !shared.sinks.contains_key(&self.id) {
            return Err(Error::SubscriptionLagged {
                capacity: self.capacity,
            });
        }
        let mut now = Vec::new();
        for id in ids {
            let cost = registration_bytes(&id);
            let mine = shared.core.bytes_of(self.id).saturating_add(cost);
            let all = shared.core.total_bytes().saturating_add(cost);
            if mine > self.config.max_bytes_per_subscription {
                return Err(Error::SubscriptionsFull {
                    which: "this subscription",
                    bytes: mine,
                    limit: self.config.max_bytes_per_subscription,
                });
            }
            if all > self.config.max_bytes_total {
                return Err(Error::SubscriptionsFull {
                    which: "all subscriptions",
                    bytes: all,
                    limit: self.config.max_bytes_total,
                });
            }
            let known = self.lookup.lookup(&id);
            now.extend(shared.core.watch(self.id, id, known));
        }
        Ok(now)
    }

    /// The next published event. `Ok(None)` once the notifier is gone;
    /// [`Error::SubscriptionLagged`] (after the buffered events) if this subscription was
    /// dropped for not reading.
    pub async fn recv(&mut self) -> Result<Option<TxEvent>> {
        match self.rx.recv().await {
            Some(e) => Ok(Some(e)),
            None => self.closed(),
        }
    }

    /// Like [`Subscription::recv`] without waiting: `Ok(None)` if nothing is buffered.
    pub fn try_recv(&mut self) -> Result<Option<TxEvent>> {
        match self.rx.try_recv() {
            Ok(e) => Ok(Some(e)),
            Err(mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(mpsc::error::TryRecvError::Disconnected) => self.closed(),
        }
    }

    fn closed(&self) -> Result<Option<TxEvent>> {
        if self.lagged.load(Ordering::Acquire) {
            Err(Error::SubscriptionLagged {
                capacity: self.capacity,
            })
        } else {
            Ok(None)
        }
    }

    /// Ids watched and not answered yet.
    pub fn pending(&self) -> usize {
        self.shared
            .upgrade()
            .map_or(0, |s| lock(&s).core.pending(self.id))
    }

    /// Whether published events are buffered, not yet received.
    pub fn has_buffered(&self) -> bool {
        !self.rx.is_empty()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut shared = lock(&shared);
            shared.sinks.remove(&self.id);
            shared.core.remove(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroUsize;

    fn id(s: &str) -> TxId {
        TxId(s.into())
    }

    fn ev(i: &str, status: Status, block: u64, index: u32) -> TxEvent {
        TxEvent {
            id: id(i),
            status,
            height: Height::new(block, index),
        }
    }

    enum Step {
        Watch(SubId, &'static str, Option<(Status, Height)>, Option<TxEvent>),
        Publish(u64, Vec<(&'static str, Status)>, Vec<(SubId, TxEvent)>),
        Remove(SubId, usize),
    }

    #[test]
    fn core_table() {
        use Status::*;
        let known = Some((AbortedMvccConflict, Height::new(1, 4)));
        let steps = vec![
            Step::Watch(1, "a", None, None),
            Step::Watch(2, "a", None, None),
            Step::Watch(1, "a", None, None), // pending: no-op
            Step::Watch(1, "old", known, Some(ev("old", AbortedMvccConflict, 1, 4))),
            Step::Watch(3, "b", None, None),
            Step::Watch(3, "c", None, None),
            // First occurrence answers; the duplicate in the same block answers nobody.
            Step::Publish(
                7,
                vec![
                    ("x", Committed),
                    ("a", Committed),
                    ("a", RejectedDuplicateTxId),
                    ("c", MalformedNoWrites),
                ],
                vec![
                    (1, ev("a", Committed, 7, 1)),
                    (2, ev("a", Committed, 7, 1)),
                    (3, ev("c", MalformedNoWrites, 7, 3)),
                ],
            ),
            Step::Publish(8, vec![("a", Committed)], vec![]),
            // Known at watch time while pending (store appended, not yet published).
            Step::Watch(
                3,
                "b",
                Some((Committed, Height::new(9, 0))),
                Some(ev("b", Committed, 9, 0)),
            ),
            Step::Publish(9, vec![("b", Committed)], vec![]),
            Step::Watch(4, "d", None, None),
            Step::Watch(4, "e", None, None),
            Step::Remove(4, 2),
            Step::Remove(4, 0),
            Step::Publish(10, vec![("d", Committed), ("e", Committed)], vec![]),
            // Re-watching after an answer answers again.
            Step::Watch(1, "a", None, None),
            Step::Publish(
                11,
                vec![("a", RejectedDuplicateTxId)],
                vec![(1, ev("a", RejectedDuplicateTxId, 11, 0))],
            ),
            // Three subscribers on one id, the middle one leaves: the others are
            // answered, in subscriber order.
            Step::Watch(7, "f", None, None),
            Step::Watch(5, "f", None, None),
            Step::Watch(6, "f", None, None),
            Step::Remove(6, 1),
            Step::Publish(
                12,
                vec![("f", Committed)],
                vec![(5, ev("f", Committed, 12, 0)), (7, ev("f", Committed, 12, 0))],
            ),
            // Two on one id, one answered from the lookup: the other still waits.
            Step::Watch(8, "g", None, None),
            Step::Watch(9, "g", None, None),
            Step::Watch(8, "g", known, Some(ev("g", AbortedMvccConflict, 1, 4))),
            Step::Publish(13, vec![("g", Committed)], vec![(9, ev("g", Committed, 13, 0))]),
        ];
        let mut core = NotifyCore::new();
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Step::Watch(sub, tx, known, want) => {
                    assert_eq!(core.watch(sub, id(tx), known), want, "step {i}")
                }
                Step::Publish(block, st, want) => {
                    let st: Vec<(TxId, Status)> = st.into_iter().map(|(t, s)| (id(t), s)).collect();
                    assert_eq!(core.publish(block, st.clone()), want, "step {i}");
                }
                Step::Remove(sub, want) => assert_eq!(core.remove(sub), want, "step {i}"),
            }
        }
        assert_eq!(core.watched(), 0);
        assert!(core.by_sub.is_empty());
        assert_eq!(core.total_bytes(), 0);
    }

    #[test]
    fn counts_and_bytes_follow_each_subscriber() {
        let mut core = NotifyCore::new();
        let ids = ["a", "b", "c"];
        for t in ids {
            assert_eq!(core.watch(1, id(t), None), None);
        }
        assert_eq!(core.watch(2, id("b"), None), None);
        assert_eq!(core.watch(2, id("b"), None), None, "watching twice counts once");
        let each = registration_bytes(&id("a"));
        assert_eq!((core.pending(1), core.bytes_of(1)), (3, 3 * each));
        assert_eq!((core.pending(2), core.bytes_of(2)), (1, each));
        assert_eq!(core.total_bytes(), 4 * each);
        assert_eq!(core.watched(), 3);
        // Subscriber 1 leaves: "b" still waits for subscriber 2.
        assert_eq!(core.remove(1), 3);
        assert_eq!((core.pending(1), core.bytes_of(1)), (0, 0));
        assert_eq!(core.watched(), 1);
        assert_eq!(core.total_bytes(), each);
        let st = vec![(id("a"), Status::Committed), (id("b"), Status::Committed)];
        assert_eq!(core.publish(3, st), vec![(2, ev("b", Status::Committed, 3, 1))]);
        assert_eq!((core.watched(), core.total_bytes(), core.pending(2)), (0, 0, 0));
        assert!(core.by_sub.is_empty());
    }

    struct Fixed(HashMap<TxId, (Status, Height)>);

    impl StatusLookup for Fixed {
        fn lookup(&self, id: &TxId) -> Option<(Status, Height)> {
            self.0.get(id).copied()
        }
    }

    fn notifier(capacity: usize) -> Notifier {
        let known = HashMap::from([(id("old"), (Status::Committed, Height::new(0, 0)))]);
        Notifier::new(
            NotifierConfig {
                capacity: NonZeroUsize::new(capacity).unwrap(),
                ..NotifierConfig::default()
            },
            Arc::new(Fixed(known)),
        )
    }

    #[test]
    fn shell_delivers_once_and_unsubscribes_on_drop() {
        let n = notifier(8);
        let mut s = n.subscribe();
        let now = s.watch([id("old"), id("new")]).unwrap();
        assert_eq!(now, vec![ev("old", Status::Committed, 0, 0)]);
        assert_eq!(s.pending(), 1);
        assert_eq!(
            n.publish(3, vec![(id("new"), Status::AbortedSignatureInvalid)])
                .delivered,
            1
        );
        assert_eq!(
            s.try_recv().unwrap(),
            Some(ev("new", Status::AbortedSignatureInvalid, 3, 0))
        );
        assert_eq!(n.publish(4, vec![(id("new"), Status::Committed)]).delivered, 0);
        assert_eq!(s.try_recv().unwrap(), None);
        s.watch([id("later")]).unwrap();
        assert_eq!((n.subscribers(), n.watched()), (1, 1));
        drop(s);
        assert_eq!((n.subscribers(), n.watched()), (0, 0));
        assert_eq!(n.publish(5, vec![(id("later"), Status::Committed)]).delivered, 0);
    }

    #[test]
    fn full_subscriber_is_dropped_without_stalling_others() {
        let n = notifier(2);
        let mut slow = n.subscribe();
        let mut fast = n.subscribe();
        let ids: Vec<TxId> = (0..5).map(|i| id(&format!("t{i}"))).collect();
        slow.watch(ids.clone()).unwrap();
        fast.watch(ids.clone()).unwrap();
        let mut got = Vec::new();
        for (b, i) in ids.iter().enumerate() {
            let report = n.publish(b as u64, vec![(i.clone(), Status::Committed)]);
            if b == 2 {
                assert_eq!(report.dropped, vec![slow.id()]);
            }
            got.push(fast.try_recv().unwrap().unwrap().id);
        }
        assert_eq!(got, ids);
        // The slow one gets what was buffered, then the error; watching fails too.
        assert_eq!(slow.try_recv().unwrap().unwrap().id, ids[0]);
        assert_eq!(slow.try_recv().unwrap().unwrap().id, ids[1]);
        assert!(matches!(
            slow.try_recv(),
            Err(Error::SubscriptionLagged { capacity: 2 })
        ));
        assert!(matches!(
            slow.watch([id("x")]),
            Err(Error::SubscriptionLagged { .. })
        ));
        assert_eq!(n.subscribers(), 1);
    }

    /// A subscriber that overflows in the middle of one block is dropped once; the
    /// block's later events skip it and still reach the others.
    #[test]
    fn overflow_within_one_block_drops_once() {
        let n = notifier(2);
        let slow = n.subscribe();
        let mut fast = n.subscribe();
        let ids: Vec<TxId> = (0..6).map(|i| id(&format!("t{i}"))).collect();
        slow.watch(ids.clone()).unwrap();
        let fast_ids = ids[..2].to_vec();
        fast.watch(fast_ids.clone()).unwrap();
        let statuses: Vec<(TxId, Status)> = ids.iter().map(|i| (i.clone(), Status::Committed)).collect();
        let report = n.publish(0, statuses.clone());
        assert_eq!(report.dropped, vec![slow.id()]);
        assert_eq!(report.delivered, 2 + 2);
        let got = [
            fast.try_recv().unwrap().unwrap().id,
            fast.try_recv().unwrap().unwrap().id,
        ];
        assert_eq!(got.to_vec(), fast_ids);
        assert_eq!(n.subscribers(), 1);
        assert_eq!(n.watched(), 0);
    }

    #[tokio::test]
    async fn recv_ends_when_the_notifier_is_gone() {
        let n = notifier(4);
        let mut s = n.subscribe();
        s.watch([id("a")]).unwrap();
        n.publish(0, vec![(id("a"), Status::Committed)]);
        drop(n);
        assert_eq!(s.recv().await.unwrap().unwrap().id, id("a"));
        assert_eq!(s.recv().await.unwrap(), None);
        assert!(matches!(s.watch([id("b")]), Err(Error::NotifierClosed)));
    }
}
