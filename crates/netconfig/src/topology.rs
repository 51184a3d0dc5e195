//! The network's processes, listed once: which node of which role runs for which party
//! (and shard, or endorser share), and the endpoint it serves. `fabrx up` starts exactly
//! these (the `devnet` crate), in this order: every party's consenter and batchers, then
//! every party's router and assembler, then the committing parties' validator-committer,
//! signature verifier and sidecar, then their query services and the token endorsers.

use crate::config::NetworkConfig;
use crate::endpoint::Endpoint;
use crate::error::Result;
use types::{PartyId, ShardId};
use wire::tls::Role;

/// One process of the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Its role.
    pub role: Role,
    /// Its party (an endorser: the party that runs its share).
    pub party: PartyId,
    /// A batcher's shard.
    pub shard: Option<ShardId>,
    /// An endorser's share index.
    pub index: Option<u32>,
    /// The endpoint it serves (empty for an assembler the config does not list).
    pub listen: Option<Endpoint>,
}

impl Process {
    fn of(role: Role, party: PartyId, listen: Option<&Endpoint>) -> Process {
        Process {
            role,
            party,
            shard: None,
            index: None,
            listen: listen.cloned(),
        }
    }

    /// Its name, unique in the network: `<role>-<party>`, `batcher-<party>-<shard>`,
    /// `endorser-<index>`.
    pub fn name(&self) -> String {
        match (self.shard, self.index) {
            (Some(s), _) => format!("{}-{}-{s}", self.role.name(), self.party),
            (None, Some(i)) => format!("{}-{i}", self.role.name()),
            (None, None) => format!("{}-{}", self.role.name(), self.party),
        }
    }
}

impl NetworkConfig {
    /// Every process of the network whose committing parties are 1..=`committers` (0:
    /// ordering only), in start order (module docs). The token nodes are listed when
    /// the network has a token application and at least one committing party.
    pub fn topology(&self, committers: u32) -> Result<Vec<Process>> {
        let mut out = Vec::new();
        for p in self.parties() {
            out.push(Process::of(Role::Consenter, p.id, Some(&p.consenter)));
            for b in &p.batchers {
                out.push(Process {
                    shard: Some(b.shard),
                    ..Process::of(Role::Batcher, p.id, Some(&b.endpoint))
                });
            }
        }
        for p in self.parties() {
            out.push(Process::of(Role::Router, p.id, Some(&p.router)));
            out.push(Process::of(Role::Assembler, p.id, p.assembler.as_ref()));
        }
        for p in 1..=committers {
            let c = self.committer_party(p)?;
            out.push(Process::of(Role::Vcservice, p, Some(&c.vcservice)));
            out.push(Process::of(Role::Sigverifier, p, Some(&c.sigverifier)));
            out.push(Process::of(Role::Sidecar, p, Some(&c.sidecar)));
        }
        if let (Ok(app), true) = (self.token(), committers > 0) {
            for p in 1..=committers {
                out.push(Process::of(Role::Query, p, Some(self.query_endpoint(p)?)));
            }
            for e in &app.endorsers {
                out.push(Process {
                    index: Some(e.index),
                    ..Process::of(Role::Endorser, e.party, Some(&e.endpoint))
                });
            }
        }
        Ok(out)
    }
}
