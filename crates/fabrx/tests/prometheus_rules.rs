//! A real Prometheus scraping a `fabrx up` network (issue #24): Debian's `prometheus`
//! runs as a plain process on a loopback port with its own config and data directory,
//! scrapes every node from file_sd targets written from `network.json`, and evaluates
//! the shipped rules (`helm/fabrx/rules/fabrx-alerts.yaml`) while a load runs. Then:
//! - every expression of the Grafana dashboard evaluates without error and returns data;
//! - every rule evaluates without error, every recording rule returns data, and every
//!   series an alert reads exists; a healthy network raises no critical alert, and a
//!   killed node raises `FabrxNodeDown`;
//! - every labelled counter has a series for every documented label value (at 0 until
//!   its first event);
//! - `promtool check rules` accepts the rules and `promtool check metrics` every node's
//!   `/metrics` page.
//!
//! Needs `prometheus` and `promtool` (Debian's `prometheus` package; `scripts/test.sh`
//! installs it). Without them the test prints a SKIPPED line and passes, unless
//! `FABRX_REQUIRE_PROMETHEUS=1` (which `scripts/test.sh` sets) makes it fail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::{fabrx_ok as fabrx, free_base_port, kill_and_wait, network_json, pid_in};

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `prometheus` or `promtool`: `$FABRX_PROMETHEUS_DIR/<name>`, else `/usr/bin/<name>`.
fn tool(name: &str) -> Option<PathBuf> {
    let dir =
        std::env::var_os("FABRX_PROMETHEUS_DIR").map_or_else(|| PathBuf::from("/usr/bin"), PathBuf::from);
    let path = dir.join(name);
    path.exists().then_some(path)
}

/// A GET over plain HTTP/1.0 to `addr` (`host:port`); the status code and the body.
fn get(addr: &str, target: &str) -> std::io::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {target} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}

/// `s` percent-encoded for a URL's query.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus process on loopback, killed when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts `bin` with `config`, its data in `dir`, on a free loopback port, and waits
    /// until it is ready.
    fn start(bin: &Path, config: &Path, dir: &Path) -> Prometheus {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let log = dir.join("prometheus.log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let p = Prometheus { child, addr, log };
        p.wait_for("ready", Duration::from_secs(60), || {
            matches!(get(&p.addr, "/-/ready"), Ok((200, _)))
        });
        p
    }

    /// Polls `done` every 500 ms until it holds, or fails with `what` and the log.
    fn wait_for(&self, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !done() {
            assert!(
                Instant::now() < deadline,
                "Prometheus: not {what} within {limit:?}\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `GET /api/v1/<path>` as JSON (`status` must be `success`).
    fn api(&self, path: &str) -> Value {
        let (code, body) = get(&self.addr, &format!("/api/v1/{path}")).unwrap();
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {code} {body:?}: {e}"));
        assert_eq!(v["status"], "success", "{path}: {v}");
        v
    }

    /// An instant query: `Ok(result)` or the error Prometheus gave.
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let (code, body) =
            get(&self.addr, &format!("/api/v1/query?query={}", encode(expr))).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{code} {body:?}: {e}"))?;
        if v["status"] != "success" {
            return Err(format!("{}: {}", v["errorType"], v["error"]));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }
}

/// Every `expr` of the dashboard's panels, `$party` meaning every party.
fn dashboard_exprs() -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(e)) = m.get("expr") {
                    out.push(e.replace("$party", ".*"));
                }
                m.values().for_each(|x| walk(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let path = repo().join("helm/fabrx/dashboards/fabrx-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The series names an expression reads: fabrx's own (and recorded ones), `process_*`
/// and `up`.
fn series_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            quoted = !quoted;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("fabrx") || word.starts_with("process_") || word == "up" {
            names.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    names
}

/// The labelled counters (and gauges) with their documented label values.
fn documented_labels() -> Vec<(&'static str, &'static str, Vec<String>)> {
    let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    vec![
        (
            "fabrx_router_requests_refused_total",
            "reason",
            own(&router::metrics::REASONS),
        ),
        (
            "fabrx_sigverifier_txs_total",
            "verdict",
            own(&["valid", "invalid"]),
        ),
        (
            "fabrx_vcservice_txs_total",
            "status",
            types::Status::ALL.iter().map(|s| s.name().to_owned()).collect(),
        ),
        (
            "fabrx_vcservice_backend_calls_total",
            "stage",
            own(&vcservice::metrics::STAGES),
        ),
        (
            "fabrx_vcservice_retries_total",
            "reason",
            own(&["conflict", "error"]),
        ),
        ("fabrx_vcservice_queue_depth", "queue", own(&["commit"])),
        (
            "fabrx_consenter_messages_in_total",
            "outcome",
            own(&["received", "rejected"]),
        ),
        (
            "fabrx_consenter_messages_out_total",
            "outcome",
            own(&["sent", "deduplicated", "dropped"]),
        ),
        ("fabrx_query_requests_total", "rpc", own(&query::metrics::RPCS)),
        (
            "fabrx_endorser_requests_total",
            "outcome",
            std::iter::once("endorsed".to_owned())
                .chain(token::rejection::Reason::ALL.iter().map(|r| r.name().to_owned()))
                .collect(),
        ),
    ]
}

/// The free share of a file system under which `FabrxDiskFilling` fires.
const DISK_CRITICAL: f64 = 0.05;

/// The share of the file system under `path` that a non-root process may still write,
/// as `df` sees it.
fn free_share(path: &Path) -> f64 {
    let out = Command::new("df")
        .args(["-B1", "--output=avail,size"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let row: Vec<f64> = text
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    row[0] / row[1]
}

/// The file_sd targets of a network: every node with a metrics address, labelled with
/// its name.
fn targets(net: &Value) -> Value {
    let nodes = net["nodes"].as_array().unwrap();
    Value::Array(
        nodes
            .iter()
            .filter(|n| n["metrics"].is_string())
            .map(|n| json!({"targets": [n["metrics"]], "labels": {"node": n["name"]}}))
            .collect(),
    )
}

#[test]
fn prometheus_scrapes_a_network_and_every_dashboard_and_rule_expression_has_data() {
    let (Some(prometheus), Some(promtool)) = (tool("prometheus"), tool("promtool")) else {
        let dir = std::env::var("FABRX_PROMETHEUS_DIR").unwrap_or_else(|_| "/usr/bin".into());
        let msg = format!(
            "prometheus_rules: SKIPPED — no prometheus and promtool in {dir} \
             (apt-get install prometheus, or set FABRX_PROMETHEUS_DIR)"
        );
        assert!(
            std::env::var_os("FABRX_REQUIRE_PROMETHEUS").is_none(),
            "{msg}, and FABRX_REQUIRE_PROMETHEUS is set"
        );
        eprintln!("\n*** {msg} ***\n");
        return;
    };
    let began = Instant::now();
    let rules = repo().join("helm/fabrx/rules/fabrx-alerts.yaml");
    let check = Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &["up", "--seed", "13", "--base-port", &base, "--json", "--dir"],
        &dir,
    );
    let net = network_json(&dir);
    let targets = targets(&net);
    let scraped = targets.as_array().unwrap().len();
    assert_eq!(
        scraped,
        net["nodes"].as_array().unwrap().len(),
        "every node has a metrics address"
    );
    let targets_file = tmp.path().join("targets.json");
    std::fs::write(&targets_file, targets.to_string()).unwrap();
    let config = tmp.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: fabrx\n    file_sd_configs:\n      - files: [{}]\n        refresh_interval: 1s\n",
            rules.display(),
            targets_file.display()
        ),
    )
    .unwrap();
    let check = Command::new(&promtool)
        .arg("check")
        .arg("config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let prom = Prometheus::start(&prometheus, &config, tmp.path());
    prom.wait_for("scraping every node", Duration::from_secs(60), || {
        let t = prom.api("targets?state=active");
        let active = t["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
        active.len() == scraped && active.iter().all(|t| t["health"] == "up")
    });

    // `promtool check metrics` on every node's page.
    for n in net["nodes"].as_array().unwrap() {
        let addr = n["metrics"].as_str().unwrap();
        let (code, page) = get(addr, "/metrics").unwrap();
        assert_eq!(code, 200, "{}", n["name"]);
        let mut lint = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        lint.stdin.take().unwrap().write_all(page.as_bytes()).unwrap();
        let out = lint.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics of {}: {}{}",
            n["name"],
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A load through the network: 20 s at 150 tx/s.
    let load = fabrx(
        &[
            "loadgen",
            "--target",
            "network",
            "--txs",
            "3000",
            "--rate",
            "150",
            "--block-size",
            "100",
            "--json",
            "--network",
        ],
        &dir,
    );
    let summary = cluster::last_json(&load);
    assert_eq!(summary["committed"], 3000, "{summary}");
    // Every rule evaluated at least twice after the load (a rate needs two samples).
    let after_load = Instant::now();
    prom.wait_for(
        "evaluating every rule after the load",
        Duration::from_secs(60),
        || {
            let groups = prom.api("rules");
            let rules: Vec<Value> = groups["data"]["groups"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            after_load.elapsed() > Duration::from_secs(3)
                && !rules.is_empty()
                && rules.iter().all(|r| {
                    r["lastEvaluation"]
                        .as_str()
                        .is_some_and(|t| !t.starts_with("0001"))
                })
        },
    );

    let mut problems: Vec<String> = Vec::new();
    // The dashboard.
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 50, "{} dashboard expressions", exprs.len());
    for e in &exprs {
        match prom.query(e) {
            Ok(r) if r.is_empty() => problems.push(format!("dashboard: no data: {e}")),
            Ok(_) => {}
            Err(err) => problems.push(format!("dashboard: {err}: {e}")),
        }
    }
    // The rules: healthy, recording rules with data, every series an alert reads present.
    let groups = prom.api("rules");
    let mut alerts = 0;
    for g in groups["data"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let (name, expr) = (r["name"].as_str().unwrap(), r["query"].as_str().unwrap());
            if r["health"] != "ok" {
                problems.push(format!("rule {name}: {} {}", r["health"], r["lastError"]));
            }
            if let Err(err) = prom.query(expr) {
                problems.push(format!("rule {name}: {err}"));
            }
            if r["type"] == "recording" {
                if prom.query(name).is_ok_and(|v| v.is_empty()) {
                    problems.push(format!("recording rule {name}: no data"));
                }
                continue;
            }
            alerts += 1;
            for series in series_names(expr) {
                if prom.query(&series).is_ok_and(|v| v.is_empty()) {
                    problems.push(format!("alert {name}: no series {series}"));
                }
            }
        }
    }
    assert!(alerts >= 7, "{alerts} alerts loaded");
    // Labelled counters: a series for every documented value.
    let docs = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    for (metric, label, values) in documented_labels() {
        let present: BTreeSet<String> = prom
            .query(&format!("count by ({label}) ({metric})"))
            .unwrap()
            .iter()
            .filter_map(|s| s["metric"][label].as_str().map(str::to_owned))
            .collect();
        for v in &values {
            if !present.contains(v) {
                problems.push(format!("{metric}: no series with {label}=\"{v}\""));
            }
        }
        if !docs.contains(&format!("`{metric}`")) {
            problems.push(format!("{metric} is not in docs/metrics.md"));
        }
    }
    // Every node: its build, its process; every node with a data directory: its disk.
    let nodes_with = |expr: &str| -> BTreeSet<String> {
        prom.query(expr)
            .unwrap()
            .iter()
            .filter_map(|s| s["metric"]["node"].as_str().map(str::to_owned))
            .collect()
    };
    let names = |keep: &dyn Fn(&str) -> bool| -> BTreeSet<String> {
        net["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| keep(n["role"].as_str().unwrap()))
            .map(|n| n["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = names(&|_| true);
    let with_data =
        names(&|role| ["batcher", "consenter", "assembler", "sidecar", "vcservice"].contains(&role));
    for (expr, want) in [
        ("fabrx_build_info == 1", &all),
        ("process_cpu_seconds_total", &all),
        ("process_resident_memory_bytes > 0", &all),
        ("process_open_fds > 0", &all),
        ("fabrx_data_dir_size_bytes > 0", &with_data),
        ("fabrx_data_dir_available_bytes", &with_data),
    ] {
        let got = nodes_with(expr);
        if got != *want {
            problems.push(format!(
                "{expr}: missing on {:?}, unexpected on {:?}",
                want.difference(&got).collect::<Vec<_>>(),
                got.difference(want).collect::<Vec<_>>()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );

    // A healthy network raises no critical alert.
    let active = |prom: &Prometheus| -> BTreeMap<String, Vec<Value>> {
        let mut by_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for a in prom.api("alerts")["data"]["alerts"].as_array().unwrap() {
            by_name
                .entry(a["labels"]["alertname"].as_str().unwrap().to_owned())
                .or_default()
                .push(a.clone());
        }
        by_name
    };
    let alerts_now = active(&prom);
    // The disk alert tells the truth about this machine's disk, whatever it is.
    let free = free_share(tmp.path());
    if (free - DISK_CRITICAL).abs() > 0.005 {
        assert_eq!(
            alerts_now.contains_key("FabrxDiskFilling"),
            free < DISK_CRITICAL,
            "{:.1} % free: {alerts_now:?}",
            free * 100.0
        );
    }
    let critical: Vec<Value> = alerts_now
        .into_iter()
        .filter(|(name, _)| name != "FabrxDiskFilling")
        .flat_map(|(_, v)| v)
        .filter(|a| a["labels"]["severity"] == "critical")
        .collect();
    assert!(
        critical.is_empty(),
        "critical alerts on a healthy network: {critical:?}"
    );

    // Once the load drained, the conditions under which the stalled alerts fire (work
    // waiting, the committer behind the ledger) are all false: an idle network does not
    // raise them after their five minutes.
    for idle in [
        "fabrx:batcher_unordered_requests > 0",
        "fabrx_consenter_pending_requests > 0",
        "fabrx_sidecar_next_block < on () group_left () max(fabrx_assembler_ledger_height)",
    ] {
        prom.wait_for(&format!("idle: {idle}"), Duration::from_secs(30), || {
            prom.query(idle).unwrap().is_empty()
        });
    }

    // A node killed: FabrxNodeDown names it (pending for its first minute).
    let victim = "router-4";
    let victim_addr = net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == victim)
        .unwrap()["metrics"]
        .as_str()
        .unwrap()
        .to_owned();
    kill_and_wait(pid_in(&net, victim));
    prom.wait_for("raising FabrxNodeDown", Duration::from_secs(30), || {
        active(&prom)
            .get("FabrxNodeDown")
            .is_some_and(|v| v.len() == 1 && v[0]["labels"]["instance"] == victim_addr.as_str())
    });
    eprintln!(
        "prometheus_rules: {} dashboard expressions, {alerts} alerts, {scraped} nodes checked in {:.0} s",
        exprs.len(),
        began.elapsed().as_secs_f64()
    );
}

#[test]
fn the_series_an_expression_reads_are_its_fabrx_process_and_up_names() {
    let names = series_names(
        r#"sum by (party) (rate(fabrx_router_requests_refused_total{reason!~"fabrx_x|shard_full"}[5m]))
           / on (party) fabrx:router_admitted:rate1m > 0 and up{job=~"fabrx.*"} == 0
           or process_open_fds"#,
    );
    let want = [
        "fabrx:router_admitted:rate1m",
        "fabrx_router_requests_refused_total",
        "process_open_fds",
        "up",
    ];
    assert_eq!(names, want.iter().map(|s| (*s).to_owned()).collect());
}
