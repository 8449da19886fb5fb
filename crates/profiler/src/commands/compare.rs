//! `srvprof compare A B`: two runs side by side, headline and kernel figures, with B/A ratios;
//! then differential flamegraphs of B's stacks against A's (each normalised to its own total),
//! with the functions that grew and shrank most.

use std::io::Write;
use std::path::Path;

use serde_json::Value;

use crate::error::SrvprofError;
use crate::output;
use crate::render::flamegraph;
use srvprof_analysis::slow_intervals::FrameChange;
use srvprof_analysis::slow_intervals::changes_between;
use srvprof_analysis::stacks::{FoldedLine, FoldedStacks, GROUPS, StackKind};

/// (label, JSON pointer into run.json, unit).
const ROWS: &[(&str, &str)] = &[
    ("throughput (req/s)", "/load/throughput_rps"),
    ("completed requests", "/load/completed"),
    ("errors", "/load/errors"),
    ("p50 latency (us)", "/load/latency_us/p50"),
    ("p99 latency (us)", "/load/latency_us/p99"),
    ("p99.9 latency (us)", "/load/latency_us/p999"),
    ("max latency (us)", "/load/latency_us/max"),
    (
        "server context switches / req",
        "/per_request/context_switches",
    ),
    (
        "server involuntary switches / req",
        "/per_request/involuntary_switches",
    ),
    ("server syscalls / req", "/per_request/syscalls"),
    ("server CPU us / req", "/per_request/cpu_us"),
    ("server user us / req", "/per_request/user_us"),
    ("server sys us / req", "/per_request/sys_us"),
    ("server net softirqs / req", "/per_request/net_softirqs"),
    ("server run-queue p99 (us)", "/server/runq_latency_us/p99"),
    ("server listen overflows", "/server/tcp/listen_overflows"),
    ("server SYN retransmits", "/server/tcp/syn_retransmits"),
    ("server resets sent", "/server/tcp/resets_sent"),
    ("client resets sent", "/client/tcp/resets_sent"),
    ("client CPU us / req", "/per_request/client/cpu_us"),
    ("client syscalls / req", "/per_request/client/syscalls"),
];

/// Reads DIR/run.json, or the file itself.
fn load(path: &Path) -> Result<Value, SrvprofError> {
    let file = if path.is_dir() {
        path.join("run.json")
    } else {
        path.to_path_buf()
    };
    let text = output::read_input(&file, "pass a run folder written by `srvprof run --out`")?;
    serde_json::from_str(&text).map_err(|e| {
        SrvprofError::Usage(format!(
            "{} is not a srvprof run.json ({e}); pass a run folder written by `srvprof run --out`",
            file.display()
        ))
    })
}

pub fn compare_text(a: &Value, b: &Value, a_name: &str, b_name: &str) -> String {
    let mut out = format!(
        "{:<36} {:>16} {:>16} {:>8}\n",
        "figure", a_name, b_name, "B/A"
    );
    for (label, pointer) in ROWS {
        let va = a.pointer(pointer).and_then(Value::as_f64);
        let vb = b.pointer(pointer).and_then(Value::as_f64);
        let fmt = |v: Option<f64>| {
            v.map(|x| {
                if x.fract() == 0.0 {
                    format!("{x:.0}")
                } else {
                    format!("{x:.3}")
                }
            })
            .unwrap_or_else(|| "-".into())
        };
        let ratio = match (va, vb) {
            (Some(x), Some(y)) if x != 0.0 => format!("{:.2}x", y / x),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "{label:<36} {:>16} {:>16} {ratio:>8}\n",
            fmt(va),
            fmt(vb)
        ));
    }
    for (name, run) in [(a_name, a), (b_name, b)] {
        if let Some(findings) = run["findings"].as_array() {
            for f in findings.iter().take(3) {
                out.push_str(&format!(
                    "{name}: {} {}\n",
                    f["severity"].as_str().unwrap_or(""),
                    f["summary"].as_str().unwrap_or("")
                ));
            }
        }
    }
    out
}

pub fn run(a: &Path, b: &Path, out: Option<&Path>) -> Result<(), SrvprofError> {
    let (va, vb) = (load(a)?, load(b)?);
    let text = compare_text(&va, &vb, "A", "B");
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "A = {}\nB = {}\n{text}", a.display(), b.display());
    let folder = |p: &Path| -> std::path::PathBuf {
        if p.is_dir() {
            p.to_path_buf()
        } else {
            p.parent().unwrap_or(Path::new(".")).to_path_buf()
        }
    };
    let (sa, sb) = (
        crate::output::stacks::read_dir(&folder(a))?,
        crate::output::stacks::read_dir(&folder(b))?,
    );
    let out = output::open_dir(&out.map_or_else(|| folder(b), Path::to_path_buf))?;
    for d in differentials(&sa, &sb) {
        let _ = writeln!(stdout, "{}", d.summary);
        for (file, svg) in [(&d.file, &d.svg), (&d.file_before, &d.svg_before)] {
            output::write_atomic(&out, file, svg.as_bytes(), false)?;
            let _ = writeln!(stdout, "  wrote {}", out.join(file).display());
        }
    }
    Ok(())
}

/// One group's and kind's differential flamegraphs of B against A.
struct Differential {
    /// What grew and shrank most, one line.
    summary: String,
    /// Widths of B: what grew (red) and what is new.
    file: String,
    svg: String,
    /// Widths of A: what shrank (blue) and what vanished.
    file_before: String,
    svg_before: String,
}

fn differentials(a: &FoldedStacks, b: &FoldedStacks) -> Vec<Differential> {
    let mut out = Vec::new();
    for kind in StackKind::ALL {
        for (group, name) in GROUPS {
            let (la, lb) = (a.of_group(kind, group), b.of_group(kind, group));
            let what = match kind {
                StackKind::OnCpu => "on-CPU",
                StackKind::OffCpu => "off-CPU",
            };
            let title = format!("{name}: {what} stacks of B against A");
            let graph = |before: &[FoldedLine],
                         after: &[FoldedLine],
                         negate: bool,
                         widths: &str| {
                let sub = format!(
                    "widths: {widths}; red grew in B, blue shrank, each run normalised to the same total; click to zoom, Search to find a function"
                );
                flamegraph::differential(kind, &title, &sub, before, after, negate)
                    .map(|(_, svg)| svg)
            };
            let (Some(svg), Some(svg_before)) = (
                graph(&la, &lb, false, "run B"),
                graph(
                    &lb,
                    &la,
                    true,
                    "run A, where what B no longer runs still shows",
                ),
            ) else {
                continue;
            };
            // B as frame_changes' first side, A as the one it is measured against.
            let changes = changes_between(&lb, &la);
            let describe = |c: Option<&FrameChange>| {
                c.map_or("-".to_string(), |c| {
                    format!(
                        "{} ({:.1} % -> {:.1} %)",
                        c.name,
                        c.rest_share * 100.0,
                        c.slow_share * 100.0
                    )
                })
            };
            let stem = kind.file_stem();
            out.push(Differential {
                summary: format!(
                    "{name} {what}: grew most {}; shrank most {}",
                    describe(changes.first().filter(|c| c.gain() > 0.0)),
                    describe(changes.last().filter(|c| c.gain() < 0.0))
                ),
                file: format!("flamegraph-compare-{stem}-{name}.svg"),
                svg,
                file_before: format!("flamegraph-compare-{stem}-{name}-shrunk.svg"),
                svg_before,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_of_two_runs() {
        let a: Value = serde_json::json!({"load": {"throughput_rps": 1000.0, "latency_us": {"p99": 2000}}, "per_request": {"syscalls": 2.5}});
        let b: Value = serde_json::json!({"load": {"throughput_rps": 1500.0, "latency_us": {"p99": 1000}}, "per_request": {"syscalls": 5.0}});
        let t = compare_text(&a, &b, "A", "B");
        let line = |label: &str| {
            t.lines()
                .find(|l| l.starts_with(label))
                .unwrap()
                .to_string()
        };
        assert!(line("throughput (req/s)").ends_with("1.50x"));
        assert!(line("p99 latency (us)").ends_with("0.50x"));
        assert!(line("server syscalls / req").ends_with("2.00x"));
        assert!(line("errors").ends_with("-"));
    }
}
