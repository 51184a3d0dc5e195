//! Deterministic simulation of the BFT engine over many seeds.
//!
//! * `SIM_SEEDS=<count>` — seeds in total across the seed tests (default 6000).
//! * `SIM_SEED=<seed>` with the `reproduce` test — runs one seed with a trace.

use std::time::Instant;

use testkit::sim::run_seed;

fn seeds_total() -> u64 {
    std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6000)
}

/// Runs seeds `first..first+count` on two threads; panics with every failing seed.
fn run_range(first: u64, count: u64) {
    let start = Instant::now();
    let threads = 2;
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut failures = Vec::new();
                    let mut seed = first + t;
                    while seed < first + count {
                        if let Err(e) = run_seed(seed, false) {
                            eprintln!("{e}\n  reproduce: SIM_SEED={seed} cargo test -p testkit --test sim reproduce -- --nocapture");
                            failures.push(e);
                        }
                        seed += threads;
                    }
                    failures
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("sim thread"))
            .collect()
    });
    eprintln!(
        "sim: {count} seeds from {first} in {:.1}s, {} failures",
        start.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} seeds failed, first: {}",
        failures.len(),
        failures[0]
    );
}

#[test]
fn seeds_first_half() {
    run_range(0, seeds_total() / 2);
}

#[test]
fn seeds_second_half() {
    let total = seeds_total();
    run_range(1_000_000 + total / 2, total - total / 2);
}

#[test]
fn same_seed_same_run() {
    let a = run_seed(42, false).expect("seed 42");
    let b = run_seed(42, false).expect("seed 42");
    assert_eq!((a.steps, a.end_ms, a.decided), (b.steps, b.end_ms, b.decided));
}

#[test]
fn reproduce() {
    let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) else {
        return;
    };
    let trace = std::env::var("SIM_TRACE").is_ok_and(|v| v == "1");
    match run_seed(seed, trace) {
        Ok(r) => eprintln!("seed {seed} ok: {r:?}"),
        Err(e) => panic!("{e}"),
    }
}
