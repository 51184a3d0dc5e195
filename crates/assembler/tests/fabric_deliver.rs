#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! Fabric Deliver (docs/assembler.md "Fabric Deliver") over a real listener, read with a
//! tonic `AtomicBroadcast` client: block 0 is the configured genesis block; every block
//! chains on an independently computed DER header hash, carries Fabric's data hash and
//! the cumulative tx count; SUCCESS follows the stop block and the stream takes another
//! request; a start in the middle (past checkpoints) gives the blocks a read from 0
//! gives; HEADER_WITH_SIG drops data; a follow request receives a block appended after
//! it started; FAIL_IF_NOT_READY past the end and a node without a genesis block answer
//! NOT_FOUND.

use std::num::{NonZeroU64, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use arma::{DecisionProof, OrderedHeader};
use assembler::core::Block;
use assembler::fabric_deliver::{FabricDeliverLimits, FabricDeliverService};
use assembler::store::BlockStore;
use bft::InstanceId;
use prost::Message;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use wire::fabric::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use wire::fabric::orderer::seek_info::{SeekBehavior, SeekContentType};
use wire::fabric::orderer::seek_position::Type as Position;
use wire::fabric::orderer::{
    AssemblerBlockMetadata, DeliverResponse, SeekInfo, SeekPosition, SeekSpecified, deliver_response,
};
use wire::fabric::{RawEnvelope, common};

/// Ledger blocks appended before the tests read.
const LEDGER_BLOCKS: u64 = 20;

fn genesis() -> common::Block {
    arma::fabric::genesis_block(&arma::fabric::Genesis {
        channel: "arma".into(),
        orgs: Vec::new(),
        consensus_metadata: b"test network".to_vec(),
        max_message_count: 100,
        absolute_max_bytes: 1 << 20,
    })
}

/// Ledger block `i`, after the one whose header hash is `previous`, with `1 + i % 4`
/// requests (and none for every fifth, to cover an empty batch).
fn ledger_block(i: u64, previous: [u8; 32]) -> Block {
    let count = if i % 5 == 4 { 0 } else { 1 + i % 4 };
    let requests: Vec<arma::Request> = (0..count)
        .map(|j| Arc::from(format!("request {i}.{j}").into_bytes()))
        .collect();
    let header = OrderedHeader {
        number: i,
        previous_hash: previous,
        digest: types::digest::batch_digest(&requests),
        shard: u32::try_from(i % 2).unwrap(),
        term: 0,
        primary: 1,
        seq: i / 2 + 1,
        decision: i + 1,
        index: 0,
        tx_count: u32::try_from(requests.len()).unwrap(),
    };
    Block {
        header,
        requests,
        proof: Arc::new(DecisionProof {
            instance: InstanceId(0),
            decision: i + 1,
            view: 0,
            requests_root: [0; 32],
            metadata: Vec::new(),
            signatures: Vec::new(),
        }),
    }
}

/// A ledger of [`LEDGER_BLOCKS`] blocks; returns the store and the last header's hash.
fn ledger(dir: &std::path::Path) -> (BlockStore, [u8; 32]) {
    let mut store = BlockStore::open(dir).unwrap();
    let mut previous = [0u8; 32];
    for i in 0..LEDGER_BLOCKS {
        let b = ledger_block(i, previous);
        previous = b.header.hash();
        store.append(&b).unwrap();
    }
    (store, previous)
}

/// Serves `store` with `genesis` on a fresh local port; checkpoints every 4 blocks.
async fn serve(store: &BlockStore, genesis: Option<common::Block>) -> (wire::node::Serving, String) {
    let limits = FabricDeliverLimits {
        checkpoint_interval: NonZeroU64::new(4).unwrap(),
        max_checkpoints: NonZeroUsize::new(1024).unwrap(),
        ..FabricDeliverLimits::default()
    };
    let registry = telemetry::Registry::detached("assembler");
    let open = registry.gauge("fabric_deliver_streams", "open").unwrap();
    let service = FabricDeliverService::new(store.reader(), genesis, limits, open)
        .unwrap()
        .into_server();
    let listener = wire::node::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let serving = wire::node::serve(listener, &wire::server::ServerLimits::default(), |b| {
        b.add_service(service)
    })
    .unwrap();
    let uri = format!("http://{}", serving.addr());
    (serving, uri)
}

fn specified(number: u64) -> Option<SeekPosition> {
    Some(SeekPosition {
        r#type: Some(Position::Specified(SeekSpecified { number })),
    })
}

/// A DELIVER_SEEK_INFO envelope on channel `arma` asking for `start..=stop`.
fn request(start: u64, stop: u64, behavior: SeekBehavior, content: SeekContentType) -> RawEnvelope {
    let info = SeekInfo {
        start: specified(start),
        stop: specified(stop),
        behavior: behavior as i32,
        error_response: 0,
        content_type: content as i32,
    };
    let channel_header = common::ChannelHeader {
        r#type: common::HeaderType::DeliverSeekInfo as i32,
        channel_id: "arma".into(),
        ..Default::default()
    };
    let payload = common::Payload {
        header: Some(common::Header {
            channel_header: channel_header.encode_to_vec(),
            signature_header: common::SignatureHeader::default().encode_to_vec(),
        }),
        data: info.encode_to_vec(),
    };
    RawEnvelope::from_parts(&payload.encode_to_vec(), b"unchecked signature")
}

/// A Deliver stream: requests go in through `tx`, responses come out of `rx`.
struct Stream {
    tx: mpsc::Sender<RawEnvelope>,
    rx: tonic::Streaming<DeliverResponse>,
}

impl Stream {
    async fn open(uri: &str) -> Stream {
        let mut client = AtomicBroadcastClient::connect(uri.to_string())
            .await
            .unwrap()
            .max_decoding_message_size(64 << 20);
        let (tx, requests) = mpsc::channel(4);
        let rx = client
            .deliver(ReceiverStream::new(requests))
            .await
            .unwrap()
            .into_inner();
        Stream { tx, rx }
    }

    async fn ask(&self, start: u64, stop: u64, behavior: SeekBehavior, content: SeekContentType) {
        self.tx
            .send(request(start, stop, behavior, content))
            .await
            .unwrap();
    }

    /// The next response, within 10 s.
    async fn next(&mut self) -> Option<deliver_response::Type> {
        tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a response within 10 s")
            .unwrap()
            .map(|r| r.r#type.unwrap())
    }

    async fn block(&mut self) -> common::Block {
        match self.next().await {
            Some(deliver_response::Type::Block(b)) => b,
            other => panic!("expected a block, got {other:?}"),
        }
    }

    async fn status(&mut self) -> common::Status {
        match self.next().await {
            Some(deliver_response::Type::Status(s)) => common::Status::try_from(s).unwrap(),
            other => panic!("expected a status, got {other:?}"),
        }
    }

    /// Blocks until a status; returns both.
    async fn blocks(&mut self) -> (Vec<common::Block>, common::Status) {
        let mut blocks = Vec::new();
        loop {
            match self.next().await {
                Some(deliver_response::Type::Block(b)) => blocks.push(b),
                Some(deliver_response::Type::Status(s)) => {
                    return (blocks, common::Status::try_from(s).unwrap());
                }
                None => panic!("the stream ended without a status"),
            }
        }
    }
}

/// SHA-256 of the DER of `SEQUENCE { INTEGER number, OCTET STRING previous_hash,
/// OCTET STRING data_hash }`, written with yasna.
fn der_header_hash(h: &common::BlockHeader) -> Vec<u8> {
    let der = yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u64(h.number);
            w.next().write_bytes(&h.previous_hash);
            w.next().write_bytes(&h.data_hash);
        });
    });
    Sha256::digest(der).to_vec()
}

/// SHA-256 over each item's 4-byte big-endian length and bytes.
fn fabric_data_hash(data: &[Vec<u8>]) -> Vec<u8> {
    let mut h = Sha256::new();
    for item in data {
        h.update(u32::try_from(item.len()).unwrap().to_be_bytes());
        h.update(item);
    }
    h.finalize().to_vec()
}

fn orderer_metadata(b: &common::Block) -> AssemblerBlockMetadata {
    let slot = &b.metadata.as_ref().unwrap().metadata[common::BlockMetadataIndex::Orderer as usize];
    AssemblerBlockMetadata::decode(slot.as_slice()).unwrap()
}

/// Checks `blocks` (Fabric blocks 0..) against the ledger they were made of.
fn check_chain(blocks: &[common::Block]) {
    let mut previous = [0u8; 32];
    let mut txs = 1u64;
    for (n, b) in blocks.iter().enumerate().skip(1) {
        let n = n as u64;
        let h = b.header.as_ref().unwrap();
        assert_eq!(h.number, n);
        let before = blocks[n as usize - 1].header.as_ref().unwrap();
        assert_eq!(
            h.previous_hash,
            der_header_hash(before),
            "block {n} chains on block {}",
            n - 1
        );
        let made_of = ledger_block(n - 1, previous);
        previous = made_of.header.hash();
        let data = &b.data.as_ref().unwrap().data;
        let expected: Vec<Vec<u8>> = made_of.requests.iter().map(|r| r.to_vec()).collect();
        assert_eq!(
            data,
            &expected,
            "block {n} holds ledger block {}'s requests",
            n - 1
        );
        assert_eq!(h.data_hash, fabric_data_hash(data), "block {n}'s data hash");
        txs += expected.len() as u64;
        let meta = orderer_metadata(b);
        assert_eq!(meta.transaction_count, txs, "block {n}'s cumulative tx count");
        assert_eq!(
            (meta.shard, meta.sequence),
            (made_of.header.shard, made_of.header.seq)
        );
    }
}

#[tokio::test]
async fn fabric_deliver_serves_the_chain_from_genesis_and_from_the_middle() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = ledger(dir.path());
    let (serving, uri) = serve(&store, Some(genesis())).await;
    let mut s = Stream::open(&uri).await;
    let (newest, until_ready) = (LEDGER_BLOCKS, SeekBehavior::BlockUntilReady);

    s.ask(0, newest, until_ready, SeekContentType::Block).await;
    let (all, status) = s.blocks().await;
    assert_eq!(status, common::Status::Success);
    assert_eq!(all.len() as u64, newest + 1);
    assert_eq!(all[0], genesis());
    assert_eq!(orderer_metadata(&all[0]).transaction_count, 1);
    check_chain(&all);

    // The same stream takes further requests; starts past checkpoints (every 4 blocks,
    // recorded by the first read) and before them give the same blocks.
    for (start, stop) in [(13, 17), (1, 3), (4, 4), (9, newest), (newest, newest)] {
        s.ask(start, stop, until_ready, SeekContentType::Block).await;
        let (blocks, status) = s.blocks().await;
        assert_eq!(status, common::Status::Success);
        assert_eq!(
            blocks,
            all[start as usize..=stop as usize],
            "blocks {start}..={stop}"
        );
    }

    // Headers with signatures: the same headers and metadata, no data, except the
    // genesis config block, sent whole.
    s.ask(0, 6, until_ready, SeekContentType::HeaderWithSig).await;
    let (bare, status) = s.blocks().await;
    assert_eq!(status, common::Status::Success);
    assert_eq!(bare[0], all[0]);
    for (b, whole) in bare.iter().zip(&all).skip(1) {
        assert_eq!((&b.header, &b.metadata), (&whole.header, &whole.metadata));
        assert!(b.data.as_ref().is_none_or(|d| d.data.is_empty()));
    }

    // FAIL_IF_NOT_READY past the newest block: NOT_FOUND, and the stream ends.
    s.ask(
        newest + 1,
        newest + 2,
        SeekBehavior::FailIfNotReady,
        SeekContentType::Block,
    )
    .await;
    assert_eq!(s.status().await, common::Status::NotFound);
    assert_eq!(s.next().await, None);

    // A fresh stream (no checkpoints help a start right after one that is not recorded:
    // the walk reads headers from the nearest one below).
    let mut s = Stream::open(&uri).await;
    s.ask(newest - 1, newest, until_ready, SeekContentType::Block)
        .await;
    let (tail, status) = s.blocks().await;
    assert_eq!(status, common::Status::Success);
    assert_eq!(tail, all[newest as usize - 1..]);
    drop(s);
    serving.stop(Duration::ZERO).await;
}

#[tokio::test]
async fn a_follow_request_receives_blocks_appended_after_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, last) = ledger(dir.path());
    let (serving, uri) = serve(&store, Some(genesis())).await;
    let mut s = Stream::open(&uri).await;
    // As armageddon follows: stop = u64::MAX; start at the newest block.
    s.ask(
        LEDGER_BLOCKS,
        u64::MAX,
        SeekBehavior::BlockUntilReady,
        SeekContentType::Block,
    )
    .await;
    let newest = s.block().await;
    assert_eq!(newest.header.as_ref().unwrap().number, LEDGER_BLOCKS);
    // Nothing more until an append.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), s.rx.message())
            .await
            .is_err()
    );
    store.append(&ledger_block(LEDGER_BLOCKS, last)).unwrap();
    let appended = s.block().await;
    let h = appended.header.as_ref().unwrap();
    assert_eq!(h.number, LEDGER_BLOCKS + 1);
    assert_eq!(h.previous_hash, der_header_hash(newest.header.as_ref().unwrap()));
    let data = &appended.data.as_ref().unwrap().data;
    assert_eq!(h.data_hash, fabric_data_hash(data));
    let expected_txs = 1
        + (0..=LEDGER_BLOCKS)
            .map(|i| ledger_block(i, [0; 32]).requests.len() as u64)
            .sum::<u64>();
    assert_eq!(orderer_metadata(&appended).transaction_count, expected_txs);
    drop(s);
    serving.stop(Duration::ZERO).await;
}

#[tokio::test]
async fn requests_are_refused_with_fabric_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = ledger(dir.path());
    // No genesis block configured: NOT_FOUND.
    let (serving, uri) = serve(&store, None).await;
    let mut s = Stream::open(&uri).await;
    s.ask(0, 1, SeekBehavior::BlockUntilReady, SeekContentType::Block)
        .await;
    assert_eq!(s.status().await, common::Status::NotFound);
    assert_eq!(s.next().await, None);
    serving.stop(Duration::ZERO).await;

    let (serving, uri) = serve(&store, Some(genesis())).await;
    // The stop before the start: BAD_REQUEST.
    let mut s = Stream::open(&uri).await;
    s.ask(5, 4, SeekBehavior::BlockUntilReady, SeekContentType::Block)
        .await;
    assert_eq!(s.status().await, common::Status::BadRequest);
    // Not a request envelope: BAD_REQUEST.
    let mut s = Stream::open(&uri).await;
    s.tx.send(RawEnvelope::from_parts(b"not a payload", b""))
        .await
        .unwrap();
    assert_eq!(s.status().await, common::Status::BadRequest);
    // Broadcast belongs to routers.
    let mut client = AtomicBroadcastClient::connect(uri.clone()).await.unwrap();
    let (_tx, rx) = mpsc::channel::<RawEnvelope>(1);
    let refused = client.broadcast(ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unimplemented);
    serving.stop(Duration::ZERO).await;
}
