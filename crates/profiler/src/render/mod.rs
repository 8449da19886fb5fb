//! What a user reads: the terminal text (text.rs for `probe`, run_text.rs for `run`), and
//! report.html with the files behind it: folded stacks, flamegraphs, plots, the context-switch
//! report. The page is built from run.json and the folded files, so `srvprof report DIR` can
//! re-render a run without a kernel.

pub mod ctxsw;
pub mod flamegraph;
pub mod folded;
pub mod html;
pub mod lock_stacks;
pub mod perf_map;
pub mod plots;
pub mod run_text;
pub mod symbolize;
pub mod text;

use std::path::Path;

use crate::error::SrvprofError;
use crate::output;
use folded::FoldedStacks;
use srvprof_analysis::run_report::RunReport;

/// The marker output.rs recognises srvprof's own HTML by.
pub const HTML_MARKER: &str = "srvprof-report";

/// Writes DIR/flamegraph-{oncpu,offcpu}-{server,client}.svg, each group's and kind's stacks as a
/// standalone flamegraph to zoom and search in (none for a group without stacks).
pub fn write_flamegraphs(
    dir: &Path,
    run: &RunReport,
    stacks: &FoldedStacks,
    force: bool,
) -> Result<(), SrvprofError> {
    use folded::{GROUPS, StackKind};
    for kind in StackKind::ALL {
        for (group, name) in GROUPS {
            let lines: Vec<folded::FoldedLine> = (stacks.lines(kind).iter())
                .filter(|l| l.group == group)
                .cloned()
                .collect();
            let total: u64 = lines.iter().map(|l| l.value).sum();
            let (title, subtitle) = match kind {
                StackKind::OnCpu => (
                    format!("{name}: on-CPU stacks"),
                    format!(
                        "{total} cpu-clock samples over the run ({:.1} s measured, warm-up included); click a frame to zoom, Search to find a function",
                        run.load.duration_s
                    ),
                ),
                StackKind::OffCpu => (
                    format!("{name}: off-CPU stacks"),
                    format!(
                        "{:.1} s off-CPU, switch-out to switch-in, over the run ({:.1} s measured, warm-up included); click a frame to zoom, Search to find a function",
                        total as f64 / 1e6,
                        run.load.duration_s
                    ),
                ),
            };
            if let Some(svg) = flamegraph::standalone(kind, &title, &subtitle, &lines) {
                let file = format!("flamegraph-{}-{name}.svg", kind.file_stem());
                output::write_atomic(&dir.join(file), svg.as_bytes(), force)?;
            }
        }
    }
    Ok(())
}

/// Writes DIR/report.html: one self-contained page, every image an inline SVG.
pub fn write_html(
    dir: &Path,
    run: &RunReport,
    stacks: &FoldedStacks,
    force: bool,
) -> Result<(), SrvprofError> {
    let page = html::page(run, stacks);
    output::write_atomic(&dir.join("report.html"), page.as_bytes(), force)
}
