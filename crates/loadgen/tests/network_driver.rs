//! The network driver against a sink whose routers misbehave as a lagging or faulty
//! party's do: the run ends, and every tx is accounted for.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use loadgen::network::{self, Endpoints, Pace};
use loadgen::series::Schedule;
use loadgen::sink::{self, RouterMode, SinkRouter};
use prost::Message as _;
use types::{Tx, TxId};
use wire::pb;

/// `n` txs with distinct ids, as envelopes of about 1 KiB (so that a router that never
/// reads fills its link's transport windows and queue).
fn txs(n: usize) -> Vec<(String, Arc<Vec<u8>>)> {
    (0..n)
        .map(|i| {
            let id = TxId(format!("tx-{i:06}"));
            let mut env = pb::Envelope::decode(network::envelope(&id, &Tx::default()).as_slice()).unwrap();
            env.nonce = vec![7; 1000];
            (id.0, Arc::new(env.encode_to_vec()))
        })
        .collect()
}

fn endpoints(s: &sink::Sink) -> Endpoints {
    Endpoints {
        routers: s.routers.iter().map(|a| format!("http://{a}")).collect(),
        sidecar: None,
        assembler: format!("http://{}", s.assembler),
    }
}

/// Four admitting routers, the first of which orders what it admits.
fn admitting_routers() -> [SinkRouter; 4] {
    let admit = SinkRouter {
        mode: RouterMode::Admit,
        orders: false,
    };
    [
        SinkRouter {
            orders: true,
            ..admit
        },
        admit,
        admit,
        admit,
    ]
}

/// A run's pace: `schedule`, at most `max_in_flight`, `drain` after the last send.
fn pace(schedule: Schedule, max_in_flight: usize, drain: Duration) -> Pace {
    Pace {
        schedule,
        max_in_flight: NonZeroUsize::new(max_in_flight).unwrap(),
        duration: None,
        drain,
        control: None,
        linger: loadgen::network::LINGER,
    }
}

/// `run`, which must end within two minutes.
async fn ended<T>(run: impl std::future::Future<Output = loadgen::Result<T>>) -> T {
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run ended")
        .unwrap()
}

/// One router never reads its stream (stuck), one answers every request as a
/// duplicate (its batcher holds them from another party's batch), two admit: every tx
/// still reaches a quorum and is confirmed, and the run ends after its drain although
/// the stuck router's answers never come. The client used to wait for room on the
/// stuck router's link for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_router_and_duplicate_answers_do_not_stop_the_run() {
    let routers = [
        SinkRouter {
            mode: RouterMode::Admit,
            orders: true,
        },
        SinkRouter {
            mode: RouterMode::Admit,
            orders: false,
        },
        SinkRouter {
            mode: RouterMode::Duplicate,
            orders: false,
        },
        SinkRouter {
            mode: RouterMode::Hang,
            orders: false,
        },
    ];
    let s = sink::start(&routers).await.unwrap();
    let load = txs(5000);
    let pace = pace(Schedule::Unpaced, 200, Duration::from_secs(3));
    let run = ended(network::run(&endpoints(&s), &load, pace, |_| {})).await;
    assert_eq!(run.sent, 5000);
    assert_eq!(run.never_confirmed(), 0, "{:?}", run.router_errors);
    assert_eq!(run.confirmed, 5000);
    assert_eq!(run.statuses.get("ORDERED"), Some(&5000));
    assert_eq!((run.submitted, run.refused), (5000, 0));
    assert_eq!(run.router_errors.get("router 3: AlreadyExists"), Some(&5000));
    let stuck = run.router_errors.get("router 4: backlog").copied().unwrap_or(0);
    assert!(
        stuck > 1000,
        "the stuck router's full link: {:?}",
        run.router_errors
    );
    assert!(!run.stalled);
}

/// A fast run (50,000 tx/s offered against the sink): every tx confirmed, three times
/// over. (The status watcher's race with the blocks it reads has its own test,
/// `network::links::tests`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_run_confirms_every_tx() {
    for round in 0..3 {
        let s = sink::start(&admitting_routers()).await.unwrap();
        let load = txs(40_000);
        let pace = pace(
            Schedule::Fixed { rate: 50_000.0 },
            40_000,
            Duration::from_secs(30),
        );
        let run = ended(network::run(&endpoints(&s), &load, pace, |_| {})).await;
        assert_eq!(run.never_confirmed(), 0, "round {round}: {:?}", run.router_errors);
        assert_eq!(run.confirmed, 40_000, "round {round}");
        assert_eq!(run.submitted, 40_000, "round {round}");
        s.stop().await;
    }
}

/// The driver sends each router many txs per message (`SubmitMany`): 40,000 txs to 4
/// routers arrive as 160,000 requests in far fewer messages (a driver that sent one
/// message per tx per router would send 160,000). The txs come from a template
/// (`Load::template`): every one confirmed by its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txs_go_in_batches_and_template_txs_are_confirmed() {
    let s = sink::start(&admitting_routers()).await.unwrap();
    let n = 40_000;
    let load = Arc::new(network::Load::template("batched-", n, 300));
    let pace = pace(Schedule::Unpaced, 20_000, Duration::from_secs(30));
    let run = ended(network::run_load(&endpoints(&s), load, pace, |_| {})).await;
    assert_eq!(run.confirmed, n as u64, "{:?}", run.router_errors);
    assert_eq!(run.submitted, n as u64);
    assert_eq!(s.stats().requests(), 4 * n as u64);
    let messages = s.stats().messages();
    assert!(
        messages * 10 <= 4 * n as u64,
        "{messages} messages for {} requests",
        4 * n
    );
}
