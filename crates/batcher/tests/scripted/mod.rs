//! A scripted consenter for the node tests: test scaffolding, not a product mock (the
//! real consenter is crates/consenter). It implements `BftConsensus.Submit`, decoding
//! each request as a `ConsenterRequest` with the batcher's codec and checking its
//! signature, counts BAFs per (term, batch, digest) and complaints per (shard, term),
//! and serves `Consenter.Decisions`: a decision orders every batch of a shard's current
//! term with f+1 BAFs (one header each, in seq order), or moves a shard's term on f+1
//! complaints. It remembers every digest attested for each (term, id), so tests can
//! assert that no batcher signed two batches under one id.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use batcher::codec::{ConsenterRequest, decode_consenter_request};
use crypto::PublicKey;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};
use types::PartyId;
use types::digest::Digest32;
use wire::pb;
use wire::pb::bft_consensus_server::{BftConsensus, BftConsensusServer};
use wire::pb::consenter_server::{Consenter, ConsenterServer};

/// (term, shard, primary, seq).
pub type Key = (u64, u32, u32, u64);

#[derive(Default)]
struct State {
    paused: bool,
    seen: HashSet<Vec<u8>>,
    bafs: BTreeMap<(Key, Digest32, u32), BTreeSet<PartyId>>,
    digests: BTreeMap<Key, BTreeSet<Digest32>>,
    ordered: BTreeSet<Key>,
    terms: BTreeMap<u32, u64>,
    last_ordered: BTreeMap<u32, u64>,
    complaints: BTreeMap<(u32, u64), BTreeSet<PartyId>>,
    decisions: Vec<pb::Decision>,
    blocks: u64,
    submits: u64,
}

/// The scripted consenter (one for all parties).
pub struct Scripted {
    state: Mutex<State>,
    version: watch::Sender<usize>,
    keys: BTreeMap<PartyId, PublicKey>,
    threshold: usize,
}

#[derive(Clone)]
struct Svc(Arc<Scripted>);

impl Scripted {
    /// Serves on a free loopback port; returns it and its address.
    pub async fn start(keys: BTreeMap<PartyId, PublicKey>, f: usize) -> (Arc<Scripted>, SocketAddr) {
        let s = Arc::new(Scripted {
            state: Mutex::new(State::default()),
            version: watch::Sender::new(0),
            keys,
            threshold: f + 1,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tonic::transport::Server::builder()
            .add_service(BftConsensusServer::new(Svc(s.clone())))
            .add_service(ConsenterServer::new(Svc(s.clone())));
        tokio::spawn(server.serve_with_incoming(TcpListenerStream::new(listener)));
        (s, addr)
    }

    /// Stops ordering (BAFs are still counted).
    pub fn pause(&self) {
        self.state.lock().unwrap().paused = true;
    }

    /// Orders again, at once, what gathered f+1 BAFs meanwhile.
    pub fn resume(&self) {
        let mut st = self.state.lock().unwrap();
        st.paused = false;
        self.order_ready(&mut st);
    }

    /// Every (term, id) attested with more than one digest: must stay empty.
    pub fn equivocations(&self) -> Vec<Key> {
        let st = self.state.lock().unwrap();
        st.digests
            .iter()
            .filter(|(_, d)| d.len() > 1)
            .map(|(k, _)| *k)
            .collect()
    }

    /// The headers of every decision so far.
    pub fn headers(&self) -> Vec<pb::OrderedHeader> {
        let st = self.state.lock().unwrap();
        st.decisions.iter().flat_map(|d| d.headers.clone()).collect()
    }

    /// Decisions so far.
    pub fn decisions(&self) -> usize {
        self.state.lock().unwrap().decisions.len()
    }

    /// Distinct BAFs of `(term, shard, primary, seq)` seen so far (by signer).
    pub fn baf_signers(&self, key: Key) -> BTreeSet<PartyId> {
        let st = self.state.lock().unwrap();
        st.bafs
            .iter()
            .filter(|((k, _, _), _)| *k == key)
            .flat_map(|(_, s)| s.iter().copied())
            .collect()
    }

    /// Batches attested (any signer) but not ordered.
    pub fn attested_unordered(&self) -> usize {
        let st = self.state.lock().unwrap();
        st.digests.keys().filter(|k| !st.ordered.contains(k)).count()
    }

    /// Moves `shard` to the next term now.
    pub fn next_term(&self, shard: u32) {
        let mut st = self.state.lock().unwrap();
        self.change_term(&mut st, shard);
    }

    fn push(&self, st: &mut State, headers: Vec<pb::OrderedHeader>, terms: Vec<pb::TermChange>) {
        let number = st.decisions.len() as u64 + 1;
        st.decisions.push(pb::Decision {
            headers,
            signatures: vec![],
            number,
            view: 0,
            requests_root: vec![],
            metadata: vec![],
            terms,
            config: vec![],
        });
        self.version.send_replace(st.decisions.len());
    }

    fn change_term(&self, st: &mut State, shard: u32) {
        let term = st.terms.get(&shard).copied().unwrap_or(0) + 1;
        st.terms.insert(shard, term);
        let last = st.last_ordered.get(&shard).copied().unwrap_or(0);
        let change = pb::TermChange {
            shard,
            term,
            last_ordered_seq: last,
        };
        self.push(st, vec![], vec![change]);
    }

    fn order_ready(&self, st: &mut State) {
        if st.paused {
            return;
        }
        let ready: Vec<(Key, Digest32, u32)> = st
            .bafs
            .iter()
            .filter(|((k, _, _), signers)| {
                signers.len() >= self.threshold
                    && !st.ordered.contains(k)
                    && st.terms.get(&k.1).copied().unwrap_or(0) == k.0
            })
            .map(|(k, _)| *k)
            .collect();
        if ready.is_empty() {
            return;
        }
        let decision = st.decisions.len() as u64 + 1;
        let mut headers = Vec::new();
        for (index, (key, digest, tx_count)) in ready.into_iter().enumerate() {
            st.ordered.insert(key);
            let last = st.last_ordered.entry(key.1).or_insert(0);
            *last = (*last).max(key.3);
            headers.push(pb::OrderedHeader {
                number: st.blocks,
                previous_hash: vec![],
                batch_digest: digest.to_vec(),
                shard: key.1,
                primary: key.2,
                seq: key.3,
                term: key.0,
                decision,
                index: index as u32,
                tx_count,
            });
            st.blocks += 1;
        }
        self.push(st, headers, vec![]);
    }

    fn on_request(&self, bytes: Vec<u8>) -> Result<(), Status> {
        let request =
            decode_consenter_request(&bytes).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let mut st = self.state.lock().unwrap();
        st.submits += 1;
        if !st.seen.insert(bytes) {
            return Ok(());
        }
        match request {
            ConsenterRequest::Baf(baf) => {
                let key = self
                    .keys
                    .get(&baf.signer)
                    .ok_or_else(|| Status::invalid_argument("signer"))?;
                let primary = self
                    .keys
                    .get(&baf.header.id.primary)
                    .ok_or_else(|| Status::invalid_argument("primary"))?;
                if !baf.verifies(key) || !baf.primary_verifies(primary) {
                    return Err(Status::invalid_argument("bad BAF signature"));
                }
                let h = baf.header;
                let k = (h.term, h.id.shard, h.id.primary, h.id.seq);
                st.digests.entry(k).or_default().insert(h.digest);
                st.bafs
                    .entry((k, h.digest, h.tx_count))
                    .or_default()
                    .insert(baf.signer);
                self.order_ready(&mut st);
            }
            ConsenterRequest::Complaint(c) => {
                let key = self
                    .keys
                    .get(&c.signer)
                    .ok_or_else(|| Status::invalid_argument("signer"))?;
                if !c.verifies(key) {
                    return Err(Status::invalid_argument("bad complaint signature"));
                }
                let current = st.terms.get(&c.shard).copied().unwrap_or(0);
                let signers = st.complaints.entry((c.shard, c.term)).or_default();
                signers.insert(c.signer);
                if signers.len() >= self.threshold && c.term == current {
                    self.change_term(&mut st, c.shard);
                }
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl BftConsensus for Svc {
    async fn exchange(
        &self,
        _r: Request<Streaming<pb::BftEnvelope>>,
    ) -> Result<Response<pb::BftExchangeSummary>, Status> {
        Err(Status::unimplemented("scripted consenter"))
    }

    async fn submit(
        &self,
        r: Request<pb::BftSubmitRequest>,
    ) -> Result<Response<pb::BftSubmitResponse>, Status> {
        self.0.on_request(r.into_inner().request)?;
        Ok(Response::new(pb::BftSubmitResponse {
            accepted: true,
            decided_seq: 0,
        }))
    }

    async fn status(
        &self,
        _r: Request<pb::BftStatusRequest>,
    ) -> Result<Response<pb::BftStatusResponse>, Status> {
        Err(Status::unimplemented("scripted consenter"))
    }
}

#[tonic::async_trait]
impl Consenter for Svc {
    type DecisionsStream = ReceiverStream<Result<pb::Decision, Status>>;

    async fn decisions(
        &self,
        r: Request<pb::DecisionsRequest>,
    ) -> Result<Response<Self::DecisionsStream>, Status> {
        let mut next = r.into_inner().from.max(1);
        let (tx, rx) = mpsc::channel(4);
        let me = self.0.clone();
        tokio::spawn(async move {
            let mut version = me.version.subscribe();
            loop {
                version.borrow_and_update();
                let d = me.state.lock().unwrap().decisions.get(next as usize - 1).cloned();
                if let Some(d) = d {
                    if tx.send(Ok(d)).await.is_err() {
                        return;
                    }
                    next += 1;
                    continue;
                }
                tokio::select! {
                    r = version.changed() => if r.is_err() { return; },
                    () = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
