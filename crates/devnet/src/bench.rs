//! `fabrx bench ordering|committer|e2e` (docs/benchmarks.md "Suites"): a named sweep run
//! end to end — start the network, warm up, load, collect, tear down — with every run's
//! report and the suite's table and plot in one directory.
//!
//! The plan (which networks, which loads, which point each run gives) is pure and
//! unit-tested; the shell runs the calling binary's `fabrx up`, `fabrx loadgen` and
//! `fabrx down` as child processes, so a suite measures exactly what a user runs.
//!
//! [`vc`] is `fabrx bench vc`: the validator-committer alone, in this process.

pub mod vc;

use crate::{Error, Result};
use loadgen::report::{SuiteCurve, SuitePanel, SuitePoint};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Which suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// The ordering service alone (`fabrx up --committers 0`), parties × shards, rate
    /// steps.
    Ordering,
    /// The committer (sidecar, verifier, validator-committer as processes behind the
    /// mock orderer, or in one process): bad signatures, double spends, tx size,
    /// inputs and outputs per tx.
    Committer,
    /// The whole network: transfers through routers, batchers, consenters, assemblers
    /// and the committer, rate steps.
    E2e,
}

impl Suite {
    fn name(self) -> &'static str {
        match self {
            Suite::Ordering => "ordering",
            Suite::Committer => "committer",
            Suite::E2e => "e2e",
        }
    }
}

/// What a suite is asked for (`fabrx bench <suite>` flags).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Where the suite writes (created; existing run directories are replaced).
    pub out: Option<PathBuf>,
    /// Small and fast: a first look, or a test.
    pub quick: bool,
    /// Offered rates of the network suites, txs per second [default: per suite].
    pub rates: Vec<f64>,
    /// Length of each rate step, seconds [default: 10; --quick: 2].
    pub step_seconds: Option<f64>,
    /// Ordering suite: the network shapes, parties x shards [default: 4x1,4x2].
    pub shapes: Vec<String>,
    /// Size of each load tx's envelope in the network suites, bytes.
    pub tx_size: usize,
    /// Committer suite: load blocks of 500 txs per run [default: 100; --quick: 4 of 50].
    pub blocks: Option<usize>,
    /// Committer suite: the committer in this process (`--target committer`) instead
    /// of its processes behind the mock orderer.
    pub in_process: bool,
    /// Namespace signature scheme of the load: ed25519, ecdsa-p256 or bls-threshold.
    pub scheme: String,
    /// The committers' database (committer and e2e suites): a PostgreSQL URL naming a
    /// database NAME on a server this user may create databases on; each network gets a
    /// fresh database NAME_bK, dropped after it [default: the embedded store].
    pub db: Option<String>,
    /// First port of the suite's networks.
    pub base_port: u16,
    /// Keep each network's directory (logs, data) after its runs.
    pub keep: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            out: None,
            quick: false,
            rates: Vec::new(),
            step_seconds: None,
            shapes: Vec::new(),
            tx_size: 300,
            blocks: None,
            in_process: false,
            scheme: "ed25519".into(),
            db: None,
            base_port: 27050,
            keep: false,
        }
    }
}

/// The network a run needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPlan {
    parties: u32,
    shards: u32,
    committers: u32,
    /// `fabrx up --no-orderer`: the committer alone, fed by the mock orderer.
    no_orderer: bool,
    /// Start it anew for this run (the mock orderer serves blocks from the start).
    fresh: bool,
}

/// One load run of a suite.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPlan {
    /// Its directory under `runs/`.
    name: String,
    /// The panel of the plot it belongs to.
    panel: usize,
    /// Its line in that panel.
    curve: String,
    /// Its point's x; `None`: one point per rate step at the offered rate.
    x: Option<f64>,
    network: Option<NetPlan>,
    /// Flags of `fabrx loadgen` (without `--network`, `--report`, `--json`).
    loadgen: Vec<String>,
    /// Flags of a warm-up load run first on a network started for this run.
    warmup: Option<Vec<String>>,
}

/// What a suite runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    title: String,
    /// Title and x label of each panel.
    panels: Vec<(String, String)>,
    runs: Vec<RunPlan>,
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_string()).collect()
}

fn join(rates: &[f64]) -> String {
    rates.iter().map(f64::to_string).collect::<Vec<_>>().join(",")
}

fn shape(text: &str) -> Result<(u32, u32)> {
    let bad = || Error::Usage(format!("shape {text:?}: write parties x shards, e.g. 4x2"));
    let (p, s) = text.split_once('x').ok_or_else(bad)?;
    let (p, s): (u32, u32) = (
        p.trim().parse().map_err(|_| bad())?,
        s.trim().parse().map_err(|_| bad())?,
    );
    if !((1..=16).contains(&p) && (1..=8).contains(&s)) {
        return Err(Error::Usage(format!(
            "shape {text:?}: 1 to 16 parties, 1 to 8 shards"
        )));
    }
    Ok((p, s))
}

/// The runs of `suite` with `opts`.
pub fn plan(suite: Suite, opts: &Options) -> Result<Plan> {
    let step = opts.step_seconds.unwrap_or(if opts.quick { 2.0 } else { 10.0 });
    if !(step.is_finite() && step > 0.0) {
        return Err(Error::Usage(
            "invalid --step-seconds: must be a positive number of seconds".into(),
        ));
    }
    let rates = |default: &[f64], quick: &[f64]| -> Vec<f64> {
        if !opts.rates.is_empty() {
            opts.rates.clone()
        } else if opts.quick {
            quick.to_vec()
        } else {
            default.to_vec()
        }
    };
    let stepped = |rates: &[f64]| {
        let mut a = args(&["--target", "network", "--rates"]);
        a.push(join(rates));
        a.extend(["--step-seconds".into(), step.to_string()]);
        a.extend(["--tx-size".into(), opts.tx_size.to_string()]);
        a.extend(["--scheme".into(), opts.scheme.clone()]);
        a
    };
    let warmup = |txs: u32, rate: u32| {
        let mut a = args(&["--target", "network", "--txs"]);
        a.extend([txs.to_string(), "--rate".into(), rate.to_string()]);
        a.extend(["--tx-size".into(), opts.tx_size.to_string()]);
        a.extend(["--scheme".into(), opts.scheme.clone()]);
        a
    };
    let (warm_txs, warm_rate) = if opts.quick { (100, 100) } else { (2000, 1000) };
    Ok(match suite {
        Suite::Ordering => ordering_plan(
            opts,
            &rates(&[2000.0, 4000.0, 6000.0, 8000.0, 10000.0], &[200.0, 400.0]),
            &stepped,
            &warmup(warm_txs, warm_rate),
        )?,
        Suite::E2e => e2e_plan(
            &stepped(&rates(&[1000.0, 2000.0, 3000.0, 4000.0], &[100.0, 200.0])),
            &warmup(warm_txs, warm_rate),
        ),
        Suite::Committer => committer_plan(opts),
    })
}

/// One network per shape, ordering only, in rate steps.
fn ordering_plan(
    opts: &Options,
    rates: &[f64],
    stepped: &dyn Fn(&[f64]) -> Vec<String>,
    warmup: &[String],
) -> Result<Plan> {
    let shapes = if !opts.shapes.is_empty() {
        opts.shapes.clone()
    } else if opts.quick {
        vec!["4x1".into()]
    } else {
        vec!["4x1".into(), "4x2".into()]
    };
    let mut runs = Vec::new();
    for s in &shapes {
        let (parties, shards) = shape(s)?;
        runs.push(RunPlan {
            name: format!("ordering-{parties}x{shards}"),
            panel: 0,
            curve: format!("{parties}x{shards}"),
            x: None,
            network: Some(NetPlan {
                parties,
                shards,
                committers: 0,
                no_orderer: false,
                fresh: true,
            }),
            loadgen: stepped(rates),
            warmup: Some(warmup.to_vec()),
        });
    }
    Ok(Plan {
        title: "fabrx bench ordering: the ordering service alone (parties x shards)".into(),
        panels: vec![(
            format!("Ordering, {}-byte txs", opts.tx_size),
            "offered load (tx/s)".into(),
        )],
        runs,
    })
}

/// The default network with a committing party, in rate steps.
fn e2e_plan(loadgen: &[String], warmup: &[String]) -> Plan {
    Plan {
        title: "fabrx bench e2e: transfers through the whole network".into(),
        panels: vec![(
            "End to end, 4 parties × 2 shards, one committing party".into(),
            "offered load (tx/s)".into(),
        )],
        runs: vec![RunPlan {
            name: "e2e-4x2".into(),
            panel: 0,
            curve: "4x2".into(),
            x: None,
            network: Some(NetPlan {
                parties: 4,
                shards: 2,
                committers: 1,
                no_orderer: false,
                fresh: true,
            }),
            loadgen: loadgen.to_vec(),
            warmup: Some(warmup.to_vec()),
        }],
    }
}

/// The committer's sweeps (the shapes of the Fabric-X paper's Figure 8, and inputs and
/// outputs per tx).
fn committer_plan(opts: &Options) -> Plan {
    let (blocks, block_size) = match (opts.blocks, opts.quick) {
        (Some(b), _) => (b, 500),
        (None, true) => (4, 50),
        (None, false) => (100, 500),
    };
    let base = {
        let mut a = if opts.in_process {
            let mut a = args(&["--target", "committer", "--max-pending", "5000"]);
            if let Some(url) = &opts.db {
                a.extend(["--db".into(), url.clone()]);
            }
            a
        } else {
            args(&["--target", "mock-orderer"])
        };
        a.extend(["--blocks".into(), blocks.to_string()]);
        a.extend(["--block-size".into(), block_size.to_string()]);
        a.extend(["--scheme".into(), opts.scheme.clone()]);
        a
    };
    let network = (!opts.in_process).then_some(NetPlan {
        parties: 4,
        shards: 1,
        committers: 1,
        no_orderer: true,
        fresh: true,
    });
    let (curve, mode) = if opts.in_process {
        ("committer", "the committer in one process")
    } else {
        (
            "committer",
            "sidecar, verifier and validator-committer processes behind the mock orderer",
        )
    };
    let runs = committer_runs(opts, &base, network.as_ref(), curve);
    Plan {
        title: format!(
            "fabrx bench committer: {mode}, {}, {}, {} txs per run",
            opts.db.as_ref().map_or("embedded store", |_| "PostgreSQL"),
            opts.scheme,
            blocks * block_size
        ),
        panels: vec![
            ("Bad signatures".into(), "txs with a bad signature (%)".into()),
            ("Double spends".into(), "txs spending a spent coin (%)".into()),
            ("Tx size".into(), "tx size (bytes, requested)".into()),
            (
                "Inputs and outputs".into(),
                "coins spent = coins created per tx".into(),
            ),
        ],
        runs,
    }
}

/// The committer's runs: one per swept value, each on `network` (fresh) if any.
fn committer_runs(opts: &Options, base: &[String], network: Option<&NetPlan>, curve: &str) -> Vec<RunPlan> {
    let shares: &[u32] = if opts.quick { &[0, 20] } else { &[0, 10, 20, 30] };
    let sizes: &[usize] = if opts.quick {
        &[512]
    } else {
        &[256, 512, 1024, 2048]
    };
    let ios: &[usize] = if opts.quick { &[1, 2] } else { &[1, 2, 3, 4] };
    let mut runs = Vec::new();
    let mut run = |name: String, panel: usize, x: f64, extra: Vec<String>| {
        let mut loadgen = base.to_vec();
        loadgen.extend(extra);
        runs.push(RunPlan {
            name,
            panel,
            curve: curve.into(),
            x: Some(x),
            network: network.cloned(),
            loadgen,
            warmup: None,
        });
    };
    for &p in shares {
        let rate = (f64::from(p) / 100.0).to_string();
        run(
            format!("bad-signatures-{p}"),
            0,
            f64::from(p),
            vec!["--invalid-sig-rate".into(), rate],
        );
    }
    for &p in shares {
        let rate = (f64::from(p) / 100.0).to_string();
        run(
            format!("double-spends-{p}"),
            1,
            f64::from(p),
            vec!["--conflict-rate".into(), rate],
        );
    }
    for &size in sizes {
        run(
            format!("tx-size-{size}"),
            2,
            size as f64,
            vec!["--tx-size".into(), size.to_string()],
        );
    }
    for &k in ios {
        run(
            format!("inputs-outputs-{k}"),
            3,
            k as f64,
            vec![
                "--reads".into(),
                k.to_string(),
                "--writes".into(),
                (2 * k).to_string(),
            ],
        );
    }
    runs
}

/// The points a run's summary line gives: one at the run's x, or one per rate step at
/// its offered rate.
/// Without a committer every confirmed tx is good (`ORDERED`): goodput is throughput.
pub fn points(run: &RunPlan, summary: &Value) -> Vec<SuitePoint> {
    let ordering_only = run.network.as_ref().is_some_and(|n| n.committers == 0);
    let point = |x: f64, v: &Value| {
        let tps = v["tps"].as_f64().unwrap_or(0.0);
        SuitePoint {
            x,
            tps,
            goodput_tps: if ordering_only {
                tps
            } else {
                v["goodput_tps"].as_f64().unwrap_or(0.0)
            },
            p99_ms: v["p99_ms"].as_f64(),
        }
    };
    match run.x {
        Some(x) => vec![point(x, summary)],
        None => summary["steps"]
            .as_array()
            .map(|steps| {
                steps
                    .iter()
                    .map(|s| point(s["rate"].as_f64().unwrap_or(0.0), s))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The panels of the plot from the runs' points.
fn panels(plan: &Plan, measured: &[(RunPlan, Vec<SuitePoint>)]) -> Vec<SuitePanel> {
    plan.panels
        .iter()
        .enumerate()
        .map(|(k, (title, x_label))| {
            let mut curves: Vec<SuiteCurve> = Vec::new();
            for (run, pts) in measured.iter().filter(|(r, _)| r.panel == k) {
                match curves.iter_mut().find(|c| c.name == run.curve) {
                    Some(c) => c.points.extend(pts.iter().cloned()),
                    None => curves.push(SuiteCurve {
                        name: run.curve.clone(),
                        points: pts.clone(),
                    }),
                }
            }
            for c in &mut curves {
                c.points.sort_by(|a, b| a.x.total_cmp(&b.x));
            }
            SuitePanel {
                title: title.clone(),
                x_label: x_label.clone(),
                curves,
            }
        })
        .collect()
}

/// A CSV field in double quotes (a quote inside doubled).
fn quote(field: &str) -> String {
    format!("\"{}\"", field.replace('"', "\"\""))
}

/// `suite.csv`: one row per point.
fn suite_csv(plan: &Plan, measured: &[(RunPlan, Vec<SuitePoint>)]) -> String {
    let mut out = String::from("panel,curve,run,x,tps,goodput_tps,p99_ms\n");
    for (run, pts) in measured {
        for p in pts {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{}",
                quote(&plan.panels[run.panel].0),
                quote(&run.curve),
                run.name,
                p.x,
                p.tps,
                p.goodput_tps,
                p.p99_ms.map_or_else(String::new, |v| v.to_string())
            );
        }
    }
    out
}

/// CPU used by the nodes of one role during a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RoleCpu {
    /// Nodes of the role that were measured.
    pub nodes: usize,
    /// CPU seconds (user + system) all of them used.
    pub cpu_seconds: f64,
    /// `cpu_seconds` per confirmed tx, in microseconds.
    pub us_per_tx: f64,
}

/// One node's CPU reading: its role, party, pid and clock ticks (1/100 s).
pub type CpuSample = (String, u32, u64, u64);

/// CPU per role between two samples, over `txs` confirmed txs; a node missing from
/// either sample (restarted, gone) is left out.
pub fn cpu_per_role(
    before: &[CpuSample],
    after: &[CpuSample],
    txs: u64,
) -> std::collections::BTreeMap<String, RoleCpu> {
    cpu_by(before, after, txs, |role, _| role.to_string())
}

/// The same per party (`party 1`, …): what each party's machines spend per tx, for
/// sizing them (docs/benchmarks.md).
pub fn cpu_per_party(
    before: &[CpuSample],
    after: &[CpuSample],
    txs: u64,
) -> std::collections::BTreeMap<String, RoleCpu> {
    cpu_by(before, after, txs, |_, party| format!("party {party}"))
}

fn cpu_by(
    before: &[CpuSample],
    after: &[CpuSample],
    txs: u64,
    key: impl Fn(&str, u32) -> String,
) -> std::collections::BTreeMap<String, RoleCpu> {
    let mut out: std::collections::BTreeMap<String, RoleCpu> = std::collections::BTreeMap::new();
    for (role, party, pid, end) in after {
        let Some((_, _, _, start)) = before.iter().find(|(r, _, p, _)| r == role && p == pid) else {
            continue;
        };
        let e = out.entry(key(role, *party)).or_insert(RoleCpu {
            nodes: 0,
            cpu_seconds: 0.0,
            us_per_tx: 0.0,
        });
        e.nodes += 1;
        e.cpu_seconds += end.saturating_sub(*start) as f64 / crate::cpu::TICKS_PER_SECOND;
    }
    for e in out.values_mut() {
        e.cpu_seconds = (e.cpu_seconds * 100.0).round() / 100.0;
        if txs > 0 {
            e.us_per_tx = (e.cpu_seconds * 1e6 / txs as f64 * 10.0).round() / 10.0;
        }
    }
    out
}

/// A [`CpuSample`] of every running node of the network in `dir`.
fn sample_cpu(dir: &Path) -> Vec<CpuSample> {
    let Ok(Some(net)) = crate::file::NetworkFile::load(dir) else {
        return Vec::new();
    };
    net.nodes
        .into_iter()
        .filter_map(|n| {
            let pid = u64::from(n.pid);
            Some((n.role, n.party, pid, crate::cpu::ticks(Some(pid))?))
        })
        .collect()
}

/// A network started for the suite; stopped (and its directory removed unless kept)
/// when dropped.
struct Running {
    dir: PathBuf,
    keep: bool,
    /// A database made for this network: its URL and name, dropped after.
    database: Option<(String, String)>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new(exe())
            .args(["down", "--dir"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if let Some((url, name)) = &self.database
            && let Err(e) = crate::pg::drop_database(url)
        {
            eprintln!("bench: dropping database {name}: {e:#}");
        }
    }
}

/// A fresh database `<NAME>_b<seq>` next to the one `url` names: its URL and name.
fn fresh_database(url: &str, seq: usize) -> Result<(String, String)> {
    let (fresh_url, fresh) = crate::pg::sibling_database(url, &format!("_b{seq}"))?;
    crate::pg::recreate_database(&fresh_url)?;
    Ok((fresh_url, fresh))
}

/// A child process of the suite failed.
fn child(what: &str, reason: String) -> Error {
    Error::Node {
        name: what.into(),
        reason,
    }
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        path: dir.to_path_buf(),
        source: e,
    })
}

/// The fabrx binary: the one running this suite.
fn exe() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("fabrx"))
}

fn start(net: &NetPlan, dir: &Path, opts: &Options, seq: usize) -> Result<Running> {
    let _ = std::fs::remove_dir_all(dir);
    let mut running = Running {
        dir: dir.to_path_buf(),
        keep: opts.keep,
        database: None,
    };
    let db = match (&opts.db, net.committers) {
        (Some(url), 1..) => {
            let (fresh_url, name) = fresh_database(url, seq)?;
            running.database = Some((fresh_url.clone(), name));
            Some(fresh_url)
        }
        _ => None,
    };
    let mut cmd = Command::new(exe());
    cmd.args(["up", "--json", "--no-token", "--dir"])
        .arg(dir)
        .args(["--parties", &net.parties.to_string()])
        .args(["--shards", &net.shards.to_string()])
        .args(["--committers", &net.committers.to_string()])
        .args(["--base-port", &opts.base_port.to_string()]);
    if net.no_orderer {
        cmd.arg("--no-orderer");
    }
    if let Some(url) = &db {
        cmd.args(["--db", url]);
    }
    let out = cmd.output().map_err(|e| child("fabrx up", e.to_string()))?;
    if !out.status.success() {
        return Err(child(
            "fabrx up",
            format!("({net:?}) failed: {}", String::from_utf8_lossy(&out.stderr)),
        ));
    }
    Ok(running)
}

/// Runs `fabrx loadgen FLAGS --network NET --json [--report DIR]`, its stderr into
/// `log`; the summary line.
fn load(flags: &[String], net: Option<&Path>, report: Option<&Path>, log: &Path) -> Result<Value> {
    let mut cmd = Command::new(exe());
    cmd.arg("loadgen").args(flags).arg("--json");
    if let Some(n) = net {
        cmd.arg("--network").arg(n);
    }
    if let Some(r) = report {
        cmd.arg("--report").arg(r);
    }
    let log_file = std::fs::File::create(log).map_err(|e| Error::Io {
        path: log.to_path_buf(),
        source: e,
    })?;
    let out = cmd
        .stderr(Stdio::from(log_file))
        .output()
        .map_err(|e| child("fabrx loadgen", e.to_string()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        return Err(child(
            "fabrx loadgen",
            format!(
                "{} failed ({}): {}",
                flags.join(" "),
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ),
        ));
    }
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .map_err(|_| child("fabrx loadgen", format!("its last line is not JSON: {last:?}")))
}

/// The CPU a run's nodes used, per role and per party.
struct RunCpu {
    per_role: std::collections::BTreeMap<String, RoleCpu>,
    per_party: std::collections::BTreeMap<String, RoleCpu>,
}

/// One measured load run: its summary line, the CPU its network's nodes used per role
/// and per party, and the txs that CPU is divided by.
fn measure(run: &RunPlan, network: Option<&Path>, dir: &Path) -> Result<(Value, RunCpu, u64)> {
    let before = network.map(sample_cpu).unwrap_or_default();
    let summary = load(&run.loadgen, network, Some(dir), &dir.join("loadgen.log"))?;
    let after = network.map(sample_cpu).unwrap_or_default();
    let txs = summary["confirmed"]
        .as_u64()
        .or_else(|| summary["txs"].as_u64())
        .unwrap_or(0);
    let cpu = RunCpu {
        per_role: cpu_per_role(&before, &after, txs),
        per_party: cpu_per_party(&before, &after, txs),
    };
    for (who, c) in cpu.per_role.iter().chain(&cpu.per_party) {
        eprintln!(
            "  {who}: {} node(s), {:.1} CPU s, {:.0} µs per tx",
            c.nodes, c.cpu_seconds, c.us_per_tx
        );
    }
    Ok((summary, cpu, txs))
}

/// Runs a suite, telling its progress on stderr; returns the path of its `suite.json`.
pub fn run(suite: Suite, opts: &Options) -> Result<PathBuf> {
    let plan = plan(suite, opts)?;
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("fabrx-bench-{}", suite.name())));
    create_dir(&out.join("runs"))?;
    let net_dir = out.join("net");
    let began = Instant::now();
    let mut current: Option<(NetPlan, Running)> = None;
    let mut measured = Vec::new();
    let mut lines = Vec::new();
    for (i, run) in plan.runs.iter().enumerate() {
        let dir = out.join("runs").join(&run.name);
        let _ = std::fs::remove_dir_all(&dir);
        create_dir(&dir)?;
        let mut fresh = false;
        if let Some(net) = &run.network
            && (net.fresh || current.as_ref().is_none_or(|(n, _)| n != net))
        {
            drop(current.take()); // stops the previous network first
            eprintln!("bench {}: starting {net:?}", suite.name());
            current = Some((net.clone(), start(net, &net_dir, opts, i)?));
            fresh = true;
        }
        let network = run.network.as_ref().map(|_| net_dir.as_path());
        if let (true, Some(w)) = (fresh, &run.warmup) {
            eprintln!("bench {}: warming up", suite.name());
            load(w, network, None, &dir.join("warmup.log"))?;
        }
        eprintln!(
            "bench {}: run {}/{} {}",
            suite.name(),
            i + 1,
            plan.runs.len(),
            run.name
        );
        let (summary, cpu, txs) = measure(run, network, &dir)?;
        let pts = points(run, &summary);
        for p in &pts {
            eprintln!(
                "  x {} → {:.0} tx/s, goodput {:.0} tx/s, p99 {} ms",
                p.x,
                p.tps,
                p.goodput_tps,
                p.p99_ms.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
            );
        }
        lines.push(serde_json::json!({
            "run": run.name, "panel": plan.panels[run.panel].0, "curve": run.curve,
            "x": run.x, "loadgen": run.loadgen, "summary": summary,
            "cpu_per_role": cpu.per_role, "cpu_per_party": cpu.per_party, "cpu_txs": txs,
        }));
        measured.push((run.clone(), pts));
    }
    drop(current);
    let panels = panels(&plan, &measured);
    let suite_json = serde_json::json!({
        "suite": suite.name(),
        "title": plan.title,
        "seconds": (began.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "runs": lines,
    });
    let files = [
        ("suite.json", format!("{suite_json}\n")),
        ("suite.csv", suite_csv(&plan, &measured)),
        ("suite.svg", loadgen::report::suite_svg(&plan.title, &panels)),
    ];
    for (name, text) in files {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| Error::Io { path, source: e })?;
    }
    eprintln!(
        "bench {}: {} runs in {:.0} s; suite.json, suite.csv, suite.svg and runs/ in {}",
        suite.name(),
        plan.runs.len(),
        began.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(out.join("suite.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> Options {
        Options {
            quick: true,
            ..Options::default()
        }
    }

    #[test]
    fn cpu_per_role_sums_the_nodes_that_ran_throughout() {
        let s = |v: &[(&str, u32, u64, u64)]| -> Vec<CpuSample> {
            v.iter()
                .map(|(r, party, p, t)| ((*r).to_string(), *party, *p, *t))
                .collect()
        };
        let before = s(&[
            ("router", 1, 1, 100),
            ("router", 2, 2, 50),
            ("batcher", 1, 3, 0),
            ("sidecar", 1, 4, 10),
        ]);
        // Router 2 restarted (new pid): left out; the sidecar's pid is gone.
        let after = s(&[
            ("router", 1, 1, 300),
            ("router", 2, 9, 70),
            ("batcher", 1, 3, 1000),
        ]);
        let parties = cpu_per_party(&before, &after, 1000);
        assert_eq!(parties.len(), 1, "party 2's only node restarted");
        assert_eq!(
            parties["party 1"],
            RoleCpu {
                nodes: 2,
                cpu_seconds: 12.0,
                us_per_tx: 12_000.0
            }
        );
        let cpu = cpu_per_role(&before, &after, 1000);
        assert_eq!(cpu.len(), 2);
        assert_eq!(
            cpu["router"],
            RoleCpu {
                nodes: 1,
                cpu_seconds: 2.0,
                us_per_tx: 2000.0
            }
        );
        assert_eq!(cpu["batcher"].us_per_tx, 10_000.0);
        assert_eq!(cpu_per_role(&before, &after, 0)["router"].us_per_tx, 0.0);
    }

    #[test]
    fn ordering_runs_one_network_per_shape_in_rate_steps() {
        let p = plan(
            Suite::Ordering,
            &Options {
                shapes: vec!["4x1".into(), "7x2".into()],
                rates: vec![10.0, 20.0],
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(p.runs.len(), 2);
        let r = &p.runs[1];
        assert_eq!(r.name, "ordering-7x2");
        let net = r.network.as_ref().unwrap();
        assert_eq!((net.parties, net.shards, net.committers), (7, 2, 0));
        assert!(r.x.is_none());
        assert!(r.loadgen.windows(2).any(|w| w == ["--rates", "10,20"]));
        assert!(r.warmup.is_some());
        let bad = [
            Options {
                shapes: vec!["4y2".into()],
                ..Options::default()
            },
            Options {
                shapes: vec!["0x1".into()],
                ..Options::default()
            },
            Options {
                step_seconds: Some(0.0),
                ..Options::default()
            },
        ];
        for options in &bad {
            assert!(plan(Suite::Ordering, options).is_err(), "{options:?}");
        }
    }

    #[test]
    fn committer_sweeps_the_four_parameters_on_fresh_networks() {
        let p = plan(Suite::Committer, &Options::default()).unwrap();
        assert_eq!(p.panels.len(), 4);
        assert_eq!(p.runs.len(), 16);
        assert!(
            p.runs
                .iter()
                .all(|r| r.network.as_ref().is_some_and(|n| n.no_orderer && n.fresh))
        );
        let io = p.runs.iter().find(|r| r.name == "inputs-outputs-3").unwrap();
        assert!(io.loadgen.windows(2).any(|w| w == ["--writes", "6"]));
        let inproc = plan(
            Suite::Committer,
            &Options {
                in_process: true,
                ..quick()
            },
        )
        .unwrap();
        assert!(inproc.runs.iter().all(|r| r.network.is_none()));
        assert!(inproc.runs[0].loadgen.contains(&"committer".to_string()));
    }

    #[test]
    fn points_come_from_the_run_or_from_its_steps() {
        let p = plan(Suite::E2e, &quick()).unwrap();
        let stepped = &p.runs[0];
        let summary = serde_json::json!({"tps": 5.0, "steps": [
            {"rate": 100.0, "tps": 99.0, "goodput_tps": 98.0, "p99_ms": 40.0},
            {"rate": 200.0, "tps": 150.0, "goodput_tps": 150.0, "p99_ms": null}]});
        let pts = points(stepped, &summary);
        assert_eq!(pts.len(), 2);
        assert_eq!((pts[0].x, pts[0].tps, pts[0].p99_ms), (100.0, 99.0, Some(40.0)));
        assert_eq!(pts[1].p99_ms, None);
        let c = plan(Suite::Committer, &quick()).unwrap();
        let one = &c.runs[1];
        let pts = points(
            one,
            &serde_json::json!({"tps": 10.0, "goodput_tps": 8.0, "p99_ms": 3.0}),
        );
        assert_eq!(
            pts,
            vec![SuitePoint {
                x: 20.0,
                tps: 10.0,
                goodput_tps: 8.0,
                p99_ms: Some(3.0)
            }]
        );
        let measured = vec![(one.clone(), pts)];
        let csv = suite_csv(&c, &measured);
        assert_eq!(csv.lines().count(), 2);
        assert!(csv.contains("bad-signatures-20,20,10,8,3"), "{csv}");
        let panels = panels(&c, &measured);
        assert_eq!(panels[0].curves.len(), 1);
        assert!(panels[1].curves.is_empty());
    }
}
