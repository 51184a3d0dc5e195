//! The orderer as the sidecar's block source (docs/committer-nodes.md "Reading from the
//! orderer"): the Deliver stream of the party's assembler, every block verified before
//! the committer sees it, failing over to the other parties' assemblers.
//!
//! - **verified**: a quorum of valid consenter signatures over the decision that ordered
//!   the block, the header the decision's metadata gives, the data hash (the batch digest
//!   of the requests, which must all be there) and the hash chain to the previous block;
//!   the chain holds across failovers (the previous hash is kept here, not per stream);
//! - **resume**: the source starts at the block the store needs next; after a restart
//!   (or a failover, before the first block) it first reads the block before that one
//!   and verifies it on its own, to anchor the chain;
//! - **failover**: a stream that fails, ends, or serves a block that does not verify is
//!   dropped; without progress the next assembler is tried (own party first), after a
//!   pause once every one was tried; a stream silent for `stall` while another
//!   assembler holds the next block is left for that one (a withholding or stalled
//!   assembler cannot halt the committer);
//! - **bounded**: blocks go to the pipeline through a bounded channel, so a slow
//!   committer stops reading the stream (TCP flow control holds the assembler back).
//!
//! The conversion of an ordered block's raw envelopes ([`to_block`]) is pure: an envelope
//! that fails its structural checks keeps its position with its status (`Block::refused`).

use std::sync::Arc;
use std::time::Duration;

use arma::{ClusterKeys, VerifiedBlock};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tracing::{debug, info, warn};
use types::check::CheckedPayload;
use types::digest::Digest32;
use types::{BatchId, Block, BlockHeader, BlockMetadata, Status, Tx, TxId};
use wire::pb;

use crate::{Error, Result};

/// Positions (in `envelopes`' own `(position, envelope)` pairs) of self-certified
/// envelopes whose creator signature over the payload does not verify (one batch).
pub fn unsigned_self_certified(envelopes: &[(usize, pb::Envelope)]) -> Vec<usize> {
    let items: Vec<(&[u8], &[u8], &[u8])> = envelopes
        .iter()
        .map(|(_, env)| {
            let key = wire::self_certified_key(env).unwrap_or_default();
            (key, env.payload.as_slice(), env.signature.as_slice())
        })
        .collect();
    crypto::verify_client_requests_by_ed25519_key(&items)
        .into_iter()
        .zip(envelopes)
        .filter(|(ok, _)| !ok)
        .map(|(_, (i, _))| *i)
        .collect()
}

/// Largest Deliver message accepted (a block with all its requests).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Where and how to read ordered blocks.
#[derive(Clone)]
pub struct OrdererConfig {
    /// Assembler endpoints (`http://host:port`), the own party's first; the others are
    /// used when it fails.
    pub assemblers: Vec<String>,
    /// The genesis consenters' keys and chain: what a block's proof is checked against
    /// until a config block puts another set in force.
    pub keys: ClusterKeys,
    /// The network's config rules: with them the reader follows config blocks (the
    /// consenter set in force for each block); without, a config block stops it.
    pub config_rules: Option<Arc<dyn arma::ConfigRules>>,
    /// Where the consenter sets learned from config blocks are kept across restarts
    /// (`None`: not kept; a restart past a config block then needs the blocks before it).
    pub sets_file: Option<std::path::PathBuf>,
    /// Pause after every assembler was tried without progress.
    pub retry: Duration,
    /// Verified blocks held for the pipeline (each at most a batch's bytes).
    pub buffer: std::num::NonZeroUsize,
    /// A stream silent this long makes the source ask the other assemblers whether they
    /// hold the next block; the first that does is read instead (an assembler that
    /// withholds blocks, or stopped receiving them, is left).
    pub stall: Duration,
}

impl std::fmt::Debug for OrdererConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrdererConfig")
            .field("assemblers", &self.assemblers)
            .field("consenters", &self.keys.n())
            .field("retry", &self.retry)
            .field("buffer", &self.buffer)
            .field("stall", &self.stall)
            .finish()
    }
}

/// Starts reading at block `from`; verified blocks arrive on the returned channel in
/// order, without end (the task stops when the receiver is dropped).
pub fn spawn(cfg: OrdererConfig, from: u64) -> Result<(mpsc::Receiver<Block>, JoinHandle<()>)> {
    if cfg.assemblers.is_empty() {
        return Err(Error::Config {
            detail: "the orderer source needs at least one assembler endpoint".into(),
        });
    }
    let channels = cfg
        .assemblers
        .iter()
        .map(|uri| {
            clients::channel::lazy(uri, clients::channel::DEFAULT_CONNECT_TIMEOUT).map_err(|e| {
                Error::Config {
                    detail: format!("assembler {e}"),
                }
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let (tx, rx) = mpsc::channel(cfg.buffer.get());
    let mut sets = arma::ConsenterSets::new(&cfg.keys, cfg.config_rules.clone());
    if let Some(path) = &cfg.sets_file {
        let bad = |e: &dyn std::fmt::Display| Error::Config {
            detail: format!("the consenter sets in {}: {e}", path.display()),
        };
        if let Some(bytes) = clients::file::read_if_present(path).map_err(|e| bad(&e))? {
            sets.restore(&bytes).map_err(|e| bad(&e))?;
        }
    }
    let source = Source {
        sets,
        sets_file: cfg.sets_file,
        channels,
        endpoints: cfg.assemblers,
        retry: cfg.retry,
        stall: cfg.stall.max(Duration::from_millis(1)),
        next: from,
        previous: None,
        tx,
        decoder: wire::ProstDecoder::default(),
    };
    info!(from, assemblers = ?source.endpoints, "reading blocks from the orderer");
    Ok((rx, tokio::spawn(source.run())))
}

/// How a read of one assembler's stream ended.
enum Read {
    /// The stream failed, ended, or served a block that does not verify.
    Failed(String),
    /// The stream was silent while assembler `.0` holds the next block.
    Stalled(usize),
}

struct Source {
    sets: arma::ConsenterSets,
    sets_file: Option<std::path::PathBuf>,
    channels: Vec<Channel>,
    endpoints: Vec<String>,
    retry: Duration,
    stall: Duration,
    /// The next block to deliver.
    next: u64,
    /// The number and hash of block `next − 1`, once verified.
    previous: Option<(u64, Digest32)>,
    tx: mpsc::Sender<Block>,
    decoder: wire::ProstDecoder,
}

impl Source {
    async fn run(mut self) {
        let mut source = 0usize;
        let mut fruitless = 0usize;
        loop {
            let before = self.next;
            let i = source % self.channels.len();
            let ended = self.read(i).await;
            if self.tx.is_closed() {
                return;
            }
            let reason = match ended {
                Read::Stalled(j) => {
                    warn!(
                        assembler = self.endpoints[i],
                        next = self.next,
                        silent = ?self.stall,
                        to = self.endpoints[j],
                        "switching assembler"
                    );
                    source = j;
                    fruitless = 0;
                    continue;
                }
                Read::Failed(reason) => reason,
            };
            if self.next == before {
                warn!(
                    assembler = self.endpoints[i],
                    next = self.next,
                    reason,
                    "no blocks from this assembler; trying the next"
                );
                source = source.wrapping_add(1);
                fruitless += 1;
                if fruitless >= self.channels.len() {
                    fruitless = 0;
                    tokio::time::sleep(self.retry).await;
                }
            } else {
                debug!(
                    assembler = self.endpoints[i],
                    next = self.next,
                    reason,
                    "Deliver stream ended"
                );
                fruitless = 0;
            }
        }
    }

    /// Whether another assembler than `i` holds block `next` (asked for its header).
    async fn ahead_elsewhere(&self, i: usize) -> Option<usize> {
        for k in 1..self.channels.len() {
            let j = (i + k) % self.channels.len();
            let has = clients::deliver::has_block(self.channels[j].clone(), self.next, self.stall).await;
            if has == Some(true) {
                return Some(j);
            }
        }
        None
    }

    /// Reads assembler `i`'s stream.
    async fn read(&mut self, i: usize) -> Read {
        let channel = self.channels[i].clone();
        // Without the previous block's hash, start one block early to anchor the chain.
        let anchor = match self.previous {
            None => self.next.checked_sub(1),
            Some(_) => None,
        };
        let request = pb::DeliverRequest {
            from: anchor.unwrap_or(self.next),
            to: None,
            headers_only: false,
            to_end: false,
        };
        let mut stream = match clients::deliver::open(channel, request, MAX_MESSAGE_BYTES).await {
            Ok(s) => s,
            Err(s) => return Read::Failed(format!("open: {:?}: {}", s.code(), s.message())),
        };
        loop {
            let b = match tokio::time::timeout(self.stall, stream.message()).await {
                Ok(Ok(Some(b))) => b,
                Ok(Ok(None)) => return Read::Failed("ended".into()),
                Ok(Err(s)) => return Read::Failed(format!("{:?}: {}", s.code(), s.message())),
                Err(_) => match self.ahead_elsewhere(i).await {
                    Some(j) => return Read::Stalled(j),
                    None => continue,
                },
            };
            let number = b.header.as_ref().map_or(u64::MAX, |h| h.number);
            if anchor == Some(number) && self.previous.is_none() {
                match self.sets.verify_block(&b, None) {
                    Ok(v) => {
                        self.previous = Some((number, v.hash));
                        continue;
                    }
                    Err(e) => {
                        return Read::Failed(format!("block {number} (the anchor) does not verify: {e}"));
                    }
                }
            }
            if number != self.next {
                return Read::Failed(format!("block {number} arrived while {} was expected", self.next));
            }
            let verified = match self.verify(&b) {
                Ok(v) => v,
                Err(e) => return Read::Failed(e),
            };
            let hash = verified.hash;
            let block = to_block(b, &verified, &self.decoder);
            if self.tx.send(block).await.is_err() {
                return Read::Failed("sidecar stopped".into());
            }
            self.previous = Some((number, hash));
            self.next = self.next.saturating_add(1);
        }
    }
}

impl Source {
    /// Verifies the next block under the consenter set in force for its decision; a
    /// config block makes its set the next one (persisted before the block is handed on).
    fn verify(&mut self, b: &pb::OrderedBlock) -> std::result::Result<VerifiedBlock, String> {
        let decision = b.proof.as_ref().map_or(0, |p| p.decision);
        let (chain, verifier, members) = self.sets.set_for(decision);
        let v = check(b, self.previous, &chain, verifier.as_ref(), &members)?;
        let epoch = self.sets.epoch();
        self.sets
            .learn_from_block(b, &v)
            .map_err(|e| format!("block {}: {e}", v.header.number))?;
        if self.sets.epoch() != epoch
            && let Some(path) = &self.sets_file
        {
            clients::file::write_durably(path, &self.sets.encode())
                .map_err(|e| format!("persisting the consenter sets to {}: {e}", path.display()))?;
        }
        Ok(v)
    }
}

/// Verifies a block for the committer: what [`arma::verify_pb_block`] checks, and every
/// request must be there (a config block's one request is its config).
pub fn check(
    b: &pb::OrderedBlock,
    previous: Option<(u64, Digest32)>,
    chain: &bft::ChainId,
    verifier: &dyn bft::Verifier,
    members: &bft::Members,
) -> std::result::Result<VerifiedBlock, String> {
    let number = b.header.as_ref().map_or(u64::MAX, |h| h.number);
    let v = arma::verify_pb_block(b, previous, chain, verifier, members)
        .map_err(|e| format!("block {number} does not verify: {e}"))?;
    let carried = if v.header.is_config() { 0 } else { b.requests.len() };
    let count_ok = usize::try_from(v.header.tx_count).is_ok_and(|c| c == carried);
    if !v.with_requests || !count_ok {
        return Err(format!(
            "block {number} carries {} of its {} requests",
            b.requests.len(),
            v.header.tx_count
        ));
    }
    Ok(v)
}

/// The committer's block from a verified ordered block: each request is an envelope,
/// decoded and structurally checked once here; one that fails keeps its position with
/// its status. A configuration envelope is not applied by the committer yet: it gets
/// `MALFORMED_UNSUPPORTED_ENVELOPE_PAYLOAD`. An envelope of a self-certified creator
/// (`wire::SELF_CERTIFIED_MSP`) whose signature over the payload does not verify under
/// that creator's key is `MALFORMED_BAD_ENVELOPE` whatever else is wrong with it, which
/// is never stored: nobody but the creator can decide the creator's tx ids (the block's
/// claims are checked as one batch).
pub fn to_block(b: pb::OrderedBlock, v: &VerifiedBlock, decoder: &wire::ProstDecoder) -> Block {
    let h = &v.header;
    let signatures = b
        .proof
        .as_ref()
        .and_then(|p| arma::DecisionProof::try_from(p).ok())
        .map(|p| {
            p.signatures
                .into_iter()
                .filter(|(r, _)| v.signers.contains(r))
                .map(|(r, sig)| (r.saturating_add(1), sig.0))
                .collect()
        })
        .unwrap_or_default();
    let mut txs = Vec::with_capacity(b.requests.len());
    let mut refused = Vec::new();
    let mut envelopes = Vec::new();
    // A config block holds no transactions: its one request is the network config.
    let requests: &[Vec<u8>] = if h.is_config() { &[] } else { &b.requests };
    for (i, raw) in requests.iter().enumerate() {
        // Decoded in place (the payload is not copied first); the same outcome as
        // `pb::Envelope::decode` and `wire::check_decoded_envelope`.
        let (id, checked) = match wire::decode::decode_envelope(raw) {
            Some(env) => {
                let checked = wire::decode::check_envelope_ref(&env, decoder);
                // Whatever its structure, a self-certified envelope its creator did not
                // sign must not decide the creator's id: its signature is checked too.
                if env.self_certified_key().is_some() && checked != Err(Status::MalformedBadEnvelope) {
                    envelopes.push((i, env.to_pb()));
                }
                (env.tx_id.to_string(), checked)
            }
            None => (String::new(), Err(Status::MalformedBadEnvelope)),
        };
        let status = match checked {
            Ok(CheckedPayload::Tx(tx)) => {
                txs.push((TxId(id), Arc::new(tx)));
                continue;
            }
            Ok(CheckedPayload::Config(_)) => Status::MalformedUnsupportedEnvelopePayload,
            Err(s) => s,
        };
        // A block holds at most u32::MAX requests (its header counts them in a u32).
        refused.push((u32::try_from(i).unwrap_or(u32::MAX), status));
        txs.push((TxId(id), Arc::new(Tx::default())));
    }
    for i in unsigned_self_certified(&envelopes) {
        let at = u32::try_from(i).unwrap_or(u32::MAX);
        match refused.iter_mut().find(|(r, _)| *r == at) {
            Some(r) => r.1 = Status::MalformedBadEnvelope,
            None => refused.push((at, Status::MalformedBadEnvelope)),
        }
        if let Some(t) = txs.get_mut(i) {
            t.1 = Arc::new(Tx::default());
        }
    }
    refused.sort_unstable_by_key(|(i, _)| *i);
    Block {
        header: BlockHeader {
            number: h.number,
            previous_hash: h.previous_hash,
            data_hash: h.digest,
        },
        txs,
        metadata: BlockMetadata {
            batch: Some(BatchId::new(h.shard, h.primary, h.seq)),
            decision: h.decision,
            index_in_decision: h.index,
            signatures,
        },
        refused,
    }
}
