//! A joining party's nodes (docs/reconfiguration.md "Adding a party", ADR 0018): they
//! start from the network's **genesis** config, like every node (it fixes the chain id,
//! the genesis bytes the consenters order updates from and the first consenter set),
//! and take their own entry, keys, endpoints and TLS identity from the **joining**
//! config, the config update that adds the party (`--join FILE`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use consenter::keys::NodeKeys;
use types::PartyId;

use crate::config::NetworkConfig;
use crate::error::{Error, Node, Result};

/// The files of a joining consenter.
#[derive(Debug, Clone)]
pub struct JoiningConsenterPaths {
    /// The consenter's key file (the key the joining config names for it).
    pub key_file: PathBuf,
    /// Its data directory (layout: `consenter::node::DataDir`).
    pub data_dir: PathBuf,
}

impl NetworkConfig {
    /// Checks that `joined`, a later config of this (genesis) network, adds `party`:
    /// this config is the genesis one (sequence 0), `joined` has the same chain and
    /// shards and a later sequence, and names `party`, which this config does not.
    pub fn check_join(&self, joined: &NetworkConfig, party: PartyId) -> Result<()> {
        let refused = |reason: String| Error::Join { party, reason };
        if self.sequence() != 0 {
            return Err(refused(format!(
                "--network must be the genesis config (sequence 0), not sequence {}",
                self.sequence()
            )));
        }
        if joined.chain() != self.chain() {
            return Err(refused(format!(
                "the joining config is of chain {:?}, the network {:?}",
                joined.chain(),
                self.chain()
            )));
        }
        if joined.shards() != self.shards() {
            return Err(refused(format!(
                "the joining config has {} shards, the network {}",
                joined.shards(),
                self.shards()
            )));
        }
        if joined.sequence() == 0 {
            return Err(refused(
                "the joining config has sequence 0: give the config update's next config".into(),
            ));
        }
        if self.has_party(party) {
            return Err(refused(format!(
                "party {party} is in the genesis config (parties {:?}): it starts with --network alone",
                self.party_list()
            )));
        }
        joined.party(party).map_err(|_| {
            refused(format!(
                "the joining config does not name party {party} (parties {:?})",
                joined.party_list()
            ))
        })?;
        Ok(())
    }

    /// Party `party`'s consenter joining the network from this genesis config and
    /// `joined` ([`NetworkConfig::check_join`]): engine replica `party − 1` outside the
    /// genesis set (a non-member until a decision puts a set with its slot in force, which
    /// it learns by state transfer), linked to the replicas `0..party` of `joined`, its
    /// envelopes under the genesis cluster id, listening on its `joined` endpoint unless
    /// `listen` is given. The key file must hold the key `joined` names for it.
    pub fn joining_consenter_config(
        &self,
        joined: &NetworkConfig,
        party: PartyId,
        paths: JoiningConsenterPaths,
        listen: Option<SocketAddr>,
    ) -> Result<consenter::node::Config> {
        self.check_join(joined, party)?;
        joined.read_node_key(Node::Consenter(party), &paths.key_file)?;
        let me = party - 1;
        let mut engine = bft::Config::new(me, self.n());
        engine.chain = self.cluster_keys().chain_id();
        engine.set_params(self.engine_params());
        let slots = party as usize;
        let peers: Vec<String> = joined.consenter_peers().into_iter().take(slots).collect();
        let joined_keys: Vec<crypto::PublicKey> = joined
            .consenter_keys()
            .into_iter()
            .take(slots)
            .skip(self.n() as usize)
            .collect();
        let data = consenter::node::DataDir(&paths.data_dir);
        let node = consenter::replica::ReplicaConfig {
            engine,
            peers,
            keys: NodeKeys::Joining {
                key: paths.key_file.clone(),
                genesis: self.consenter_keys(),
                joined: joined_keys,
            },
            chain: self.bound_chain(),
            wal: data.wal(),
            decisions: data.decisions(),
            tick: Duration::from_millis(joined.file().consensus.tick_ms),
            limits: consenter::replica::NodeLimits::default(),
            channel_capacity: 4096,
        };
        Ok(consenter::node::Config {
            node,
            arma: self.arma_config()?,
            state: data.state(),
            listen: Some(listen.unwrap_or(joined.party(party)?.consenter.listen_addr())),
            streams: consenter::decisions_service::StreamLimits::default(),
            snapshot_interval: Duration::from_secs(1),
            retain_decisions: consenter::node::DEFAULT_RETAIN_DECISIONS,
            next_key_files: Vec::new(),
            reconfig: None,
        })
    }
}

impl NetworkConfig {
    /// Party `party`'s batcher of `shard` joining the network from this genesis config
    /// and `joined` ([`NetworkConfig::check_join`]): the node of `joined`
    /// ([`NetworkConfig::batcher_node_config`]) verifying decisions under the genesis
    /// consenter set (the chain id binds the genesis config) and waiting, without a core,
    /// for the decision that adds its party (`batcher::node::Config::joining`).
    pub fn joining_batcher_config(
        &self,
        joined: &NetworkConfig,
        party: PartyId,
        shard: types::ShardId,
        key_file: &std::path::Path,
        data_dir: PathBuf,
        listen: Option<SocketAddr>,
    ) -> Result<batcher::node::Config> {
        self.check_join(joined, party)?;
        let mut cfg = joined.batcher_node_config(party, shard, key_file, data_dir, listen)?;
        cfg.consenter_keys = Some(self.cluster_keys());
        cfg.joining = true;
        Ok(cfg)
    }
}

impl NetworkConfig {
    /// Party `party`'s assembler joining the network from this genesis config and
    /// `joined` ([`NetworkConfig::check_join`]): the node of `joined`
    /// ([`NetworkConfig::assembler_node_config`]: its endpoint, every batcher and
    /// consenter it names) building the whole ledger from block 0, with the genesis
    /// consenter set (the chain id binds the genesis config) and the genesis config's
    /// Fabric genesis block.
    pub fn joining_assembler_config(
        &self,
        joined: &NetworkConfig,
        party: PartyId,
        data_dir: &std::path::Path,
        listen: Option<SocketAddr>,
    ) -> Result<assembler::node::Config> {
        self.check_join(joined, party)?;
        let mut cfg = joined.assembler_node_config(party, data_dir, listen)?;
        cfg.consenter_keys = self.cluster_keys();
        cfg.fabric_genesis = self.fabric_genesis();
        Ok(cfg)
    }
}
