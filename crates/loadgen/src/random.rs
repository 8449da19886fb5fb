//! srvprof's one random-number generator, small and fast (Steele, Lea and Flood's SplitMix64):
//! the load generator's reconnect jitter and random target order, the correlation test's
//! shuffles, the sampler's window placement, and the synthetic traffic of the estimator tests.
//! No allocation, no shared state: each user keeps its own.

#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_draws_stay_in_the_unit_interval_and_fill_it_evenly() {
        let mut rng = SplitMix64(5);
        let mut tenths = [0u32; 10];
        for _ in 0..100_000 {
            let u = rng.uniform();
            assert!((0.0..1.0).contains(&u), "{u}");
            tenths[(u * 10.0) as usize] += 1;
        }
        assert!(
            tenths.iter().all(|&n| (9_500..10_500).contains(&n)),
            "{tenths:?}"
        );
    }
}
