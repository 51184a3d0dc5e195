//! The config in force as the consenters answer it (`BftConsensus.Status` with
//! `with_config`): the bytes f + 1 of them answer alike, so at least one correct
//! consenter has it in force. What a process that reads no decisions (a router, a load
//! client, `fabrx blocks`, `fabrx network update current`) knows of the network's
//! config updates, e.g. a party that joined (docs/reconfiguration.md).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use types::PartyId;

use crate::config::NetworkConfig;

/// The config in force as the consenter at `endpoint` answers `Status`, over a new
/// connection.
pub async fn config_of(endpoint: &str) -> Result<Vec<u8>, String> {
    let endpoint = consenter_endpoint(endpoint)?;
    let channel = wire::server::connect(&endpoint)
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    status_config(channel).await
}

fn consenter_endpoint(endpoint: &str) -> Result<tonic::transport::Endpoint, String> {
    Ok(wire::server::client_endpoint(endpoint.to_string())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(3)))
}

async fn status_config(channel: tonic::transport::Channel) -> Result<Vec<u8>, String> {
    let status = tokio::time::timeout(
        Duration::from_secs(10),
        wire::pb::bft_consensus_client::BftConsensusClient::new(channel)
            .max_decoding_message_size(consenter::transport::MAX_MESSAGE_BYTES)
            .status(wire::pb::BftStatusRequest { with_config: true }),
    )
    .await
    .map_err(|_| "no answer within 10 s".to_string())?
    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
    Ok(status.into_inner().config)
}

/// What a process that asks for the config in force again and again (a router following
/// the TLS section) keeps from one [`Consenters::in_force`] to the next:
///
/// * its channels to the consenters, by endpoint: one HTTP/2 connection per consenter
///   instead of a new TCP connection and a mutual-TLS handshake per consenter per
///   question, on both sides. A channel reconnects by itself after a consenter restarts;
///   each new connection presents the identity in force when it is made
///   (`wire::tls::Connector`), as a fresh one would.
/// * the bytes last answered by f + 1 of its own config's consenters that name those
///   same consenters: the same bytes again are not parsed again (parsing a config checks
///   every public key in it, BLS keys included: most of an idle router's CPU).
#[derive(Debug)]
pub struct Consenters {
    config: NetworkConfig,
    channels: Mutex<HashMap<String, tonic::transport::Channel>>,
    settled: Mutex<Option<Vec<u8>>>,
}

impl Consenters {
    /// Asks `config`'s consenters (and the sets their answers name); no channel open yet.
    pub fn new(config: NetworkConfig) -> Consenters {
        Consenters {
            config,
            channels: Mutex::new(HashMap::new()),
            settled: Mutex::new(None),
        }
    }

    /// [`in_force`] of the config this was made for, over the kept channels.
    pub async fn in_force(&self) -> Result<(Vec<u8>, Vec<PartyId>), String> {
        in_force_via(&self.config, Some(self)).await
    }

    /// The channel to `endpoint`, opened (lazily: connected at its first call) when new.
    fn channel(&self, endpoint: &str) -> Result<tonic::transport::Channel, String> {
        let mut open = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = open.get(endpoint) {
            return Ok(c.clone());
        }
        let channel = wire::server::connect_lazy(&consenter_endpoint(endpoint)?);
        open.insert(endpoint.to_string(), channel.clone());
        Ok(channel)
    }

    /// The channels kept.
    pub fn open(&self) -> usize {
        self.channels.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn is_settled(&self, bytes: &[u8]) -> bool {
        self.settled.lock().unwrap_or_else(|e| e.into_inner()).as_deref() == Some(bytes)
    }

    fn settle(&self, bytes: &[u8]) {
        *self.settled.lock().unwrap_or_else(|e| e.into_inner()) = Some(bytes.to_vec());
    }
}

/// The config in force as the consenter at `endpoint` answers, over `via`'s kept channel
/// or a new connection.
async fn ask(endpoint: &str, via: Option<&Consenters>) -> Result<Vec<u8>, String> {
    match via {
        Some(kept) => status_config(kept.channel(endpoint)?).await,
        None => config_of(endpoint).await,
    }
}

/// Sets of consenters [`in_force`] asks in a row before it gives up on a config that
/// keeps naming another set.
const MAX_HOPS: usize = 8;

/// The config in force: the bytes f + 1 consenters answer alike, and the parties that
/// answered them. The consenters of `config` are asked first; when the config they
/// answer names another consenter set (parties joined since), that set is asked in turn,
/// with its own f, until a set answers a config naming itself — so a config with more
/// parties than the genesis one is trusted on f + 1 of *its* consenters, not of the
/// genesis ones.
pub async fn in_force(config: &NetworkConfig) -> Result<(Vec<u8>, Vec<PartyId>), String> {
    in_force_via(config, None).await
}

/// [`in_force`], read: the config in force as f + 1 consenters answer it, and the parties
/// that answered.
pub async fn in_force_config(config: &NetworkConfig) -> Result<(NetworkConfig, Vec<PartyId>), String> {
    let (bytes, parties) = in_force(config).await?;
    let text =
        std::str::from_utf8(&bytes).map_err(|e| format!("the config in force is not UTF-8 text: {e}"))?;
    let read =
        NetworkConfig::from_json(text).map_err(|e| format!("the config in force does not read: {e}"))?;
    Ok((read, parties))
}

async fn in_force_via(
    config: &NetworkConfig,
    via: Option<&Consenters>,
) -> Result<(Vec<u8>, Vec<PartyId>), String> {
    let mut asked = config.clone();
    for hop in 0..MAX_HOPS {
        let (bytes, parties) = answered_alike(&asked, via).await?;
        // The first set's answer, the same as last time: it named that set then.
        if hop == 0 && via.is_some_and(|v| v.is_settled(&bytes)) {
            return Ok((bytes, parties));
        }
        let Some(answered) = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| NetworkConfig::from_json(t).ok())
        else {
            // Not a network config: the caller's parser says why.
            return Ok((bytes, parties));
        };
        if answered.consenter_peers() == asked.consenter_peers() {
            if let (0, Some(v)) = (hop, via) {
                v.settle(&bytes);
            }
            return Ok((bytes, parties));
        }
        asked = answered;
    }
    Err(format!(
        "the consenters answered {MAX_HOPS} configs in a row that name other consenter sets"
    ))
}

/// The config bytes f+1 of `config`'s consenters answer alike and the parties that
/// answered them, or why there are none (the failures).
async fn answered_alike(
    config: &NetworkConfig,
    via: Option<&Consenters>,
) -> Result<(Vec<u8>, Vec<PartyId>), String> {
    let mut answers: Vec<(Vec<u8>, Vec<PartyId>)> = Vec::new();
    let mut failures = Vec::new();
    let f = config.n().saturating_sub(1) / 3;
    for p in config.parties() {
        match ask(&p.consenter.uri(), via).await {
            Ok(bytes) if bytes.is_empty() => {
                failures.push(format!("party {}: no config in its answer", p.id))
            }
            Ok(bytes) => match answers.iter_mut().find(|(b, _)| *b == bytes) {
                Some((_, parties)) => parties.push(p.id),
                None => answers.push((bytes, vec![p.id])),
            },
            Err(e) => failures.push(format!("party {}: {e}", p.id)),
        }
        if let Some(found) = answers.iter().find(|(_, parties)| parties.len() > f as usize) {
            return Ok(found.clone());
        }
    }
    Err(format!(
        "no config in force is answered by {} consenters alike ({} answers differ; {})",
        f + 1,
        answers.len(),
        failures.join("; ")
    ))
}
