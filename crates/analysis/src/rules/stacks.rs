//! Flamegraphs whose stacks stop short of the thread's start.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// Under this share of a group's on-CPU stacks reaching the thread's start, the flamegraph's
/// parents are not to be trusted...
pub const MIN_REACH_START: f64 = 0.80;
/// ...once there are this many samples with a user part to judge by.
pub const MIN_SAMPLES: u64 = 20;

/// A group's on-CPU stacks mostly stop short of the thread's start: names where and why.
pub fn shallow_stacks(r: &RunReport) -> Vec<Finding> {
    r.stacks
        .iter()
        .filter(|q| q.kind == "oncpu" && q.with_user >= MIN_SAMPLES)
        .filter(|q| q.reach_start < MIN_REACH_START)
        .map(|q| {
            let stop = match (&q.stops_at, &q.why) {
                (Some(at), Some(why)) => format!("; most stop at {at}: {why}"),
                _ => String::new(),
            };
            Finding::new(
                FindingKind::ShallowStacks,
                Severity::Warning,
                format!(
                    "only {:.0}% of the {}'s on-CPU stacks reach their start (main, start_thread, or a frame the code marks as outermost), so its flamegraph shows the rest without their callers{stop}",
                    q.reach_start * 100.0,
                    q.group
                ),
                &[
                    ("reach_start", q.reach_start),
                    ("samples", q.with_user as f64),
                    ("mean_user_depth", q.mean_user_depth),
                ],
            )
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::rules::test_support::*;
    use crate::unwind_quality::UnwindQuality;

    tables!(shallow_stacks_table);

    fn with_stacks(kind: &str, with_user: u64, reach_start: f64) -> RunReport {
        let mut r = quiet_run();
        r.stacks.push(UnwindQuality {
            group: "server".into(),
            kind: kind.into(),
            weight: with_user,
            with_user,
            reach_start,
            stops_at: Some("[anon]+0x40".into()),
            why: Some("JIT".into()),
            ..UnwindQuality::default()
        });
        r
    }

    fn shallow_stacks_table() -> Table {
        let shallow = |share: f64| {
            finds(
                FindingKind::ShallowStacks,
                Severity::Warning,
                &[("reach_start", share)],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("no stacks recorded", quiet_run(), nothing()),
            ("every stack whole", with_stacks("oncpu", 400, 1.0), nothing()),
            ("just enough whole", with_stacks("oncpu", 400, 0.80), nothing()),
            ("most stop short", with_stacks("oncpu", 400, 0.03), shallow(0.03)),
            ("too few samples to judge", with_stacks("oncpu", 19, 0.0), nothing()),
            ("off-CPU stacks are not judged here", with_stacks("offcpu", 400, 0.0), nothing()),
        ];
        Table::new(shallow_stacks, cases)
    }
}
