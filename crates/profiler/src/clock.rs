//! CLOCK_MONOTONIC, the clock bpf_ktime_get_ns() reads: the probes, the sampler and the load
//! generator share it, so their timelines line up. Defined once, in the load generator.

pub use srvprof_loadgen::monotonic_ns;

/// Sleeps until CLOCK_MONOTONIC reads `deadline_ns` (an absolute deadline: time lost before the
/// call, to preemption or to a slow reading, is not slept again, so lateness never accumulates).
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as _, // the field's own time_t (libc deprecates the alias on musl)
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // A signal (Ctrl-C) ends the sleep early with EINTR: the caller checks its stop flag.
    // SAFETY: clock_nanosleep only reads `ts`; the remaining-time pointer may be null.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_to_an_absolute_deadline_and_not_past_one() {
        let deadline = monotonic_ns() + 30_000_000;
        sleep_until(deadline);
        let woke = monotonic_ns();
        assert!(woke >= deadline, "woke {} ns early", deadline - woke);
        // A deadline in the past returns at once.
        sleep_until(deadline);
        assert!(monotonic_ns() - woke < 5_000_000);
    }
}
