//! The context-switch report: per thread, voluntary and involuntary switches in total, per second
//! and per request, off-CPU and run-queue time; and the stacks that spent the most time off-CPU.

use srvprof_analysis::run_report::RunReport;
use srvprof_analysis::stacks::FoldedLine;

#[derive(Clone, Debug, PartialEq)]
pub struct ThreadSwitches {
    pub group: &'static str,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub voluntary: u64,
    pub involuntary: u64,
    pub voluntary_per_s: f64,
    pub involuntary_per_s: f64,
    pub switches_per_request: f64,
    pub offcpu_ms: f64,
    pub runq_ms: f64,
}

/// Every watched thread, busiest switcher first.
pub fn threads(run: &RunReport) -> Vec<ThreadSwitches> {
    let requests = run.load.completed.max(1) as f64;
    let mut out: Vec<ThreadSwitches> = [("server", &run.server), ("client", &run.client)]
        .into_iter()
        .flat_map(|(group, k)| {
            let secs = k.duration_s.max(1e-9);
            k.threads.iter().map(move |t| ThreadSwitches {
                group,
                pid: t.pid,
                tid: t.tid,
                comm: t.comm.clone(),
                voluntary: t.voluntary_switches,
                involuntary: t.involuntary_switches,
                voluntary_per_s: t.voluntary_switches as f64 / secs,
                involuntary_per_s: t.involuntary_switches as f64 / secs,
                switches_per_request: (t.voluntary_switches + t.involuntary_switches) as f64
                    / requests,
                offcpu_ms: t.offcpu_ns as f64 / 1e6,
                runq_ms: t.runq_ns as f64 / 1e6,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        (b.voluntary + b.involuntary)
            .cmp(&(a.voluntary + a.involuntary))
            .then(a.tid.cmp(&b.tid))
    });
    out
}

/// The `n` stacks with the most off-CPU time (values in us), merged across identical stacks.
pub fn top_offcpu(lines: &[FoldedLine], n: usize) -> Vec<(Vec<String>, u64)> {
    let mut merged: std::collections::BTreeMap<&[String], u64> = Default::default();
    for l in lines {
        *merged.entry(l.frames.as_slice()).or_default() += l.value;
    }
    let mut rows: Vec<(Vec<String>, u64)> =
        merged.into_iter().map(|(f, v)| (f.to_vec(), v)).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    rows.truncate(n);
    rows
}
