//! Which timeline intervals were slow, and what the stacks did more of in them: the intervals
//! whose p99 stands out from the run's (or that had an error burst) against the rest, and the
//! functions whose share of the stacks grew most between the two (FlameScope's question, asked
//! of srvprof's own load timeline).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use srvprof_common::GROUP_SERVER;

use crate::stacks::{FoldedLine, FoldedStacks, StackKind};
use crate::timeline::TimelineRow;

/// An interval is slow when its p99 is at least this many times the median interval's...
pub const SLOW_P99_RATIO: f64 = 1.5;
/// ...and at least this much above it (µs): at tens of microseconds, 1.5x is scheduling noise.
pub const SLOW_P99_MARGIN_US: u64 = 200;
/// Fewer intervals than this give no median to stand out from.
pub const MIN_INTERVALS: usize = 4;

/// The slow intervals and the rest, as windows in milliseconds since the measured window started.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SlowIntervals {
    /// [from, to) of each slow interval, in time order.
    pub slow: Vec<(i64, i64)>,
    /// [from, to) of every other interval.
    pub rest: Vec<(i64, i64)>,
    /// The median interval's p99, and the worst slow one's (µs).
    pub median_p99_us: u64,
    pub worst_p99_us: u64,
    /// Slow intervals chosen for their errors alone.
    pub error_bursts: usize,
}

impl SlowIntervals {
    /// Whether a time (ms since the window started) falls in a slow interval, in another one, or
    /// in none (the warm-up, the drain).
    pub fn side(&self, at_ms: i64) -> Option<bool> {
        let within = |w: &[(i64, i64)]| w.iter().any(|&(a, b)| at_ms >= a && at_ms < b);
        if within(&self.slow) {
            Some(true)
        } else if within(&self.rest) {
            Some(false)
        } else {
            None
        }
    }

    /// "3.0-5.0 s" style list of the slow windows, runs of adjacent intervals joined.
    pub fn describe(&self) -> String {
        let mut spans: Vec<(i64, i64)> = Vec::new();
        for &(a, b) in &self.slow {
            match spans.last_mut() {
                Some(last) if (a - last.1).abs() <= 50 => last.1 = b,
                _ => spans.push((a, b)),
            }
        }
        (spans.iter())
            .map(|(a, b)| format!("{:.1}-{:.1} s", *a as f64 / 1e3, *b as f64 / 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The slow intervals of a timeline, or None when none stands out (or there are too few).
/// Slow: p99 at least SLOW_P99_RATIO times the median interval's and SLOW_P99_MARGIN_US above
/// it, or errors in an interval when the median interval had none. Never more than half of them:
/// a run slow throughout has no "slow part" to tell apart.
pub fn slow_intervals(timeline: &[TimelineRow]) -> Option<SlowIntervals> {
    if timeline.len() < MIN_INTERVALS {
        return None;
    }
    let median = |mut v: Vec<u64>| -> u64 {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let median_p99 = median(timeline.iter().map(|r| r.p99_us).collect());
    let median_errors = median(timeline.iter().map(|r| r.errors).collect());
    let bar = ((median_p99 as f64 * SLOW_P99_RATIO) as u64).max(median_p99 + SLOW_P99_MARGIN_US);
    let by_p99 = |r: &TimelineRow| r.completed > 0 && r.p99_us >= bar;
    let by_errors = |r: &TimelineRow| median_errors == 0 && r.errors > 0;
    let window = |r: &TimelineRow| {
        let from = (r.t_s * 1e3).round() as i64;
        (from, from + (r.duration_s * 1e3).round() as i64)
    };
    let mut out = SlowIntervals {
        median_p99_us: median_p99,
        ..Default::default()
    };
    for r in timeline {
        if by_p99(r) || by_errors(r) {
            out.slow.push(window(r));
            out.worst_p99_us = out.worst_p99_us.max(r.p99_us);
            if !by_p99(r) {
                out.error_bursts += 1;
            }
        } else {
            out.rest.push(window(r));
        }
    }
    (!out.slow.is_empty() && out.slow.len() * 2 <= timeline.len()).then_some(out)
}

/// A function's share of the stacks (the part of the value whose stack holds it, counted once
/// per stack) in the slow intervals and in the rest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FrameChange {
    pub name: String,
    pub slow_share: f64,
    pub rest_share: f64,
}

impl FrameChange {
    /// Percentage points of the stacks gained in the slow intervals (negative: lost).
    pub fn gain(&self) -> f64 {
        self.slow_share - self.rest_share
    }
}

/// Each function's share of `slow` and of `rest` (stacks as frames and value), largest gain
/// first. Shares are of each side's own total, so a side with more samples does not weigh more.
pub fn frame_changes<'a>(
    slow: impl Iterator<Item = (&'a [String], u64)>,
    rest: impl Iterator<Item = (&'a [String], u64)>,
) -> Vec<FrameChange> {
    fn shares<'a>(lines: impl Iterator<Item = (&'a [String], u64)>) -> BTreeMap<&'a str, f64> {
        let mut by_name: BTreeMap<&str, u64> = BTreeMap::new();
        let mut total = 0u64;
        for (frames, value) in lines {
            total += value;
            let once: BTreeSet<&str> = frames.iter().map(String::as_str).collect();
            for name in once {
                *by_name.entry(name).or_default() += value;
            }
        }
        (by_name.into_iter())
            .map(|(k, v)| (k, v as f64 / total.max(1) as f64))
            .collect()
    }
    let (slow, rest) = (shares(slow), shares(rest));
    let names: BTreeSet<&str> = slow.keys().chain(rest.keys()).copied().collect();
    let mut out: Vec<FrameChange> = (names.into_iter())
        .map(|name| FrameChange {
            name: name.to_string(),
            slow_share: slow.get(name).copied().unwrap_or(0.0),
            rest_share: rest.get(name).copied().unwrap_or(0.0),
        })
        .collect();
    out.sort_by(|a, b| b.gain().total_cmp(&a.gain()).then(a.name.cmp(&b.name)));
    out
}

/// Each function's share of `lines` against its share of `base` (frame_changes), largest gain
/// first.
pub fn changes_between(lines: &[FoldedLine], base: &[FoldedLine]) -> Vec<FrameChange> {
    frame_changes(
        lines.iter().map(|l| (l.frames.as_slice(), l.value)),
        base.iter().map(|l| (l.frames.as_slice(), l.value)),
    )
}

/// One kind of the server's stacks, split by the slow intervals.
#[derive(Clone, Debug, PartialEq)]
pub struct StackSplit {
    pub kind: StackKind,
    /// The server's stacks with their values in the slow intervals, and in the rest.
    pub slow: Vec<FoldedLine>,
    pub rest: Vec<FoldedLine>,
    /// The server's value the kernel counted without a time (samples the ring had no room for;
    /// processes whose off-CPU stacks are the kernel's keys): on neither side.
    pub untimed: u64,
    /// Functions by share gained in the slow intervals, largest first.
    pub changes: Vec<FrameChange>,
}

/// The server's stacks of each kind split by the slow intervals; a kind without stacks on both
/// sides is left out. An interval's stacks go to the side of the timeline row their interval's
/// middle falls in: the rows start when the sampler read them, a little after their grid point.
pub fn split_stacks(intervals: &SlowIntervals, stacks: &FoldedStacks) -> Vec<StackSplit> {
    let half = stacks.interval_ms.unwrap_or(0) / 2;
    let mut out = Vec::new();
    for kind in StackKind::ALL {
        let lines = stacks.lines(kind);
        let (mut slow, mut rest) = (vec![0u64; lines.len()], vec![0u64; lines.len()]);
        let mut timed = vec![0u64; lines.len()];
        for a in stacks.at(kind) {
            timed[a.line as usize] += a.value;
            match intervals.side(a.at_ms + half) {
                Some(true) => slow[a.line as usize] += a.value,
                Some(false) => rest[a.line as usize] += a.value,
                // In the warm-up or the drain: outside every interval.
                None => {}
            }
        }
        let server = |l: &&FoldedLine| l.group == GROUP_SERVER;
        let untimed = (lines.iter().zip(&timed))
            .filter(|(l, _)| server(l))
            .map(|(l, t)| l.value.saturating_sub(*t))
            .sum();
        let side = |values: &[u64]| -> Vec<FoldedLine> {
            (lines.iter().zip(values))
                .filter(|(l, v)| server(l) && **v > 0)
                .map(|(l, v)| FoldedLine {
                    value: *v,
                    ..l.clone()
                })
                .collect()
        };
        let (slow, rest) = (side(&slow), side(&rest));
        if slow.is_empty() || rest.is_empty() {
            continue;
        }
        let changes = changes_between(&slow, &rest);
        out.push(StackSplit {
            kind,
            slow,
            rest,
            untimed,
            changes,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t_s: f64, p99_us: u64, errors: u64) -> TimelineRow {
        TimelineRow {
            t_s,
            duration_s: 1.0,
            p99_us,
            errors,
            completed: 1000,
            ..Default::default()
        }
    }

    #[test]
    fn intervals_whose_p99_stands_out_are_slow_and_the_rest_are_not() {
        let t = [
            row(0.0, 400, 0),
            row(1.0, 420, 0),
            row(2.0, 5_000, 0),
            row(3.0, 4_000, 0),
            row(4.0, 410, 0),
            row(5.0, 390, 0),
        ];
        let s = slow_intervals(&t).unwrap();
        assert_eq!(s.slow, vec![(2000, 3000), (3000, 4000)]);
        assert_eq!(s.rest.len(), 4);
        assert_eq!((s.median_p99_us, s.worst_p99_us), (420, 5_000));
        assert_eq!(s.describe(), "2.0-4.0 s");
        assert_eq!(s.side(2500), Some(true));
        assert_eq!(s.side(4999), Some(false));
        assert_eq!(s.side(-100), None);
    }

    #[test]
    fn at_the_thresholds() {
        // 1.5x the median and 200 us above it: 1.5 x 1000 = 1500 is slow, 1499 is not.
        let mut t = vec![row(0.0, 1000, 0), row(1.0, 1000, 0), row(2.0, 1000, 0)];
        t.push(row(3.0, 1499, 0));
        assert_eq!(slow_intervals(&t), None);
        t[3].p99_us = 1500;
        assert_eq!(slow_intervals(&t).unwrap().slow, vec![(3000, 4000)]);
        // At 100 us, 1.5x is 150 us: the margin (300 us) decides.
        let mut t = vec![row(0.0, 100, 0), row(1.0, 100, 0), row(2.0, 100, 0)];
        t.push(row(3.0, 299, 0));
        assert_eq!(slow_intervals(&t), None);
        t[3].p99_us = 300;
        assert!(slow_intervals(&t).is_some());
        // Too few intervals.
        assert_eq!(slow_intervals(&t[..3]), None);
    }

    #[test]
    fn an_error_burst_is_slow_and_a_run_slow_throughout_has_no_slow_part() {
        let t = [
            row(0.0, 400, 0),
            row(1.0, 400, 12),
            row(2.0, 400, 0),
            row(3.0, 400, 0),
        ];
        let s = slow_intervals(&t).unwrap();
        assert_eq!((s.slow.clone(), s.error_bursts), (vec![(1000, 2000)], 1));
        let t = [
            row(0.0, 400, 0),
            row(1.0, 5000, 0),
            row(2.0, 5000, 0),
            row(3.0, 5000, 0),
        ];
        assert_eq!(slow_intervals(&t), None);
    }

    #[test]
    fn the_function_that_grew_in_the_slow_intervals_comes_first() {
        let s = |v: &[&str]| v.iter().map(|f| f.to_string()).collect::<Vec<_>>();
        let (main_fast, main_slow) = (s(&["w", "main", "fast"]), s(&["w", "main", "slow_path"]));
        // Slow: 60 of 100 in slow_path; rest: 10 of 1000.
        let slow = [(main_slow.as_slice(), 60), (main_fast.as_slice(), 40)];
        let rest = [(main_slow.as_slice(), 10), (main_fast.as_slice(), 990)];
        let c = frame_changes(slow.into_iter(), rest.into_iter());
        assert_eq!(c[0].name, "slow_path");
        assert!((c[0].slow_share - 0.6).abs() < 1e-9 && (c[0].rest_share - 0.01).abs() < 1e-9);
        assert!((c[0].gain() - 0.59).abs() < 1e-9);
        let last = c.last().unwrap();
        assert_eq!(last.name, "fast");
        assert!((last.gain() + 0.59).abs() < 1e-9);
        // Frames on every stack gain nothing.
        assert!(c.iter().any(|f| f.name == "main" && f.gain().abs() < 1e-9));
    }

    #[test]
    fn stacks_split_by_the_middle_of_their_interval_and_the_untimed_rest_is_on_neither_side() {
        use crate::stacks::LineSet;
        let mut set = LineSet::default();
        let mut add = |group, frames: &[&str], value, at: &[(i64, u64)]| {
            let l = set.add(group, frames.iter().map(|s| s.to_string()).collect(), value);
            for &(at_ms, v) in at {
                set.add_at(l, at_ms, v);
            }
        };
        // The slow row started 2 ms after its grid point: its interval's stacks still go to it.
        add(0, &["w", "slow_path"], 7, &[(3000, 6)]);
        add(0, &["w", "fast"], 12, &[(1000, 5), (2000, 5), (3000, 1)]);
        add(1, &["client", "send"], 4, &[(3000, 4)]);
        let mut stacks = FoldedStacks {
            interval_ms: Some(1000),
            ..Default::default()
        };
        stacks.set(StackKind::OnCpu, set.finish());
        let intervals = SlowIntervals {
            slow: vec![(3002, 4002)],
            rest: vec![(1001, 2001), (2001, 3002)],
            ..Default::default()
        };
        let splits = split_stacks(&intervals, &stacks);
        assert_eq!(splits.len(), 1, "no off-CPU stacks: one kind");
        let s = &splits[0];
        let side = |lines: &[FoldedLine]| -> Vec<(String, u64)> {
            lines
                .iter()
                .map(|l| (l.frames.join(";"), l.value))
                .collect()
        };
        assert_eq!(
            side(&s.slow),
            [("w;fast".into(), 1), ("w;slow_path".into(), 6)]
        );
        assert_eq!(side(&s.rest), [("w;fast".into(), 10)]);
        // 1 of slow_path's and 1 of fast's samples had no time; the client's are not the server's.
        assert_eq!(s.untimed, 2);
        assert_eq!(s.changes[0].name, "slow_path");
    }
}
