//! Fabric's forms of what the ordering service takes and serves (docs/fabric.md): the
//! checks a Fabric envelope passes before it is ordered, and the Fabric blocks an
//! assembler serves on `orderer.AtomicBroadcast/Deliver` — the genesis config block and
//! one data block per ordered batch, chained by Fabric's header hash. Pure: no I/O.
//!
//! * A network orders fabrx envelopes, Fabric envelopes or both ([`RequestFormat`]);
//!   every role checks a request by the same [`crate::admission::RequestPolicy`].
//! * A Fabric envelope is ordered as the bytes the client sent: its block's data hash is
//!   Fabric's (SHA-256 over each request's 4-byte big-endian length and bytes), which is
//!   also the batch digest fabrx orders (`types::digest::batch_digest`).
//! * Fabric block `n ≥ 1` is the party ledger's block `n − 1`; block 0 is the genesis
//!   config block ([`genesis_block`]). A header's hash is SHA-256 of the DER of
//!   `SEQUENCE { INTEGER number, OCTET STRING previous_hash, OCTET STRING data_hash }`
//!   ([`header_bytes`]).

use crate::header::Metadata;
use p256::ecdsa::signature::Verifier;
use prost::Message;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use wire::fabric::{EnvelopeParts, common, orderer};
use wire::pb;

/// The channel name of a fabrx network's Fabric edges (what Arma's tools use).
pub const CHANNEL: &str = "arma";

/// The shard Arma's assemblers name in the ORDERER metadata of a block that is not a
/// batch (the genesis block).
pub const CONSENSUS_SHARD: u32 = 0xffff;

/// Which envelopes a network orders (`network.json` `router.request_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestFormat {
    /// fabrx envelopes (`fabrx.v1.Envelope`), submitted with `fabrx.v1.Router`.
    #[default]
    Fabrx,
    /// Fabric envelopes (`common.Envelope`), submitted with `orderer.AtomicBroadcast`.
    Fabric,
    /// Both: a request with a tx id (field 4) is a fabrx envelope, any other a Fabric one.
    Both,
}

impl RequestFormat {
    /// Every format.
    pub const ALL: [RequestFormat; 3] = [RequestFormat::Fabrx, RequestFormat::Fabric, RequestFormat::Both];

    /// Its name in the network config.
    pub fn name(self) -> &'static str {
        match self {
            RequestFormat::Fabrx => "fabrx",
            RequestFormat::Fabric => "fabric",
            RequestFormat::Both => "both",
        }
    }

    /// The format named `name`.
    pub fn parse(name: &str) -> Option<RequestFormat> {
        RequestFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether Fabric envelopes are ordered.
    pub fn takes_fabric(self) -> bool {
        matches!(self, RequestFormat::Fabric | RequestFormat::Both)
    }

    /// Whether fabrx envelopes are ordered.
    pub fn takes_fabrx(self) -> bool {
        matches!(self, RequestFormat::Fabrx | RequestFormat::Both)
    }
}

/// The Fabric clients whose signatures a network accepts, by the certificate their
/// envelopes name (`SerializedIdentity.id_bytes`, PEM as written in the network config).
#[derive(Clone, Default)]
pub struct FabricClients {
    keys: HashMap<Vec<u8>, (String, p256::ecdsa::VerifyingKey)>,
}

impl std::fmt::Debug for FabricClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FabricClients({})", self.keys.len())
    }
}

impl PartialEq for FabricClients {
    fn eq(&self, other: &Self) -> bool {
        self.keys.len() == other.keys.len()
            && self
                .keys
                .iter()
                .all(|(k, v)| other.keys.get(k).is_some_and(|o| o.0 == v.0 && o.1 == v.1))
    }
}

impl Eq for FabricClients {}

impl FabricClients {
    /// No clients.
    pub fn new() -> FabricClients {
        FabricClients::default()
    }

    /// Adds the client of MSP `msp_id` whose certificate is `cert_pem` (an x509
    /// certificate with an ECDSA P-256 key); an envelope names it by these exact bytes.
    pub fn insert_pem(&mut self, msp_id: &str, cert_pem: &[u8]) -> Result<(), String> {
        let key = p256_key_of_pem(cert_pem)?;
        self.keys.insert(cert_pem.to_vec(), (msp_id.to_string(), key));
        Ok(())
    }

    /// Number of clients.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The ECDSA P-256 public key of the x509 certificate `pem`.
pub fn p256_key_of_pem(pem: &[u8]) -> Result<p256::ecdsa::VerifyingKey, String> {
    let (_, doc) =
        x509_parser::pem::parse_x509_pem(pem).map_err(|e| format!("not a PEM certificate: {e}"))?;
    let cert = doc
        .parse_x509()
        .map_err(|e| format!("not an x509 certificate: {e}"))?;
    let spki = cert.public_key();
    p256::ecdsa::VerifyingKey::from_sec1_bytes(&spki.subject_public_key.data)
        .map_err(|_| "the certificate's key is not an ECDSA P-256 key".to_string())
}

/// Whether the network requires Fabric envelopes to be signed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FabricAuth {
    /// Any creator; `Envelope.signature` is not checked.
    #[default]
    Open,
    /// `Envelope.signature` must be an ECDSA-SHA256 signature (DER, low S, as Fabric
    /// makes them) over `Envelope.payload` by the key of the creator's certificate, which
    /// must be one of these, under the MSP id it names.
    Signed(FabricClients),
}

/// Why a Fabric envelope is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FabricError {
    /// It does not decode or misses a part Fabric requires.
    #[error("malformed Fabric envelope: {0}")]
    Malformed(&'static str),
    /// Its header type is not one the ordering service orders.
    #[error("Fabric header type {0} is not ordered here (MESSAGE and ENDORSER_TRANSACTION are)")]
    Unsupported(i32),
    /// Signatures are required and the creator is not a client of the network.
    #[error("the creator is not a Fabric client of the network")]
    UnknownClient,
    /// The signature over the payload does not verify.
    #[error("the signature over the payload does not verify")]
    BadSignature,
}

/// The decoded header of a Fabric envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct FabricHeader {
    /// Its channel header.
    pub channel: common::ChannelHeader,
    /// Its signature header.
    pub signature: common::SignatureHeader,
}

/// Decodes an envelope's payload and header (no signature check).
pub fn decode_envelope(bytes: &[u8]) -> Result<(EnvelopeParts, common::Payload, FabricHeader), FabricError> {
    let env =
        EnvelopeParts::decode(bytes).map_err(|_| FabricError::Malformed("the envelope does not decode"))?;
    if env.payload.is_empty() {
        return Err(FabricError::Malformed("empty payload"));
    }
    let payload = common::Payload::decode(env.payload.as_ref())
        .map_err(|_| FabricError::Malformed("the payload does not decode"))?;
    let header = payload
        .header
        .as_ref()
        .ok_or(FabricError::Malformed("no payload header"))?;
    let channel = common::ChannelHeader::decode(header.channel_header.as_slice())
        .map_err(|_| FabricError::Malformed("the channel header does not decode"))?;
    let signature = common::SignatureHeader::decode(header.signature_header.as_slice())
        .map_err(|_| FabricError::Malformed("the signature header does not decode"))?;
    Ok((env, payload, FabricHeader { channel, signature }))
}

/// Checks a Fabric envelope as the ordering service orders it: it decodes, its header
/// type is MESSAGE or ENDORSER_TRANSACTION, it names a creator, and, when `auth` requires
/// it, the creator is a known client whose signature over the payload verifies.
pub fn check_envelope(bytes: &[u8], auth: &FabricAuth) -> Result<(), FabricError> {
    let (env, _payload, header) = decode_envelope(bytes)?;
    let kind = header.channel.r#type;
    if kind != common::HeaderType::Message as i32 && kind != common::HeaderType::EndorserTransaction as i32 {
        return Err(FabricError::Unsupported(kind));
    }
    if header.signature.creator.is_empty() {
        return Err(FabricError::Malformed("no creator in the signature header"));
    }
    if let FabricAuth::Signed(clients) = auth {
        let creator = common::SerializedIdentity::decode(header.signature.creator.as_slice())
            .map_err(|_| FabricError::UnknownClient)?;
        let (msp, key) = clients
            .keys
            .get(&creator.id_bytes)
            .ok_or(FabricError::UnknownClient)?;
        if *msp != creator.mspid {
            return Err(FabricError::UnknownClient);
        }
        verify_signature(key, &env.payload, &env.signature)?;
    }
    Ok(())
}

/// Verifies an ECDSA-SHA256 signature in DER with a low S, as Fabric requires.
pub fn verify_signature(
    key: &p256::ecdsa::VerifyingKey,
    message: &[u8],
    der: &[u8],
) -> Result<(), FabricError> {
    let sig = p256::ecdsa::Signature::from_der(der).map_err(|_| FabricError::BadSignature)?;
    if sig.normalize_s().is_some() {
        // A high S: Fabric refuses it (the same signature's other form).
        return Err(FabricError::BadSignature);
    }
    key.verify(message, &sig).map_err(|_| FabricError::BadSignature)
}

/// Appends a DER length.
fn der_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        // Fits in one byte: checked above.
        out.push(u8::try_from(len).unwrap_or(0));
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        let n = bytes.len() - skip;
        out.push(0x80 | u8::try_from(n).unwrap_or(0));
        out.extend_from_slice(&bytes[skip..]);
    }
}

/// Appends a DER element of tag `tag`.
fn der(out: &mut Vec<u8>, tag: u8, content: &[u8]) {
    out.push(tag);
    der_len(out, content.len());
    out.extend_from_slice(content);
}

/// The DER a Fabric block header is hashed over:
/// `SEQUENCE { INTEGER number, OCTET STRING previous_hash, OCTET STRING data_hash }`.
pub fn header_bytes(number: u64, previous_hash: &[u8], data_hash: &[u8]) -> Vec<u8> {
    // INTEGER: minimal big-endian two's complement of a non-negative number.
    let be = number.to_be_bytes();
    let skip = be.iter().take_while(|b| **b == 0).count().min(be.len() - 1);
    let mut int = Vec::with_capacity(9);
    if be[skip] & 0x80 != 0 {
        int.push(0);
    }
    int.extend_from_slice(&be[skip..]);
    let mut body = Vec::with_capacity(int.len() + previous_hash.len() + data_hash.len() + 12);
    der(&mut body, 0x02, &int);
    der(&mut body, 0x04, previous_hash);
    der(&mut body, 0x04, data_hash);
    let mut out = Vec::with_capacity(body.len() + 4);
    der(&mut out, 0x30, &body);
    out
}

/// The hash of a Fabric block header (SHA-256 of [`header_bytes`]).
pub fn header_hash(header: &common::BlockHeader) -> [u8; 32] {
    Sha256::digest(header_bytes(
        header.number,
        &header.previous_hash,
        &header.data_hash,
    ))
    .into()
}

/// Fabric's data hash of a block's data: `types::digest::batch_digest` (each item's 4-byte
/// big-endian length, then its bytes).
pub fn data_hash<T: AsRef<[u8]>>(data: &[T]) -> [u8; 32] {
    types::digest::batch_digest(data)
}

/// The five empty metadata slots of a new block.
fn empty_metadata() -> Vec<Vec<u8>> {
    vec![Vec::new(); 5]
}

fn last_config_zero() -> Vec<u8> {
    common::Metadata {
        value: common::LastConfig { index: 0 }.encode_to_vec(),
        signatures: Vec::new(),
    }
    .encode_to_vec()
}

/// What a data block holds (`SeekInfo.content_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// Header, data and metadata.
    Block,
    /// Header and metadata (the signatures) without the data.
    HeaderWithSig,
}

/// Why a party-ledger block cannot be served as a Fabric block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// The ledger block has no header or no proof.
    #[error("ledger block without {0}")]
    Missing(&'static str),
    /// Block numbers overflow.
    #[error("block number {0} has no Fabric number")]
    Number(u64),
}

/// Fabric block `ledger.number + 1` of the party-ledger block `ledger`, after the Fabric
/// block whose header hash is `previous_hash`, with `transaction_count` txs in the Fabric
/// ledger up to and with it (the genesis block counts 1).
///
/// Metadata (docs/fabric.md "Blocks"): SIGNATURES holds the consenters' signatures over
/// the decision that ordered the batch (fabrx's signatures: they verify with
/// `arma::verify_pb_block`, not with Fabric's BFT rule), each named by its consenter
/// party, with the last config index 0 and the decision's proof without signatures as
/// consenter metadata; LAST_CONFIG holds index 0; ORDERER holds Arma's assembler
/// metadata (shard, primary, seq, decision, batch index and count, transaction count).
pub fn data_block(
    ledger: &pb::OrderedBlock,
    previous_hash: &[u8; 32],
    transaction_count: u64,
    content: Content,
) -> Result<common::Block, BlockError> {
    let h = ledger.header.as_ref().ok_or(BlockError::Missing("header"))?;
    let proof = ledger.proof.as_ref().ok_or(BlockError::Missing("proof"))?;
    let number = h.number.checked_add(1).ok_or(BlockError::Number(h.number))?;
    let batch_count = Metadata::decode(&proof.metadata)
        .map(|m| u32::try_from(m.header_hashes.len()).unwrap_or(u32::MAX))
        .unwrap_or(0);
    let unsigned = pb::DecisionProof {
        signatures: Vec::new(),
        ..proof.clone()
    };
    let signatures = common::Metadata {
        value: common::OrdererBlockMetadata {
            last_config: Some(common::LastConfig { index: 0 }),
            consenter_metadata: unsigned.encode_to_vec(),
        }
        .encode_to_vec(),
        signatures: proof
            .signatures
            .iter()
            .map(|s| common::MetadataSignature {
                signature_header: Vec::new(),
                signature: s.signature.clone(),
                identifier_header: common::IdentifierHeader {
                    identifier: s.signer,
                    nonce: Vec::new(),
                }
                .encode_to_vec(),
            })
            .collect(),
    };
    let orderer = orderer::AssemblerBlockMetadata {
        shard: h.shard,
        primary: h.primary,
        sequence: h.seq,
        decision_num: h.decision,
        batch_index: h.index,
        batch_count,
        transaction_count,
    };
    let mut metadata = empty_metadata();
    metadata[common::BlockMetadataIndex::Signatures as usize] = signatures.encode_to_vec();
    metadata[common::BlockMetadataIndex::LastConfig as usize] = last_config_zero();
    metadata[common::BlockMetadataIndex::Orderer as usize] = orderer.encode_to_vec();
    Ok(common::Block {
        header: Some(common::BlockHeader {
            number,
            previous_hash: previous_hash.to_vec(),
            data_hash: h.batch_digest.clone(),
        }),
        data: Some(common::BlockData {
            data: match content {
                // A config block's one request is fabrx's network config, not a Fabric
                // envelope: it is served without data (docs/fabric.md "Blocks").
                Content::Block if h.shard == crate::CONFIG_SHARD => Vec::new(),
                Content::Block => ledger.requests.clone(),
                Content::HeaderWithSig => Vec::new(),
            },
        }),
        metadata: Some(common::BlockMetadata { metadata }),
    })
}

/// One organization of a genesis config block: a party's MSP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenesisOrg {
    /// Its MSP id.
    pub msp_id: String,
    /// Its identity CA certificates (PEM).
    pub root_certs: Vec<Vec<u8>>,
    /// Its TLS CA certificates (PEM).
    pub tls_root_certs: Vec<Vec<u8>>,
    /// Its ordering endpoints (`host:port`).
    pub endpoints: Vec<String>,
}

/// What a genesis config block says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Genesis {
    /// The channel id.
    pub channel: String,
    /// The parties' organizations, in party order.
    pub orgs: Vec<GenesisOrg>,
    /// The `ConsensusType` metadata: fabrx puts its network config there.
    pub consensus_metadata: Vec<u8>,
    /// Most requests in a batch.
    pub max_message_count: u32,
    /// Most bytes in a batch.
    pub absolute_max_bytes: u32,
}

fn value(v: Vec<u8>) -> common::ConfigValue {
    common::ConfigValue {
        version: 0,
        value: v,
        mod_policy: "Admins".into(),
    }
}

/// The config group of one organization: its MSP and its endpoints.
fn org_group(org: &GenesisOrg) -> common::ConfigGroup {
    let msp = common::FabricMspConfig {
        name: org.msp_id.clone(),
        root_certs: org.root_certs.clone(),
        intermediate_certs: Vec::new(),
        admins: Vec::new(),
        crypto_config: Some(common::FabricCryptoConfig {
            signature_hash_family: "SHA2".into(),
            identity_identifier_hash_function: "SHA256".into(),
        }),
        tls_root_certs: org.tls_root_certs.clone(),
    };
    let mut group = common::ConfigGroup {
        mod_policy: "Admins".into(),
        ..Default::default()
    };
    let msp = common::MspConfig {
        r#type: 0,
        config: msp.encode_to_vec(),
    };
    group.values.insert("MSP".into(), value(msp.encode_to_vec()));
    let endpoints = common::OrdererAddresses {
        addresses: org.endpoints.clone(),
    };
    group
        .values
        .insert("Endpoints".into(), value(endpoints.encode_to_vec()));
    group
}

/// The channel group: hashing, the orderer group with its organizations, consensus type
/// and batch size.
fn channel_group(g: &Genesis) -> common::ConfigGroup {
    let mut orderer = common::ConfigGroup {
        mod_policy: "Admins".into(),
        ..Default::default()
    };
    for org in &g.orgs {
        orderer.groups.insert(org.msp_id.clone(), org_group(org));
    }
    let consensus = common::ConsensusType {
        r#type: "arma".into(),
        metadata: g.consensus_metadata.clone(),
        state: 0,
    };
    orderer
        .values
        .insert("ConsensusType".into(), value(consensus.encode_to_vec()));
    let batch = common::BatchSize {
        max_message_count: g.max_message_count,
        absolute_max_bytes: g.absolute_max_bytes,
        preferred_max_bytes: g.absolute_max_bytes,
    };
    orderer
        .values
        .insert("BatchSize".into(), value(batch.encode_to_vec()));
    let mut channel = common::ConfigGroup {
        mod_policy: "Admins".into(),
        ..Default::default()
    };
    channel.groups.insert("Orderer".into(), orderer);
    let hashing = common::HashingAlgorithm {
        name: "SHA256".into(),
    };
    channel
        .values
        .insert("HashingAlgorithm".into(), value(hashing.encode_to_vec()));
    let structure = common::BlockDataHashingStructure { width: u32::MAX };
    channel.values.insert(
        "BlockDataHashingStructure".into(),
        value(structure.encode_to_vec()),
    );
    channel
}

/// The genesis block's CONFIG envelope (unsigned, without a timestamp).
fn config_envelope(g: &Genesis) -> Vec<u8> {
    let config = common::ConfigEnvelope {
        config: Some(common::Config {
            sequence: 0,
            channel_group: Some(channel_group(g)),
        }),
        last_update: None,
    };
    let channel_header = common::ChannelHeader {
        r#type: common::HeaderType::Config as i32,
        channel_id: g.channel.clone(),
        ..Default::default()
    };
    let payload = common::Payload {
        header: Some(common::Header {
            channel_header: channel_header.encode_to_vec(),
            signature_header: common::SignatureHeader::default().encode_to_vec(),
        }),
        data: config.encode_to_vec(),
    };
    wire::fabric::RawEnvelope::from_parts(&payload.encode_to_vec(), &[])
        .bytes
        .to_vec()
}

/// The genesis config block: block 0, one CONFIG envelope whose `ConfigEnvelope` holds
/// the channel config — the SHA-256 hashing algorithm and Fabric's block data hashing
/// structure, the orderer group (consensus type `arma` with `consensus_metadata`, the
/// batch size, one group per organization with its MSP and endpoints). The same
/// [`Genesis`] gives the same bytes on every node (maps are encoded in key order; no
/// timestamp, no signature).
pub fn genesis_block(g: &Genesis) -> common::Block {
    let data = vec![config_envelope(g)];
    let mut metadata = empty_metadata();
    let signatures = common::Metadata {
        value: common::OrdererBlockMetadata {
            last_config: Some(common::LastConfig { index: 0 }),
            consenter_metadata: Vec::new(),
        }
        .encode_to_vec(),
        signatures: Vec::new(),
    };
    metadata[common::BlockMetadataIndex::Signatures as usize] = signatures.encode_to_vec();
    metadata[common::BlockMetadataIndex::LastConfig as usize] = last_config_zero();
    let orderer = orderer::AssemblerBlockMetadata {
        shard: CONSENSUS_SHARD,
        transaction_count: 1,
        ..Default::default()
    };
    metadata[common::BlockMetadataIndex::Orderer as usize] = orderer.encode_to_vec();
    common::Block {
        header: Some(common::BlockHeader {
            number: 0,
            previous_hash: Vec::new(),
            data_hash: data_hash(&data).to_vec(),
        }),
        data: Some(common::BlockData { data }),
        metadata: Some(common::BlockMetadata { metadata }),
    }
}

#[cfg(test)]
#[path = "fabric_tests.rs"]
mod tests;
