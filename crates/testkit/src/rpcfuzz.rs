//! Hostile-input fuzzing of gRPC services over a real `tonic` channel.
//!
//! - [`RawCodec`]: a codec whose messages are raw [`Bytes`], so arbitrary bytes reach
//!   the server's protobuf decoder (a typed client could only send valid messages);
//! - [`call`]: one call of any unary or streaming method by its path, every outcome
//!   classified ([`Outcome`]), never waiting past a deadline;
//! - [`Mutator`]: seeded mutations of valid encodings (bit flips, byte replacement,
//!   truncation, extension, splicing, varint edge values, huge length prefixes, wrong
//!   wire types, duplicated and unknown fields, mutations inside nested messages, deep
//!   nesting) and pure random bytes;
//! - [`Fuzzer`]: round-robin calls over a service's methods for a time budget, with a
//!   per-method tally ([`Tally`]) and reproducible examples of suspicious outcomes;
//! - [`install_panic_counter`] / [`panics`]: a process-wide panic hook, so a panic in any
//!   thread or spawned task of the service under test is seen by the test.
//!
//! Everything is deterministic per seed: call `i` of a run uses a seed drawn from the
//! run's seed, and [`Fuzzer::messages`] regenerates a call's messages from it.

use bytes::{Buf, BufMut, Bytes};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Mutex, Once, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// A gRPC codec whose messages are raw bytes in both directions.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

/// Encoder of [`RawCodec`]: writes the bytes as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawEncoder;

/// Decoder of [`RawCodec`]: returns the message bytes as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Status OK after `responses` messages.
    Ok {
        /// Response messages received.
        responses: usize,
    },
    /// A non-OK status after `responses` messages.
    Failed {
        /// The status code.
        code: tonic::Code,
        /// Response messages received before the status.
        responses: usize,
    },
    /// Not finished by the deadline.
    TimedOut {
        /// Response messages received before the deadline.
        responses: usize,
    },
}

/// Calls `path` (`/package.Service/Method`) with `messages` as the request stream (closed
/// after the last one), reads every response and the final status, and gives up after
/// `deadline`. A unary method is called the same way: tonic's unary client would turn
/// "OK without a message" into a client-made `INTERNAL`, hiding what the server did.
pub async fn call(
    channel: &Channel,
    path: &'static str,
    messages: Vec<Bytes>,
    deadline: Duration,
) -> Outcome {
    call_detailed(channel, path, messages, deadline).await.0
}

/// [`call`], with the message of a non-OK status (empty otherwise).
pub async fn call_detailed(
    channel: &Channel,
    path: &'static str,
    messages: Vec<Bytes>,
    deadline: Duration,
) -> (Outcome, String) {
    let mut responses = 0usize;
    let attempt = async {
        let mut grpc = tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(usize::MAX);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let request = tonic::Request::new(tokio_stream::iter(messages));
        let mut stream = grpc
            .streaming(request, PathAndQuery::from_static(path), RawCodec)
            .await?
            .into_inner();
        while stream.message().await?.is_some() {
            responses += 1;
        }
        Ok::<(), tonic::Status>(())
    };
    match tokio::time::timeout(deadline, attempt).await {
        Ok(Ok(())) => (Outcome::Ok { responses }, String::new()),
        Ok(Err(status)) => (
            Outcome::Failed {
                code: status.code(),
                responses,
            },
            status.message().to_string(),
        ),
        Err(_) => (Outcome::TimedOut { responses }, String::new()),
    }
}

// ---------------------------------------------------------------- panics

/// A panic seen by the hook of [`install_panic_counter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanicRecord {
    /// The panicking thread's name.
    pub thread: String,
    /// `file:line:column` of the panic.
    pub location: String,
    /// The panic message.
    pub message: String,
}

fn panic_log() -> &'static Mutex<Vec<PanicRecord>> {
    static LOG: OnceLock<Mutex<Vec<PanicRecord>>> = OnceLock::new();
    LOG.get_or_init(|| Mutex::new(Vec::new()))
}

/// Installs (once per process) a panic hook that records every panic of every thread,
/// tokio worker threads and blocking threads included (a panicking task is caught by
/// tokio, but the hook runs first), then calls the previous hook.
pub fn install_panic_counter() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = if let Some(s) = info.payload().downcast_ref::<&str>() {
                (*s).to_string()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "<non-string payload>".to_string()
            };
            let record = PanicRecord {
                thread: std::thread::current().name().unwrap_or("<unnamed>").to_string(),
                location: info
                    .location()
                    .map_or_else(|| "<unknown>".to_string(), ToString::to_string),
                message,
            };
            panic_log()
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(record);
            previous(info);
        }));
    });
}

/// Every panic recorded since [`install_panic_counter`].
pub fn panics() -> Vec<PanicRecord> {
    panic_log().lock().unwrap_or_else(PoisonError::into_inner).clone()
}

// ---------------------------------------------------------------- environment

/// The run's seed: `FUZZ_SEED` (decimal or `0x` hex) when set, else one from the clock.
pub fn seed_from_env() -> u64 {
    let parsed = std::env::var("FUZZ_SEED").ok().and_then(|s| {
        let s = s.trim();
        match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        }
    });
    parsed.unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        now.as_secs() ^ u64::from(now.subsec_nanos()).rotate_left(32)
    })
}

/// The fuzzing budget per service: `FUZZ_SECS` (seconds, may be fractional) when set,
/// else `default`.
pub fn budget_from_env(default: Duration) -> Duration {
    std::env::var("FUZZ_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(default, Duration::from_secs_f64)
}

/// Resident memory of this process in KiB (`VmRSS`), when `/proc` tells.
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Lowercase hex of `bytes`, cut after `max` bytes (with the full length noted).
pub fn hex(bytes: &[u8], max: usize) -> String {
    let mut out: String = bytes.iter().take(max).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > max {
        out.push_str(&format!("…({} bytes)", bytes.len()));
    }
    out
}

// ---------------------------------------------------------------- protobuf wire helpers

/// Appends the varint encoding of `v`.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `pos`: (value, position after it); none when malformed or cut.
pub fn read_varint(buf: &[u8], mut pos: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let b = *buf.get(pos)?;
        pos += 1;
        v |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
        if b & 0x80 == 0 {
            return Some((v, pos));
        }
    }
    None
}

/// One top-level field of an encoded message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Field number.
    pub number: u64,
    /// Wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
    pub wire_type: u8,
    /// Offset of the tag.
    pub start: usize,
    /// Offset of the value (for wire type 2: of the length prefix).
    pub value: usize,
    /// Offset after the field.
    pub end: usize,
}

/// The top-level fields of `buf`, up to the first one that does not parse.
pub fn scan_fields(buf: &[u8]) -> Vec<Field> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let Some((tag, value)) = read_varint(buf, pos) else {
            break;
        };
        let wire_type = (tag & 7) as u8;
        let end = match wire_type {
            0 => read_varint(buf, value).map(|(_, e)| e),
            1 => Some(value + 8),
            2 => read_varint(buf, value)
                .and_then(|(len, e)| usize::try_from(len).ok().and_then(|l| e.checked_add(l))),
            5 => Some(value + 4),
            _ => None,
        };
        let Some(end) = end.filter(|&e| e <= buf.len()) else {
            break;
        };
        out.push(Field {
            number: tag >> 3,
            wire_type,
            start: pos,
            value,
            end,
        });
        pos = end;
    }
    out
}

/// Varint values at the edges of the types fabrx decodes them into.
pub const EDGE_VALUES: [u64; 14] = [
    0,
    1,
    127,
    128,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    i64::MAX as u64,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
    1000,
    0xffff,
];

/// Length prefixes that lie: far beyond any message, or just past the end.
const HUGE_LENGTHS: [u64; 6] = [u64::MAX, 1 << 63, 0xffff_ffff, 0x7fff_ffff, 1 << 31, 4 << 20];

// ---------------------------------------------------------------- mutator

/// The mutations of [`Mutator::mutate_once`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mutation {
    /// Flip 1–8 random bits.
    BitFlip,
    /// Overwrite 1–4 bytes with random or boundary bytes.
    ByteReplace,
    /// Cut the message at a random offset.
    Truncate,
    /// Append random bytes or a repeat of a part of the message.
    Extend,
    /// A prefix of the message followed by a suffix of another corpus message.
    Splice,
    /// Replace a varint field's value with an edge value (some overlong or unterminated).
    VarintEdge,
    /// Replace a length prefix with a huge one, keeping the payload.
    HugeLength,
    /// Mutate inside a length-delimited field and fix its length prefix.
    Nested,
    /// Repeat a field up to 64 times.
    DuplicateField,
    /// Keep a field's number, change its wire type (groups and invalid types included).
    WrongWireType,
    /// Insert a field with a random number and wire type.
    UnknownField,
    /// Replace the message with a deeply nested one.
    DeepNesting,
}

const MUTATIONS: [Mutation; 12] = [
    Mutation::BitFlip,
    Mutation::ByteReplace,
    Mutation::Truncate,
    Mutation::Extend,
    Mutation::Splice,
    Mutation::VarintEdge,
    Mutation::HugeLength,
    Mutation::Nested,
    Mutation::DuplicateField,
    Mutation::WrongWireType,
    Mutation::UnknownField,
    Mutation::DeepNesting,
];

/// The largest message [`Mutator::mutate`] returns.
pub const MAX_MUTATED_LEN: usize = 6 << 20;

/// Seeded mutations of valid encodings, and random bytes.
#[derive(Debug, Clone)]
pub struct Mutator {
    rng: ChaCha8Rng,
}

impl Mutator {
    /// A mutator drawing from `seed`.
    pub fn new(seed: u64) -> Mutator {
        Mutator {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// The random source, for callers' own choices.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// Up to `max_len` random bytes (sometimes none).
    pub fn random_bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.rng.gen_range(0..=max_len);
        (0..len).map(|_| self.rng.r#gen::<u8>()).collect()
    }

    /// `template` after 1–4 stacked mutations; `corpus` feeds splicing. Repeating
    /// mutations multiply sizes, so the result is cut at [`MAX_MUTATED_LEN`] (above the
    /// 4 MiB default limit of tonic servers: the limits themselves get exercised).
    pub fn mutate(&mut self, template: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        let mut data = template.to_vec();
        for _ in 0..self.rng.gen_range(1..=4) {
            let m = MUTATIONS[self.rng.gen_range(0..MUTATIONS.len())];
            self.mutate_once(m, &mut data, corpus, 0);
            data.truncate(MAX_MUTATED_LEN);
        }
        data
    }

    /// Applies mutation `m` to `data`; `depth` bounds mutations inside nested messages.
    pub fn mutate_once(&mut self, m: Mutation, data: &mut Vec<u8>, corpus: &[Vec<u8>], depth: u32) {
        match m {
            Mutation::BitFlip => self.bit_flip(data),
            Mutation::ByteReplace => self.byte_replace(data),
            Mutation::Truncate => {
                let at = self.rng.gen_range(0..=data.len());
                data.truncate(at);
            }
            Mutation::Extend => self.extend(data),
            Mutation::Splice => self.splice(data, corpus),
            Mutation::VarintEdge => self.varint_edge(data),
            Mutation::HugeLength => self.huge_length(data),
            Mutation::Nested => self.nested(data, corpus, depth),
            Mutation::DuplicateField => self.duplicate_field(data),
            Mutation::WrongWireType => self.wrong_wire_type(data),
            Mutation::UnknownField => self.unknown_field(data),
            Mutation::DeepNesting => *data = self.deep_nesting(),
        }
    }

    fn bit_flip(&mut self, data: &mut [u8]) {
        if data.is_empty() {
            return;
        }
        for _ in 0..self.rng.gen_range(1..=8) {
            let i = self.rng.gen_range(0..data.len());
            data[i] ^= 1 << self.rng.gen_range(0..8);
        }
    }

    fn byte_replace(&mut self, data: &mut [u8]) {
        const SPECIAL: [u8; 6] = [0x00, 0xff, 0x7f, 0x80, 0x0a, 0x12];
        if data.is_empty() {
            return;
        }
        for _ in 0..self.rng.gen_range(1..=4) {
            let i = self.rng.gen_range(0..data.len());
            data[i] = if self.rng.gen_bool(0.5) {
                SPECIAL[self.rng.gen_range(0..SPECIAL.len())]
            } else {
                self.rng.r#gen()
            };
        }
    }

    fn extend(&mut self, data: &mut Vec<u8>) {
        if !data.is_empty() && self.rng.gen_bool(0.5) {
            let from = self.rng.gen_range(0..data.len());
            let to = self.rng.gen_range(from..=data.len());
            let chunk = data[from..to].to_vec();
            for _ in 0..self.rng.gen_range(1..=8) {
                data.extend_from_slice(&chunk);
            }
        } else {
            let tail = self.random_bytes(64);
            data.extend(tail);
        }
    }

    fn splice(&mut self, data: &mut Vec<u8>, corpus: &[Vec<u8>]) {
        if corpus.is_empty() {
            return;
        }
        let other = &corpus[self.rng.gen_range(0..corpus.len())];
        let cut = self.rng.gen_range(0..=data.len());
        let from = self.rng.gen_range(0..=other.len());
        data.truncate(cut);
        data.extend_from_slice(&other[from..]);
    }

    /// A field of `data` with wire type `wire_type` (any when none), chosen at random.
    fn pick_field(&mut self, data: &[u8], wire_type: Option<u8>) -> Option<Field> {
        let fields: Vec<Field> = scan_fields(data)
            .into_iter()
            .filter(|f| wire_type.is_none_or(|w| f.wire_type == w))
            .collect();
        if fields.is_empty() {
            return None;
        }
        Some(fields[self.rng.gen_range(0..fields.len())])
    }

    fn edge_varint(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        match self.rng.gen_range(0..10) {
            // Overlong: a small value in ten bytes.
            0 => out.extend_from_slice(&[0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            // Eleven bytes: no valid varint is that long.
            1 => {
                out.extend_from_slice(&[0xff; 10]);
                out.push(0x01);
            }
            // Unterminated.
            2 => out.extend_from_slice(&[0xff, 0xff, 0xff]),
            _ => put_varint(&mut out, EDGE_VALUES[self.rng.gen_range(0..EDGE_VALUES.len())]),
        }
        out
    }

    fn varint_edge(&mut self, data: &mut Vec<u8>) {
        let value = self.edge_varint();
        match self.pick_field(data, Some(0)) {
            Some(f) => {
                data.splice(f.value..f.end, value);
            }
            None => {
                let number = self.rng.gen_range(1..=6);
                put_varint(data, number << 3);
                data.extend(value);
            }
        }
    }

    fn huge_length(&mut self, data: &mut Vec<u8>) {
        let len = match self.rng.gen_range(0..3) {
            0 => HUGE_LENGTHS[self.rng.gen_range(0..HUGE_LENGTHS.len())],
            // Just past the end of what follows.
            _ => self.rng.gen_range(1..=16) + data.len() as u64,
        };
        let mut prefix = Vec::new();
        put_varint(&mut prefix, len);
        match self.pick_field(data, Some(2)) {
            Some(f) => {
                let Some((_, payload)) = read_varint(data, f.value) else {
                    return;
                };
                data.splice(f.value..payload, prefix);
            }
            None => {
                let number = self.rng.gen_range(1..=6);
                put_varint(data, (number << 3) | 2);
                data.extend(prefix);
                data.extend_from_slice(b"short");
            }
        }
    }

    fn nested(&mut self, data: &mut Vec<u8>, corpus: &[Vec<u8>], depth: u32) {
        let Some(f) = self.pick_field(data, Some(2)) else {
            return self.bit_flip(data);
        };
        let Some((_, payload)) = read_varint(data, f.value) else {
            return;
        };
        let mut inner = data[payload..f.end].to_vec();
        let m = if depth < 4 {
            MUTATIONS[self.rng.gen_range(0..MUTATIONS.len() - 1)]
        } else {
            Mutation::BitFlip
        };
        self.mutate_once(m, &mut inner, corpus, depth + 1);
        let mut replacement = Vec::with_capacity(inner.len() + 10);
        put_varint(&mut replacement, inner.len() as u64);
        replacement.extend(inner);
        data.splice(f.value..f.end, replacement);
    }

    fn duplicate_field(&mut self, data: &mut Vec<u8>) {
        let Some(f) = self.pick_field(data, None) else {
            return;
        };
        let field = data[f.start..f.end].to_vec();
        let at = if self.rng.gen_bool(0.5) { f.end } else { data.len() };
        let copies: Vec<u8> = (0..self.rng.gen_range(1..=64))
            .flat_map(|_| field.iter().copied())
            .collect();
        data.splice(at..at, copies);
    }

    fn wrong_wire_type(&mut self, data: &mut Vec<u8>) {
        let Some(f) = self.pick_field(data, None) else {
            return;
        };
        let wire_type = (u64::from(f.wire_type) + self.rng.gen_range(1..8)) % 8;
        let mut tag = Vec::new();
        put_varint(&mut tag, (f.number << 3) | wire_type);
        data.splice(f.start..f.value, tag);
    }

    fn unknown_field(&mut self, data: &mut Vec<u8>) {
        const NUMBERS: [u64; 6] = [0, 1, 2, 15, 16, (1 << 29) - 1];
        let number = if self.rng.gen_bool(0.5) {
            NUMBERS[self.rng.gen_range(0..NUMBERS.len())]
        } else {
            self.rng.gen_range(1..1u64 << 32)
        };
        let wire_type = self.rng.gen_range(0..8u64);
        let mut field = Vec::new();
        put_varint(&mut field, (number << 3) | wire_type);
        match wire_type {
            0 => field.extend(self.edge_varint()),
            1 => field.extend_from_slice(&self.rng.r#gen::<u64>().to_le_bytes()),
            2 => {
                let payload = self.random_bytes(32);
                put_varint(&mut field, payload.len() as u64);
                field.extend(payload);
            }
            5 => field.extend_from_slice(&self.rng.r#gen::<u32>().to_le_bytes()),
            _ => {} // groups and invalid wire types: the tag alone
        }
        let at = self.rng.gen_range(0..=data.len());
        data.splice(at..at, field);
    }

    /// A deeply nested message: length-delimited fields inside each other (through the
    /// field numbers of fabrx's nested messages) or groups (an old wire type decoders
    /// must skip, recursively), sometimes unterminated.
    pub fn deep_nesting(&mut self) -> Vec<u8> {
        const DEPTHS: [usize; 8] = [8, 63, 99, 100, 101, 500, 5_000, 100_000];
        let depth = DEPTHS[self.rng.gen_range(0..DEPTHS.len())];
        let number = self.rng.gen_range(1..=5u64);
        let mut out = Vec::new();
        if self.rng.gen_bool(0.5) {
            for _ in 0..depth {
                put_varint(&mut out, (number << 3) | 3);
            }
            if self.rng.gen_bool(0.8) {
                for _ in 0..depth {
                    put_varint(&mut out, (number << 3) | 4);
                }
            }
            return out;
        }
        // Length-delimited: sizes from the inside out, headers from the outside in.
        let depth = depth.min(20_000);
        let mut tag = Vec::new();
        put_varint(&mut tag, (number << 3) | 2);
        let mut sizes = vec![0u64; depth + 1];
        for level in 1..=depth {
            let inner = sizes[level - 1];
            let mut len = Vec::new();
            put_varint(&mut len, inner);
            sizes[level] = inner + (tag.len() + len.len()) as u64;
        }
        for level in (0..depth).rev() {
            out.extend_from_slice(&tag);
            put_varint(&mut out, sizes[level]);
        }
        out
    }
}

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
fn hostile(m: &mut Mutator, rpc: &Rpc) -> Vec<u8> {
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
fn hostile_decodable(m: &mut Mutator, rpc: &Rpc) -> Vec<u8> {
    for _ in 0..8 {
        let b = hostile(m, rpc);
        if (rpc.decodes)(&b) {
            return b;
        }
    }
    valid(m, rpc)
}

fn valid(m: &mut Mutator, rpc: &Rpc) -> Vec<u8> {
    if rpc.corpus.is_empty() {
        return Vec::new();
    }
    rpc.corpus[m.rng().gen_range(0..rpc.corpus.len())].clone()
}

/// Tallies `outcome`; returns the kind of a suspicious one.
fn classify(rpc: &Rpc, valid: bool, outcome: Outcome, t: &mut Tally) -> Option<&'static str> {
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
