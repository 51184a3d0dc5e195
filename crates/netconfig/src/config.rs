//! [`NetworkConfig`]: the network config file, validated once. A value of this type has
//! parties 1..N each with one batcher per shard, well-formed and distinct endpoints,
//! decoded and distinct public keys, parameters in range, and role configs that the roles
//! themselves accept (checked at load for every party and shard).

use crate::endpoint::Endpoint;
use crate::error::{Error, Node, Result};
use crate::file::{ClientAuthFile, NetworkFile, PartyFile, VERSION};
use crypto::PublicKey;
use prost::Message;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::Path;
use types::{PartyId, ShardId};

/// Largest network config file read, in bytes.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// One party's nodes, validated.
#[derive(Debug, Clone)]
pub struct Party {
    /// The party id (1 or more; ids increase down the list).
    pub id: PartyId,
    /// The router's endpoint.
    pub router: Endpoint,
    /// The consenter's endpoint.
    pub consenter: Endpoint,
    /// The consenter's public key.
    pub consenter_key: PublicKey,
    /// The assembler's endpoint, when listed.
    pub assembler: Option<Endpoint>,
    /// One batcher per shard (index = shard).
    pub batchers: Vec<BatcherNode>,
    /// The party's admin key, who signs config updates for it (`None`: the party cannot
    /// sign updates).
    pub admin_key: Option<PublicKey>,
}

/// One batcher of a party, validated.
#[derive(Debug, Clone)]
pub struct BatcherNode {
    /// Its shard.
    pub shard: ShardId,
    /// Its endpoint.
    pub endpoint: Endpoint,
    /// Its public key.
    pub public_key: PublicKey,
}

/// The network config, validated ([`NetworkConfig::load`]).
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    pub(crate) file: NetworkFile,
    pub(crate) shards: NonZeroU32,
    pub(crate) parties: Vec<Party>,
    pub(crate) client_keys: Option<router::ClientKeys>,
    pub(crate) fabric_clients: arma::fabric::FabricClients,
    pub(crate) committers: Option<crate::committer::Committers>,
    pub(crate) token: Option<crate::token::TokenApp>,
    pub(crate) tls_peers: std::collections::HashMap<[u8; 32], wire::tls::Peer>,
}

impl NetworkConfig {
    /// Reads and validates the network config file at `path`.
    pub fn load(path: &Path) -> Result<NetworkConfig> {
        let read = |e: std::io::Error| Error::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let size = std::fs::metadata(path).map_err(read)?.len();
        if size > MAX_FILE_BYTES {
            return Err(Error::Read {
                path: path.to_path_buf(),
                reason: format!("{size} bytes, more than a network config ({MAX_FILE_BYTES})"),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        NetworkConfig::from_json(&text)
    }

    /// Parses and validates the JSON text of a network config file.
    pub fn from_json(text: &str) -> Result<NetworkConfig> {
        let file: NetworkFile = serde_json::from_str(text).map_err(|e| Error::Parse {
            reason: e.to_string(),
        })?;
        NetworkConfig::from_file(file)
    }

    /// Validates a parsed file.
    pub fn from_file(file: NetworkFile) -> Result<NetworkConfig> {
        if file.version != VERSION {
            return Err(Error::UnsupportedVersion {
                version: file.version,
                supported: VERSION,
            });
        }
        let chain_ok =
            (1..=64).contains(&file.chain.len()) && file.chain.chars().all(|c| c.is_ascii_graphic());
        if !chain_ok {
            return Err(Error::BadChain {
                chain: file.chain.clone(),
            });
        }
        if file.parties.is_empty() {
            return Err(Error::NoParties);
        }
        let shards = NonZeroU32::new(file.shards).ok_or(Error::NoShards)?;
        let mut after = 0;
        let mut parties = Vec::with_capacity(file.parties.len());
        for (index, p) in file.parties.iter().enumerate() {
            parties.push(parse_party(index, after, p, shards.get())?);
            after = p.id;
        }
        check_left(&file)?;
        check_distinct(&parties)?;
        check_retired(&file, &parties)?;
        check_update_policy(&file, &parties)?;
        crate::params::check(&file)?;
        let client_keys = parse_clients(&file.router.client_auth)?;
        let fabric_clients = file
            .fabric
            .as_ref()
            .map(|f| crate::fabric::parse(f, &file))
            .transpose()?
            .unwrap_or_default();
        // The committer's and the token's nodes run outside the ordering and are not
        // changed by an update: they may name a party that left.
        let mut ids: Vec<PartyId> = parties.iter().map(|p| p.id).collect();
        ids.extend_from_slice(&file.left_parties);
        let committers = file
            .committer
            .as_ref()
            .map(|c| crate::committer::parse(c, &ids))
            .transpose()?;
        let token = file
            .token
            .as_ref()
            .map(|t| crate::token::parse(t, &ids))
            .transpose()?;
        let tls_peers = file
            .tls
            .as_ref()
            .map(crate::tls::parse)
            .transpose()?
            .unwrap_or_default();
        let config = NetworkConfig {
            file,
            shards,
            parties,
            client_keys,
            fabric_clients,
            committers,
            token,
            tls_peers,
        };
        config.check_roles()?;
        Ok(config)
    }

    /// The file this config was read from (to write it again, or to edit and revalidate).
    pub fn file(&self) -> &NetworkFile {
        &self.file
    }

    /// The JSON text of the file (pretty-printed, as `generate` writes it).
    pub fn to_json(&self) -> String {
        self.file.to_json()
    }

    /// The chain name.
    pub fn chain(&self) -> &str {
        &self.file.chain
    }

    /// The config's sequence: 0 as generated, one more with each config update applied.
    pub fn sequence(&self) -> u64 {
        self.file.sequence
    }

    /// K, the distinct parties whose admins must sign a config update:
    /// `update_policy.signatures`, else a majority of the parties (⌊N/2⌋ + 1).
    pub fn update_signatures(&self) -> u32 {
        match &self.file.update_policy {
            Some(policy) => policy.signatures,
            None => majority(self.n()),
        }
    }

    /// Party `party`'s admin key ([`Error::NoAdminKey`] when it has none).
    pub fn admin_key(&self, party: PartyId) -> Result<&PublicKey> {
        self.party(party)?
            .admin_key
            .as_ref()
            .ok_or(Error::NoAdminKey { party })
    }

    /// Reads party `party`'s admin key file (`crypto::read_key_file`: mode 0600) and checks
    /// that it holds the admin key this config lists for the party.
    pub fn read_admin_key(&self, party: PartyId, path: &Path) -> Result<crypto::SigningKey> {
        let expected = self.admin_key(party)?;
        read_key_holding(
            path,
            expected,
            |reason| Error::Read {
                path: path.to_path_buf(),
                reason,
            },
            || Error::AdminKeyMismatch {
                party,
                path: path.to_path_buf(),
                expected: expected.to_string(),
            },
        )
    }

    /// Number of parties N.
    pub fn n(&self) -> u32 {
        u32::try_from(self.parties.len()).unwrap_or(u32::MAX)
    }

    /// Number of shards S.
    pub fn shards(&self) -> NonZeroU32 {
        self.shards
    }

    /// The parties in force, ids increasing (with gaps where a party left).
    pub fn parties(&self) -> &[Party] {
        &self.parties
    }

    /// Party `party`.
    pub fn party(&self, party: PartyId) -> Result<&Party> {
        self.parties
            .binary_search_by_key(&party, |p| p.id)
            .ok()
            .and_then(|i| self.parties.get(i))
            .ok_or_else(|| Error::UnknownParty {
                party,
                parties: self.party_list(),
            })
    }

    /// The ids of the parties in force, increasing.
    pub fn party_list(&self) -> Vec<PartyId> {
        self.parties.iter().map(|p| p.id).collect()
    }

    /// Whether `party` is a party in force.
    pub fn has_party(&self, party: PartyId) -> bool {
        self.party(party).is_ok()
    }

    /// The ids of the parties that left, increasing.
    pub fn left_parties(&self) -> &[PartyId] {
        &self.file.left_parties
    }

    /// The id a party joining now takes: the one after every id used (the parties in
    /// force and those that left).
    pub fn next_party_id(&self) -> PartyId {
        let used = self.parties.last().map_or(0, |p| p.id);
        let left = self.file.left_parties.last().copied().unwrap_or(0);
        used.max(left).saturating_add(1)
    }

    /// Party `party`'s batcher of shard `shard`.
    pub fn batcher(&self, party: PartyId, shard: ShardId) -> Result<&BatcherNode> {
        let shards = self.shards.get();
        self.party(party)?
            .batchers
            .get(shard as usize)
            .ok_or(Error::UnknownShard { shard, shards })
    }

    /// The endpoint of `node` (an assembler that is not listed: `None`).
    pub fn endpoint(&self, node: Node) -> Result<Option<&Endpoint>> {
        Ok(match node {
            Node::Router(p) => Some(&self.party(p)?.router),
            Node::Consenter(p) => Some(&self.party(p)?.consenter),
            Node::Assembler(p) => self.party(p)?.assembler.as_ref(),
            Node::Batcher { party, shard } => Some(&self.batcher(party, shard)?.endpoint),
        })
    }

    /// The public key of `node` (consenters and batchers; routers and assemblers sign
    /// nothing: [`Error::NoKey`]).
    pub fn public_key(&self, node: Node) -> Result<&PublicKey> {
        match node {
            Node::Consenter(p) => Ok(&self.party(p)?.consenter_key),
            Node::Batcher { party, shard } => Ok(&self.batcher(party, shard)?.public_key),
            Node::Router(p) | Node::Assembler(p) => {
                self.party(p)?;
                Err(Error::NoKey { node })
            }
        }
    }

    /// Reads `node`'s key file (`crypto::read_key_file`: mode 0600, public line matching
    /// the secret) and checks that it holds the public key this config lists for `node`.
    pub fn read_node_key(&self, node: Node, path: &Path) -> Result<crypto::SigningKey> {
        let expected = self.public_key(node)?;
        read_key_holding(
            path,
            expected,
            |reason| Error::KeyFile { node, reason },
            || Error::KeyMismatch {
                node,
                path: path.to_path_buf(),
                expected: expected.to_string(),
            },
        )
    }

    /// Builds every role's config once so that a config that loads is one every role
    /// accepts.
    fn check_roles(&self) -> Result<()> {
        self.arma_config()?;
        for party in &self.parties {
            self.router_config(party.id)?;
            for shard in 0..self.shards.get() {
                self.batcher_config(party.id, shard)?;
            }
        }
        Ok(())
    }
}

/// The key file at `path` (`crypto::read_key_file`), when it holds `expected`: else the
/// error of `unreadable` (with the reason) or of `mismatch`.
fn read_key_holding(
    path: &Path,
    expected: &PublicKey,
    unreadable: impl FnOnce(String) -> Error,
    mismatch: impl FnOnce() -> Error,
) -> Result<crypto::SigningKey> {
    let key = crypto::read_key_file(path).map_err(|e| unreadable(e.to_string()))?;
    if &key.public_key() != expected {
        return Err(mismatch());
    }
    Ok(key)
}

fn endpoint(node: Node, text: &str) -> Result<Endpoint> {
    Endpoint::parse(text).map_err(|reason| Error::BadEndpoint {
        node,
        endpoint: text.to_string(),
        reason,
    })
}

fn public_key(node: Node, text: &str) -> Result<PublicKey> {
    text.parse().map_err(|e: crypto::CryptoError| Error::BadKey {
        node,
        key: text.chars().take(200).collect(),
        reason: e.to_string(),
    })
}

/// `left_parties` is increasing, names no party in force, and with the parties covers
/// every id from 1 to the highest used.
fn check_left(file: &NetworkFile) -> Result<()> {
    let left = &file.left_parties;
    let bad = |reason: String| Err(Error::PartyIds { reason });
    // A network starts with parties 1..N: its consenters number their replicas from the
    // genesis config's list, which must have no gap.
    if file.sequence == 0 && !left.is_empty() {
        return bad("a genesis config (sequence 0) lists no party that left".into());
    }
    if left.first() == Some(&0) {
        return bad("left_parties names id 0".into());
    }
    if let Some(w) = left.windows(2).find(|w| w[0] >= w[1]) {
        return bad(format!(
            "left_parties must be increasing: {} follows {}",
            w[1], w[0]
        ));
    }
    if let Some(p) = file.parties.iter().find(|p| left.binary_search(&p.id).is_ok()) {
        return Err(Error::PartyLeft { id: p.id });
    }
    let highest = file
        .parties
        .iter()
        .map(|p| p.id)
        .chain(left.iter().copied())
        .max()
        .unwrap_or(0);
    // Ids are increasing and distinct on each side, and the sides are disjoint: they
    // cover 1..=highest exactly when there are `highest` of them.
    let used = u64::try_from(file.parties.len().saturating_add(left.len())).unwrap_or(u64::MAX);
    if used != u64::from(highest) {
        let gap = (1..=highest)
            .find(|id| !file.parties.iter().any(|p| p.id == *id) && left.binary_search(id).is_err())
            .unwrap_or(highest);
        return bad(format!(
            "id {gap} is neither a party nor in left_parties (ids 1..={highest} are each one or the other)"
        ));
    }
    Ok(())
}

fn parse_party(index: usize, after: PartyId, p: &PartyFile, shards: u32) -> Result<Party> {
    if p.id <= after {
        return Err(Error::PartyOrder {
            index,
            id: p.id,
            after,
        });
    }
    let id = p.id;
    let mut batchers = Vec::with_capacity(p.batchers.len());
    for (index, b) in p.batchers.iter().enumerate() {
        if b.shard as usize != index || b.shard >= shards {
            return Err(Error::BatcherShards {
                party: id,
                index,
                shard: Some(b.shard),
                shards,
            });
        }
        let node = Node::Batcher {
            party: id,
            shard: b.shard,
        };
        batchers.push(BatcherNode {
            shard: b.shard,
            endpoint: endpoint(node, &b.endpoint)?,
            public_key: public_key(node, &b.public_key)?,
        });
    }
    if batchers.len() != shards as usize {
        return Err(Error::BatcherShards {
            party: id,
            index: batchers.len(),
            shard: None,
            shards,
        });
    }
    Ok(Party {
        id,
        router: endpoint(Node::Router(id), &p.router)?,
        consenter: endpoint(Node::Consenter(id), &p.consenter.endpoint)?,
        consenter_key: public_key(Node::Consenter(id), &p.consenter.public_key)?,
        assembler: p
            .assembler
            .as_deref()
            .map(|a| endpoint(Node::Assembler(id), a))
            .transpose()?,
        batchers,
        admin_key: p
            .admin_key
            .as_deref()
            .map(|text| {
                text.parse().map_err(|e: crypto::CryptoError| Error::BadAdminKey {
                    party: id,
                    key: text.chars().take(200).collect(),
                    reason: e.to_string(),
                })
            })
            .transpose()?,
    })
}

/// A majority of `n` parties: ⌊n/2⌋ + 1.
pub(crate) fn majority(n: u32) -> u32 {
    n / 2 + 1
}

/// Every key the config names, with who holds it: consenters, batchers, admins.
pub(crate) fn named_keys(parties: &[Party]) -> Vec<(String, &PublicKey)> {
    let mut out = node_keys(parties);
    for p in parties {
        if let Some(k) = &p.admin_key {
            out.push((format!("the admin of party {}", p.id), k));
        }
    }
    out
}

/// The consenter and batcher keys of `parties`, with their holders (no admin keys).
pub(crate) fn node_keys(parties: &[Party]) -> Vec<(String, &PublicKey)> {
    let mut out = Vec::new();
    for p in parties {
        out.push((Node::Consenter(p.id).to_string(), &p.consenter_key));
        for b in &p.batchers {
            let node = Node::Batcher {
                party: p.id,
                shard: b.shard,
            };
            out.push((node.to_string(), &b.public_key));
        }
    }
    out
}

/// The `retired_keys` entries, parsed.
pub(crate) fn retired_keys(file: &NetworkFile) -> Result<Vec<PublicKey>> {
    file.retired_keys
        .iter()
        .map(|k| {
            k.parse::<PublicKey>()
                .map_err(|_| Error::BadRetiredKey { key: k.clone() })
        })
        .collect()
}

/// No node or admin has a retired key.
fn check_retired(file: &NetworkFile, parties: &[Party]) -> Result<()> {
    let retired = retired_keys(file)?;
    for (holder, key) in named_keys(parties) {
        if retired.contains(key) {
            return Err(Error::RetiredKeyInUse {
                holder,
                key: key.to_string(),
            });
        }
    }
    Ok(())
}

/// `update_policy.signatures` is in 1..=N when given.
fn check_update_policy(file: &NetworkFile, parties: &[Party]) -> Result<()> {
    let Some(policy) = &file.update_policy else {
        return Ok(());
    };
    let n = u32::try_from(parties.len()).unwrap_or(u32::MAX);
    if policy.signatures == 0 || policy.signatures > n {
        return Err(Error::UpdatePolicy {
            signatures: policy.signatures,
            parties: n,
        });
    }
    Ok(())
}

/// Every node's endpoint, and every public key, belongs to one node only.
fn check_distinct(parties: &[Party]) -> Result<()> {
    let mut endpoints: Vec<(&Endpoint, Node)> = Vec::new();
    let mut keys: HashMap<&PublicKey, Node> = HashMap::new();
    for p in parties {
        let mut listed = vec![
            (Node::Router(p.id), &p.router),
            (Node::Consenter(p.id), &p.consenter),
        ];
        listed.extend(p.assembler.iter().map(|a| (Node::Assembler(p.id), a)));
        let mut signers = vec![(Node::Consenter(p.id), &p.consenter_key)];
        for b in &p.batchers {
            let node = Node::Batcher {
                party: p.id,
                shard: b.shard,
            };
            listed.push((node, &b.endpoint));
            signers.push((node, &b.public_key));
        }
        for (node, e) in listed {
            if let Some(&(_, first)) = endpoints.iter().find(|(seen, _)| seen.collides(e)) {
                return Err(Error::DuplicateEndpoint {
                    endpoint: e.to_string(),
                    first,
                    second: node,
                });
            }
            endpoints.push((e, node));
        }
        for (node, k) in signers {
            if let Some(&first) = keys.get(k) {
                return Err(Error::DuplicateKey { first, second: node });
            }
            keys.insert(k, node);
        }
    }
    // Admin keys last, so that a node key listed twice is reported as such.
    let mut admins: HashMap<&PublicKey, PartyId> = HashMap::new();
    for p in parties {
        let Some(k) = &p.admin_key else { continue };
        let other = match (keys.get(k), admins.get(k)) {
            (Some(node), _) => Some(node.to_string()),
            (None, Some(party)) => Some(format!("party {party} admin")),
            (None, None) => None,
        };
        if let Some(other) = other {
            return Err(Error::DuplicateAdminKey { party: p.id, other });
        }
        admins.insert(k, p.id);
    }
    Ok(())
}

/// The client keys of `router.client_auth` (`None`: open), by serialized `Identity`.
fn parse_clients(auth: &ClientAuthFile) -> Result<Option<router::ClientKeys>> {
    let ClientAuthFile::Signed { clients } = auth else {
        return Ok(None);
    };
    let mut keys = router::ClientKeys::new();
    for (index, c) in clients.iter().enumerate() {
        let bad = |reason: String| Error::BadClient { index, reason };
        if c.msp_id.is_empty() || c.certificate_id.is_empty() {
            return Err(bad("msp_id and certificate_id must not be empty".into()));
        }
        let key: PublicKey = c
            .public_key
            .parse()
            .map_err(|e: crypto::CryptoError| bad(e.to_string()))?;
        let creator = client_identity(&c.msp_id, &c.certificate_id);
        if keys.get(&creator).is_some() {
            return Err(bad(format!("{}/{} is listed twice", c.msp_id, c.certificate_id)));
        }
        keys.insert(creator, key);
    }
    Ok(Some(keys))
}

/// The serialized `Identity { msp_id, certificate_id }`: the bytes a router matches an
/// envelope's identity by.
pub fn client_identity(msp_id: &str, certificate_id: &str) -> Vec<u8> {
    wire::pb::Identity {
        msp_id: msp_id.to_string(),
        creator: Some(wire::pb::identity::Creator::CertificateId(
            certificate_id.to_string(),
        )),
    }
    .encode_to_vec()
}
