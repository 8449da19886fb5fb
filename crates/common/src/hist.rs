//! Log-linear histogram slots: four sub-buckets per power of two (about 19 % wide), so
//! percentiles read from kernel histograms are within a fifth of the true value.
//!
//! Shared so that the BPF side computes slots and userspace decodes them the same way.

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
}
