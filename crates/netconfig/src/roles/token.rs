//! What the token application's roles read from the network config: the endorsers, the
//! query services and the namespace's policy.

use crate::config::NetworkConfig;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::token::{EndorserNode, TokenApp, endorser_key_path};
use std::path::Path;
use types::PartyId;

fn bad(reason: String) -> Error {
    Error::Token { reason }
}

impl NetworkConfig {
    /// The token application, when the network has one.
    pub fn token(&self) -> Result<&TokenApp> {
        self.token.as_ref().ok_or_else(|| {
            bad("the network config has no `token` section (generate the network again)".into())
        })
    }

    /// The namespace's policy: its group key.
    pub fn token_policy(&self) -> Result<types::NamespacePolicy> {
        Ok(policy::policy_of(self.token()?.public.group_public_key()))
    }

    /// Endorser `index`.
    pub fn endorser(&self, index: u32) -> Result<&EndorserNode> {
        self.token()?
            .endorsers
            .iter()
            .find(|e| e.index == index)
            .ok_or_else(|| bad(format!("no endorser {index} in the network config")))
    }

    /// Party `p`'s query service.
    pub fn query_endpoint(&self, p: PartyId) -> Result<&Endpoint> {
        self.token()?
            .query
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, e)| e)
            .ok_or_else(|| bad(format!("party {p} has no query service in the network config")))
    }

    /// What endorser `index` needs to run: its share file under the network directory
    /// `dir`, the key set, the namespace and issuers, and the query services it reads
    /// through (its own party's first, then every other party's in party order).
    pub fn endorser_node_config(
        &self,
        dir: &Path,
        index: u32,
        listen: Option<std::net::SocketAddr>,
    ) -> Result<endorser::node::Config> {
        let app = self.token()?;
        let me = self.endorser(index)?;
        Ok(endorser::node::Config {
            listen: listen.unwrap_or_else(|| me.endpoint.listen_addr()),
            share_key: endorser_key_path(dir, index),
            share_index: index,
            public: app.public.clone(),
            namespace: app.namespace.clone(),
            ns_version: app.ns_version,
            policy: token::Policy {
                issuers: app.issuers.clone(),
            },
            // Its own party's query service first, then the others: every row is checked
            // against its key, and an input one service does not prove is asked of the next.
            query: app
                .query
                .iter()
                .filter(|(p, _)| *p == me.party)
                .chain(app.query.iter().filter(|(p, _)| *p != me.party))
                .map(|(_, e)| e.uri())
                .collect(),
            service: endorser::service::ServiceConfig::default(),
        })
    }
}
