//! What the committing side's roles read from the network config: a party's committer
//! nodes, and where its sidecar reads blocks from.

use crate::committer::{CommitterParty, Committers};
use crate::config::NetworkConfig;
use crate::error::{Error, Result};
use std::time::Duration;
use types::PartyId;

fn bad(reason: String) -> Error {
    Error::Committer { reason }
}

impl NetworkConfig {
    /// The committing side, when the network has one.
    pub fn committers(&self) -> Result<&Committers> {
        self.committers.as_ref().ok_or_else(|| {
            bad("the network config has no `committer` section (generate the network again)".into())
        })
    }

    /// Party `p`'s committer nodes.
    pub fn committer_party(&self, p: PartyId) -> Result<&CommitterParty> {
        self.committers()?
            .parties
            .iter()
            .find(|c| c.party == p)
            .ok_or_else(|| bad(format!("party {p} has no committer nodes in the network config")))
    }

    /// What party `p`'s sidecar reads blocks from: its own assembler first, then the
    /// other parties' in party order after it (wrapping around; parties in force only).
    pub fn orderer_source(&self, p: PartyId) -> Result<sidecar::orderer::OrdererConfig> {
        self.party(p)?;
        let ids = self.party_list();
        let at = ids.iter().position(|q| *q == p).unwrap_or(0);
        let mut assemblers = Vec::new();
        for q in ids[at..].iter().chain(&ids[..at]) {
            if let Some(a) = &self.party(*q)?.assembler {
                assemblers.push(a.uri());
            }
        }
        if assemblers.is_empty() {
            return Err(bad("no party has an assembler".into()));
        }
        Ok(sidecar::orderer::OrdererConfig {
            assemblers,
            keys: self.cluster_keys(),
            config_rules: Some(std::sync::Arc::new(crate::update::NetworkRules::new())),
            sets_file: None,
            retry: Duration::from_millis(500),
            buffer: std::num::NonZeroUsize::new(8).unwrap_or(std::num::NonZeroUsize::MIN),
            stall: Duration::from_secs(3),
        })
    }
}
