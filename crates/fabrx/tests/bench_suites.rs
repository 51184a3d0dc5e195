//! `fabrx bench ordering|committer|e2e --quick` as a user runs them: each starts its
//! networks, loads them, tears them down and leaves one directory with the suite's
//! JSON, CSV and plot and every run's report (issue #14).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn suite(name: &str, out: &Path) -> Value {
    let port = cluster::free_base_port().to_string();
    let run = Command::new(cluster::bin())
        .args(["bench", name, "--quick", "--base-port", &port, "--out"])
        .arg(out)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "fabrx bench {name}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(stdout.trim(), out.join("suite.json").display().to_string());
    serde_json::from_str(&std::fs::read_to_string(out.join("suite.json")).unwrap()).unwrap()
}

/// Checks the files of a suite's directory; the number of points in its table.
fn check(out: &Path, json: &Value, runs: usize) -> usize {
    let list = json["runs"].as_array().unwrap();
    assert_eq!(list.len(), runs, "{json}");
    for r in list {
        let dir = out.join("runs").join(r["run"].as_str().unwrap());
        for file in ["per_second.csv", "summary.json", "report.svg", "loadgen.log"] {
            assert!(dir.join(file).is_file(), "{} has no {file}", dir.display());
        }
        let summary: Value =
            serde_json::from_str(std::fs::read_to_string(dir.join("summary.json")).unwrap().trim()).unwrap();
        assert_eq!(summary, r["summary"], "the suite holds each run's summary");
        assert!(summary["tps"].as_f64().unwrap() > 0.0, "{summary}");
    }
    let csv = std::fs::read_to_string(out.join("suite.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next().unwrap(), "panel,curve,run,x,tps,goodput_tps,p99_ms");
    let rows: Vec<&str> = lines.collect();
    for row in &rows {
        let tps: f64 = row.rsplit(',').nth(2).unwrap().parse().unwrap();
        assert!(tps > 0.0, "{row}");
    }
    let svg = std::fs::read_to_string(out.join("suite.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let series = svg.matches(r#"class="series""#).count();
    assert!(series >= 2, "{series} series in suite.svg");
    // The suite's networks are gone.
    assert!(!out.join("net").exists(), "the network directory was left");
    rows.len()
}

#[test]
fn each_suite_writes_its_reports_into_one_directory_and_tears_its_networks_down() {
    let tmp = tempfile::tempdir().unwrap();

    let out = tmp.path().join("committer");
    let json = suite("committer", &out);
    // Bad signatures 0/20 %, double spends 0/20 %, one tx size, inputs/outputs 1 and 2.
    assert_eq!(check(&out, &json, 7), 7);
    let bad = &json["runs"][1]["summary"];
    assert!(
        bad["aborted"]["ABORTED_SIGNATURE_INVALID"].as_u64().unwrap() > 0,
        "{bad}"
    );
    let spends = &json["runs"][3]["summary"];
    assert!(
        spends["aborted"]["ABORTED_MVCC_CONFLICT"].as_u64().unwrap() > 0,
        "{spends}"
    );
    assert_eq!(json["runs"][0]["summary"]["serial_mismatches"], Value::Null);

    let out = tmp.path().join("ordering");
    let json = suite("ordering", &out);
    // One shape (4x1) in two rate steps: two points.
    assert_eq!(check(&out, &json, 1), 2);
    assert_eq!(json["runs"][0]["summary"]["confirmed_by"], "orderer");

    let out = tmp.path().join("e2e");
    let json = suite("e2e", &out);
    assert_eq!(check(&out, &json, 1), 2);
    let s = &json["runs"][0]["summary"];
    assert_eq!(s["confirmed_by"], "committer");
    assert_eq!(s["committed"], s["sent"], "{s}");
}
