//! The one line `run` keeps up to date on a terminal while it measures: the measured time, and
//! the throughput, p99 and errors of the intervals closed so far. Nothing when stderr is not a
//! terminal.

use std::io::{IsTerminal, Write};

use srvprof_loadgen::SoFar;
use srvprof_loadgen::printer::human_us;

/// The status of a run `measured_s` into its measured window (of `total_s`, when it has one).
pub fn line(measured_s: f64, total_s: Option<f64>, so_far: SoFar, interval_s: f64) -> String {
    let of = total_s.map(|t| format!(" of {t:.0}")).unwrap_or_default();
    let covered_s = so_far.intervals as f64 * interval_s;
    if so_far.intervals == 0 || covered_s <= 0.0 {
        return format!("measuring: {measured_s:.0} s{of}");
    }
    let errors = match so_far.errors {
        0 => "no errors".to_string(),
        1 => "1 error".to_string(),
        n => format!("{} errors", thousands(n)),
    };
    format!(
        "measuring: {measured_s:.0} s{of}, {} req/s, p99 {}, {errors}",
        thousands((so_far.completed as f64 / covered_s).round() as u64),
        human_us(so_far.p99_us as f64)
    )
}

/// 1234567 as 1,234,567.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Shows a status line in place, on a terminal only.
pub struct Status {
    on: bool,
}

impl Status {
    pub fn on_stderr() -> Status {
        Status {
            on: std::io::stderr().is_terminal(),
        }
    }

    pub fn show(&self, line: &str) {
        if self.on {
            let mut err = std::io::stderr().lock();
            // Back to the line's start, the line, the rest of the old one erased.
            let _ = write!(err, "\r{line}\x1b[K");
            let _ = err.flush();
        }
    }

    /// Erases the line, so what follows starts on a clean one.
    pub fn clear(&self) {
        if self.on {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_says_time_throughput_p99_and_errors_with_units() {
        let so_far = SoFar {
            completed: 264_002,
            errors: 0,
            p99_us: 642,
            intervals: 2,
        };
        assert_eq!(
            line(2.2, Some(30.0), so_far, 1.0),
            "measuring: 2 s of 30, 132,001 req/s, p99 642us, no errors"
        );
        let later = SoFar {
            errors: 1_234,
            p99_us: 1_250,
            ..so_far
        };
        assert_eq!(
            line(2.0, None, later, 1.0),
            "measuring: 2 s, 132,001 req/s, p99 1.25ms, 1,234 errors"
        );
        assert_eq!(
            line(0.4, Some(30.0), SoFar::default(), 1.0),
            "measuring: 0 s of 30"
        );
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(12_345_678), "12,345,678");
    }
}
