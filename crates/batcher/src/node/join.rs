//! A joining party's batcher before its party is in force (docs/reconfiguration.md
//! "Adding a party"): it follows the decisions — verified under the consenter set in
//! force for each, the sets persisted at every switch, headers only — without a core,
//! keeping the shard's term and last ordered seq as the node's loop would, until the
//! decision that puts in force a config naming its party and shard. That decision also
//! moves every shard to a new term (the consenters' switch), so the node starts its core
//! in that term, under the new config, and reads on from the next decision: it never
//! acts in a term whose primaries were counted over the parties before the join.

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::info;

use super::decisions::{Decided, Follower};
use super::store::Progress;

/// What the waiting follower needs.
pub(super) struct Waiting {
    pub(super) follower: Follower,
    pub(super) party: types::PartyId,
    pub(super) rx: mpsc::Receiver<Decided>,
}

/// The progress a joining node starts from: the term the decision that adds its party
/// moved its shard to, and the decision after it as the next one. `None` when the
/// follower stopped first.
pub(super) async fn wait(w: Waiting) -> Option<Progress> {
    let Waiting {
        follower,
        party,
        mut rx,
    } = w;
    let shard = follower.shard;
    let task = tokio::spawn(follower.run());
    info!(
        party,
        shard, "joining: following the decisions until the one that adds this party"
    );
    let mut progress = Progress::GENESIS;
    let joined = loop {
        let decided = rx.recv().await?;
        step(&mut progress, &decided);
        if let Some(view) = &decided.config
            && view.batcher_keys.contains_key(&(party, shard))
        {
            break decided.number;
        }
    };
    drop(rx);
    task.abort();
    info!(
        party,
        shard,
        decision = joined,
        term = progress.term,
        "joining: the decision that adds this party is known; the batcher starts in the term it moved the shard to"
    );
    Some(progress)
}

/// `progress` after `decided`, as the node's loop moves it (docs/batcher.md).
fn step(progress: &mut Progress, decided: &Decided) {
    for ordered in &decided.ordered {
        if ordered.term == progress.term {
            progress.last_ordered_seq = progress.last_ordered_seq.max(ordered.id.seq);
        }
    }
    for info in &decided.terms {
        if info.term > progress.term {
            progress.term = info.term;
            progress.last_ordered_seq = info.last_ordered_seq;
        }
    }
    progress.next_decision = decided.number.saturating_add(1);
}

/// The follower of a waiting node: from decision 1, headers only.
pub(super) fn follower(
    parts: &super::start::Parts,
    config: &super::Config,
) -> (Follower, mpsc::Receiver<Decided>) {
    let (tx, rx) = mpsc::channel(16);
    let follower = Follower {
        shard: config.batcher.shard,
        consenter: parts.own.clone(),
        book: Arc::clone(&parts.book),
        sets: parts.sets.clone(),
        sets_path: parts.sets_path.clone(),
        served: Arc::clone(&parts.served),
        store: parts.reader.clone(),
        tx,
        shell: config.shell,
        stats: Arc::clone(&parts.stats),
        next: Progress::GENESIS.next_decision,
        fetch_batches: false,
    };
    (follower, rx)
}

#[cfg(test)]
mod tests {
    use super::super::decisions::OrderedBatch;
    use super::*;
    use crate::TermInfo;

    fn decided(number: u64, ordered: &[(u64, u64)], terms: &[(u64, u64)]) -> Decided {
        Decided {
            number,
            ordered: ordered
                .iter()
                .map(|&(term, seq)| OrderedBatch {
                    id: types::BatchId::new(0, 1, seq),
                    term,
                    digest: [0; 32],
                    requests: Vec::new(),
                })
                .collect(),
            terms: terms
                .iter()
                .map(|&(term, last_ordered_seq)| TermInfo {
                    term,
                    last_ordered_seq,
                })
                .collect(),
            config: None,
        }
    }

    #[test]
    fn the_waiting_progress_moves_as_the_loops_does() {
        let mut p = Progress::GENESIS;
        step(&mut p, &decided(1, &[(0, 1), (0, 2)], &[]));
        assert_eq!((p.term, p.last_ordered_seq, p.next_decision), (0, 2, 2));
        // a batch of an older term counts for nothing; a term change takes its seq
        step(&mut p, &decided(2, &[(0, 3)], &[(1, 3)]));
        assert_eq!((p.term, p.last_ordered_seq, p.next_decision), (1, 3, 3));
        step(&mut p, &decided(3, &[(0, 9), (1, 4)], &[]));
        assert_eq!((p.term, p.last_ordered_seq), (1, 4));
        // an older term change is no change
        step(&mut p, &decided(4, &[], &[(0, 1)]));
        assert_eq!((p.term, p.last_ordered_seq, p.next_decision), (1, 4, 5));
    }
}
