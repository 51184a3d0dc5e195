//! Each role's config from the network config: what `fabrx node <role> --config … --party
//! P` builds before it starts. Consenter replica ids are party ids minus one (party 1 is
//! replica 0), so that the BFT engine's 0-based ids and Arma's 1-based parties meet here
//! and nowhere else.

use crate::config::NetworkConfig;
use crate::error::{Error, Node, Result};
use consenter::keys::{ClusterKeys, NodeKeys};
use crypto::{PublicKey, SigningKey};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use types::{PartyId, ShardId};

/// A router node's config and its party's batchers.
#[derive(Debug, Clone)]
pub struct RouterSetup {
    /// The node config (listen address, server limits, router config).
    pub node: router::node::Config,
    /// `http://host:port` of the party's batcher of each shard (index = shard): the
    /// argument of `router::node::Deps::grpc`.
    pub batcher_uris: Vec<String>,
}

/// The files and directories of one consenter node.
#[derive(Debug, Clone)]
pub struct ConsenterPaths {
    /// The consenter's key file.
    pub key_file: PathBuf,
    /// The consenter peer-keys file ([`NetworkConfig::peer_keys_text`]; `generate` writes
    /// it next to the network config).
    pub peer_keys: PathBuf,
    /// WAL directory.
    pub wal: PathBuf,
    /// Decisions log directory.
    pub decisions: PathBuf,
}

fn nonzero_usize(value: u64) -> NonZeroUsize {
    // Validated positive and fitting at load; the fallback is unreachable.
    usize::try_from(value)
        .ok()
        .and_then(NonZeroUsize::new)
        .unwrap_or(NonZeroUsize::MIN)
}

fn nonzero_u64(value: u64) -> NonZeroU64 {
    NonZeroU64::new(value).unwrap_or(NonZeroU64::MIN)
}

fn nonzero_u32(value: u32) -> NonZeroU32 {
    NonZeroU32::new(value).unwrap_or(NonZeroU32::MIN)
}

fn usize_of(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

impl NetworkConfig {
    /// Whether the network requires client signatures, and whose: what its routers and
    /// batchers check a request's content against.
    pub fn client_auth(&self) -> router::ClientAuth {
        match &self.client_keys {
            None => router::ClientAuth::Open,
            Some(keys) => router::ClientAuth::Signed(keys.clone()),
        }
    }

    /// How routers and batchers check a request's content: the network's request format
    /// and client policies.
    pub fn request_policy(&self) -> router::RequestPolicy {
        use crate::file::RequestFormatFile;
        let format = match self.file.router.request_format {
            RequestFormatFile::Fabrx => router::RequestFormat::Fabrx,
            RequestFormatFile::Fabric => router::RequestFormat::Fabric,
            RequestFormatFile::Both => router::RequestFormat::Both,
        };
        // A network that requires signatures requires them of Fabric clients too: those
        // of its `fabric.clients`.
        let fabric_auth = match &self.client_keys {
            None => router::FabricAuth::Open,
            Some(_) => router::FabricAuth::Signed(self.fabric_clients.clone()),
        };
        router::RequestPolicy {
            format,
            client_auth: self.client_auth(),
            fabric_auth,
        }
    }

    /// Party `party`'s router config: shards, limits and client auth of the file.
    pub fn router_config(&self, party: PartyId) -> Result<router::RouterConfig> {
        self.party(party)?;
        let r = &self.file.router;
        let mut cfg = router::RouterConfig::new(party, self.shards);
        cfg.max_request_bytes = nonzero_usize(r.max_request_bytes);
        cfg.shard_max_in_flight = nonzero_usize(r.shard_max_in_flight);
        cfg.shard_max_in_flight_bytes = nonzero_u64(r.shard_max_in_flight_bytes);
        cfg.stream_max_in_flight = nonzero_usize(r.stream_max_in_flight);
        cfg.answer_timeout = Duration::from_millis(r.answer_timeout_ms);
        cfg.requests = self.request_policy();
        cfg.validate().map_err(|source| Error::Router { party, source })?;
        Ok(cfg)
    }

    /// `http://host:port` of party `party`'s batcher of each shard (index = shard).
    pub fn batcher_uris(&self, party: PartyId) -> Result<Vec<String>> {
        Ok(self
            .party(party)?
            .batchers
            .iter()
            .map(|b| b.endpoint.uri())
            .collect())
    }

    /// Party `party`'s router node: listening on `listen`, or on its endpoint's address
    /// ([`crate::Endpoint::listen_addr`]) when `None`, with default server limits.
    pub fn router_setup(&self, party: PartyId, listen: Option<SocketAddr>) -> Result<RouterSetup> {
        let router = self.router_config(party)?;
        let listen = listen.unwrap_or(self.party(party)?.router.listen_addr());
        Ok(RouterSetup {
            node: router::node::Config {
                listen,
                server: wire::server::ServerLimits::default(),
                router,
            },
            batcher_uris: self.batcher_uris(party)?,
        })
    }

    /// The batcher public key of every party for shard `shard` (checks batch headers,
    /// BAFs and complaints; the consenters and assemblers need it too).
    pub fn batcher_keys(&self, shard: ShardId) -> Result<BTreeMap<PartyId, PublicKey>> {
        self.parties
            .iter()
            .map(|p| Ok((p.id, self.batcher(p.id, shard)?.public_key.clone())))
            .collect()
    }

    /// Party `party`'s batcher of shard `shard`: the core's config.
    pub fn batcher_config(&self, party: PartyId, shard: ShardId) -> Result<batcher::Config> {
        self.batcher(party, shard)?;
        let b = &self.file.batching;
        let cfg = batcher::Config {
            party,
            shard,
            parties: self.party_ids(),
            shards: self.shards.get(),
            keys: self.batcher_keys(shard)?,
            max_request_bytes: nonzero_usize(b.max_request_bytes),
            max_batch_requests: nonzero_u32(b.max_batch_requests),
            max_batch_bytes: nonzero_u64(b.max_batch_bytes),
            batch_timeout_ms: b.batch_timeout_ms,
            window: nonzero_u32(b.window),
            max_unordered_batches: nonzero_u32(b.max_unordered_batches),
            mempool_max_requests: nonzero_usize(b.mempool_max_requests),
            mempool_max_bytes: nonzero_u64(b.mempool_max_bytes),
            ordered_memory: nonzero_usize(b.ordered_memory),
            forward_timeout_ms: b.forward_timeout_ms,
            complain_timeout_ms: b.complain_timeout_ms,
        };
        cfg.validate()
            .map_err(|source| Error::Batcher { party, shard, source })?;
        Ok(cfg)
    }

    /// Party `party`'s batcher node of shard `shard` (`batcher::node::spawn`): the core's
    /// config ([`NetworkConfig::batcher_config`]), the signing key from `key_file`
    /// ([`NetworkConfig::read_node_key`]: it must hold the key this config lists),
    /// listening on `listen` or on its endpoint's address when `None`, its data directory,
    /// every party's consenter (`BftConsensus`; this party's also for
    /// `Consenter.Decisions`), the consenter set's keys on this chain (every decision's
    /// certificate is verified) and every party's batcher of the shard (`BatcherPeer`),
    /// with default server limits and shell tunables.
    pub fn batcher_node_config(
        &self,
        party: PartyId,
        shard: ShardId,
        key_file: &Path,
        data_dir: PathBuf,
        listen: Option<SocketAddr>,
    ) -> Result<batcher::node::Config> {
        let own = self.batcher(party, shard)?;
        let key = self.read_node_key(Node::Batcher { party, shard }, key_file)?;
        let batcher = self.batcher_config(party, shard)?;
        let consenters = self.parties.iter().map(|p| (p.id, p.consenter.uri())).collect();
        let peers = self
            .parties
            .iter()
            .map(|p| Ok((p.id, self.batcher(p.id, shard)?.endpoint.uri())))
            .collect::<Result<BTreeMap<_, _>>>()?;
        Ok(batcher::node::Config {
            batcher,
            key,
            listen: listen.unwrap_or(own.endpoint.listen_addr()),
            server: wire::server::ServerLimits::default(),
            data_dir,
            consenters,
            peers,
            own_consenter: self.party(party)?.consenter.uri(),
            consenter_keys: Some(self.cluster_keys()),
            config_rules: Some(std::sync::Arc::new(crate::update::NetworkRules::new())),
            shell: batcher::node::ShellConfig::default(),
            content: batcher::node::RequestContent::Envelopes(self.request_policy()),
            next_key_files: Vec::new(),
            joining: false,
        })
    }

    /// Party `party`'s assembler node (`assembler::node::spawn`): every consenter's
    /// `Consenter.Decisions` (its own party's first), the consenter set's keys on this
    /// chain (every decision's certificate is verified), every batcher (`BatcherPeer`),
    /// its ledger under `data_dir`, listening on `listen` or on its endpoint's address.
    pub fn assembler_node_config(
        &self,
        party: PartyId,
        data_dir: &Path,
        listen: Option<SocketAddr>,
    ) -> Result<assembler::node::Config> {
        let own = self.party(party)?;
        let listen = match (listen, own.assembler.as_ref()) {
            (Some(l), _) => l,
            (None, Some(endpoint)) => endpoint.listen_addr(),
            (None, None) => {
                return Err(Error::NoEndpoint {
                    node: Node::Assembler(party),
                });
            }
        };
        let mut consenters = vec![own.consenter.uri()];
        consenters.extend(
            self.parties
                .iter()
                .filter(|p| p.id != party)
                .map(|p| p.consenter.uri()),
        );
        let mut batchers = BTreeMap::new();
        for p in &self.parties {
            for shard in 0..self.shards().get() {
                batchers.insert((p.id, shard), self.batcher(p.id, shard)?.endpoint.uri());
            }
        }
        Ok(assembler::node::Config {
            party,
            shards: self.shards().get(),
            consenters,
            consenter_keys: self.cluster_keys(),
            config_rules: Some(std::sync::Arc::new(crate::update::NetworkRules::new())),
            batchers,
            assemblers: self
                .parties
                .iter()
                .filter(|p| p.id != party)
                .filter_map(|p| p.assembler.as_ref().map(crate::Endpoint::uri))
                .collect(),
            ledger: data_dir.join("ledger"),
            listen,
            server: wire::server::ServerLimits::default(),
            limits: assembler::core::Limits::default(),
            deliver: assembler::deliver::DeliverLimits::default(),
            fabric_genesis: self.fabric_genesis(),
            retry: Duration::from_millis(200),
        })
    }

    /// Party `party`'s consenter replica id (`party − 1`).
    pub fn replica_id(&self, party: PartyId) -> Result<bft::ReplicaId> {
        Ok(self.party(party)?.id - 1)
    }

    /// `host:port` of every consenter, index = replica id (the `--peers` of
    /// `fabrx node bft`).
    pub fn consenter_peers(&self) -> Vec<String> {
        self.parties.iter().map(|p| p.consenter.to_string()).collect()
    }

    /// The parties in force, as the ordering roles count them.
    pub fn party_ids(&self) -> arma::Parties {
        arma::Parties::new(self.parties.iter().map(|p| p.id).collect())
            // A loaded config has parties with increasing ids from 1.
            .unwrap_or_else(|_| arma::Parties::contiguous(self.n()))
    }

    /// Every consenter's public key by replica id (party `p` runs replica `p − 1`).
    pub fn consenters_by_replica(&self) -> BTreeMap<bft::ReplicaId, PublicKey> {
        self.parties
            .iter()
            .map(|p| (p.id.saturating_sub(1), p.consenter_key.clone()))
            .collect()
    }

    /// Every consenter's `host:port` by replica id (party `p` runs replica `p − 1`).
    pub fn consenter_endpoints_by_replica(&self) -> BTreeMap<bft::ReplicaId, String> {
        self.parties
            .iter()
            .map(|p| (p.id.saturating_sub(1), p.consenter.to_string()))
            .collect()
    }

    /// Every consenter's public key, in party order.
    pub fn consenter_keys(&self) -> Vec<PublicKey> {
        self.parties.iter().map(|p| p.consenter_key.clone()).collect()
    }

    /// The consenter set's keys on this network's chain (its chain id is bound into every
    /// consenter signature), taking this config as the chain's genesis: the chain id
    /// binds the SHA-256 of the config's canonical text ([`Self::genesis_digest`]). Every
    /// node of a network starts from byte for byte the same genesis config; one started
    /// from another file (another router limit, admin key, TLS certificate, …) signs and
    /// verifies under another chain id, so it forms no quorum with the others and verifies
    /// none of their decisions — it fails at once, instead of judging config updates
    /// against another config than the others some day.
    pub fn cluster_keys(&self) -> ClusterKeys {
        ClusterKeys::by_id(&self.bound_chain(), self.consenters_by_replica())
    }

    /// The chain name the consenters sign under: the network's chain name bound to this
    /// (genesis) config's digest, `<chain>#<hex SHA-256>`.
    pub fn bound_chain(&self) -> String {
        format!("{}#{}", self.chain(), hex::encode(self.genesis_digest()))
    }

    /// SHA-256 of this config's canonical text (`update::canonical_json`).
    pub fn genesis_digest(&self) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(crate::update::canonical_json(&self.file).as_bytes()).into()
    }

    /// The peer-keys file of the consenters (`<scheme> <hex>` per line in replica order,
    /// `consenter::keys::parse_peer_keys`), derived from this config.
    pub fn peer_keys_text(&self) -> String {
        let mut text = format!(
            "# consenter public keys of chain {}, replica order (party − 1)\n",
            self.chain()
        );
        for p in &self.parties {
            text.push_str(&format!(
                "{} {}\n",
                p.consenter_key.scheme().name(),
                p.consenter_key.to_hex()
            ));
        }
        text
    }

    /// Party `party`'s consensus engine config: the file's consensus parameters, `id` and
    /// `n`, and the chain id of [`NetworkConfig::cluster_keys`].
    pub fn consenter_engine(&self, party: PartyId) -> Result<bft::Config> {
        let mut engine = bft::Config::new(self.replica_id(party)?, self.n());
        engine.chain = self.cluster_keys().chain_id();
        engine.set_params(self.engine_params());
        Ok(engine)
    }

    /// The consensus engine's limits and timing (the `consensus` block): what a config
    /// update may change in a running engine (docs/reconfiguration.md).
    pub fn engine_params(&self) -> bft::EngineParams {
        let c = &self.file.consensus;
        bft::EngineParams {
            max_batch_count: usize_of(c.batch_max),
            max_batch_bytes: usize_of(c.batch_max_bytes),
            batch_interval_ms: c.batch_interval_ms,
            request_timeout_ms: c.request_timeout_ms,
            heartbeat_interval_ms: c.heartbeat_interval_ms,
            heartbeat_timeout_ms: c.heartbeat_timeout_ms,
            view_change_timeout_ms: c.view_change_timeout_ms,
            max_request_bytes: usize_of(c.max_request_bytes),
            max_pending: usize_of(c.max_pending),
            max_pending_bytes: usize_of(c.max_pending_bytes),
        }
    }

    /// The Arma consenter application's config: parties, shards, `consensus.max_seqs_ahead`
    /// and the batcher key of every party and shard (the same for every consenter).
    pub fn arma_config(&self) -> Result<consenter::application::ArmaConfig> {
        let mut keys = BTreeMap::new();
        for p in &self.parties {
            for b in &p.batchers {
                keys.insert((p.id, b.shard), b.public_key.clone());
            }
        }
        consenter::application::ArmaConfig::new(
            self.party_ids(),
            self.shards.get(),
            self.file.consensus.max_seqs_ahead,
            keys,
        )
        .map_err(|e| Error::Consenter {
            reason: e.to_string(),
        })
    }

    /// Party `party`'s consenter key (from its key file, checked against this config) and
    /// the consenter set's keys: what `consenter::keys::NodeKeys::load` returns.
    pub fn consenter_signing_keys(
        &self,
        party: PartyId,
        key_file: &Path,
    ) -> Result<(SigningKey, ClusterKeys)> {
        let key = self.read_node_key(Node::Consenter(party), key_file)?;
        Ok((key, self.cluster_keys()))
    }

    /// Party `party`'s consenter node config (`consenter::replica::run`), with the default
    /// node limits. The key comes from `paths.key_file` and the peer keys from
    /// `paths.peer_keys`, which must hold [`NetworkConfig::peer_keys_text`]'s keys (the
    /// node checks its own key against it when it starts).
    pub fn consenter_node_config(
        &self,
        party: PartyId,
        paths: ConsenterPaths,
    ) -> Result<consenter::replica::ReplicaConfig> {
        Ok(consenter::replica::ReplicaConfig {
            engine: self.consenter_engine(party)?,
            peers: self.consenter_peers(),
            keys: NodeKeys::Files {
                key: paths.key_file,
                peers: paths.peer_keys,
            },
            chain: self.bound_chain(),
            wal: paths.wal,
            decisions: paths.decisions,
            tick: Duration::from_millis(self.file.consensus.tick_ms),
            limits: consenter::replica::NodeLimits::default(),
            channel_capacity: 4096,
        })
    }
}

/// The files of an Arma consenter node ([`NetworkConfig::arma_node_config`]).
#[derive(Debug, Clone)]
pub struct ArmaConsenterPaths {
    /// The consenter's key file.
    pub key_file: PathBuf,
    /// The consenter peer-keys file; it must list [`NetworkConfig::consenter_keys`].
    pub peer_keys: PathBuf,
    /// The data directory (its layout: `consenter::node::DataDir`).
    pub data_dir: PathBuf,
}

impl NetworkConfig {
    /// Party `party`'s Arma consenter (`consenter::node::spawn`): the engine and
    /// node of [`NetworkConfig::consenter_node_config`], the application's
    /// [`NetworkConfig::arma_config`], listening on `listen` or on its endpoint's address
    /// ([`crate::Endpoint::listen_addr`]) when `None`, default stream limits and a state
    /// snapshot every second. Checks that the key file holds the consenter key this config
    /// lists and that the peer-keys file lists this config's consenter keys.
    pub fn arma_node_config(
        &self,
        party: PartyId,
        paths: ArmaConsenterPaths,
        listen: Option<SocketAddr>,
    ) -> Result<consenter::node::Config> {
        self.read_node_key(Node::Consenter(party), &paths.key_file)?;
        self.check_peer_keys(&paths.peer_keys)?;
        let data = consenter::node::DataDir(&paths.data_dir);
        let node = self.consenter_node_config(
            party,
            ConsenterPaths {
                key_file: paths.key_file.clone(),
                peer_keys: paths.peer_keys.clone(),
                wal: data.wal(),
                decisions: data.decisions(),
            },
        )?;
        Ok(consenter::node::Config {
            node,
            arma: self.arma_config()?,
            state: data.state(),
            listen: Some(listen.unwrap_or(self.party(party)?.consenter.listen_addr())),
            streams: consenter::decisions_service::StreamLimits::default(),
            snapshot_interval: Duration::from_secs(1),
            retain_decisions: consenter::node::DEFAULT_RETAIN_DECISIONS,
            next_key_files: Vec::new(),
            reconfig: None,
        })
    }

    /// The peer-keys file at `path` lists exactly this config's consenter keys, in order.
    fn check_peer_keys(&self, path: &Path) -> Result<()> {
        let refused = |reason: String| Error::Consenter {
            reason: format!("{}: {reason}", path.display()),
        };
        let text = std::fs::read_to_string(path).map_err(|e| refused(e.to_string()))?;
        let keys = consenter::keys::parse_peer_keys(&text).map_err(refused)?;
        if keys != self.consenter_keys() {
            return Err(refused("its consenter keys are not the network config's".into()));
        }
        Ok(())
    }
}
