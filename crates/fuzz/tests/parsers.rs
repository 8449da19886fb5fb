//! Every parser of input someone else may have written, fed mutations of a real input for a
//! fixed number of cases (SRVPROF_FUZZ_CASES to change it): none may panic, abort or run away
//! with memory. Each input proptest finds failing is kept in proptest-regressions/parsers.txt
//! and replayed first on every run after.
//!
//! What each reaches: a latency log through the merge that adds and writes it again; load.json
//! through its text summary; run.json through the first screen and report.html; probe.json
//! through `srvprof merge` whole; folded and timed stacks through a window and a flamegraph;
//! `--targets` lists, `--rate` stages and URLs through their parsers and what uses them first.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use srvprof_analysis::run_report::RunReport;
use srvprof_analysis::stacks::{FoldedStacks, LineSet, StackKind};
use srvprof_fuzz::{cases, mutated, mutated_text};
use srvprof_loadgen::merge::{Agent, merge, write_log};
use srvprof_loadgen::rate::RateSchedule;

const HLOG: &[u8] = include_bytes!("../seeds/latency.hlog");
const LOAD: &str = include_str!("../seeds/load.json");
const PROBE: &str = include_str!("../seeds/probe.json");
const SERIES: &str = include_str!("../seeds/series.json");
const RUN: &str = include_str!("../../analysis/tests/fixtures/run.json");
const FOLDED: &str = "main;serve;read 12\nmain;serve;write 7\n[kernel] tcp_sendmsg;main 3\n";
const TIMED: &str = "# srvprof timed stacks\ninterval_ms 1000\n0 1 5\n1000 2 7\n-1000 3 1\n";
const TARGETS: &str = "GET http://127.0.0.1:8080/a\nX-Test: 1\n\nPOST https://[::1]:8443/b?x=1\nContent-Type: application/json\n@body.json\n";
const RATE: &str = "200:1s,ramp:200-1000:1s,1000:1500ms";
const URL: &str = "http://127.0.0.1:8080/path?q=1";

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("srvprof-fuzz-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(1500)))]

    #[test]
    fn latency_logs(bytes in mutated(HLOG, 8)) {
        if let Ok(log) = srvprof_loadgen::hdr_log_read::parse(&bytes) {
            let agent = Agent {
                dir: PathBuf::from("agent"),
                report: serde_json::from_str(LOAD).unwrap(),
                start: log.start,
                intervals: log.intervals,
            };
            if let Ok(merged) = merge(&[agent]) {
                let dir = srvprof_files::OutDir::open(&scratch("hlog")).unwrap();
                let _ = write_log(&merged, &dir, "latency.hlog");
            }
        }
    }

    #[test]
    fn load_reports(text in mutated_text(LOAD, 8)) {
        if let Ok(report) = serde_json::from_str(&text) {
            srvprof_loadgen::printer::print_text(&report, &mut Vec::new());
        }
    }

    #[test]
    fn run_reports(text in mutated_text(RUN, 8)) {
        if let Ok(run) = serde_json::from_str::<RunReport>(&text) {
            let _ = srvprof::render::first_screen::text(&run, None, true);
            let _ = srvprof::render::html::page(&run, &FoldedStacks::default());
        }
    }

    #[test]
    fn folded_and_timed_stacks(folded in mutated_text(FOLDED, 8), timed in mutated_text(TIMED, 8)) {
        let mut stacks = FoldedStacks::default();
        let mut set = LineSet::default();
        stacks.read_group(&mut set, 0, &folded, &timed);
        stacks.set(StackKind::OnCpu, set.finish());
        let lines = stacks.of_group(StackKind::OnCpu, 0);
        let _ = srvprof::render::flamegraph::standalone(StackKind::OnCpu, "t", "s", &lines);
        let _ = stacks.window(-500, 1500);
    }

    #[test]
    fn targets_lists(text in mutated_text(TARGETS, 8)) {
        let dir = scratch("targets");
        write(&dir, "body.json", b"{\"a\":1}");
        let _ = srvprof_loadgen::targets::parse(&text, &dir);
    }

    #[test]
    fn rate_stages(text in mutated_text(RATE, 6)) {
        if let Ok(rate) = RateSchedule::parse(&text) {
            let (_, _, _) = (rate.length(), rate.initial(), rate.peak());
            for k in [0.0, 1.0, 1e3, 1e9] {
                let _ = rate.due(k);
            }
        }
    }

    #[test]
    fn urls(text in mutated_text(URL, 6)) {
        let _ = srvprof_loadgen::http_url::HttpUrl::parse(&text);
        let _ = srvprof_loadgen::Target::parse(&text);
        let _ = srvprof_loadgen::redact::url(&text);
        let auth = srvprof_loadgen::push_auth::REMOTE_WRITE;
        let _ = srvprof_loadgen::http_push::Endpoint::parse(&text, &auth);
    }
}

proptest! {
    // Each case is a whole `srvprof merge`, files and all: fewer of them.
    #![proptest_config(ProptestConfig::with_cases(cases(1500) / 10))]

    #[test]
    fn probe_reports_through_a_whole_merge(text in mutated_text(PROBE, 8)) {
        let root = scratch("probe");
        let (agent, server) = (root.join("agent"), root.join("server"));
        for d in [&agent, &server] {
            std::fs::create_dir_all(d).unwrap();
        }
        write(&agent, "load.json", LOAD.as_bytes());
        write(&agent, "latency.hlog", HLOG);
        write(&server, "probe.json", text.as_bytes());
        write(&server, "series.json", SERIES.as_bytes());
        let _ = srvprof::commands::merge::run(&[agent, server], &root.join("merged"), true);
    }
}
