//! Which consenter a correct follower (an assembler, a batcher) reads decisions from, as
//! the real followers choose (`clients::decisions`): its own party's consenter first; the
//! next one, in party order, when the stream ends (the source is down, or it skipped the
//! decision by installing a snapshot); and, every `CHECK_MS`, a probe of the others —
//! when the source gave nothing since the last check, any consenter that holds the next
//! decision is followed instead, and when it did, one ahead of it by as many decisions as
//! it served. Certificates are verified, so a consenter serves only decisions a quorum decided.
//!
//! A Byzantine consenter answers probes truthfully (to lure followers) and, once
//! followed, serves its decision stream as the scenario drew: silent, trickling (one
//! decision every `TRICKLE_MS`) or replaying old decisions (which the follower skips).
//! The probe is the real one's (`clients::decisions::probe_from`): a source is left for a
//! consenter ahead of it by as many decisions as it served since the last check.
//! Without the probe (`sticky_followers`, negative test) a lured follower stays.

use std::sync::Arc;

use super::{Logged, World};

/// How often a follower probes the other consenters (ms; the real one checks every 5 s,
/// scaled to the simulation's assembler bound).
pub const CHECK_MS: u64 = 500;

/// A trickling Byzantine source serves one decision this often (ms).
pub const TRICKLE_MS: u64 = 400;

/// What a Byzantine consenter does with the decision stream of a follower that follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamLie {
    /// Keeps the stream open and sends nothing.
    Silent,
    /// Sends one decision every `TRICKLE_MS`.
    Trickle,
    /// Sends decisions the follower has already (it skips them).
    Replay,
}

/// One follower's choice of source.
#[derive(Clone, Copy)]
pub(crate) struct Follow {
    /// The consenter (index) it reads.
    pub source: u32,
    /// When it last probed the others, and how many decisions it had then.
    checked_at: u64,
    fed_at_check: usize,
    /// When a trickling source last served it.
    trickled_at: u64,
}

impl Follow {
    /// A follower of party `party`'s consenter.
    pub(crate) fn of(party: u32) -> Follow {
        Follow {
            source: party - 1,
            checked_at: 0,
            fed_at_check: 0,
            trickled_at: 0,
        }
    }
}

impl World {
    /// Whether consenter `c` is up and holds decision `index` (0-based) in its log, as a
    /// correct consenter decided it (a Byzantine one can only serve certified decisions).
    fn holds(&self, c: u32, index: usize) -> Option<Arc<Logged>> {
        let node = &self.consenters[c as usize];
        node.replica.as_ref()?;
        let own = node.log.get(index).cloned().flatten();
        if self.is_correct_consenter(c) {
            return own;
        }
        own?;
        (0..self.sc.total_parties())
            .filter(|o| self.is_correct_consenter(*o))
            .find_map(|o| self.consenters[o as usize].log.get(index).cloned().flatten())
    }

    /// The consenters after `from`, in party order, wrapping.
    fn after(&self, from: u32) -> impl Iterator<Item = u32> + use<> {
        let n = self.sc.total_parties();
        (1..n).map(move |i| (from + i) % n)
    }

    /// Decision `index` for a follower, if its source serves it now; moves the follower
    /// to another source when its stream ends or a probe finds one ahead.
    pub(crate) fn follow(&mut self, f: &mut Follow, index: usize) -> Option<Arc<Logged>> {
        let now = self.k.now();
        if !self.sc.sticky_followers && now.saturating_sub(f.checked_at) >= CHECK_MS {
            // As `clients::decisions::probe_from`: ahead by what the source served.
            let probe = index.saturating_add(index.saturating_sub(f.fed_at_check));
            f.checked_at = now;
            f.fed_at_check = index;
            if let Some(c) = self.after(f.source).find(|c| self.holds(*c, probe).is_some()) {
                self.switch(f, c);
            }
        }
        if self.consenters[f.source as usize].replica.is_none()
            || (self.is_correct_consenter(f.source)
                && self.holds(f.source, index).is_none()
                && self.skipped(f.source, index))
        {
            // The stream ended: the next consenter that is up.
            let up = self
                .after(f.source)
                .find(|c| self.consenters[*c as usize].replica.is_some());
            self.switch(f, up?);
        }
        let served = self.holds(f.source, index)?;
        if self.is_correct_consenter(f.source) {
            return Some(served);
        }
        match self.sc.stream_lie {
            StreamLie::Silent | StreamLie::Replay => None,
            StreamLie::Trickle if now.saturating_sub(f.trickled_at) >= TRICKLE_MS => {
                f.trickled_at = now;
                Some(served)
            }
            StreamLie::Trickle => None,
        }
    }

    fn switch(&mut self, f: &mut Follow, to: u32) {
        if !self.is_correct_consenter(to) {
            self.report.lured += 1;
        }
        f.source = to;
    }

    /// Whether consenter `c` skipped decision `index` by installing a snapshot (its log
    /// restarted after it: a Decisions stream from there ends with "out of range").
    fn skipped(&self, c: u32, index: usize) -> bool {
        matches!(self.consenters[c as usize].log.get(index), Some(None))
    }
}
