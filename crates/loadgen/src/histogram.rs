//! A latency histogram in bounded memory: values below 64 are exact, larger ones fall in
//! 64 linear sub-buckets per power of two (relative error under 1/64 ≈ 1.6 %). A
//! percentile is answered with the highest value of its bucket (never below the true
//! value), capped at the largest value recorded.

/// Sub-buckets per power of two (and the exact range below it).
const SUB: u64 = 64;
const SUB_BITS: u32 = 6;

/// Counts of values (any unit; the committer driver records microseconds).
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
    min: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let k = 63 - v.leading_zeros(); // 2^k <= v < 2^(k+1), k >= SUB_BITS
    let sub = (v >> (k - SUB_BITS)) & (SUB - 1);
    (SUB + u64::from(k - SUB_BITS) * SUB + sub) as usize
}

/// The highest value that falls in bucket `i`.
fn highest(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let k = (i - SUB) / SUB + u64::from(SUB_BITS);
    let sub = (i - SUB) % SUB;
    let width = 1u64 << (k - u64::from(SUB_BITS));
    // (SUB + sub) * width is the lowest value of the bucket.
    (SUB + sub).saturating_mul(width).saturating_add(width - 1)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; index(u64::MAX) + 1],
            total: 0,
            max: 0,
            min: u64::MAX,
        }
    }

    /// Records `count` occurrences of `value`.
    pub fn record(&mut self, value: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.counts[index(value)] += count;
        self.total += count;
        self.max = self.max.max(value);
        self.min = self.min.min(value);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The largest value recorded (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` in [0, 1]: the smallest bucket holding the
    /// `ceil(q · count)`-th value (at least the first). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(highest(i).min(self.max).max(self.min));
            }
        }
        Some(self.max)
    }
}

/// A histogram as it is written to a file (`fabrx loadgen --report`'s `raw.json`): its
/// non-empty buckets by index, and the extremes. Read back with [`Histogram::from_sparse`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SparseHistogram {
    /// `(bucket index, count)` of every non-empty bucket, by index.
    pub buckets: Vec<(u32, u64)>,
    /// The smallest value recorded (`u64::MAX` when empty).
    pub min: u64,
    /// The largest value recorded (0 when empty).
    pub max: u64,
}

impl Histogram {
    /// Adds every value of `other` (as if recorded here too). Counts saturate.
    pub fn merge(&mut self, other: &Histogram) {
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c = c.saturating_add(*o);
        }
        self.total = self.total.saturating_add(other.total);
        if other.total > 0 {
            self.max = self.max.max(other.max);
            self.min = self.min.min(other.min);
        }
    }

    /// The non-empty buckets and the extremes.
    pub fn to_sparse(&self) -> SparseHistogram {
        SparseHistogram {
            buckets: self
                .counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| (u32::try_from(i).unwrap_or(u32::MAX), *c))
                .collect(),
            min: self.min,
            max: self.max,
        }
    }

    /// The histogram written as `sparse`; `None` when a bucket index is out of range or
    /// the extremes contradict the buckets (a file that was not written by
    /// [`Histogram::to_sparse`]).
    pub fn from_sparse(sparse: &SparseHistogram) -> Option<Histogram> {
        let mut h = Histogram::new();
        for &(i, c) in &sparse.buckets {
            let slot = h.counts.get_mut(usize::try_from(i).ok()?)?;
            *slot = slot.checked_add(c)?;
            h.total = h.total.checked_add(c)?;
        }
        if h.total > 0 {
            let lowest = sparse.buckets.iter().find(|(_, c)| *c > 0)?.0 as usize;
            let highest_bucket = sparse.buckets.iter().rev().find(|(_, c)| *c > 0)?.0 as usize;
            if index(sparse.min) != lowest || index(sparse.max) != highest_bucket {
                return None;
            }
            h.min = sparse.min;
            h.max = sparse.max;
        }
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in 1..=50 {
            h.record(v, 1);
        }
        assert_eq!(h.count(), 50);
        assert_eq!(h.quantile(0.5), Some(25));
        assert_eq!(h.quantile(0.99), Some(50));
        assert_eq!(h.quantile(0.0), Some(1));
        assert_eq!(h.quantile(1.0), Some(50));
        assert_eq!(Histogram::new().quantile(0.5), None);
    }

    #[test]
    fn buckets_cover_every_value_with_small_error() {
        let mut last = 0;
        for v in (0..20).chain([
            63,
            64,
            65,
            127,
            128,
            1000,
            123_456,
            1 << 40,
            u64::MAX - 1,
            u64::MAX,
        ]) {
            let i = index(v);
            assert!(highest(i) >= v, "v {v}");
            assert!((highest(i) - v) as f64 <= v as f64 / 64.0 + 1.0, "v {v}");
            if i > 0 {
                assert!(highest(i - 1) < v, "v {v} belongs to an earlier bucket");
            }
            assert!(i >= last);
            last = i;
        }
    }

    #[test]
    fn weighted_percentiles() {
        let mut h = Histogram::new();
        h.record(10_000, 98); // 10 ms
        h.record(200_000, 2); // 200 ms
        assert_eq!(h.count(), 100);
        let p50 = h.quantile(0.5).unwrap();
        assert!((10_000..=10_200).contains(&p50), "{p50}");
        let p98 = h.quantile(0.98).unwrap();
        assert!(p98 < 10_200, "{p98}");
        assert_eq!(h.quantile(0.99), Some(200_000)); // capped at the max
        assert_eq!(h.max(), 200_000);
        h.record(5, 0);
        assert_eq!(h.count(), 100);
    }

    #[test]
    fn merged_histograms_answer_as_one_and_survive_a_file() {
        let (mut a, mut b, mut both) = (Histogram::new(), Histogram::new(), Histogram::new());
        for v in 0..1000u64 {
            let x = v * v;
            if v % 3 == 0 {
                a.record(x, 1);
            } else {
                b.record(x, 2);
            }
            both.record(x, if v % 3 == 0 { 1 } else { 2 });
        }
        let back = Histogram::from_sparse(&a.to_sparse()).unwrap();
        assert_eq!(back.to_sparse(), a.to_sparse());
        a.merge(&Histogram::new());
        a.merge(&b);
        for q in [0.0, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(a.quantile(q), both.quantile(q), "q {q}");
        }
        assert_eq!((a.count(), a.max()), (both.count(), both.max()));
        // Out-of-range buckets and extremes that contradict the buckets are refused.
        let bad = SparseHistogram {
            buckets: vec![(u32::MAX, 1)],
            min: 0,
            max: 0,
        };
        assert!(Histogram::from_sparse(&bad).is_none());
        let lying = SparseHistogram {
            buckets: vec![(5, 1)],
            min: 5,
            max: 1_000_000,
        };
        assert!(Histogram::from_sparse(&lying).is_none());
        let overflow = SparseHistogram {
            buckets: vec![(1, u64::MAX), (2, 1)],
            min: 1,
            max: 2,
        };
        assert!(Histogram::from_sparse(&overflow).is_none());
    }
}
