//! The open loop's rate over time: one rate (`--rate 5000`), or stages
//! (`--rate 1000:30s,5000:30s,ramp:5000-20000:60s`) of a steady rate or a linear ramp, each for a
//! duration, from the start of the run; after the last stage the last rate holds.
//!
//! Requests are numbered in the order they are due over all connections; request k is due when
//! k requests' worth of rate has passed since the start, `k = ∫ rate dt`, so each connection
//! finds its next request's time without any shared state.

use std::time::Duration;

/// One part of a schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stage {
    /// Requests per second at the stage's start and at its end (equal: a steady rate).
    pub from: f64,
    pub to: f64,
    pub duration: Duration,
}

/// The rate over time.
#[derive(Clone, Debug, PartialEq)]
pub struct RateSchedule {
    pub stages: Vec<Stage>,
}

impl RateSchedule {
    /// One rate for the whole run.
    pub fn steady(rate: f64) -> RateSchedule {
        RateSchedule {
            stages: vec![Stage {
                from: rate,
                to: rate,
                duration: Duration::ZERO,
            }],
        }
    }

    /// `RATE`, or stages `RATE:DURATION` and `ramp:FROM-TO:DURATION` separated by commas; a
    /// duration without a unit is seconds.
    pub fn parse(text: &str) -> Result<RateSchedule, String> {
        let text = text.trim();
        if !text.contains(':') {
            let rate = parse_rate(text)?;
            return Ok(RateSchedule::steady(rate));
        }
        let mut stages = Vec::new();
        for (i, part) in text.split(',').enumerate() {
            let part = part.trim();
            let stage_no = i + 1;
            let bad = |why: String| {
                format!(
                    "stage {stage_no} `{part}` of --rate {why}; write stages like 1000:30s,ramp:1000-5000:60s"
                )
            };
            let fields: Vec<&str> = part.split(':').collect();
            let stage = match fields.as_slice() {
                ["ramp", range, duration] => {
                    let (from, to) = range
                        .split_once('-')
                        .ok_or_else(|| bad("has no FROM-TO range".into()))?;
                    Stage {
                        from: parse_ramp_end(from).map_err(&bad)?,
                        to: parse_ramp_end(to).map_err(&bad)?,
                        duration: parse_stage_duration(duration).map_err(&bad)?,
                    }
                }
                [rate, duration] => {
                    let rate = parse_rate(rate).map_err(&bad)?;
                    Stage {
                        from: rate,
                        to: rate,
                        duration: parse_stage_duration(duration).map_err(&bad)?,
                    }
                }
                _ => return Err(bad("is neither RATE:DURATION nor ramp:FROM-TO:DURATION".into())),
            };
            stages.push(stage);
        }
        if stages.iter().all(|s| s.from == 0.0 && s.to == 0.0) {
            return Err("every stage of --rate sends nothing; give one a rate above 0".into());
        }
        Ok(RateSchedule { stages })
    }

    /// One rate throughout.
    pub fn is_steady(&self) -> bool {
        self.stages.len() == 1 && self.stages[0].from == self.stages[0].to
    }

    /// The stages' total time (zero for one steady rate).
    pub fn length(&self) -> Duration {
        self.stages.iter().map(|s| s.duration).sum()
    }

    /// The rate at the start, for the report's echo: the steady rate, or the first stage's.
    pub fn initial(&self) -> f64 {
        self.stages[0].from
    }

    /// The highest rate it asks for.
    pub fn peak(&self) -> f64 {
        self.stages
            .iter()
            .map(|s| s.from.max(s.to))
            .fold(0.0, f64::max)
    }

    /// When request `k` (0, 1, 2, ... over all connections) is due, after the run's start.
    pub fn due(&self, k: f64) -> Duration {
        let (mut elapsed, mut left) = (0.0, k);
        for s in &self.stages {
            let t = s.duration.as_secs_f64();
            let requests = (s.from + s.to) / 2.0 * t;
            if left < requests {
                return secs(elapsed + time_into(s.from, s.to, t, left));
            }
            left -= requests;
            elapsed += t;
        }
        // Past the last stage: its final rate holds; a ramp down to 0 sends nothing more.
        let rate = self.stages.last().map_or(0.0, |s| s.to);
        if rate <= 0.0 {
            return NEVER;
        }
        secs(elapsed + left / rate)
    }
}

/// Seconds as a Duration, NEVER when they are beyond it (a rate of 1e-300 a second) or NaN.
fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).map_or(NEVER, |d| d.min(NEVER))
}

/// Due after any run's end.
const NEVER: Duration = Duration::from_secs(u32::MAX as u64);

impl std::fmt::Display for RateSchedule {
    /// As `--rate` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_steady() {
            return write!(f, "{}", self.stages[0].from);
        }
        for (i, s) in self.stages.iter().enumerate() {
            let sep = if i > 0 { "," } else { "" };
            let secs = s.duration.as_secs_f64();
            if s.from == s.to {
                write!(f, "{sep}{}:{secs}s", s.from)?;
            } else {
                write!(f, "{sep}ramp:{}-{}:{secs}s", s.from, s.to)?;
            }
        }
        Ok(())
    }
}

/// Within a stage going from `r0` to `r1` over `t` seconds: when `n` requests have been due,
/// solving n = r0 s + (r1 - r0) s² / 2t for s.
fn time_into(r0: f64, r1: f64, t: f64, n: f64) -> f64 {
    let a = (r1 - r0) / (2.0 * t);
    if a.abs() < 1e-12 {
        return n / r0;
    }
    (-r0 + (r0 * r0 + 4.0 * a * n).max(0.0).sqrt()) / (2.0 * a)
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "`{text}` is not a positive number of requests per second"
        )),
    }
}

/// A ramp may start or end at 0.
fn parse_ramp_end(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err(format!("has `{text}`, not a number of requests per second")),
    }
}

fn parse_stage_duration(text: &str) -> Result<Duration, String> {
    let d = crate::duration::parse_duration(text)?;
    if d.is_zero() {
        return Err("lasts 0s".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    #[test]
    fn a_steady_rate_spaces_requests_evenly() {
        let s = RateSchedule::parse("1000").unwrap();
        assert!(s.is_steady());
        assert!((secs(s.due(0.0))).abs() < 1e-12);
        assert!((secs(s.due(1.0)) - 0.001).abs() < 1e-12);
        assert!((secs(s.due(5000.0)) - 5.0).abs() < 1e-9);
    }

    #[test]
    fn stages_add_up_and_the_last_rate_holds() {
        let s = RateSchedule::parse("1000:2s, 5000:1s").unwrap();
        assert_eq!(s.length(), Duration::from_secs(3));
        // 2000 requests in the first stage, 5000 in the second.
        assert!((secs(s.due(2000.0)) - 2.0).abs() < 1e-9);
        assert!((secs(s.due(4500.0)) - 2.5).abs() < 1e-9);
        assert!((secs(s.due(7000.0)) - 3.0).abs() < 1e-9);
        // Then 5000/s on.
        assert!((secs(s.due(12000.0)) - 4.0).abs() < 1e-9);
    }

    #[test]
    fn a_ramp_sends_what_its_mean_rate_says_and_speeds_up() {
        let s = RateSchedule::parse("ramp:0-2000:2s").unwrap();
        // 2000 requests over 2 s (mean 1000/s); half of them in the last 0.59 s.
        assert!((secs(s.due(2000.0)) - 2.0).abs() < 1e-9);
        assert!((secs(s.due(500.0)) - 1.0).abs() < 1e-9);
        // Count what is due in each tenth of a second: it grows.
        let mut per_tenth = vec![0u32; 20];
        for k in 0..2000 {
            per_tenth[(secs(s.due(k as f64)) * 10.0) as usize] += 1;
        }
        assert!(per_tenth.windows(2).all(|w| w[1] + 1 >= w[0]), "{per_tenth:?}");
        assert!((per_tenth[19] as f64 - 195.0).abs() <= 2.0, "{per_tenth:?}");
        let peak = RateSchedule::parse("100:1,ramp:5000-20000:60s").unwrap();
        assert_eq!(peak.peak(), 20000.0);
    }

    #[test]
    fn a_schedule_that_does_not_parse_says_which_stage_and_why() {
        for (text, says) in [
            ("0", "not a positive number"),
            ("fast", "not a positive number"),
            ("1000:30s,5000", "stage 2 `5000`"),
            ("ramp:100:10s", "no FROM-TO range"),
            ("ramp:a-100:10s", "`a`"),
            ("1000:0s", "lasts 0s"),
            ("1000:soon", "stage 1"),
            ("ramp:0-0:5s", "sends nothing"),
        ] {
            let err = RateSchedule::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
