//! Property: any sequence of appends, syncs, reopens and front truncations reads back
//! as the model says.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::num::{NonZeroU32, NonZeroU64};

use journal::{Config, Durability, Journal};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Append(Vec<u8>),
    Reopen,
    TruncateFront(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..300).prop_map(Step::Append),
        1 => Just(Step::Reopen),
        1 => (0u64..60).prop_map(Step::TruncateFront),
    ]
}

fn config(segment_bytes: u64) -> Config {
    Config {
        segment_bytes: NonZeroU64::new(segment_bytes).unwrap(),
        max_record_bytes: NonZeroU32::new(1024).unwrap(),
        durability: Durability::NoSync,
        first_seq: 5,
        extension: "log",
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn append_reopen_round_trip(steps in proptest::collection::vec(step(), 1..60), seg in 64u64..2048) {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), config(seg)).unwrap();
        // The model: every record ever appended, by seq.
        let mut model: Vec<Vec<u8>> = Vec::new();
        for s in steps {
            match s {
                Step::Append(p) => {
                    let a = j.append(&p).unwrap();
                    prop_assert_eq!(a.seq, 5 + model.len() as u64);
                    prop_assert_eq!(j.reader().read(a.position).unwrap(), p.clone());
                    model.push(p);
                }
                Step::Reopen => {
                    drop(j);
                    j = Journal::open(dir.path(), config(seg)).unwrap();
                    prop_assert_eq!(j.cut_on_open(), 0);
                }
                Step::TruncateFront(seq) => {
                    j.truncate_front(seq).unwrap();
                }
            }
            prop_assert_eq!(j.next_seq(), 5 + model.len() as u64);
            let first = j.first_seq();
            let got: Vec<(u64, Vec<u8>)> = j
                .reader()
                .replay(0)
                .map(|r| r.map(|r| (r.seq, r.payload)))
                .collect::<journal::Result<_>>()
                .unwrap();
            let want: Vec<(u64, Vec<u8>)> = (first..5 + model.len() as u64)
                .map(|seq| (seq, model[(seq - 5) as usize].clone()))
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
