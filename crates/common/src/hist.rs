//! Log-linear histogram slots: four sub-buckets per power of two, each a quarter of its octave
//! (12.5 % to 25 % of the values it holds). Encoded here (`slot_of`, on the BPF side) and decoded
//! here (`quantile`, `max`, in userspace), so both agree on the bytes.
//!
//! A decoded value is the upper bound of its slot: never below the true value, and above it by
//! less than a quarter of it (exact below 8 ns).

pub const SUB_BUCKET_BITS: u32 = 2;
pub const SUB_BUCKETS: u32 = 1 << SUB_BUCKET_BITS;
/// 64 octaves x 4 sub-buckets.
pub const SLOTS: u32 = 256;

/// floor(log2(v)) for v > 0, written with shifts only so the BPF verifier accepts it.
#[inline(always)]
pub fn log2_floor(mut v: u64) -> u32 {
    let mut r = 0u32;
    if v >> 32 != 0 {
        v >>= 32;
        r += 32;
    }
    if v >> 16 != 0 {
        v >>= 16;
        r += 16;
    }
    if v >> 8 != 0 {
        v >>= 8;
        r += 8;
    }
    if v >> 4 != 0 {
        v >>= 4;
        r += 4;
    }
    if v >> 2 != 0 {
        v >>= 2;
        r += 2;
    }
    if v >> 1 != 0 {
        r += 1;
    }
    r
}

/// The slot a value (nanoseconds) falls in.
#[inline(always)]
pub fn slot_of(v: u64) -> u32 {
    if v < SUB_BUCKETS as u64 {
        return v as u32;
    }
    let octave = log2_floor(v);
    let sub = ((v >> (octave - SUB_BUCKET_BITS)) & (SUB_BUCKETS as u64 - 1)) as u32;
    let slot = (octave - SUB_BUCKET_BITS + 1) * SUB_BUCKETS + sub;
    if slot >= SLOTS { SLOTS - 1 } else { slot }
}

/// Smallest value that lands in `slot`.
pub fn slot_lower_bound(slot: u32) -> u64 {
    if slot < SUB_BUCKETS {
        return slot as u64;
    }
    let octave = slot / SUB_BUCKETS - 1 + SUB_BUCKET_BITS;
    if octave >= 64 {
        return u64::MAX; // past the last octave: slots no value reaches
    }
    let sub = (slot % SUB_BUCKETS) as u64;
    (1u64 << octave) | (sub << (octave - SUB_BUCKET_BITS))
}

/// Largest value that lands in `slot`.
pub fn slot_upper_bound(slot: u32) -> u64 {
    let next = if slot + 1 >= SLOTS {
        u64::MAX
    } else {
        slot_lower_bound(slot + 1)
    };
    if next == u64::MAX { u64::MAX } else { next - 1 }
}

/// The value a slot stands for when decoded: its upper bound (so a quantile is never an
/// understatement), at most twice its lower bound (the last slot's bound is u64::MAX).
pub fn slot_value(slot: u32) -> u64 {
    let upper = slot_upper_bound(slot);
    let lower = slot_lower_bound(slot);
    if lower > u64::MAX / 2 {
        upper
    } else {
        upper.min(lower * 2)
    }
}

/// The value at quantile `q` (0..=1) of a histogram of these slots (counts indexed by slot): the
/// value of the slot holding the ceil(q * total)-th value. None when the histogram is empty.
pub fn quantile(slots: &[u64], q: f64) -> Option<u64> {
    let total: u64 = slots.iter().sum();
    if total == 0 {
        return None;
    }
    // ceil(q * total) without f64::ceil, which core lacks.
    let exact = q * total as f64;
    let mut rank = exact as u64;
    if (rank as f64) < exact {
        rank += 1;
    }
    let rank = rank.clamp(1, total);
    let mut seen = 0;
    for (slot, n) in slots.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(slot_value(slot as u32));
        }
    }
    None
}

/// The value of the highest non-empty slot. None when the histogram is empty.
pub fn max(slots: &[u64]) -> Option<u64> {
    let slot = slots.iter().rposition(|n| *n > 0)?;
    Some(slot_value(slot as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_between_its_slot_bounds() {
        let mut v = 0u64;
        while v < (1u64 << 40) {
            let s = slot_of(v);
            assert!(
                slot_lower_bound(s) <= v && v <= slot_upper_bound(s),
                "v={v} slot={s}"
            );
            v = v * 5 / 4 + 1;
        }
        for slot in 0..SLOTS {
            assert!(
                slot_lower_bound(slot) <= slot_upper_bound(slot),
                "slot {slot}"
            );
        }
        for v in [
            0,
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8,
            1000,
            1023,
            1024,
            u64::MAX / 2,
            u64::MAX,
        ] {
            let s = slot_of(v);
            assert!(
                slot_lower_bound(s) <= v && v <= slot_upper_bound(s),
                "v={v}"
            );
        }
    }

    #[test]
    fn slots_are_monotonic_and_about_a_fifth_wide() {
        let mut prev = 0;
        for v in 1..100_000u64 {
            let s = slot_of(v);
            assert!(s >= prev);
            prev = s;
        }
        let s = slot_of(1_000_000);
        let width = slot_upper_bound(s) - slot_lower_bound(s) + 1;
        assert!(width * 100 / slot_lower_bound(s) <= 25);
    }

    #[test]
    fn a_value_decodes_to_at_most_a_quarter_above_itself_never_below() {
        let mut slots = [0u64; SLOTS as usize];
        let mut v = 1u64;
        while v < (1u64 << 50) {
            slots.fill(0);
            slots[slot_of(v) as usize] = 1;
            let decoded = quantile(&slots, 0.5).unwrap();
            assert!(decoded >= v, "v={v} decoded={decoded}");
            assert!(decoded - v < v / 4 + 1, "v={v} decoded={decoded}");
            if v < 8 {
                assert_eq!(decoded, v);
            }
            assert_eq!(max(&slots), Some(decoded));
            v = v * 9 / 8 + 1;
        }
    }

    #[test]
    fn quantiles_of_a_known_spread_are_within_a_quarter() {
        // 1..=10_000 µs in ns, one value each: the q-quantile is q * 10_000 µs.
        let mut slots = [0u64; SLOTS as usize];
        for us in 1..=10_000u64 {
            slots[slot_of(us * 1000) as usize] += 1;
        }
        for q in [0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let truth = (q * 10_000.0) as u64 * 1000;
            let got = quantile(&slots, q).unwrap();
            assert!(
                got >= truth && got - truth < truth / 4 + 1,
                "q={q}: {got} vs {truth}"
            );
        }
        assert!(max(&slots).unwrap() >= 10_000_000);
        assert_eq!(quantile(&[0; 4], 0.5), None);
        assert_eq!(max(&[0; 4]), None);
    }
}
