#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! The ordering simulation's reconfiguration scenarios (docs/ordering-sim.md
//! "Reconfiguration"): config updates ordered by the consenters at random points of
//! seeded runs, with refused updates, competing updates, Byzantine parties, a
//! partitioned consenter and crashes at the switch; and the tests that show the checker
//! sees an update accepted without approval and a replica that does not switch.

use ordersim::{
    ArmaReport, ArmaScenario, BadUpdate, Byzantine, LeaveKind, Partition, run, run_reconfiguration_seed,
};
use rayon::prelude::*;
use testkit::sim::ByzMode;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn split(results: Vec<Result<ArmaReport, String>>) -> (Vec<ArmaReport>, Vec<String>) {
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for r in results {
        match r {
            Ok(report) => ok.push(report),
            Err(e) => failed.push(e),
        }
    }
    (ok, failed)
}

/// `ARMA_RECONF_SEEDS` reconfiguration seeds (else `SIM_RECONF_SEEDS`, the long mode
/// shared with the BFT simulation's reconfiguration scenarios; 300 by default) from
/// `ARMA_RECONF_SEED_START` (0).
#[test]
fn reconfiguration_seeds_keep_every_invariant() {
    let n = env("ARMA_RECONF_SEEDS", env("SIM_RECONF_SEEDS", 300));
    let start = env("ARMA_RECONF_SEED_START", 0);
    let results: Vec<_> = (start..start.saturating_add(n))
        .into_par_iter()
        .map(|seed| (seed, run_reconfiguration_seed(seed)))
        .collect();
    let duplicated: Vec<(u64, u64, u64)> = results
        .iter()
        .filter_map(|(seed, r)| {
            r.as_ref()
                .ok()
                .map(|r| (*seed, r.duplicates, r.duplicates_across_switch))
        })
        .filter(|(_, d, _)| *d > 0)
        .collect();
    let (ok, failures) = split(results.into_iter().map(|(_, r)| r).collect());
    let sum = |f: fn(&ArmaReport) -> u64| ok.iter().map(f).sum::<u64>();
    eprintln!(
        "{n} reconfiguration seeds: {} failed; {} switches, {} superseded by a competing update, {} refused \
         updates submitted, {} certificates checked not to verify under the set before; {} blocks, {} term \
         changes, {} duplicate orderings, {} snapshots installed ({} switches crossed by one); {} \
         acknowledged requests pending at a switch, {} sent again at the status timeout; {} batcher keys \
         taken at a switch; {} batchers of a joining party started, {} of its BAFs decided; {} crashes at a switch, {} consenter messages partitioned, {} messages of a corrupting consenter in a later set; \
         longest assembler lag after GST {} ms",
        failures.len(),
        sum(|r| r.switches),
        sum(|r| r.superseded),
        sum(|r| r.bad_updates),
        sum(|r| r.wrong_set_checked),
        sum(|r| r.blocks),
        sum(|r| r.term_changes),
        sum(|r| r.duplicates),
        sum(|r| r.installed),
        sum(|r| r.switches_by_snapshot),
        sum(|r| r.acked_at_switch),
        sum(|r| r.lost_after_ack),
        sum(|r| r.batcher_keys_rotated),
        sum(|r| r.joined_batchers),
        sum(|r| r.joined_bafs),
        sum(|r| r.crashes_at_switch),
        sum(|r| r.partitioned),
        sum(|r| r.byz_sent_after_switch),
        ok.iter().map(|r| r.assembler_lag_ms).max().unwrap_or(0),
    );
    eprintln!("{}", leave_summary(&ok));
    if !duplicated.is_empty() {
        eprintln!(
            "seeds with duplicate orderings (seed, duplicates, of them across a switch): {duplicated:?}"
        );
    }
    for f in &failures {
        eprintln!("{}", f.lines().next().unwrap_or_default());
    }
    assert!(
        failures.is_empty(),
        "{} seeds failed; first:\n{}",
        failures.len(),
        failures[0]
    );
    if n >= 100 {
        assert!(sum(|r| r.switches) >= n, "too few switches");
        assert!(sum(|r| r.superseded) > 0, "no competing update lost");
        assert!(sum(|r| r.wrong_set_checked) > 0, "no certificate after a switch");
        assert!(sum(|r| r.crashes_at_switch) > 0, "no crash at a switch");
        assert!(
            sum(|r| r.batcher_keys_rotated) > 0,
            "no batcher took a rotated key"
        );
        assert!(sum(|r| r.partitioned) > 0, "no partitioned consenter");
        assert!(sum(|r| r.joined_batchers) > 0, "no party joined");
        assert!(sum(|r| r.joined_bafs) > 0, "no BAF of a joined party was decided");
        assert!(
            sum(|r| r.acked_at_switch) > 0,
            "no acknowledged request pending at a switch"
        );
        assert!(
            sum(|r| r.byz_sent_after_switch) > 0,
            "no corrupting consenter after a switch"
        );
        assert!(
            sum(|r| r.duplicates) * 20 <= sum(|r| r.blocks).max(1),
            "duplicates are not rare"
        );
        assert!(sum(|r| r.parties_left) > 0, "no party left");
        for kind in KINDS {
            assert!(
                ok.iter().any(|r| r.left.is_some_and(|(_, k)| k == kind)),
                "no {kind:?} party left"
            );
        }
        assert!(
            sum(|r| r.removed_signer_refused) > 0,
            "no certificate checked against a removed signer"
        );
        assert!(
            sum(|r| r.headers_after_leave) > 0,
            "no batch ordered after a party left"
        );
        assert!(
            sum(|r| r.removed_sent) > 0,
            "no removed Byzantine batcher spoke after its removal"
        );
    }
}

const KINDS: [LeaveKind; 5] = [
    LeaveKind::Byzantine,
    LeaveKind::CrashedForGood,
    LeaveKind::Primary,
    LeaveKind::Leader,
    LeaveKind::Honest,
];

/// One line on the parties that left in `ok`.
fn leave_summary(ok: &[ArmaReport]) -> String {
    let sum = |f: fn(&ArmaReport) -> u64| ok.iter().map(f).sum::<u64>();
    let by_kind: Vec<String> = KINDS
        .iter()
        .map(|kind| {
            let n = ok
                .iter()
                .filter(|r| r.left.is_some_and(|(_, k)| k == *kind))
                .count();
            format!("{kind:?} {n}")
        })
        .collect();
    format!(
        "leaves: {} parties removed ({}); {} headers ordered after a removal, {} certificates refused with a \
         removed signer, {} BAFs and complaints of removed Byzantine batchers sent, {} requests whose \
         acknowledgements fell below 2f+1 at a removal sent again",
        sum(|r| r.parties_left),
        by_kind.join(", "),
        sum(|r| r.headers_after_leave),
        sum(|r| r.removed_signer_refused),
        sum(|r| r.removed_sent),
        sum(|r| r.acks_lost_at_leave),
    )
}

/// A party leaves under every fault mix: each kind of leaving party (Byzantine —
/// censoring, equivocating, bogus, late-equivocating primary, corrupting or lying
/// consenter —, crashed for good, a shard's primary, the view's leader, a plain correct
/// party), with a correct consenter partitioned around the leave and consenters and
/// batchers crashing as they switch.
#[test]
fn a_party_leaves_under_every_fault_mix_and_keeps_every_invariant() {
    let byzantine = [
        Byzantine::CensoringPrimary,
        Byzantine::EquivocatingPrimary,
        Byzantine::BogusPrimary,
        Byzantine::LateEquivocator,
        Byzantine::NoisySecondary,
        Byzantine::CorruptConsenter(ByzMode::Equivocate),
        Byzantine::CorruptConsenter(ByzMode::ConflictingVotes),
        Byzantine::LyingConsenter,
    ];
    let (ok, failed) = variant(40, 0x1ea5e, |sc| {
        let kind = KINDS[(sc.seed % 5) as usize];
        if kind != LeaveKind::CrashedForGood {
            let party = 1 + (sc.seed / 5 % 4) as u32;
            *sc = sc
                .clone()
                .with_byzantine(party, byzantine[(sc.seed / 5 % 8) as usize]);
        }
        *sc = sc.clone().with_leave(kind);
        let r = sc.reconfig.as_mut().unwrap();
        let at = r.updates[r.leave.unwrap().update].at_ms;
        r.partition = Some(Partition {
            consenter: (sc.seed % 3) as u32 + 1,
            from_ms: at.saturating_sub(50),
            until_ms: at + 800,
        });
        r.crash_at_switch = 0.4;
        r.crash_batcher_at_switch = 0.3;
    });
    for f in &failed {
        eprintln!("{}", f.lines().next().unwrap_or_default());
    }
    assert!(failed.is_empty(), "{} failed; first: {}", failed.len(), failed[0]);
    eprintln!("{}", leave_summary(&ok));
    let sum = |f: fn(&ArmaReport) -> u64| ok.iter().map(f).sum::<u64>();
    assert_eq!(sum(|r| r.parties_left), 40, "a planned leave did not happen");
    assert!(sum(|r| r.removed_signer_refused) > 0);
    assert!(sum(|r| r.removed_sent) > 0, "no removed Byzantine batcher spoke");
    assert!(sum(|r| r.crashes_at_switch) > 0, "no crash at a switch");
}

#[test]
fn reproduce_reconfiguration() {
    let Some(seed) = std::env::var("ARMA_RECONF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    else {
        return;
    };
    let report = run(ArmaScenario::reconfiguration(seed), true).unwrap();
    eprintln!("{report:?}");
}

/// Runs `count` reconfiguration seeds (from `salt`) with `tweak` applied.
fn variant(
    count: u64,
    salt: u64,
    tweak: impl Fn(&mut ArmaScenario) + Sync,
) -> (Vec<ArmaReport>, Vec<String>) {
    let results: Vec<_> = (0..count)
        .into_par_iter()
        .map(|seed| {
            let mut sc = ArmaScenario::reconfiguration(seed ^ salt);
            tweak(&mut sc);
            run(sc, false)
        })
        .collect();
    split(results)
}

/// Every switch under a Byzantine primary — party 1's batcher primary of shard 0, or
/// its consenter, the leader of every set's first view — with a correct consenter
/// partitioned from the others around the first update and consenters and batchers
/// crashing as they switch.
#[test]
fn switches_under_a_byzantine_primary_a_partition_and_restarts_keep_every_invariant() {
    let primaries = [
        Byzantine::CensoringPrimary,
        Byzantine::EquivocatingPrimary,
        Byzantine::BogusPrimary,
        Byzantine::LateEquivocator,
        Byzantine::CorruptConsenter(ByzMode::Equivocate),
        Byzantine::CorruptConsenter(ByzMode::BadProposal),
        Byzantine::CorruptConsenter(ByzMode::ConflictingVotes),
        Byzantine::LyingConsenter,
    ];
    let (ok, failed) = variant(32, 0x5ca1, |sc| {
        let kind = primaries[(sc.seed % 8) as usize];
        *sc = sc.clone().with_byzantine(1, kind);
        let r = sc.reconfig.as_mut().unwrap();
        let first = r.updates[0].at_ms;
        r.partition = Some(Partition {
            consenter: 1 + (sc.seed % 3) as u32,
            from_ms: first.saturating_sub(50),
            until_ms: first + 1_000,
        });
        r.crash_at_switch = 0.5;
        r.crash_batcher_at_switch = 0.3;
    });
    assert!(failed.is_empty(), "{}", failed[0]);
    let sum = |f: fn(&ArmaReport) -> u64| ok.iter().map(f).sum::<u64>();
    eprintln!(
        "hostile switches: {} switches, {} crashes at a switch, {} messages partitioned, {} term changes, \
         {} messages of a corrupting consenter in a later set",
        sum(|r| r.switches),
        sum(|r| r.crashes_at_switch),
        sum(|r| r.partitioned),
        sum(|r| r.term_changes),
        sum(|r| r.byz_sent_after_switch)
    );
    assert!(
        sum(|r| r.byz_sent_after_switch) > 0,
        "no corrupting consenter after a switch"
    );
    assert!(
        sum(|r| r.crashes_at_switch) >= 6,
        "crashes at a switch rarely fired"
    );
    assert!(sum(|r| r.partitioned) > 0, "the partition cut nothing");
}

/// Rules that accept any approvals put a refused update in force; the checker's own
/// rules see it.
#[test]
fn an_update_without_approval_put_in_force_is_caught() {
    let (_, failed) = variant(12, 0x1a8, |sc| {
        let r = sc.reconfig.as_mut().unwrap();
        r.lax_rules = true;
        r.bad = vec![(50, BadUpdate::TooFewApprovals), (400, BadUpdate::ForgedApproval)];
    });
    eprintln!(
        "lax rules: {} of 12 seeds failed; first: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(
        failed.iter().any(|e| e.contains("no update in it is valid")),
        "an update put in force without approval went unnoticed: {failed:?}"
    );
}

/// A replica whose rules refuse every update does not switch where the others do.
#[test]
fn a_replica_that_does_not_switch_is_caught() {
    let (_, failed) = variant(12, 0x57b, |sc| {
        if sc.n == 1 {
            sc.n = 4;
        }
        sc.byzantine = None;
        sc.reconfig.as_mut().unwrap().stubborn = Some((sc.seed % u64::from(sc.n)) as u32);
    });
    eprintln!(
        "stubborn replica: {} of 12 seeds failed; first: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(
        failed.len() == 12 && failed.iter().all(|e| e.contains("switch")),
        "a replica that did not switch went unnoticed: {failed:?}"
    );
}

/// A reconfiguration seed replays exactly.
#[test]
fn a_reconfiguration_seed_replays_exactly() {
    for seed in 0..16 {
        let a = format!("{:?}", run_reconfiguration_seed(seed));
        let b = format!("{:?}", run_reconfiguration_seed(seed));
        assert_eq!(a, b, "seed {seed} did not replay");
    }
}
