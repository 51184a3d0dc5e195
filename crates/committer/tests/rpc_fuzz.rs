//! Hostile input over every RPC of the committer's gRPC services (issue "hostile input"):
//! random bytes and mutated valid encodings (`testkit::rpcfuzz`) sent for a time budget
//! over every method of the vcservice (embedded store and PostgreSQL), the sigverifier
//! and the sidecar, each served in-process on a loopback port by its public serve API.
//!
//! Each test asserts, after every round of fuzzing (500 ms) and at the end:
//! - no panic anywhere in the process (a panic hook counts panics of every thread and
//!   spawned task; panics located in this file, i.e. failed assertions, are not counted);
//! - the service still answers honest requests correctly;
//! - state stored before fuzzing is unchanged (statuses of honest txs, stored blocks);
//!
//! and at the end, after the honest checks (so that a hang does not hide a corruption;
//! hangs are printed after every round): every fuzzed call ended with a response or a
//! gRPC status before its deadline. A subscription of valid ids may stay open (it waits
//! for events): it is given 150 ms, then closed.
//!
//! It also asserts at the end that no stream ended with OK although a request message
//! did not decode (`ok_undecodable`: the server stopped reading silently, so the client
//! could not tell garbage from a clean end; a finding of the hostile-input review). The summary
//! printed per service gives calls, OK, the suspicious kinds and a histogram of status
//! codes per method, with reproducible examples (call seed and message bytes in hex).
//!
//! Run (CI mode, 3 s of fuzzing per service):
//!     cargo test -p committer --test rpc_fuzz -- --nocapture
//! Long mode: `FUZZ_SECS=<seconds per service>` (fractions allowed; the four services
//! run in parallel), e.g.
//!     FUZZ_SECS=600 cargo test -p committer --test rpc_fuzz -- --nocapture
//! Reproduce a run: `FUZZ_SEED=<seed from the summary>` (decimal or 0x-hex); without it
//! every run draws a new seed from the clock and prints it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use prost::Message;
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use testkit::rpcfuzz::{self, FuzzConfig, Fuzzer, Rpc};
use tonic::transport::Channel;
use types::endorsement::namespace_signing_bytes;
use types::{Endorsement, NamespacePolicy, Status, Tx, TxId, TxNamespace, Write};
use wire::node::Node as _;
use wire::pb;

/// Fuzzing per service when `FUZZ_SECS` is not set.
const CI_BUDGET: Duration = Duration::from_secs(3);
/// Fuzzing between two checks of the service.
const ROUND: Duration = Duration::from_millis(500);
/// A fuzzed call not finished after this long is a hang.
const CALL_DEADLINE: Duration = Duration::from_secs(10);
/// An honest request not answered after this long fails the test.
const HONEST_DEADLINE: Duration = Duration::from_secs(20);

fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = rpcfuzz::seed_from_env();
        eprintln!("rpc fuzz: FUZZ_SEED={seed} (set it to reproduce this run)");
        seed
    })
}

fn fuzz_config() -> FuzzConfig {
    FuzzConfig {
        seed: seed(),
        call_deadline: CALL_DEADLINE,
        open_grace: Duration::from_millis(150),
    }
}

fn decodes<M: Message + Default>(bytes: &[u8]) -> bool {
    M::decode(bytes).is_ok()
}

fn enc<M: Message>(m: &M) -> Vec<u8> {
    m.encode_to_vec()
}

/// Panics outside this test file: in the services under test or their libraries.
fn service_panics() -> Vec<rpcfuzz::PanicRecord> {
    rpcfuzz::panics()
        .into_iter()
        .filter(|p| !p.location.contains("rpc_fuzz.rs"))
        .collect()
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn honest<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(HONEST_DEADLINE, f)
        .await
        .unwrap_or_else(|_| panic!("honest request {what} not answered in {HONEST_DEADLINE:?}"))
}

/// Fuzzes for the budget (`FUZZ_SECS`, else [`CI_BUDGET`]) in rounds; after each round
/// asserts that nothing panicked and no call hung, then runs `probe` (honest requests
/// with their expected answers). Prints the summary and the resident memory growth.
async fn fuzz_rounds<F, Fut>(service: &str, fuzzer: &mut Fuzzer, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let budget = rpcfuzz::budget_from_env(CI_BUDGET);
    let rss_before = rpcfuzz::rss_kib();
    let started = Instant::now();
    loop {
        fuzzer.run_for(ROUND.min(budget)).await;
        let panics = service_panics();
        assert!(
            panics.is_empty(),
            "{service}: the service panicked (FUZZ_SEED={}): {panics:#?}\n{}",
            seed(),
            fuzzer.summary()
        );
        if fuzzer.timed_out() > 0 {
            // Asserted by `assert_no_hangs` once the honest checks have run too.
            eprintln!(
                "{service}: {} calls hung past {CALL_DEADLINE:?} so far",
                fuzzer.timed_out()
            );
        }
        probe().await;
        if started.elapsed() >= budget {
            break;
        }
    }
    eprintln!(
        "{service}: {} calls in {:.1} s; resident memory {:?} KiB -> {:?} KiB\n{}",
        fuzzer.calls(),
        started.elapsed().as_secs_f64(),
        rss_before,
        rpcfuzz::rss_kib(),
        fuzzer.summary()
    );
}

/// (b) every fuzzed call ended with a response or a status before its deadline.
fn assert_no_hangs(service: &str, fuzzer: &Fuzzer) {
    assert_eq!(
        fuzzer.ok_undecodable(),
        0,
        "{service}: streams ended with OK after garbage (FUZZ_SEED={}); examples `ok-undecodable` below\n{}",
        seed(),
        fuzzer.summary()
    );
    assert_eq!(
        fuzzer.timed_out(),
        0,
        "{service}: fuzzed calls hung past {CALL_DEADLINE:?} (FUZZ_SEED={}); examples `timed-out` below\n{}",
        seed(),
        fuzzer.summary()
    );
}

fn rpc(
    name: &'static str,
    path: &'static str,
    streaming: bool,
    corpus: Vec<Vec<u8>>,
    decodes: fn(&[u8]) -> bool,
) -> Rpc {
    Rpc {
        name,
        path,
        streaming,
        may_stay_open: false,
        corpus,
        decodes,
    }
}

// ------------------------------------------------------------------ vcservice

#[path = "rpc_fuzz/vcservice.rs"]
mod vc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vcservice_embedded_survives_hostile_input() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("embedded:{}", dir.path().join("vc").display());
    vc::fuzz("vcservice (embedded)", &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vcservice_postgres_survives_hostile_input() {
    let url = testkit::pg::cluster().fresh_database("rpcfuzz").await;
    vc::fuzz("vcservice (postgres)", &url).await;
}

// ------------------------------------------------------------------ sigverifier

#[path = "rpc_fuzz/sigverifier.rs"]
mod sv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigverifier_survives_hostile_input() {
    use sigverifier::service::{ServiceConfig, VerifierService};
    rpcfuzz::install_panic_counter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = VerifierService::new(
        sigverifier::Verifier::new(2).unwrap(),
        ServiceConfig::default(),
        std::sync::Arc::new(
            sigverifier::metrics::Metrics::register(&telemetry::Registry::detached("sigverifier")).unwrap(),
        ),
    );
    let serving = wire::node::serve(listener, &ServiceConfig::default().server, |b| {
        b.add_service(svc.into_server())
    })
    .unwrap();
    let ch = channel(addr).await;
    let mut client = pb::sig_verifier_client::SigVerifierClient::new(ch.clone());
    honest("Verify before fuzzing", sv::honest_verify(&mut client, 1)).await;
    let mut fuzzer = Fuzzer::new(ch.clone(), sv::rpcs(), fuzz_config());
    fuzz_rounds("sigverifier", &mut fuzzer, || {
        let mut client = client.clone();
        async move { honest("Verify", sv::honest_verify(&mut client, 7)).await }
    })
    .await;
    honest("Verify after fuzzing", sv::honest_verify(&mut client, 9)).await;
    assert!(service_panics().is_empty(), "{:#?}", service_panics());
    assert_no_hangs("sigverifier", &fuzzer);
    serving.stop(std::time::Duration::from_secs(5)).await;
}

// ------------------------------------------------------------------ sidecar

#[path = "rpc_fuzz/sidecar.rs"]
mod sc;

/// A sidecar node (in-process verifier and embedded vcservice) that has run a random
/// workload: its stored blocks, statuses and next block must survive the fuzzing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_survives_hostile_input() {
    use wire::pb::sidecar_client::SidecarClient;
    rpcfuzz::install_panic_counter();
    let dir = tempfile::tempdir().unwrap();
    let file = committer::blockfile::parse(&testkit::oracle::workload(seed(), 12)).unwrap();
    let (want_statuses, _) = testkit::oracle::serial(&file.meta_policy, &file.blocks).unwrap();
    let backend =
        vcservice::EmbeddedBackend::open(&dir.path().join("vc"), vcservice::Durability::NoSync).unwrap();
    let backend: std::sync::Arc<dyn vcservice::Backend> = std::sync::Arc::new(backend);
    backend.init_schema().await.unwrap();
    let engine = vcservice::Engine::new(
        backend,
        vcservice::EngineConfig::default(),
        vcservice::metrics::Metrics::unexported().unwrap(),
    );
    let mut config = sidecar::node::Config::new(dir.path().join("store"));
    config.listen = "127.0.0.1:0".parse().unwrap();
    let deps = sidecar::node::Deps {
        verify: std::sync::Arc::new(committer::LocalVerifier::new()),
        commit: std::sync::Arc::new(committer::LocalCommitter::new(engine)),
        meta_policy: file.meta_policy.clone(),
        blocks: sidecar::node::Feed::Blocks(file.blocks.clone()),
        registry: telemetry::Registry::detached("sidecar"),
    };
    let mut node = sidecar::node::spawn(config, deps).await.unwrap();
    let summary = honest("the workload", node.source_done()).await.unwrap();
    assert_eq!(summary.next_block, file.blocks.len() as u64);
    let ch = channel(node.addr).await;
    let mut client = SidecarClient::new(ch.clone());
    let next = sc::next_block(&mut client).await;
    assert_eq!(next, summary.next_block);
    let stored = sc::blocks(&mut client, next).await;
    let codes: Vec<Vec<u32>> = stored
        .iter()
        .map(|b| b.statuses.iter().map(|s| s.code).collect())
        .collect();
    let want: Vec<Vec<u32>> = want_statuses
        .iter()
        .map(|b| b.iter().map(|s| s.code()).collect())
        .collect();
    assert_eq!(codes, want, "the workload's statuses (serial oracle)");
    let ids: Vec<String> = stored
        .iter()
        .flat_map(|b| b.statuses.iter().map(|s| s.tx_id.clone()))
        .collect();
    let statuses = sc::tx_statuses(&mut client, &ids).await;
    assert_eq!(statuses.len(), ids.len());

    let mut fuzzer = Fuzzer::new(ch.clone(), sc::rpcs(&ids, next), fuzz_config());
    fuzz_rounds("sidecar", &mut fuzzer, || {
        let mut client = client.clone();
        let (ids, statuses) = (ids.clone(), statuses.clone());
        async move {
            assert_eq!(honest("GetNextBlock", sc::next_block(&mut client)).await, next);
            let now = honest("GetTxStatus", sc::tx_statuses(&mut client, &ids)).await;
            assert_eq!(now, statuses, "stored statuses changed by fuzzing");
        }
    })
    .await;
    assert_eq!(honest("GetBlock", sc::blocks(&mut client, next)).await, stored);
    assert_eq!(
        honest("GetTxStatus", sc::tx_statuses(&mut client, &ids)).await,
        statuses
    );
    honest("Subscribe", sc::subscribe_final(&mut client, &statuses[0])).await;
    assert!(service_panics().is_empty(), "{:#?}", service_panics());
    assert_no_hangs("sidecar", &fuzzer);
    node.stop().await.unwrap();
}

// ------------------------------------------------------------------ the fuzzer itself

/// The mutator is deterministic per seed, and its wire helpers agree with prost.
#[test]
fn mutator_is_seeded_and_wire_aware() {
    let corpus = vec![
        enc(&vc::create_ns("t", 3, "ns")),
        enc(&pb::SetLastCommittedRequest { number: 5 }),
    ];
    let run = |seed| {
        let mut m = rpcfuzz::Mutator::new(seed);
        (0..200)
            .map(|_| m.mutate(&corpus[0], &corpus))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
    assert!(run(7).iter().any(|b| b != &corpus[0]));

    // Top-level fields of a VcTx: tx_id (1), block (2), tx (4).
    let fields = rpcfuzz::scan_fields(&corpus[0]);
    assert_eq!(
        fields.iter().map(|f| (f.number, f.wire_type)).collect::<Vec<_>>(),
        vec![(1, 2), (2, 0), (4, 2)]
    );
    assert_eq!(fields.last().unwrap().end, corpus[0].len());
    for v in rpcfuzz::EDGE_VALUES {
        let mut b = Vec::new();
        rpcfuzz::put_varint(&mut b, v);
        assert_eq!(rpcfuzz::read_varint(&b, 0), Some((v, b.len())));
        assert_eq!(
            pb::SetLastCommittedRequest::decode([&[0x08u8][..], &b].concat().as_slice())
                .unwrap()
                .number,
            v
        );
    }
    // Deep nesting: one field whose length covers the rest, or groups prost refuses.
    let mut m = rpcfuzz::Mutator::new(1);
    for _ in 0..50 {
        let deep = m.deep_nesting();
        let fields = rpcfuzz::scan_fields(&deep);
        if deep[0] & 7 == 2 {
            assert_eq!(fields.len(), 1);
            assert_eq!(fields[0].end, deep.len());
        }
    }
}

/// The raw codec delivers bytes unchanged in both directions: a valid encoding sent raw
/// is answered like a typed call, and garbage reaches the server's decoder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_calls_reach_the_decoder() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("embedded:{}", dir.path().join("vc").display());
    let config = vcservice::config::VcConfig::from_toml(&format!(
        "listen = \"127.0.0.1:0\"\ndb = \"{db}\"\ndurability = \"no-sync\"\n"
    ))
    .unwrap();
    let node = vcservice::node::spawn(config, vcservice::node::Deps::default())
        .await
        .unwrap();
    let ch = channel(node.addr).await;
    let set = enc(&pb::SetLastCommittedRequest { number: 41 });
    let path = "/fabrx.v1.VcService/SetLastCommitted";
    let got = rpcfuzz::call(&ch, path, vec![set.into()], CALL_DEADLINE).await;
    assert_eq!(got, rpcfuzz::Outcome::Ok { responses: 1 });
    let next = rpcfuzz::call(
        &ch,
        "/fabrx.v1.VcService/GetNextBlock",
        vec![bytes::Bytes::new()],
        CALL_DEADLINE,
    )
    .await;
    assert_eq!(next, rpcfuzz::Outcome::Ok { responses: 1 });
    let mut client = pb::vc_service_client::VcServiceClient::new(ch.clone());
    let n = client
        .get_next_block(pb::LastCommittedRequest {})
        .await
        .unwrap()
        .into_inner()
        .number;
    assert_eq!(n, 42);
    // A truncated varint does not decode.
    let (garbage, message) = rpcfuzz::call_detailed(
        &ch,
        path,
        vec![bytes::Bytes::from_static(&[0x08, 0xff])],
        CALL_DEADLINE,
    )
    .await;
    assert!(matches!(garbage, rpcfuzz::Outcome::Failed { .. }), "{garbage:?}");
    assert!(message.contains("decode"), "{message}");
    node.stop().await.unwrap();
}
