//! The ordering service as processes on loopback, shared by the process tests:
//! `fabrx network generate` for 4 parties × 2 shards, every node a `fabrx node …`
//! process (argv kept to restart it, stderr to a log, its ready line awaited), and a
//! client that sends every request to every party's router until 2f+1 admitted it.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use wire::pb;
use wire::pb::router_client::RouterClient;

use crate::envelope::envelope;

pub mod update;

pub const PARTIES: u32 = 4;
pub const SHARDS: u32 = 2;
pub const F: usize = 1;
/// Requests of the first phase.
pub const N: u64 = 400;
/// Requests of each later phase.
pub const M: u64 = 60;
pub const READY: Duration = Duration::from_secs(120);
pub const DEADLINE: Duration = Duration::from_secs(120);

pub fn bin() -> String {
    std::env::var("FABRX_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_fabrx").to_owned())
}

// ---- helpers of the tests that drive a network through `fabrx up` (network.json)

/// Runs `fabrx ARGS DIR` (the last argument names the directory: `--dir` or
/// `--network`) and requires it to succeed.
pub fn fabrx_ok(args: &[&str], dir: &Path) -> std::process::Output {
    let out = Command::new(bin()).args(args).arg(dir).output().unwrap();
    assert!(
        out.status.success(),
        "fabrx {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A `fabrx loadgen --target network` load of `txs` at `rate` tx/s on the network in
/// `dir` (blocks of 100, 90 s of drain); its summary line.
pub fn up_load(dir: &Path, txs: usize, rate: usize, tag: &str) -> serde_json::Value {
    let out = fabrx_ok(
        &[
            "loadgen",
            "--target",
            "network",
            "--txs",
            &txs.to_string(),
            "--rate",
            &rate.to_string(),
            "--block-size",
            "100",
            "--tag",
            tag,
            "--json",
            "--drain",
            "90",
            "--network",
        ],
        dir,
    );
    last_json(&out)
}

/// Every tx of a load summary was sent and committed, none aborted or left unconfirmed.
pub fn assert_all_committed(summary: &serde_json::Value, txs: u64) {
    assert_eq!(summary["sent"], txs, "{summary}");
    assert_eq!(summary["committed"], txs, "{summary}");
    assert_eq!(summary["never_confirmed"], 0, "{summary}");
    assert_eq!(summary["aborted"], serde_json::json!({}), "{summary}");
}

/// `DIR/network.json`.
pub fn network_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("network.json")).unwrap()).unwrap()
}

/// The pid of node `name` in a `network.json`.
pub fn pid_in(net: &serde_json::Value, name: &str) -> u64 {
    net["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {net}"))["pid"]
        .as_u64()
        .unwrap()
}

/// SIGKILL to `pid`, waiting (up to 10 s) until the process is gone.
pub fn kill_and_wait(pid: u64) {
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}/exe")).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last line of a command's stdout as JSON (the summary line of `fabrx loadgen`).
pub fn last_json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap()
}

/// Runs `fabrx down --dir` on drop: a test that fails half-way does not leave its
/// network's processes running.
pub struct DownOnDrop(pub std::path::PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if self.0.join("network.json").exists() {
            let _ = std::process::Command::new(bin())
                .args(["down", "--dir"])
                .arg(&self.0)
                .output();
        }
    }
}

/// A base port from which the `PARTIES · (3 + SHARDS)` ports of a generated network are
/// free right now, below the kernel's ephemeral port range: the nodes' own outgoing
/// connections take ephemeral ports, and one of them could otherwise take the port of a
/// node that has not bound it yet (routers start last).
pub fn free_base_port() -> u16 {
    // The ordering nodes, then each party's committer nodes (sidecar, verifier, vcservice),
    // then the token application's (a query service per party, five endorsers).
    let nodes = u16::try_from(PARTIES * (3 + SHARDS) + PARTIES * 3 + PARTIES + 5).unwrap();
    // `fabrx up` puts each node's `/metrics` one node span above its port (src/up/metrics.rs).
    let span = 2 * nodes;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000u16;
    let high = ephemeral.saturating_sub(span).max(low + 1);
    let mut x = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
    for _ in 0..200 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let base = low + u16::try_from((x >> 33) % u64::from(high - low)).unwrap();
        let all_free = (base..base + span).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if all_free {
            return base;
        }
    }
    panic!("no free port range");
}

/// One node process: its argv (to restart it), its log and, while it runs, the child.
pub struct Proc {
    pub name: String,
    pub argv: Vec<String>,
    pub log: PathBuf,
    pub child: Option<Child>,
    pub ready: Option<std::sync::mpsc::Receiver<String>>,
}

impl Proc {
    /// Starts `fabrx <argv>` with stderr to `log`; its ready line is awaited by
    /// [`Proc::wait_ready`].
    pub fn start(name: &str, argv: Vec<String>, dir: &Path) -> Proc {
        let mut p = Proc {
            name: name.to_owned(),
            argv,
            log: dir.join(format!("{name}.log")),
            child: None,
            ready: None,
        };
        p.spawn();
        p
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut child = Command::new(bin())
            .args(&self.argv)
            .env("RUST_LOG", "info")
            .env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        self.child = Some(child);
        self.ready = Some(rx);
    }

    /// Its ready line, parsed (panics with its log without one before the deadline).
    pub fn wait_ready(&mut self, role: &str) -> serde_json::Value {
        let rx = self.ready.take().unwrap();
        let line = rx
            .recv_timeout(READY)
            .unwrap_or_else(|_| panic!("{}: no ready line\n{}", self.name, self.log_text()));
        let ready: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(ready["ready"], role, "{}: {line}", self.name);
        ready
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    pub fn log_text(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The network: its processes, config and directory (fields drop in this order: the
/// processes are killed before the directory is removed).
pub struct Net {
    pub procs: BTreeMap<String, Proc>,
    pub config: netconfig::NetworkConfig,
    pub dir: tempfile::TempDir,
}

impl Net {
    pub fn generate() -> Net {
        let dir = tempfile::tempdir().unwrap();
        let base = free_base_port();
        let out = Command::new(bin())
            .args(["network", "generate", "--json", "--insecure", "--seed", "7"])
            .args(["--parties", &PARTIES.to_string(), "--shards", &SHARDS.to_string()])
            .args(["--base-port", &base.to_string(), "--dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // Small batches and quick censorship detection, so that the test runs in seconds.
        let path = netconfig::config_path(dir.path());
        let mut file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        file["batching"] = serde_json::json!({
            "max_batch_requests": 50,
            "batch_timeout_ms": 50,
            "forward_timeout_ms": 1000,
            "complain_timeout_ms": 3000,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
        let config = netconfig::NetworkConfig::load(&path).unwrap();
        Net {
            dir,
            config,
            procs: BTreeMap::new(),
        }
    }

    pub fn config_path(&self) -> String {
        netconfig::config_path(self.dir.path()).display().to_string()
    }

    pub fn start(&mut self, name: &str, mut argv: Vec<String>) {
        argv.extend(["--config".to_owned(), self.config_path()]);
        let p = Proc::start(name, argv, self.dir.path());
        self.procs.insert(name.to_owned(), p);
    }

    /// Starts every node, then waits for every ready line.
    pub fn start_all(&mut self) {
        let root = self.dir.path().join("data");
        let data = |name: &str| root.join(name).display().to_string();
        for p in 1..=PARTIES {
            let name = format!("consenter-{p}");
            let argv = vec![
                "node".into(),
                "consenter".into(),
                "--party".into(),
                p.to_string(),
                "--data-dir".into(),
                data(&name),
            ];
            self.start(&name, argv);
        }
        for p in 1..=PARTIES {
            for s in 0..SHARDS {
                let name = format!("batcher-{p}-{s}");
                let argv = vec![
                    "node".into(),
                    "batcher".into(),
                    "--party".into(),
                    p.to_string(),
                    "--shard".into(),
                    s.to_string(),
                    "--data-dir".into(),
                    data(&name),
                ];
                self.start(&name, argv);
            }
        }
        self.wait_all_ready();
        // Routers last: a router answers UNAVAILABLE until its batchers listen.
        for p in 1..=PARTIES {
            let argv = vec!["node".into(), "router".into(), "--party".into(), p.to_string()];
            self.start(&format!("router-{p}"), argv);
        }
        self.wait_all_ready();
    }

    /// Starts every party's assembler and waits for their ready lines.
    pub fn start_assemblers(&mut self) {
        let root = self.dir.path().join("data");
        for p in 1..=PARTIES {
            let name = format!("assembler-{p}");
            let data = root.join(&name).display().to_string();
            let argv = vec![
                "node".into(),
                "assembler".into(),
                "--party".into(),
                p.to_string(),
                "--data-dir".into(),
                data,
            ];
            self.start(&name, argv);
        }
        self.wait_all_ready();
    }

    /// `http://host:port` of party `party`'s assembler.
    pub fn assembler(&self, party: u32) -> String {
        self.config
            .party(party)
            .unwrap()
            .assembler
            .as_ref()
            .unwrap()
            .uri()
    }

    /// Waits for the ready line of every node started and not yet ready.
    pub fn wait_all_ready(&mut self) {
        for (name, proc) in self.procs.iter_mut().filter(|(_, p)| p.ready.is_some()) {
            let role = name.split('-').next().unwrap();
            let ready = proc.wait_ready(role);
            if role == "batcher" {
                assert_eq!(ready["term"], 0, "{name}: {ready}");
            }
        }
    }

    pub fn proc(&mut self, name: &str) -> &mut Proc {
        self.procs.get_mut(name).unwrap()
    }

    pub fn logs(&self) -> String {
        self.procs
            .values()
            .map(|p| format!("--- {}\n{}", p.name, p.log_text()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn router(&self, party: u32) -> String {
        self.config.party(party).unwrap().router.uri()
    }

    pub fn consenter(&self, party: u32) -> String {
        self.config.party(party).unwrap().consenter.uri()
    }

    pub fn batcher(&self, party: u32, shard: u32) -> String {
        self.config.batcher(party, shard).unwrap().endpoint.uri()
    }
}

pub fn shard_of(request: &[u8]) -> u32 {
    arma::content::shard_of(request, SHARDS).unwrap()
}

/// `count` envelopes from `*next` on whose shard is `shard` (any shard when `None`).
pub fn requests(next: &mut u64, count: u64, shard: Option<u32>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while (out.len() as u64) < count {
        let e = envelope(*next);
        *next += 1;
        if shard.is_none_or(|s| shard_of(&e) == s) {
            out.push(e);
        }
    }
    out
}

/// Sends every request on one `Router.Submit` stream to `router`; the answer codes by
/// request index (a request without an answer before the deadline is missing).
pub async fn submit_stream(router: String, requests: Vec<Vec<u8>>) -> HashMap<u64, Code> {
    let mut answers = HashMap::new();
    let Ok(mut client) = RouterClient::connect(router).await else {
        return answers;
    };
    let (tx, rx) = mpsc::channel(64);
    let total = requests.len();
    tokio::spawn(async move {
        for (id, envelope) in requests.into_iter().enumerate() {
            let id = id as u64;
            if tx.send(pb::SubmitRequest { id, envelope }).await.is_err() {
                return;
            }
        }
        // Keeps the stream open until the answers are read.
        tx.closed().await;
    });
    let Ok(response) = client.submit(ReceiverStream::new(rx)).await else {
        return answers;
    };
    let mut stream = response.into_inner();
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers.len() < total {
        match timeout(
            deadline.saturating_duration_since(Instant::now()),
            stream.message(),
        )
        .await
        {
            Ok(Ok(Some(r))) => {
                answers.insert(r.id, Code::from(r.code as i32));
            }
            _ => break,
        }
    }
    answers
}

/// Sends every request to every party's router, as a client does, until each is admitted
/// by at least 2f+1 routers: answered OK, or ALREADY_EXISTS (that party's batcher holds it
/// already: it pulled the primary's batch before its router's copy arrived). A request
/// with fewer is sent again (after 200 ms) to the routers that did not admit it (a router
/// answers UNAVAILABLE while its batcher is down). Returns how many were sent again.
pub async fn submit_to(net: &Net, requests: &[Vec<u8>], need: usize) -> usize {
    let mut ok: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); requests.len()];
    let deadline = Instant::now() + DEADLINE;
    let mut resent = 0;
    let mut refused: BTreeMap<usize, BTreeMap<u32, Code>> = BTreeMap::new();
    let mut first: BTreeMap<(u32, String), usize> = BTreeMap::new();
    for round in 0.. {
        let streams: Vec<_> = (1..=PARTIES)
            .map(|p| {
                let todo: Vec<usize> = (0..requests.len())
                    .filter(|&i| ok[i].len() < need && !ok[i].contains(&p))
                    .collect();
                let batch = todo.iter().map(|&i| requests[i].clone()).collect();
                (p, todo, tokio::spawn(submit_stream(net.router(p), batch)))
            })
            .collect();
        for (p, todo, s) in streams {
            if round > 0 {
                resent += todo.len();
            }
            let answers = s.await.unwrap();
            if round == 0 && answers.len() < todo.len() {
                *first.entry((p, "no answer".into())).or_default() += todo.len() - answers.len();
            }
            for (id, code) in answers {
                // ALREADY_EXISTS: the party's batcher holds it already (docs/router.md),
                // e.g. in a batch it pulled from the primary before this router's copy.
                if code != Code::Ok && round == 0 {
                    *first.entry((p, format!("{code:?}"))).or_default() += 1;
                }
                if code == Code::Ok || code == Code::AlreadyExists {
                    ok[todo[id as usize]].insert(p);
                } else {
                    refused.entry(todo[id as usize]).or_default().insert(p, code);
                }
            }
        }
        let short = ok.iter().filter(|k| k.len() < need).count();
        if short == 0 {
            if !first.is_empty() {
                println!("  answers other than OK at first (router, code): {first:?}");
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{short} requests admitted by fewer than {need} routers: {:?}\n{}",
            ok.iter()
                .enumerate()
                .filter(|(_, k)| k.len() < need)
                .map(|(i, k)| (i, k, refused.get(&i)))
                .collect::<Vec<_>>(),
            net.logs()
        );
        sleep(Duration::from_millis(200)).await;
    }
    resent
}

/// [`submit_to`] until 2f+1 routers admitted each request.
pub async fn submit_all(net: &Net, requests: &[Vec<u8>]) -> usize {
    submit_to(net, requests, 2 * F + 1).await
}

/// Every request sent is ordered exactly once.
pub fn assert_ordered_once(ordered: &[Vec<u8>], sent: &[Vec<u8>]) {
    let mut counts: HashMap<&[u8], usize> = HashMap::new();
    for r in ordered {
        *counts.entry(r.as_slice()).or_default() += 1;
    }
    for (i, r) in sent.iter().enumerate() {
        assert_eq!(
            counts.get(r.as_slice()).copied(),
            Some(1),
            "request {i} ordered once"
        );
    }
    assert_eq!(ordered.len(), sent.len(), "nothing else was ordered");
}
