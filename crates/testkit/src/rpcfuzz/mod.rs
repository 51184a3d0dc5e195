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

mod call;
mod env;
mod fuzzer;
mod mutate;

pub use call::*;
pub use env::*;
pub use fuzzer::*;
pub use mutate::*;
