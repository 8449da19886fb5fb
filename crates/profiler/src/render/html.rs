//! report.html: findings first, then the timeline, flamegraphs, the context-switch report and
//! tables. One file; every image an inline SVG; nothing is fetched from the network.

use super::escape::esc;
use std::fmt::Write;

use super::{HTML_MARKER, ctxsw, flamegraph, plots};
use srvprof_analysis::finding::FindingKind;
use srvprof_analysis::run_report::RunReport;
use srvprof_analysis::stacks::{FoldedStacks, GROUPS, StackKind, hottest_leaf};

const STYLE: &str = "body{font-family:sans-serif;margin:24px auto;padding:0 20px;max-width:1200px;color:#222}\
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}\
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}\
th{background:#f4f4f4}td.l,th.l{text-align:left}.sev-critical{color:#b00020;font-weight:bold}\
.sev-warning{color:#b36b00;font-weight:bold}.sev-info{color:#555}.figure{margin:8px 0;overflow-x:auto}\
.figure>svg.plot{display:block;max-width:100%;height:auto}tr.spike td{background:#fbe2e2}\
td{white-space:nowrap}td.l{white-space:normal}td.l code{overflow-wrap:anywhere}\
.note{color:#666;font-size:13px}code{font-size:12px}details{color:#444;font-size:13px}dt{font-weight:bold}\
@media print{body{margin:0;padding:0;max-width:none}.figure{overflow:visible}.figure>svg{max-width:100%;height:auto}\
h2,h3{break-after:avoid}.figure,tr{break-inside:avoid}table{font-size:10px}td,th{padding:2px 4px}}";

fn figure(out: &mut String, svg: Option<String>, missing: &str) {
    match svg {
        Some(svg) => {
            let _ = write!(out, "<div class=\"figure\">{svg}</div>");
        }
        None => {
            let _ = write!(out, "<p class=\"note\">{}</p>", esc(missing));
        }
    }
}

pub fn page(run: &RunReport, stacks: &FoldedStacks) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"generator\" content=\"{HTML_MARKER}\"><title>srvprof report: {}</title>\
<style>{STYLE}</style></head><body class=\"{HTML_MARKER}\">",
        esc(&run.target.url)
    );
    let _ = write!(
        o,
        "<h1>srvprof report</h1><p>{} PIDs {}, {:.1} s measured: {:.0} req/s, p50 {}, p99 {}, {} errors.</p>",
        esc(&run.target.url),
        (run.target.pids.iter())
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        run.load.duration_s,
        run.load.throughput_rps,
        plots::si(run.load.latency_us.p50 as f64 / 1e6, "s"),
        plots::si(run.load.latency_us.p99 as f64 / 1e6, "s"),
        run.load.errors
    );

    findings(&mut o, run, stacks);
    tail_account(&mut o, run);
    super::hosts_html::section(&mut o, run);

    o.push_str("<h2 id=\"timeline\">Timeline</h2>");
    figure(&mut o, plots::timeline(run), "No interval was measured.");
    timeline_table(&mut o, run);
    o.push_str("<h2 id=\"spectrum\">Latency spectrum</h2>");
    figure(&mut o, plots::spectrum(run), "No latency was recorded.");

    super::slowest::html(&mut o, &super::slowest::slowest(run, stacks));

    o.push_str("<h2 id=\"flamegraphs\">Flamegraphs</h2><p class=\"note\">Click a frame to zoom into it, \
Reset Zoom to go back, Search to highlight a function and see its share; hover a frame for its name and value. \
On-CPU: cpu-clock samples; off-CPU: microseconds from switch-out to switch-in. Kernel frames end in _[k]. \
Stacks cover the whole run, warmup included; frames that did not resolve read module+0xoffset. \
Each graph is also a file of its own in the run folder (flamegraph-*.svg).</p>");
    if run.server.stack_ids_collided > 0 {
        let _ = write!(
            o,
            "<p class=\"note\">{} stacks in the measured window show a frame \"stack lost: stack table \
             bucket taken\": their bucket in the kernel's fixed-size stack map held another stack (the \
             samples and off-CPU time are kept, under that frame).</p>",
            run.server.stack_ids_collided
        );
    }
    if let Some(line) = crate::render::run_text::ring_full_line(run.server.user_stack_ring_full) {
        let _ = write!(o, "<p class=\"note\">{}.</p>", esc(&line));
    }
    let restarted = run.server.oncpu_ticks.restarted;
    if let Some(line) =
        crate::render::run_text::timer_restarted_line(restarted, run.server.duration_s)
    {
        let _ = write!(o, "<p class=\"note\">{}.</p>", esc(&line));
    }
    if let Some(cost) = &run.observer {
        let line = crate::render::run_text::observer_line(cost);
        let _ = write!(
            o,
            "<p class=\"note\">What watching cost: {}.</p>",
            esc(&line)
        );
    }
    let unwound: Vec<_> = run.stacks.iter().filter(|q| q.with_user > 0).collect();
    if !unwound.is_empty() {
        o.push_str("<p class=\"note\">How far the stacks reach:</p><ul class=\"note\">");
        for q in unwound {
            let _ = write!(
                o,
                "<li>{}</li>",
                esc(&crate::render::run_text::unwind_line(q))
            );
        }
        o.push_str("</ul>");
    }
    for kind in StackKind::ALL {
        for (group, name) in GROUPS {
            let label = match kind {
                StackKind::OnCpu => format!("{name}: on-CPU"),
                StackKind::OffCpu => format!("{name}: off-CPU"),
            };
            let _ = write!(o, "<h3>{}</h3>", esc(&label));
            let lines = stacks.of_group(kind, group);
            let total: u64 = lines.iter().map(|l| l.value).sum();
            match flamegraph::embedded(
                kind,
                &label,
                &super::flamegraph_subtitle(kind, run, total),
                &lines,
            ) {
                Some((graph, merged)) => {
                    if merged > 0 {
                        let _ = write!(
                            o,
                            "<p class=\"note\">{merged} {} of {total} ({:.1} %) are in frames narrower than {} % of the graph: \
                             merged into their parents here; flamegraph-{}-{name}.svg keeps them.</p>",
                            kind.unit(),
                            merged as f64 * 100.0 / total.max(1) as f64,
                            flamegraph::PAGE_MIN_WIDTH_PCT,
                            kind.file_stem()
                        );
                    }
                    let _ = write!(o, "<div class=\"figure\">{graph}</div>");
                }
                None => {
                    o.push_str("<p class=\"note\">No stacks recorded (run with --stacks on, the default).</p>");
                }
            }
        }
    }

    context_switches(&mut o, run, stacks);
    o.push_str("<h2 id=\"histograms\">Off-CPU and run-queue histograms</h2>");
    figure(
        &mut o,
        plots::histograms(&run.histograms),
        "No histogram in this run.json.",
    );
    o.push_str("<h2 id=\"interrupts\">Interrupts per CPU</h2>");
    figure(&mut o, plots::interrupts(run), "No interval was measured.");
    tables(&mut o, run);
    if !run.notes.is_empty() {
        o.push_str("<h2>Notes</h2><ul>");
        for n in &run.notes {
            let _ = write!(o, "<li>{}</li>", esc(n));
        }
        o.push_str("</ul>");
    }
    let _ = writeln!(
        o,
        "<p class=\"note\">{HTML_MARKER} {}</p></body></html>",
        esc(&run.version)
    );
    o
}

fn findings(o: &mut String, run: &RunReport, stacks: &FoldedStacks) {
    o.push_str("<h2 id=\"findings\">Findings</h2><ul>");
    let mut anchored = std::collections::BTreeSet::new();
    for f in &run.findings {
        let sev = format!("{:?}", f.severity).to_lowercase();
        let share = f
            .tail_share
            .map(|s| format!(" (explains {:.0}% of p99)", s * 100.0))
            .unwrap_or_default();
        // report.html#runq_tail reaches a kind's first finding.
        let id = if anchored.insert(f.kind) {
            format!(" id=\"{}\"", f.kind.name())
        } else {
            String::new()
        };
        let _ = write!(
            o,
            "<li{id}><span class=\"sev-{sev}\">{sev}</span> <code>{}</code>{share}: {}{}</li>",
            esc(f.kind.name()),
            esc(&f.summary),
            explanation(f.kind)
        );
    }
    for (group, name) in GROUPS {
        let on = stacks.of_group(StackKind::OnCpu, group);
        if let Some((leaf, n)) = hottest_leaf(&on) {
            let total: u64 = on.iter().map(|l| l.value).sum();
            let _ = write!(
                o,
                "<li><span class=\"sev-info\">info</span> {name}: hottest on-CPU function <code>{}</code>, {:.0} % of {total} samples</li>",
                esc(&leaf),
                100.0 * n as f64 / total.max(1) as f64
            );
        }
        let off = stacks.of_group(StackKind::OffCpu, group);
        if let Some((frames, us)) = ctxsw::top_offcpu(&off, 1).into_iter().next() {
            let _ = write!(
                o,
                "<li><span class=\"sev-info\">info</span> {name}: most off-CPU time in <code>{}</code>, {:.1} ms</li>",
                esc(&short_stack(&frames, 4)),
                us as f64 / 1000.0
            );
        }
    }
    if run.findings.is_empty() && stacks.oncpu.is_empty() {
        o.push_str("<li>Nothing stood out.</li>");
    }
    o.push_str("</ul>");
}

/// Where p99's time went, part by part (run.json's `tail_account`), when the server's stacks were
/// taken.
fn tail_account(o: &mut String, run: &RunReport) {
    let Some(a) = &run.tail_account else {
        return;
    };
    let _ = write!(
        o,
        "<h2 id=\"tail-account\">Where p99's time went</h2><p class=\"note\">p99 {} is {:.0}x the median ({}). \
         Each part's time per request over the run, and what it adds to a request at p99: the median carries what every \
         request pays, the waits share the rest (docs/how-it-measures.md).</p><table><tr><th>share of p99</th><th>ms at p99</th>\
         <th>ms per request</th><th class=\"l\">where</th><th class=\"l\">threads</th></tr>",
        plots::si(a.p99_ms / 1e3, "s"),
        a.p99_ms / a.p50_ms.max(1e-9),
        plots::si(a.p50_ms / 1e3, "s"),
    );
    for p in &a.parts {
        let _ = write!(
            o,
            "<tr><td>{:.1} %</td><td>{:.3}</td><td>{:.4}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            p.share * 100.0,
            p.tail_ms,
            p.per_request_ms,
            esc(&match p.how_often(a.requests) {
                Some(often) => format!("{} ({often})", p.describe()),
                None => p.describe(),
            }),
            esc(&p.threads.join(", "))
        );
    }
    let _ = write!(
        o,
        "<tr><td>{:.1} %</td><td>{:.3}</td><td></td><td class=\"l\">not accounted for</td><td></td></tr></table>",
        a.unaccounted_share * 100.0,
        a.unaccounted_ms
    );
}

/// A kind's section of docs/findings.md, folded under its finding: the report needs no repository.
fn explanation(kind: FindingKind) -> String {
    let mut o =
        String::from("<details><summary>what it means, when it fires, the usual fix</summary><dl>");
    for (label, text) in kind.explanation_parts() {
        let _ = write!(o, "<dt>{}</dt><dd>{}</dd>", esc(label), esc(text));
    }
    o.push_str("</dl></details>");
    o
}

/// The thread name and the last `n` frames, leaf last.
fn short_stack(frames: &[String], n: usize) -> String {
    let comm = frames.first().map(String::as_str).unwrap_or("");
    let tail = &frames[frames.len().saturating_sub(n).max(1.min(frames.len()))..];
    format!("{comm}: {}", tail.join(" → "))
}

fn context_switches(o: &mut String, run: &RunReport, stacks: &FoldedStacks) {
    o.push_str("<h2 id=\"context-switches\">Context switches</h2><table><tr><th class=\"l\">group</th><th>PID</th><th>TID</th><th class=\"l\">thread</th>\
<th>voluntary</th><th>involuntary</th><th>voluntary/s</th><th>involuntary/s</th><th>switches/request</th><th>off-CPU (ms)</th><th>run-queue (ms)</th></tr>");
    for t in ctxsw::threads(run).iter().take(50) {
        let _ = write!(
            o,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.3}</td><td>{:.1}</td><td>{:.1}</td></tr>",
            t.group,
            t.pid,
            t.tid,
            esc(&t.comm),
            t.voluntary,
            t.involuntary,
            t.voluntary_per_s,
            t.involuntary_per_s,
            t.switches_per_request,
            t.offcpu_ms,
            t.runq_ms
        );
    }
    o.push_str("</table>");
    wakeups(o, run);
    for (k, label) in [(&run.server, "server"), (&run.client, "client")] {
        let _ = write!(
            o,
            "<p>{label}: off-CPU p50 {:.0} us, p99 {:.0} us; run-queue wait p50 {:.0} us, p99 {:.0} us.</p>",
            k.offcpu_us.p50, k.offcpu_us.p99, k.runq_latency_us.p50, k.runq_latency_us.p99
        );
    }
    for (group, name) in GROUPS {
        let top = ctxsw::top_offcpu(&stacks.of_group(StackKind::OffCpu, group), 10);
        if top.is_empty() {
            continue;
        }
        let _ = write!(
            o,
            "<h3>Top off-CPU stacks: {name}</h3><table><tr><th>off-CPU (ms)</th><th class=\"l\">stack (leaf last)</th></tr>"
        );
        for (frames, us) in top {
            let _ = write!(
                o,
                "<tr><td>{:.1}</td><td class=\"l\"><code>{}</code></td></tr>",
                us as f64 / 1000.0,
                esc(&short_stack(&frames, 8))
            );
        }
        o.push_str("</table>");
    }
}

/// Who wakes whom: the top waker -> woken-thread pairs of each group.
fn wakeups(o: &mut String, run: &RunReport) {
    let requests = run.load.completed.max(1) as f64;
    for (k, label) in [(&run.server, "server"), (&run.client, "client")] {
        if k.wakeups.is_empty() {
            continue;
        }
        let secs = k.duration_s.max(1e-9);
        let _ = write!(
            o,
            "<h3>Who wakes the {label}'s threads</h3><table><tr><th class=\"l\">waker (PID/TID)</th><th class=\"l\">woken thread (TID)</th><th>wakeups</th><th>per second</th><th>per request</th></tr>"
        );
        for w in &k.wakeups {
            let _ = write!(
                o,
                "<tr><td class=\"l\">{} ({}/{})</td><td class=\"l\">{} ({})</td><td>{}</td><td>{:.1}</td><td>{:.3}</td></tr>",
                esc(&w.waker_comm),
                w.waker_pid,
                w.waker_tid,
                esc(&w.wakee_comm),
                w.wakee_tid,
                w.count,
                w.count as f64 / secs,
                w.count as f64 / requests
            );
        }
        o.push_str("</table>");
    }
}

fn tables(o: &mut String, run: &RunReport) {
    o.push_str("<h2 id=\"tables\">Per request</h2><table><tr><th class=\"l\">per request</th><th>server</th><th>client</th></tr>");
    let (s, c) = (&run.per_request.server, &run.per_request.client);
    for (name, a, b) in [
        (
            "context switches",
            Some(s.context_switches),
            Some(c.context_switches),
        ),
        ("syscalls", s.syscalls, c.syscalls),
        ("CPU (us)", Some(s.cpu_us), Some(c.cpu_us)),
        ("sys CPU (us)", Some(s.sys_us), Some(c.sys_us)),
        ("NET softirqs", Some(s.net_softirqs), Some(c.net_softirqs)),
    ] {
        let cell = |v: Option<f64>| {
            v.map(|v| format!("{v:.3}"))
                .unwrap_or_else(|| "not recorded".into())
        };
        let (a, b) = (cell(a), cell(b));
        let _ = write!(
            o,
            "<tr><td class=\"l\">{name}</td><td>{a}</td><td>{b}</td></tr>"
        );
    }
    o.push_str("</table><h2>Server syscalls</h2>");
    let note = crate::render::text::estimate_note(&run.server);
    if let Some(note) = note.strip_prefix(", ") {
        let _ = write!(o, "<p>{}</p>", esc(note));
    }
    let spread = |e: Option<f64>| esc(crate::render::text::spread(&run.server, e).trim());
    o.push_str("<table><tr><th class=\"l\">syscall</th><th>count</th><th>(95 %)</th><th>total (ms)</th><th>(95 %)</th></tr>");
    for sc in run.server.syscalls.iter().take(15) {
        let _ = write!(
            o,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td></tr>",
            esc(&sc.name),
            sc.count,
            spread(sc.count_error),
            sc.total_ns as f64 / 1e6,
            spread(sc.time_error)
        );
    }
    o.push_str("</table><h2>Softirqs (system-wide)</h2><table><tr><th>CPU</th><th class=\"l\">vector</th><th>count</th><th>total (ms)</th><th>(95 %)</th></tr>");
    for si in run.server.softirqs.iter().filter(|s| s.count > 0) {
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            si.cpu,
            esc(&si.vector),
            si.count,
            if si.time_unknown {
                "unknown".to_string()
            } else {
                format!("{:.1}", si.total_ns as f64 / 1e6)
            },
            spread(si.time_error)
        );
    }
    o.push_str("</table>");
}

/// The timeline's intervals as the plot above draws them, from start to end, the highest-p99
/// one shaded in both.
fn timeline_table(o: &mut String, run: &RunReport) {
    if run.timeline.is_empty() {
        return;
    }
    let spike = plots::p99_spike(run);
    if let Some(row) = spike.map(|i| &run.timeline[i]) {
        let _ = write!(
            o,
            "<p class=\"note\">Shaded: {} s, the interval with the highest p99 ({}).{}</p>",
            plots::interval_label(row),
            plots::si(row.p99_us as f64 / 1e6, "s"),
            run.findings
                .first()
                .map(|f| format!(" Top finding: <code>{}</code>.", esc(f.kind.name())))
                .unwrap_or_default()
        );
    }
    o.push_str(
        "<table class=\"timeline\"><tr><th class=\"l\">interval (s)</th><th>req/s</th><th>errors</th>\
<th>p50</th><th>p99</th><th>voluntary switches/s</th><th>involuntary switches/s</th>\
<th>server sys %</th><th>server user %</th><th>NET_RX/s, all CPUs</th></tr>",
    );
    for (i, r) in run.timeline.iter().enumerate() {
        let _ = write!(
            o,
            "<tr{}><td class=\"l\">{}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td>\
<td>{:.0}</td><td>{:.1}</td><td>{:.1}</td><td>{:.0}</td></tr>",
            if spike == Some(i) {
                " class=\"spike\""
            } else {
                ""
            },
            plots::interval_label(r),
            r.throughput_rps,
            r.errors,
            plots::si(r.p50_us as f64 / 1e6, "s"),
            plots::si(r.p99_us as f64 / 1e6, "s"),
            r.server.voluntary_switches_per_s,
            r.server.involuntary_switches_per_s,
            r.server.sys_pct,
            r.server.user_pct,
            r.server.net_rx_per_s.iter().sum::<f64>()
        );
    }
    o.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_folds_its_parts_under_its_finding() {
        for &kind in FindingKind::ALL {
            let html = explanation(kind);
            let parts = kind.explanation_parts();
            assert_eq!(parts.len(), 5, "{kind}");
            for (label, text) in parts {
                assert!(
                    html.contains(&format!("<dt>{label}</dt><dd>{}</dd>", esc(text))),
                    "{kind}"
                );
            }
        }
    }

    #[test]
    fn the_account_of_p99_is_a_table_of_its_parts_and_the_rest() {
        use srvprof_analysis::tail_account::{Place, Resource, TailAccount, TailPart};
        let mut run = RunReport::default();
        let mut html = String::new();
        tail_account(&mut html, &run);
        assert!(html.is_empty(), "no account, no section: {html}");
        run.tail_account = Some(TailAccount {
            requests: 10_000,
            p50_ms: 0.1,
            p99_ms: 30.0,
            parts: vec![TailPart {
                place: Place::Blocked,
                resource: Some(Resource::Pipe),
                kernel: Some("pipe_read".into()),
                function: Some("wait_for_ticket".into()),
                threads: vec!["conn".into()],
                waits: Some(200.0),
                mean_wait_ms: Some(30.0),
                per_request_ms: 0.6,
                tail_ms: 29.5,
                share: 29.5 / 30.0,
                ..Default::default()
            }],
            unaccounted_ms: 0.5,
            unaccounted_share: 0.5 / 30.0,
            ..Default::default()
        });
        tail_account(&mut html, &run);
        for cell in [
            "<h2 id=\"tail-account\">Where p99's time went</h2>",
            "<td>98.3 %</td><td>29.500</td><td>0.6000</td>",
            "blocked on a pipe in pipe_read, called from wait_for_ticket (1 request in 50 waits 30.0 ms)",
            "<td class=\"l\">conn</td>",
            "<td>1.7 %</td><td>0.500</td><td></td><td class=\"l\">not accounted for</td>",
        ] {
            assert!(html.contains(cell), "{cell} in {html}");
        }
    }
}
