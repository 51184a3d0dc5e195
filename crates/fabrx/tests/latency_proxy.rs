//! `fabrx latency-proxy` as a real process in front of an echo server: a round trip
//! through it takes at least twice the one-way delay, bytes arrive intact and in order
//! (also a payload much larger than the proxy's per-direction buffer, which must then
//! hold the sender back instead of dropping or reordering), a half-close passes through,
//! several routes serve from one process, SIGTERM exits 0, and a bad route is refused
//! without a ready line. No upper bound on any time: only lower bounds, which cannot flake.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DELAY_MS: u64 = 60;
const DEADLINE: Duration = Duration::from_secs(60);

fn bin() -> String {
    std::env::var("FABRX_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_fabrx").to_owned())
}

/// An echo server on loopback: each connection gets back what it sends, and its write
/// side is closed when the client closes its own. Serves at most `connections`.
fn echo_server(connections: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = stream.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

/// The proxy process; killed when dropped (also on panic).
struct Proxy {
    child: Child,
    ready: serde_json::Value,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    fn start(args: &[String]) -> Proxy {
        let mut child = Command::new(bin())
            .arg("latency-proxy")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let line = BufReader::new(stdout).lines().next();
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(DEADLINE)
            .expect("no ready line within the deadline")
            .expect("the proxy printed nothing")
            .unwrap();
        let ready: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(ready["ready"], "latency-proxy", "{line}");
        Proxy { child, ready }
    }

    fn listen(&self, route: usize) -> SocketAddr {
        self.ready["routes"][route]["listen"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

#[test]
fn round_trips_take_twice_the_delay_and_keep_every_byte_in_order() {
    let echo = echo_server(8);
    let proxy = Proxy::start(&[
        "--route".into(),
        format!("127.0.0.1:0={echo}"),
        "--route".into(),
        format!("127.0.0.1:0={echo}"),
        "--delay-ms".into(),
        DELAY_MS.to_string(),
        "--max-buffer-bytes".into(),
        "65536".into(),
    ]);
    assert_eq!(proxy.ready["delay_ms"], DELAY_MS);
    assert_eq!(proxy.ready["routes"].as_array().unwrap().len(), 2);
    assert_eq!(proxy.ready["routes"][0]["target"], echo.to_string());
    let round_trip = Duration::from_millis(2 * DELAY_MS);

    // Small messages, one after another on one connection: each round trip ≥ 2 × delay.
    let mut s = connect(proxy.listen(0));
    for i in 0..3u8 {
        let msg = [b'p', b'i', b'n', b'g', i];
        let began = Instant::now();
        s.write_all(&msg).unwrap();
        let mut back = [0u8; 5];
        s.read_exact(&mut back).unwrap();
        let took = began.elapsed();
        assert_eq!(back, msg);
        assert!(
            took >= round_trip,
            "round trip {i} took {took:?}, less than {round_trip:?}"
        );
    }
    drop(s);

    // 2 MiB (32 × the proxy's buffer) through the second route, written by one thread
    // while this one reads, then a half-close: everything comes back, in order, then EOF.
    let data: Vec<u8> = (0..2 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let s = connect(proxy.listen(1));
    let mut writer = s.try_clone().unwrap();
    let sent = data.clone();
    let began = Instant::now();
    let sending = std::thread::spawn(move || {
        writer.write_all(&sent).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::with_capacity(data.len());
    let mut reader = s;
    reader.read_to_end(&mut back).unwrap();
    let took = began.elapsed();
    sending.join().unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echoed bytes differ from the sent ones");
    assert!(took >= round_trip, "2 MiB round trip took {took:?}");
}

#[test]
fn sigterm_exits_zero_and_a_bad_route_is_refused() {
    let echo = echo_server(1);
    let mut proxy = Proxy::start(&["--route".into(), format!("127.0.0.1:0={echo}")]);
    assert_eq!(proxy.ready["delay_ms"], 0);
    let pid = proxy.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let began = Instant::now();
    let status = loop {
        if let Some(status) = proxy.child.try_wait().unwrap() {
            break status;
        }
        assert!(began.elapsed() < DEADLINE, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");

    for bad in ["127.0.0.1:0", "127.0.0.1:0=nowhere", "localhost:1=127.0.0.1:2"] {
        let out = Command::new(bin())
            .args(["latency-proxy", "--route", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad}: accepted");
        assert!(
            out.stdout.is_empty(),
            "{bad}: printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("route") || err.contains("address") || err.contains("target"),
            "{bad}: {err}"
        );
    }
}
