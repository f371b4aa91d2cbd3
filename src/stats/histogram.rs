//! A log-linear histogram of durations: 32 sub-buckets per power of two, so any percentile is
//! within ~3% of the true value. It holds only the buckets between its smallest and largest
//! value (reads that take 10–100 µs need ~110 of them, under 1 KiB), so a reader thread's
//! histogram does not make memory grow with the thread count.

const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;

#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Histogram {
    /// Counts of buckets `first..first + counts.len()`.
    counts: Vec<u64>,
    first: usize,
    total: u64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Histogram({} values)", self.total)
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = ((ns >> shift) as usize) & (SUB - 1);
    ((shift as usize + 1) << SUB_BITS) | sub
}

/// The middle of a bucket's range, in nanoseconds.
fn bucket_value(bucket: usize) -> f64 {
    if bucket < SUB {
        return bucket as f64;
    }
    let shift = (bucket >> SUB_BITS) as u32 - 1;
    let low = ((SUB | (bucket & (SUB - 1))) as u64) << shift;
    low as f64 + ((1u64 << shift) as f64 - 1.0) / 2.0
}

impl Histogram {
    pub fn record(&mut self, ns: u64) {
        self.add(bucket_of(ns), 1);
    }

    /// Records `count` values of `ns` nanoseconds.
    pub fn record_many(&mut self, ns: u64, count: u64) {
        if count > 0 {
            self.add(bucket_of(ns), count);
        }
    }

    /// The bucket a value of `ns` nanoseconds falls in: for counts kept elsewhere (atomics a
    /// thread bumps), later made a histogram with [`Histogram::from_counts`].
    pub fn bucket(ns: u64) -> usize {
        bucket_of(ns)
    }

    /// The histogram of `counts[b]` values in bucket `b`.
    pub fn from_counts(counts: &[u64]) -> Histogram {
        let mut histogram = Histogram::default();
        for (bucket, &count) in counts.iter().enumerate() {
            if count > 0 {
                histogram.add(bucket, count);
            }
        }
        histogram
    }

    /// The buckets that hold values, as (bucket, count): a histogram in a few numbers, for a
    /// line of text ([`Histogram::from_counts`] of them is the same histogram).
    pub fn nonzero_buckets(&self) -> Vec<(usize, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &count)| count > 0)
            .map(|(offset, &count)| (self.first + offset, count))
            .collect()
    }

    /// Adds `count` values to bucket `bucket` (of [`Histogram::bucket`]).
    pub fn add_to_bucket(&mut self, bucket: usize, count: u64) {
        if count > 0 {
            self.add(bucket, count);
        }
    }

    /// Adds `count` to `bucket`, widening the span of buckets held if needed.
    fn add(&mut self, bucket: usize, count: u64) {
        if self.counts.is_empty() {
            self.first = bucket;
        } else if bucket < self.first {
            let missing = self.first - bucket;
            self.counts.splice(0..0, std::iter::repeat_n(0, missing));
            self.first = bucket;
        }
        let index = bucket - self.first;
        if index >= self.counts.len() {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += count;
        self.total += count;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (offset, &count) in other.counts.iter().enumerate() {
            if count > 0 {
                self.add(other.first + offset, count);
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// Each bucket that holds values: its middle in microseconds, and its count.
    pub fn buckets_us(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &count)| count > 0)
            .map(|(offset, &count)| (bucket_value(self.first + offset) / 1000.0, count))
            .collect()
    }

    /// The mean of the recorded values in microseconds, from the buckets' middles (within the
    /// buckets' ~3 %).
    pub fn mean_us(&self) -> Option<f64> {
        let sum: f64 = self
            .counts
            .iter()
            .enumerate()
            .map(|(offset, &count)| bucket_value(self.first + offset) * count as f64)
            .sum();
        (self.total > 0).then(|| sum / self.total as f64 / 1000.0)
    }

    /// The value below which a fraction `q` of the recorded values lie, in microseconds.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (offset, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(bucket_value(self.first + offset) / 1000.0);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_three_percent() {
        let mut h = Histogram::default();
        for us in 1..=10_000u64 {
            h.record(us * 1000);
        }
        for (q, exact) in [(0.5, 5000.0), (0.99, 9900.0), (0.999, 9990.0)] {
            let got = h.quantile_us(q).unwrap();
            assert!((got / exact - 1.0).abs() < 0.03, "q{q}: {got} vs {exact}");
        }
        let mean = h.mean_us().unwrap();
        assert!((mean / 5000.5 - 1.0).abs() < 0.03, "mean {mean}");
        assert_eq!(Histogram::default().mean_us(), None);
        let mut other = Histogram::default();
        other.record(7);
        other.record(u64::MAX / 2);
        h.merge(&other);
        assert_eq!(h.count(), 10_002);
        assert_eq!(h.quantile_us(0.0), Some(0.007));
        assert!(h.quantile_us(1.0).unwrap() > 1e12);
        assert!((h.quantile_us(0.5).unwrap() / 5000.0 - 1.0).abs() < 0.03);
        // Values recorded from the top down widen the span downwards.
        let mut down = Histogram::default();
        for ns in [1_000_000u64, 1000, 10] {
            down.record(ns);
        }
        assert_eq!(down.quantile_us(0.0), Some(0.01));
        assert!((down.quantile_us(0.5).unwrap() - 1.0).abs() < 0.03);
        assert!(down.counts.len() < 1000, "only the span is held");
        assert_eq!(Histogram::default().quantile_us(0.5), None);
        for ns in [0u64, 1, 31, 32, 33, 1000, 123_456_789, u64::MAX / 2] {
            let v = bucket_value(bucket_of(ns));
            assert!(ns == 0 || (v / ns as f64 - 1.0).abs() < 0.04, "{ns} -> {v}");
        }
    }
}
