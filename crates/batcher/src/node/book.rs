//! The node's address book: channels to the other parties' batchers of its shard and to
//! every consenter, and the number of parties. It starts from the node's config and
//! **grows** when a config in force adds a party (docs/reconfiguration.md "Adding a
//! party"): from that decision on the pull, the acks and forwards, the fetches, the BAF
//! submissions and the forward check reach the new party's nodes too. Entries are never
//! removed or changed here.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tonic::transport::Channel;
use tracing::{info, warn};
use types::{PartyId, ShardId};

/// How long a lazily connected channel waits for a connection.
const CONNECT: Duration = Duration::from_secs(5);

/// See the module.
pub struct Book {
    me: PartyId,
    shard: ShardId,
    links: RwLock<Links>,
    parties: AtomicU32,
}

struct Links {
    peers: BTreeMap<PartyId, Channel>,
    consenters: BTreeMap<PartyId, Channel>,
}

impl Book {
    /// The book of party `me`'s batcher of `shard` in a network of `parties`.
    pub fn new(
        me: PartyId,
        shard: ShardId,
        peers: BTreeMap<PartyId, Channel>,
        consenters: BTreeMap<PartyId, Channel>,
        parties: u32,
    ) -> Book {
        Book {
            me,
            shard,
            links: RwLock::new(Links { peers, consenters }),
            parties: AtomicU32::new(parties),
        }
    }

    /// The channel to party `p`'s batcher of the shard.
    pub fn peer(&self, p: PartyId) -> Option<Channel> {
        self.links
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .peers
            .get(&p)
            .cloned()
    }

    /// Every other party's batcher of the shard, in party order.
    pub fn peers(&self) -> Vec<(PartyId, Channel)> {
        let links = self.links.read().unwrap_or_else(|e| e.into_inner());
        links.peers.iter().map(|(p, c)| (*p, c.clone())).collect()
    }

    /// Every consenter, in party order.
    pub fn consenters(&self) -> Vec<Channel> {
        let links = self.links.read().unwrap_or_else(|e| e.into_inner());
        links.consenters.values().cloned().collect()
    }

    /// Parties of the network in force (parties are `1..=parties`).
    pub fn parties(&self) -> u32 {
        self.parties.load(Ordering::Acquire)
    }

    /// Follows a config in force: a party past the known ones gets its batcher of the
    /// shard and its consenter linked. Returns how many links were added.
    pub fn follow(&self, view: &arma::ConfigView) -> usize {
        let mut links = self.links.write().unwrap_or_else(|e| e.into_inner());
        let mut added = 0;
        for ((party, shard), endpoint) in &view.batcher_endpoints {
            if *shard != self.shard || *party == self.me || links.peers.contains_key(party) {
                continue;
            }
            match clients::channel::lazy(endpoint, CONNECT) {
                Ok(c) => {
                    links.peers.insert(*party, c);
                    added += 1;
                }
                Err(e) => warn!(party, error = %e, "a joined party's batcher endpoint is not usable"),
            }
        }
        for (slot, endpoint) in view.consenter_endpoints.iter().enumerate() {
            let Some(party) = u32::try_from(slot).ok().and_then(|s| s.checked_add(1)) else {
                break;
            };
            if links.consenters.contains_key(&party) {
                continue;
            }
            match clients::channel::lazy(endpoint, CONNECT) {
                Ok(c) => {
                    links.consenters.insert(party, c);
                    added += 1;
                }
                Err(e) => warn!(party, error = %e, "a joined party's consenter endpoint is not usable"),
            }
        }
        let before = self.parties.fetch_max(view.parties, Ordering::AcqRel);
        if added > 0 || view.parties > before {
            info!(
                parties = view.parties.max(before),
                added, "a party joined: this batcher links to its nodes from now on"
            );
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(parties: u32, shards: u32) -> arma::ConfigView {
        let mut batcher_endpoints = BTreeMap::new();
        for p in 1..=parties {
            for s in 0..shards {
                batcher_endpoints.insert((p, s), format!("127.0.0.1:{}", 9000 + p * 10 + s));
            }
        }
        arma::ConfigView {
            sequence: 1,
            parties,
            shards,
            batcher_keys: BTreeMap::new(),
            consenters: Vec::new(),
            consenter_endpoints: (1..=parties).map(|p| format!("127.0.0.1:{}", 8000 + p)).collect(),
            batcher_endpoints,
            max_seqs_ahead: 8,
            batching: arma::BatchingView {
                max_batch_requests: 1,
                max_batch_bytes: 1,
                batch_timeout_ms: 1,
                forward_timeout_ms: 1,
                complain_timeout_ms: 1,
            },
            engine: None,
        }
    }

    fn chan(port: u32) -> Channel {
        clients::channel::lazy(&format!("127.0.0.1:{port}"), CONNECT).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn the_book_grows_by_a_joined_partys_batcher_of_its_shard_and_consenter() {
        let peers = (2..=4).map(|p| (p, chan(9000 + p * 10 + 1))).collect();
        let consenters = (1..=4).map(|p| (p, chan(8000 + p))).collect();
        let book = Book::new(1, 1, peers, consenters, 4);
        // the same parties: nothing added
        assert_eq!(book.follow(&view(4, 2)), 0);
        assert_eq!(book.peers().len(), 3);
        // party 5 joins: its shard-1 batcher and its consenter
        assert_eq!(book.follow(&view(5, 2)), 2);
        assert_eq!(book.parties(), 5);
        assert!(book.peer(5).is_some());
        assert!(book.peer(1).is_none(), "never its own");
        assert_eq!(book.consenters().len(), 5);
        // an older view shrinks nothing
        assert_eq!(book.follow(&view(4, 2)), 0);
        assert_eq!(book.parties(), 5);
    }
}
