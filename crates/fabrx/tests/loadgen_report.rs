//! `fabrx loadgen --report DIR` and `--rates … --step-seconds …` on the committer target
//! (docs/loadgen.md "Reports" and "Rate steps"): the CSV adds up to the summary, the SVG
//! is well-formed XML with the documented series, rate steps give one summary entry each,
//! and senseless combinations are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
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

/// The CSV as a header and rows of cells.
fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(str::to_string).collect();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{r:?}");
    }
    (header, rows)
}

fn column_sum(header: &[String], rows: &[Vec<String>], name: &str) -> u64 {
    let c = header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    rows.iter().map(|r| r[c].parse::<u64>().unwrap()).sum()
}

/// A small XML reader: checks that tags nest and close, attributes are quoted and text
/// holds no raw `<` or bare `&`; returns every element as (name, attributes, text).
fn parse_xml(s: &str) -> Vec<(String, HashMap<String, String>, String)> {
    let mut out: Vec<(String, HashMap<String, String>, String)> = Vec::new();
    let mut open: Vec<(String, usize)> = Vec::new();
    let mut rest = s;
    while let Some(lt) = rest.find('<') {
        let text = &rest[..lt];
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&#"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "bare & in {text:?}"
            );
        }
        if let Some((_, idx)) = open.last() {
            out[*idx].2.push_str(text);
        }
        let gt = rest[lt..].find('>').expect("unclosed tag") + lt;
        let tag = &rest[lt + 1..gt];
        assert!(!tag.contains('<'), "< inside a tag: {tag:?}");
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let (top, _) = open.pop().unwrap_or_else(|| panic!("</{name}> closes nothing"));
            assert_eq!(top, name, "</{name}> closes <{top}>");
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let (name, mut attrs_text) = tag.split_once(' ').unwrap_or((tag, ""));
        let mut attrs = HashMap::new();
        loop {
            attrs_text = attrs_text.trim_start();
            if attrs_text.is_empty() {
                break;
            }
            let (key, after) = attrs_text
                .split_once("=\"")
                .expect("attribute without a quoted value");
            let (value, after) = after.split_once('"').expect("unterminated attribute");
            assert!(!value.contains('<'), "< in attribute {key}");
            attrs.insert(key.to_string(), value.to_string());
            attrs_text = after;
        }
        out.push((name.to_string(), attrs, String::new()));
        if !self_closing {
            open.push((name.to_string(), out.len() - 1));
        }
    }
    assert!(open.is_empty(), "unclosed elements: {open:?}");
    assert!(rest.trim().is_empty(), "text after the root: {rest:?}");
    assert_eq!(
        out.first().map(|e| e.0.as_str()),
        Some("svg"),
        "the root is <svg>"
    );
    out
}

fn series_of(svg: &[(String, HashMap<String, String>, String)]) -> Vec<String> {
    svg.iter()
        .filter(|(n, a, _)| n == "path" && a.get("class").map(String::as_str) == Some("series"))
        .map(|(_, a, _)| a["data-series"].clone())
        .collect()
}

#[test]
fn report_csv_adds_up_to_the_summary_and_the_svg_has_its_series() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("out");
    let out = fabrx(&[
        "loadgen",
        "--target",
        "committer",
        "--blocks",
        "8",
        "--block-size",
        "25",
        "--conflict-rate",
        "0.2",
        "--invalid-sig-rate",
        "0.1",
        "--json",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = last_json(&out);
    // summary.json is the summary line.
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("summary.json")).unwrap()).unwrap();
    assert_eq!(saved, summary);
    assert!(summary.get("steps").is_none(), "no steps without --rates");

    let (header, rows) = read_csv(&report.join("per_second.csv"));
    assert!(!rows.is_empty());
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r[0], i.to_string(), "one row per second, in order");
    }
    let n = |f: &str| summary[f].as_u64().unwrap();
    assert_eq!(column_sum(&header, &rows, "committed"), n("committed"));
    assert_eq!(column_sum(&header, &rows, "confirmed"), n("txs"));
    assert_eq!(column_sum(&header, &rows, "sent"), n("txs"));
    assert_eq!(column_sum(&header, &rows, "acked"), n("txs"));
    assert_eq!(
        column_sum(&header, &rows, "aborted_mvcc_conflict"),
        n("mvcc_conflict")
    );
    assert_eq!(
        column_sum(&header, &rows, "aborted_signature_invalid"),
        n("signature_invalid")
    );
    assert_eq!(
        column_sum(&header, &rows, "aborted"),
        n("mvcc_conflict") + n("signature_invalid")
    );

    let svg = std::fs::read_to_string(report.join("report.svg")).unwrap();
    let elements = parse_xml(&svg);
    assert_eq!(
        series_of(&elements),
        vec!["sent", "committed", "aborted", "p50", "p99"]
    );
    let texts: Vec<&str> = elements.iter().map(|e| e.2.as_str()).collect();
    for label in [
        "Throughput over time",
        "time since start (s)",
        "txs per second",
        "latency (ms)",
    ] {
        assert!(texts.iter().any(|t| t.contains(label)), "{label} missing");
    }
    // The committed line has one point per second.
    let committed = elements
        .iter()
        .find(|(_, a, _)| a.get("data-series").map(String::as_str) == Some("committed"))
        .unwrap();
    assert_eq!(committed.1["d"].matches(['M', 'L']).count(), rows.len());
}

#[test]
fn rate_steps_give_one_summary_entry_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("steps");
    let out = fabrx(&[
        "loadgen",
        "--target",
        "committer",
        "--block-size",
        "10",
        "--rates",
        "40,80,160",
        "--step-seconds",
        "1",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("step 2 at 160 tx/s"), "{stdout}");
    let summary = last_json(&out);
    assert_eq!(summary["txs"], 280, "the steps send 40 + 80 + 160 txs");
    let steps = summary["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    for (k, (s, rate)) in steps.iter().zip([40.0, 80.0, 160.0]).enumerate() {
        assert_eq!(s["step"], k);
        assert_eq!(s["rate"].as_f64().unwrap(), rate);
        assert_eq!(s["seconds"].as_f64().unwrap(), 1.0);
        // Open loop: each step sends its rate × its length.
        assert_eq!(s["sent"].as_f64().unwrap(), rate, "{s}");
        let (confirmed, tps) = (s["confirmed"].as_f64().unwrap(), s["tps"].as_f64().unwrap());
        assert!((tps - confirmed).abs() < 1e-9, "tps is confirmed / 1 s: {s}");
        assert!(confirmed <= 280.0 && s["goodput_tps"].as_f64().unwrap() <= tps);
        let (p50, p99) = (s["p50_ms"].as_f64().unwrap(), s["p99_ms"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{s}");
    }
    // The steps cover the run: three seconds of the series, plus a last partial one.
    let (header, rows) = read_csv(&report.join("per_second.csv"));
    assert!((3..=5).contains(&rows.len()), "{rows:?}");
    assert_eq!(column_sum(&header, &rows, "sent"), 280);
    assert_eq!(
        column_sum(&header, &rows, "committed"),
        summary["committed"].as_u64().unwrap()
    );
    let sent: Vec<u64> = rows.iter().map(|r| r[1].parse().unwrap()).collect();
    assert_eq!(&sent[..3], &[40, 80, 160], "sent per second follows the steps");
    let elements = parse_xml(&std::fs::read_to_string(report.join("report.svg")).unwrap());
    let series = series_of(&elements);
    assert!(series.contains(&"step p99".to_string()), "{series:?}");
    let texts: Vec<&str> = elements.iter().map(|e| e.2.as_str()).collect();
    for label in ["throughput (confirmed txs per second)", "160 tx/s offered"] {
        assert!(texts.contains(&label), "{label} missing");
    }
}

#[test]
fn senseless_rate_combinations_are_refused() {
    let base = ["loadgen", "--target", "committer", "--block-size", "10"];
    let cases: &[(&[&str], &str)] = &[
        (&["--rates", "100,200"], "--step-seconds"),
        (&["--step-seconds", "5"], "needs --rates"),
        (
            &["--rates", "100", "--step-seconds", "1", "--rate", "50"],
            "--rate",
        ),
        (
            &["--rates", "100", "--step-seconds", "1", "--blocks", "3"],
            "--blocks",
        ),
        (&["--rates", "100", "--step-seconds", "1", "--txs", "3"], "--txs"),
        (
            &["--rates", "100", "--step-seconds", "1", "--duration", "3"],
            "--duration",
        ),
        (&["--rates", "100,0", "--step-seconds", "1"], "rates"),
        (&["--rates", "100,NaN", "--step-seconds", "1"], "rates"),
        (&["--rates", "100", "--step-seconds", "0"], "step-seconds"),
        (&["--rates", "5", "--step-seconds", "1"], "less than one block"),
        (&["--rate", "0"], "--rate"),
    ];
    for (extra, needle) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let out = fabrx(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} accepted");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{extra:?}: {stderr}");
    }
    let out = fabrx(&[
        "loadgen",
        "--target",
        "mock-orderer",
        "--network",
        "/nonexistent",
        "--rates",
        "100",
        "--step-seconds",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not supported with --target mock-orderer"));
}
