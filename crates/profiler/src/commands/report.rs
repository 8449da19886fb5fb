//! `srvprof report DIR`: rewrite DIR/report.html from DIR/run.json and DIR's folded stacks.

use crate::cli::ReportArgs;
use crate::error::SrvprofError;
use crate::render::{self, folded::FoldedStacks};
use srvprof_analysis::run_report::RunReport;

pub fn run(args: &ReportArgs) -> Result<(), SrvprofError> {
    let path = args.dir.join("run.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        SrvprofError::Usage(format!(
            "cannot read {}: {e}; give a folder written by `srvprof run --out DIR`",
            path.display()
        ))
    })?;
    let run: RunReport = serde_json::from_str(&text).map_err(|e| {
        SrvprofError::Usage(format!("{} is not a srvprof run.json: {e}", path.display()))
    })?;
    let stacks = FoldedStacks::read_dir(&args.dir);
    // Only report.html and the flamegraph SVGs are rewritten; they are srvprof's own files, so
    // no --force is needed.
    render::write_flamegraphs(&args.dir, &run, &stacks, false)?;
    render::write_html(&args.dir, &run, &stacks, false)?;
    eprintln!("srvprof: wrote {}", args.dir.join("report.html").display());
    Ok(())
}
