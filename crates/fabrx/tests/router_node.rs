//! `fabrx network generate` then `fabrx node router` as a real process: it prints its ready
//! line, refuses an invalid request itself, answers a valid one `UNAVAILABLE` while its
//! party's batcher is down, reaches the batcher at the endpoint the network config lists
//! once one listens there, and exits cleanly on SIGTERM. Every wait polls with a deadline.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod envelope;
use envelope::envelope;
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};
use wire::pb;
use wire::pb::batcher_intake_server::{BatcherIntake, BatcherIntakeServer};
use wire::pb::router_client::RouterClient;

const DEADLINE: Duration = Duration::from_secs(60);
const PARTIES: u32 = 4;
const SHARDS: u32 = 2;

fn bin() -> String {
    std::env::var("FABRX_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_fabrx").to_owned())
}

/// Kills the router when dropped (also on panic).
struct Router {
    child: Option<Child>,
    log: PathBuf,
}

impl Drop for Router {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Router {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A base port from which the `PARTIES · (3 + SHARDS)` ports of a generated network are
/// free right now.
fn free_base_port() -> u16 {
    let span = u16::try_from(PARTIES * (3 + SHARDS)).unwrap();
    for _ in 0..50 {
        let base = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let Some(end) = base.checked_add(span) else {
            continue;
        };
        let all_free = (base..end).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if all_free {
            return base;
        }
    }
    panic!("no free port range");
}

/// `fabrx network generate … --json`: its JSON line.
fn generate(dir: &Path, base_port: u16) -> serde_json::Value {
    let out = Command::new(bin())
        .args(["network", "generate", "--json", "--insecure", "--seed", "5"])
        .args(["--parties", &PARTIES.to_string(), "--shards", &SHARDS.to_string()])
        .args(["--base-port", &base_port.to_string(), "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Starts `fabrx node router` and waits for its ready line.
fn start_router(config: &Path, party: u32, dir: &Path) -> (Router, String) {
    let log = dir.join(format!("router-{party}.log"));
    let mut child = Command::new(bin())
        .args([
            "node",
            "router",
            "--party",
            &party.to_string(),
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
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
    let router = Router {
        child: Some(child),
        log,
    };
    let line = rx
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("no ready line\n{}", router.log()));
    let ready: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(ready["ready"], "router");
    assert_eq!(ready["party"], party);
    assert_eq!(ready["shards"], SHARDS);
    (router, ready["listen"].as_str().unwrap().to_string())
}

/// Sends one request on a new `Submit` stream and returns its answer (`None`: no
/// connection or no answer in time).
async fn submit(addr: &str, id: u64, request: Vec<u8>) -> Option<pb::SubmitResponse> {
    let mut client = RouterClient::connect(format!("http://{addr}")).await.ok()?;
    let (tx, rx) = mpsc::channel(1);
    tx.send(pb::SubmitRequest {
        id,
        envelope: request,
    })
    .await
    .ok()?;
    let mut answers = client.submit(ReceiverStream::new(rx)).await.ok()?.into_inner();
    let answer = timeout(Duration::from_secs(15), answers.message()).await.ok()?;
    answer.ok().flatten()
}

/// A batcher that admits everything.
#[derive(Clone)]
struct AdmitAll;

#[tonic::async_trait]
impl BatcherIntake for AdmitAll {
    type IntakeStream = ReceiverStream<Result<pb::IntakeAnswers, Status>>;

    async fn intake(
        &self,
        request: Request<Streaming<pb::IntakeBatch>>,
    ) -> Result<Response<Self::IntakeStream>, Status> {
        let (tx, rx) = mpsc::channel(64);
        let mut inbound = request.into_inner();
        tokio::spawn(async move {
            while let Ok(Some(batch)) = inbound.message().await {
                let answers = batch
                    .requests
                    .iter()
                    .map(|r| pb::IntakeResponse {
                        id: r.id,
                        admitted: true,
                        ..Default::default()
                    })
                    .collect();
                if tx.send(Ok(pb::IntakeAnswers { answers })).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_from_the_network_config_answers_unavailable_until_its_batcher_listens() {
    let dir = tempfile::tempdir().unwrap();
    let base = free_base_port();
    let generated = generate(dir.path(), base);
    let config_path = PathBuf::from(generated["config"].as_str().unwrap());
    assert_eq!(config_path, dir.path().join("config/network-config.json"));
    let key_files = generated["key_files"].as_array().unwrap();
    assert_eq!(key_files.len(), (PARTIES * (SHARDS + 1)) as usize);
    for k in key_files {
        let mode = std::fs::metadata(k["path"].as_str().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let config = netconfig::NetworkConfig::load(&config_path).unwrap();

    let (mut router, addr) = start_router(&config_path, 2, dir.path());
    // Refused by the router itself, without a batcher: an empty request.
    let r = submit(&addr, 1, vec![]).await.expect("an answer");
    assert_eq!(Code::from(r.code as i32), Code::InvalidArgument, "{r:?}");
    // A valid request while party 2's batchers are down: UNAVAILABLE, naming the batcher.
    for n in 0..4 {
        let r = submit(&addr, 10 + n, envelope(n)).await.expect("an answer");
        assert_eq!(r.id, 10 + n);
        assert_eq!(Code::from(r.code as i32), Code::Unavailable, "{r:?}");
        assert!(r.reason.contains("unavailable"), "{}", r.reason);
    }

    // Party 2's batchers start at the endpoints the config lists: the router reaches them.
    let mut servers = Vec::new();
    for shard in 0..SHARDS {
        let addr = config.batcher(2, shard).unwrap().endpoint.listen_addr();
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        servers.push(tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(BatcherIntakeServer::new(AdmitAll))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        ));
    }
    let deadline = Instant::now() + DEADLINE;
    let mut admitted = 0u64;
    let mut n = 100;
    while admitted < 8 {
        assert!(
            Instant::now() < deadline,
            "the router never reached its batchers\n{}",
            router.log()
        );
        if let Some(r) = submit(&addr, n, envelope(n)).await {
            if Code::from(r.code as i32) == Code::Ok {
                admitted += 1;
            } else {
                assert_eq!(Code::from(r.code as i32), Code::Unavailable, "{r:?}");
                sleep(Duration::from_millis(100)).await;
            }
        }
        n += 1;
    }

    // SIGTERM: a clean exit.
    let mut child = router.child.take().unwrap();
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "no exit after SIGTERM\n{}",
            router.log()
        );
        sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}\n{}", router.log());
    for s in servers {
        s.abort();
    }
}

#[test]
fn a_router_with_a_bad_party_or_config_exits_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let generated = generate(dir.path(), free_base_port());
    let config = generated["config"].as_str().unwrap();
    let run = |config: &str, party: &str| {
        Command::new(bin())
            .args([
                "node",
                "router",
                "--listen",
                "127.0.0.1:0",
                "--config",
                config,
                "--party",
                party,
            ])
            .output()
            .unwrap()
    };
    let out = run(config, "9");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("party 9 is not in [1, 2, 3, 4]"), "{stderr}");

    let mut file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(config).unwrap()).unwrap();
    file["router"] = serde_json::json!({ "answer_timeout_ms": 0 });
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, file.to_string()).unwrap();
    let out = run(bad.to_str().unwrap(), "1");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("router.answer_timeout_ms = 0"), "{stderr}");
    assert!(out.stdout.is_empty(), "no ready line");
}
