#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Property tests: four correct batchers of one shard, a simulated shell (fsyncs, pulls,
//! acks, forwards) and a simulated consenter (orders batches with f+1 BAFs, moves the term
//! on f+1 complaints or at random), driven by random operations. Invariants are checked
//! after every input; liveness at the end, after the terms settle and time advances.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use batcher::{Batcher, Input, Output, RequestDigest, SignedBatch, TermInfo};
use common::{N, batcher, config, req};
use proptest::prelude::*;
use types::digest::Digest32;
use types::{BatchId, PartyId};

#[derive(Debug, Clone)]
enum Op {
    /// A client sends request `i` of `len` bytes to the routers in `mask` (bit p-1 = party p).
    Submit { i: u16, len: u8, mask: u8 },
    /// Time advances.
    Tick(u16),
    /// The shells do up to this much queued work (fsyncs, messages, pulls).
    Deliver(u8),
    /// The consenters order what has f+1 BAFs.
    Order,
    /// The consenters move the shard to the next term.
    TermChange,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..60, 4u8..100, 1u8..16).prop_map(|(i, len, mask)| Op::Submit { i, len, mask }),
        3 => (0u16..80).prop_map(Op::Tick),
        4 => (1u8..30).prop_map(Op::Deliver),
        2 => Just(Op::Order),
        1 => Just(Op::TermChange),
    ]
}

struct Sim {
    bs: Vec<Batcher>,
    now: u64,
    term: u64,
    last_ordered: u64,
    queue: VecDeque<(PartyId, Input)>,
    /// (party, id, digest) the shell confirmed to each batcher.
    persisted: HashSet<(PartyId, BatchId, Digest32)>,
    /// What each party serves, for the current term.
    served: HashMap<(PartyId, BatchId), Arc<SignedBatch>>,
    pulls: BTreeMap<PartyId, BatchId>,
    bafs: HashMap<(BatchId, Digest32), BTreeSet<PartyId>>,
    complaints: BTreeMap<u64, BTreeSet<PartyId>>,
    batches: HashMap<Digest32, Arc<SignedBatch>>,
    ordered: HashSet<RequestDigest>,
    /// Digests each party admitted from its router.
    admitted: Vec<HashSet<RequestDigest>>,
    /// A batcher hears a tick only once its `next_deadline` has come, as the node's shell
    /// does; otherwise at every `Op::Tick`.
    deadline_ticks: bool,
}

impl Sim {
    fn new(deadline_ticks: bool) -> Sim {
        Sim {
            bs: (1..=N).map(batcher).collect(),
            now: 0,
            term: 0,
            last_ordered: 0,
            queue: VecDeque::new(),
            persisted: HashSet::new(),
            served: HashMap::new(),
            pulls: BTreeMap::new(),
            bafs: HashMap::new(),
            complaints: BTreeMap::new(),
            batches: HashMap::new(),
            ordered: HashSet::new(),
            admitted: vec![HashSet::new(); N as usize],
            deadline_ticks,
        }
    }

    /// Feeds one input; returns how many outputs it gave.
    fn feed(&mut self, p: PartyId, input: Input) -> usize {
        let idx = (p - 1) as usize;
        let knew = match &input {
            Input::Request(r) => Some(self.bs[idx].knows(&RequestDigest::of(r))),
            _ => None,
        };
        if let Input::Persisted { id, digest } = &input {
            self.persisted.insert((p, *id, *digest));
        }
        let out = self.bs[idx].handle(input);
        self.check_state(p);
        let count = out.len();
        for o in out {
            self.on_output(p, o, knew);
        }
        count
    }

    fn check_state(&self, p: PartyId) {
        let b = &self.bs[(p - 1) as usize];
        let cfg = config(p, 1);
        let (count, bytes) = b.pending();
        assert!(
            count <= cfg.mempool_max_requests.get(),
            "party {p}: {count} pending"
        );
        assert!(
            bytes <= cfg.mempool_max_bytes.get(),
            "party {p}: {bytes} pending bytes"
        );
        assert!(
            b.unconfirmed_batches() <= cfg.window.get() as usize,
            "party {p}: window"
        );
        assert!(
            b.unordered_batches() <= cfg.max_unordered_batches.get() as usize,
            "party {p}: unordered"
        );
    }

    fn on_output(&mut self, p: PartyId, o: Output, knew: Option<bool>) {
        match o {
            Output::Persist(b) => {
                self.batches.insert(b.header.digest, Arc::clone(&b));
                self.queue.push_back((
                    p,
                    Input::Persisted {
                        id: b.id(),
                        digest: b.header.digest,
                    },
                ));
            }
            Output::Serve(b) => {
                self.served.insert((p, b.id()), b);
            }
            Output::SendBaf(baf) => {
                let key = (p, baf.header.id, baf.header.digest);
                assert!(
                    self.persisted.contains(&key),
                    "party {p} sent a BAF before Persisted"
                );
                assert_eq!(baf.signer, p);
                self.bafs
                    .entry((baf.header.id, baf.header.digest))
                    .or_default()
                    .insert(p);
            }
            Output::SendEvidence(baf) => panic!("evidence of equivocation with a correct primary: {baf:?}"),
            Output::AckPrimary { to, baf } => {
                let key = (p, baf.header.id, baf.header.digest);
                assert!(self.persisted.contains(&key), "party {p} acked before Persisted");
                self.queue.push_back((to, Input::Baf(baf)));
            }
            Output::ForwardToPrimary { to, request } => {
                self.queue.push_back((to, Input::Forwarded { from: p, request }));
            }
            Output::Complain(c) => {
                assert!(!self.bs[(p - 1) as usize].is_primary() || c.term != self.term);
                let set = self.complaints.entry(c.term).or_default();
                assert!(set.insert(p), "party {p} complained twice in term {}", c.term);
            }
            Output::Pull(id) => {
                self.pulls.insert(p, id);
            }
            Output::Admitted { digest } => {
                assert_eq!(knew, Some(false), "party {p} admitted a request it knew");
                self.admitted[(p - 1) as usize].insert(digest);
            }
            Output::Refused { .. } => {}
            Output::NeedFullBatch { from, id, digest } => {
                // The shell fetches the full batch from the primary.
                let b = self.served.get(&(from, id)).filter(|b| b.header.digest == digest);
                let b = b.expect("the primary serves the batch it served compact");
                self.queue.push_back((
                    p,
                    Input::Batch {
                        from,
                        batch: (**b).clone(),
                    },
                ));
            }
            Output::BatchRejected { error, .. } => panic!("correct primary's batch rejected: {error}"),
        }
    }

    fn deliver(&mut self, mut budget: usize) {
        while budget > 0 {
            budget -= 1;
            if let Some((p, input)) = self.queue.pop_front() {
                self.feed(p, input);
                continue;
            }
            // Nothing queued: serve one pull that can be served.
            let ready = self.pulls.iter().find_map(|(p, id)| {
                self.served
                    .get(&(id.primary, *id))
                    .map(|b| (*p, id.primary, Arc::clone(b)))
            });
            let Some((p, from, b)) = ready else { return };
            self.pulls.remove(&p);
            // Served compact, as the nodes do (docs/batcher.md "Compact pulls"): rebuilt
            // from the pending requests, or fetched whole.
            let digests = b.requests.iter().map(|r| RequestDigest::of(r)).collect();
            self.feed(
                p,
                Input::CompactBatch {
                    from,
                    batch: batcher::CompactBatch::of(&b, digests),
                },
            );
        }
    }

    fn order(&mut self) {
        let primary = batcher::primary_of(0, self.term, &arma::Parties::contiguous(N));
        loop {
            let id = BatchId::new(0, primary, self.last_ordered + 1);
            let attested = self
                .bafs
                .iter()
                .find(|((bid, _), signers)| *bid == id && signers.len() >= 2)
                .map(|((_, d), _)| *d);
            let Some(digest) = attested else { return };
            let requests = self.batches[&digest].requests.clone();
            for r in &requests {
                assert!(
                    self.ordered.insert(RequestDigest::of(r)),
                    "a request was ordered twice"
                );
            }
            self.last_ordered += 1;
            for p in 1..=N {
                self.feed(
                    p,
                    Input::Ordered {
                        id,
                        requests: requests.clone(),
                    },
                );
            }
        }
    }

    fn term_change(&mut self) {
        self.order();
        self.term += 1;
        // The shells stop serving and pulling the old term's batches; BAFs of unordered
        // batches of the old term are void.
        self.served.clear();
        self.pulls.clear();
        self.bafs.clear();
        let info = TermInfo {
            term: self.term,
            last_ordered_seq: self.last_ordered,
        };
        for p in 1..=N {
            self.feed(p, Input::TermChanged(info));
        }
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Submit { i, len, mask } => {
                let r = req(u32::from(i), usize::from(len));
                for p in 1..=N {
                    if mask & (1 << (p - 1)) != 0 {
                        self.feed(p, Input::Request(r.clone()));
                    }
                }
            }
            Op::Tick(dt) => {
                self.now += u64::from(dt);
                for p in 1..=N {
                    let b = &mut self.bs[(p - 1) as usize];
                    let due = b.next_deadline();
                    let early = due.is_none_or(|d| self.now < d);
                    if early && self.deadline_ticks {
                        // The node's shell sleeps until the deadline: only its clock moves.
                        b.advance_clock(self.now);
                        continue;
                    }
                    let outputs = self.feed(p, Input::Tick(self.now));
                    assert!(
                        !early || outputs == 0,
                        "party {p}: a tick at {} before the deadline {due:?} gave {outputs} outputs",
                        self.now
                    );
                }
            }
            Op::Deliver(k) => self.deliver(usize::from(k)),
            Op::Order => self.order(),
            Op::TermChange => self.term_change(),
        }
        let complained = self.complaints.get(&self.term).map_or(0, BTreeSet::len);
        if complained >= 2 {
            self.term_change();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Bounds, window, no attestation before Persisted and dedup hold after every input,
    /// and a tick before a batcher's `next_deadline` gives nothing; once terms settle,
    /// every request the primary admitted ends in an ordered batch, no request is ordered
    /// twice, and every batcher's mempool drains — also when each batcher hears a tick
    /// only at its deadline, as the node does.
    #[test]
    fn four_correct_batchers(
        ops in proptest::collection::vec(op(), 1..120),
        deadline_ticks in any::<bool>(),
    ) {
        let mut sim = Sim::new(deadline_ticks);
        for p in 1..=N {
            sim.feed(p, Input::Tick(0));
        }
        for op in ops {
            sim.apply(op);
        }
        // Settle: time advances and the shells do all their work; the term moves only on
        // f+1 complaints (a primary whose mempool was full drops a forwarded request, and
        // the secondaries holding it complain: SmartBFT's forward-once-then-complain).
        for _ in 0..60 {
            sim.apply(Op::Tick(60));
            sim.deliver(10_000);
            sim.order();
        }
        let settled_term = sim.term;
        for _ in 0..20 {
            sim.apply(Op::Tick(60));
            sim.deliver(10_000);
            sim.order();
        }
        prop_assert_eq!(sim.term, settled_term, "the terms did not settle");
        let primary = batcher::primary_of(0, sim.term, &arma::Parties::contiguous(N));
        let pb = &sim.bs[(primary - 1) as usize];
        prop_assert_eq!(pb.pending(), (0, 0));
        prop_assert_eq!(pb.unordered_batches(), 0);
        for d in &sim.admitted[(primary - 1) as usize] {
            prop_assert!(sim.ordered.contains(d), "an admitted request was never ordered");
        }
        for b in &sim.bs {
            prop_assert_eq!(b.pending(), (0, 0));
        }
    }

    /// A lone batcher fed arbitrary requests keeps its bounds and never admits a request it
    /// holds; each admitted request is refused as a duplicate while held.
    #[test]
    fn mempool_bounds_and_dedup(reqs in proptest::collection::vec((0u16..40, 1u8..120), 1..200)) {
        let mut b = batcher(2);
        let cfg = config(2, 1);
        let mut held: HashSet<RequestDigest> = HashSet::new();
        for (i, len) in reqs {
            let r = req(u32::from(i), usize::from(len));
            let d = RequestDigest::of(&r);
            let out = b.handle(Input::Request(r.clone()));
            let admitted = out.contains(&Output::Admitted { digest: d });
            prop_assert!(!(admitted && held.contains(&d)));
            if held.contains(&d) {
                let duplicate = Output::Refused { digest: d, reason: batcher::RefuseReason::Duplicate };
                prop_assert!(out.contains(&duplicate));
            }
            if admitted {
                held.insert(d);
            }
            let (count, bytes) = b.pending();
            prop_assert!(count <= cfg.mempool_max_requests.get());
            prop_assert!(bytes <= cfg.mempool_max_bytes.get());
            prop_assert_eq!(count, held.len());
        }
    }
}

#[derive(Debug, Clone)]
enum Tamper {
    /// Flip one bit of one request's bytes.
    FlipRequestBit { request: usize, bit: usize },
    /// Drop one request.
    DropRequest(usize),
    /// Repeat one request at the end.
    RepeatRequest(usize),
    /// Change the header's tx count.
    TxCount(u32),
    /// Flip one bit of the header digest.
    FlipDigestBit(usize),
    /// Flip one bit of the signature.
    FlipSignatureBit(usize),
    /// Claim another seq (the signature covers it).
    Seq(u64),
}

fn tamper() -> impl Strategy<Value = Tamper> {
    prop_oneof![
        (0usize..8, 0usize..800).prop_map(|(request, bit)| Tamper::FlipRequestBit { request, bit }),
        (0usize..8).prop_map(Tamper::DropRequest),
        (0usize..8).prop_map(Tamper::RepeatRequest),
        (0u32..10).prop_map(Tamper::TxCount),
        (0usize..256).prop_map(Tamper::FlipDigestBit),
        (0usize..512).prop_map(Tamper::FlipSignatureBit),
        (0u64..4).prop_map(Tamper::Seq),
    ]
}

fn apply_tamper(b: &mut SignedBatch, t: &Tamper) {
    let n = b.requests.len();
    match *t {
        Tamper::FlipRequestBit { request, bit } => {
            let r = &mut b.requests[request % n];
            let mut bytes = r.to_vec();
            let i = bit / 8 % bytes.len();
            bytes[i] ^= 1 << (bit % 8);
            *r = Arc::from(bytes);
        }
        Tamper::DropRequest(i) => {
            b.requests.remove(i % n);
        }
        Tamper::RepeatRequest(i) => {
            let r = b.requests[i % n].clone();
            b.requests.push(r);
        }
        Tamper::TxCount(c) => b.header.tx_count = c,
        Tamper::FlipDigestBit(bit) => b.header.digest[bit / 8] ^= 1 << (bit % 8),
        Tamper::FlipSignatureBit(bit) => {
            let mut sig = b.signature.as_bytes().to_vec();
            let i = bit / 8 % sig.len();
            sig[i] ^= 1 << (bit % 8);
            b.signature = crypto::Signature::from_bytes(sig);
        }
        Tamper::Seq(s) => b.header.id.seq = s,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A signed batch verifies, and any tampering that changes it makes it fail.
    #[test]
    fn tampered_batches_never_verify(
        lens in proptest::collection::vec(4usize..80, 1..=3),
        t in tamper(),
    ) {
        let cfg = config(2, 1);
        let requests: Vec<_> = lens.iter().enumerate().map(|(i, l)| req(i as u32, *l)).collect();
        let good = SignedBatch::sign(BatchId::new(0, 1, 1), 0, requests, &common::key(1));
        prop_assert_eq!(batcher::verify_batch(&cfg, &good), Ok(()));
        let mut bad = good.clone();
        apply_tamper(&mut bad, &t);
        if bad != good {
            prop_assert!(batcher::verify_batch(&cfg, &bad).is_err(), "{:?} verified", t);
        }
    }
}
