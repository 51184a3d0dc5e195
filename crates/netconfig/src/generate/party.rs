//! A party joining (`fabrx network party add`, docs/reconfiguration.md "Adding a party"):
//! party N + 1's keys and TLS certificates, issued into the network directory like
//! [`super::generate`] writes a party's, and the next config that adds it — which is then
//! proposed, signed and submitted like any update. Files only.
//!
//! Its endpoints are placed past every port in use: the highest port of any endpoint of
//! the config in force ([`crate::update::endpoints_in_use`]: the ordering nodes, the
//! committer's nodes, the token services) plus one, then router, consenter, assembler
//! and one batcher per shard, in the generated layout's order ([`super::port_of`]). The
//! generated layout puts the committer's and the token's ports right after the ordering
//! nodes', where party N + 1's would otherwise fall. Ports in use that the config does
//! not name ([`PartySpec::ports_in_use`]: `fabrx network party add` passes those of a
//! devnet's `network.json`, whose metrics ports lie above the config's) are passed too.
//!
//! On a network laid out for Kubernetes (`generate --k8s`, [`crate::k8s`]) its endpoints
//! are instead its Services' names in its namespace, on each role's fixed port
//! ([`crate::k8s::ports`]), and its Secret manifest is written as `generate --k8s` writes
//! a party's (`<dir>/k8s/party<P>/secret.yaml`). The layout is the one given
//! ([`PartySpec::k8s`]) or read from the config's endpoints
//! ([`K8sLayout::of_network`]); either way every endpoint of the config in force must be
//! where it puts it.
//!
//! The consenter peer-keys file is left as it is: it lists the genesis config's
//! consenters, which every consenter checks at start; a joiner takes the consenter keys
//! of the next config from the config itself.

use std::path::{Path, PathBuf};

use crypto::SigningKey;
use types::PartyId;
use wire::tls::{Peer, Role};

use super::{admin_key, admin_key_path, key_file_path, node_key, write_key};
use crate::config::NetworkConfig;
use crate::endpoint::Endpoint;
use crate::error::Node;
use crate::file::{BatcherFile, KeyedEndpoint, NetworkFile, PartyFile};
use crate::k8s::K8sLayout;
use crate::tls::rotate::{Issued, issue, network_issuer};
use crate::update::UpdateError;

/// What to issue for the joining party.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartySpec {
    /// The network directory: `tls/ca.pem` and `tls/ca.key` (the CA that signs its
    /// certificates), and where its keys (`keys/party-<P>/…`) and certificates
    /// (`tls/<name>.pem|key`) are written.
    pub dir: PathBuf,
    /// The host its endpoints name (`None`: the host of party N's router).
    pub host: Option<String>,
    /// The Kubernetes layout (`--k8s PATTERN --k8s-domain D`): `None` reads it from the
    /// config when the network directory has `k8s/shared/` (a network generated with
    /// `--k8s`), else the network is not laid out for Kubernetes.
    pub k8s: Option<K8sLayout>,
    /// `None`: keys from the OS's random source. `Some(seed)`: derived from the seed as
    /// [`super::generate`] derives party N + 1's (tests and demos only).
    pub seed: Option<u64>,
    /// Ports in use that the config does not name (a devnet's metrics ports, say): the
    /// joiner's endpoints go past these too. Not used on a Kubernetes network.
    pub ports_in_use: Vec<u16>,
}

/// What [`add_party`] wrote.
#[derive(Debug, Clone)]
pub struct PartyAdded {
    /// The joining party: N + 1.
    pub party: PartyId,
    /// The next config (sequence + 1), with the party and its certificates.
    pub next: NetworkFile,
    /// Its nodes' key files (consenter, one batcher per shard).
    pub key_files: Vec<(Node, PathBuf)>,
    /// Its admin key file (signs the updates after this one).
    pub admin_key_file: PathBuf,
    /// The names of its TLS certificates (`router-5`, …), empty without TLS.
    pub certificates: Vec<String>,
    /// On a Kubernetes network: its namespace and its Secret manifest.
    pub k8s: Option<K8sJoined>,
}

/// What [`add_party`] wrote for a party joining a Kubernetes network.
#[derive(Debug, Clone)]
pub struct K8sJoined {
    /// The layout its endpoints follow.
    pub layout: K8sLayout,
    /// Its namespace.
    pub namespace: String,
    /// `<dir>/k8s/party<P>/secret.yaml`.
    pub secret: PathBuf,
}

/// Why a party cannot be added.
#[derive(Debug, thiserror::Error)]
pub enum PartyAddError {
    /// The Kubernetes layout cannot be read from the config.
    #[error(
        "{dir} is a network laid out for Kubernetes (k8s/shared exists), but its layout cannot be read from the config: {reason}; give it with --k8s PATTERN (and --k8s-domain)"
    )]
    K8sLayoutUnknown {
        /// The network directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// The config's endpoints are not where the Kubernetes layout puts them.
    #[error(
        "the network's endpoints do not follow the Kubernetes layout {pattern:?} in domain {domain}: {reason}"
    )]
    K8sLayoutMismatch {
        /// The namespace pattern.
        pattern: String,
        /// The cluster domain.
        domain: String,
        /// The first endpoint elsewhere.
        reason: String,
    },
    /// A host given for a Kubernetes network, whose endpoints are Service names.
    #[error(
        "--host {host:?}: on a Kubernetes network the joiner's endpoints are its Services' names, not a host"
    )]
    HostOnKubernetes {
        /// The host.
        host: String,
    },
    /// The config in force has as many parties as there can be.
    #[error("the network has {parties} parties: no slot is left for another")]
    NoSlot {
        /// N.
        parties: u32,
    },
    /// The joiner's ports would pass 65535.
    #[error(
        "party {party}'s {needed} nodes would take the ports after {highest}, the highest in use, and pass port 65535: place the network's endpoints lower"
    )]
    PortOverflow {
        /// The joining party.
        party: PartyId,
        /// The highest port in use.
        highest: u16,
        /// The ports it needs (3 + S).
        needed: u32,
    },
    /// A file it would write exists.
    #[error(
        "{path} already exists: party {party}'s keys or certificates were issued before (nothing is overwritten)"
    )]
    Exists {
        /// The joining party.
        party: PartyId,
        /// The file.
        path: PathBuf,
    },
    /// The host is not one an endpoint can name.
    #[error("--host {host:?}: the endpoint {endpoint:?} {reason}")]
    BadHost {
        /// The host.
        host: String,
        /// The endpoint it gives.
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Reading the CA, writing a file, or a config that does not load.
    #[error(transparent)]
    Network(#[from] crate::Error),
    /// The next config is not a valid update of the config in force.
    #[error("the next config would not be a valid update: {0}")]
    Invalid(#[from] UpdateError),
}

/// The joiner's endpoints: router, consenter, assembler, one batcher per shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinerEndpoints {
    /// The router's.
    pub router: String,
    /// The consenter's.
    pub consenter: String,
    /// The assembler's.
    pub assembler: String,
    /// The batchers', in shard order.
    pub batchers: Vec<String>,
}

/// The highest port of any endpoint of `file` (0 when none parses).
pub fn highest_port(file: &NetworkFile) -> u16 {
    crate::update::endpoints_in_use(file)
        .iter()
        .filter_map(|(_, e)| Endpoint::parse(e).ok())
        .map(|e| e.port())
        .max()
        .unwrap_or(0)
}

/// `host:port`, bracketing an IPv6 host.
fn endpoint(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The endpoints of party `party` joining `file` on `host`: from the highest port in use
/// (in `file` or in `also_in_use`) plus one, in the generated layout's order.
pub fn joiner_endpoints(
    file: &NetworkFile,
    party: PartyId,
    host: &str,
    also_in_use: &[u16],
) -> Result<JoinerEndpoints, PartyAddError> {
    let highest = also_in_use.iter().copied().fold(highest_port(file), u16::max);
    let needed = file.shards.saturating_add(3);
    let overflow = move || PartyAddError::PortOverflow {
        party,
        highest,
        needed,
    };
    let base = highest.checked_add(1).ok_or_else(overflow)?;
    // `port_of` lays out party 1 from `base`: the offsets of a party's nodes.
    let port = |node: Node| super::port_of(base, file.shards, node).ok_or_else(overflow);
    let at = |node: Node| -> Result<String, PartyAddError> {
        let text = endpoint(host, port(node)?);
        Endpoint::parse(&text).map_err(|reason| PartyAddError::BadHost {
            host: host.to_string(),
            endpoint: text.clone(),
            reason,
        })?;
        Ok(text)
    };
    Ok(JoinerEndpoints {
        router: at(Node::Router(1))?,
        consenter: at(Node::Consenter(1))?,
        assembler: at(Node::Assembler(1))?,
        batchers: (0..file.shards)
            .map(|shard| at(Node::Batcher { party: 1, shard }))
            .collect::<Result<_, _>>()?,
    })
}

/// The host of `file`'s last party's router (`None` without parties).
fn default_host(file: &NetworkFile) -> Option<String> {
    let router = &file.parties.last()?.router;
    let host = router.rsplit_once(':').map_or(router.as_str(), |(h, _)| h);
    Some(host.trim_start_matches('[').trim_end_matches(']').to_string())
}

/// Issues the joining party's keys and certificates into `spec.dir` (its id is the one
/// after every id used: N + 1 when no party has left) and gives the next config that
/// adds it. Everything is made and checked in memory first — the next config must be
/// a valid update of `current` (`crate::update::propose`) — and no file it writes may
/// exist; then the certificates and keys are written.
pub fn add_party(current: &NetworkConfig, spec: &PartySpec) -> Result<PartyAdded, PartyAddError> {
    let file = current.file();
    // The id after every id used: a party that left keeps its id out of reach.
    let party = current.next_party_id();
    if current.has_party(party) || current.left_parties().contains(&party) {
        return Err(PartyAddError::NoSlot { parties: current.n() });
    }
    let layout = k8s_layout(file, spec)?;
    let endpoints = match &layout {
        Some(layout) => {
            layout.check_namespace(party)?;
            let (router, consenter, assembler, batchers) = layout.ordering_endpoints(party, file.shards);
            JoinerEndpoints {
                router,
                consenter,
                assembler,
                batchers,
            }
        }
        None => {
            let host = spec
                .host
                .clone()
                .or_else(|| default_host(file))
                .unwrap_or_else(|| "127.0.0.1".into());
            joiner_endpoints(file, party, &host, &spec.ports_in_use)?
        }
    };
    let (entry, keys) = joiner_entry(spec.seed, party, &endpoints);
    let mut next = file.clone();
    next.sequence = file
        .sequence
        .checked_add(1)
        .ok_or(UpdateError::SequenceOverflow {
            current: file.sequence,
        })?;
    next.parties.push(entry);
    let issued = match next.tls.as_mut() {
        None => Vec::new(),
        Some(tls) => {
            let issuer = network_issuer(&spec.dir, tls)?;
            let mut issued = Vec::new();
            for (peer, at) in ordering_nodes(party, &endpoints) {
                let cert = issue(&issuer, peer, &crate::tls::cert_name(peer), &host_of(at))?;
                tls.certificates.push(cert.entry.clone());
                issued.push(cert);
            }
            issued
        }
    };
    crate::update::propose(current, &next)?;
    let next_config = match &layout {
        Some(_) => Some(NetworkConfig::from_file(next.clone())?),
        None => None,
    };
    let secret = layout.as_ref().map(|_| crate::k8s::secret_path(&spec.dir, party));
    let (key_files, admin_key_file) = write_files(&spec.dir, party, &keys, &issued, secret.as_deref())?;
    let k8s = match (layout, next_config) {
        (Some(layout), Some(config)) => Some(K8sJoined {
            namespace: layout.namespace(party),
            secret: crate::k8s::write_party_secret(&spec.dir, &config, &layout, party)?,
            layout,
        }),
        _ => None,
    };
    Ok(PartyAdded {
        party,
        next,
        key_files,
        admin_key_file,
        certificates: issued.iter().map(|c| c.entry.name.clone()).collect(),
        k8s,
    })
}

/// The Kubernetes layout the joiner follows, checked against every endpoint of `file`:
/// the one `spec` gives, or, for a network directory with `k8s/shared/`, the one read
/// from the config; `None` for a network not laid out for Kubernetes.
fn k8s_layout(file: &NetworkFile, spec: &PartySpec) -> Result<Option<K8sLayout>, PartyAddError> {
    let layout = match &spec.k8s {
        Some(layout) => layout.clone(),
        None if crate::k8s::shared_dir(&spec.dir).exists() => {
            K8sLayout::of_network(file).map_err(|reason| PartyAddError::K8sLayoutUnknown {
                dir: spec.dir.clone(),
                reason,
            })?
        }
        None => return Ok(None),
    };
    if let Some(host) = &spec.host {
        return Err(PartyAddError::HostOnKubernetes { host: host.clone() });
    }
    layout
        .check_network(file)
        .map_err(|reason| PartyAddError::K8sLayoutMismatch {
            pattern: layout.namespace_pattern().to_string(),
            domain: layout.cluster_domain().to_string(),
            reason,
        })?;
    Ok(Some(layout))
}

/// The joiner's signing keys: its nodes' (consenter, then one batcher per shard) and its
/// admin's.
struct JoinerKeys {
    nodes: Vec<(Node, SigningKey)>,
    admin: SigningKey,
}

/// Party `party`'s entry on `endpoints`, with new keys (derived from `seed`, or random).
fn joiner_entry(seed: Option<u64>, party: PartyId, endpoints: &JoinerEndpoints) -> (PartyFile, JoinerKeys) {
    let consenter = node_key(seed, Node::Consenter(party));
    let admin = admin_key(seed, party);
    let consenter_key = consenter.public_key().to_string();
    let mut nodes = vec![(Node::Consenter(party), consenter)];
    let mut batchers = Vec::new();
    for (shard, endpoint) in (0..).zip(&endpoints.batchers) {
        let node = Node::Batcher { party, shard };
        let key = node_key(seed, node);
        batchers.push(BatcherFile {
            shard,
            endpoint: endpoint.clone(),
            public_key: key.public_key().to_string(),
        });
        nodes.push((node, key));
    }
    let entry = PartyFile {
        id: party,
        router: endpoints.router.clone(),
        consenter: KeyedEndpoint {
            endpoint: endpoints.consenter.clone(),
            public_key: consenter_key,
        },
        assembler: Some(endpoints.assembler.clone()),
        batchers,
        admin_key: Some(admin.public_key().to_string()),
    };
    (entry, JoinerKeys { nodes, admin })
}

/// Writes the joiner's certificates and keys under `dir`, when none of the files exists
/// (nor its Secret manifest `secret`, written after them).
/// Gives the node key files and the admin key file.
fn write_files(
    dir: &Path,
    party: PartyId,
    keys: &JoinerKeys,
    issued: &[Issued],
    secret: Option<&Path>,
) -> Result<(Vec<(Node, PathBuf)>, PathBuf), PartyAddError> {
    let mut paths = planned_paths(dir, party, &keys.nodes, issued);
    paths.extend(secret.map(Path::to_path_buf));
    if let Some(path) = paths.iter().find(|p| p.exists()) {
        return Err(PartyAddError::Exists {
            party,
            path: path.clone(),
        });
    }
    for cert in issued {
        cert.write(dir)?;
    }
    let mut written = Vec::with_capacity(keys.nodes.len());
    for (node, key) in &keys.nodes {
        if let Some(path) = key_file_path(dir, *node) {
            write_key(&path, key)?;
            written.push((*node, path));
        }
    }
    let admin_key_file = admin_key_path(dir, party);
    write_key(&admin_key_file, &keys.admin)?;
    Ok((written, admin_key_file))
}

/// The joiner's ordering nodes with their endpoints, in the generated layout's order.
fn ordering_nodes(party: PartyId, e: &JoinerEndpoints) -> Vec<(Peer, &str)> {
    let node = |role, shard| Peer { role, party, shard };
    let mut out = vec![
        (node(Role::Router, None), e.router.as_str()),
        (node(Role::Consenter, None), e.consenter.as_str()),
        (node(Role::Assembler, None), e.assembler.as_str()),
    ];
    for (shard, b) in (0..).zip(&e.batchers) {
        out.push((node(Role::Batcher, Some(shard)), b.as_str()));
    }
    out
}

/// The host of `host:port`, without brackets.
fn host_of(endpoint: &str) -> String {
    let host = endpoint.rsplit_once(':').map_or(endpoint, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']').to_string()
}

/// Every file [`add_party`] writes.
fn planned_paths(dir: &Path, party: PartyId, keys: &[(Node, SigningKey)], issued: &[Issued]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = keys
        .iter()
        .filter_map(|(node, _)| key_file_path(dir, *node))
        .collect();
    out.push(admin_key_path(dir, party));
    for cert in issued {
        let (pem, key) = crate::tls::tls_paths(dir, &cert.entry.name);
        out.extend([pem, key]);
    }
    out
}
