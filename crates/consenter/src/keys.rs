//! The consenter set's keys and the two uses of them: the engine's vote and
//! view-change signatures (through `bft::Signer`/`Verifier`) and the per-message
//! envelope signatures of the transport. Both go through crates/crypto's
//! purpose-named functions, so a signature made for one use never verifies for the
//! other: commit votes (the decision certificate) are signed as
//! `DecisionCertificate`, every other engine signature and every envelope as
//! `ConsensusMessage` (the engine's own `fabrx/bft/v1/…` tags and the envelope tag
//! below keep those apart too).

use crypto::{PublicKey, Scheme, SigningKey};
use wire::pb;

use crate::{Error, Result};

/// Domain tag at the start of an envelope's signed bytes.
pub const ENVELOPE_TAG: &[u8] = types::tags::consenter::ENVELOPE;

pub use arma::{ClusterKeys, DEFAULT_CHAIN};

/// Where a replica's keys come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKeys {
    /// Production: this replica's key file (`fabrx keygen`) and a peer-keys file with one
    /// public key per line, `<scheme> <hex>`, in replica order (blank lines and `#`
    /// comments ignored). The key file's public key must be this replica's line.
    Files {
        /// This replica's key file.
        key: std::path::PathBuf,
        /// Every replica's public key, in replica order.
        peers: std::path::PathBuf,
    },
    /// A replica joining a running network (docs/reconfiguration.md "Adding a party"):
    /// its key file, the genesis set's public keys (they make the cluster id every
    /// envelope carries) and the keys of the replicas past them up to and including this
    /// one (replica ids `genesis.len()..`), from the config that adds it.
    Joining {
        /// This replica's key file.
        key: std::path::PathBuf,
        /// The genesis consenter set's public keys, in replica order.
        genesis: Vec<PublicKey>,
        /// The keys of the replicas after the genesis set, this one last.
        joined: Vec<PublicKey>,
    },
    /// Tests and demos: Ed25519 keys derived from seeds `"{prefix}{i}"` (anyone who knows
    /// the prefix has every key).
    Seeded {
        /// The seed prefix.
        prefix: String,
    },
}

impl NodeKeys {
    /// This replica's signing key and the cluster's public keys.
    pub fn load(&self, me: bft::ReplicaId, n: u32) -> Result<(SigningKey, ClusterKeys)> {
        match self {
            NodeKeys::Seeded { prefix } => Ok(keys_from_seed_prefix(prefix, me, n)),
            NodeKeys::Joining { key, genesis, joined } => {
                let config = |reason: String| Error::Config { reason };
                let own = crypto::read_key_file(key).map_err(|e| config(e.to_string()))?;
                let slot = genesis.len().saturating_add(joined.len()).saturating_sub(1);
                if joined.is_empty() || me as usize != slot {
                    return Err(config(format!(
                        "a joining replica is the last of the set that adds it: replica {me}, but that \
                         set has {} replicas",
                        slot.saturating_add(1)
                    )));
                }
                if joined.last() != Some(&own.public_key()) {
                    return Err(config(format!(
                        "the key file is not the key the joining config names for replica {me}"
                    )));
                }
                Ok((own, ClusterKeys::new(genesis.clone()).joined(joined)))
            }
            NodeKeys::Files { key, peers } => {
                let config = |reason: String| Error::Config { reason };
                let own = crypto::read_key_file(key).map_err(|e| config(e.to_string()))?;
                let text = std::fs::read_to_string(peers)
                    .map_err(|e| config(format!("peer keys {}: {e}", peers.display())))?;
                let public = parse_peer_keys(&text)
                    .map_err(|e| config(format!("peer keys {}: {e}", peers.display())))?;
                if public.len() != n as usize {
                    return Err(config(format!("{} peer keys for {n} replicas", public.len())));
                }
                if public.get(me as usize) != Some(&own.public_key()) {
                    return Err(config(format!(
                        "the key file is not replica {me}'s key in the peer list"
                    )));
                }
                Ok((own, ClusterKeys::new(public)))
            }
        }
    }
}

/// Parses a peer-keys file: `<scheme> <hex>` per line, in replica order.
pub fn parse_peer_keys(text: &str) -> std::result::Result<Vec<PublicKey>, String> {
    text.lines()
        .map(str::trim)
        .enumerate()
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            let (scheme, hex) = l
                .split_once(' ')
                .ok_or_else(|| format!("line {}: expected \"<scheme> <hex>\"", i + 1))?;
            let scheme: Scheme = scheme.parse().map_err(|e| format!("line {}: {e}", i + 1))?;
            PublicKey::from_hex(scheme, hex.trim()).map_err(|e| format!("line {}: {e}", i + 1))
        })
        .collect()
}

/// Ed25519 keys derived from seeds `"{prefix}{i}"` for `i in 0..n` (tests, local
/// clusters): the secret of replica `me` and the public keys of all.
pub fn keys_from_seed_prefix(prefix: &str, me: bft::ReplicaId, n: u32) -> (SigningKey, ClusterKeys) {
    let secrets: Vec<SigningKey> = (0..n)
        .map(|i| crypto::derive_signing_key(Scheme::Ed25519, &format!("{prefix}{i}")))
        .collect();
    let public = secrets.iter().map(SigningKey::public_key).collect();
    (secrets[me as usize].clone(), ClusterKeys::new(public))
}

fn is_commit_vote(msg: &[u8]) -> bool {
    msg.starts_with(bft::tags::COMMIT)
}

/// The engine's signer over a crates/crypto key.
pub struct EngineSigner {
    key: SigningKey,
}

impl EngineSigner {
    /// Signs with `key`.
    pub fn new(key: SigningKey) -> EngineSigner {
        EngineSigner { key }
    }
}

impl bft::Signer for EngineSigner {
    fn sign(&self, msg: &[u8]) -> bft::Signature {
        let sig = if is_commit_vote(msg) {
            crypto::sign_decision_certificate(&self.key, msg)
        } else {
            crypto::sign_consensus_message(&self.key, msg)
        };
        bft::Signature(sig.into_bytes())
    }
}

/// The engine's verifier over the cluster's public keys.
pub struct EngineVerifier {
    keys: ClusterKeys,
}

impl EngineVerifier {
    /// Verifies against `keys`.
    pub fn new(keys: ClusterKeys) -> EngineVerifier {
        EngineVerifier { keys }
    }
}

impl bft::Verifier for EngineVerifier {
    fn verify(&self, replica: bft::ReplicaId, msg: &[u8], sig: &bft::Signature) -> bool {
        let Some(key) = self.keys.key(replica) else {
            return false;
        };
        let sig = crypto::Signature::from_bytes(sig.0.clone());
        if is_commit_vote(msg) {
            crypto::verify_decision_certificate(key, msg, &sig).is_ok()
        } else {
            crypto::verify_consensus_message(key, msg, &sig).is_ok()
        }
    }
}

/// Where an envelope stands in its sender's stream to one receiver: the sender's boot
/// epoch (strictly greater after each restart, see [`crate::epoch`]) and a counter
/// of envelopes to that receiver in the epoch. Ordered lexicographically.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct EnvelopeSeq {
    /// The sender's boot epoch (≥ 1 for a running node).
    pub epoch: u64,
    /// Envelopes sent to this receiver before this one in the epoch.
    pub counter: u64,
}

/// The bytes an envelope's signature covers:
/// `ENVELOPE_TAG ‖ cluster ‖ from (u32 LE) ‖ to (u32 LE) ‖ epoch (u64 LE) ‖ counter (u64 LE) ‖ payload`.
pub fn envelope_bytes(cluster: &[u8], from: u32, to: u32, seq: EnvelopeSeq, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENVELOPE_TAG.len() + cluster.len() + 24 + payload.len());
    out.extend_from_slice(ENVELOPE_TAG);
    out.extend_from_slice(cluster);
    out.extend_from_slice(&from.to_le_bytes());
    out.extend_from_slice(&to.to_le_bytes());
    out.extend_from_slice(&seq.epoch.to_le_bytes());
    out.extend_from_slice(&seq.counter.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Wraps an encoded message for `to` at position `seq` of this sender's stream and
/// signs it.
pub fn seal_at(
    key: &SigningKey,
    keys: &ClusterKeys,
    (from, to): (u32, u32),
    seq: EnvelopeSeq,
    payload: Vec<u8>,
) -> pb::BftEnvelope {
    let mut env = frame_at(keys, (from, to), seq, payload);
    let bytes = envelope_bytes(&env.cluster, from, to, seq, &env.payload);
    env.signature = crypto::sign_consensus_message(key, &bytes).into_bytes();
    env
}

/// Wraps an encoded message for `to` at position `seq` of this sender's stream without
/// a signature, for a link whose mutual TLS already proves the sender to the receiver
/// (ADR 0017): the receiver checks the TLS caller instead ([`Link::Tls`]).
pub fn frame_at(
    keys: &ClusterKeys,
    (from, to): (u32, u32),
    seq: EnvelopeSeq,
    payload: Vec<u8>,
) -> pb::BftEnvelope {
    pb::BftEnvelope {
        cluster: keys.cluster_id().to_vec(),
        from,
        to,
        payload,
        signature: Vec::new(),
        epoch: seq.epoch,
        counter: seq.counter,
    }
}

/// How the stream an envelope arrived on proves who sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// No TLS: the envelope's own signature is the only proof of its sender.
    Plain,
    /// Mutual TLS, and the caller's certificate is consenter `replica`'s: the channel
    /// proves the sender, so an envelope must name `replica` as its sender and its
    /// signature (usually empty) is not checked.
    Tls {
        /// The replica the caller's certificate belongs to.
        replica: bft::ReplicaId,
    },
}

/// A diagnostic envelope at position (0, 0), which no receiver accepts (epochs of
/// running nodes start at 1): for tests of the rejection path. Nodes use [`seal_at`].
pub fn seal(key: &SigningKey, keys: &ClusterKeys, from: u32, to: u32, payload: Vec<u8>) -> pb::BftEnvelope {
    seal_at(key, keys, (from, to), EnvelopeSeq::default(), payload)
}

/// The last envelope position accepted from each sender: a receiver accepts an
/// envelope only above it, so a captured envelope is accepted at most once, and only
/// while nothing newer from its sender arrived. Memory: one entry per replica.
#[derive(Debug)]
pub struct ReplayGuard {
    last: std::sync::Mutex<Vec<EnvelopeSeq>>,
}

impl ReplayGuard {
    /// A guard for `n` senders that has accepted nothing yet.
    pub fn new(n: u32) -> ReplayGuard {
        ReplayGuard {
            last: std::sync::Mutex::new(vec![EnvelopeSeq::default(); n as usize]),
        }
    }

    /// Records `seq` from `from` if it is above the last accepted one; false if not
    /// (a replay, a reordered older envelope or a sender not among the `known` replicas).
    /// The guard grows to the `known` replicas (a set that a party joined).
    pub fn admit(&self, from: u32, seq: EnvelopeSeq, known: u32) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if from < known && last.len() <= from as usize {
            last.resize(from as usize + 1, EnvelopeSeq::default());
        }
        match last.get_mut(from as usize) {
            Some(l) if seq > *l => {
                *l = seq;
                true
            }
            _ => false,
        }
    }
}

/// Checks an envelope addressed to `me` (cluster, addressee, known sender other than
/// `me`, its sender's proof — the signature on a [`Link::Plain`] stream, the TLS
/// caller on a [`Link::Tls`] one — then its position against `guard`) and decodes its
/// message. Verification comes before decoding.
pub fn open(
    keys: &ClusterKeys,
    guard: &ReplayGuard,
    me: u32,
    link: Link,
    env: pb::BftEnvelope,
) -> Result<(bft::ReplicaId, bft::Message)> {
    let reject = |reason: &'static str| Error::Rejected {
        from: env.from,
        reason,
    };
    if env.cluster != keys.cluster_id() {
        return Err(reject("another cluster"));
    }
    if env.to != me {
        return Err(reject("addressed to another replica"));
    }
    if env.from == me {
        return Err(reject("claims to come from the receiver"));
    }
    let key = keys.key(env.from).ok_or(reject("unknown sender"))?;
    let seq = EnvelopeSeq {
        epoch: env.epoch,
        counter: env.counter,
    };
    match link {
        Link::Tls { replica } if replica == env.from => {}
        Link::Tls { .. } => return Err(reject("names a sender other than its TLS caller")),
        Link::Plain => {
            let bytes = envelope_bytes(&env.cluster, env.from, env.to, seq, &env.payload);
            let sig = crypto::Signature::from_bytes(env.signature.clone());
            crypto::verify_consensus_message(key, &bytes, &sig).map_err(|_| reject("invalid signature"))?;
        }
    }
    if !guard.admit(env.from, seq, keys.n()) {
        return Err(reject("replayed or stale envelope"));
    }
    let msg = <pb::BftMessage as prost::Message>::decode(env.payload.as_slice())
        .map_err(|_| reject("undecodable payload"))?;
    Ok((env.from, crate::codec::message_from_pb(msg)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bft::{Signer as _, Verifier as _};

    /// A heartbeat and its encoded `BftMessage`, the payload of an envelope.
    fn heartbeat(view: u64, last_decided: u64) -> (bft::Message, Vec<u8>) {
        let msg = bft::Message::Heartbeat {
            instance: bft::InstanceId(0),
            view,
            last_decided,
        };
        let payload = prost::Message::encode_to_vec(&crate::codec::message_to_pb(&msg));
        (msg, payload)
    }

    #[test]
    fn envelopes_verify_only_for_their_sender_addressee_and_bytes() {
        let (k0, keys) = keys_from_seed_prefix("t-", 0, 4);
        let (msg, payload) = heartbeat(3, 9);
        let at = |counter| EnvelopeSeq { epoch: 5, counter };
        let env = seal_at(&k0, &keys, (0, 2), at(1), payload);
        let guard = || ReplayGuard::new(4);
        assert_eq!(
            open(&keys, &guard(), 2, Link::Plain, env.clone()).expect("valid"),
            (0, msg)
        );
        // wrong addressee
        assert!(open(&keys, &guard(), 1, Link::Plain, env.clone()).is_err());
        // claims another sender
        let mut forged = env.clone();
        forged.from = 1;
        assert!(matches!(
            open(&keys, &guard(), 2, Link::Plain, forged),
            Err(Error::Rejected {
                reason: "invalid signature",
                ..
            })
        ));
        // tampered payload
        let mut tampered = env.clone();
        tampered.payload[0] ^= 1;
        assert!(open(&keys, &guard(), 2, Link::Plain, tampered).is_err());
        // a position that is not the signed one
        let mut moved = env.clone();
        moved.counter += 1;
        assert!(open(&keys, &guard(), 2, Link::Plain, moved).is_err());
        // another cluster
        let (_, other) = keys_from_seed_prefix("u-", 0, 4);
        assert!(open(&other, &guard(), 2, Link::Plain, env.clone()).is_err());
        // the same keys on another chain
        assert!(open(&keys.with_chain("other-chain"), &guard(), 2, Link::Plain, env).is_err());
    }

    #[test]
    fn on_a_tls_link_the_caller_not_a_signature_proves_the_sender() {
        let (_, keys) = keys_from_seed_prefix("t-", 0, 4);
        let (msg, payload) = heartbeat(1, 2);
        let at = |counter| EnvelopeSeq { epoch: 3, counter };
        let framed = frame_at(&keys, (0, 2), at(1), payload.clone());
        assert!(framed.signature.is_empty());
        let tls = |replica| Link::Tls { replica };
        assert_eq!(
            open(&keys, &ReplayGuard::new(4), 2, tls(0), framed.clone()).expect("caller 0 sent it"),
            (0, msg)
        );
        // Unsigned on a plain stream: refused.
        assert!(matches!(
            open(&keys, &ReplayGuard::new(4), 2, Link::Plain, framed.clone()),
            Err(Error::Rejected {
                reason: "invalid signature",
                ..
            })
        ));
        // A caller that names another consenter as the sender: refused.
        assert!(matches!(
            open(&keys, &ReplayGuard::new(4), 2, tls(1), framed.clone()),
            Err(Error::Rejected {
                reason: "names a sender other than its TLS caller",
                ..
            })
        ));
        // Addressee, cluster and replay checks still hold on a TLS link.
        assert!(open(&keys, &ReplayGuard::new(4), 1, tls(0), framed.clone()).is_err());
        let (_, other) = keys_from_seed_prefix("u-", 0, 4);
        assert!(open(&other, &ReplayGuard::new(4), 2, tls(0), framed.clone()).is_err());
        let guard = ReplayGuard::new(4);
        assert!(open(&keys, &guard, 2, tls(0), framed.clone()).is_ok());
        assert!(open(&keys, &guard, 2, tls(0), framed).is_err());
        assert!(open(&keys, &guard, 2, tls(0), frame_at(&keys, (0, 2), at(2), payload)).is_ok());
    }

    #[test]
    fn a_captured_envelope_is_accepted_once() {
        let (k0, keys) = keys_from_seed_prefix("t-", 0, 4);
        let (_, payload) = heartbeat(0, 0);
        let guard = ReplayGuard::new(4);
        let env = |epoch, counter| {
            seal_at(
                &k0,
                &keys,
                (0, 2),
                EnvelopeSeq { epoch, counter },
                payload.clone(),
            )
        };
        let captured = env(7, 3);
        assert!(open(&keys, &guard, 2, Link::Plain, captured.clone()).is_ok());
        let replays = (0..10_000)
            .filter(|_| open(&keys, &guard, 2, Link::Plain, captured.clone()).is_ok())
            .count();
        assert_eq!(replays, 0, "a replayed envelope was accepted");
        // older positions of the same epoch, and anything of an older epoch, are stale
        assert!(open(&keys, &guard, 2, Link::Plain, env(7, 2)).is_err());
        assert!(open(&keys, &guard, 2, Link::Plain, env(6, 100)).is_err());
        // the sender restarted with a higher epoch: its counter starts again
        assert!(open(&keys, &guard, 2, Link::Plain, env(8, 0)).is_ok());
        assert!(open(&keys, &guard, 2, Link::Plain, env(8, 1)).is_ok());
        // the diagnostic position (0, 0) is never accepted
        assert!(
            open(
                &keys,
                &ReplayGuard::new(4),
                2,
                Link::Plain,
                seal(&k0, &keys, 0, 2, payload.clone())
            )
            .is_err()
        );
    }

    #[test]
    fn commit_votes_and_other_signatures_are_not_interchangeable() {
        let (k1, keys) = keys_from_seed_prefix("t-", 1, 4);
        let signer = EngineSigner::new(k1.clone());
        let verifier = EngineVerifier::new(keys);
        let commit = [bft::tags::COMMIT, b"x"].concat();
        let prepare = [bft::tags::PREPARE, b"x"].concat();
        let s = signer.sign(&commit);
        assert!(verifier.verify(1, &commit, &s));
        assert!(!verifier.verify(0, &commit, &s));
        let p = signer.sign(&prepare);
        assert!(verifier.verify(1, &prepare, &p));
        // A commit vote signed under the wrong purpose does not count.
        let wrong = bft::Signature(crypto::sign_consensus_message(&k1, &commit).into_bytes());
        assert!(!verifier.verify(1, &commit, &wrong));
    }
}

#[cfg(test)]
mod key_file_tests {
    use super::*;

    #[test]
    fn key_files_load_and_mismatches_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut peers = String::from("# replica keys\n");
        for i in 0..4 {
            let key = crypto::derive_signing_key(Scheme::Ed25519, &format!("kf-{i}"));
            crypto::write_key_file(&dir.path().join(format!("{i}.key")), &key).unwrap();
            peers.push_str(&format!("ed25519 {}\n\n", key.public_key().to_hex()));
        }
        let peers_path = dir.path().join("peers.txt");
        std::fs::write(&peers_path, &peers).unwrap();
        let files = |i: u32| NodeKeys::Files {
            key: dir.path().join(format!("{i}.key")),
            peers: peers_path.clone(),
        };
        let (key, cluster) = files(2).load(2, 4).unwrap();
        assert_eq!(cluster.key(2), Some(&key.public_key()));
        assert_eq!(cluster.n(), 4);
        // The same keys as the seeded set with the same seeds: one cluster id.
        let (_, seeded) = NodeKeys::Seeded { prefix: "kf-".into() }.load(0, 4).unwrap();
        assert_eq!(seeded.cluster_id(), cluster.cluster_id());
        // Replica 1's key file claimed by replica 2; a wrong count; a bad line.
        assert!(files(1).load(2, 4).is_err());
        assert!(files(2).load(2, 5).is_err());
        assert!(parse_peer_keys("ed25519 zz").is_err());
        assert!(parse_peer_keys("nonsense").is_err());
    }
}
