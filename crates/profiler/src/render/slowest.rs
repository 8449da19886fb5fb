//! What the server ran in the run's slowest intervals: its stacks in the intervals whose p99 stood
//! out (or that had an error burst) against its stacks in the rest, as differential flamegraphs
//! (normalised per sample) and the functions that gained the most share.

use super::escape::esc;
use srvprof_files::OutDir;
use std::fmt::Write;

use srvprof_analysis::run_report::RunReport;
use srvprof_analysis::slow_intervals::{
    FrameChange, SlowIntervals, StackSplit, slow_intervals, split_stacks,
};

use super::flamegraph;
use crate::error::SrvprofError;
use crate::output;
use srvprof_analysis::stacks::{FoldedLine, FoldedStacks, StackKind};

/// One kind of the server's stacks, split by the slow intervals.
pub struct Split {
    pub kind: StackKind,
    pub slow_total: u64,
    pub rest_total: u64,
    /// The group's value the kernel counted without a time (samples the ring had no room for;
    /// processes whose off-CPU stacks are the kernel's keys): on neither side.
    pub untimed: u64,
    /// Functions by share gained in the slow intervals, largest first.
    pub changes: Vec<FrameChange>,
    /// The differential: folded `stack rest slow` lines, and its standalone SVG.
    pub diff: Option<(String, String)>,
}

pub struct Slowest {
    pub intervals: SlowIntervals,
    pub splits: Vec<Split>,
}

/// The slow intervals and the server's stacks split by them, or why there are none.
pub fn slowest(run: &RunReport, stacks: &FoldedStacks) -> Result<Slowest, String> {
    let Some(intervals) = slow_intervals(&run.timeline) else {
        return Err(format!(
            "No interval's p99 stood out from the median interval's ({} intervals; slow means at least {}x the median and {} us above it, or an error burst), so there is no slow part to compare.",
            run.timeline.len(),
            srvprof_analysis::slow_intervals::SLOW_P99_RATIO,
            srvprof_analysis::slow_intervals::SLOW_P99_MARGIN_US
        ));
    };
    let mut splits = Vec::new();
    for split in split_stacks(&intervals, stacks) {
        let StackSplit {
            kind,
            slow,
            rest,
            untimed,
            changes,
        } = split;
        let total = |v: &[FoldedLine]| v.iter().map(|l| l.value).sum::<u64>();
        let what = match kind {
            StackKind::OnCpu => "on-CPU samples",
            StackKind::OffCpu => "off-CPU time",
        };
        let diff = flamegraph::differential(
            kind,
            &format!(
                "server: {} in the slowest intervals ({}) against the rest",
                what,
                intervals.describe()
            ),
            "widths: the slow intervals; red grew, blue shrank, against the rest normalised to the same total; click to zoom, Search to find a function",
            &rest,
            &slow,
            false,
        );
        splits.push(Split {
            kind,
            slow_total: total(&slow),
            rest_total: total(&rest),
            untimed,
            changes,
            diff,
        });
    }
    Ok(Slowest { intervals, splits })
}

/// DIR/flamegraph-slowest-{oncpu,offcpu}-server.svg (srvprof's own files: `srvprof report`
/// rewrites them).
pub fn write_svgs(dir: &OutDir, slowest: &Slowest, force: bool) -> Result<(), SrvprofError> {
    for split in &slowest.splits {
        if let Some((_, svg)) = &split.diff {
            let stem = split.kind.file_stem();
            let file = format!("flamegraph-slowest-{stem}-server.svg");
            output::write_atomic(dir, &file, svg.as_bytes(), force)?;
        }
    }
    Ok(())
}

/// DIR/slowest-{oncpu,offcpu}-server.diff.folded, the differentials' data, written with the
/// run's other folded files (like them, replaced only with --force).
pub fn write_diffs(dir: &OutDir, slowest: &Slowest, force: bool) -> Result<(), SrvprofError> {
    for split in &slowest.splits {
        if let Some((diff, _)) = &split.diff {
            let stem = split.kind.file_stem();
            let file = format!("slowest-{stem}-server.diff.folded");
            output::write_atomic(dir, &file, diff.as_bytes(), force)?;
        }
    }
    Ok(())
}

/// How many functions the page lists per kind.
const TOP: usize = 6;

/// The page's section: which intervals, then per kind the functions that gained and lost the
/// most share, and the differential graph.
pub fn html(o: &mut String, slowest: &Result<Slowest, String>) {
    o.push_str("<h2 id=\"slowest\">What the slowest intervals ran</h2>");
    let s = match slowest {
        Ok(s) => s,
        Err(why) => {
            let _ = write!(o, "<p class=\"note\">{}</p>", esc(why));
            return;
        }
    };
    let iv = &s.intervals;
    let _ = write!(
        o,
        "<p>Slow: {} ({} of {} intervals; worst p99 {} against the median interval's {}{}). \
         The server's stacks in them against its stacks in the rest, each side as shares of its own total.</p>",
        esc(&iv.describe()),
        iv.slow.len(),
        iv.slow.len() + iv.rest.len(),
        duration(iv.worst_p99_us as f64),
        duration(iv.median_p99_us as f64),
        if iv.error_bursts > 0 {
            format!("; {} for an error burst", iv.error_bursts)
        } else {
            String::new()
        }
    );
    if s.splits.is_empty() {
        o.push_str("<p class=\"note\">No timed server stacks fell in both the slow intervals and the rest.</p>");
    }
    for split in &s.splits {
        let (what, amount): (&str, fn(u64) -> String) = match split.kind {
            StackKind::OnCpu => ("On-CPU", |n| format!("{n} samples")),
            StackKind::OffCpu => ("Off-CPU", |us| {
                format!("{} off the CPU", duration(us as f64))
            }),
        };
        let _ = write!(
            o,
            "<h3>{what}: {} in the slow intervals, {} in the rest</h3>\
             <table><tr><th class=\"l\">function</th><th>share, slow</th><th>share, rest</th><th>gain (points)</th></tr>",
            amount(split.slow_total),
            amount(split.rest_total)
        );
        // The top gains, then the two largest losses not already listed.
        let lost = (split.changes.iter().skip(TOP).rev().take(2)).filter(|c| c.gain() < -0.01);
        for c in split.changes.iter().take(TOP).chain(lost) {
            let _ = write!(
                o,
                "<tr><td class=\"l\"><code>{}</code></td><td>{:.1} %</td><td>{:.1} %</td><td>{:+.1}</td></tr>",
                esc(&c.name),
                c.slow_share * 100.0,
                c.rest_share * 100.0,
                c.gain() * 100.0
            );
        }
        o.push_str("</table>");
        if split.untimed > 0 {
            let _ = write!(
                o,
                "<p class=\"note\">Not on either side: {}, counted by the kernel without a time (samples the ring had no room for, or off-CPU stacks of a process with too few drawn periods).</p>",
                amount(split.untimed)
            );
        }
        if let Some((_, svg)) = &split.diff {
            let _ = write!(
                o,
                "<div class=\"figure\">{}</div>",
                flamegraph::frame(&format!("{what} differential"), svg)
            );
        }
    }
}

/// Microseconds as a person reads them: 850 us, 4.1 ms, 5.9 s.
fn duration(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.1} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{us:.0} us")
    }
}
