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

/// The kernel's jiffy (1/HZ, ns): the coarse clocks tick once a jiffy, and their resolution is
/// that tick. None if the kernel does not say.
pub fn jiffy_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_getres only writes the timespec it is given.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    (rc == 0 && ns > 0).then_some(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's own count of jiffies (/proc/timer_list) and its clock then.
    fn jiffies_at() -> Option<(u64, u64)> {
        let text = std::fs::read_to_string("/proc/timer_list").ok()?;
        let after = |key: &str| -> Option<u64> {
            let rest = &text[text.find(key)? + key.len()..];
            rest.split_whitespace().next()?.parse().ok()
        };
        Some((after("jiffies:")?, after("now at ")?))
    }

    /// A jiffy is what the kernel's jiffies count moves by as its clock goes (root reads
    /// /proc/timer_list; the jiffies of a tickless idle CPU catch up when it wakes).
    #[test]
    fn a_jiffy_is_the_time_the_kernels_jiffies_count_moves_by() {
        let ns = jiffy_ns().unwrap();
        let Some((j0, t0)) = jiffies_at() else {
            assert!(!is_root(), "root cannot read /proc/timer_list");
            return;
        };
        sleep_until(monotonic_ns() + 500_000_000);
        let (j1, t1) = jiffies_at().unwrap();
        let counted = (j1 - j0) as f64 * ns as f64;
        let elapsed = (t1 - t0) as f64;
        assert!(
            (counted / elapsed - 1.0).abs() < 0.05,
            "{counted} vs {elapsed} ns"
        );
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no arguments and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

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
