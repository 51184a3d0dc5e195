//! The node's address book: channels to the other parties' batchers of its shard and to
//! every consenter, and the parties in force. It starts from the node's config and
//! follows each config in force: a party that joined gets its nodes linked
//! (docs/reconfiguration.md "Adding a party"), so from that decision on the pull, the
//! acks and forwards, the fetches, the BAF submissions and the forward check reach them;
//! a party that left has its links dropped and its forwards refused ("Removing a
//! party"). An entry's endpoint is not changed here.

use std::collections::BTreeMap;
use std::sync::RwLock;
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
    /// The parties in force and the sequence of the config that put them in force.
    parties: RwLock<(arma::Parties, u64)>,
}

struct Links {
    peers: BTreeMap<PartyId, Channel>,
    consenters: BTreeMap<PartyId, Channel>,
}

impl Book {
    /// The book of party `me`'s batcher of `shard` in a network of `parties` (those of
    /// the config of sequence `sequence`).
    pub fn new(
        me: PartyId,
        shard: ShardId,
        peers: BTreeMap<PartyId, Channel>,
        consenters: BTreeMap<PartyId, Channel>,
        parties: arma::Parties,
        sequence: u64,
    ) -> Book {
        Book {
            me,
            shard,
            links: RwLock::new(Links { peers, consenters }),
            parties: RwLock::new((parties, sequence)),
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

    /// The parties in force.
    pub fn parties(&self) -> arma::Parties {
        self.parties.read().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// Follows a config in force: a party that joined gets its batcher of the shard and
    /// its consenter linked; a party that left has both links dropped. A config older
    /// than the one followed changes nothing. Returns how many links were added.
    pub fn follow(&self, view: &arma::ConfigView) -> usize {
        {
            let mut parties = self.parties.write().unwrap_or_else(|e| e.into_inner());
            if view.sequence < parties.1 {
                return 0;
            }
            *parties = (view.parties.clone(), view.sequence);
        }
        let mut links = self.links.write().unwrap_or_else(|e| e.into_inner());
        let before = links.peers.len() + links.consenters.len();
        links.peers.retain(|p, _| view.parties.contains(*p));
        links.consenters.retain(|p, _| view.parties.contains(*p));
        let dropped = before - links.peers.len() - links.consenters.len();
        let mut added = 0;
        for ((party, shard), endpoint) in &view.batcher_endpoints {
            if *shard != self.shard
                || *party == self.me
                || !view.parties.contains(*party)
                || links.peers.contains_key(party)
            {
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
        for (replica, endpoint) in &view.consenter_endpoints {
            // Party `p` runs replica `p − 1`.
            let Some(party) = replica.checked_add(1) else {
                continue;
            };
            if !view.parties.contains(party) || links.consenters.contains_key(&party) {
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
        if added > 0 {
            info!(parties = ?view.parties, added, "a party joined: this batcher links to its nodes from now on");
        }
        if dropped > 0 {
            info!(parties = ?view.parties, dropped, "a party left: this batcher drops its links");
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(sequence: u64, parties: &[PartyId], shards: u32) -> arma::ConfigView {
        let mut batcher_endpoints = BTreeMap::new();
        for &p in parties {
            for s in 0..shards {
                batcher_endpoints.insert((p, s), format!("127.0.0.1:{}", 9000 + p * 10 + s));
            }
        }
        arma::ConfigView {
            sequence,
            parties: arma::Parties::new(parties.to_vec()).unwrap_or_else(|e| panic!("{e}")),
            left_parties: Vec::new(),
            shards,
            batcher_keys: BTreeMap::new(),
            consenters: BTreeMap::new(),
            consenter_endpoints: parties
                .iter()
                .map(|p| (p - 1, format!("127.0.0.1:{}", 8000 + p)))
                .collect(),
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
        let book = Book::new(1, 1, peers, consenters, arma::Parties::contiguous(4), 0);
        // the same parties: nothing added
        assert_eq!(book.follow(&view(0, &[1, 2, 3, 4], 2)), 0);
        assert_eq!(book.peers().len(), 3);
        // party 5 joins: its shard-1 batcher and its consenter
        assert_eq!(book.follow(&view(1, &[1, 2, 3, 4, 5], 2)), 2);
        assert_eq!(book.parties(), arma::Parties::contiguous(5));
        assert!(book.peer(5).is_some());
        assert!(book.peer(1).is_none(), "never its own");
        assert_eq!(book.consenters().len(), 5);
        // an older view changes nothing
        assert_eq!(book.follow(&view(0, &[1, 2, 3, 4], 2)), 0);
        assert_eq!(book.parties(), arma::Parties::contiguous(5));
        assert_eq!(book.consenters().len(), 5);
    }

    #[tokio::test]
    async fn the_book_drops_a_party_that_left() {
        let peers = (2..=5).map(|p| (p, chan(9000 + p * 10 + 1))).collect();
        let consenters = (1..=5).map(|p| (p, chan(8000 + p))).collect();
        let book = Book::new(1, 1, peers, consenters, arma::Parties::contiguous(5), 1);
        // party 2 leaves
        assert_eq!(book.follow(&view(2, &[1, 3, 4, 5], 2)), 0);
        assert_eq!(book.parties().ids(), &[1, 3, 4, 5]);
        assert!(book.peer(2).is_none());
        assert_eq!(book.peers().len(), 3);
        assert_eq!(book.consenters().len(), 4);
        // party 6 joins after: ids are not given again, the gap stays
        assert_eq!(book.follow(&view(3, &[1, 3, 4, 5, 6], 2)), 2);
        assert_eq!(book.parties().ids(), &[1, 3, 4, 5, 6]);
        assert!(book.peer(2).is_none() && book.peer(6).is_some());
    }
}
