//! Issue 27's reconfiguration run, every node a process, under load, no genesis node
//! restarted (docs/reconfiguration.md):
//!
//! 1. **A fifth party joins** a 4-party network: `fabrx network party add` issues its keys
//!    and certificates and writes the next config; three admins sign; party 5's consenter,
//!    batchers, router and assembler are started with `--join` before the update is
//!    ordered (refused by everyone until then, they keep dialling); the update goes
//!    through a router while `fabrx loadgen` sends. Every genesis consenter reaches a set
//!    of five; the joiner becomes a member (`fabrx_consenter_member` 1); party 5's
//!    batchers start their cores at that decision; every genesis assembler fetches from
//!    party 5's batchers; party 5's assembler builds the whole ledger (`fabrx blocks
//!    --party 5` finds it through the config in force), block for block party 1's.
//! 2. **Party 2 leaves** (`fabrx network party remove`, signed by parties 1, 3 and 4,
//!    ordered under load): its router, batchers, consenter and assembler stop themselves
//!    at the decision that removes it; the others go on as parties 1, 3, 4 and 5 (f = 1), and a
//!    load goes to their four routers.
//! 3. **Every ordering node's TLS certificate rotates** (update A adds the next ones,
//!    update B retires the old ones), party 5's included.
//! 4. **Every signing key rotates**: all eight batcher keys and party 1's consenter key in
//!    one update, then the other consenter keys one per update (at most f at once), each
//!    node reading its next key where it was written while it ran.
//! 5. **The batch timeout changes.**
//!
//! Every tx of every load is committed (across update B and the removal, every
//! acknowledged one), every block verifies across the nine switches at parties 1 and 5,
//! and no node was restarted but the joiner (party 2's stopped themselves). Then, with
//! consenter 4 stopped, the set of four (quorum three) still orders — only with the
//! joiner's votes — and the last block carries its signature; the joiner restarted is a
//! member again.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod cluster;
mod envelope;
use cluster::update::{
    assert_acknowledged_committed, current, free_port, gauge, ok, order, propose_and_sign, run, s, scrape,
    wait_epoch, wait_epoch_except,
};
use cluster::{
    assert_all_committed, bin, fabrx_ok as fabrx, free_base_port, kill_and_wait as kill, last_json,
    network_json as network, pid_in as pid_of, up_load,
};

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pid of every node `fabrx up` started, by name.
fn pids(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    network(dir)["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap().to_owned(), n["pid"].as_u64().unwrap()))
        .collect()
}

/// (name, role, log text) of every node `fabrx up` started.
fn logs(dir: &Path) -> Vec<(String, String, String)> {
    network(dir)["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_owned(),
                n["role"].as_str().unwrap().to_owned(),
                std::fs::read_to_string(n["log"].as_str().unwrap()).unwrap_or_default(),
            )
        })
        .collect()
}

/// The consenter of the party that leaves: stopped from step 2 on.
const LEFT: &[&str] = &["consenter-2"];

/// Party 2's ordering nodes: each stops itself at the decision that removes the party.
const PARTY_2: [&str; 5] = [
    "router-2",
    "batcher-2-0",
    "batcher-2-1",
    "consenter-2",
    "assembler-2",
];

/// The admins that sign once party 2 left: a majority of the four parties.
const SIGNERS: &[u32] = &[1, 3, 4];

/// The config in force (sequence `at`) edited by `edit` (and the next sequence), ordered;
/// waits until every consenter of a party in force is at the next epoch.
fn edit_and_order(dir: &Path, at: u64, name: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let in_force = current(dir, &format!("{name}.current.json"));
    let mut next: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&in_force).unwrap()).unwrap();
    assert_eq!(next["sequence"], at);
    next["sequence"] = serde_json::json!(at + 1);
    edit(&mut next);
    let path = dir.join(format!("{name}.next.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&next).unwrap()).unwrap();
    ok(&order(dir, &in_force, &path, name, SIGNERS));
    wait_epoch_except(dir, at + 1, LEFT);
}

/// Party 5's nodes, each started with `--join`; killed on drop.
struct Joiner {
    children: Vec<Child>,
    metrics: String,
    log: PathBuf,
}

/// Starts `fabrx node ROLE --network GENESIS --party 5 --join NEXT ARGS…`, its stderr
/// appended to `log`; the ready line is awaited only when `wait` (a joining batcher
/// prints it once its party is in force).
fn start_node(dir: &Path, join: &Path, role: &str, args: &[String], log: &Path, wait: bool) -> Child {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = Command::new(bin())
        .args(["node", role, "--network"])
        .arg(dir.join("config/network-config.json"))
        .args(["--party", "5", "--join"])
        .arg(join)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    if wait {
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
        assert!(
            line.contains("\"ready\""),
            "party 5's {role} did not start: {line}\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    child
}

impl Joiner {
    /// Party 5's consenter (its ready line awaited), batchers, router and assembler.
    fn start(dir: &Path, join: &Path, metrics: &str, log: &Path) -> Joiner {
        let data = |name: &str| s(&dir.join("data/joiner").join(name)).to_owned();
        let mut children = vec![start_node(
            dir,
            join,
            "consenter",
            &[
                "--data-dir".into(),
                data("consenter-5"),
                "--metrics".into(),
                metrics.into(),
            ],
            log,
            true,
        )];
        for shard in 0..2 {
            children.push(start_node(
                dir,
                join,
                "batcher",
                &[
                    "--shard".into(),
                    shard.to_string(),
                    "--data-dir".into(),
                    data(&format!("batcher-5-{shard}")),
                ],
                log,
                false,
            ));
        }
        children.push(start_node(dir, join, "router", &[], log, true));
        children.push(start_node(
            dir,
            join,
            "assembler",
            &["--data-dir".into(), data("assembler-5")],
            log,
            true,
        ));
        Joiner {
            children,
            metrics: metrics.to_owned(),
            log: log.to_owned(),
        }
    }

    /// `(member, set_members)` as the consenter's metrics show them.
    fn membership(&self) -> Option<(f64, f64)> {
        let text = scrape(&self.metrics)?;
        Some((
            gauge(&text, "fabrx_consenter_member")?,
            gauge(&text, "fabrx_consenter_set_members")?,
        ))
    }

    /// Waits until the joiner is a member of a set of `members`.
    fn wait_member(&self, within: Duration, members: f64) {
        let start = Instant::now();
        while self.membership() != Some((1.0, members)) {
            assert!(
                start.elapsed() < within,
                "the joiner is not a member of {members}: {:?}\n{}",
                self.membership(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `(number, hash)` of every block party `party`'s assembler holds, each verified.
fn ledger(dir: &Path, party: u32) -> Vec<(u64, String)> {
    let out = fabrx(&["blocks", "--party", &party.to_string(), "--network"], dir);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|b| {
            assert_eq!(b["verified"], true, "party {party}: {b}");
            (
                b["number"].as_u64().unwrap(),
                b["hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Waits (90 s at most) until `party`'s assembler holds party 1's ledger, block for block
/// (every block verified at both).
fn wait_holds_ledger_of_1(dir: &Path, party: u32) {
    let start = Instant::now();
    loop {
        let (one, theirs) = (ledger(dir, 1), ledger(dir, party));
        if theirs.len() >= one.len() && theirs[..one.len()] == one[..] {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "party {party} holds {} blocks, party 1 {}",
            theirs.len(),
            one.len()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn a_party_joins_then_every_certificate_and_key_rotates_and_the_timeout_changes_under_load() {
    let tmp = tempfile::tempdir().unwrap();
    // FABRX_KEEP_NET=1 keeps the network directory (logs) after the test.
    let root = if std::env::var_os("FABRX_KEEP_NET").is_some() {
        tmp.keep()
    } else {
        tmp.path().to_path_buf()
    };
    let dir = root.join("net");
    let _down = cluster::DownOnDrop(dir.clone());
    let base = free_base_port().to_string();
    fabrx(
        &["up", "--seed", "51", "--base-port", &base, "--json", "--dir"],
        &dir,
    );
    assert_all_committed(&up_load(&dir, 300, 300, "pja"), 300);

    // Party 5's keys, certificates and the next config. `party add` places its endpoints
    // past every port of the config and of the devnet's `network.json` (whose metrics
    // ports lie just above the config's); checked, then moved to ports free now, since
    // nothing reserves the ports above the devnet's.
    let next = dir.join("join.next.json");
    let o = run(&[
        "network",
        "party",
        "add",
        "--network",
        s(&dir),
        "--seed",
        "5",
        "--out",
        s(&next),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&next).unwrap()).unwrap();
    let party5 = cfg["parties"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["id"] == 5)
        .expect("party 5 in the next config");
    let port_of = |addr: &str| addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
    let devnet: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("network.json")).unwrap()).unwrap();
    let devnet_highest = devnet["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| [n["listen"].as_str(), n["metrics"].as_str()])
        .flatten()
        .filter_map(port_of)
        .max()
        .unwrap();
    let router5 = port_of(party5["router"].as_str().unwrap()).unwrap();
    assert!(
        router5 > devnet_highest,
        "party add put party 5's router on port {router5}, not past the devnet's {devnet_highest}"
    );
    let move_port = |v: &mut serde_json::Value| {
        let host = v.as_str().unwrap().rsplit_once(':').unwrap().0.to_owned();
        *v = serde_json::json!(format!("{host}:{}", free_port()));
    };
    move_port(&mut party5["router"]);
    move_port(&mut party5["consenter"]["endpoint"]);
    if !party5["assembler"].is_null() {
        move_port(&mut party5["assembler"]);
    }
    for b in party5["batchers"].as_array_mut().unwrap() {
        move_port(&mut b["endpoint"]);
    }
    std::fs::write(&next, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    let genesis = dir.join("config/network-config.json");
    let update = propose_and_sign(&dir, &genesis, &next, "join", &[1, 2, 3]);

    // The joiner runs before its party is in force: a non-member nobody accepts yet.
    let metrics = format!("127.0.0.1:{}", free_port());
    let log = dir.join("joiner-consenter-5.log");
    let joiner = Joiner::start(&dir, &next, &metrics, &log);
    std::thread::sleep(Duration::from_secs(2));
    let (member, members) = joiner.membership().expect("the joiner's metrics");
    assert_eq!(member, 0.0, "a member before the update");
    assert_eq!(members, 4.0);

    // The update through party 2's router, under load.
    let during = {
        let dir = dir.clone();
        std::thread::spawn(move || up_load(&dir, 1500, 250, "pjb"))
    };
    std::thread::sleep(Duration::from_secs(2));
    let o = run(&[
        "network",
        "update",
        "submit",
        "--update",
        s(&update),
        "--network",
        s(&dir),
        "--json",
        "--router",
        "--party",
        "2",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(last_json(&o)["in_force"], true);
    wait_epoch(&dir, 1);
    assert_all_committed(&during.join().unwrap(), 1500);
    joiner.wait_member(Duration::from_secs(90), 5.0);
    // Every genesis consenter sees a set of five.
    for n in network(&dir)["nodes"].as_array().unwrap() {
        if n["role"] == "consenter" {
            let text = scrape(n["metrics"].as_str().unwrap()).unwrap();
            assert_eq!(
                gauge(&text, "fabrx_consenter_set_members"),
                Some(5.0),
                "{}",
                n["name"]
            );
        }
    }

    // 2. Party 2 leaves, under load: its ordering nodes stop themselves at the switch.
    let during = {
        let dir = dir.clone();
        std::thread::spawn(move || up_load(&dir, 1500, 250, "pjl"))
    };
    std::thread::sleep(Duration::from_secs(1));
    let in_force = current(&dir, "in-force-leave.json");
    let leave = dir.join("leave.next.json");
    let out = ok(&run(&[
        "network",
        "party",
        "remove",
        "--network",
        s(&in_force),
        "--party",
        "2",
        "--out",
        s(&leave),
    ]));
    assert!(out.contains("parties [1, 3, 4, 5], f = 1"), "{out}");
    ok(&order(&dir, &in_force, &leave, "leave", SIGNERS));
    wait_epoch_except(&dir, 2, LEFT);
    assert_acknowledged_committed(&during.join().unwrap(), 1500);
    let nodes = network(&dir);
    for name in PARTY_2 {
        let node = nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap_or_else(|| panic!("{name} in network.json"));
        let pid = node["pid"].as_u64().unwrap();
        let log = node["log"].as_str().unwrap().to_owned();
        let start = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() {
            // They serve what they hold for 20 s (`arma::LEAVE_GRACE_MS`), then stop.
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{name} still runs after its party left"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("party 2 left the network"),
            "{name} did not say why it stopped"
        );
    }
    // The consenters in force see a set of four; a load goes to four routers.
    for n in network(&dir)["nodes"].as_array().unwrap() {
        if n["role"] == "consenter" && n["name"] != "consenter-2" {
            let text = scrape(n["metrics"].as_str().unwrap()).unwrap();
            assert_eq!(
                gauge(&text, "fabrx_consenter_set_members"),
                Some(4.0),
                "{}",
                n["name"]
            );
        }
    }
    assert_eq!(joiner.membership().map(|m| m.1), Some(4.0));
    let o = run(&[
        "loadgen",
        "--target",
        "network",
        "--txs",
        "300",
        "--rate",
        "300",
        "--block-size",
        "100",
        "--tag",
        "pjm",
        "--json",
        "--drain",
        "90",
        "--network",
        s(&dir),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("to 4 routers"), "{stderr}");
    assert_all_committed(&last_json(&o), 300);

    // 3. Every ordering node's TLS certificate, party 5's included: A adds, B retires.
    let pids = pids(&dir);
    let during = {
        let dir = dir.clone();
        std::thread::spawn(move || up_load(&dir, 2000, 200, "pje"))
    };
    std::thread::sleep(Duration::from_secs(1));
    let in_force = current(&dir, "in-force-2.json");
    let next_a = dir.join("tls-a.next.json");
    let out = ok(&run(&[
        "network",
        "tls",
        "add",
        "--network",
        s(&in_force),
        "--dir",
        s(&dir),
        "--out",
        s(&next_a),
    ]));
    assert!(out.contains("issued 20 certificates"), "{out}");
    ok(&order(&dir, &in_force, &next_a, "tls-a", SIGNERS));
    wait_epoch_except(&dir, 3, LEFT);
    // B only once every node presents its new certificate (routers within a poll), as
    // docs/reconfiguration.md "Rotating TLS certificates" says.
    let start = Instant::now();
    loop {
        let presenting = logs(&dir)
            .iter()
            .filter(|(name, role, _)| {
                ["router", "batcher", "consenter", "assembler"].contains(&role.as_str())
                    && !PARTY_2.contains(&name.as_str())
            })
            .all(|(_, _, l)| l.contains("this node presents its certificate"));
        let joiner_text = std::fs::read_to_string(&log).unwrap_or_default();
        if presenting && joiner_text.matches("this node presents its certificate").count() >= 5 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not every node presents its new certificate"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let in_force = current(&dir, "in-force-3.json");
    let next_b = dir.join("tls-b.next.json");
    let out = ok(&run(&[
        "network",
        "tls",
        "retire",
        "--network",
        s(&in_force),
        "--out",
        s(&next_b),
    ]));
    assert!(out.contains("retired 25 certificates"), "{out}"); // 20 old ones and party 2's five
    ok(&order(&dir, &in_force, &next_b, "tls-b", SIGNERS));
    wait_epoch_except(&dir, 4, LEFT);
    assert_acknowledged_committed(&during.join().unwrap(), 2000);
    assert_all_committed(&up_load(&dir, 300, 300, "pjf"), 300);

    // 4. Every signing key: the eight batcher keys and party 1's consenter key in one update,
    //    then one consenter key per update. Each node finds its next key beside its key
    //    file (`<key>.next.key`), written while it runs.
    let keygen = |file: &Path, seed: &str| {
        let out = fabrx(&["keygen", "--seed", seed, "--out"], file);
        String::from_utf8_lossy(&out.stdout).trim().replace(' ', ":")
    };
    let mut batcher_keys = std::collections::BTreeMap::new();
    for p in [1, 3, 4, 5u32] {
        for shard in 0..2u32 {
            let file = dir.join(format!("keys/party-{p}/batcher-{shard}.next.key"));
            batcher_keys.insert((p, shard), keygen(&file, &format!("batcher-{p}-{shard}-next")));
        }
    }
    let consenter_key = |p: u32| {
        keygen(
            &dir.join(format!("keys/party-{p}/consenter.next.key")),
            &format!("consenter-{p}-next"),
        )
    };
    let during = {
        let dir = dir.clone();
        std::thread::spawn(move || up_load(&dir, 1000, 200, "pjg"))
    };
    std::thread::sleep(Duration::from_secs(1));
    let first = consenter_key(1);
    let mut epoch = 4;
    edit_and_order(&dir, epoch, "keys-1", |next| {
        for party in next["parties"].as_array_mut().unwrap() {
            let p = u32::try_from(party["id"].as_u64().unwrap()).unwrap();
            for b in party["batchers"].as_array_mut().unwrap() {
                let shard = u32::try_from(b["shard"].as_u64().unwrap()).unwrap();
                b["public_key"] = serde_json::json!(batcher_keys[&(p, shard)]);
            }
            if p == 1 {
                party["consenter"]["public_key"] = serde_json::json!(first);
            }
        }
    });
    epoch += 1;
    assert_all_committed(&during.join().unwrap(), 1000);
    for p in [3, 4, 5u32] {
        let key = consenter_key(p);
        edit_and_order(&dir, epoch, &format!("keys-{p}"), |next| {
            for party in next["parties"].as_array_mut().unwrap() {
                if party["id"] == p {
                    party["consenter"]["public_key"] = serde_json::json!(key);
                }
            }
        });
        epoch += 1;
        assert_all_committed(&up_load(&dir, 200, 200, &format!("pjk{p}")), 200);
    }
    // 5. The batch timeout.
    edit_and_order(&dir, epoch, "timeout", |next| {
        next["batching"]["batch_timeout_ms"] = serde_json::json!(60);
    });
    epoch += 1;
    assert_eq!(epoch, 9);
    assert_all_committed(&up_load(&dir, 300, 300, "pjh"), 300);
    joiner.wait_member(Duration::from_secs(30), 4.0);

    // Every node took its new key and the new timeout, none was restarted.
    let logs = logs(&dir);
    let joiner_log = std::fs::read_to_string(&log).unwrap();
    let count = |text: &str, role: &str| {
        logs.iter()
            .filter(|(_, r, _)| r == role)
            .map(|(_, _, l)| l.matches(text).count())
            .sum::<usize>()
            + joiner_log.matches(text).count()
    };
    assert_eq!(
        count("this batcher signs with its next key from now on", "batcher"),
        8
    );
    assert_eq!(
        count("this consenter signs with its next key from now on", "consenter"),
        4
    );
    assert_eq!(count("batch_timeout_ms=60", "batcher"), 8);
    assert_eq!(pids, self::pids(&dir), "a genesis node was restarted");
    // Every party in force (3, 4 and 5) holds party 1's ledger, every block verified at
    // each; nine config blocks.
    for other in [3, 4, 5] {
        wait_holds_ledger_of_1(&dir, other);
    }
    let out = fabrx(&["blocks", "--party", "5", "--network"], &dir);
    let blocks5: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(blocks5.iter().filter(|b| b["config"] == true).count(), 9);
    // A load goes to the four routers in force (the load client reads the config in
    // force), party 5's among them, and a quorum of them admits each tx.
    let o = run(&[
        "loadgen",
        "--target",
        "network",
        "--txs",
        "200",
        "--rate",
        "200",
        "--block-size",
        "100",
        "--tag",
        "pjr",
        "--json",
        "--drain",
        "90",
        "--network",
        s(&dir),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("to 4 routers"), "{stderr}");
    assert_all_committed(&last_json(&o), 200);
    // Party 5's batchers were primaries: batches they cut were ordered (each switch moves
    // every shard to the next term, so the rotation reaches party 5).
    let cut_by_5 = blocks5
        .iter()
        .filter(|b| b["config"] != true && b["primary"] == 5 && b["tx_count"].as_u64() > Some(0))
        .count();
    assert!(cut_by_5 > 0, "no block holds a batch party 5 cut");

    // Consenter 4 stopped: three of the four in force remain, the joiner among them — the
    // quorum of a set of four is three, so the network orders only with the joiner's
    // votes.
    kill(pid_of(&network(&dir), "consenter-4"));
    assert_all_committed(&up_load(&dir, 300, 150, "pjc"), 300);
    // Party 5's assembler built the whole ledger: the blocks party 1's holds, the same.
    wait_holds_ledger_of_1(&dir, 5);
    // Blocks certified after consenter 4 stopped carry the joiner's signature.
    let out = fabrx(&["blocks", "--party", "1", "--network"], &dir);
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert!(
        last["signers"].as_array().unwrap().iter().any(|s| s == 5),
        "the last block is not signed by the joiner: {last}"
    );
    // Every genesis assembler fetches from party 5's batchers of both shards now.
    for n in network(&dir)["nodes"].as_array().unwrap() {
        if n["role"] == "assembler" {
            let text = std::fs::read_to_string(n["log"].as_str().unwrap()).unwrap();
            assert_eq!(
                text.matches("a joined party's batcher is fetched from from now on")
                    .count(),
                2,
                "{}",
                n["name"]
            );
        }
    }
    // Party 5's batchers started their cores at the decision that added the party.
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        log_text
            .matches("the batcher starts in the term it moved the shard to")
            .count(),
        2,
        "both of party 5's batchers joined"
    );

    // The joiner restarted comes back a member (its state holds the config that adds it),
    // and the three with it order again.
    joiner.stop();
    let joiner = Joiner::start(&dir, &next, &metrics, &log);
    joiner.wait_member(Duration::from_secs(60), 4.0);
    assert_all_committed(&up_load(&dir, 200, 200, "pjd"), 200);

    // Every block verifies across the switches; nine are config blocks.
    let out = fabrx(&["blocks", "--party", "1", "--network"], &dir);
    let blocks: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(blocks.len() > 10);
    for b in &blocks {
        assert_eq!(b["verified"], true, "{b}");
    }
    assert_eq!(blocks.iter().filter(|b| b["config"] == true).count(), 9);
    drop(joiner);
}
