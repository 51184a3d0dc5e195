//! Protobuf wire helpers and the seeded mutator.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
pub(crate) const HUGE_LENGTHS: [u64; 6] = [u64::MAX, 1 << 63, 0xffff_ffff, 0x7fff_ffff, 1 << 31, 4 << 20];

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

pub(crate) const MUTATIONS: [Mutation; 12] = [
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
