//! Rebuilding a replica from its WAL after a crash. The rebuilt replica keeps every
//! promise it made: it stays in (or above) the highest view it asked for or installed,
//! it keeps the proposal it accepted for the current `(view, seq)` (so it cannot be
//! made to accept or propose another), its prepared certificate, the obligations of
//! its current view, and its decisions.

use std::sync::Arc;

use super::{Replica, Status};
use crate::app::Application;
use crate::certificate::Phase;
use crate::crypto::{Signer, Verifier};
use crate::messages::Carry;
use crate::types::{Config, Digest, Members, Proposed};
use crate::wal::WalEntry;
use crate::{Error, Output, Result};

/// What the WAL's entries say beyond the replica's fields.
#[derive(Default)]
struct Restored {
    accepted: Option<(u64, Arc<crate::Proposal>)>,
    vc_target: u64,
    /// The last `Switched` entry: its decision, epoch and members.
    switched: Option<(crate::Seq, u64, Option<Members>)>,
}

impl<A: Application> Replica<A> {
    /// Rebuilds a replica from the entries of its WAL. Decisions above
    /// `app.applied()` are applied to the application again and returned as
    /// [`Output::Deliver`]s for the shell.
    ///
    /// `cfg`, `signer` and `verifier` are those of the first replica set (epoch 0); when
    /// the application, once restored, is at a later set ([`Application::epoch`]) the
    /// replica takes that set from [`Application::membership`], and the WAL must say
    /// where it switched (a `Switched` entry, or one restated by a checkpoint) unless
    /// the switch happened in the replay: its entry is then among the outputs, an
    /// [`Output::Persist`] the shell makes durable before the deliveries after it.
    pub fn restore(
        cfg: Config,
        app: A,
        signer: Box<dyn Signer>,
        verifier: Arc<dyn Verifier>,
        entries: &[WalEntry],
    ) -> Result<(Self, Vec<Output>)> {
        let mut r = Replica::new(cfg, app, signer, verifier);
        r.restore_checkpoint(entries)?;
        let mut restored = Restored::default();
        for e in entries {
            if let WalEntry::Checkpoint { state, .. } = e {
                for e in state {
                    r.restore_entry(e, &mut restored)?;
                }
            } else {
                r.restore_entry(e, &mut restored)?;
            }
        }
        let Restored {
            accepted,
            vc_target,
            switched,
        } = restored;
        let next = r.next_seq();
        r.prepared = r.prepared.take().filter(|p| p.certificate.seq == next);
        let applied = r.app.applied();
        if applied > r.last_decided() {
            // The application holds decisions the WAL does not: the WAL is missing or
            // was replaced, or the application made a decision durable before the WAL
            // did. Starting would let this replica vote again on sequences it applied.
            return Err(Error::WalReplay {
                reason: format!(
                    "the application applied up to seq {applied} but the WAL holds decisions up to {} \
                     (missing or replaced WAL?); refusing to start",
                    r.last_decided()
                ),
            });
        }
        let mut outputs = Vec::new();
        if let Some(cp) = r.checkpoints.stable.clone()
            && applied < cp.seq
        {
            // The WAL was pruned past what the application persisted.
            if !r.app.install_snapshot(cp.seq, &cp.snapshot) {
                return Err(Error::WalReplay {
                    reason: format!("the application refused the snapshot of checkpoint {}", cp.seq),
                });
            }
            outputs.push(Output::Installed {
                seq: cp.seq,
                snapshot: cp.snapshot.clone(),
            });
        }
        let applied = r.app.applied();
        let from_replay = r.replay(applied, switched.as_ref().map(|(s, _, _)| *s), &mut outputs)?;
        let replayed = from_replay.is_some();
        r.restore_membership(from_replay.or(switched), replayed)?;
        // The slot and the view-change target are re-created in the set the replica is
        // in now (its votes are signed with that set's key and cluster id); a switch in
        // the replay left them behind with the old set.
        if !replayed {
            if vc_target > r.view {
                r.status = Status::ViewChanging { target: vc_target };
                r.backoff = 1;
            } else if let Some((view, proposal)) = accepted.filter(|(v, p)| *v == r.view && p.seq == next) {
                r.restore_slot(view, proposal);
            }
        }
        Ok((r, outputs))
    }

    /// Applies the kept decisions above `applied` to the application again, each
    /// followed by an [`Output::Deliver`]; a switch the WAL does not hold (its entry
    /// lost with the tail of the batch that decided it, after `wal_switch`) is persisted
    /// again before the decision's delivery and kept as a proof. Returns the last such
    /// switch: its decision, epoch and members.
    #[allow(clippy::type_complexity)]
    fn replay(
        &mut self,
        applied: crate::Seq,
        wal_switch: Option<crate::Seq>,
        outputs: &mut Vec<Output>,
    ) -> Result<Option<(crate::Seq, u64, Option<Members>)>> {
        let mut epoch = self.app.epoch();
        let mut last = None;
        for d in self.decisions.clone() {
            if d.seq() <= applied {
                continue;
            }
            self.app.apply(&d);
            let after = self.app.epoch();
            if after != epoch && wal_switch.is_none_or(|s| d.seq() > s) {
                let Some(m) = self.app.membership().filter(|m| m.epoch == after) else {
                    return Err(Error::WalReplay {
                        reason: format!(
                            "decision {} switched the application to epoch {after}, which it cannot name",
                            d.seq()
                        ),
                    });
                };
                outputs.push(Output::Persist(WalEntry::Switched {
                    epoch: after,
                    members: m.members.clone(),
                    decision: d.clone(),
                }));
                self.keep_switch(after, m.members.clone(), d.clone());
                last = Some((d.seq(), after, Some(m.members)));
            }
            epoch = after;
            outputs.push(Output::Deliver(d));
        }
        Ok(last)
    }

    /// Takes the restored application's replica set; the WAL's last `Switched` entry
    /// (or the last switch the replay made, `replayed`) must name the same epoch: a
    /// switch is persisted with the decision that makes it, before the decision is
    /// delivered.
    fn restore_membership(
        &mut self,
        switched: Option<(crate::Seq, u64, Option<Members>)>,
        replayed: bool,
    ) -> Result<()> {
        let (start, wal_epoch, wal_members) = switched.unwrap_or((0, 0, None));
        let app_epoch = self.app.epoch();
        if app_epoch != wal_epoch {
            return Err(Error::WalReplay {
                reason: format!(
                    "the application is in replica set epoch {app_epoch} but the WAL switched to epoch \
                     {wal_epoch}; refusing to start"
                ),
            });
        }
        if app_epoch == 0 {
            return Ok(());
        }
        let Some(m) = self.app.membership() else {
            return Err(Error::WalReplay {
                reason: format!("the application cannot name the replica set of epoch {app_epoch}"),
            });
        };
        if m.epoch != app_epoch {
            return Err(Error::WalReplay {
                reason: format!("the application named epoch {} for epoch {app_epoch}", m.epoch),
            });
        }
        if let Some(members) = wal_members
            && members != m.members
        {
            return Err(Error::WalReplay {
                reason: format!(
                    "the WAL switched to members {members:?} in epoch {app_epoch} but the application \
                     names {:?}; refusing to start",
                    m.members
                ),
            });
        }
        self.adopt(m);
        if replayed {
            // Every view entry of the WAL predates the switch the replay made.
            self.reset_views(start);
        } else {
            self.epoch_start = start;
        }
        Ok(())
    }

    /// Takes the latest checkpoint of the WAL (if any) as the decided base.
    fn restore_checkpoint(&mut self, entries: &[WalEntry]) -> Result<()> {
        let latest = entries
            .iter()
            .filter_map(|e| match e {
                WalEntry::Checkpoint { checkpoint, .. } => Some(checkpoint),
                _ => None,
            })
            .max_by_key(|c| c.seq);
        if let Some(cp) = latest {
            if cp.instance != self.cfg.instance {
                return Err(Error::WalReplay {
                    reason: format!("checkpoint {} of another instance", cp.seq),
                });
            }
            self.jump_to(cp.clone());
        }
        Ok(())
    }

    fn restore_entry(&mut self, e: &WalEntry, restored: &mut Restored) -> Result<()> {
        match e {
            WalEntry::Accepted { view, proposal } => restored.accepted = Some((*view, proposal.clone())),
            WalEntry::Prepared(p) => self.prepared = Some(p.clone()),
            WalEntry::ViewChange { target } => restored.vc_target = restored.vc_target.max(*target),
            WalEntry::NewView {
                view,
                decided,
                carried,
            } => {
                if *view >= self.view {
                    self.view = *view;
                    self.carry = Carry {
                        decided: *decided,
                        proposal: carried.clone(),
                    };
                }
            }
            WalEntry::Decided(d) => self.restore_decision(d)?,
            WalEntry::Switched {
                epoch,
                members,
                decision,
            } => {
                // What came before belonged to the old set's views.
                let seq = &decision.seq();
                restored.switched = Some((*seq, *epoch, Some(members.clone())));
                if self.switches.back().is_none_or(|s| s.decision.seq() < *seq) {
                    self.keep_switch(*epoch, members.clone(), decision.clone());
                }
                restored.accepted = None;
                restored.vc_target = 0;
                self.view = 0;
                self.carry = Carry {
                    decided: *seq,
                    proposal: None,
                };
                self.prepared = None;
                if self.last_decided() == *seq {
                    self.last_commit = None;
                }
            }
            WalEntry::Checkpoint { .. } => {}
        }
        Ok(())
    }

    fn restore_decision(&mut self, d: &Arc<crate::Decision>) -> Result<()> {
        let next = self.next_seq();
        if d.seq() < next {
            return Ok(()); // decided twice (e.g. by sync after a commit): same value
        }
        if d.seq() > next || d.proposal.instance != self.cfg.instance {
            return Err(Error::WalReplay {
                reason: format!("decision {} follows {}", d.seq(), next - 1),
            });
        }
        for req in &d.proposal.requests {
            self.decided_requests.insert(Digest::of_request(req));
        }
        self.last_decided = d.seq();
        self.last_commit = Some(d.certificate.clone());
        self.decisions.push_back(d.clone());
        Ok(())
    }

    /// Re-creates the in-flight slot: our prepare (and commit if we prepared) are
    /// re-signed over the same bytes, so nothing new is said.
    fn restore_slot(&mut self, view: u64, proposal: Arc<crate::Proposal>) {
        let proposed = Proposed {
            digest: proposal.digest(),
            proposal,
        };
        let seq = proposed.proposal.seq;
        let prepare = self.sign_vote(Phase::Prepare, seq, proposed.digest);
        self.record_own_vote(&prepare);
        self.slot.my_votes.push(prepare);
        if let Some(p) = &self.prepared
            && p.certificate.view == view
            && p.certificate.digest == proposed.digest
        {
            let commit = self.sign_vote(Phase::Commit, seq, proposed.digest);
            self.record_own_vote(&commit);
            self.slot.my_votes.push(commit);
            self.slot.sent_commit = true;
        }
        self.slot.accepted = Some(proposed);
    }
}
