//! The load generator's summary counts what happened (issue #24): a load run a second
//! time with the same seed and tag against the same network sends the same txs again.
//! Every router refuses each of them (its batcher knows the request: `ALREADY_EXISTS`),
//! and the committer's only statuses for their ids are those of the first run. The
//! second summary must say so — every tx refused, with its reason, none committed —
//! rather than count the refusals as acknowledgements and the first run's statuses as
//! its own commits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{fabrx_ok as fabrx, free_base_port, last_json};

use serde_json::{Value, json};
use std::path::Path;

/// Runs a load of `txs` with `tag` and `seed` and returns its summary line.
fn load(dir: &Path, txs: usize, tag: &str, seed: &str) -> Value {
    let out = fabrx(
        &[
            "loadgen",
            "--target",
            "network",
            "--txs",
            &txs.to_string(),
            "--block-size",
            "50",
            "--tag",
            tag,
            "--seed",
            seed,
            "--json",
            "--drain",
            "30",
            "--network",
        ],
        dir,
    );
    last_json(&out)
}

fn count(summary: &Value, field: &str) -> u64 {
    summary[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} is not a count in {summary}"))
}

#[test]
fn a_rerun_with_the_same_seed_and_tag_is_refused_and_commits_nothing() {
    const TXS: u64 = 300;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &["up", "--seed", "11", "--base-port", &base, "--json", "--dir"],
        &dir,
    );

    let first = load(&dir, TXS as usize, "rerun", "5");
    assert_eq!(first["confirmed_by"], "committer", "{first}");
    for (field, want) in [
        ("sent", TXS),
        ("submitted", TXS),
        ("refused", 0),
        ("committed", TXS),
        ("confirmed", TXS),
        ("never_confirmed", 0),
    ] {
        assert_eq!(count(&first, field), want, "first run: {field} in {first}");
    }

    // The same txs again: the batchers hold their digests, the committer their statuses
    // from the first run.
    let second = load(&dir, TXS as usize, "rerun", "5");
    assert_eq!(count(&second, "sent"), TXS, "{second}");
    assert_eq!(
        count(&second, "committed"),
        0,
        "no tx of the rerun was committed by it: {second}"
    );
    assert_eq!(
        count(&second, "refused"),
        TXS,
        "every router refused every tx: {second}"
    );
    assert_eq!(count(&second, "submitted"), 0, "{second}");
    assert_eq!(count(&second, "confirmed"), 0, "{second}");
    assert_eq!(second["aborted"], json!({}), "{second}");
    assert_eq!(
        second["refused_reasons"],
        json!({ "AlreadyExists": TXS }),
        "the reason of each refused tx: {second}"
    );
    // Every router answered every tx, each answer a refusal, counted by router and reason.
    let errors = second["router_errors"].as_object().unwrap();
    let routers = 4;
    assert_eq!(errors.len(), routers, "{second}");
    for (key, n) in errors {
        assert!(key.ends_with(": AlreadyExists"), "{key} in {second}");
        assert_eq!(n.as_u64(), Some(TXS), "{key} in {second}");
    }
    // The committer's word on those ids is the first run's: counted apart, not as a
    // commit of this run, and not as a tx left without a status.
    assert_eq!(count(&second, "decided_before_run"), TXS, "{second}");
    assert_eq!(count(&first, "decided_before_run"), 0, "{first}");
    assert_eq!(count(&second, "never_confirmed"), 0, "{second}");
    assert_eq!(second["goodput"], json!(0.0), "{second}");

    // The network is unharmed: new txs commit.
    let third = load(&dir, 100, "rerunnew", "6");
    for (field, want) in [("submitted", 100), ("committed", 100), ("refused", 0)] {
        assert_eq!(count(&third, field), want, "third run: {field} in {third}");
    }
}
