//! Shared by the rules' tests: tables of cases around a rule's thresholds, and runs recorded the
//! way the sampler records them (one sample at each interval boundary, beside the load
//! generator's report) and put together by run_report::build, so that a case covers the decoding
//! of the samples as well as the rule.

use std::collections::BTreeSet;

use srvprof_loadgen::{ConfigEcho, LatencySummary, LoadReport, LoadRow};

use crate::finding::{Finding, FindingKind, Severity};
use srvprof_common::GROUP_SERVER;

use crate::record::{CountNs, CpuUse, ExitRecord, KernelCounters, Reading, ThreadCounters};
use crate::run_report::{self, RunReport, TargetInfo};
use crate::series::ReadingSeries;

pub const SEC: u64 = 1_000_000_000;
/// Measurement starts here (CLOCK_MONOTONIC ns), as a real run's would.
const START: u64 = 7_000 * SEC;
/// What every cumulative counter had already counted when the window opened: the rules must read
/// what happened in the window, not since the probes were attached.
const BEFORE: u64 = 1_000_000;
/// Requests the load generator completed per second, in every interval.
pub const RPS: u64 = 100;
/// The length of Recording::window().
pub const WINDOW_S: u64 = 10;

/// How many ns `share` of Recording::window() lasts.
pub fn ns_of(share: f64) -> u64 {
    (share * (WINDOW_S * SEC) as f64).round() as u64
}

/// A cumulative counter at sample `k` (0: the window's start) that grows by `per_interval`.
pub fn grown(per_interval: u64, k: u64) -> u64 {
    BEFORE + per_interval * k
}

/// A run as recorded: a sample at every grid point from the start of measurement on, and the
/// load generator's report with one timeline row per interval.
pub struct Recording {
    pub samples: Vec<Reading>,
    pub load: LoadReport,
    pub exits: Vec<ExitRecord>,
    interval_s: u64,
}

impl Recording {
    /// `intervals` intervals of `interval_s` seconds on a machine of `ncpus` CPUs, every sample
    /// on time and nothing counted in them yet; RPS requests a second, all answered in 1 ms at p99.
    pub fn new(intervals: u64, interval_s: u64, ncpus: usize) -> Recording {
        let samples = (0..=intervals)
            .map(|k| {
                let t = START + k * interval_s * SEC;
                let mut kernel = KernelCounters::empty(ncpus);
                kernel.monotonic_ns = t;
                Reading {
                    monotonic_ns: t,
                    due_ns: Some(t),
                    kernel,
                    ..Default::default()
                }
            })
            .collect();
        let timeline = (0..intervals)
            .map(|k| LoadRow {
                t_s: (k * interval_s) as f64,
                completed: RPS * interval_s,
                errors: 0,
                p50_us: 500,
                p99_us: 1_000,
                max_us: 2_000,
                throughput_rps: RPS as f64,
            })
            .collect();
        let load = LoadReport {
            duration_s: (intervals * interval_s) as f64,
            throughput_rps: RPS as f64,
            latency_us: LatencySummary {
                p50: 500,
                p99: 1_000,
                mean: 600.0,
                ..Default::default()
            },
            timeline,
            config: ConfigEcho {
                connections: 100,
                timeout_s: 2.0,
                ..Default::default()
            },
            ..Default::default()
        };
        Recording {
            samples,
            load,
            exits: Vec::new(),
            interval_s,
        }
        .rows(|_, _| {})
    }

    /// One WINDOW_S window on 2 CPUs: the two samples at its ends.
    pub fn window() -> Recording {
        Recording::new(1, WINDOW_S, 2)
    }

    /// Sets what sample `k` (0: the window's start) had counted.
    pub fn each(mut self, f: impl Fn(&mut Reading, u64)) -> Recording {
        for (k, s) in self.samples.iter_mut().enumerate() {
            f(s, k as u64);
        }
        self
    }

    /// Sets the load generator's row `k`; its totals follow the rows.
    pub fn rows(mut self, f: impl Fn(&mut LoadRow, usize)) -> Recording {
        for (k, row) in self.load.timeline.iter_mut().enumerate() {
            f(row, k);
        }
        let rows = &self.load.timeline;
        self.load.completed = rows.iter().map(|r| r.completed).sum();
        self.load.errors = rows.iter().map(|r| r.errors).sum();
        self.load.requests = self.load.completed + self.load.errors;
        self
    }

    /// The run report, as crate::analyze builds it before reading the findings.
    pub fn build(&self) -> RunReport {
        let mut series =
            ReadingSeries::on_grid(START, std::time::Duration::from_secs(self.interval_s));
        for s in &self.samples {
            series.push(s.clone());
        }
        run_report::build(
            TargetInfo::default(),
            self.load.clone(),
            &series,
            &self.exits,
            Vec::new(),
            run_report::Observed::default(),
        )
    }
}

/// A recorded window in which nothing happened but RPS requests a second.
pub fn quiet_run() -> RunReport {
    Recording::window().build()
}

/// Thread `tid` of `group`, named `comm`, allowed on CPU `cpu` only, as sample `k` read it: it
/// went off CPU 100 times an interval (the report keeps only threads that did something).
pub fn thread(group: u32, tid: u32, comm: &str, cpu: u32, k: u64) -> ThreadCounters {
    ThreadCounters {
        tid,
        pid: tid,
        group,
        comm: comm.into(),
        voluntary_switches: grown(100, k),
        cpu_mask: 1 << cpu,
        ..Default::default()
    }
}

/// A recorded window in which nginx's thread 7, on CPU 0, was busy `busy` of the time (60% of
/// it in the kernel) and called writev once a request, unless syscalls were off (--syscalls off).
pub fn busy_server(busy: f64, syscalls_off: bool) -> Recording {
    let ns = ns_of(busy);
    let sys = ns * 3 / 5;
    let writev = syscalls::Sysno::writev.id() as u32;
    Recording::window().each(|s, k| {
        s.kernel
            .threads
            .push(thread(GROUP_SERVER, 7, "nginx", 0, k));
        s.thread_cpu.push(CpuUse {
            pid: 7,
            tid: 7,
            group: GROUP_SERVER,
            comm: "nginx".into(),
            user_ns: grown(ns - sys, k),
            sys_ns: grown(sys, k),
        });
        s.kernel.syscalls_off = syscalls_off;
        if !syscalls_off {
            let count = grown(RPS * WINDOW_S, k);
            let total_ns = count * 2_000;
            s.kernel
                .syscalls
                .push((GROUP_SERVER, writev, CountNs { count, total_ns }));
        }
    })
}

/// A finding a case expects: its kind, its severity, and the evidence that matters.
#[derive(Clone, Debug)]
pub struct Expected {
    kind: FindingKind,
    severity: Severity,
    evidence: Vec<(&'static str, f64)>,
}

/// The rule says nothing.
pub fn nothing() -> Vec<Expected> {
    Vec::new()
}

/// The rule makes one finding of this kind and severity, with (at least) this evidence.
pub fn finds(
    kind: FindingKind,
    severity: Severity,
    evidence: &[(&'static str, f64)],
) -> Vec<Expected> {
    vec![Expected {
        kind,
        severity,
        evidence: evidence.to_vec(),
    }]
}

/// A rule, whether it makes an Option or a Vec of findings.
type Rule = Box<dyn Fn(&RunReport) -> Vec<Finding>>;

/// A rule and its cases.
pub struct Table {
    name: &'static str,
    rule: Rule,
    /// What each case is, the run the rule reads, and what it should find.
    cases: Vec<(String, RunReport, Vec<Expected>)>,
}

impl Table {
    pub fn new<F, T>(
        rule: F,
        cases: impl IntoIterator<Item = (impl Into<String>, RunReport, Vec<Expected>)>,
    ) -> Table
    where
        F: Fn(&RunReport) -> T + 'static,
        T: IntoIterator<Item = Finding>,
    {
        Table {
            name: std::any::type_name::<F>(),
            rule: Box::new(move |r| rule(r).into_iter().collect()),
            cases: cases
                .into_iter()
                .map(|(name, run, expect)| (name.into(), run, expect))
                .collect(),
        }
    }

    /// Runs every case, panics at the first whose findings are not the expected ones; returns the
    /// kinds of finding the cases made.
    pub fn check(&self) -> BTreeSet<FindingKind> {
        let mut made = BTreeSet::new();
        for (case, run, expected) in &self.cases {
            let found = (self.rule)(run);
            let at = format!("{} / {case}", self.name);
            assert_eq!(
                found.len(),
                expected.len(),
                "{at}: expected {expected:?}, found {found:#?}"
            );
            for (f, e) in found.iter().zip(expected) {
                assert_eq!((f.kind, f.severity), (e.kind, e.severity), "{at}: {f:#?}");
                for (key, want) in &e.evidence {
                    let got = *f
                        .evidence
                        .get(*key)
                        .unwrap_or_else(|| panic!("{at}: no evidence {key} in {f:#?}"));
                    assert!(
                        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                        "{at}: {key} is {got}, expected {want}"
                    );
                }
                made.insert(f.kind);
            }
        }
        made
    }
}

/// In a rules file's tests: one #[test] per table, named after it (in `mod thresholds`), and
/// `tables()`, all of them, for rules::tests to check that every kind of finding has a case.
macro_rules! tables {
    ($($table:ident),+ $(,)?) => {
        pub(in crate::rules) fn tables() -> Vec<$crate::rules::test_support::Table> {
            vec![$($table()),+]
        }

        mod thresholds {
            $(
                #[test]
                fn $table() {
                    super::$table().check();
                }
            )+
        }
    };
}
pub(crate) use tables;
