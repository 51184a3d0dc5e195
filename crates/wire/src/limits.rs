//! Message limits that a service and its clients agree on, per message type: the most
//! bytes on the wire and the most memory once decoded. `docs/limits.md` lists them with
//! every other bound of fabrx.

use crate::budget::{self, Budget, Schema};
use crate::pb;
use std::any::TypeId;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// The limit of one message type.
#[derive(Debug, Clone, Copy)]
pub struct MessageLimit {
    /// Its schema.
    pub schema: &'static Schema,
    /// The most bytes on the wire.
    pub max_bytes: usize,
    /// The most it may cost decoded.
    pub budget: Budget,
}

const fn limit(schema: &'static Schema, max_bytes: usize, decoded: usize, items: usize) -> MessageLimit {
    MessageLimit {
        schema,
        max_bytes,
        budget: Budget {
            max_decoded_bytes: decoded,
            max_items: items,
        },
    }
}

/// A batch of txs to a vcservice (`VcService.Commit`): 8 MiB on the wire, 16 MiB and
/// 256 Ki elements decoded. The sidecar sends batches of at most 500 txs (about 0.5 MiB
/// decoded for typical txs).
pub const VC_BATCH: MessageLimit = limit(&budget::VC_BATCH, 8 * MIB, 16 * MIB, 256 * KIB);
/// A block to the coordinator: as a vcservice batch.
pub const COORDINATOR_BLOCK: MessageLimit = limit(&budget::COORDINATOR_BLOCK, 8 * MIB, 16 * MIB, 256 * KIB);
/// A message of the sigverifier's `Verify` stream: as a vcservice batch.
pub const VERIFY_STREAM_REQUEST: MessageLimit =
    limit(&budget::VERIFY_STREAM_REQUEST, 8 * MIB, 16 * MIB, 256 * KIB);
/// A status lookup: 4 MiB, at most 65,536 ids.
pub const STATUS_QUERY: MessageLimit = limit(&budget::STATUS_QUERY, 4 * MIB, 16 * MIB, 64 * KIB);
/// One message of a sidecar `Subscribe` stream: 1 MiB, at most 16,384 ids (the stream as a
/// whole is bounded by the sidecar's subscription limits).
pub const SUBSCRIBE_REQUEST: MessageLimit = limit(&budget::SUBSCRIBE_REQUEST, MIB, 4 * MIB, 16 * KIB);
/// Statuses returned by a vcservice or a sidecar.
pub const TX_STATUS_BATCH: MessageLimit = limit(&budget::TX_STATUS_BATCH, 32 * MIB, 96 * MIB, 4 * MIB);
/// Verification results.
pub const VERIFY_RESULT: MessageLimit = limit(&budget::VERIFY_RESULT, 4 * MIB, 32 * MIB, 16);
/// Committed policies returned by a vcservice.
pub const POLICY_LIST: MessageLimit = limit(&budget::POLICY_LIST, 32 * MIB, 64 * MIB, MIB);
/// One client request of a router's `Submit` stream: 2 MiB on the wire and decoded (one
/// bytes field). The router refuses, one by one, envelopes over its configured maximum
/// (1 MiB by default, at most [`ROUTER_MAX_ENVELOPE_BYTES`]); a message over this limit
/// ends the stream.
pub const SUBMIT_REQUEST: MessageLimit = limit(&budget::SUBMIT_REQUEST, 2 * MIB, 2 * MIB + 4 * KIB, 0);
/// One Fabric envelope of a router's `Broadcast` stream or an assembler's `Deliver`
/// stream (`orderer.AtomicBroadcast`, docs/fabric.md): as a client request, kept whole
/// as it was sent.
pub const FABRIC_ENVELOPE: MessageLimit = limit(&budget::FABRIC_ENVELOPE, 2 * MIB, 2 * MIB + 4 * KIB, 0);
/// The answer to one client request: an id, a code and a reason of at most a few hundred
/// bytes.
pub const SUBMIT_RESPONSE: MessageLimit = limit(&budget::SUBMIT_RESPONSE, 64 * KIB, 128 * KIB, 0);
/// One request a router forwards on a batcher's `Intake` stream: as a client request.
pub const INTAKE_REQUEST: MessageLimit = limit(&budget::INTAKE_REQUEST, 2 * MIB, 2 * MIB + 4 * KIB, 0);
/// Many client requests in one message of a router's `SubmitMany` stream: 4 MiB on the
/// wire (room for the largest envelope, [`ROUTER_MAX_ENVELOPE_BYTES`], and more), 8 MiB
/// and 16 Ki requests decoded.
pub const SUBMIT_BATCH: MessageLimit = limit(&budget::SUBMIT_BATCH, 4 * MIB, 8 * MIB, 16 * KIB);
/// The answers of one `SubmitMany` message: at most 16 Ki of them (each a few hundred
/// bytes at most).
pub const SUBMIT_ANSWERS: MessageLimit = limit(&budget::SUBMIT_ANSWERS, 8 * MIB, 16 * MIB, 16 * KIB);
/// Many requests a router forwards in one message of a batcher's `Intake` stream: as a
/// [`SUBMIT_BATCH`].
pub const INTAKE_BATCH: MessageLimit = limit(&budget::INTAKE_BATCH, 4 * MIB, 8 * MIB, 16 * KIB);
/// The answers of one `Intake` message: at most 16 Ki of a few bytes each.
pub const INTAKE_ANSWERS: MessageLimit = limit(&budget::INTAKE_ANSWERS, MIB, 2 * MIB, 16 * KIB);
/// A batch pulled from a primary or fetched from a batcher (`BatcherPeer.Pull`,
/// `BatcherPeer.Fetch`): 32 MiB on the wire, 64 MiB and 256 Ki requests decoded. A
/// batcher's `max_batch_bytes` and `max_batch_requests` must fit (checked when a
/// batcher node starts).
pub const BATCH: MessageLimit = limit(&budget::BATCH, 32 * MIB, 64 * MIB, 256 * KIB);
/// A secondary's ack to its primary (`BatcherPeer.Ack`): a BAF of a few hundred bytes.
pub const BATCH_ATTESTATION_FRAGMENT: MessageLimit =
    limit(&budget::BATCH_ATTESTATION_FRAGMENT, KIB, 4 * KIB, 0);
/// A request a secondary forwards to its primary (`BatcherPeer.Forward`): as an intake
/// request.
pub const FORWARD_REQUEST: MessageLimit = limit(&budget::FORWARD_REQUEST, 2 * MIB, 2 * MIB + 4 * KIB, 0);
/// Keys to read at one snapshot (`VcService.ReadRows`, `Query.GetRows`): 4 MiB, at most
/// 65,536 keys.
pub const ROWS_QUERY: MessageLimit = limit(&budget::ROWS_QUERY, 4 * MIB, 16 * MIB, 64 * KIB);
/// A page of an owner's rows (`VcService.OwnedRows`, `Query.GetOwned`): an owner and a
/// key of at most a few KiB.
pub const OWNED_QUERY: MessageLimit = limit(&budget::OWNED_QUERY, 8 * KIB, 32 * KIB, 0);
/// Rows read at one snapshot: 32 MiB on the wire, 96 MiB and 1 Mi rows decoded.
pub const ROWS_RESULT: MessageLimit = limit(&budget::ROWS_RESULT, 32 * MIB, 96 * MIB, MIB);
/// A token request to endorse: 1 MiB, at most 4,096 inputs and outputs together.
pub const ENDORSE_REQUEST: MessageLimit = limit(&budget::ENDORSE_REQUEST, MIB, 4 * MIB, 4 * KIB);
/// An endorser's answer: a tx id, a partial signature and a reason.
pub const ENDORSE_RESPONSE: MessageLimit = limit(&budget::ENDORSE_RESPONSE, 64 * KIB, 128 * KIB, 0);
/// Largest message a query service or an endorser accepts.
pub const TOKEN_SERVICE_MAX_MESSAGE_BYTES: usize = ROWS_QUERY.max_bytes;
/// Largest message a batcher's `BatcherPeer` service accepts.
pub const BATCHER_PEER_MAX_MESSAGE_BYTES: usize = FORWARD_REQUEST.max_bytes;
/// The largest envelope a router may be configured to accept: what fits in a
/// [`SUBMIT_REQUEST`] and an [`INTAKE_REQUEST`] with their id and framing.
pub const ROUTER_MAX_ENVELOPE_BYTES: usize = 2 * MIB - 64;
/// Largest message a router accepts (its largest request type).
pub const ROUTER_MAX_MESSAGE_BYTES: usize = SUBMIT_BATCH.max_bytes;
/// Largest message a batcher's intake accepts.
pub const BATCHER_INTAKE_MAX_MESSAGE_BYTES: usize = INTAKE_BATCH.max_bytes;
/// Requests without content (`GetNextBlock`, `SetLastCommitted`, `GetBlock`,
/// `GetPolicies`): a few bytes.
pub const SMALL_REQUEST: usize = 64;

/// Largest message a vcservice accepts (its largest request type).
pub const VCSERVICE_MAX_MESSAGE_BYTES: usize = VC_BATCH.max_bytes;
/// Largest message a sigverifier accepts or sends, and so the largest its clients send.
pub const SIGVERIFIER_MAX_MESSAGE_BYTES: usize = VERIFY_STREAM_REQUEST.max_bytes;
/// Largest message a sidecar accepts.
pub const SIDECAR_MAX_MESSAGE_BYTES: usize = STATUS_QUERY.max_bytes;
/// Largest answer a client of the committer accepts.
pub const COMMITTER_MAX_ANSWER_BYTES: usize = TX_STATUS_BATCH.max_bytes;

macro_rules! small {
    ($name:ident, $ty:ty) => {
        static $name: Schema = Schema {
            name: stringify!($ty),
            base: std::mem::size_of::<$ty>(),
            fields: &[],
        };
    };
}
small!(LAST_COMMITTED_REQUEST, pb::LastCommittedRequest);
small!(SET_LAST_COMMITTED_REQUEST, pb::SetLastCommittedRequest);
small!(BLOCK_QUERY, pb::BlockQuery);
small!(POLICIES_REQUEST, pb::PoliciesRequest);
small!(NEXT_BLOCK, pb::NextBlock);
small!(PULL_REQUEST, pb::PullRequest);
small!(PEER_ACK, pb::PeerAck);

const fn small_limit(schema: &'static Schema) -> MessageLimit {
    limit(schema, SMALL_REQUEST, 4 * KIB, 0)
}

/// The limit of the message type `id`, when fabrx has one (every request type of the
/// committer's and the ordering services); `None`: only the service's message size limit applies.
pub fn message_limit(id: TypeId) -> Option<MessageLimit> {
    let table: [(TypeId, MessageLimit); 33] = [
        (TypeId::of::<crate::fabric::RawEnvelope>(), FABRIC_ENVELOPE),
        (TypeId::of::<pb::VcBatch>(), VC_BATCH),
        (TypeId::of::<pb::CoordinatorBlock>(), COORDINATOR_BLOCK),
        (TypeId::of::<pb::VerifyStreamRequest>(), VERIFY_STREAM_REQUEST),
        (TypeId::of::<pb::StatusQuery>(), STATUS_QUERY),
        (TypeId::of::<pb::SubscribeRequest>(), SUBSCRIBE_REQUEST),
        (TypeId::of::<pb::TxStatusBatch>(), TX_STATUS_BATCH),
        (TypeId::of::<pb::VerifyResult>(), VERIFY_RESULT),
        (TypeId::of::<pb::PolicyList>(), POLICY_LIST),
        (
            TypeId::of::<pb::LastCommittedRequest>(),
            small_limit(&LAST_COMMITTED_REQUEST),
        ),
        (
            TypeId::of::<pb::SetLastCommittedRequest>(),
            small_limit(&SET_LAST_COMMITTED_REQUEST),
        ),
        (TypeId::of::<pb::BlockQuery>(), small_limit(&BLOCK_QUERY)),
        (
            TypeId::of::<pb::PoliciesRequest>(),
            small_limit(&POLICIES_REQUEST),
        ),
        (TypeId::of::<pb::NextBlock>(), small_limit(&NEXT_BLOCK)),
        (TypeId::of::<pb::SubmitRequest>(), SUBMIT_REQUEST),
        (TypeId::of::<pb::SubmitResponse>(), SUBMIT_RESPONSE),
        (TypeId::of::<pb::IntakeRequest>(), INTAKE_REQUEST),
        (
            TypeId::of::<pb::IntakeResponse>(),
            small_limit(&budget::INTAKE_RESPONSE),
        ),
        (TypeId::of::<pb::SubmitBatch>(), SUBMIT_BATCH),
        (TypeId::of::<pb::SubmitAnswers>(), SUBMIT_ANSWERS),
        (TypeId::of::<pb::IntakeBatch>(), INTAKE_BATCH),
        (TypeId::of::<pb::IntakeAnswers>(), INTAKE_ANSWERS),
        (TypeId::of::<pb::Batch>(), BATCH),
        (
            TypeId::of::<pb::BatchAttestationFragment>(),
            BATCH_ATTESTATION_FRAGMENT,
        ),
        (TypeId::of::<pb::ForwardRequest>(), FORWARD_REQUEST),
        (TypeId::of::<pb::PullRequest>(), small_limit(&PULL_REQUEST)),
        (
            TypeId::of::<pb::FetchRequest>(),
            small_limit(&budget::FETCH_REQUEST),
        ),
        (TypeId::of::<pb::PeerAck>(), small_limit(&PEER_ACK)),
        (TypeId::of::<pb::RowsQuery>(), ROWS_QUERY),
        (TypeId::of::<pb::OwnedQuery>(), OWNED_QUERY),
        (TypeId::of::<pb::RowsResult>(), ROWS_RESULT),
        (TypeId::of::<pb::EndorseRequest>(), ENDORSE_REQUEST),
        (TypeId::of::<pb::EndorseResponse>(), ENDORSE_RESPONSE),
    ];
    table.into_iter().find(|(t, _)| *t == id).map(|(_, l)| l)
}
