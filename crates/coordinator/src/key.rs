//! Keys as the dependency graph sees them: a 64-bit keyed fingerprint of
//! `(namespace, key bytes)`, and the per-tx set of keys read and written.
//!
//! The graph never stores key bytes. Two distinct keys with the same fingerprint are
//! treated as one key, which only adds a dependency (the two txs are serialized): a
//! collision costs parallelism, never correctness. The fingerprint is keyed by a seed so
//! a client cannot aim collisions at other clients' keys without knowing it.

use std::hash::{BuildHasher, Hasher};
use types::{META_NAMESPACE, Tx};

/// The keyed hash that turns `(namespace, key)` into a fingerprint. Cheap to clone; the
/// graph and every [`crate::LocalGraph`] merged into it must use the same seed.
#[derive(Debug, Clone)]
pub struct KeyHasher {
    seed: u64,
    state: foldhash::quality::FixedState,
    /// Test hook: every key gets the same fingerprint (a total collision).
    #[cfg(test)]
    collide_all: bool,
}

impl KeyHasher {
    /// A hasher keyed by `seed`. A service should draw the seed at random at start-up;
    /// tests use a fixed one.
    pub fn new(seed: u64) -> KeyHasher {
        KeyHasher {
            seed,
            state: foldhash::quality::FixedState::with_seed(seed),
            #[cfg(test)]
            collide_all: false,
        }
    }

    /// A hasher under which all keys collide.
    #[cfg(test)]
    pub(crate) fn colliding(seed: u64) -> KeyHasher {
        KeyHasher {
            collide_all: true,
            ..KeyHasher::new(seed)
        }
    }

    /// The seed this hasher was created with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The fingerprint of key `key` in namespace `ns`. The namespace is length-prefixed,
    /// so `("ab", "c")` and `("a", "bc")` hash different inputs.
    #[inline]
    pub fn fingerprint(&self, ns: &str, key: &[u8]) -> u64 {
        #[cfg(test)]
        if self.collide_all {
            return 0x5a5a_5a5a;
        }
        let mut h = self.state.build_hasher();
        h.write_usize(ns.len());
        h.write(ns.as_bytes());
        h.write(key);
        h.finish()
    }
}

/// One key a tx touches: its fingerprint and whether the tx writes it (a tx that both
/// reads and writes a key counts as a writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyAccess {
    pub(crate) fp: u64,
    pub(crate) write: bool,
}

/// Above this many keys a tx's accesses are deduplicated by sorting rather than by a
/// quadratic scan.
const LINEAR_DEDUP_MAX: usize = 16;

/// Appends the keys `tx` touches to `out`, one entry per distinct fingerprint (FX §3.5,
/// same rules as the vcservice's `reads_of` / `writes_of`):
/// reads are `reads_only` and `read_writes` keys plus the implicit read of `(_meta, ns)`
/// for every namespace `ns` other than `_meta`; writes are `read_writes` and
/// `blind_writes` keys.
pub(crate) fn collect_accesses(hasher: &KeyHasher, tx: &Tx, out: &mut Vec<KeyAccess>) {
    let start = out.len();
    for ns in &tx.namespaces {
        let id = ns.ns_id.as_str();
        if id != META_NAMESPACE {
            let fp = hasher.fingerprint(META_NAMESPACE, id.as_bytes());
            out.push(KeyAccess { fp, write: false });
        }
        for r in &ns.reads_only {
            let fp = hasher.fingerprint(id, &r.key);
            out.push(KeyAccess { fp, write: false });
        }
        for rw in &ns.read_writes {
            let fp = hasher.fingerprint(id, &rw.key);
            out.push(KeyAccess { fp, write: true });
        }
        for w in &ns.blind_writes {
            let fp = hasher.fingerprint(id, &w.key);
            out.push(KeyAccess { fp, write: true });
        }
    }
    dedup(out, start);
}

/// Merges repeated fingerprints in `out[start..]`, keeping the first position and
/// or-ing the write flags.
fn dedup(out: &mut Vec<KeyAccess>, start: usize) {
    let n = out.len() - start;
    if n <= 1 {
        return;
    }
    if n <= LINEAR_DEDUP_MAX {
        let mut end = start;
        for i in start..out.len() {
            let a = out[i];
            match out[start..end].iter_mut().find(|b| b.fp == a.fp) {
                Some(b) => b.write |= a.write,
                None => {
                    out[end] = a;
                    end += 1;
                }
            }
        }
        out.truncate(end);
    } else {
        out[start..].sort_unstable_by_key(|a| a.fp);
        let mut end = start;
        for i in start..out.len() {
            let a = out[i];
            if end > start && out[end - 1].fp == a.fp {
                out[end - 1].write |= a.write;
            } else {
                out[end] = a;
                end += 1;
            }
        }
        out.truncate(end);
    }
}

/// A [`Hasher`] for maps keyed by fingerprints: they are already well-mixed keyed
/// hashes, so the value is used as is.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FpHasher(u64);

impl Hasher for FpHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`FpHasher`]s.
pub(crate) type FpBuild = std::hash::BuildHasherDefault<FpHasher>;

/// A map keyed by fingerprint.
pub(crate) type FpMap<V> = std::collections::HashMap<u64, V, FpBuild>;

#[cfg(test)]
mod tests {
    use super::*;
    use types::{Read, ReadWrite, TxNamespace, Write};

    fn ns(id: &str, reads: &[&str], rws: &[&str], blinds: &[&str]) -> TxNamespace {
        TxNamespace {
            ns_id: id.to_string(),
            ns_version: 0,
            reads_only: reads
                .iter()
                .map(|k| Read {
                    key: k.as_bytes().to_vec(),
                    version: None,
                })
                .collect(),
            read_writes: rws
                .iter()
                .map(|k| ReadWrite {
                    key: k.as_bytes().to_vec(),
                    version: None,
                    value: vec![],
                })
                .collect(),
            blind_writes: blinds
                .iter()
                .map(|k| Write {
                    key: k.as_bytes().to_vec(),
                    value: vec![],
                })
                .collect(),
        }
    }

    #[test]
    fn namespace_is_length_prefixed() {
        let h = KeyHasher::new(7);
        assert_ne!(h.fingerprint("ab", b"c"), h.fingerprint("a", b"bc"));
        assert_eq!(
            h.fingerprint("ns", b"k"),
            KeyHasher::new(7).fingerprint("ns", b"k")
        );
        assert_ne!(
            h.fingerprint("ns", b"k"),
            KeyHasher::new(8).fingerprint("ns", b"k")
        );
    }

    #[test]
    fn accesses_include_implicit_meta_read_and_merge_flags() {
        let h = KeyHasher::new(1);
        let tx = Tx {
            namespaces: vec![
                ns("a", &["x"], &["y"], &["z"]),
                ns(META_NAMESPACE, &[], &["a"], &[]),
            ],
            ..Tx::default()
        };
        let mut out = Vec::new();
        collect_accesses(&h, &tx, &mut out);
        // (_meta,a) is read implicitly by namespace a and written by the _meta namespace.
        let meta_a = h.fingerprint(META_NAMESPACE, b"a");
        assert_eq!(out.len(), 4);
        assert_eq!(out.iter().filter(|a| a.fp == meta_a).count(), 1);
        assert!(out.iter().find(|a| a.fp == meta_a).unwrap().write);
        assert!(
            !out.iter()
                .find(|a| a.fp == h.fingerprint("a", b"x"))
                .unwrap()
                .write
        );
        assert!(
            out.iter()
                .find(|a| a.fp == h.fingerprint("a", b"z"))
                .unwrap()
                .write
        );
    }

    #[test]
    fn sort_dedup_matches_linear_dedup() {
        let mut big: Vec<KeyAccess> = (0..40)
            .map(|i| KeyAccess {
                fp: i % 13,
                write: i % 7 == 0,
            })
            .collect();
        let mut small = big.clone();
        dedup(&mut big, 0);
        // Linear path on chunks gives the same set.
        let mut expect: Vec<KeyAccess> = Vec::new();
        for a in small.drain(..) {
            match expect.iter_mut().find(|b| b.fp == a.fp) {
                Some(b) => b.write |= a.write,
                None => expect.push(a),
            }
        }
        expect.sort_unstable_by_key(|a| a.fp);
        assert_eq!(big, expect);
    }
}
