//! `fabrx loadgen --target committer` as a user runs it: the last stdout line is the JSON
//! summary, its fields are consistent, bad flags fail with a clear message and no panic.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use serde_json::Value;
use std::process::{Command, Output};

fn fabrx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fabrx"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fabrx")
}

fn last_json(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line {last:?} is not JSON: {e}"))
}

fn u(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("{field} in {v}"))
}

fn f(v: &Value, field: &str) -> f64 {
    v[field].as_f64().unwrap_or_else(|| panic!("{field} in {v}"))
}

const SMALL: &[&str] = &[
    "loadgen",
    "--target",
    "committer",
    "--blocks",
    "6",
    "--block-size",
    "25",
    "--conflict-rate",
    "0.2",
    "--invalid-sig-rate",
    "0.1",
];

#[test]
fn json_summary_is_consistent_and_matches_the_oracle() {
    let mut args = SMALL.to_vec();
    args.extend(["--verify-serial", "--json", "--seed", "3"]);
    let out = fabrx(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "--json prints one line"
    );
    let v = last_json(&out);
    assert_eq!(u(&v, "txs"), 150);
    assert_eq!(
        u(&v, "committed") + u(&v, "mvcc_conflict") + u(&v, "signature_invalid") + u(&v, "other"),
        150
    );
    assert_eq!(u(&v, "other"), 0);
    assert!(
        u(&v, "mvcc_conflict") > 0 && u(&v, "signature_invalid") > 0,
        "{v}"
    );
    assert_eq!(u(&v, "serial_mismatches"), 0);
    assert_eq!(u(&v, "state_mismatches"), 0);
    let secs = f(&v, "seconds");
    assert!(secs > 0.0);
    assert!((f(&v, "tps") - 150.0 / secs).abs() < 1e-6 * f(&v, "tps").max(1.0));
    assert!((f(&v, "goodput_tps") - u(&v, "committed") as f64 / secs).abs() < 1e-3);
    assert!(f(&v, "p50_ms") > 0.0 && f(&v, "p50_ms") <= f(&v, "p99_ms"), "{v}");
    assert_eq!(v["backend"], "embedded");
    assert!(v.get("baseline").is_none());
    // The same seed plans the same workload: the same counts.
    let again = last_json(&fabrx(&args));
    for field in ["committed", "mvcc_conflict", "signature_invalid"] {
        assert_eq!(u(&again, field), u(&v, field), "{field}");
    }
}

#[test]
fn human_summary_then_json_and_baseline() {
    let mut args = SMALL.to_vec();
    args.extend(["--baseline", "--baseline-txs", "40"]);
    let out = fabrx(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().count() > 1,
        "a human summary comes first: {stdout}"
    );
    assert!(stdout.starts_with("loadgen committer"), "{stdout}");
    let v = last_json(&out);
    assert!(v["serial_mismatches"].is_null(), "not verified: null");
    let b = &v["baseline"];
    assert_eq!(u(b, "serial_txs"), 40);
    assert!(u(b, "serial_committed") <= 40);
    assert!(f(b, "verify_per_s_one_core") > 0.0);
    assert!(
        (f(b, "verify_ceiling_per_s") - f(b, "verify_per_s_one_core") * u(b, "cores") as f64).abs() < 1e-6
    );
    assert!(f(b, "serial_tps") > 0.0 && f(b, "pipeline_speedup") > 0.0);
    assert!(String::from_utf8_lossy(&out.stderr).contains("prebuilt"));
}

#[test]
fn bad_flags_are_refused_clearly() {
    let cases: &[(&[&str], &str)] = &[
        (&["--conflict-rate", "1.5"], "conflict-rate"),
        (&["--invalid-sig-rate=-0.1"], "invalid-sig-rate"),
        (&["--invalid-sig-rate", "NaN"], "invalid-sig-rate"),
        (&["--block-size", "0"], "block-size"),
        (&["--blocks", "0"], "blocks"),
        (&["--reads", "0", "--writes", "0"], "--reads + --writes is 0"),
        (&["--writes", "0"], "writes"),
        (&["--scheme", "rsa"], "scheme"),
        (&["--workers", "0"], "workers"),
        (&["--tag", "Not-OK"], "tag"),
        (&["--db", "mysql://x"], "postgres"),
        (&["--reads", "0", "--conflict-rate", "0.1"], "conflict-rate"),
    ];
    for (extra, needle) in cases {
        let mut args = vec![
            "loadgen",
            "--target",
            "committer",
            "--blocks",
            "2",
            "--block-size",
            "3",
        ];
        args.extend_from_slice(extra);
        let out = fabrx(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} accepted");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{extra:?}: {stderr}");
    }
    let out = fabrx(&["loadgen", "--target", "orderer"]);
    assert!(!out.status.success());
}
