//! Helpers of the process tests that reconfigure a network `fabrx up` started: run the
//! CLI, read node metrics, follow the consenters' config epochs, and propose, sign and
//! submit config updates (docs/reconfiguration.md "The offline steps").

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{bin, fabrx_ok as fabrx};

/// Runs `fabrx ARGS` (no directory appended) and returns its output.
pub fn run(args: &[&str]) -> std::process::Output {
    Command::new(bin()).args(args).output().unwrap()
}

/// A path as the `&str` an argument list takes.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The standard output of a command that must have succeeded.
pub fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `GET /metrics` of `addr`, or `None` while it does not answer.
pub fn scrape(addr: &str) -> Option<String> {
    let mut sock = std::net::TcpStream::connect(addr).ok()?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(sock, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    sock.read_to_string(&mut text).ok()?;
    Some(text.split_once("\r\n\r\n")?.1.to_owned())
}

/// The value of the unlabelled-or-labelled gauge `name` in Prometheus text.
pub fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A load across a switch that closes connections: every tx a quorum of routers
/// acknowledged is committed, and every other one was refused (not acknowledged: the
/// requests in flight on a router's link to its batcher when the batcher closed it) —
/// about a latency's worth of the load, not a link that stayed down.
pub fn assert_acknowledged_committed(summary: &serde_json::Value, txs: u64) {
    assert_eq!(summary["sent"], txs, "{summary}");
    assert_eq!(summary["admitted_never_confirmed"], 0, "{summary}");
    assert_eq!(summary["aborted"], serde_json::json!({}), "{summary}");
    let refused = summary["refused"].as_u64().unwrap();
    assert!(
        summary["never_confirmed"].as_u64().unwrap() <= refused,
        "{summary}"
    );
    assert!(refused <= txs / 10, "{summary}");
    eprintln!("load across the switches: {summary}");
}

/// Every consenter `fabrx up` started, by name, with its config epoch (`fabrx status
/// --json`; `None` while it does not answer).
pub fn epochs_by_name(dir: &Path) -> Vec<(String, Option<u64>)> {
    let out = fabrx(&["status", "--json", "--dir"], dir);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|n| n["role"] == "consenter")
        .map(|n| (n["name"].as_str().unwrap().to_owned(), n["config_epoch"].as_u64()))
        .collect()
}

/// Every consenter's config epoch.
pub fn epochs(dir: &Path) -> Vec<Option<u64>> {
    epochs_by_name(dir).into_iter().map(|(_, e)| e).collect()
}

/// Waits (60 s at most) until every consenter `fabrx up` started is at `epoch`.
pub fn wait_epoch(dir: &Path, epoch: u64) {
    wait_epoch_except(dir, epoch, &[]);
}

/// Waits (60 s at most) until every consenter `fabrx up` started but those named in
/// `skip` (a party's that left) is at `epoch`.
pub fn wait_epoch_except(dir: &Path, epoch: u64, skip: &[&str]) {
    let start = Instant::now();
    let at = || {
        epochs_by_name(dir)
            .into_iter()
            .filter(|(name, _)| !skip.contains(&name.as_str()))
            .collect::<Vec<_>>()
    };
    while !at().iter().all(|(_, e)| *e == Some(epoch)) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not all at {epoch}: {:?}",
            at()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The config in force, as the consenters answer it, written to `<dir>/<name>`.
pub fn current(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    ok(&run(&[
        "network",
        "update",
        "current",
        "--network",
        s(dir),
        "--out",
        s(&path),
    ]));
    path
}

/// Proposes `next` as the update of the config in force (the file `current`), writing it
/// to `<dir>/<name>.update.json`, proves the new node keys it brings in with the key files
/// under `<dir>/keys` (where the tests write next keys and `party add` a joiner's), and
/// signs it with the admins of `signers`.
pub fn propose_and_sign(dir: &Path, current: &Path, next: &Path, name: &str, signers: &[u32]) -> PathBuf {
    let update = dir.join(format!("{name}.update.json"));
    ok(&run(&[
        "network",
        "update",
        "propose",
        "--network",
        s(current),
        "--next",
        s(next),
        "--out",
        s(&update),
    ]));
    ok(&run(&[
        "network",
        "update",
        "prove",
        "--update",
        s(&update),
        "--network",
        s(current),
        "--keys-dir",
        s(&dir.join("keys")),
    ]));
    for p in signers {
        let key = dir.join(format!("keys/party-{p}/admin.key"));
        ok(&run(&[
            "network",
            "update",
            "sign",
            "--update",
            s(&update),
            "--party",
            &p.to_string(),
            "--key",
            s(&key),
        ]));
    }
    update
}

/// `fabrx network update submit --update UPDATE --network DIR --json` and `extra`.
pub fn submit_with(dir: &Path, update: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "network",
        "update",
        "submit",
        "--update",
        s(update),
        "--network",
        s(dir),
        "--json",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// Proposes `next` as the update of the config in force `current`, signs it with the
/// admins of `signers` and submits it to the consenters.
pub fn order(dir: &Path, current: &Path, next: &Path, name: &str, signers: &[u32]) -> std::process::Output {
    let update = propose_and_sign(dir, current, next, name, signers);
    submit_with(dir, &update, &[])
}
