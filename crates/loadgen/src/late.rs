//! Open loop: how late the requests of each latency went out, so the client's queue in the
//! requests at p99 is read rather than inferred from its mean.

/// Latency buckets: four a power of two of microseconds (each within 19 %), up to 2^40 µs.
const PER_OCTAVE: u32 = 4;
const BUCKETS: usize = 41 * PER_OCTAVE as usize;

/// Per latency bucket: the requests and the sum of how late each was sent (µs). Fixed arrays:
/// recording allocates nothing.
#[derive(Clone, Debug)]
pub(crate) struct LateByLatency {
    count: [u64; BUCKETS],
    late_us: [u64; BUCKETS],
}

impl LateByLatency {
    pub(crate) fn new() -> Self {
        LateByLatency {
            count: [0; BUCKETS],
            late_us: [0; BUCKETS],
        }
    }

    #[inline]
    pub(crate) fn record(&mut self, latency_us: u64, late_us: u64) {
        let b = bucket(latency_us);
        self.count[b] += 1;
        self.late_us[b] += late_us;
    }

    pub(crate) fn add(&mut self, other: &LateByLatency) {
        for b in 0..BUCKETS {
            self.count[b] += other.count[b];
            self.late_us[b] += other.late_us[b];
        }
    }

    /// The mean lateness (µs) of the requests whose latency is in `latency_us`'s bucket; None
    /// when none is.
    pub(crate) fn mean_at(&self, latency_us: u64) -> Option<f64> {
        let b = bucket(latency_us);
        (self.count[b] > 0).then(|| self.late_us[b] as f64 / self.count[b] as f64)
    }
}

fn bucket(us: u64) -> usize {
    let us = us.max(1);
    let octave = 63 - us.leading_zeros();
    // The two bits below the leading one: which quarter of the octave.
    let quarter = match octave {
        0 => 0,
        1 => (us & 1) << 1,
        _ => (us >> (octave - 2)) & 3,
    } as u32;
    ((octave * PER_OCTAVE + quarter) as usize).min(BUCKETS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_rise_with_latency_four_to_an_octave() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(2), 4);
        assert_eq!(bucket(3), 6);
        assert_eq!((bucket(1024), bucket(1279), bucket(1280)), (40, 40, 41));
        assert_eq!(bucket(2047), 43);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        let mut last = 0;
        for us in 1..100_000 {
            assert!(bucket(us) >= last);
            last = bucket(us);
        }
    }

    /// Requests at 30 ms sent on time, others at 30 ms sent 10 ms late, and fast ones: the mean
    /// lateness at 30 ms is theirs alone.
    #[test]
    fn the_lateness_at_a_latency_is_that_of_the_requests_there() {
        let mut a = LateByLatency::new();
        let mut b = LateByLatency::new();
        for _ in 0..30 {
            a.record(30_000, 0);
            b.record(30_500, 10_000);
            a.record(300, 50);
        }
        a.add(&b);
        assert_eq!(a.mean_at(30_200), Some(5_000.0));
        assert_eq!(a.mean_at(300), Some(50.0));
        assert_eq!(a.mean_at(5_000), None);
    }
}
