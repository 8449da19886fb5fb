//! `srvprof report DIR`: rewrite DIR/report.html from DIR/run.json and DIR's folded stacks.

use crate::cli::ReportArgs;
use crate::error::SrvprofError;
use crate::render;
use srvprof_analysis::run_report::RunReport;
use srvprof_analysis::stacks::FoldedStacks;
use srvprof_files::OutDir;

pub fn run(args: &ReportArgs) -> Result<(), SrvprofError> {
    let path = args.dir.join("run.json");
    let text =
        crate::output::read_input(&path, "give a folder written by `srvprof run --out DIR`")?;
    let run: RunReport = serde_json::from_str(&text).map_err(|e| {
        SrvprofError::Usage(format!("{} is not a srvprof run.json: {e}", path.display()))
    })?;
    let stacks = crate::output::stacks::read_dir(&args.dir)?;
    let dir = crate::output::open_dir(&args.dir)?;
    if args.from.is_some() || args.to.is_some() {
        return window(args, &dir, &run, &stacks);
    }
    // Only report.html and the flamegraph SVGs are rewritten; they are srvprof's own files, so
    // no --force is needed.
    render::write_flamegraphs(&dir, &run, &stacks, false)?;
    render::write_html(&dir, &run, &stacks, false)?;
    eprintln!("srvprof: wrote {}", args.dir.join("report.html").display());
    Ok(())
}

/// `--from`/`--to`: the flamegraphs of the stacks in that window alone.
fn window(
    args: &ReportArgs,
    dir: &OutDir,
    run: &RunReport,
    stacks: &FoldedStacks,
) -> Result<(), SrvprofError> {
    let ms = |d: std::time::Duration| d.as_millis() as i64;
    let from = args.from.map_or(0, ms);
    // The end: the run's, with its drain, unless given.
    let to = args.to.map_or(i64::MAX, ms);
    if to <= from {
        return Err(SrvprofError::Usage(format!(
            "--to ({}) must come after --from ({}); both count from the start of the measured window",
            label(to),
            label(from)
        )));
    }
    let within = stacks.window(from, to);
    if within.oncpu.is_empty() && within.offcpu.is_empty() {
        return Err(SrvprofError::Usage(if stacks.is_timed() {
            format!(
                "no stacks fell between {} and {} of {} ({:.1} s measured); pick a window inside the run",
                label(from),
                label(to),
                args.dir.display(),
                run.load.duration_s
            )
        } else {
            format!(
                "{} has no timed stacks (*.timed): it was written by an older srvprof or with --stacks off; run again to get them",
                args.dir.display()
            )
        }));
    }
    let span = format!("{}-{}", label(from), label(to));
    let written = render::write_window_flamegraphs(dir, &within, &span, false)?;
    for path in written {
        eprintln!("srvprof: wrote {}", path.display());
    }
    Ok(())
}

/// 3000 -> "3s", 3250 -> "3.25s", the open end -> "end".
fn label(ms: i64) -> String {
    if ms == i64::MAX {
        "end".into()
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn window_labels() {
        assert_eq!(super::label(3000), "3s");
        assert_eq!(super::label(3250), "3.25s");
        assert_eq!(super::label(i64::MAX), "end");
    }
}
