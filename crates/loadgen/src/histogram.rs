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
}
