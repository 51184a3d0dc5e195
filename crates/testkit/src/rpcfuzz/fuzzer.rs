//! The fuzz loop: round-robin calls over a service's methods, tallied.

use super::*;
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

// ---------------------------------------------------------------- fuzz loop

/// One method of a service under fuzzing.
#[derive(Debug, Clone)]
pub struct Rpc {
    /// A short name for summaries (`VcService/Commit`).
    pub name: &'static str,
    /// The gRPC path (`/fabrx.v1.VcService/Commit`).
    pub path: &'static str,
    /// Whether the client streams (several messages per call); else one message.
    pub streaming: bool,
    /// Whether a call of valid messages may legitimately stay open (a subscription
    /// waiting for events): such a call is given [`FuzzConfig::open_grace`], then closed.
    pub may_stay_open: bool,
    /// Valid encodings of the request type, the templates of the mutations.
    pub corpus: Vec<Vec<u8>>,
    /// Whether bytes decode as the request type (`pb::X::decode(b).is_ok()`).
    pub decodes: fn(&[u8]) -> bool,
}

/// Settings of a [`Fuzzer`].
#[derive(Debug, Clone, Copy)]
pub struct FuzzConfig {
    /// The run's seed.
    pub seed: u64,
    /// A call not finished after this long is a hang.
    pub call_deadline: Duration,
    /// How long a call of [`Rpc::may_stay_open`] with valid messages is left open.
    pub open_grace: Duration,
}

/// A suspicious call, reproducible from its seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// What was suspicious (`ok-undecodable`, `ok-no-response`, `timed-out`).
    pub what: &'static str,
    /// The seed [`Fuzzer::messages`] regenerates the call from.
    pub call_seed: u64,
    /// How the call ended.
    pub outcome: Outcome,
    /// The request messages, hex (the first 96 bytes of each).
    pub messages: Vec<String>,
}

/// Outcomes of one method's calls.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Calls made.
    pub calls: u64,
    /// Calls ended with OK and an answer (unary) or OK after valid messages (stream).
    pub ok: u64,
    /// Unary calls ended with OK but no response message.
    pub ok_no_response: u64,
    /// Calls ended with OK although a request message did not decode (a stream that
    /// stops reading silently: the client cannot tell garbage from a clean end).
    pub ok_undecodable: u64,
    /// Calls of valid messages still open after the grace (allowed subscriptions).
    pub open: u64,
    /// Calls not finished by the deadline (hangs).
    pub timed_out: u64,
    /// Final status codes (`Ok` included), by name.
    pub codes: BTreeMap<String, u64>,
    /// Up to three examples of each suspicious kind.
    pub examples: Vec<Example>,
    /// The first status message seen per non-OK code, with its call seed.
    pub first_errors: BTreeMap<String, String>,
}

/// Round-robin fuzzing of a service's methods over one channel.
#[derive(Debug)]
pub struct Fuzzer {
    channel: Channel,
    rpcs: Vec<Rpc>,
    tallies: Vec<Tally>,
    config: FuzzConfig,
    rng: ChaCha8Rng,
    next: usize,
}

impl Fuzzer {
    /// A fuzzer of `rpcs` over `channel`.
    pub fn new(channel: Channel, rpcs: Vec<Rpc>, config: FuzzConfig) -> Fuzzer {
        Fuzzer {
            channel,
            tallies: vec![Tally::default(); rpcs.len()],
            rpcs,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            next: 0,
        }
    }

    /// The request messages of the call drawn with `call_seed` (deterministic): mutated
    /// corpus messages, random bytes, deep nesting, valid messages; several per stream
    /// (all hostile, or hostile then valid, or valid, hostile, valid); for a unary method
    /// one message, sometimes none or two.
    pub fn messages(rpc: &Rpc, call_seed: u64) -> Vec<Vec<u8>> {
        let mut m = Mutator::new(call_seed);
        // Half the calls carry only messages that still decode, so that the hostile
        // values reach the handlers instead of stopping at the decoder.
        let next: fn(&mut Mutator, &Rpc) -> Vec<u8> = if m.rng().gen_bool(0.5) {
            hostile_decodable
        } else {
            hostile
        };
        if !rpc.streaming {
            return match m.rng().gen_range(0..100) {
                0..3 => Vec::new(),
                3..6 => vec![next(&mut m, rpc), next(&mut m, rpc)],
                _ => vec![next(&mut m, rpc)],
            };
        }
        let n = m.rng().gen_range(1..=6);
        let mut out: Vec<Vec<u8>> = (0..n).map(|_| next(&mut m, rpc)).collect();
        match m.rng().gen_range(0..3) {
            0 => {}
            1 => out.push(valid(&mut m, rpc)),
            _ => {
                out.insert(0, valid(&mut m, rpc));
                out.push(valid(&mut m, rpc));
            }
        }
        out
    }

    /// Calls methods round-robin until `budget` has passed (at least one call).
    pub async fn run_for(&mut self, budget: Duration) {
        let until = Instant::now() + budget;
        loop {
            self.call_next().await;
            if Instant::now() >= until {
                break;
            }
        }
    }

    /// Makes the next call and tallies it.
    pub async fn call_next(&mut self) {
        if self.rpcs.is_empty() {
            return;
        }
        let i = self.next % self.rpcs.len();
        self.next += 1;
        let call_seed: u64 = self.rng.r#gen();
        let rpc = &self.rpcs[i];
        let messages = Fuzzer::messages(rpc, call_seed);
        let valid = messages.iter().all(|b| (rpc.decodes)(b));
        let deadline = if rpc.may_stay_open && valid {
            self.config.open_grace
        } else {
            self.config.call_deadline
        };
        let payload = messages.iter().map(|b| Bytes::copy_from_slice(b)).collect();
        let (outcome, detail) = call_detailed(&self.channel, rpc.path, payload, deadline).await;
        let what = classify(rpc, valid, outcome, &mut self.tallies[i]);
        let tally = &mut self.tallies[i];
        if let Outcome::Failed { code, .. } = outcome
            && !detail.is_empty()
        {
            let first = tally.first_errors.entry(format!("{code:?}")).or_default();
            if first.is_empty() {
                *first = format!(
                    "{} (call_seed={call_seed:#x})",
                    detail.chars().take(160).collect::<String>()
                );
            }
        }
        if let Some(what) = what
            && tally.examples.iter().filter(|e| e.what == what).count() < 3
        {
            tally.examples.push(Example {
                what,
                call_seed,
                outcome,
                messages: messages.iter().map(|b| hex(b, 96)).collect(),
            });
        }
    }

    /// (method name, tally) of every method.
    pub fn tallies(&self) -> impl Iterator<Item = (&'static str, &Tally)> {
        self.rpcs.iter().map(|r| r.name).zip(self.tallies.iter())
    }

    /// Calls that did not finish by the deadline, over every method.
    pub fn timed_out(&self) -> u64 {
        self.tallies.iter().map(|t| t.timed_out).sum()
    }

    /// Streams ended with OK although a request message did not decode, over every method.
    pub fn ok_undecodable(&self) -> u64 {
        self.tallies.iter().map(|t| t.ok_undecodable).sum()
    }

    /// Calls made, over every method.
    pub fn calls(&self) -> u64 {
        self.tallies.iter().map(|t| t.calls).sum()
    }

    /// A human-readable summary: one line per method, then the examples.
    pub fn summary(&self) -> String {
        let mut out = format!("rpc fuzz summary (FUZZ_SEED={}):\n", self.config.seed);
        for (name, t) in self.tallies() {
            out.push_str(&format!(
                "  {name:<26} calls={:<6} ok={:<6} ok_no_response={:<4} ok_undecodable={:<5} open={:<5} timed_out={:<3} codes={:?}\n",
                t.calls, t.ok, t.ok_no_response, t.ok_undecodable, t.open, t.timed_out, t.codes
            ));
        }
        for (name, t) in self.tallies() {
            for (code, message) in &t.first_errors {
                out.push_str(&format!("  first {name} {code}: {message}\n"));
            }
        }
        for (name, t) in self.tallies() {
            for e in &t.examples {
                out.push_str(&format!(
                    "  example {name} {} call_seed={:#x} outcome={:?} messages={:?}\n",
                    e.what, e.call_seed, e.outcome, e.messages
                ));
            }
        }
        out
    }
}

/// A hostile message for `rpc`: mostly a mutated corpus message, else random bytes, deep
/// nesting, or (rarely) a valid one.
pub(crate) fn hostile(m: &mut Mutator, rpc: &Rpc) -> Vec<u8> {
    let roll = m.rng().gen_range(0..100);
    match roll {
        0..15 => m.random_bytes(256),
        15..22 => m.deep_nesting(),
        _ if rpc.corpus.is_empty() => m.random_bytes(64),
        22..27 => valid(m, rpc),
        _ => {
            let template = valid(m, rpc);
            m.mutate(&template, &rpc.corpus)
        }
    }
}

/// A hostile message that still decodes as the request type (a valid one when eight
/// tries did not give one).
pub(crate) fn hostile_decodable(m: &mut Mutator, rpc: &Rpc) -> Vec<u8> {
    for _ in 0..8 {
        let b = hostile(m, rpc);
        if (rpc.decodes)(&b) {
            return b;
        }
    }
    valid(m, rpc)
}

pub(crate) fn valid(m: &mut Mutator, rpc: &Rpc) -> Vec<u8> {
    if rpc.corpus.is_empty() {
        return Vec::new();
    }
    rpc.corpus[m.rng().gen_range(0..rpc.corpus.len())].clone()
}

/// Tallies `outcome`; returns the kind of a suspicious one.
pub(crate) fn classify(rpc: &Rpc, valid: bool, outcome: Outcome, t: &mut Tally) -> Option<&'static str> {
    t.calls += 1;
    let code = match outcome {
        Outcome::Ok { .. } => Some(tonic::Code::Ok),
        Outcome::Failed { code, .. } => Some(code),
        Outcome::TimedOut { .. } => None,
    };
    if let Some(code) = code {
        *t.codes.entry(format!("{code:?}")).or_default() += 1;
    }
    match outcome {
        Outcome::Ok { .. } if !valid => {
            t.ok_undecodable += 1;
            Some("ok-undecodable")
        }
        Outcome::Ok { responses: 0 } if !rpc.streaming => {
            t.ok_no_response += 1;
            Some("ok-no-response")
        }
        Outcome::Ok { .. } => {
            t.ok += 1;
            None
        }
        Outcome::Failed { .. } => None,
        Outcome::TimedOut { .. } if rpc.may_stay_open && valid => {
            t.open += 1;
            None
        }
        Outcome::TimedOut { .. } => {
            t.timed_out += 1;
            Some("timed-out")
        }
    }
}
