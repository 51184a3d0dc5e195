//! `fabrx loadgen merge` (docs/loadgen.md "Many load processes"): the report directories
//! of the cooperating instances of one network run (`--instance i --instances k`) become
//! one summary, one per-second series and one latency histogram. Pure: the command
//! reads the files and writes the result.
//!
//! - Counters (sent, submitted, committed, aborted by reason, …) are sums.
//! - The run's window runs from the earliest instance's start to the latest end, on the
//!   wall clock (`started_unix_ms`); `tps` and `goodput_tps` are the summed confirmations
//!   over that window.
//! - Whole-run latency percentiles are exact (to the histogram's 1.6 % buckets): the
//!   instances' histograms are merged.
//! - Per-second rows are aligned on the wall clock (each instance's rows shifted by the
//!   whole seconds between its start and the earliest start) and summed; their latency
//!   percentiles, and those of rate steps, are the highest of the instances' (an upper
//!   bound: the per-second histograms are not kept).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::Histogram;
use crate::histogram::SparseHistogram;
use crate::series::{MAX_SECONDS, SecondRow, Series, StepRow};

/// What an instance writes next to its summary (`raw.json`) so that it can be merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Raw {
    /// This instance's number, 1 to `instances`.
    pub instance: u32,
    /// Instances of the run.
    pub instances: u32,
    /// Wall-clock start of the load (first send), ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Send-to-confirmation latency of every confirmed tx, µs.
    pub latency_us: SparseHistogram,
    /// The per-second rows and rate steps.
    pub series: Series,
}

/// One instance's report: where it came from (for messages), its summary and raw data.
#[derive(Debug, Clone)]
pub struct Part {
    /// The directory it was read from.
    pub name: String,
    /// `summary.json`.
    pub summary: Value,
    /// `raw.json`.
    pub raw: Raw,
}

/// The merged run.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The merged summary line.
    pub summary: Value,
    /// The merged per-second rows and steps.
    pub series: Series,
}

/// Why parts cannot be merged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no reports to merge")]
    Empty,
    /// A part lacks a field or has one of the wrong type.
    #[error("{part}: {detail}")]
    Malformed {
        /// The part.
        part: String,
        /// What is wrong.
        detail: String,
    },
    /// The parts do not belong to one run.
    #[error("the reports are not of one run: {0}")]
    Mismatch(String),
}

fn malformed(part: &Part, detail: impl Into<String>) -> MergeError {
    MergeError::Malformed {
        part: part.name.clone(),
        detail: detail.into(),
    }
}

fn count(part: &Part, field: &str) -> Result<u64, MergeError> {
    part.summary[field]
        .as_u64()
        .ok_or_else(|| malformed(part, format!("summary field {field:?} is not a count")))
}

fn counts(part: &Part, field: &str) -> Result<BTreeMap<String, u64>, MergeError> {
    match &part.summary[field] {
        Value::Null => Ok(BTreeMap::new()),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| {
                v.as_u64()
                    .map(|n| (k.clone(), n))
                    .ok_or_else(|| malformed(part, format!("{field}.{k} is not a count")))
            })
            .collect(),
        _ => Err(malformed(
            part,
            format!("summary field {field:?} is not an object"),
        )),
    }
}

fn add_counts(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        let slot = into.entry(k.clone()).or_default();
        *slot = slot.saturating_add(*v);
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn round(v: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    (v * m).round() / m
}

/// The counters summed over the parts.
const SUMMED: [&str; 7] = [
    "sent",
    "submitted",
    "refused",
    "committed",
    "ordered",
    "confirmed",
    "never_confirmed",
];

/// The run's instance count and the instances given, once each, of one network run.
fn check_parts(parts: &[Part]) -> Result<(u32, BTreeSet<u32>), MergeError> {
    let first = parts.first().ok_or(MergeError::Empty)?;
    let instances = first.raw.instances;
    let mut seen = BTreeSet::new();
    for p in parts {
        for field in ["target", "confirmed_by"] {
            if p.summary[field] != first.summary[field] {
                return Err(MergeError::Mismatch(format!(
                    "{field} is {} in {} and {} in {}",
                    first.summary[field], first.name, p.summary[field], p.name
                )));
            }
        }
        if p.summary["target"] != "network" {
            return Err(malformed(p, "only --target network runs are merged"));
        }
        if p.raw.instances != instances {
            return Err(MergeError::Mismatch(format!(
                "{} says {} instances, {} says {instances}",
                p.name, p.raw.instances, first.name
            )));
        }
        if p.raw.instance == 0 || p.raw.instance > instances {
            return Err(malformed(
                p,
                format!("instance {} of {instances}", p.raw.instance),
            ));
        }
        if !seen.insert(p.raw.instance) {
            return Err(MergeError::Mismatch(format!(
                "instance {} given twice (the second time as {}): its txs would count twice",
                p.raw.instance, p.name
            )));
        }
    }
    Ok((instances, seen))
}

/// What the parts add up to.
struct Sums {
    totals: BTreeMap<&'static str, u64>,
    aborted: BTreeMap<String, u64>,
    router_errors: BTreeMap<String, u64>,
    refused_reasons: BTreeMap<String, u64>,
    decided_before_run: u64,
    latency: Histogram,
    expected_mismatches: Option<u64>,
    rate: Option<f64>,
    genesis: f64,
    cpu: Option<f64>,
    tags: Vec<Value>,
}

impl Sums {
    fn new() -> Sums {
        Sums {
            totals: BTreeMap::new(),
            aborted: BTreeMap::new(),
            router_errors: BTreeMap::new(),
            refused_reasons: BTreeMap::new(),
            decided_before_run: 0,
            latency: Histogram::new(),
            expected_mismatches: Some(0),
            rate: Some(0.0),
            genesis: 0.0,
            cpu: Some(0.0),
            tags: Vec::new(),
        }
    }

    fn add(&mut self, p: &Part) -> Result<(), MergeError> {
        for field in SUMMED {
            let slot = self.totals.entry(field).or_default();
            *slot = slot.saturating_add(count(p, field)?);
        }
        add_counts(&mut self.aborted, &counts(p, "aborted")?);
        add_counts(&mut self.router_errors, &counts(p, "router_errors")?);
        add_counts(&mut self.refused_reasons, &counts(p, "refused_reasons")?);
        // A report of a version without the field counts none.
        self.decided_before_run = self
            .decided_before_run
            .saturating_add(p.summary["decided_before_run"].as_u64().unwrap_or(0));
        let h = Histogram::from_sparse(&p.raw.latency_us)
            .ok_or_else(|| malformed(p, "raw.json: the latency histogram does not parse"))?;
        let confirmed = count(p, "confirmed")?;
        if h.count() != confirmed {
            return Err(malformed(
                p,
                format!("{} latencies for {confirmed} confirmed txs", h.count()),
            ));
        }
        self.latency.merge(&h);
        self.expected_mismatches = self
            .expected_mismatches
            .zip(p.summary["expected_mismatches"].as_u64())
            .map(|(a, b)| a.saturating_add(b));
        self.rate = self.rate.zip(p.summary["rate"].as_f64()).map(|(a, b)| a + b);
        self.cpu = self
            .cpu
            .zip(p.summary["client_cpu_seconds"].as_f64())
            .map(|(a, b)| a + b);
        self.genesis = self
            .genesis
            .max(p.summary["genesis_seconds"].as_f64().unwrap_or(0.0));
        self.tags.push(p.summary["tag"].clone());
        Ok(())
    }
}

/// Merges the reports of one run's instances.
pub fn merge(parts: &[Part]) -> Result<Merged, MergeError> {
    let first = parts.first().ok_or(MergeError::Empty)?;
    let (instances, seen) = check_parts(parts)?;
    let mut sums = Sums::new();
    for p in parts {
        sums.add(p)?;
    }
    let Sums {
        totals,
        aborted,
        router_errors,
        refused_reasons,
        decided_before_run,
        latency,
        expected_mismatches,
        rate,
        genesis,
        cpu,
        tags,
    } = sums;
    let start = parts.iter().map(|p| p.raw.started_unix_ms).min().unwrap_or(0);
    let end = parts
        .iter()
        .map(|p| {
            let secs = p.summary["seconds"].as_f64().unwrap_or(0.0).max(0.0);
            p.raw.started_unix_ms.saturating_add((secs * 1000.0) as u64)
        })
        .max()
        .unwrap_or(start);
    let seconds = end.saturating_sub(start) as f64 / 1000.0;
    let per_second = |n: u64| {
        if seconds > 0.0 {
            round(n as f64 / seconds, 1)
        } else {
            0.0
        }
    };
    let ms = |q: f64| latency.quantile(q).map(|us| round(us as f64 / 1000.0, 1));
    let total = |f: &str| totals.get(f).copied().unwrap_or(0);
    let missing: Vec<u32> = (1..=instances).filter(|i| !seen.contains(i)).collect();
    let mut summary = json!({
        "target": first.summary["target"],
        "confirmed_by": first.summary["confirmed_by"],
        "instances": instances,
        "merged": parts.len(),
        "missing_instances": missing,
        "aborted": aborted,
        "tps": per_second(total("confirmed")),
        "goodput_tps": per_second(total("committed")),
        "goodput": per_second(total("committed")),
        "p50_ms": ms(0.5),
        "p90_ms": ms(0.9),
        "p99_ms": ms(0.99),
        "max_ms": round(latency.max() as f64 / 1000.0, 1),
        "seconds": round(seconds, 3),
        "genesis_seconds": round(genesis, 3),
        "rate": rate,
        "router_errors": router_errors,
        "refused_reasons": refused_reasons,
        "decided_before_run": decided_before_run,
        "tags": tags,
        "expected_mismatches": expected_mismatches,
        "client_cpu_seconds": cpu.map(|c| round(c, 3)),
        "client_txs_per_cpu_second": cpu.filter(|c| *c > 0.0).map(|c| round(total("sent") as f64 / c, 1)),
    });
    for field in SUMMED {
        summary[field] = json!(total(field));
    }
    let series = merge_series(parts, start)?;
    if !series.steps.is_empty() {
        summary["steps"] = json!(series.steps);
    }
    Ok(Merged { summary, series })
}

/// The per-second rows aligned on the wall clock, and the steps by number.
fn merge_series(parts: &[Part], start: u64) -> Result<Series, MergeError> {
    let mut rows: Vec<SecondRow> = Vec::new();
    let mut steps: Vec<StepRow> = Vec::new();
    for p in parts {
        let shift = p.raw.started_unix_ms.saturating_sub(start) / 1000;
        for r in &p.raw.series.seconds {
            let second = r.second.saturating_add(shift);
            if second >= MAX_SECONDS {
                return Err(malformed(p, format!("second {second} is past a week")));
            }
            let i = usize::try_from(second).map_err(|_| malformed(p, "second out of range"))?;
            while rows.len() <= i {
                rows.push(SecondRow {
                    second: rows.len() as u64,
                    ..SecondRow::default()
                });
            }
            let row = &mut rows[i];
            row.sent = row.sent.saturating_add(r.sent);
            row.acked = row.acked.saturating_add(r.acked);
            row.confirmed = row.confirmed.saturating_add(r.confirmed);
            row.committed = row.committed.saturating_add(r.committed);
            row.ordered = row.ordered.saturating_add(r.ordered);
            add_counts(&mut row.aborted, &r.aborted);
            row.p50_ms = max_opt(row.p50_ms, r.p50_ms);
            row.p90_ms = max_opt(row.p90_ms, r.p90_ms);
            row.p99_ms = max_opt(row.p99_ms, r.p99_ms);
        }
        for s in &p.raw.series.steps {
            while steps.len() <= s.step {
                steps.push(StepRow {
                    step: steps.len(),
                    rate: 0.0,
                    seconds: s.seconds,
                    sent: 0,
                    confirmed: 0,
                    committed: 0,
                    tps: 0.0,
                    goodput_tps: 0.0,
                    p50_ms: None,
                    p90_ms: None,
                    p99_ms: None,
                });
            }
            let m = &mut steps[s.step];
            if (m.seconds - s.seconds).abs() > 1e-9 {
                return Err(MergeError::Mismatch(format!(
                    "step {} lasts {} s in {} and {} s elsewhere",
                    s.step, s.seconds, p.name, m.seconds
                )));
            }
            m.rate += s.rate;
            m.sent = m.sent.saturating_add(s.sent);
            m.confirmed = m.confirmed.saturating_add(s.confirmed);
            m.committed = m.committed.saturating_add(s.committed);
            m.p50_ms = max_opt(m.p50_ms, s.p50_ms);
            m.p90_ms = max_opt(m.p90_ms, s.p90_ms);
            m.p99_ms = max_opt(m.p99_ms, s.p99_ms);
        }
    }
    for m in &mut steps {
        if m.seconds > 0.0 {
            m.tps = m.confirmed as f64 / m.seconds;
            m.goodput_tps = m.committed as f64 / m.seconds;
        }
    }
    if rows.is_empty() {
        rows.push(SecondRow::default());
    }
    Ok(Series { seconds: rows, steps })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(instance: u32, started: u64, sent: u64, latencies: &[u64]) -> Part {
        let mut h = Histogram::new();
        for l in latencies {
            h.record(*l, 1);
        }
        let confirmed = latencies.len() as u64;
        Part {
            name: format!("dir{instance}"),
            summary: json!({
                "target": "network", "confirmed_by": "committer",
                "sent": sent, "submitted": sent, "refused": 0, "committed": confirmed - 1,
                "ordered": 0, "confirmed": confirmed, "never_confirmed": sent - confirmed,
                "aborted": {"ABORTED_MVCC_CONFLICT": 1},
                "router_errors": {}, "seconds": 2.0, "genesis_seconds": 0.5,
                "rate": 100.0, "tag": format!("t_{instance}"), "expected_mismatches": null,
                "client_cpu_seconds": 0.5,
            }),
            raw: Raw {
                instance,
                instances: 2,
                started_unix_ms: started,
                latency_us: h.to_sparse(),
                series: Series {
                    seconds: vec![
                        SecondRow {
                            second: 0,
                            sent,
                            confirmed: confirmed - 1,
                            committed: confirmed - 1,
                            p99_ms: Some(instance as f64),
                            ..SecondRow::default()
                        },
                        SecondRow {
                            second: 1,
                            confirmed: 1,
                            aborted: BTreeMap::from([("ABORTED_MVCC_CONFLICT".into(), 1)]),
                            ..SecondRow::default()
                        },
                    ],
                    steps: Vec::new(),
                },
            },
        }
    }

    #[test]
    fn totals_are_sums_and_latency_is_of_all_txs() {
        let a = part(1, 10_000, 10, &[1000, 2000, 3000, 4000]);
        let b = part(2, 11_500, 6, &[50_000, 60_000]);
        let m = merge(&[a, b]).unwrap();
        let s = &m.summary;
        assert_eq!(s["sent"], 16);
        assert_eq!(s["confirmed"], 6);
        assert_eq!(s["committed"], 4);
        assert_eq!(s["never_confirmed"], 10);
        assert_eq!(s["aborted"]["ABORTED_MVCC_CONFLICT"], 2);
        assert_eq!(s["instances"], 2);
        assert_eq!(s["missing_instances"], json!([]));
        assert_eq!(s["tags"], json!(["t_1", "t_2"]));
        assert_eq!(s["rate"], 200.0);
        // Window: 10.0 s to 13.5 s on the wall clock.
        assert_eq!(s["seconds"], 3.5);
        assert_eq!(s["tps"], round(6.0 / 3.5, 1));
        assert_eq!(s["p50_ms"], 3.0);
        assert_eq!(s["max_ms"], 60.0);
        assert_eq!(s["client_txs_per_cpu_second"], 16.0);
        // Instance 2 started 1.5 s later: its rows move one second.
        let rows = &m.series.seconds;
        assert_eq!(rows.len(), 3);
        assert_eq!(rows.iter().map(|r| r.sent).collect::<Vec<_>>(), vec![10, 6, 0]);
        assert_eq!(rows[1].confirmed, 1 + 1);
        assert_eq!(rows[1].p99_ms, Some(2.0));
        let confirmed: u64 = rows.iter().map(|r| r.confirmed).sum();
        assert_eq!(confirmed, 6);
    }

    #[test]
    fn parts_of_different_runs_or_twice_the_same_are_refused() {
        let a = part(1, 0, 10, &[1, 2]);
        assert!(
            matches!(merge(&[a.clone(), a.clone()]), Err(MergeError::Mismatch(m)) if m.contains("twice"))
        );
        let mut other = part(2, 0, 10, &[1]);
        other.raw.instances = 3;
        assert!(matches!(merge(&[a.clone(), other]), Err(MergeError::Mismatch(_))));
        let mut ordering = part(2, 0, 10, &[1]);
        ordering.summary["confirmed_by"] = json!("orderer");
        assert!(matches!(
            merge(&[a.clone(), ordering]),
            Err(MergeError::Mismatch(_))
        ));
        let mut lying = part(2, 0, 10, &[1, 2]);
        lying.summary["confirmed"] = json!(5);
        assert!(matches!(
            merge(&[a.clone(), lying]),
            Err(MergeError::Malformed { .. })
        ));
        let mut broken = part(2, 0, 10, &[1]);
        broken.summary["sent"] = json!("many");
        assert!(matches!(
            merge(&[a.clone(), broken]),
            Err(MergeError::Malformed { .. })
        ));
        assert_eq!(merge(&[]).unwrap_err(), MergeError::Empty);
        // One of two: merged, and the missing instance is named.
        let m = merge(&[a]).unwrap();
        assert_eq!(m.summary["missing_instances"], json!([2]));
    }
}
