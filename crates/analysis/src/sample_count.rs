//! The on-CPU samples of each group in the measured span against what its CPU time there
//! calls for at the sampling rate: the label a flamegraph's count needs.

use crate::stacks::FoldedStacks;
use crate::unwind_quality::UnwindQuality;

/// A group's CPU time in the measured span (s): the part its threads ran between switch-in and
/// switch-out, and the part the scheduler charged before their switch-ins, where no timer lands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupCpu {
    pub ran_s: f64,
    pub precharged_s: f64,
    /// Its samples in the span the ring had no room for: counted in the kernel without a time.
    pub untimed_samples: u64,
}

/// Sets each on-CPU entry's samples in the measured span (`span_ms` long, from the stacks'
/// times) and those its group's time on a CPU there (`cpu_s`, by group name) calls for at its
/// rate.
pub fn count_measured_samples(
    quality: &mut [UnwindQuality],
    stacks: &FoldedStacks,
    span_ms: i64,
    cpu_s: impl Fn(&str) -> Option<GroupCpu>,
) {
    // A group with no sample at all is one whose stacks were not taken (the load generator's,
    // unless asked for).
    for q in quality.iter_mut().filter(|q| q.kind == "oncpu") {
        let (Some(hz), Some(cpu_s), true) = (q.sample_hz, cpu_s(&q.group), q.weight > 0) else {
            q.sample_hz = None;
            continue;
        };
        let group = match q.group.as_str() {
            "server" => srvprof_common::GROUP_SERVER,
            _ => srvprof_common::GROUP_CLIENT,
        };
        let timed: u64 = (stacks.oncpu_at.iter())
            .filter(|at| (0..span_ms).contains(&at.at_ms))
            .filter(|at| stacks.oncpu.get(at.line as usize).map(|l| l.group) == Some(group))
            .map(|at| at.value)
            .sum();
        q.measured_samples = Some(timed + cpu_s.untimed_samples);
        q.expected_samples = Some(hz as f64 * cpu_s.ran_s);
        q.precharged_samples = Some(hz as f64 * cpu_s.precharged_s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_measured_samples_are_the_groups_own_inside_the_measured_span() {
        use crate::stacks::{At, FoldedLine, FoldedStacks};
        let line = |group| FoldedLine {
            group,
            frames: frames(&["t", "f"]),
            value: 0,
            periods: 0,
        };
        let at = |at_ms, line, value| At { at_ms, line, value };
        let stacks = FoldedStacks {
            oncpu: vec![line(0), line(1)],
            // Warm-up, the span twice, after it; and the client's in the span.
            oncpu_at: vec![
                at(-500, 0, 7),
                at(0, 0, 40),
                at(500, 0, 50),
                at(1000, 0, 9),
                at(0, 1, 3),
            ],
            ..FoldedStacks::default()
        };
        let mut q = vec![
            UnwindQuality {
                group: "server".into(),
                kind: "oncpu".into(),
                weight: 106,
                sample_hz: Some(99),
                ..UnwindQuality::default()
            },
            UnwindQuality {
                group: "client".into(),
                kind: "oncpu".into(),
                weight: 0,
                sample_hz: Some(99),
                ..UnwindQuality::default()
            },
        ];
        let cpu = |ran_s, precharged_s, untimed_samples| GroupCpu {
            ran_s,
            precharged_s,
            untimed_samples,
        };
        count_measured_samples(&mut q, &stacks, 1000, |g| {
            Some(if g == "server" {
                cpu(1.0, 0.1, 4)
            } else {
                cpu(2.0, 0.0, 0)
            })
        });
        // The span's timed samples, and those the ring had no room for there.
        assert_eq!(
            (q[0].measured_samples, q[0].expected_samples),
            (Some(94), Some(99.0))
        );
        assert_eq!(q[0].precharged_samples, Some(9.9));
        // No sample at all: its stacks were not taken.
        assert_eq!((q[1].sample_hz, q[1].measured_samples), (None, None));
    }
}
