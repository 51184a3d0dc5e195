//! The files of `--report DIR` (docs/loadgen.md "Reports"), rendered to strings: the
//! per-second CSV and a self-contained SVG with throughput and latency over time and,
//! with rate steps, the throughput–latency curve. Pure; the command writes the files.
//!
//! The SVG is written by hand (no font files, no plotting crate): plain `<text>`,
//! `<path>` and `<circle>` elements that any browser shows. Every series is a `<path>`
//! with `class="series"` and `data-series="<name>"` so tests and scripts can find it.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::series::{SecondRow, Series, StepRow};

/// The CSV column of an abort reason: `aborted_` and the status name without its
/// `ABORTED_` prefix, lower case (`ABORTED_MVCC_CONFLICT` → `aborted_mvcc_conflict`).
pub fn reason_column(status: &str) -> String {
    format!(
        "aborted_{}",
        status.strip_prefix("ABORTED_").unwrap_or(status).to_lowercase()
    )
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v}"))
}

/// `per_second.csv`: a header, then one row per second. Columns: `second, sent, acked,
/// confirmed, committed, ordered, aborted` (all reasons), one `aborted_<reason>` column
/// per reason seen in the run, then `p50_ms, p90_ms, p99_ms` (empty when nothing was
/// confirmed in that second).
pub fn csv(series: &Series) -> String {
    let reasons: BTreeSet<&String> = series.seconds.iter().flat_map(|r| r.aborted.keys()).collect();
    let mut out = String::from("second,sent,acked,confirmed,committed,ordered,aborted");
    for r in &reasons {
        out.push(',');
        out.push_str(&reason_column(r));
    }
    out.push_str(",p50_ms,p90_ms,p99_ms\n");
    for row in &series.seconds {
        let aborted: u64 = row.aborted.values().sum();
        let _ = write!(
            out,
            "{},{},{},{},{},{},{}",
            row.second, row.sent, row.acked, row.confirmed, row.committed, row.ordered, aborted
        );
        for r in &reasons {
            let _ = write!(out, ",{}", row.aborted.get(*r).copied().unwrap_or(0));
        }
        let _ = writeln!(
            out,
            ",{},{},{}",
            opt(row.p50_ms),
            opt(row.p90_ms),
            opt(row.p99_ms)
        );
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// About five round tick values from 0 to at least `max`.
fn ticks(max: f64) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n.max(1)).map(|i| i as f64 * step).collect()
}

fn label(v: f64) -> String {
    if v >= 10_000.0 && v % 1000.0 == 0.0 {
        format!("{}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// One series of a chart: points (`None` breaks the line) and how it looks.
struct Line<'a> {
    name: &'a str,
    color: &'a str,
    points: Vec<Option<(f64, f64)>>,
    /// Draw a marker on every point (and its label, if any).
    markers: Vec<String>,
}

/// A chart: a title, axis labels and its lines.
struct Chart<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    /// The x axis reaches at least this far (the run's length, on time charts).
    x_extent: f64,
    lines: Vec<Line<'a>>,
}

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Where a chart's plot area is on the page, and its scales.
struct Frame {
    y0: f64,
    x_max: f64,
    y_max: f64,
}

impl Frame {
    const PW: f64 = WIDTH - LEFT - RIGHT;
    const PH: f64 = HEIGHT - TOP - BOTTOM;

    fn px(&self, x: f64) -> f64 {
        LEFT + x / self.x_max * Frame::PW
    }

    fn py(&self, y: f64) -> f64 {
        self.y0 + TOP + Frame::PH - y / self.y_max * Frame::PH
    }
}

/// Draws `chart` into a `<g>` at vertical offset `y0`.
fn draw(out: &mut String, chart: &Chart<'_>, y0: f64) {
    let all = || chart.lines.iter().flat_map(|l| l.points.iter().flatten());
    let xs = ticks(all().map(|p| p.0).fold(chart.x_extent, f64::max));
    let ys = ticks(all().map(|p| p.1).fold(0.0, f64::max));
    let f = Frame {
        y0,
        x_max: xs.last().copied().unwrap_or(1.0),
        y_max: ys.last().copied().unwrap_or(1.0),
    };
    let _ = writeln!(out, r#"<g class="chart" data-chart="{}">"#, escape(chart.title));
    draw_axes(out, chart, &f, &xs, &ys);
    for (k, line) in chart.lines.iter().enumerate() {
        draw_line(out, line, k, &f);
    }
    out.push_str("</g>\n");
}

/// The title, grid, ticks and axis labels of a chart.
fn draw_axes(out: &mut String, chart: &Chart<'_>, f: &Frame, xs: &[f64], ys: &[f64]) {
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="16" font-weight="bold" text-anchor="middle">{}</text>"#,
        LEFT + Frame::PW / 2.0,
        f.y0 + 24.0,
        escape(chart.title)
    );
    for x in xs {
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#ddd"/><text x="{0:.1}" y="{3:.1}" font-size="11" text-anchor="middle">{4}</text>"##,
            f.px(*x),
            f.py(0.0),
            f.py(f.y_max),
            f.py(0.0) + 16.0,
            label(*x)
        );
    }
    for y in ys {
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" stroke="#ddd"/><text x="{3:.1}" y="{4:.1}" font-size="11" text-anchor="end">{5}</text>"##,
            f.px(0.0),
            f.py(*y),
            f.px(f.x_max),
            f.px(0.0) - 6.0,
            f.py(*y) + 4.0,
            label(*y)
        );
    }
    let _ = writeln!(
        out,
        r#"<path d="M{:.1},{:.1} V{:.1} H{:.1}" fill="none" stroke="black"/>"#,
        f.px(0.0),
        f.py(f.y_max),
        f.py(0.0),
        f.px(f.x_max)
    );
    let _ = writeln!(
        out,
        r#"<text class="axis-label" x="{:.1}" y="{:.1}" font-size="13" text-anchor="middle">{}</text>"#,
        LEFT + Frame::PW / 2.0,
        f.y0 + HEIGHT - 10.0,
        escape(chart.x_label)
    );
    let (lx, ly) = (18.0, f.y0 + TOP + Frame::PH / 2.0);
    let _ = writeln!(
        out,
        r#"<text class="axis-label" x="{lx}" y="{ly:.1}" font-size="13" text-anchor="middle" transform="rotate(-90 {lx} {ly:.1})">{}</text>"#,
        escape(chart.y_label)
    );
}

/// Line `k` of a chart: its path (broken where a point is missing), markers and legend.
fn draw_line(out: &mut String, line: &Line<'_>, k: usize, f: &Frame) {
    let mut d = String::new();
    let mut pen_down = false;
    for p in &line.points {
        match p {
            Some((x, y)) => {
                let pen = if pen_down { "L" } else { "M" };
                let _ = write!(d, "{pen}{:.1},{:.1} ", f.px(*x), f.py(*y));
                pen_down = true;
            }
            None => pen_down = false,
        }
    }
    let _ = writeln!(
        out,
        r#"<path class="series" data-series="{}" d="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
        escape(line.name),
        d.trim_end(),
        line.color
    );
    for (p, text) in line.points.iter().flatten().zip(line.markers.iter()) {
        let _ = writeln!(
            out,
            r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="10">{}</text>"#,
            f.px(p.0),
            f.py(p.1),
            line.color,
            f.px(p.0) + 6.0,
            f.py(p.1) - 6.0,
            escape(text)
        );
    }
    let ly = f.y0 + TOP + 10.0 + 20.0 * k as f64;
    let lx = WIDTH - RIGHT + 15.0;
    let _ = writeln!(
        out,
        r#"<line x1="{lx}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"/><text class="legend" x="{:.1}" y="{:.1}" font-size="12">{}</text>"#,
        lx + 20.0,
        line.color,
        lx + 26.0,
        ly + 4.0,
        escape(line.name)
    );
}

fn over_time<'a>(
    name: &'a str,
    color: &'a str,
    rows: &[SecondRow],
    f: impl Fn(&SecondRow) -> Option<f64>,
) -> Line<'a> {
    Line {
        name,
        color,
        // A row's value is plotted at the middle of its second.
        points: rows
            .iter()
            .map(|r| f(r).map(|v| (r.second as f64 + 0.5, v)))
            .collect(),
        markers: Vec::new(),
    }
}

/// The throughput–latency curve of the rate steps (none without steps): one point per
/// step, markers on both lines, the offered rate labelled on the p99 line.
fn steps_chart(steps: &[StepRow]) -> Option<Chart<'static>> {
    if steps.is_empty() {
        return None;
    }
    let step_line = |name, color, labelled: bool, f: fn(&StepRow) -> Option<f64>| Line {
        name,
        color,
        points: steps.iter().map(|s| f(s).map(|v| (s.tps, v))).collect(),
        markers: steps
            .iter()
            .filter(|s| f(s).is_some())
            .map(|s| {
                if labelled {
                    format!("{} tx/s offered", label(s.rate))
                } else {
                    String::new()
                }
            })
            .collect(),
    };
    let most = steps.iter().map(|s| s.tps).fold(0.0, f64::max);
    Some(Chart {
        title: "Throughput–latency across rate steps",
        x_label: "throughput (confirmed txs per second)",
        y_label: "latency (ms)",
        // Room for the labels right of the last point.
        x_extent: most * 1.15,
        lines: vec![
            step_line("step p50", "#1f77b4", false, |s| s.p50_ms),
            step_line("step p99", "#ff7f0e", true, |s| s.p99_ms),
        ],
    })
}

/// A self-contained SVG page: `title` on top, then the charts one below the other.
fn page(title: &str, charts: &[Chart<'_>]) -> String {
    let height = 40.0 + HEIGHT * charts.len() as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    out.push_str("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    let _ = writeln!(
        out,
        r#"<text x="{}" y="26" font-size="18" text-anchor="middle">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    for (i, chart) in charts.iter().enumerate() {
        draw(&mut out, chart, 40.0 + HEIGHT * i as f64);
    }
    out.push_str("</svg>\n");
    out
}

/// `report.svg`: throughput over time (series `sent`, `committed`, and `aborted` when
/// any tx aborted), latency over time (`p50`, `p99`), and with rate steps the
/// throughput–latency curve (`step p50`, `step p99`: one point per step at its
/// throughput, labelled with the offered rate). `title` heads the page.
pub fn svg(series: &Series, title: &str) -> String {
    let rows = &series.seconds;
    let mut throughput = vec![
        over_time("sent", "#1f77b4", rows, |r| Some(r.sent as f64)),
        over_time("committed", "#2ca02c", rows, |r| Some(r.committed as f64)),
    ];
    if rows.iter().any(|r| r.ordered > 0) {
        throughput.push(over_time("ordered", "#9467bd", rows, |r| Some(r.ordered as f64)));
    }
    if rows.iter().any(|r| !r.aborted.is_empty()) {
        throughput.push(over_time("aborted", "#d62728", rows, |r| {
            Some(r.aborted.values().sum::<u64>() as f64)
        }));
    }
    let mut charts = vec![
        Chart {
            title: "Throughput over time",
            x_label: "time since start (s)",
            y_label: "txs per second",
            x_extent: rows.len() as f64,
            lines: throughput,
        },
        Chart {
            title: "Latency over time (txs confirmed in each second)",
            x_label: "time since start (s)",
            y_label: "latency (ms)",
            x_extent: rows.len() as f64,
            lines: vec![
                over_time("p50", "#1f77b4", rows, |r| r.p50_ms),
                over_time("p99", "#ff7f0e", rows, |r| r.p99_ms),
            ],
        },
    ];
    charts.extend(steps_chart(&series.steps));
    page(title, &charts)
}

/// One measured point of a benchmark suite (`fabrx bench`).
#[derive(Debug, Clone, PartialEq)]
pub struct SuitePoint {
    /// The swept parameter (offered rate, share of bad signatures, tx size, …).
    pub x: f64,
    /// Confirmed txs per second.
    pub tps: f64,
    /// Committed txs per second.
    pub goodput_tps: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: Option<f64>,
}

/// One line of a panel: the points of one run or one sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteCurve {
    /// Its name in the legend.
    pub name: String,
    /// Its points, by x.
    pub points: Vec<SuitePoint>,
}

/// A panel of a suite's plot: one swept parameter, shown as throughput and p99 latency
/// against it.
#[derive(Debug, Clone, PartialEq)]
pub struct SuitePanel {
    /// Heads both charts.
    pub title: String,
    /// The swept parameter and its unit.
    pub x_label: String,
    /// Its lines.
    pub curves: Vec<SuiteCurve>,
}

const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// `suite.svg` of `fabrx bench`: for every panel, a chart of throughput and goodput
/// against its parameter (series `<curve> tps`, `<curve> goodput`) and one of p99
/// latency (series `<curve> p99`), markers on every point.
pub fn suite_svg(title: &str, panels: &[SuitePanel]) -> String {
    let titles: Vec<(String, String)> = panels
        .iter()
        .map(|p| {
            (
                format!("{}: throughput", p.title),
                format!("{}: p99 latency", p.title),
            )
        })
        .collect();
    let names: Vec<Vec<[String; 3]>> = panels
        .iter()
        .map(|p| {
            p.curves
                .iter()
                .map(|c| {
                    [
                        format!("{} tps", c.name),
                        format!("{} goodput", c.name),
                        format!("{} p99", c.name),
                    ]
                })
                .collect()
        })
        .collect();
    let mut charts = Vec::new();
    for (k, panel) in panels.iter().enumerate() {
        let mut throughput = Vec::new();
        let mut latency = Vec::new();
        for (j, c) in panel.curves.iter().enumerate() {
            let color = PALETTE[j % PALETTE.len()];
            let [tps, goodput, p99] = &names[k][j];
            let pts = |f: &dyn Fn(&SuitePoint) -> Option<f64>| -> Vec<Option<(f64, f64)>> {
                c.points.iter().map(|p| f(p).map(|v| (p.x, v))).collect()
            };
            let markers = |n: usize| vec![String::new(); n];
            throughput.push(Line {
                name: tps,
                color,
                points: pts(&|p| Some(p.tps)),
                markers: markers(c.points.len()),
            });
            if c.points.iter().any(|p| (p.goodput_tps - p.tps).abs() > 1e-9) {
                throughput.push(Line {
                    name: goodput,
                    color: PALETTE[(j + 4) % PALETTE.len()],
                    points: pts(&|p| Some(p.goodput_tps)),
                    markers: markers(c.points.len()),
                });
            }
            let p99_points = pts(&|p| p.p99_ms);
            let n = p99_points.iter().flatten().count();
            latency.push(Line {
                name: p99,
                color,
                points: p99_points,
                markers: markers(n),
            });
        }
        let x_extent = panel
            .curves
            .iter()
            .flat_map(|c| c.points.iter().map(|p| p.x))
            .fold(0.0, f64::max);
        charts.push(Chart {
            title: &titles[k].0,
            x_label: &panel.x_label,
            y_label: "txs per second",
            x_extent,
            lines: throughput,
        });
        charts.push(Chart {
            title: &titles[k].1,
            x_label: &panel.x_label,
            y_label: "p99 latency (ms)",
            x_extent,
            lines: latency,
        });
    }
    page(title, &charts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::{Recorder, Schedule};
    use std::time::Duration;

    fn run(schedule: &Schedule, n: u64) -> Series {
        let mut r = Recorder::new(schedule);
        for i in 0..n {
            let sent = schedule.due(i).unwrap_or(Duration::from_millis(i * 10));
            r.on_sent(sent, 1);
            r.on_acked(sent, 1);
            let status = if i % 7 == 0 {
                "ABORTED_MVCC_CONFLICT"
            } else {
                "COMMITTED"
            };
            r.on_final(sent + Duration::from_millis(30 + i % 50), sent, status, 1);
        }
        r.finish(Duration::from_secs(5))
    }

    #[test]
    fn suite_svg_has_two_charts_per_panel_and_a_series_per_curve() {
        let point = |x: f64, tps: f64, goodput: f64| SuitePoint {
            x,
            tps,
            goodput_tps: goodput,
            p99_ms: Some(x + 10.0),
        };
        let panels = vec![
            SuitePanel {
                title: "Bad signatures".into(),
                x_label: "share (%)".into(),
                curves: vec![SuiteCurve {
                    name: "committer".into(),
                    points: vec![point(0.0, 100.0, 100.0), point(10.0, 100.0, 90.0)],
                }],
            },
            SuitePanel {
                title: "Ordering <4x1 & 4x2>".into(),
                x_label: "offered (tx/s)".into(),
                curves: vec![
                    SuiteCurve {
                        name: "4x1".into(),
                        points: vec![point(100.0, 99.0, 99.0)],
                    },
                    SuiteCurve {
                        name: "4x2".into(),
                        points: vec![point(100.0, 98.0, 98.0)],
                    },
                ],
            },
        ];
        let text = suite_svg("suite", &panels);
        let doc = roxmltree::Document::parse(&text).unwrap();
        let charts = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("chart"))
            .count();
        assert_eq!(charts, 4);
        let series: Vec<&str> = doc
            .descendants()
            .filter_map(|n| n.attribute("data-series"))
            .collect();
        assert_eq!(
            series,
            vec![
                "committer tps",
                "committer goodput",
                "committer p99",
                "4x1 tps",
                "4x2 tps",
                "4x1 p99",
                "4x2 p99"
            ]
        );
    }

    #[test]
    fn csv_has_a_header_and_a_row_per_second() {
        let s = run(&Schedule::Fixed { rate: 100.0 }, 300);
        let text = csv(&s);
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(
            header,
            vec![
                "second",
                "sent",
                "acked",
                "confirmed",
                "committed",
                "ordered",
                "aborted",
                "aborted_mvcc_conflict",
                "p50_ms",
                "p90_ms",
                "p99_ms"
            ]
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 5);
        assert!(rows.iter().all(|r| r.len() == header.len()));
        let sum = |c: usize| rows.iter().map(|r| r[c].parse::<u64>().unwrap()).sum::<u64>();
        assert_eq!(sum(1), 300);
        assert_eq!(sum(4) + sum(6), 300);
        assert_eq!(sum(6), sum(7));
        assert_eq!(sum(6), 300u64.div_ceil(7));
        // Nothing confirmed in the last second: empty percentiles.
        assert_eq!(&rows[4][8..], &["", "", ""]);
        assert_eq!(reason_column("CODE_42"), "aborted_code_42");
    }

    #[test]
    fn svg_parses_and_names_its_series_and_axes() {
        let s = run(&Schedule::steps(&[50.0, 100.0, 200.0], 1.0).unwrap(), 350);
        assert_eq!(s.steps.len(), 3);
        let text = svg(&s, "loadgen committer <r1> & co");
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        let series: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .filter_map(|n| n.attribute("data-series"))
            .collect();
        assert_eq!(
            series,
            vec![
                "sent",
                "committed",
                "aborted",
                "p50",
                "p99",
                "step p50",
                "step p99"
            ]
        );
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        for want in [
            "time since start (s)",
            "txs per second",
            "latency (ms)",
            "throughput (confirmed txs per second)",
            "100 tx/s offered",
            "loadgen committer <r1> & co",
        ] {
            assert!(texts.contains(&want), "{want} missing");
        }
        // Each step is one point of the curve.
        let p99 = doc
            .descendants()
            .find(|n| n.attribute("data-series") == Some("step p99"))
            .unwrap();
        assert_eq!(p99.attribute("d").unwrap().matches(['M', 'L']).count(), 3);
        // Without steps, no curve.
        let plain = svg(&run(&Schedule::Unpaced, 100), "plain");
        let doc = roxmltree::Document::parse(&plain).unwrap();
        assert!(
            !doc.descendants()
                .any(|n| n.attribute("data-series") == Some("step p50"))
        );
    }

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        let t = ticks(0.0);
        assert_eq!((t.len(), t[1]), (6, 0.2));
        let t = ticks(1234.0);
        assert_eq!(t[1], 250.0);
        assert!(*t.last().unwrap() >= 1234.0);
        assert_eq!(label(20_000.0), "20k");
        assert_eq!(label(2.5), "2.5");
    }
}
