#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! The sidecar reading its blocks from the orderer (`sidecar::orderer`, `Feed::Orderer`):
//! fake assemblers on loopback serve a chain of consenter-signed ordered blocks whose
//! requests are the envelopes of a random workload (plus malformed requests and an empty
//! block), and a sidecar node with in-process stages over an embedded state database
//! commits them.
//!
//! - honest: every block is stored with the serial oracle's statuses, a request that is no
//!   envelope (`MALFORMED_BAD_ENVELOPE`, not stored under any id) and an envelope with an
//!   undecodable payload (`MALFORMED_BAD_ENVELOPE_PAYLOAD`) at their positions;
//! - Byzantine first assembler: a block with a swapped request, a self-consistent block
//!   signed below quorum, or a block without its requests is refused, the next assembler
//!   serves from that block on, and the stored chain is the honest one, byte for byte;
//! - restart: a new node on the same store and state database resumes at the store's next
//!   block, asks (after failing over from a dead endpoint) for the block before it to
//!   anchor the chain, and commits the rest;
//! - `orderer::check` refuses a block without all its requests (headers only, one
//!   missing), off the chain or below quorum; `orderer::to_block` keeps refused requests
//!   at their positions.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arma::{ClusterKeys, DecisionProof, OrderedHeader, Outcome, Request};
use assembler::store::encode_block;
use bft::{InstanceId, Phase};
use committer::{LocalCommitter, LocalVerifier};
use crypto::{Scheme, derive_signing_key};
use prost::Message;
use sidecar::node::{Config, Deps, Feed, Handle};
use sidecar::orderer::OrdererConfig;
use sidecar::store::BlockStore;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::transport::Channel;
use types::digest::{Digest32, batch_digest};
use types::{NamespacePolicy, Status, Tx, TxId};
use wire::node::Node as _;
use wire::pb;
use wire::pb::assembler_server::{Assembler, AssemblerServer};
use wire::pb::sidecar_client::SidecarClient;

/// Consenters (a quorum is 3).
const N: u32 = 4;
/// Workload seed and size (the empty block comes on top).
const SEED: u64 = 0x0bd3_5eed;
const WORKLOAD_BLOCKS: usize = 7;
/// Where the empty block goes in the chain.
const EMPTY_BLOCK: usize = 4;
/// Longest wait for a condition.
const DEADLINE: Duration = Duration::from_secs(15);

// ------------------------------------------------------------------ signed ordered blocks

fn consenter_key(i: u32) -> crypto::SigningKey {
    derive_signing_key(Scheme::Ed25519, &format!("sidecar-orderer-test-consenter-{i}"))
}

fn cluster_keys() -> ClusterKeys {
    ClusterKeys::new((0..N).map(|i| consenter_key(i).public_key()).collect())
}

/// A decision over `headers`, with the commit signatures of `signers` (replica ids).
fn signed_proof(decision: u64, headers: &[OrderedHeader], signers: &[u32]) -> Arc<DecisionProof> {
    let metadata = Outcome {
        headers: headers.to_vec(),
        terms: Vec::new(),
        config: None,
    }
    .metadata();
    let requests_root = [7u8; 32];
    let digest = bft::proposal_digest(InstanceId(0), decision, &requests_root, &metadata);
    let bytes = bft::vote_bytes(
        &cluster_keys().chain_id(),
        Phase::Commit,
        InstanceId(0),
        0,
        decision,
        &digest,
    );
    let signatures = signers
        .iter()
        .map(|i| {
            let sig = crypto::sign_decision_certificate(&consenter_key(*i), &bytes);
            (*i, bft::Signature(sig.into_bytes()))
        })
        .collect();
    Arc::new(DecisionProof {
        instance: InstanceId(0),
        decision,
        view: 0,
        requests_root,
        metadata,
        signatures,
    })
}

/// The header of block `number` carrying `requests` (one decision per block).
fn header(number: u64, previous_hash: Digest32, requests: &[Vec<u8>]) -> OrderedHeader {
    OrderedHeader {
        number,
        previous_hash,
        digest: batch_digest(requests),
        shard: (number % 2) as u32,
        term: 0,
        primary: 1,
        seq: number / 2 + 1,
        decision: number + 1,
        index: 0,
        tx_count: requests.len() as u32,
    }
}

/// The wire form of an ordered block, its decision signed by `signers`.
fn ordered_block(header: OrderedHeader, requests: &[Vec<u8>], signers: &[u32]) -> pb::OrderedBlock {
    encode_block(
        &assembler::core::Block {
            header,
            requests: requests.iter().map(|r| Request::from(r.as_slice())).collect(),
            proof: signed_proof(header.decision, &[header], signers),
        },
        false,
    )
}

// ------------------------------------------------------------------ requests

fn identity() -> pb::Identity {
    pb::Identity {
        msp_id: "orderer-test".into(),
        creator: Some(pb::identity::Creator::CertificateId("orderer-test".into())),
    }
}

/// The envelope of tx `id`, as a client would submit it.
fn envelope(id: &TxId, tx: &Tx) -> Vec<u8> {
    pb::Envelope {
        signature: vec![],
        payload: pb::Tx::from(tx).encode_to_vec(),
        identity: Some(identity()),
        tx_id: id.0.clone(),
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
    .encode_to_vec()
}

/// A request that does not decode as an envelope.
fn not_an_envelope() -> Vec<u8> {
    let raw = vec![0xff; 9];
    assert!(pb::Envelope::decode(raw.as_slice()).is_err());
    raw
}

/// An envelope of tx `id` whose payload does not decode as a tx.
fn bad_payload(id: &str) -> Vec<u8> {
    let payload = vec![0xff; 5];
    assert!(pb::Tx::decode(payload.as_slice()).is_err());
    pb::Envelope {
        signature: vec![],
        payload,
        identity: Some(identity()),
        tx_id: id.into(),
        nonce: vec![],
        payload_type: pb::PayloadType::Tx as i32,
    }
    .encode_to_vec()
}

/// A valid envelope like `raw`'s under another id: tampered content that would be
/// stored under `id` if it were accepted.
fn renamed(raw: &[u8], id: &str) -> Vec<u8> {
    let mut env = pb::Envelope::decode(raw).unwrap();
    env.tx_id = id.into();
    env.encode_to_vec()
}

// ------------------------------------------------------------------ the workload as ordered

/// A random workload as the orderer ordered it, and what the sidecar must store.
struct Workload {
    meta_policy: NamespacePolicy,
    /// The requests of each block.
    requests: Vec<Vec<Vec<u8>>>,
    /// Headers of the honest chain.
    headers: Vec<OrderedHeader>,
    /// The honest chain, from block 0.
    blocks: Vec<pb::OrderedBlock>,
    /// (id, status) of every request of each block.
    expected: Vec<Vec<(String, Status)>>,
    /// Each block as the sidecar stores it.
    stored: Vec<Vec<u8>>,
}

impl Workload {
    fn len(&self) -> u64 {
        self.blocks.len() as u64
    }
}

/// The signers of block `number`: a quorum, not always the same one.
fn signers(number: u64) -> &'static [u32] {
    match number % 3 {
        0 => &[0, 1, 2, 3],
        1 => &[1, 2, 3],
        _ => &[3, 0, 2],
    }
}

/// Block-file workload (block 0 creates the namespaces), statuses by the serial oracle.
/// Malformed requests are added to blocks 1–3 (they do not touch the state, their ids are
/// unique) and an empty block is inserted at [`EMPTY_BLOCK`].
fn workload() -> Workload {
    let file = committer::blockfile::parse(&testkit::oracle::workload(SEED, WORKLOAD_BLOCKS)).unwrap();
    let (statuses, _) = testkit::oracle::serial(&file.meta_policy, &file.blocks).unwrap();
    let mut requests = Vec::new();
    let mut expected = Vec::new();
    for (block, statuses) in file.blocks.iter().zip(&statuses) {
        assert_eq!(block.txs.len(), statuses.len());
        requests.push(
            block
                .txs
                .iter()
                .map(|(id, tx)| envelope(id, tx))
                .collect::<Vec<_>>(),
        );
        expected.push(
            block
                .txs
                .iter()
                .zip(statuses)
                .map(|((id, _), s)| (id.0.clone(), *s))
                .collect::<Vec<_>>(),
        );
    }
    let garbage = || (not_an_envelope(), (String::new(), Status::MalformedBadEnvelope));
    let bad = |id: &str| {
        (
            bad_payload(id),
            (id.to_string(), Status::MalformedBadEnvelopePayload),
        )
    };
    let mut insert = |block: usize, at: usize, (raw, want): (Vec<u8>, (String, Status))| {
        let at = at.min(requests[block].len());
        requests[block].insert(at, raw);
        expected[block].insert(at, want);
    };
    insert(1, 0, garbage());
    insert(2, 1, bad("bad-payload-2"));
    insert(3, usize::MAX, garbage());
    insert(3, usize::MAX, bad("bad-payload-3"));
    requests.insert(EMPTY_BLOCK, Vec::new());
    expected.insert(EMPTY_BLOCK, Vec::new());

    let mut previous = [0u8; 32];
    let mut headers = Vec::new();
    let mut blocks = Vec::new();
    for (number, reqs) in requests.iter().enumerate() {
        let h = header(number as u64, previous, reqs);
        previous = h.hash();
        blocks.push(ordered_block(h, reqs, signers(number as u64)));
        headers.push(h);
    }
    let stored = stored_form(&blocks);
    Workload {
        meta_policy: file.meta_policy,
        requests,
        headers,
        blocks,
        expected,
        stored,
    }
}

/// Each block of an honest chain as the sidecar stores it (its txs as a `VcBatch`); every
/// block passes `orderer::check` on the chain.
fn stored_form(blocks: &[pb::OrderedBlock]) -> Vec<Vec<u8>> {
    let keys = cluster_keys();
    let verifier = arma::CertificateVerifier::new(keys.clone());
    let decoder = wire::ProstDecoder::default();
    let mut previous = None;
    let mut out = Vec::new();
    for b in blocks {
        let v = sidecar::orderer::check(
            b,
            previous,
            &keys.chain_id(),
            &verifier,
            &bft::Members::contiguous(N),
        )
        .unwrap();
        previous = Some((v.header.number, v.hash));
        let block = sidecar::orderer::to_block(b.clone(), &v, &decoder);
        out.push(wire::convert::block_to_vc_batch(&block).unwrap().encode_to_vec());
    }
    out
}

// ------------------------------------------------------------------ a fake assembler

type Item = Result<pb::OrderedBlock, tonic::Status>;

/// Serves `blocks` below `available` from any `from`, then follows (the stream stays open
/// until the client leaves); records every request.
#[derive(Clone)]
struct FakeAssembler {
    blocks: Arc<Vec<pb::OrderedBlock>>,
    available: watch::Receiver<u64>,
    requests: Arc<Mutex<Vec<pb::DeliverRequest>>>,
    open: Arc<AtomicUsize>,
}

/// Counts a stream as open until its serving task ends (the client left).
struct OpenStream(Arc<AtomicUsize>);

impl OpenStream {
    fn new(open: Arc<AtomicUsize>) -> OpenStream {
        open.fetch_add(1, Ordering::SeqCst);
        OpenStream(open)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tonic::async_trait]
impl Assembler for FakeAssembler {
    type DeliverStream = ReceiverStream<Item>;

    async fn fetch_batch(
        &self,
        _request: tonic::Request<pb::FetchRequest>,
    ) -> Result<tonic::Response<pb::Batch>, tonic::Status> {
        Err(tonic::Status::unimplemented("not used"))
    }

    async fn deliver(
        &self,
        request: tonic::Request<pb::DeliverRequest>,
    ) -> Result<tonic::Response<Self::DeliverStream>, tonic::Status> {
        let r = request.into_inner();
        self.requests.lock().unwrap().push(r);
        let (tx, rx) = mpsc::channel(4);
        let open = OpenStream::new(self.open.clone());
        tokio::spawn(follow(
            self.blocks.clone(),
            self.available.clone(),
            r.from,
            tx,
            open,
        ));
        Ok(tonic::Response::new(ReceiverStream::new(rx)))
    }
}

async fn follow(
    blocks: Arc<Vec<pb::OrderedBlock>>,
    mut available: watch::Receiver<u64>,
    from: u64,
    tx: mpsc::Sender<Item>,
    _open: OpenStream,
) {
    let mut next = from;
    loop {
        let upto = (*available.borrow_and_update()).min(blocks.len() as u64);
        while next < upto {
            if tx.send(Ok(blocks[next as usize].clone())).await.is_err() {
                return;
            }
            next += 1;
        }
        tokio::select! {
            () = tx.closed() => return,
            changed = available.changed() => {
                if changed.is_err() {
                    tx.closed().await;
                    return;
                }
            }
        }
    }
}

/// A running fake assembler.
struct FakeServer {
    url: String,
    available: watch::Sender<u64>,
    requests: Arc<Mutex<Vec<pb::DeliverRequest>>>,
    open: Arc<AtomicUsize>,
    server: JoinHandle<()>,
}

/// A stall probe: does the assembler hold block `from`?
fn is_probe(r: &pb::DeliverRequest) -> bool {
    r.headers_only && r.to == Some(r.from) && r.to_end
}

impl FakeServer {
    /// Serves `blocks` (the first `available` of them, until [`FakeServer::release`]).
    async fn start(blocks: Vec<pb::OrderedBlock>, available: u64) -> FakeServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (available_tx, available_rx) = watch::channel(available);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(AtomicUsize::new(0));
        let svc = FakeAssembler {
            blocks: Arc::new(blocks),
            available: available_rx,
            requests: requests.clone(),
            open: open.clone(),
        };
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(AssemblerServer::new(svc))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        FakeServer {
            url,
            available: available_tx,
            requests,
            open,
            server,
        }
    }

    /// Serves the blocks below `upto` from now on.
    fn release(&self, upto: u64) {
        self.available.send_replace(upto);
    }

    /// The `from` of every Deliver request so far that was not a stall probe (a probe
    /// asks for one header only); each asked for the full blocks and to follow.
    fn froms(&self) -> Vec<u64> {
        let requests = self.requests.lock().unwrap();
        let reads: Vec<&pb::DeliverRequest> = requests.iter().filter(|r| !is_probe(r)).collect();
        for r in &reads {
            assert_eq!((r.to, r.headers_only, r.to_end), (None, false, false), "{r:?}");
        }
        reads.iter().map(|r| r.from).collect()
    }

    fn open_streams(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// An endpoint nobody listens on.
async fn dead_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

// ------------------------------------------------------------------ the sidecar node

/// The state database (embedded), shared by the nodes of one test like a vcservice that
/// outlives a sidecar restart.
async fn state_db(dir: &Path) -> Arc<LocalCommitter> {
    let backend = vcservice::EmbeddedBackend::open(&dir.join("vc"), vcservice::Durability::NoSync).unwrap();
    let backend: Arc<dyn vcservice::Backend> = Arc::new(backend);
    backend.init_schema().await.unwrap();
    let engine = vcservice::Engine::new(
        backend,
        vcservice::EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    Arc::new(LocalCommitter::new(engine))
}

fn orderer_config(assemblers: &[&str]) -> OrdererConfig {
    OrdererConfig {
        assemblers: assemblers.iter().map(|a| a.to_string()).collect(),
        keys: cluster_keys(),
        config_rules: None,
        sets_file: None,
        retry: Duration::from_millis(50),
        buffer: std::num::NonZeroUsize::new(8).unwrap(),
        stall: Duration::from_millis(500),
    }
}

/// A sidecar node on `store` reading from `assemblers` (in order of preference), with its
/// lookup service on loopback.
async fn start_node(
    store: &Path,
    db: &Arc<LocalCommitter>,
    meta_policy: &NamespacePolicy,
    assemblers: &[&str],
) -> (Handle, SidecarClient<Channel>) {
    let mut config = Config::new(store.to_path_buf());
    config.listen = "127.0.0.1:0".parse().unwrap();
    let deps = Deps {
        verify: Arc::new(LocalVerifier::new()),
        commit: db.clone(),
        meta_policy: meta_policy.clone(),
        blocks: Feed::Orderer(orderer_config(assemblers)),
        registry: telemetry::Registry::detached("sidecar"),
    };
    let node = sidecar::node::spawn(config, deps).await.unwrap();
    let client = SidecarClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap();
    (node, client)
}

/// Polls `done` until it holds; panics after `within` with `what`.
async fn wait_until<F, Fut>(what: &str, within: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn next_block(client: &SidecarClient<Channel>) -> u64 {
    client
        .clone()
        .get_next_block(pb::LastCommittedRequest {})
        .await
        .unwrap()
        .into_inner()
        .number
}

/// Waits until the node's store holds blocks `0..n`.
async fn wait_stored(client: &SidecarClient<Channel>, n: u64) {
    wait_stored_within(client, n, DEADLINE).await;
}

async fn wait_stored_within(client: &SidecarClient<Channel>, n: u64, within: Duration) {
    wait_until(&format!("the store holds {n} blocks"), within, || async {
        let next = next_block(client).await;
        assert!(next <= n, "the store holds block {} of a chain of {n}", next - 1);
        next == n
    })
    .await;
}

async fn lookup(client: &SidecarClient<Channel>, ids: &[&str]) -> Vec<(String, Status, u64, u32)> {
    let query = pb::StatusQuery {
        tx_ids: ids.iter().map(|i| i.to_string()).collect(),
    };
    client
        .clone()
        .get_tx_status(query)
        .await
        .unwrap()
        .into_inner()
        .statuses
        .into_iter()
        .map(|s| (s.tx_id, Status::from_code(s.code).unwrap(), s.block, s.index))
        .collect()
}

/// Every block of `w` is stored, with its statuses and content.
async fn assert_stored(client: &SidecarClient<Channel>, w: &Workload) {
    assert_eq!(next_block(client).await, w.len());
    for (number, want) in w.expected.iter().enumerate() {
        let got = client
            .clone()
            .get_block(pb::BlockQuery {
                number: number as u64,
            })
            .await
            .unwrap()
            .into_inner();
        let statuses: Vec<(String, Status)> = got
            .statuses
            .iter()
            .map(|s| (s.tx_id.clone(), Status::from_code(s.code).unwrap()))
            .collect();
        assert_eq!(&statuses, want, "statuses of block {number}");
        assert!(
            got.block == w.stored[number],
            "block {number} is not stored as ordered"
        );
    }
    // The undecodable envelopes are stored under their ids; the non-envelopes under none.
    assert_eq!(
        lookup(client, &["bad-payload-2", "bad-payload-3", ""]).await,
        vec![
            ("bad-payload-2".into(), Status::MalformedBadEnvelopePayload, 2, 1),
            (
                "bad-payload-3".into(),
                Status::MalformedBadEnvelopePayload,
                3,
                w.expected[3].len() as u32 - 1
            ),
        ]
    );
}

#[test]
fn the_workload_exercises_the_committer() {
    let w = workload();
    let count = |s: Status| w.expected.iter().flatten().filter(|(_, x)| *x == s).count();
    assert_eq!(w.len(), WORKLOAD_BLOCKS as u64 + 1);
    for s in [
        Status::Committed,
        Status::AbortedMvccConflict,
        Status::AbortedSignatureInvalid,
        Status::MalformedNoWrites,
    ] {
        assert!(count(s) >= 1, "no {s:?} in {:?}", w.expected);
    }
    assert!(count(Status::Committed) >= 5, "{:?}", w.expected);
    assert_eq!(count(Status::MalformedBadEnvelope), 2);
    assert_eq!(count(Status::MalformedBadEnvelopePayload), 2);
    assert!(w.expected[EMPTY_BLOCK].is_empty());
    assert_eq!(
        w.requests.iter().map(Vec::len).collect::<Vec<_>>(),
        w.expected.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

// ------------------------------------------------------------------ scenarios

/// Scenario 1: one honest assembler; the node commits the whole chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_chain_is_committed_with_malformed_requests_in_place() {
    let w = workload();
    let dir = tempfile::tempdir().unwrap();
    let a = FakeServer::start(w.blocks.clone(), w.len()).await;
    let db = state_db(dir.path()).await;
    let (node, client) = start_node(&dir.path().join("store"), &db, &w.meta_policy, &[&a.url]).await;
    assert_eq!(node.resumed_at, 0);
    wait_stored(&client, w.len()).await;
    assert_stored(&client, &w).await;
    // One stream, from block 0 (nothing to anchor), still open: the node follows.
    assert_eq!(a.froms(), vec![0]);
    assert_eq!(a.open_streams(), 1);
    node.stop().await.unwrap();
}

/// Scenario 2: the first assembler serves `tampered` as block `t`; the second is honest.
async fn byzantine_first_assembler(t: u64, tampered: pb::OrderedBlock, evil_ids: &[&str]) {
    let w = workload();
    let keys = cluster_keys();
    let verifier = arma::CertificateVerifier::new(keys.clone());
    let previous = Some((t - 1, w.headers[t as usize - 1].hash()));
    let refused = sidecar::orderer::check(
        &tampered,
        previous,
        &keys.chain_id(),
        &verifier,
        &bft::Members::contiguous(N),
    );
    assert!(refused.is_err(), "the tampered block {t} must not verify");
    let mut chain = w.blocks.clone();
    chain[t as usize] = tampered;

    let dir = tempfile::tempdir().unwrap();
    let a = FakeServer::start(chain, w.len()).await;
    let b = FakeServer::start(w.blocks.clone(), w.len()).await;
    let db = state_db(dir.path()).await;
    let (node, client) = start_node(&dir.path().join("store"), &db, &w.meta_policy, &[&a.url, &b.url]).await;
    wait_stored(&client, w.len()).await;
    assert_stored(&client, &w).await;
    assert!(
        lookup(&client, evil_ids).await.is_empty(),
        "tampered txs were stored"
    );
    // A served 0..t and was asked again from t before the node turned to B, which was
    // asked once, from t.
    let froms = a.froms();
    assert_eq!(froms[0], 0);
    assert!(
        froms.len() >= 2 && froms[1..].iter().all(|f| *f == t),
        "{froms:?}"
    );
    assert_eq!(b.froms(), vec![t]);
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_with_a_swapped_request_is_refused_and_the_next_assembler_serves() {
    let w = workload();
    let t = 2u64;
    let mut tampered = w.blocks[t as usize].clone();
    tampered.requests[0] = renamed(&tampered.requests[0], "evil-2");
    byzantine_first_assembler(t, tampered, &["evil-2"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_signed_below_quorum_is_refused_and_the_next_assembler_serves() {
    let w = workload();
    let t = 3u64;
    // A self-consistent block on the honest chain (header, data hash and previous hash
    // all agree) whose decision only two consenters (f + 1) signed.
    let mut requests = w.requests[t as usize].clone();
    let first = requests.iter().position(|r| !envelope_id(r).is_empty()).unwrap();
    requests[first] = renamed(&requests[first], "evil-3");
    let h = header(t, w.headers[t as usize - 1].hash(), &requests);
    byzantine_first_assembler(t, ordered_block(h, &requests, &[0, 1]), &["evil-3"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_without_its_requests_is_refused_and_the_next_assembler_serves() {
    let w = workload();
    let t = 1u64;
    let mut headers_only = w.blocks[t as usize].clone();
    headers_only.requests.clear();
    byzantine_first_assembler(t, headers_only, &[]).await;
}

/// The id of an envelope (empty when `raw` is not one).
fn envelope_id(raw: &[u8]) -> String {
    pb::Envelope::decode(raw).map(|e| e.tx_id).unwrap_or_default()
}

/// Scenario 3: a node stopped after some blocks; a new one on the same store and state
/// database resumes at the store's next block, anchored on the block before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_resumes_at_the_store_anchored_on_the_block_before() {
    let w = workload();
    let first_run = 3u64;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let a = FakeServer::start(w.blocks.clone(), first_run).await;
    let db = state_db(dir.path()).await;
    let (node, client) = start_node(&store, &db, &w.meta_policy, &[&a.url]).await;
    assert_eq!(node.resumed_at, 0);
    wait_stored(&client, first_run).await;
    assert_eq!(a.froms(), vec![0]);
    node.stop().await.unwrap();
    drop(client);

    // The new node's own assembler is down: it fails over before its first block.
    let dead = dead_endpoint().await;
    let asked_before = a.froms().len();
    let (node, client) = start_node(&store, &db, &w.meta_policy, &[&dead, &a.url]).await;
    assert_eq!(node.resumed_at, first_run);
    assert_eq!(next_block(&client).await, first_run);
    a.release(w.len());
    wait_stored(&client, w.len()).await;
    assert_stored(&client, &w).await;
    assert_eq!(a.froms()[asked_before..], [first_run - 1], "{:?}", a.froms());
    node.stop().await.unwrap();
}

// ------------------------------------------------------------------ stalls and stops

/// A first assembler that keeps its stream open but never serves the next block (a
/// Byzantine one withholding blocks, or one that stopped receiving them) is left once its
/// stream was silent for `stall` and the next assembler holds the next block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withholding_first_assembler_is_left_for_the_next_one() {
    let w = workload();
    let dir = tempfile::tempdir().unwrap();
    let a = FakeServer::start(w.blocks.clone(), 2).await;
    let b = FakeServer::start(w.blocks.clone(), w.len()).await;
    let db = state_db(dir.path()).await;
    let (node, client) = start_node(&dir.path().join("store"), &db, &w.meta_policy, &[&a.url, &b.url]).await;
    wait_stored_within(&client, w.len(), Duration::from_secs(5)).await;
    assert_stored(&client, &w).await;
    node.stop().await.unwrap();
}

/// `Handle::stop` returns only once the block task and the orderer reader are gone: the
/// store can be opened again at once and no Deliver stream is left open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_releases_the_store_and_the_deliver_stream() {
    let w = workload();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let a = FakeServer::start(w.blocks.clone(), w.len()).await;
    let db = state_db(dir.path()).await;
    let (node, client) = start_node(&store, &db, &w.meta_policy, &[&a.url]).await;
    wait_stored(&client, w.len()).await;
    assert_eq!(a.open_streams(), 1);
    node.stop().await.unwrap();
    let reopened = BlockStore::open(&store).map(|_| ());
    let deadline = Instant::now() + Duration::from_secs(2);
    while a.open_streams() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let open = a.open_streams();
    assert!(
        reopened.is_ok() && open == 0,
        "after stop: reopening the store: {reopened:?}; Deliver streams still open: {open}"
    );
}

// ------------------------------------------------------------------ check and to_block

#[test]
fn check_refuses_blocks_without_all_their_requests_off_chain_or_below_quorum() {
    let w = workload();
    let keys = cluster_keys();
    let verifier = arma::CertificateVerifier::new(keys.clone());
    let chain = keys.chain_id();
    let check = |b: &pb::OrderedBlock, previous| {
        sidecar::orderer::check(b, previous, &chain, &verifier, &bft::Members::contiguous(N))
    };
    let t = 2usize;
    let previous = Some((t as u64 - 1, w.headers[t - 1].hash()));
    let honest = &w.blocks[t];
    let v = check(honest, previous).unwrap();
    assert_eq!(v.header, w.headers[t]);
    assert!(v.with_requests);
    let mut want_signers = signers(t as u64).to_vec();
    want_signers.sort_unstable();
    assert_eq!(v.signers, want_signers);

    // Headers only: tx_count says more than the (zero) requests present.
    let mut headers_only = honest.clone();
    headers_only.requests.clear();
    assert!(w.headers[t].tx_count > 0);
    assert!(
        arma::verify_pb_block(
            &headers_only,
            previous,
            &chain,
            &verifier,
            &bft::Members::contiguous(N)
        )
        .is_ok()
    );
    let e = check(&headers_only, previous).unwrap_err();
    assert!(
        e.contains(&format!("carries 0 of its {} requests", w.headers[t].tx_count)),
        "{e}"
    );
    // One request missing: the data hash does not match.
    let mut short = honest.clone();
    short.requests.pop();
    assert!(check(&short, previous).unwrap_err().contains("does not verify"));
    // A (signed) header that counts one request more than its data hash covers: the
    // block verifies, but it does not carry all of its requests.
    let reqs = &w.requests[t];
    let mut miscounted = header(t as u64, w.headers[t - 1].hash(), reqs);
    miscounted.tx_count += 1;
    let miscounted = ordered_block(miscounted, reqs, &[0, 1, 2]);
    assert!(
        arma::verify_pb_block(
            &miscounted,
            previous,
            &chain,
            &verifier,
            &bft::Members::contiguous(N)
        )
        .is_ok()
    );
    let e = check(&miscounted, previous).unwrap_err();
    assert!(
        e.contains(&format!(
            "carries {} of its {} requests",
            reqs.len(),
            reqs.len() + 1
        )),
        "{e}"
    );
    // Off the chain: another previous block, or block 0 without a zero previous hash.
    assert!(check(honest, Some((t as u64 - 1, [9; 32]))).is_err());
    assert!(check(honest, Some((t as u64, w.headers[t].hash()))).is_err());
    let h0 = header(0, [1; 32], &w.requests[0]);
    assert!(check(&ordered_block(h0, &w.requests[0], &[0, 1, 2]), None).is_err());
    // Two signatures are not a quorum of four; a repeated signer does not count twice.
    let h = w.headers[t];
    assert!(check(&ordered_block(h, &w.requests[t], &[0, 1]), previous).is_err());
    assert!(check(&ordered_block(h, &w.requests[t], &[0, 1, 1]), previous).is_err());
    assert!(check(&ordered_block(h, &w.requests[t], &[1, 2, 3]), previous).is_ok());
    // The empty block carries all of its zero requests.
    let e = EMPTY_BLOCK;
    let v = check(&w.blocks[e], Some((e as u64 - 1, w.headers[e - 1].hash()))).unwrap();
    assert_eq!(v.header.tx_count, 0);
}

#[test]
fn to_block_keeps_refused_requests_at_their_positions() {
    let w = workload();
    let keys = cluster_keys();
    let verifier = arma::CertificateVerifier::new(keys.clone());
    let decoder = wire::ProstDecoder::default();
    for (number, b) in w.blocks.iter().enumerate().skip(1) {
        let previous = Some((number as u64 - 1, w.headers[number - 1].hash()));
        let v = sidecar::orderer::check(
            b,
            previous,
            &keys.chain_id(),
            &verifier,
            &bft::Members::contiguous(N),
        )
        .unwrap();
        let block = sidecar::orderer::to_block(b.clone(), &v, &decoder);
        assert_eq!(block.number(), number as u64);
        assert_eq!(block.header.previous_hash, w.headers[number - 1].hash());
        assert_eq!(block.metadata.decision, number as u64 + 1);
        assert_eq!(block.metadata.signatures.len(), signers(number as u64).len());
        let ids: Vec<&str> = block.txs.iter().map(|(id, _)| id.0.as_str()).collect();
        let want_ids: Vec<&str> = w.expected[number].iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, want_ids, "block {number}");
        // The malformed requests added to the workload, at their positions...
        let bad_envelopes = |s: &Status| {
            matches!(
                s,
                Status::MalformedBadEnvelope | Status::MalformedBadEnvelopePayload
            )
        };
        let added: Vec<(u32, Status)> = w.expected[number]
            .iter()
            .enumerate()
            .filter(|(_, (_, s))| bad_envelopes(s))
            .map(|(i, (_, s))| (i as u32, *s))
            .collect();
        let refused_envelopes: Vec<(u32, Status)> = block
            .refused
            .iter()
            .copied()
            .filter(|(_, s)| bad_envelopes(s))
            .collect();
        assert_eq!(refused_envelopes, added, "block {number}");
        // ... and the workload's structurally malformed txs (the oracle's status, or a
        // duplicate when the id was stored before); nothing else.
        for (i, s) in &block.refused {
            let want = w.expected[number][*i as usize].1;
            assert!(
                want == *s || want == Status::RejectedDuplicateTxId,
                "block {number} tx {i}: {s:?}"
            );
        }
        for (i, (_, want)) in w.expected[number].iter().enumerate() {
            let refused = block.refused.iter().any(|(r, _)| *r as usize == i);
            assert!(
                !want.is_malformed() || refused,
                "block {number} tx {i} ({want:?}) not refused"
            );
        }
    }
}

/// Nobody but its creator can take a tx id (docs/wire.md "Who can take an id"): an
/// envelope that carries a token wallet's nonce and identity (so the derived id is the
/// wallet's) but a payload the wallet never signed is `MALFORMED_BAD_ENVELOPE` at the
/// committer's intake, which is never stored and does not hold the id, so the wallet's
/// own envelope under that id, ordered later, is scheduled as any tx. Before the rule, the
/// junk envelope took the id and the payment became `REJECTED_DUPLICATE_TX_ID`.
#[test]
fn a_front_run_envelope_under_a_wallets_id_does_not_take_the_id() {
    let keys = cluster_keys();
    let verifier = arma::CertificateVerifier::new(keys.clone());
    let decoder = wire::ProstDecoder::default();
    let alice = derive_signing_key(Scheme::Ed25519, "front-run-alice");
    let me: token::Address = alice.public_key().as_bytes().try_into().unwrap();
    let issuer = derive_signing_key(Scheme::Ed25519, "front-run-issuer");
    let request = token::Request::new(
        token::Action::Issue,
        b"alice's nonce".to_vec(),
        issuer.public_key().as_bytes().try_into().unwrap(),
        vec![],
        vec![token::Output {
            owner: me,
            token_type: "CBDC".into(),
            quantity: 5,
        }],
    )
    .sign(&issuer);
    let settlement = token::Settlement::build(&request, "token", 0);
    let real = token::envelope(&request, &settlement, &[7; 96], &issuer);
    // What an endorser that saw the request can make: the same id, nonce and creator,
    // another payload, and a signature that is not the creator's.
    let mut junk = pb::Envelope::decode(real.as_slice()).unwrap();
    let mut tx = settlement.endorsed(&[1; 96]);
    tx.namespaces[0].read_writes.truncate(0);
    tx.namespaces[0].blind_writes.push(types::Write {
        key: b"junk".to_vec(),
        value: b"junk".to_vec(),
    });
    junk.payload = pb::Tx::from(&tx).encode_to_vec();
    junk.signature = crypto::sign_client_request(&alice, &junk.payload).into_bytes();
    let junk = junk.encode_to_vec();
    // The same bytes with no signature at all.
    let mut unsigned = pb::Envelope::decode(junk.as_slice()).unwrap();
    unsigned.signature.clear();
    let unsigned = unsigned.encode_to_vec();
    // The id with no nonce, in another MSP (a free-form id that looks like the wallet's).
    let mut free_form = pb::Envelope::decode(junk.as_slice()).unwrap();
    free_form.nonce.clear();
    free_form.identity = Some(identity());
    let free_form = free_form.encode_to_vec();
    // The wallet's identity and nonce with a payload of another type (a stored 103
    // before), and under another nonce (a stored 105 before).
    let mut other_type = pb::Envelope::decode(junk.as_slice()).unwrap();
    other_type.payload_type = 9;
    let other_type = other_type.encode_to_vec();
    let mut other_nonce = pb::Envelope::decode(junk.as_slice()).unwrap();
    other_nonce.nonce = b"another nonce".to_vec();
    let other_nonce = other_nonce.encode_to_vec();
    let bad = Status::MalformedBadEnvelope;

    // Each block: its requests and the statuses `to_block` refuses them with.
    type Refused = Vec<(u32, Status)>;
    let blocks: Vec<(Vec<Vec<u8>>, Refused)> = vec![
        (
            vec![junk.clone(), unsigned, free_form, other_type, other_nonce],
            vec![(0, bad), (1, bad), (2, bad), (3, bad), (4, bad)],
        ),
        (vec![real.clone()], vec![]),
    ];
    let mut intake = sidecar::intake::Intake::new();
    let mut previous: Option<(u64, Digest32)> = None;
    for (number, (requests, want_refused)) in blocks.into_iter().enumerate() {
        let h = header(number as u64, previous.map_or([0; 32], |p| p.1), &requests);
        let b = ordered_block(h, &requests, &[0, 1, 2]);
        let v = sidecar::orderer::check(
            &b,
            previous,
            &keys.chain_id(),
            &verifier,
            &bft::Members::contiguous(N),
        )
        .unwrap();
        let block = sidecar::orderer::to_block(b, &v, &decoder);
        assert_eq!(block.refused, want_refused, "block {number}");
        let refused = block.refused.clone();
        let txs: Vec<types::BlockTx> = block
            .txs
            .iter()
            .enumerate()
            .map(|(i, (id, tx))| types::BlockTx {
                id: id.clone(),
                height: types::Height::new(number as u64, i as u32),
                tx: tx.clone(),
            })
            .collect();
        let routes: Vec<sidecar::intake::Route> = intake
            .admit(
                txs,
                |i| refused.iter().find(|(at, _)| *at as usize == i).map(|(_, s)| *s),
                &decoder,
            )
            .into_iter()
            .map(|a| a.route)
            .collect();
        if number == 0 {
            assert_eq!(
                routes,
                vec![sidecar::intake::Route::Answer(bad); 5],
                "never stored, the id stays free"
            );
            assert!(!Status::MalformedBadEnvelope.is_stored());
        } else {
            assert_eq!(block.txs[0].0.0, settlement.tx_id.0);
            assert_eq!(
                routes,
                vec![sidecar::intake::Route::Schedule],
                "the wallet's own envelope"
            );
        }
        previous = Some((number as u64, h.hash()));
    }
}
