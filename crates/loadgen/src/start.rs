//! A common start for the hosts of a split load (`--start-at`): the run begins at an instant of
//! the wall clock, then keeps its time on the monotonic clock, so its measured window and every
//! interval boundary fall at the same wall-clock times on every host. Hosts agree only as well as
//! their clocks do: the kernel's own estimate of this one's error is recorded beside it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::{ClockState, LoadError};

/// `--start-at`: an RFC 3339 time, or `+DURATION` from now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartAt(pub SystemTime);

impl StartAt {
    pub fn parse(text: &str) -> Result<StartAt, String> {
        if let Some(after) = text.strip_prefix('+') {
            let after = crate::duration::parse_duration(after)?;
            return Ok(StartAt(SystemTime::now() + after));
        }
        let at: jiff::Timestamp = text.parse().map_err(|e| {
            format!("`{text}` is not a time like 2026-11-29T09:30:00Z or +30s: {e}")
        })?;
        SystemTime::try_from(at)
            .map(StartAt)
            .map_err(|e| format!("{text}: {e}"))
    }

    /// How long ago it was (zero before it): a thread woken for it starts its clock this much
    /// earlier than now, so that every host's grid sits on the same wall-clock times.
    pub fn passed(self) -> Duration {
        SystemTime::now().duration_since(self.0).unwrap_or_default()
    }

    /// The instant in RFC 3339, UTC, to the millisecond.
    pub fn to_rfc3339(self) -> String {
        jiff::Timestamp::try_from(self.0)
            .map(|t| format!("{t:.3}"))
            .unwrap_or_default()
    }
}

/// The run's id, which every host of a split run records so that their results are known to be
/// one run's: `--run-id`'s, or else the common start's instant (hosts given the same
/// `--start-at` share it), or none for a run of one host alone.
pub fn run_id(given: Option<&str>, at: Option<StartAt>) -> Option<String> {
    match (given, at) {
        (Some(id), _) => Some(id.to_string()),
        (None, Some(at)) => Some(format!("start-{}", at.to_rfc3339())),
        (None, None) => None,
    }
}

/// A run id for a run given none that still needs one (`--remote-write` labels its series with
/// it): `load-` and the time now, to the second.
pub fn run_id_from_now() -> String {
    format!("load-{:.0}", jiff::Timestamp::now())
}

/// This host's name (the kernel's), to tell the hosts of a split run apart.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The kernel's view of this host's clock (adjtimex): whether it is synchronised, and its
/// maximum and estimated error.
pub fn clock_state() -> ClockState {
    // SAFETY: a zeroed timex with modes 0 only reads the kernel's state into it.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::adjtimex(&mut t) };
    ClockState {
        synchronised: state != libc::TIME_ERROR && t.status & libc::STA_UNSYNC == 0,
        max_error_us: t.maxerror.max(0) as u64,
        est_error_us: t.esterror.max(0) as u64,
    }
}

/// Whether `at` is still ahead and the clock can be trusted to place it (unless
/// `allow_unsynced`): checked when the options are read, before anything is started, and again
/// at the wait.
pub fn check(at: StartAt, clock: &ClockState, allow_unsynced: bool) -> Result<Duration, LoadError> {
    if !clock.synchronised && !allow_unsynced {
        return Err(LoadError::InvalidOption(format!(
            "this host's clock is not synchronised (the kernel says so; its error may be up to {} ms), so it cannot start with the others at --start-at: synchronise it (chrony, systemd-timesyncd) or give --allow-unsynced",
            clock.max_error_us / 1000
        )));
    }
    at.0.duration_since(SystemTime::now()).map_err(|late| {
        LoadError::InvalidOption(format!(
            "--start-at {} passed {:.3} s ago: give a time still ahead on every host",
            at.to_rfc3339(),
            late.duration().as_secs_f64()
        ))
    })
}

/// Sleeps until `at` on the wall clock, once `check` passes; false when `stop` was asked first
/// (Ctrl-C while waiting).
pub fn wait_for(
    at: StartAt,
    clock: &ClockState,
    allow_unsynced: bool,
    stop: &AtomicBool,
) -> Result<bool, LoadError> {
    check(at, clock, allow_unsynced)?;
    // In short sleeps, to hear a stop; the last stretch, which a sleep would overshoot by the
    // scheduler's wakeup, is re-aimed at the clock.
    while let Ok(left) = at.0.duration_since(SystemTime::now()) {
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        match left.checked_sub(Duration::from_millis(2)) {
            Some(far) => std::thread::sleep(far.min(Duration::from_millis(50))),
            None => std::hint::spin_loop(),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_is_a_utc_or_offset_time_or_a_delay() {
        let utc = StartAt::parse("2026-11-29T09:30:00Z").unwrap();
        let paris = StartAt::parse("2026-11-29T10:30:00+01:00").unwrap();
        assert_eq!(utc, paris);
        assert_eq!(utc.to_rfc3339(), "2026-11-29T09:30:00.000Z");
        let soon = StartAt::parse("+30s").unwrap().0;
        let ahead = soon.duration_since(SystemTime::now()).unwrap();
        assert!(ahead > Duration::from_secs(29) && ahead <= Duration::from_secs(30));
        assert!(StartAt::parse("tomorrow").unwrap_err().contains("+30s"));
    }

    #[test]
    fn hosts_given_one_start_share_its_run_id_unless_one_is_given() {
        let at = StartAt::parse("2026-11-29T09:30:00Z").unwrap();
        assert_eq!(
            run_id(None, Some(at)).as_deref(),
            Some("start-2026-11-29T09:30:00.000Z")
        );
        assert_eq!(run_id(Some("nightly-7"), Some(at)).as_deref(), Some("nightly-7"));
        assert_eq!(run_id(None, None), None);
        assert!(!host_name().is_empty());
    }

    #[test]
    fn a_past_start_or_an_unsynced_clock_is_one_sentence() {
        let synced = ClockState {
            synchronised: true,
            max_error_us: 500,
            est_error_us: 100,
        };
        let past = StartAt(SystemTime::now() - Duration::from_secs(2));
        let go_on = AtomicBool::new(false);
        let err = wait_for(past, &synced, false, &go_on).unwrap_err().to_string();
        assert!(err.contains("passed 2.0") && err.contains("still ahead"), "{err}");
        let unsynced = ClockState {
            synchronised: false,
            ..synced
        };
        let soon = StartAt(SystemTime::now() + Duration::from_millis(20));
        let err = wait_for(soon, &unsynced, false, &go_on).unwrap_err().to_string();
        assert!(err.contains("not synchronised") && err.contains("--allow-unsynced"), "{err}");
        assert!(wait_for(soon, &unsynced, true, &go_on).unwrap());
        assert!(SystemTime::now() >= soon.0);
        // A stop asked while waiting ends the wait at once.
        let later = StartAt(SystemTime::now() + Duration::from_secs(60));
        let stopped = AtomicBool::new(true);
        let asked = std::time::Instant::now();
        assert!(!wait_for(later, &synced, false, &stopped).unwrap());
        assert!(asked.elapsed() < Duration::from_millis(100));
    }
}
