//! Block intake (FX §3.2), pure: structural checks and duplicate ids in flight.

use std::collections::HashSet;
use types::check::{PayloadDecoder, check_tx};
use types::{BlockTx, Status, TxId};

/// What the pipeline does with one tx of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Decided here and never stored (100–102): answer directly.
    Answer(Status),
    /// Decided here; the vcservice stores the status and nothing else.
    Store(Status),
    /// Schedule through the dependency graph, signature check and vcservice.
    Schedule,
}

/// A tx of a block with its route.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The tx at its height (the body decoded once, shared by reference down the pipeline).
    pub tx: BlockTx,
    /// What to do with it.
    pub route: Route,
}

/// Structural checks plus the set of ids in flight.
#[derive(Default)]
pub struct Intake {
    /// Client-chosen ids: foldhash seeded at random (cheaper than SipHash; the seed is
    /// not predictable from outside).
    in_flight: HashSet<TxId, foldhash::quality::RandomState>,
}

impl Intake {
    /// An intake with nothing in flight.
    pub fn new() -> Intake {
        Intake::default()
    }

    /// Routes every tx of a block (`txs` with their heights, in order). An id already in
    /// flight (this block or an earlier unfinished one) is `REJECTED_DUPLICATE_TX_ID`; an
    /// id already committed is recognised by the vcservice's status lookup. `refused`
    /// gives the status of a tx whose envelope already failed its checks (by index).
    pub fn admit(
        &mut self,
        txs: Vec<BlockTx>,
        refused: impl Fn(usize) -> Option<Status>,
        dec: &dyn PayloadDecoder,
    ) -> Vec<Admitted> {
        txs.into_iter()
            .enumerate()
            .map(|(i, t)| {
                let checked = match refused(i) {
                    Some(s) => Err(s),
                    None => check_tx(&t.id, &t.tx, dec),
                };
                // The in-flight check comes before storing a malformed status: an earlier
                // tx with this id will store its own status, and a malformed duplicate
                // stored first (it bypasses the graph) would turn the original into a
                // duplicate.
                // Answered txs (no id, bad id, duplicate) never occupy their id; one
                // probe both checks the id and occupies it.
                let route = match checked {
                    Err(s) if !s.is_stored() => Route::Answer(s),
                    _ if !self.in_flight.insert(t.id.clone()) => Route::Answer(Status::RejectedDuplicateTxId),
                    Err(s) => Route::Store(s),
                    Ok(()) => Route::Schedule,
                };
                Admitted { tx: t, route }
            })
            .collect()
    }

    /// Forgets a finished id.
    pub fn finished(&mut self, id: &TxId) {
        self.in_flight.remove(id);
    }

    /// Ids in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use types::{Block, Endorsement, Tx, TxNamespace, Write};

    fn txs(number: u64, txs: Vec<(TxId, Arc<Tx>)>) -> Vec<BlockTx> {
        Block::unordered(number, txs).block_txs().unwrap()
    }

    fn tx(ns: &str, signed: bool) -> Arc<Tx> {
        let n = TxNamespace {
            ns_id: ns.into(),
            blind_writes: vec![Write {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            }],
            ..Default::default()
        };
        let e = if signed {
            vec![Endorsement {
                signature: vec![1],
                ..Default::default()
            }]
        } else {
            vec![]
        };
        Arc::new(Tx {
            namespaces: vec![n],
            endorsements: vec![e],
            metadata: vec![],
        })
    }

    #[test]
    fn routes() {
        let dec = wire::ProstDecoder::default();
        let mut intake = Intake::new();
        let block = vec![
            (TxId("a".into()), tx("token", true)),
            (TxId("a".into()), tx("token", true)),
            (TxId("".into()), tx("token", true)),
            (TxId("b".into()), tx("Bad", true)),
            (TxId("c".into()), tx("token", false)),
        ];
        let routes: Vec<Route> = intake
            .admit(txs(0, block), |_| None, &dec)
            .into_iter()
            .map(|a| a.route)
            .collect();
        assert_eq!(
            routes,
            vec![
                Route::Schedule,
                Route::Answer(Status::RejectedDuplicateTxId),
                Route::Answer(Status::MalformedMissingTxId),
                Route::Store(Status::MalformedNamespaceIdInvalid),
                Route::Store(Status::MalformedMissingSignature),
            ]
        );
        // Still in flight in the next block, also for a malformed tx with that id (it
        // must not store a status under the id before the original does); free once
        // finished.
        let next = vec![(TxId("a".into()), tx("token", true))];
        assert_eq!(
            intake.admit(txs(1, next.clone()), |_| None, &dec)[0].route,
            Route::Answer(Status::RejectedDuplicateTxId)
        );
        let malformed = vec![(TxId("a".into()), tx("token", false))];
        assert_eq!(
            intake.admit(txs(1, malformed), |_| None, &dec)[0].route,
            Route::Answer(Status::RejectedDuplicateTxId)
        );
        intake.finished(&TxId("a".into()));
        assert_eq!(
            intake.admit(txs(2, next), |_| None, &dec)[0].route,
            Route::Schedule
        );
    }

    #[test]
    fn envelopes_refused_before_the_body_keep_their_status() {
        let dec = wire::ProstDecoder::default();
        let mut intake = Intake::new();
        let empty = Arc::new(Tx::default());
        let block = vec![
            (TxId("a".into()), tx("token", true)),
            (TxId("".into()), empty.clone()),
            (TxId("p".into()), empty.clone()),
            (TxId("a".into()), empty),
        ];
        let refused = |i: usize| match i {
            1 => Some(Status::MalformedBadEnvelope),
            2 | 3 => Some(Status::MalformedBadEnvelopePayload),
            _ => None,
        };
        let routes: Vec<Route> = intake
            .admit(txs(0, block), refused, &dec)
            .into_iter()
            .map(|a| a.route)
            .collect();
        assert_eq!(
            routes,
            vec![
                Route::Schedule,
                Route::Answer(Status::MalformedBadEnvelope),
                Route::Store(Status::MalformedBadEnvelopePayload),
                // A refused envelope reusing an id in flight must not store under it.
                Route::Answer(Status::RejectedDuplicateTxId),
            ]
        );
    }
}
