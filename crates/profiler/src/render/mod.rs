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
