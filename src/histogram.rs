//! Fixed-bucket histograms of durations in ms (waits, holds) for `INFO lease`: counters in an
//! array, so recording one costs no allocation and no search.

/// The upper bounds of the finite buckets, in ms (a duration falls in the first bucket whose
/// bound it does not pass; the last bucket, `inf`, takes the rest).
pub const BOUNDS: [u64; 5] = [1, 10, 100, 1000, 10_000];

/// The buckets' names in `INFO`, the Prometheus `le` labels.
pub const LABELS: [&std::ffi::CStr; 6] = [c"1", c"10", c"100", c"1000", c"10000", c"inf"];

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Durations per bucket (not cumulative).
    buckets: [u64; 6],
    sum_ms: u64,
}

impl Histogram {
    pub fn record(&mut self, ms: u64) {
        let i = BOUNDS.iter().position(|b| ms <= *b).unwrap_or(BOUNDS.len());
        self.buckets[i] += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
    }

    /// Counts at or below each bound, the last one everything (as Prometheus has them).
    pub fn cumulative(&self) -> [u64; 6] {
        let mut out = self.buckets;
        for i in 1..out.len() {
            out[i] += out[i - 1];
        }
        out
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    pub fn sum_ms(&self) -> u64 {
        self.sum_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_duration_counts_in_its_bucket_and_every_one_above() {
        let mut h = Histogram::default();
        for ms in [0, 1, 2, 10, 11, 999, 1000, 10_000, 10_001, u64::MAX] {
            h.record(ms);
        }
        assert_eq!(h.cumulative(), [2, 4, 5, 7, 8, 10]);
        assert_eq!(h.count(), 10);
        assert_eq!(h.sum_ms(), u64::MAX);
        assert_eq!(Histogram::default().cumulative(), [0; 6]);
    }
}
