//! Recovery of the committer as separate processes (FX §3.6): two sigverifiers, two
//! vcservices over one PostgreSQL database and a sidecar (with the coordinator's graph)
//! run a random high-conflict workload; one service, or a pair, is killed with SIGKILL
//! mid-stream and restarted. Afterwards every stored block's statuses and the final
//! state must equal the serial oracle exactly: nothing lost, nothing committed twice.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use committer::blockfile;
use sidecar::remote::{RemoteConfig, VcPool};
use sidecar::stages::CommitStage;
use sidecar::store::BlockStore;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::oracle::{Rows, serial, workload};
use types::Status;
use vcservice::{Backend, PgBackend, PgOptions};

const BLOCKS: usize = 1500;
const DEADLINE: Duration = Duration::from_secs(240);

/// A service process that can be killed and started again with the same arguments.
struct Proc {
    name: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    /// The address it serves, for services.
    addr: Option<String>,
}

impl Proc {
    fn new(name: &str, dir: &Path, args: Vec<String>) -> Proc {
        Proc {
            name: name.to_string(),
            args,
            log: dir.join(format!("{name}.log")),
            child: None,
            addr: None,
        }
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_fabrx"))
            .args(&self.args)
            .env("RUST_LOG", "info,sqlx=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawning fabrx");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The exit status once the process ended.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("  ")).collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Cluster {
    _dir: tempfile::TempDir,
    store: PathBuf,
    pg_url: String,
    procs: BTreeMap<String, Proc>,
    vc_endpoints: Vec<String>,
    sidecar_addr: String,
}

impl Cluster {
    /// `verifiers` = 0: the sidecar verifies in-process.
    async fn start(blocks_file: &Path, verifiers: usize) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let pg_url = testkit::pg::cluster().fresh_database("recovery").await;
        let store = dir.path().join("store");
        let mut procs = BTreeMap::new();
        let mut verifier_addrs = Vec::new();
        for i in 0..verifiers {
            let addr = testkit::net::loopback_addr();
            let mut p = Proc::new(
                &format!("verifier{i}"),
                dir.path(),
                vec![
                    "node".into(),
                    "sigverifier".into(),
                    "--listen".into(),
                    addr.clone(),
                ],
            );
            p.addr = Some(addr.clone());
            procs.insert(p.name.clone(), p);
            verifier_addrs.push(addr);
        }
        let mut vc_endpoints = Vec::new();
        for i in 0..2 {
            let addr = testkit::net::loopback_addr();
            let config = dir.path().join(format!("vc{i}.toml"));
            std::fs::write(
                &config,
                format!("listen = \"{addr}\"\ndb = \"{pg_url}\"\npool_size = 4\nworkers = 2\n"),
            )
            .expect("vcservice config");
            let mut p = Proc::new(
                &format!("vc{i}"),
                dir.path(),
                vec![
                    "node".into(),
                    "vcservice".into(),
                    "--config".into(),
                    config.display().to_string(),
                ],
            );
            p.addr = Some(addr.clone());
            procs.insert(p.name.clone(), p);
            vc_endpoints.push(addr);
        }
        let sidecar_addr = testkit::net::loopback_addr();
        let mut args: Vec<String> = vec![
            "node".into(),
            "sidecar".into(),
            "--listen".into(),
            sidecar_addr.clone(),
            "--blocks".into(),
            blocks_file.display().to_string(),
            "--store".into(),
            store.display().to_string(),
            "--vcservice".into(),
            vc_endpoints.join(","),
            "--max-batch".into(),
            "20".into(),
            "--max-pending".into(),
            "200".into(),
            "--call-timeout-ms".into(),
            "10000".into(),
            "--exit-when-done".into(),
        ];
        if !verifier_addrs.is_empty() {
            args.push("--verifier".into());
            args.push(verifier_addrs.join(","));
        }
        procs.insert("sidecar".into(), Proc::new("sidecar", dir.path(), args));
        // The vcservices create the schema; start them first so the sidecar's first
        // calls find them (it retries anyway).
        for p in procs.values_mut() {
            p.start();
        }
        Cluster {
            _dir: dir,
            store,
            pg_url,
            procs,
            vc_endpoints,
            sidecar_addr,
        }
    }

    fn logs(&self) -> String {
        self.procs
            .values()
            .map(|p| format!("---- {} ----\n{}", p.name, p.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// (id, code, block, index) of a notification.
type Event = (String, u32, u64, u32);

/// Subscribes to `ids` at the sidecar's service (retrying until it is up) and collects one
/// event per id.
async fn watch(addr: String, ids: Vec<String>) -> Vec<Event> {
    use wire::pb::sidecar_client::SidecarClient;
    let started = Instant::now();
    let mut client = loop {
        match SidecarClient::connect(format!("http://{addr}")).await {
            Ok(c) => break c,
            Err(e) if started.elapsed() < DEADLINE => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("sidecar service never came up: {e}"),
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(wire::pb::SubscribeRequest { tx_ids: ids.clone() })
        .await
        .expect("request queued");
    let mut events = client
        .subscribe(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("subscribe")
        .into_inner();
    let mut got = Vec::new();
    while got.len() < ids.len() {
        let e = tokio::time::timeout(DEADLINE, events.message())
            .await
            .expect("notification in time")
            .expect("stream healthy")
            .expect("stream open");
        let s = e.status.expect("a status");
        got.push((s.tx_id, s.code, s.block, s.index));
    }
    drop(tx);
    got.sort();
    got
}

async fn state(backend: &Arc<dyn Backend>) -> Rows {
    let mut out = BTreeMap::new();
    for ns in ["_meta", "alpha", "beta"] {
        for r in backend.scan(ns).await.expect("scan") {
            out.insert((ns.to_string(), r.key), (r.value, r.version));
        }
    }
    out
}

async fn scenario(kill: &[&str], verifiers: usize, seed: u64) {
    let text = workload(seed, BLOCKS);
    let file = blockfile::parse(&text).expect("workload parses");
    let (want, want_rows) = serial(&file.meta_policy, &file.blocks).expect("oracle");
    let dir = tempfile::tempdir().expect("temp dir");
    let blocks_file = dir.path().join("blocks.jsonl");
    std::fs::write(&blocks_file, &text).expect("block file");
    let mut cluster = Cluster::start(&blocks_file, verifiers).await;
    // Notifications: subscribe to the last blocks' txs (ids used once in the workload)
    // while the run goes on, unless the sidecar itself is killed (which ends the stream).
    let watched: Vec<Event> = file.blocks[BLOCKS - 3..]
        .iter()
        .flat_map(|b| {
            b.txs
                .iter()
                .enumerate()
                .map(move |(i, (id, _))| (b.number(), i as u32, id.0.clone()))
        })
        .filter(|(b, i, id)| *id == format!("t{b}-{i}") && text.matches(&format!("\"{id}\"")).count() == 1)
        .map(|(b, i, id)| (id, want[b as usize][i as usize].code(), b, i))
        .collect();
    let watcher = (!kill.contains(&"sidecar")).then(|| {
        tokio::spawn(watch(
            cluster.sidecar_addr.clone(),
            watched.iter().map(|w| w.0.clone()).collect(),
        ))
    });
    let progress = VcPool::new(
        &cluster.vc_endpoints,
        RemoteConfig {
            call_timeout: Duration::from_secs(5),
            give_up_after: Some(Duration::from_secs(60)),
            ..RemoteConfig::default()
        },
    )
    .expect("pool");
    let started = Instant::now();
    // Kill mid-stream: once a fifth of the blocks is final, and well before the end.
    let kill_at = (BLOCKS / 5) as u64;
    loop {
        let last = progress.last_committed().await.expect("progress");
        if last.is_some_and(|b| b >= kill_at) {
            assert!(
                last.is_some_and(|b| b + 1 < BLOCKS as u64),
                "{kill:?}: the run finished before the kill; make the workload larger"
            );
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{kill:?}: no progress to block {kill_at}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for name in kill {
        cluster.procs.get_mut(*name).expect("known process").kill();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for name in kill {
        cluster.procs.get_mut(*name).expect("known process").start();
    }
    loop {
        let sidecar = cluster.procs.get_mut("sidecar").expect("sidecar");
        if let Some(status) = sidecar.exited() {
            assert!(
                status.success(),
                "{kill:?}: sidecar failed: {status}\n{}",
                cluster.logs()
            );
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{kill:?}: the sidecar did not finish\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for p in cluster.procs.values_mut() {
        p.kill();
    }
    // The kill was felt: the sidecar started twice, or it resubmitted calls lost with each
    // killed service.
    let sidecar_log = std::fs::read_to_string(&cluster.procs["sidecar"].log).unwrap_or_default();
    let sidecar_killed = kill.contains(&"sidecar");
    for name in kill {
        match &cluster.procs[*name].addr {
            // With the sidecar killed too, the new sidecar may never see the other down.
            Some(_) if sidecar_killed => {}
            Some(addr) => assert!(
                sidecar_log
                    .lines()
                    .any(|l| l.contains("resubmitting") && l.contains(addr.as_str())),
                "{kill:?}: no call to {name} was resubmitted"
            ),
            None => assert_eq!(
                sidecar_log.matches("sidecar starting").count(),
                2,
                "{kill:?}: the sidecar did not restart"
            ),
        }
    }
    if let Some(w) = watcher {
        let mut want_events = watched.clone();
        want_events.sort();
        assert!(!want_events.is_empty(), "nothing to watch");
        assert_eq!(w.await.expect("watcher"), want_events, "{kill:?}: notifications");
    }
    // Every block is stored once, in order, with the oracle's statuses.
    let store = BlockStore::open(&cluster.store).expect("store opens");
    assert_eq!(store.next_block(), BLOCKS as u64, "{kill:?}: stored blocks");
    let mut committed = 0usize;
    for (n, want_block) in want.iter().enumerate() {
        let got = store.get_block(n as u64).expect("read").expect("block stored");
        let got: Vec<Status> = got.statuses.into_iter().map(|s| s.1).collect();
        assert_eq!(
            &got, want_block,
            "{kill:?}: block {n} differs from the serial oracle"
        );
        committed += got.iter().filter(|s| **s == Status::Committed).count();
    }
    let want_committed = want.iter().flatten().filter(|s| **s == Status::Committed).count();
    assert_eq!(committed, want_committed, "{kill:?}: committed count");
    // The workload's conflict rate is high; a few hundred commits still make the state
    // comparison meaningful.
    assert!(
        want_committed > BLOCKS / 10,
        "the workload commits too little to be a check: {want_committed}"
    );
    let backend: Arc<dyn Backend> =
        Arc::new(PgBackend::connect(&PgOptions::new(cluster.pg_url.clone())).expect("connect"));
    assert_eq!(state(&backend).await, want_rows, "{kill:?}: final state differs");
    assert_eq!(
        backend.last_committed_block().await.expect("last committed"),
        Some(BLOCKS as u64 - 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_verification_survives_vcservice_kill() {
    scenario(&["vc0"], 0, 6999).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_each_service_and_pairs_mid_stream() {
    let scenarios: [&[&str]; 7] = [
        &["sidecar"],
        &["verifier0"],
        &["vc0"],
        &["verifier0", "vc1"],
        &["sidecar", "vc0"],
        &["vc0", "vc1"],
        &["verifier0", "verifier1"],
    ];
    for (i, kill) in scenarios.iter().enumerate() {
        scenario(kill, 2, 7000 + i as u64).await;
    }
}
