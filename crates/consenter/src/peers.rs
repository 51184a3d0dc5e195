//! The consenter set as the transport sees it: each replica's key (to verify its
//! envelopes on plain TCP) and its endpoint (to dial it). It starts as the set the node
//! was started with and **grows** when a config in force has more consenters (a party
//! joined, docs/reconfiguration.md "Adding a party"): the receiving side then accepts
//! the new replica's envelopes and the sending side queues for it and dials it, from the
//! decision that puts that config in force on (ADR 0018). A joining replica starts with
//! the set that has its slot.
//!
//! Entries are never changed or removed here: a replica's envelope key is the key it
//! was started with (a rotated engine key is the engine's business, and over mutual TLS
//! the caller's certificate names the sender), and the envelopes keep the cluster id of
//! the genesis set ([`ClusterKeys::joined`]). The replicas learned past the genesis set
//! are persisted ([`Peers::persisted`]): after a restart a joined replica is checked
//! against the key it joined with, not a key a later update rotated it to.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, RwLock};

use crypto::PublicKey;
use tracing::{error, info};

use crate::keys::ClusterKeys;
use crate::transport::GrpcTransport;

/// The replicas a node exchanges envelopes with (see the module).
pub struct Peers {
    keys: RwLock<ClusterKeys>,
    endpoints: Mutex<Vec<String>>,
    transport: OnceLock<GrpcTransport>,
    /// Where the replicas past the genesis set are kept (`None`: not kept).
    file: Option<PathBuf>,
    /// Set once a config in force removed this node's party: the node stops.
    left: tokio::sync::watch::Sender<Option<types::PartyId>>,
}

/// The file form of the replicas past the genesis set.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinedFile {
    /// Their envelope keys, in replica order.
    keys: Vec<PublicKey>,
    /// Their endpoints, in replica order.
    endpoints: Vec<String>,
}

/// Why [`Peers::follow`] did not grow the set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrowError {
    /// The config names fewer endpoints than consenters.
    #[error("the config in force names {keys} consenters but {endpoints} consenter endpoints")]
    Endpoints {
        /// Consenter keys it names.
        keys: usize,
        /// Endpoints it names.
        endpoints: usize,
    },
}

impl Peers {
    /// The set of `keys` dialled at `endpoints` (index = replica id).
    pub fn new(keys: ClusterKeys, endpoints: Vec<String>) -> Peers {
        Peers {
            keys: RwLock::new(keys),
            endpoints: Mutex::new(endpoints),
            transport: OnceLock::new(),
            file: None,
            left: tokio::sync::watch::Sender::new(None),
        }
    }

    /// A config in force removed this node's party `party` (docs/reconfiguration.md
    /// "Removing a party"): the node stops ([`Peers::left`]).
    pub fn party_left(&self, party: types::PartyId) {
        if self.left.send_replace(Some(party)).is_none() {
            info!(
                party,
                grace_ms = arma::LEAVE_GRACE_MS,
                "a config in force removed this node's party: this consenter serves what it holds for a while, then stops"
            );
        }
    }

    /// Resolves with this node's party once a config in force removed it.
    pub async fn left(&self) -> types::PartyId {
        let mut rx = self.left.subscribe();
        loop {
            if let Some(p) = *rx.borrow_and_update() {
                return p;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The set kept in `path` from now on, with the replicas already kept there (past
    /// the ones known) added first. A file that does not read is an error: the node would
    /// otherwise check a joined replica against another key than the one it joined with.
    pub fn persisted(mut self, path: PathBuf) -> Result<Peers, String> {
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        if let Some(bytes) = clients::file::read_if_present(&path).map_err(|e| at(&e))? {
            let kept: JoinedFile = serde_json::from_slice(&bytes).map_err(|e| at(&e))?;
            let mut keys = self.keys().keys_list();
            let genesis = keys.len().saturating_sub(self.keys().joined_keys().len());
            keys.truncate(genesis);
            keys.extend(kept.keys);
            let mut endpoints = self.endpoints();
            endpoints.truncate(genesis);
            endpoints.extend(kept.endpoints);
            self.follow(&keys, &endpoints).map_err(|e| at(&e))?;
        }
        self.file = Some(path);
        Ok(self)
    }

    fn persist(&self, keys: &ClusterKeys, endpoints: &[String]) {
        let Some(path) = &self.file else { return };
        let joined = keys.joined_keys();
        let start = endpoints.len().saturating_sub(joined.len());
        let file = JoinedFile {
            keys: joined.to_vec(),
            endpoints: endpoints.get(start..).unwrap_or_default().to_vec(),
        };
        let written = serde_json::to_vec_pretty(&file)
            .map_err(|e| e.to_string())
            .and_then(|bytes| clients::file::write_durably(path, &bytes).map_err(|e| e.to_string()));
        if let Err(e) = written {
            error!(path = %path.display(), error = %e, "the joined consenters cannot be kept: after a restart they are taken from the config in force");
        }
    }

    /// The keys (and cluster id) envelopes are checked against.
    pub fn keys(&self) -> ClusterKeys {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Number of replicas known.
    pub fn n(&self) -> u32 {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).n()
    }

    /// The endpoints known, index = replica id.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Hands the sending side to the set: it grows with it from now on (and at once to
    /// the endpoints already known).
    pub fn attach(&self, transport: GrpcTransport) {
        let endpoints = self.endpoints();
        transport.grow(&endpoints);
        if self.transport.set(transport).is_err() {
            error!("the consenter transport was attached twice; the second is not grown");
        }
    }

    /// Follows a config in force with consenter `keys` at `endpoints` (replica order):
    /// the replicas past the ones known are added. Returns how many were. A set with as
    /// many replicas or fewer changes nothing (parties only join).
    pub fn follow(&self, keys: &[PublicKey], endpoints: &[String]) -> Result<usize, GrowError> {
        let mut known = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let n = known.n() as usize;
        if keys.len() <= n {
            return Ok(0);
        }
        if endpoints.len() < keys.len() {
            return Err(GrowError::Endpoints {
                keys: keys.len(),
                endpoints: endpoints.len(),
            });
        }
        *known = known.joined(keys.get(n..).unwrap_or_default());
        let mut ends = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        ends.truncate(n);
        ends.extend(endpoints.iter().take(keys.len()).skip(n).cloned());
        let added = keys.len() - n;
        self.persist(&known, &ends);
        info!(
            replicas = keys.len(),
            added, "the consenter set in force grew: linking to its new replicas"
        );
        if let Some(t) = self.transport.get() {
            t.grow(&ends);
        }
        Ok(added)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(prefix: &str, n: u32) -> Vec<PublicKey> {
        let (_, k) = crate::keys::keys_from_seed_prefix(prefix, 0, n);
        (0..n).filter_map(|i| k.key(i).cloned()).collect()
    }

    #[test]
    fn a_set_grows_by_the_replicas_past_the_known_ones_and_keeps_its_cluster_id() {
        let all = keys("g-", 5);
        let genesis = ClusterKeys::new(all[..4].to_vec()).with_chain("c");
        let id = genesis.cluster_id();
        let ends: Vec<String> = (0..5).map(|i| format!("h:{i}")).collect();
        let peers = Peers::new(genesis, ends[..4].to_vec());
        // the same set (a rotation, a parameter change) adds nothing
        assert_eq!(peers.follow(&all[..4], &ends[..4]), Ok(0));
        assert_eq!(peers.n(), 4);
        // endpoints missing for the new replica: refused, nothing changes
        assert_eq!(
            peers.follow(&all, &ends[..4]),
            Err(GrowError::Endpoints {
                keys: 5,
                endpoints: 4
            })
        );
        assert_eq!(peers.n(), 4);
        assert_eq!(peers.follow(&all, &ends), Ok(1));
        assert_eq!(peers.n(), 5);
        assert_eq!(peers.keys().key(4), all.get(4));
        assert_eq!(peers.keys().cluster_id(), id, "the genesis id stays");
        assert_eq!(peers.endpoints(), ends);
        // a smaller set later (none is made today) shrinks nothing
        assert_eq!(peers.follow(&all[..3], &ends[..3]), Ok(0));
        assert_eq!(peers.n(), 5);
        // the chain id of the grown keys is the genesis set's on that chain
        assert_eq!(peers.keys().with_chain("c").cluster_id(), id);
    }

    #[test]
    fn a_restarted_node_keeps_the_key_a_replica_joined_with() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers-joined.json");
        let all = keys("g-", 5);
        let rotated = keys("r-", 5);
        let genesis = ClusterKeys::new(all[..4].to_vec());
        let ends: Vec<String> = (0..5).map(|i| format!("h:{i}")).collect();
        let peers = Peers::new(genesis.clone(), ends[..4].to_vec())
            .persisted(path.clone())
            .unwrap();
        assert_eq!(peers.follow(&all, &ends), Ok(1));
        // Restarted after party 5's key rotated: the config in force names another key,
        // the kept one wins.
        let mut in_force = all.clone();
        in_force[4] = rotated[4].clone();
        let again = Peers::new(genesis.clone(), ends[..4].to_vec())
            .persisted(path.clone())
            .unwrap();
        assert_eq!(again.follow(&in_force, &ends), Ok(0));
        assert_eq!(again.keys().key(4), all.get(4));
        assert_eq!(again.endpoints(), ends);
        // A file that does not read is refused.
        std::fs::write(&path, b"junk").unwrap();
        assert!(Peers::new(genesis, ends[..4].to_vec()).persisted(path).is_err());
    }
}
