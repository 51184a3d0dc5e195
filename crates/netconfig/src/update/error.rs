//! Why a config update is refused: each reason names what is wrong (the sequence, the
//! signer, the field), so that the people who sign an update can act on it.

use types::{PartyId, ShardId};

/// Errors of config updates.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The update file cannot be parsed.
    #[error("parsing the config update: {reason}")]
    Parse {
        /// serde's reason, with line and column.
        reason: String,
    },
    /// The update file's format version is not one this build reads.
    #[error("config update version {version} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// The file's version.
        version: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The update is for another chain.
    #[error("the update is for chain {update:?}, the network is chain {current:?}")]
    WrongChain {
        /// The update's chain.
        update: String,
        /// The network's.
        current: String,
    },
    /// The update replaces a config older than the one in force.
    #[error("stale config sequence {update}, the network is at {current}")]
    StaleSequence {
        /// The sequence the update replaces.
        update: u64,
        /// The sequence in force.
        current: u64,
    },
    /// The update replaces a config the network has not reached.
    #[error(
        "config sequence {update} is ahead of the network, which is at {current}: the updates before it come first"
    )]
    FutureSequence {
        /// The sequence the update replaces.
        update: u64,
        /// The sequence in force.
        current: u64,
    },
    /// The config in force is at the last sequence there is.
    #[error("the network is at config sequence {current}, the last one: it cannot be updated")]
    SequenceOverflow {
        /// The sequence in force.
        current: u64,
    },
    /// Fewer parties have admin keys than the update policy needs: no update can pass.
    #[error(
        "the network at config sequence {sequence} cannot be updated: {admins} of its parties have an admin key and the update policy needs {needed} signatures (a network whose genesis config lacks admin keys cannot gain them: its genesis config is bound into the consenters' chain id; generate a new network with admin keys)"
    )]
    NotUpdatable {
        /// The sequence in force.
        sequence: u64,
        /// Parties with an admin key.
        admins: u32,
        /// K of the update policy.
        needed: u32,
    },
    /// A signature by a party that is not in the network in force.
    #[error("a signature by party {party}, which is not a party of the network (parties {parties:?})")]
    UnknownSigner {
        /// The listed party.
        party: PartyId,
        /// The parties in force.
        parties: Vec<PartyId>,
    },
    /// A signature by a party without an admin key.
    #[error("a signature by party {party}, which has no admin key in the network config")]
    SignerWithoutKey {
        /// The party.
        party: PartyId,
    },
    /// A party listed twice among the signatures.
    #[error("party {party} is listed twice among the signatures: an update lists each signer once")]
    DuplicateSigner {
        /// The party.
        party: PartyId,
    },
    /// A signature that does not verify.
    #[error(
        "the signature of party {party} does not verify with its admin key (it signed another update, the update changed after it signed, or it was made with another key than party {party}'s admin key)"
    )]
    BadSignature {
        /// The party.
        party: PartyId,
    },
    /// A node key the update brings in has no proof that it is held.
    #[error(
        "{holder}'s new key {key} is not proven held: its holder adds the proof with `fabrx network update prove` (a key nobody holds would make that node faulty)"
    )]
    KeyNotProven {
        /// The node the next config gives the key.
        holder: String,
        /// The key.
        key: String,
    },
    /// A proof that does not verify with the key it names.
    #[error(
        "the proof of {holder}'s new key {key} does not verify (made for another chain, or not by that key)"
    )]
    BadKeyProof {
        /// The node the next config gives the key.
        holder: String,
        /// The key.
        key: String,
    },
    /// A proof of a key the update does not bring in, or a second proof of one.
    #[error("a proof of key {key}, which the update does not bring in (or proves twice)")]
    KeyProofNotNeeded {
        /// The key.
        key: String,
    },
    /// Fewer distinct signers than the update policy needs.
    #[error("{} admin signature{}, the update policy needs {needed}", .signatures, if *.signatures == 1 { "" } else { "s" })]
    NotEnoughSignatures {
        /// Distinct valid signatures.
        signatures: u32,
        /// K of the update policy.
        needed: u32,
    },
    /// The update's config text is not the canonical form of the config it holds.
    #[error(
        "the update's config is not in canonical form (make the update with `fabrx network update propose`)"
    )]
    NotCanonical,
    /// The next config is not a valid network config.
    #[error("the next config is not valid: {source}")]
    BadConfig {
        /// Why.
        source: crate::Error,
    },
    /// The next config's sequence is not the one after the config it replaces.
    #[error(
        "the next config has sequence {next}; it must be {expected}, one more than the config it replaces"
    )]
    NextSequence {
        /// The next config's sequence.
        next: u64,
        /// The sequence it must have.
        expected: u64,
    },
    /// The next config's chain name differs from the update's or the network's.
    #[error(
        "the next config is for chain {next:?}, the network is chain {current:?}: a chain name cannot change"
    )]
    ChainChanged {
        /// The chain in force.
        current: String,
        /// The next config's chain.
        next: String,
    },
    /// The next config has another number of shards.
    #[error(
        "the next config has {next} shards, the network {current}: adding or removing shards is not supported by a config update"
    )]
    ShardsChanged {
        /// Shards in force.
        current: u32,
        /// Shards of the next config.
        next: u32,
    },
    /// A key passes from one holder to another.
    #[error("the key {key} passes from {from} to {to}: a key never changes holder (give {to} a new key)")]
    KeyMoved {
        /// The key.
        key: String,
        /// Who holds it in the config in force.
        from: String,
        /// Who would hold it in the next.
        to: String,
    },
    /// `retired_keys` of the next config is not the keys retired before plus those the
    /// update retires.
    #[error(
        "the next config's retired_keys must list every key retired before and every key the update stops naming (`fabrx network update propose` fills it): missing {missing:?}, not to be listed {extra:?}"
    )]
    RetiredKeys {
        /// Keys it must list and does not.
        missing: Vec<String>,
        /// Keys it lists and must not.
        extra: Vec<String>,
    },
    /// The update rotates (or, for a joining party, adds) more consenter keys than the set
    /// tolerates faulty replicas.
    #[error(
        "the update rotates or adds the consenter keys of parties {parties:?}; at most {f} may change in one update (if their nodes lacked the new keys, the new set could never decide): change them in several updates (a party joins in an update of its own)"
    )]
    TooManyConsenterKeys {
        /// The parties whose consenter key it rotates.
        parties: Vec<PartyId>,
        /// Faulty replicas the set tolerates.
        f: u32,
    },
    /// The next config has fewer admin keys than its own update policy needs: no update
    /// could ever follow it.
    #[error(
        "the next config has {admins} parties with an admin key and its update policy needs {needed} signatures: no update could follow it"
    )]
    NextNotUpdatable {
        /// Parties of the next config with an admin key.
        admins: u32,
        /// Signatures its policy needs.
        needed: u32,
    },
    /// The next config changes what the roles do not apply at a switch yet (a party
    /// added or removed, an endpoint, a TLS certificate, router limits, …).
    #[error(
        "the update changes what the nodes do not follow through an update yet (docs/reconfiguration.md \"What each role follows\"): {}",
        changes.join("; ")
    )]
    NotFollowed {
        /// Each such change, as `fabrx network update show` prints it.
        changes: Vec<String>,
    },
    /// A certificate passes from one holder to another.
    #[error(
        "the TLS certificate with SHA-256 {sha256} passes from {from} to {to}: a certificate never changes holder (issue {to} a new one)"
    )]
    TlsCertificateMoved {
        /// The certificate's fingerprint.
        sha256: String,
        /// Its holder in the config in force.
        from: String,
        /// Its holder in the next config.
        to: String,
    },
    /// A certificate the update adds does not carry its PEM.
    #[error(
        "the TLS certificate {name} is new and the config does not carry it (`pem`): the consenters check that the network CA signed it (`fabrx network tls add` writes it)"
    )]
    TlsCertificateMissing {
        /// The certificate's name.
        name: String,
    },
    /// A certificate the update adds is not the one named, or not a node certificate.
    #[error("the TLS certificate {name} is refused: {reason}")]
    TlsBadCertificate {
        /// The certificate's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A certificate the update adds is not signed by the network CA.
    #[error(
        "the TLS certificate {name} is not signed by the network CA: no node would accept it (issue it with the network's tls/ca.key; the CA itself does not change by an update)"
    )]
    TlsNotSignedByCa {
        /// The certificate's name.
        name: String,
    },
    /// A certificate for a node that has none in the config in force.
    #[error(
        "the TLS certificate {name} is for {holder}, which has no certificate in the config in force: only a node's own certificates rotate, and only the ordering nodes of a party the update adds get their first"
    )]
    TlsNewHolder {
        /// The certificate's name.
        name: String,
        /// Its holder.
        holder: String,
    },
    /// A node with more certificates than a rotation needs.
    #[error(
        "{holder} would have {count} TLS certificates; a node has at most {max} (the old and the next): retire the old one first"
    )]
    TlsTooManyCertificates {
        /// The node.
        holder: String,
        /// Certificates the next config lists for it.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A node whose certificates are all new: no overlap.
    #[error(
        "the update replaces every TLS certificate of {holder} at once: the nodes that have not switched yet would refuse it. Add the new certificate in one update and remove the old one in the next"
    )]
    TlsNoOverlap {
        /// The node.
        holder: String,
    },
    /// A node left without a certificate.
    #[error("the update removes every TLS certificate of {holder}: it could no longer call anyone")]
    TlsNoCertificate {
        /// The node.
        holder: String,
    },
    /// The update adds more than one party.
    #[error(
        "the update adds parties {parties:?}: one party joins per update (add party {first} alone, and the next once it is in force)",
        first = .parties.first().copied().unwrap_or_default()
    )]
    JoinSeveralParties {
        /// The parties it adds, in order.
        parties: Vec<PartyId>,
    },
    /// The update adds a party in another slot than the next one.
    #[error(
        "the update adds party {party}; a joining party takes the id after every id used, {expected} (ids of parties that left are never given again)"
    )]
    JoinNotNextSlot {
        /// The party it adds.
        party: PartyId,
        /// The id a joiner takes: one more than every party id and left id.
        expected: PartyId,
    },
    /// The update adds a party to a network a party left: not built yet.
    #[error(
        "the update adds party {party} to a network party {left} left: a party cannot join after one left yet (its consenter would link to the wrong replicas)"
    )]
    JoinAfterLeave {
        /// The party it adds.
        party: PartyId,
        /// A party that left.
        left: PartyId,
    },
    /// The update removes more than one party.
    #[error(
        "the update removes parties {parties:?}: one party leaves per update (remove party {first} alone, and the next once that is in force)",
        first = .parties.first().copied().unwrap_or_default()
    )]
    LeaveSeveralParties {
        /// The parties it removes, in order.
        parties: Vec<PartyId>,
    },
    /// The update removes a party and adds one.
    #[error(
        "the update removes party {leaving} and adds party {joining}: a party leaves in an update of its own"
    )]
    LeaveWithJoin {
        /// The party it removes.
        leaving: PartyId,
        /// The party it adds.
        joining: PartyId,
    },
    /// A party to remove that is not in force.
    #[error("party {party} is not a party of the network (parties {parties:?}): nothing to remove")]
    UnknownLeaver {
        /// The party named.
        party: PartyId,
        /// The parties in force.
        parties: Vec<PartyId>,
    },
    /// The update removes the only party.
    #[error("the update removes party {party}, the only party: a network keeps at least one")]
    LeaveLastParty {
        /// The party.
        party: PartyId,
    },
    /// `left_parties` of the next config is not that of the config in force with the
    /// leaving party (or, without one, unchanged).
    #[error("left_parties of the next config is {listed:?}; expected {expected:?}")]
    LeftParties {
        /// What the next config lists.
        listed: Vec<PartyId>,
        /// What it must list.
        expected: Vec<PartyId>,
    },
    /// The update adds a TLS certificate for a node of a party that left.
    #[error("party {party} left the network: the update may not add a TLS certificate of {holder}")]
    LeftPartyCertificate {
        /// The party.
        party: PartyId,
        /// The node.
        holder: String,
    },
    /// A joining party without an admin key.
    #[error(
        "party {party} joins without an admin key: a joining party needs one, so that it signs the updates after this one (`fabrx network party add` issues it)"
    )]
    JoinWithoutAdminKey {
        /// The joining party.
        party: PartyId,
    },
    /// A joining party without an assembler.
    #[error("party {party} joins without an assembler endpoint: a joining party runs every ordering node")]
    JoinWithoutAssembler {
        /// The joining party.
        party: PartyId,
    },
    /// A joining party without a batcher for a shard.
    #[error(
        "party {party} joins without a batcher for shard {shard}: a joining party runs one batcher per shard"
    )]
    JoinWithoutBatcher {
        /// The joining party.
        party: PartyId,
        /// The shard it has none for.
        shard: ShardId,
    },
    /// A joining party's node has an endpoint a node of the config in force has.
    #[error(
        "party {party} joins with {node} at {endpoint}, which {holder} has in the config in force: give the joining node an endpoint nobody uses (`fabrx network party add` places them past every port in use)"
    )]
    JoinEndpointInUse {
        /// The joining party.
        party: PartyId,
        /// Its node with that endpoint (`party 5 router`).
        node: String,
        /// The endpoint.
        endpoint: String,
        /// Who has it in the config in force (`party 2 consenter`, `party 1 sidecar`).
        holder: String,
    },
    /// A joining party's ordering node without exactly one TLS certificate.
    #[error(
        "party {party} joins with {count} TLS certificates for {holder}: each of a joining party's routers, consenters, assemblers and batchers has exactly one, signed by the network CA (`fabrx network party add` issues them)"
    )]
    JoinTlsCertificates {
        /// The joining party.
        party: PartyId,
        /// The node (`party 5's router`).
        holder: String,
        /// The certificates the next config lists for it.
        count: usize,
    },
    /// A joining party's TLS certificate refused by the checks of an added certificate
    /// (its PEM, fingerprint, CA and name, a fingerprint nobody holds).
    #[error("party {party} joins with a TLS certificate that is refused: {source}")]
    JoinCertificate {
        /// The joining party.
        party: PartyId,
        /// Why the certificate is refused (`TlsCertificateMissing`, `TlsBadCertificate`,
        /// `TlsNotSignedByCa`, `TlsCertificateMoved`).
        source: Box<UpdateError>,
    },
    /// `merge` of two different updates.
    #[error("the two files are different updates ({what} differ): only signatures of one update merge")]
    DifferentUpdates {
        /// What differs (`config`, `sequence`, `chain`).
        what: &'static str,
    },
    /// `merge` of two files with different signatures by one party.
    #[error("party {party} signed both files with different signatures: keep one file's and merge again")]
    ConflictingSignatures {
        /// The party.
        party: PartyId,
    },
}

/// Result alias of config updates.
pub type Result<T> = std::result::Result<T, UpdateError>;
