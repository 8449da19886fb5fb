//! What a user reads: the terminal text (text.rs for `probe`, run_text.rs for `run`), and
//! report.html with the files behind it: folded stacks, flamegraphs, plots, the context-switch
//! report. The page is built from run.json and the folded files, so `srvprof report DIR` can
//! re-render a run without a kernel.

pub mod ctxsw;
mod escape;
pub mod first_screen;
pub mod flamegraph;
pub mod hosts_html;
pub mod html;
pub mod plots;
pub mod pprof;
pub mod run_text;
pub mod slowest;
pub mod status;
pub mod text;

use srvprof_files::OutDir;

use crate::error::SrvprofError;
use crate::output;
use srvprof_analysis::run_report::RunReport;
use srvprof_analysis::stacks::FoldedStacks;

/// The marker output.rs recognises srvprof's own HTML by.
pub const HTML_MARKER: &str = "srvprof-report";

/// Writes DIR/flamegraph-{oncpu,offcpu}-{server,client}.svg, each group's and kind's stacks as a
/// standalone flamegraph to zoom and search in (none for a group without stacks).
pub fn write_flamegraphs(
    dir: &OutDir,
    run: &RunReport,
    stacks: &FoldedStacks,
    force: bool,
) -> Result<(), SrvprofError> {
    use srvprof_analysis::stacks::{GROUPS, StackKind};
    for kind in StackKind::ALL {
        for (group, name) in GROUPS {
            let lines = stacks.of_group(kind, group);
            let total: u64 = lines.iter().map(|l| l.value).sum();
            let title = match kind {
                StackKind::OnCpu => format!("{name}: on-CPU stacks"),
                StackKind::OffCpu => format!("{name}: off-CPU stacks"),
            };
            let subtitle = flamegraph_subtitle(kind, run, total);
            if let Some(svg) = flamegraph::standalone(kind, &title, &subtitle, &lines) {
                let file = format!("flamegraph-{}-{name}.svg", kind.file_stem());
                output::write_atomic(dir, &file, svg.as_bytes(), force)?;
            }
        }
    }
    if let Ok(slowest) = slowest::slowest(run, stacks) {
        slowest::write_svgs(dir, &slowest, force)?;
    }
    Ok(())
}

/// Writes DIR/flamegraph-{oncpu,offcpu}-{server,client}-SPAN.svg for the stacks of one window
/// (`stacks` already cut to it); returns the files written.
pub fn write_window_flamegraphs(
    dir: &OutDir,
    stacks: &FoldedStacks,
    span: &str,
    force: bool,
) -> Result<Vec<std::path::PathBuf>, SrvprofError> {
    use srvprof_analysis::stacks::{GROUPS, StackKind};
    let mut written = Vec::new();
    for kind in StackKind::ALL {
        for (group, name) in GROUPS {
            let lines = stacks.of_group(kind, group);
            let total: u64 = lines.iter().map(|l| l.value).sum();
            let (title, subtitle) = match kind {
                StackKind::OnCpu => (
                    format!("{name}: on-CPU stacks, {span}"),
                    format!(
                        "{total} cpu-clock samples from {span} of the measured window; click a frame to zoom, Search to find a function"
                    ),
                ),
                StackKind::OffCpu => (
                    format!("{name}: off-CPU stacks, {span}"),
                    format!(
                        "{:.3} s off-CPU in periods that ended {span} of the measured window; click a frame to zoom, Search to find a function",
                        total as f64 / 1e6
                    ),
                ),
            };
            if let Some(svg) = flamegraph::standalone(kind, &title, &subtitle, &lines) {
                let file = format!("flamegraph-{}-{name}-{span}.svg", kind.file_stem());
                output::write_atomic(dir, &file, svg.as_bytes(), force)?;
                written.push(dir.join(&file));
            }
        }
    }
    Ok(written)
}

/// What a whole-run flamegraph of `total` shows.
pub fn flamegraph_subtitle(
    kind: srvprof_analysis::stacks::StackKind,
    run: &RunReport,
    total: u64,
) -> String {
    match kind {
        srvprof_analysis::stacks::StackKind::OnCpu => format!(
            "{total} cpu-clock samples over the run ({:.1} s measured, warm-up included); click a frame to zoom, Search to find a function",
            run.load.duration_s
        ),
        srvprof_analysis::stacks::StackKind::OffCpu => format!(
            "{:.1} s off-CPU, switch-out to switch-in, over the run ({:.1} s measured, warm-up included); click a frame to zoom, Search to find a function",
            total as f64 / 1e6,
            run.load.duration_s
        ),
    }
}

/// Writes DIR/report.html: one self-contained page, every image an inline SVG.
pub fn write_html(
    dir: &OutDir,
    run: &RunReport,
    stacks: &FoldedStacks,
    force: bool,
) -> Result<(), SrvprofError> {
    let page = html::page(run, stacks);
    output::write_atomic(dir, "report.html", page.as_bytes(), force)
}
