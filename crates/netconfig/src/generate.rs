//! Network generation (`fabrx network generate`): one key per signing node, the shared
//! network config with their public keys and endpoints, and the consenter peer-keys file.
//! Only files are written; nothing is started.
//!
//! Layout under `dir`:
//!
//! ```text
//! config/network-config.json        the shared network config (public)
//! config/consenter-peer-keys.txt    derived from it: the consenters' keys, replica order
//! keys/party-<p>/consenter.key      party p's consenter key (mode 0600)
//! keys/party-<p>/batcher-<s>.key    party p's batcher of shard s (mode 0600)
//! keys/party-<p>/admin.key          party p's admin key: signs config updates (mode 0600)
//! keys/admin/meta.key               the administrator's key: endorses `_meta` txs
//! keys/admin/issuer.key             the token issuer's key
//! keys/endorsers/endorser-<i>.key   share i of the token namespace's threshold key
//! ```
//!
//! [`party::add_party`] (`fabrx network party add`) writes a joining party's files in the
//! same layout.

use crate::config::NetworkConfig;
use crate::error::{Error, Node, Result};
use crate::file::{BatcherFile, KeyedEndpoint, NetworkFile, PartyFile, VERSION};
use crypto::{Scheme, SigningKey};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use types::PartyId;

pub mod party;

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateSpec {
    /// Number of parties N (at least 1).
    pub parties: u32,
    /// Number of shards S (at least 1).
    pub shards: u32,
    /// The host every endpoint names (default `127.0.0.1`).
    pub host: String,
    /// The first port ([`port_of`] lays out the rest; default 7050).
    pub base_port: u16,
    /// `None`: keys from the OS's random source. `Some(seed)`: keys derived from the seed
    /// (`crypto::derive_signing_key`), the same for the same seed; tests and demos only,
    /// anyone who knows the seed has every key.
    pub seed: Option<u64>,
    /// The chain name (default `consenter::keys::DEFAULT_CHAIN`).
    pub chain: String,
    /// The directory to write into (created if missing).
    pub dir: PathBuf,
    /// Mutual TLS on every link: a CA and a certificate per node under `dir/tls`
    /// (off: plain TCP, for experiments only).
    pub tls: bool,
}

impl GenerateSpec {
    /// `parties` parties and `shards` shards on `127.0.0.1` from port 7050, random keys.
    pub fn new(parties: u32, shards: u32, dir: impl Into<PathBuf>) -> GenerateSpec {
        GenerateSpec {
            parties,
            shards,
            host: "127.0.0.1".into(),
            base_port: 7050,
            seed: None,
            chain: consenter::keys::DEFAULT_CHAIN.into(),
            dir: dir.into(),
            tls: true,
        }
    }
}

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The network config file.
    pub config_path: PathBuf,
    /// The consenter peer-keys file.
    pub peer_keys_path: PathBuf,
    /// Every node's key file, by node.
    pub key_files: Vec<(Node, PathBuf)>,
    /// Every party's admin key file (signs config updates), by party.
    pub admin_key_files: Vec<(PartyId, PathBuf)>,
    /// The config as written.
    pub config: NetworkConfig,
}

/// `<dir>/config/network-config.json`.
pub fn config_path(dir: &Path) -> PathBuf {
    dir.join("config").join("network-config.json")
}

/// `<dir>/config/consenter-peer-keys.txt`.
pub fn peer_keys_path(dir: &Path) -> PathBuf {
    dir.join("config").join("consenter-peer-keys.txt")
}

/// The key file of `node` under `dir` (routers and assemblers have none).
pub fn key_file_path(dir: &Path, node: Node) -> Option<PathBuf> {
    let party_dir = |p: PartyId| dir.join("keys").join(format!("party-{p}"));
    match node {
        Node::Consenter(p) => Some(party_dir(p).join("consenter.key")),
        Node::Batcher { party, shard } => Some(party_dir(party).join(format!("batcher-{shard}.key"))),
        Node::Router(_) | Node::Assembler(_) => None,
    }
}

/// `<dir>/keys/party-<p>/admin.key`: party `p`'s admin key, which signs config updates
/// for the party (docs/reconfiguration.md).
pub fn admin_key_path(dir: &Path, party: PartyId) -> PathBuf {
    dir.join("keys").join(format!("party-{party}")).join("admin.key")
}

/// Party `party`'s admin key: derived from `seed`, or random.
fn admin_key(seed: Option<u64>, party: PartyId) -> SigningKey {
    match seed {
        None => SigningKey::generate(Scheme::Ed25519, &mut rand::rngs::OsRng),
        Some(seed) => {
            crypto::derive_signing_key(Scheme::Ed25519, &format!("fabrx-net/{seed}/party-admin/{party}"))
        }
    }
}

/// The port of `node` in a generated network: party `p` takes the `3 + shards` ports from
/// `base_port + (p − 1)·(3 + shards)`: router, consenter, assembler, then its batchers in
/// shard order. `None` past port 65535.
pub fn port_of(base_port: u16, shards: u32, node: Node) -> Option<u16> {
    let stride = u64::from(shards) + 3;
    let (party, offset) = match node {
        Node::Router(p) => (p, 0),
        Node::Consenter(p) => (p, 1),
        Node::Assembler(p) => (p, 2),
        Node::Batcher { party, shard } => (party, 3 + u64::from(shard)),
    };
    let port = u64::from(base_port) + u64::from(party.checked_sub(1)?) * stride + offset;
    u16::try_from(port).ok()
}

/// The key of `node`: derived from `seed`, or random.
fn node_key(seed: Option<u64>, node: Node) -> SigningKey {
    match seed {
        None => SigningKey::generate(Scheme::Ed25519, &mut rand::rngs::OsRng),
        Some(seed) => crypto::derive_signing_key(Scheme::Ed25519, &seed_of(seed, node)),
    }
}

/// The seed string of `node`'s key. A consenter's is `consenter_seed_prefix(seed)` and its
/// replica id, so a generated network's consenters also run with `fabrx node bft
/// --seed-prefix`.
fn seed_of(seed: u64, node: Node) -> String {
    match node {
        Node::Consenter(p) => format!("{}{}", consenter_seed_prefix(seed), p.saturating_sub(1)),
        Node::Batcher { party, shard } => format!("fabrx-net/{seed}/batcher/{party}/{shard}"),
        Node::Router(p) => format!("fabrx-net/{seed}/router/{p}"),
        Node::Assembler(p) => format!("fabrx-net/{seed}/assembler/{p}"),
    }
}

/// The `--seed-prefix` of `fabrx node bft` that gives the consenter keys of a network
/// generated with `seed`.
pub fn consenter_seed_prefix(seed: u64) -> String {
    format!("fabrx-net/{seed}/consenter/")
}

/// The endpoint `host:port` of `node` (`[host]:port` for an IPv6 host).
fn endpoint_of(spec: &GenerateSpec, node: Node) -> Result<String> {
    let port = port_of(spec.base_port, spec.shards, node).ok_or_else(|| Error::Generate {
        reason: format!(
            "{node} would need a port above 65535 (base port {}, {} parties, {} shards)",
            spec.base_port, spec.parties, spec.shards
        ),
    })?;
    if spec.host.contains(':') && !spec.host.starts_with('[') {
        return Ok(format!("[{}]:{port}", spec.host));
    }
    Ok(format!("{}:{port}", spec.host))
}

/// The keys [`build`] made: the signing nodes' and the parties' admins'.
struct BuiltKeys {
    nodes: Vec<(Node, SigningKey)>,
    admins: Vec<(PartyId, SigningKey)>,
}

/// The network file and the keys of its signing nodes and admins, in memory.
fn build(
    spec: &GenerateSpec,
    meta_key: &crypto::PublicKey,
    token: crate::file::TokenFile,
) -> Result<(NetworkFile, BuiltKeys)> {
    let mut keys = Vec::new();
    let mut admins = Vec::new();
    let mut parties = Vec::new();
    for id in 1..=spec.parties {
        let consenter = node_key(spec.seed, Node::Consenter(id));
        let admin = admin_key(spec.seed, id);
        let mut batchers = Vec::new();
        for shard in 0..spec.shards {
            let node = Node::Batcher { party: id, shard };
            let key = node_key(spec.seed, node);
            batchers.push(BatcherFile {
                shard,
                endpoint: endpoint_of(spec, node)?,
                public_key: key.public_key().to_string(),
            });
            keys.push((node, key));
        }
        parties.push(PartyFile {
            id,
            router: endpoint_of(spec, Node::Router(id))?,
            consenter: KeyedEndpoint {
                endpoint: endpoint_of(spec, Node::Consenter(id))?,
                public_key: consenter.public_key().to_string(),
            },
            assembler: Some(endpoint_of(spec, Node::Assembler(id))?),
            batchers,
            admin_key: Some(admin.public_key().to_string()),
        });
        keys.push((Node::Consenter(id), consenter));
        admins.push((id, admin));
    }
    let file = NetworkFile {
        version: VERSION,
        chain: spec.chain.clone(),
        sequence: 0,
        shards: spec.shards,
        parties,
        batching: Default::default(),
        consensus: Default::default(),
        router: Default::default(),
        tls: None,
        fabric: None,
        token: Some(token),
        committer: Some(crate::committer::generated(
            meta_key,
            &spec.host,
            spec.base_port,
            spec.parties,
            spec.shards,
        )?),
        update_policy: None,
        retired_keys: Vec::new(),
        left_parties: Vec::new(),
    };
    Ok((file, BuiltKeys { nodes: keys, admins }))
}

fn write_error(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Every node that holds a TLS certificate: each party's ordering and committer nodes.
fn tls_holders(spec: &GenerateSpec) -> Vec<wire::tls::Peer> {
    use wire::tls::{Peer, Role};
    let mut out = Vec::new();
    for party in 1..=spec.parties {
        let node = |role| Peer {
            role,
            party,
            shard: None,
        };
        out.extend([Role::Router, Role::Consenter, Role::Assembler].map(node));
        out.extend((0..spec.shards).map(|s| Peer {
            role: Role::Batcher,
            party,
            shard: Some(s),
        }));
        out.extend([Role::Sidecar, Role::Sigverifier, Role::Vcservice, Role::Query].map(node));
    }
    // An endorser's certificate names the party that runs it and, in the shard field,
    // its share index (several endorsers may run in one party).
    for index in 1..=crate::token::DEFAULT_ENDORSERS {
        out.push(Peer {
            role: Role::Endorser,
            party: crate::token::endorser_party(index, spec.parties),
            shard: Some(index),
        });
    }
    out
}

/// Writes a key file (mode 0600) in a directory of mode 0700.
fn write_key(path: &Path, key: &SigningKey) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(write_error(parent))?;
    }
    crypto::write_key_file(path, key).map_err(|e| Error::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Writes a new network under `spec.dir` (layout in the module docs). Refuses a directory
/// that already holds a network config or any of the key files; validates the config
/// before writing anything.
pub fn generate(spec: &GenerateSpec) -> Result<Generated> {
    generate_with(spec, &|_| Ok(()))
}

/// [`generate`], with `rewrite` applied to the network file (e.g. its endpoints, by
/// [`crate::k8s`]) after it is built and before it is validated and written.
pub(crate) fn generate_with(
    spec: &GenerateSpec,
    rewrite: &dyn Fn(&mut NetworkFile) -> Result<()>,
) -> Result<Generated> {
    if spec.parties == 0 {
        return Err(Error::NoParties);
    }
    if spec.shards == 0 {
        return Err(Error::NoShards);
    }
    let config_path = config_path(&spec.dir);
    if config_path.exists() {
        return Err(Error::Exists { path: config_path });
    }
    let meta_key = match spec.seed {
        None => SigningKey::generate(Scheme::Ed25519, &mut rand::rngs::OsRng),
        Some(seed) => crypto::derive_signing_key(Scheme::Ed25519, &format!("fabrx-net/{seed}/admin/meta")),
    };
    let token = crate::token::generated(spec.seed, &spec.host, spec.base_port, spec.parties, spec.shards)?;
    let (mut file, keys) = build(spec, &meta_key.public_key(), token.file.clone())?;
    rewrite(&mut file)?;
    if spec.tls {
        file.tls = Some(crate::tls::generate(&spec.dir, &spec.host, &tls_holders(spec))?);
    }
    file.fabric = Some(crate::fabric::generate(&spec.dir, &file)?);
    let config = NetworkConfig::from_file(file)?;
    let meta_path = crate::committer::meta_key_path(&spec.dir);
    write_key(&meta_path, &meta_key)?;
    write_key(&crate::token::issuer_key_path(&spec.dir), &token.issuer)?;
    for share in &token.shares {
        write_key(
            &crate::token::endorser_key_path(&spec.dir, share.index()),
            share.signing_key(),
        )?;
    }
    let mut key_files = Vec::with_capacity(keys.nodes.len());
    for (node, key) in &keys.nodes {
        let Some(path) = key_file_path(&spec.dir, *node) else {
            continue;
        };
        write_key(&path, key)?;
        key_files.push((*node, path));
    }
    let mut admin_key_files = Vec::with_capacity(keys.admins.len());
    for (party, key) in &keys.admins {
        let path = admin_key_path(&spec.dir, *party);
        write_key(&path, key)?;
        admin_key_files.push((*party, path));
    }
    let config_dir = spec.dir.join("config");
    std::fs::create_dir_all(&config_dir).map_err(write_error(&config_dir))?;
    let peer_keys_path = peer_keys_path(&spec.dir);
    std::fs::write(&peer_keys_path, config.peer_keys_text()).map_err(write_error(&peer_keys_path))?;
    crate::fabric::write_client_files(&spec.dir, &config)?;
    // The config last, through a rename: its presence means the network is complete.
    let partial = config_path.with_extension("json.partial");
    std::fs::write(&partial, config.to_json()).map_err(write_error(&partial))?;
    std::fs::rename(&partial, &config_path).map_err(write_error(&config_path))?;
    Ok(Generated {
        config_path,
        peer_keys_path,
        key_files,
        admin_key_files,
        config,
    })
}
