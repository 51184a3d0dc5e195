//! `fabrx loadgen --target sink` as a user runs it: the sink in its own process, over
//! mutual TLS or plain TCP; every tx sent is confirmed, the summary names the target and
//! both processes' CPU, and the sink's process is gone when the command returns.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::process::{Command, Output};

fn fabrx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fabrx"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run fabrx")
}

fn summary(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "fabrx failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line {last:?} is not JSON: {e}"))
}

/// The pid the command printed for its sink.
fn sink_pid(out: &Output) -> u32 {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("loadgen: sink in process "))
        .unwrap_or_else(|| panic!("no sink line in {stderr}"));
    line["loadgen: sink in process ".len()..]
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"))
}

#[test]
fn every_tx_reaches_the_sink_over_tls_and_plain_tcp() {
    for (insecure, link) in [(false, "mutual TLS"), (true, "plain TCP")] {
        let mut args = vec![
            "loadgen",
            "--target",
            "sink",
            "--txs",
            "20000",
            "--rate",
            "20000",
            "--tx-size",
            "500",
            "--json",
        ];
        if insecure {
            args.push("--insecure");
        }
        let out = fabrx(&args);
        let s = summary(&out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(link), "{stderr}");
        assert_eq!(s["target"], "sink", "{s}");
        assert_eq!(s["confirmed_by"], "sink", "{s}");
        for field in ["sent", "submitted", "confirmed", "ordered"] {
            assert_eq!(s[field].as_u64(), Some(20_000), "{field}: {s}");
        }
        assert_eq!(s["never_confirmed"].as_u64(), Some(0), "{s}");
        assert_eq!(s["router_errors"], serde_json::json!({}), "{s}");
        for field in [
            "client_cpu_seconds",
            "client_txs_per_cpu_second",
            "sink_cpu_seconds",
        ] {
            assert!(s[field].as_f64().is_some_and(|v| v > 0.0), "{field}: {s}");
        }
        let pid = sink_pid(&out);
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the sink's process {pid} outlived the command"
        );
    }
}

#[test]
fn insecure_is_refused_for_other_targets() {
    let out = fabrx(&["loadgen", "--target", "committer", "--insecure", "--blocks", "1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--insecure is supported with --target sink only"),
        "{stderr}"
    );
}
