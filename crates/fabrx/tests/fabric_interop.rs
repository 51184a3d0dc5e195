//! Fabric's own tools against fabrx (issue 26; docs/fabric.md): Arma's `armageddon load`
//! and `armageddon receive`, unmodified, against a `fabrx up` network of 4 parties × 2
//! shards, with mutual TLS and without, given only the user config fabrx wrote for them
//! (`<dir>/fabric/party1/user_config.yaml`): every tx is received. Then a Fabric Deliver
//! client of this test reads blocks 0..newest from another party's assembler and checks
//! them by Fabric's rules with an independent ASN.1 encoder (`yasna`): the genesis
//! config block, each header's number, previous hash and data hash, and that every tx
//! the tool sent is in the ledger exactly once.
//!
//! The tool is found at `$FABRX_ARMAGEDDON`, else in the tools cache
//! (`$FABRX_TOOLS`, default `~/.cache/fabrx-tools`: `armageddon`, installed by
//! `scripts/fabric-tools.sh`); without it the test says SKIPPED and passes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{bin, free_base_port};

use prost::Message;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use wire::fabric::{RawEnvelope, common, orderer};

/// Txs each run sends (at [`RATE`] per second, of [`TX_SIZE`] bytes).
const TXS: u64 = 3000;
const RATE: u64 = 500;
const TX_SIZE: u64 = 300;

fn armageddon() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FABRX_ARMAGEDDON") {
        return Some(PathBuf::from(p));
    }
    let tools = std::env::var("FABRX_TOOLS").map(PathBuf::from).or_else(|_| {
        std::env::var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|_| std::env::var("HOME").map(|h| Path::new(&h).join(".cache")))
            .map(|c| c.join("fabrx-tools"))
    });
    let p = tools.ok()?.join("armageddon");
    p.is_file().then_some(p)
}

fn up(dir: &Path, tls: bool) {
    let base = free_base_port().to_string();
    let mut args = vec![
        "up",
        "--committers",
        "0",
        "--no-token",
        "--base-port",
        &base,
        "--json",
    ];
    if !tls {
        args.push("--insecure");
    }
    let out = Command::new(bin())
        .args(&args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fabrx up: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `armageddon load` and `armageddon receive` as a user would; returns how many txs
/// `receive` says it received.
fn load_and_receive(tool: &Path, dir: &Path) -> u64 {
    let user = dir.join("fabric").join("party1").join("user_config.yaml");
    let out = dir.join("armageddon-out");
    std::fs::create_dir_all(&out).unwrap();
    let receive_log = std::fs::File::create(dir.join("receive.log")).unwrap();
    let mut receive = Command::new(tool)
        .current_dir(&out)
        .arg("receive")
        .arg(format!("--config={}", user.display()))
        .arg("--pullFromPartyId=1")
        .arg(format!("--expectedTxs={TXS}"))
        .arg(format!("--output={}", out.display()))
        .stdout(Stdio::from(receive_log.try_clone().unwrap()))
        .stderr(Stdio::from(receive_log))
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let load = Command::new(tool)
        .arg("load")
        .arg(format!("--config={}", user.display()))
        .arg(format!("--transactions={TXS}"))
        .arg(format!("--rate={RATE}"))
        .arg(format!("--txSize={TX_SIZE}"))
        .output()
        .unwrap();
    let load_text =
        String::from_utf8_lossy(&load.stderr).to_string() + &String::from_utf8_lossy(&load.stdout);
    assert!(load.status.success(), "armageddon load failed: {load_text}");
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = receive.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = receive.kill();
            let _ = receive.wait();
            panic!(
                "armageddon receive did not get {TXS} txs in time: {}",
                std::fs::read_to_string(dir.join("receive.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = std::fs::read_to_string(dir.join("receive.log")).unwrap();
    assert!(status.success(), "armageddon receive failed: {log}");
    let plain: String = strip_colors(&log);
    let marker = "were expected and overall ";
    let at = plain
        .find(marker)
        .unwrap_or_else(|| panic!("no count in the receive log: {plain}"));
    plain[at + marker.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn strip_colors(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn channel(dir: &Path, endpoint: &str, tls: bool) -> Channel {
    if !tls {
        return Endpoint::from_shared(format!("http://{endpoint}"))
            .unwrap()
            .connect_lazy();
    }
    let t = dir.join("tls");
    let config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(t.join("ca.pem")).unwrap()))
        .identity(Identity::from_pem(
            std::fs::read(t.join("client.pem")).unwrap(),
            std::fs::read(t.join("client.key")).unwrap(),
        ))
        .domain_name(wire::tls::SERVER_NAME);
    Endpoint::from_shared(format!("https://{endpoint}"))
        .unwrap()
        .tls_config(config)
        .unwrap()
        .connect_lazy()
}

/// A DELIVER_SEEK_INFO envelope for blocks `start..=stop` (`None`: the newest).
fn seek(start: u64, stop: Option<u64>, behavior: orderer::seek_info::SeekBehavior) -> RawEnvelope {
    use orderer::seek_position::Type;
    let position = |t| orderer::SeekPosition { r#type: Some(t) };
    let info = orderer::SeekInfo {
        start: Some(position(Type::Specified(orderer::SeekSpecified {
            number: start,
        }))),
        stop: Some(position(match stop {
            Some(n) => Type::Specified(orderer::SeekSpecified { number: n }),
            None => Type::Newest(orderer::SeekNewest {}),
        })),
        behavior: behavior as i32,
        error_response: 0,
        content_type: 0,
    };
    let payload = common::Payload {
        header: Some(common::Header {
            channel_header: common::ChannelHeader {
                r#type: common::HeaderType::DeliverSeekInfo as i32,
                channel_id: "arma".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            signature_header: common::SignatureHeader {
                creator: b"interop test".to_vec(),
                nonce: vec![1; 8],
            }
            .encode_to_vec(),
        }),
        data: info.encode_to_vec(),
    };
    RawEnvelope::from_parts(&payload.encode_to_vec(), b"")
}

/// The blocks of one Deliver request, and the status that ended it.
async fn deliver(
    ch: Channel,
    request: RawEnvelope,
    until_txs: Option<u64>,
) -> (Vec<common::Block>, Option<i32>) {
    use orderer::atomic_broadcast_client::AtomicBroadcastClient;
    use orderer::deliver_response::Type;
    let mut client = AtomicBroadcastClient::new(ch).max_decoding_message_size(64 << 20);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(request).await.unwrap();
    let mut stream = client
        .deliver(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut blocks = Vec::new();
    let mut txs = 0u64;
    let status = loop {
        let next = tokio::time::timeout(Duration::from_secs(120), stream.message())
            .await
            .expect("a block or a status in time")
            .unwrap();
        match next.and_then(|r| r.r#type) {
            Some(Type::Block(b)) => {
                if b.header.as_ref().unwrap().number > 0 {
                    txs += u64::try_from(b.data.as_ref().unwrap().data.len()).unwrap();
                }
                blocks.push(b);
                if until_txs.is_some_and(|n| txs >= n) {
                    break None;
                }
            }
            Some(Type::Status(s)) => break Some(s),
            None => panic!("the stream ended without a status"),
        }
    };
    drop(tx);
    (blocks, status)
}

/// Fabric's header DER, written with an independent ASN.1 library.
fn header_der(h: &common::BlockHeader) -> Vec<u8> {
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u64(h.number);
            w.next().write_bytes(&h.previous_hash);
            w.next().write_bytes(&h.data_hash);
        })
    })
}

/// Fabric's data hash: SHA-256 over each item's 4-byte big-endian length and bytes.
fn data_hash(data: &[Vec<u8>]) -> Vec<u8> {
    let mut h = Sha256::new();
    for d in data {
        h.update(u32::try_from(d.len()).unwrap().to_be_bytes());
        h.update(d);
    }
    h.finalize().to_vec()
}

/// Checks the chain by Fabric's rules and returns the armageddon txs it holds (tx
/// number → copies).
fn check_chain(blocks: &[common::Block]) -> BTreeMap<u64, u32> {
    let genesis = &blocks[0];
    let gh = genesis.header.as_ref().unwrap();
    assert_eq!(gh.number, 0);
    assert!(gh.previous_hash.is_empty());
    let gdata = &genesis.data.as_ref().unwrap().data;
    assert_eq!(gdata.len(), 1, "one config envelope");
    assert_eq!(gh.data_hash, data_hash(gdata));
    let env = common::Payload::decode(
        RawEnvelope::decode(gdata[0].as_slice())
            .unwrap()
            .parts()
            .unwrap()
            .payload,
    )
    .unwrap();
    let ch = common::ChannelHeader::decode(env.header.unwrap().channel_header.as_slice()).unwrap();
    assert_eq!(ch.r#type, common::HeaderType::Config as i32);
    assert_eq!(ch.channel_id, "arma");
    let config = common::ConfigEnvelope::decode(env.data.as_slice()).unwrap();
    let orgs = &config.config.unwrap().channel_group.unwrap().groups["Orderer"].groups;
    assert_eq!(orgs.len(), 4, "one organization per party");

    let mut txs = BTreeMap::new();
    let mut cumulative = 1u64;
    for pair in blocks.windows(2) {
        let (prev, b) = (pair[0].header.as_ref().unwrap(), pair[1].header.as_ref().unwrap());
        assert_eq!(b.number, prev.number + 1);
        assert_eq!(
            b.previous_hash,
            Sha256::digest(header_der(prev)).to_vec(),
            "block {}",
            b.number
        );
        let data = &pair[1].data.as_ref().unwrap().data;
        assert_eq!(b.data_hash, data_hash(data), "block {}", b.number);
        let md = &pair[1].metadata.as_ref().unwrap().metadata;
        assert_eq!(md.len(), 5);
        cumulative += u64::try_from(data.len()).unwrap();
        let ord = orderer::AssemblerBlockMetadata::decode(md[3].as_slice()).unwrap();
        assert_eq!(ord.transaction_count, cumulative, "block {}", b.number);
        let sigs = common::Metadata::decode(md[0].as_slice()).unwrap();
        assert!(sigs.signatures.len() >= 3, "a quorum of consenter signatures");
        for d in data {
            let env = RawEnvelope::decode(d.as_slice()).unwrap().parts().unwrap();
            let payload = common::Payload::decode(env.payload).unwrap();
            let number = u64::from_be_bytes(payload.data[..8].try_into().unwrap());
            *txs.entry(number).or_insert(0) += 1;
        }
    }
    txs
}

fn run(tool: &Path, tls: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    up(&dir, tls);
    let received = load_and_receive(tool, &dir);
    assert!(received >= TXS, "armageddon received {received} of {TXS}");

    // Party 2's assembler, read by this test's own Fabric Deliver client.
    let cfg = netconfig::NetworkConfig::load(&netconfig::config_path(&dir)).unwrap();
    let endpoint = cfg.file().parties[1].assembler.clone().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use orderer::seek_info::SeekBehavior;
        // Follow until party 2 holds every tx, then read 0..newest and end with SUCCESS.
        let (_, _) = deliver(
            channel(&dir, &endpoint, tls),
            seek(0, Some(u64::MAX), SeekBehavior::BlockUntilReady),
            Some(TXS),
        )
        .await;
        let (blocks, status) = deliver(
            channel(&dir, &endpoint, tls),
            seek(0, None, SeekBehavior::FailIfNotReady),
            None,
        )
        .await;
        assert_eq!(status, Some(common::Status::Success as i32));
        let txs = check_chain(&blocks);
        eprintln!(
            "tls {tls}: armageddon received {received}; party 2's ledger: {} blocks after the genesis, {} txs",
            blocks.len() - 1,
            txs.values().sum::<u32>()
        );
        assert_eq!(txs.len() as u64, TXS, "every tx sent is in the ledger");
        assert!(txs.keys().copied().eq(0..TXS), "tx numbers 0..{TXS}");
        let copies: Vec<_> = txs.iter().filter(|(_, c)| **c > 1).collect();
        assert!(copies.is_empty(), "txs ordered more than once: {copies:?}");
        // Past the newest block with FAIL_IF_NOT_READY: NOT_FOUND.
        let beyond = u64::try_from(blocks.len()).unwrap() + 10;
        let (none, status) = deliver(
            channel(&dir, &endpoint, tls),
            seek(beyond, Some(beyond), SeekBehavior::FailIfNotReady),
            None,
        )
        .await;
        assert!(none.is_empty());
        assert_eq!(status, Some(common::Status::NotFound as i32));
    });
}

#[test]
fn armageddon_load_and_receive_with_mutual_tls() {
    let Some(tool) = armageddon() else {
        eprintln!("SKIPPED: armageddon not found ($FABRX_ARMAGEDDON, or run scripts/fabric-tools.sh)");
        return;
    };
    run(&tool, true);
}

#[test]
fn armageddon_load_and_receive_without_tls() {
    let Some(tool) = armageddon() else {
        eprintln!("SKIPPED: armageddon not found ($FABRX_ARMAGEDDON, or run scripts/fabric-tools.sh)");
        return;
    };
    run(&tool, false);
}
