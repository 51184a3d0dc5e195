//! Block headers, term changes and a decision's metadata (docs/consenter.md "Headers").
//!
//! Every consenter computes the same bytes from the same decision; the hash of a header's
//! bytes is the block hash, and the next header's `previous_hash`. All integers are
//! big-endian.

use sha2::{Digest as _, Sha256};
use types::digest::Digest32;
use types::tags::consenter as tags;
use types::{BatchId, PartyId, ShardId};

use crate::error::{ProofError as ArmaError, ProofResult as ArmaResult};

/// The shard of a config block's header: a decision that puts a network config in force
/// appends one block whose data is the config's canonical bytes (its only request),
/// with this shard, primary 0, term 0, seq = the config's epoch and no transactions.
pub const CONFIG_SHARD: ShardId = ShardId::MAX;

/// The header of one ordered block: one batch ordered by the consenters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrderedHeader {
    /// The block number (0 is the first block).
    pub number: u64,
    /// The hash of the previous block's header (zeros for block 0).
    pub previous_hash: Digest32,
    /// The batch digest (`types::digest::batch_digest` of its requests): the block's data hash.
    pub digest: Digest32,
    /// The batch's shard.
    pub shard: ShardId,
    /// The term in which the primary cut the batch.
    pub term: u64,
    /// The primary that cut it.
    pub primary: PartyId,
    /// The primary's seq.
    pub seq: u64,
    /// The BFT sequence number of the decision that ordered it.
    pub decision: u64,
    /// Its index among the headers of that decision.
    pub index: u32,
    /// Number of requests in the batch.
    pub tx_count: u32,
}

/// Length of [`OrderedHeader::bytes`] after the tag.
const HEADER_BODY: usize = 8 + 32 + 32 + 4 + 8 + 4 + 8 + 8 + 4 + 4;

impl OrderedHeader {
    /// Whether this is a config block's header ([`CONFIG_SHARD`]).
    pub fn is_config(&self) -> bool {
        self.shard == CONFIG_SHARD
    }

    /// The data hash of a config block holding `config` (the batch digest of the one
    /// request it carries).
    pub fn config_digest(config: &[u8]) -> Digest32 {
        types::digest::batch_digest(&[config])
    }

    /// `tags::HEADER ‖ u64 number ‖ previous_hash ‖ digest ‖ u32 shard ‖ u64 term ‖
    /// u32 primary ‖ u64 seq ‖ u64 decision ‖ u32 index ‖ u32 tx_count`.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(tags::HEADER.len() + HEADER_BODY);
        out.extend_from_slice(tags::HEADER);
        out.extend_from_slice(&self.number.to_be_bytes());
        out.extend_from_slice(&self.previous_hash);
        out.extend_from_slice(&self.digest);
        out.extend_from_slice(&self.shard.to_be_bytes());
        out.extend_from_slice(&self.term.to_be_bytes());
        out.extend_from_slice(&self.primary.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.decision.to_be_bytes());
        out.extend_from_slice(&self.index.to_be_bytes());
        out.extend_from_slice(&self.tx_count.to_be_bytes());
        out
    }

    /// The block hash: `SHA-256(bytes)`.
    pub fn hash(&self) -> Digest32 {
        Sha256::digest(self.bytes()).into()
    }

    /// The ordered batch's id.
    pub fn batch_id(&self) -> BatchId {
        BatchId::new(self.shard, self.primary, self.seq)
    }
}

/// A shard moved to a new term (f+1 complaints, or a proven equivocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TermChange {
    /// The shard.
    pub shard: ShardId,
    /// Its new term (its primary is party `((shard + term) mod N) + 1`).
    pub term: u64,
    /// The seq of its last ordered batch: the new primary starts after it.
    pub last_ordered_seq: u64,
}

/// What one decision did: the blocks it ordered, the terms it changed, in order, and the
/// network config it put in force, if it applied a config update.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// One header per ordered batch.
    pub headers: Vec<OrderedHeader>,
    /// The term changes, in the order they happened.
    pub terms: Vec<TermChange>,
    /// The config this decision put in force (at its end: every item of the decision
    /// counted under the config before it).
    pub config: Option<ConfigChange>,
}

/// A config a decision put in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigChange {
    /// The consenter set's epoch from this decision on (one more than before).
    pub epoch: u64,
    /// The config's own sequence number.
    pub sequence: u64,
    /// The config's canonical bytes (what [`crate::ConfigRules`] reads).
    pub config: Vec<u8>,
}

impl ConfigChange {
    /// What the metadata certifies of it: epoch, sequence and SHA-256 of the bytes.
    pub fn certified(&self) -> CertifiedConfig {
        CertifiedConfig {
            epoch: self.epoch,
            sequence: self.sequence,
            digest: Sha256::digest(&self.config).into(),
        }
    }
}

/// What a decision's certificate says of the config it put in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CertifiedConfig {
    /// The consenter set's epoch from the decision on.
    pub epoch: u64,
    /// The config's sequence.
    pub sequence: u64,
    /// SHA-256 of the config's canonical bytes.
    pub digest: Digest32,
}

/// A decoded metadata: what a decision's quorum certificate signs about its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The hash of each header of the decision, in order.
    pub header_hashes: Vec<Digest32>,
    /// The term changes.
    pub terms: Vec<TermChange>,
    /// The config the decision put in force.
    pub config: Option<CertifiedConfig>,
}

/// Length of one encoded term change.
const TERM_BYTES: usize = 4 + 8 + 8;

/// Length of the encoded config section (after its marker byte).
const CONFIG_BYTES: usize = 8 + 8 + 32;

/// Marker byte of the config section.
const CONFIG_MARKER: u8 = 1;

impl Outcome {
    /// The proposal metadata: `tags::METADATA ‖ u32 count ‖ header hashes ‖ u32 count ‖
    /// (u32 shard ‖ u64 term ‖ u64 last_ordered_seq)…`, then, for a decision that put a
    /// config in force, `0x01 ‖ u64 epoch ‖ u64 sequence ‖ SHA-256(config)` (nothing
    /// otherwise, so a decision without one has the bytes it always had). The quorum
    /// certificate of the decision signs it (through the proposal digest), so it
    /// certifies every header and the config switch.
    pub fn metadata(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            tags::METADATA.len()
                + 8
                + 32 * self.headers.len()
                + TERM_BYTES * self.terms.len()
                + 1
                + CONFIG_BYTES,
        );
        out.extend_from_slice(tags::METADATA);
        out.extend_from_slice(&count(self.headers.len()).to_be_bytes());
        for h in &self.headers {
            out.extend_from_slice(&h.hash());
        }
        out.extend_from_slice(&count(self.terms.len()).to_be_bytes());
        for t in &self.terms {
            out.extend_from_slice(&t.shard.to_be_bytes());
            out.extend_from_slice(&t.term.to_be_bytes());
            out.extend_from_slice(&t.last_ordered_seq.to_be_bytes());
        }
        if let Some(c) = &self.config {
            let c = c.certified();
            out.push(CONFIG_MARKER);
            out.extend_from_slice(&c.epoch.to_be_bytes());
            out.extend_from_slice(&c.sequence.to_be_bytes());
            out.extend_from_slice(&c.digest);
        }
        out
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Metadata {
    /// Decodes [`Outcome::metadata`] bytes (from the wire: every length is checked).
    pub fn decode(bytes: &[u8]) -> ArmaResult<Metadata> {
        let bad = |what: &'static str| ArmaError::Metadata { what };
        let mut r = Reader(bytes.strip_prefix(tags::METADATA).ok_or(bad("tag"))?);
        let n = r.u32().ok_or(bad("header count"))? as usize;
        if r.0.len() / 32 < n {
            return Err(bad("header hashes"));
        }
        let mut header_hashes = Vec::with_capacity(n);
        for _ in 0..n {
            header_hashes.push(r.array().ok_or(bad("header hash"))?);
        }
        let m = r.u32().ok_or(bad("term count"))? as usize;
        if r.0.len() / TERM_BYTES < m {
            return Err(bad("term changes"));
        }
        let mut terms = Vec::with_capacity(m);
        for _ in 0..m {
            let shard = r.u32().ok_or(bad("term shard"))?;
            let term = r.u64().ok_or(bad("term"))?;
            let last_ordered_seq = r.u64().ok_or(bad("term seq"))?;
            terms.push(TermChange {
                shard,
                term,
                last_ordered_seq,
            });
        }
        let config = match r.take::<1>() {
            None => None,
            Some([CONFIG_MARKER]) => {
                let epoch = r.u64().ok_or(bad("config epoch"))?;
                let sequence = r.u64().ok_or(bad("config sequence"))?;
                let digest = r.array().ok_or(bad("config digest"))?;
                Some(CertifiedConfig {
                    epoch,
                    sequence,
                    digest,
                })
            }
            Some(_) => return Err(bad("trailing bytes")),
        };
        if !r.0.is_empty() {
            return Err(bad("trailing bytes"));
        }
        Ok(Metadata {
            header_hashes,
            terms,
            config,
        })
    }
}

/// A cursor over big-endian fields.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_be_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_be_bytes)
    }
    fn array(&mut self) -> Option<[u8; 32]> {
        self.take::<32>()
    }
}
