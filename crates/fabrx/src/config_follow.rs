//! The config in force as the consenters answer it ([`netconfig::in_force`]): `fabrx
//! network update current` writes it; a router, which reads no decisions, follows its
//! TLS section and whether its party is still in force by asking every few seconds
//! (ADR 0019).

use std::time::Duration;

use arma::ConfigRules as _;
use netconfig::NetworkConfig;
use types::PartyId;

/// How often a router asks the consenters for the config in force.
pub const ROUTER_POLL: Duration = Duration::from_secs(2);

pub use netconfig::in_force::in_force;

/// Follows the config in force for a process that reads no decisions (a router): asks
/// the consenters at once and every [`ROUTER_POLL`]; with `tls`, puts each new config they
/// answer in force for this process (`ConfigRules::in_force`: its TLS section). Ends,
/// with the party, once a config in force removed `party` (docs/reconfiguration.md
/// "Removing a party"): the router then stops. The channels to the consenters and the
/// last answer are kept between the questions (`netconfig::in_force::Consenters`): a new
/// connection per question cost each router two mutual-TLS handshakes every
/// [`ROUTER_POLL`] (and the consenters asked as many), and parsing the same answer again
/// checked every public key of the config.
pub fn spawn_follower(config: NetworkConfig, party: PartyId, tls: bool) -> tokio::task::JoinHandle<PartyId> {
    tokio::spawn(async move {
        let rules = netconfig::update::NetworkRules::new();
        let consenters = netconfig::in_force::Consenters::new(config);
        let mut last: Option<Vec<u8>> = None;
        let mut failing = false;
        loop {
            match consenters.in_force().await {
                Ok((bytes, _)) => {
                    failing = false;
                    if last.as_ref() != Some(&bytes) {
                        if rules.view(&bytes).is_ok_and(|v| v.has_left(party)) {
                            tracing::info!(party, "a config in force removed this router's party: it stops");
                            return party;
                        }
                        if tls {
                            rules.in_force(&bytes);
                        }
                        last = Some(bytes);
                    }
                }
                // Logged once per outage: consenters restart, and a router starts before them.
                Err(reason) if !failing => {
                    failing = true;
                    tracing::warn!(%reason, "the config in force is not known: this router follows it when the consenters answer");
                }
                Err(_) => {}
            }
            tokio::time::sleep(ROUTER_POLL).await;
        }
    })
}

/// What a router does with the config updates its clients submit
/// (`Router.SubmitConfigUpdate`): hands each to the consenters, its own party's first,
/// then the others in party order, and answers with the first that orders it. A refusal
/// (`INVALID_ARGUMENT`, `PERMISSION_DENIED`: the update is not valid against the config
/// in force) is the same at every correct consenter, so the router stops at f + 1 of
/// them (one is correct) and answers with their reasons; failures (down, timed out) move
/// on to the next consenter.
pub struct ConsenterConfigUpdates {
    /// `(party, consenter endpoint)`, in the order they are asked.
    consenters: Vec<(PartyId, String)>,
    /// Refusals that end a submission: f + 1.
    refusals: usize,
}

/// How long a router waits for one consenter to order an update: longer than a
/// consenter waits for the decision (30 s), so that the consenter's own answer — the
/// decision, or that it is not decided yet — comes back rather than the router's timeout.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(40);

impl ConsenterConfigUpdates {
    /// The consenters of `config`, party `own`'s first.
    pub fn new(config: &NetworkConfig, own: PartyId) -> ConsenterConfigUpdates {
        let mut consenters: Vec<(PartyId, String)> = config
            .parties()
            .iter()
            .map(|p| (p.id, p.consenter.uri()))
            .collect();
        consenters.sort_by_key(|(p, _)| (*p != own, *p));
        let f = config.n().saturating_sub(1) / 3;
        ConsenterConfigUpdates {
            consenters,
            refusals: f as usize + 1,
        }
    }
}

#[tonic::async_trait]
impl router::config_updates::ConfigUpdates for ConsenterConfigUpdates {
    async fn submit(&self, request: Vec<u8>) -> Result<wire::pb::BftSubmitResponse, tonic::Status> {
        let mut reasons = Vec::new();
        let mut last = tonic::Code::Unavailable;
        let mut refused = 0;
        for (party, endpoint) in &self.consenters {
            let answer = async {
                let endpoint = wire::server::client_endpoint(endpoint.clone())
                    .map_err(|e| tonic::Status::unavailable(format!("{e:#}")))?
                    .connect_timeout(Duration::from_secs(3));
                let channel = wire::server::connect(&endpoint)
                    .await
                    .map_err(|e| tonic::Status::unavailable(format!("{e:#}")))?;
                wire::pb::bft_consensus_client::BftConsensusClient::new(channel)
                    .max_encoding_message_size(consenter::transport::MAX_MESSAGE_BYTES)
                    .submit(wire::pb::BftSubmitRequest {
                        request: request.clone(),
                    })
                    .await
                    .map(tonic::Response::into_inner)
            };
            match tokio::time::timeout(UPDATE_TIMEOUT, answer).await {
                Ok(Ok(answer)) if answer.accepted => return Ok(answer),
                Ok(Ok(_)) => reasons.push(format!("party {party}'s consenter answered without accepting")),
                Ok(Err(status)) => {
                    last = status.code();
                    reasons.push(format!("party {party}'s consenter: {}", status.message()));
                    if matches!(last, tonic::Code::InvalidArgument | tonic::Code::PermissionDenied) {
                        refused += 1;
                        if refused >= self.refusals {
                            break;
                        }
                    }
                }
                Err(_) => reasons.push(format!(
                    "party {party}'s consenter: no answer within {} s",
                    UPDATE_TIMEOUT.as_secs()
                )),
            }
        }
        Err(tonic::Status::new(last, reasons.join("; ")))
    }
}
