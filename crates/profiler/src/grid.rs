//! Readings on the interval grid, the loop `srvprof probe` and `srvprof run` share: a reading at
//! start + k * interval for each k, the last one at the end.

use srvprof_analysis::record::Reading;

use crate::clock;
use crate::error::SrvprofError;
use crate::sampler::Sampler;

/// Takes a reading at each grid point `start_ns + k * interval_ns` from k = `first` on, the last
/// at `end_ns`, and hands each to `each`, stamped with the point it was due at. It sleeps to
/// absolute deadlines: a reading so late that it passed the next grid point ends the intervals
/// it spans, and the next is due at the next point ahead, never in a burst of catching up.
///
/// It stops after the reading at `end_ns`, when `each` returns false, or after the reading taken
/// once `stopped()` turned true: a stop cuts the wait for the next point short, and that reading
/// ends the last interval. A stop before the first point of k = 0 takes none: nothing was
/// measured.
pub fn readings(
    sampler: &mut Sampler,
    (start_ns, interval_ns, end_ns): (u64, u64, u64),
    first: u64,
    stopped: impl Fn() -> bool,
    mut each: impl FnMut(&mut Sampler, Reading) -> Result<bool, SrvprofError>,
) -> Result<(), SrvprofError> {
    let interval_ns = interval_ns.max(1);
    let mut k = first;
    loop {
        let due = start_ns
            .saturating_add(k.saturating_mul(interval_ns))
            .min(end_ns);
        sampler.wait_until(due, &stopped)?;
        let done = stopped();
        if done && k == 0 {
            return Ok(());
        }
        let last = done || due >= end_ns;
        let mut reading = sampler.take_reading(last)?;
        reading.due_ns = Some(due);
        if !each(sampler, reading)? || last {
            return Ok(());
        }
        let passed = clock::monotonic_ns().saturating_sub(start_ns) / interval_ns;
        k = (k + 1).max(passed + 1);
    }
}
