//! The network config's update rules as the consenters apply them
//! ([`arma::ConfigRules`]): the consenters' state machine hands them config bytes and
//! update bytes and gets back the next config, or why not, exactly as [`super::validate`]
//! decides offline (`fabrx network update verify`).
//!
//! A config's bytes are its canonical JSON text ([`super::canonical_json`]); an update's
//! bytes are its file's JSON text ([`super::ConfigUpdate::to_json`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};

use arma::{ConfigRules, ConfigView};

use super::{ConfigUpdate, canonical_json, validate};
use crate::config::NetworkConfig;

/// The rules of a fabrx network config: [`super::validate`] for an update, the parties,
/// shards and keys of a config for the ordering. Keeps the last configs it parsed (by
/// hash): the config in force and an update's next config are read again and again.
#[derive(Debug, Default)]
pub struct NetworkRules {
    parsed: Mutex<Vec<([u8; 32], Arc<NetworkConfig>)>>,
}

/// Configs [`NetworkRules`] keeps parsed.
const PARSED: usize = 2;

impl NetworkRules {
    /// Rules with nothing parsed yet.
    pub fn new() -> NetworkRules {
        NetworkRules::default()
    }

    /// `bytes` parsed, from the kept ones when they are among them.
    fn config(&self, bytes: &[u8]) -> Result<Arc<NetworkConfig>, String> {
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        let mut parsed = self
            .parsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, c)) = parsed.iter().find(|(d, _)| *d == digest) {
            return Ok(Arc::clone(c));
        }
        let config = Arc::new(parse_config(bytes)?);
        if parsed.len() >= PARSED {
            parsed.remove(0);
        }
        parsed.push((digest, Arc::clone(&config)));
        Ok(config)
    }
}

/// The canonical bytes of `config` (what the consenters hold as the config in force).
pub fn config_bytes(config: &NetworkConfig) -> Vec<u8> {
    canonical_json(config.file()).into_bytes()
}

fn parse_config(bytes: &[u8]) -> Result<NetworkConfig, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the config is not UTF-8 text".to_string())?;
    NetworkConfig::from_json(text).map_err(|e| format!("the config is invalid: {e}"))
}

fn parse_update(bytes: &[u8]) -> Result<ConfigUpdate, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the update is not UTF-8 text".to_string())?;
    ConfigUpdate::from_json(text).map_err(|e| e.to_string())
}

impl ConfigRules for NetworkRules {
    fn next(&self, current: &[u8], update: &[u8]) -> Result<Vec<u8>, String> {
        let current = self.config(current)?;
        let update = parse_update(update)?;
        validate(&current, &update).map_err(|e| e.to_string())?;
        Ok(update.config.into_bytes())
    }

    fn carried(&self, update: &[u8]) -> Result<Vec<u8>, String> {
        let update = parse_update(update)?;
        update.next_file().map_err(|e| e.to_string())?;
        Ok(update.config.into_bytes())
    }

    /// A config in force for this process: its `tls` section is followed
    /// ([`crate::tls::follow::follow`], ADR 0019).
    fn in_force(&self, config: &[u8]) {
        match self.config(config) {
            Ok(net) => crate::tls::follow::follow(&net),
            Err(e) => {
                tracing::error!(error = %e, "the config in force does not parse: its TLS section is not followed")
            }
        }
    }

    fn view(&self, config: &[u8]) -> Result<ConfigView, String> {
        let net = self.config(config)?;
        let mut batcher_keys = BTreeMap::new();
        let mut batcher_endpoints = BTreeMap::new();
        for p in net.parties() {
            for b in &p.batchers {
                batcher_keys.insert((p.id, b.shard), b.public_key.clone());
                batcher_endpoints.insert((p.id, b.shard), b.endpoint.to_string());
            }
        }
        Ok(ConfigView {
            sequence: net.sequence(),
            parties: net.party_ids(),
            left_parties: net.left_parties().to_vec(),
            shards: net.shards().get(),
            batcher_keys,
            consenters: net.consenters_by_replica(),
            consenter_endpoints: net.consenter_endpoints_by_replica(),
            batcher_endpoints,
            max_seqs_ahead: net.file().consensus.max_seqs_ahead,
            batching: arma::BatchingView {
                max_batch_requests: net.file().batching.max_batch_requests,
                max_batch_bytes: net.file().batching.max_batch_bytes,
                batch_timeout_ms: net.file().batching.batch_timeout_ms,
                forward_timeout_ms: net.file().batching.forward_timeout_ms,
                complain_timeout_ms: net.file().batching.complain_timeout_ms,
            },
            engine: Some(net.engine_params()),
        })
    }
}
