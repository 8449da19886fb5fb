//! What watching cost the watched: the probes' own run time (the kernel's per-program accounting,
//! bpf_stats, on for some intervals of the run), set against the requests served and the
//! server's CPU time in those intervals, and the stalls srvprof itself made (each attach or
//! detach of a program on a tracepoint, and each switch of the accounting, rewrites kernel text
//! and holds a CPU until every CPU has seen it).

use serde::{Deserialize, Serialize};

/// One program's run time and runs while the accounting was on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramRuns {
    pub program: String,
    pub run_ns: u64,
    pub calls: u64,
}

/// Attaches, detaches and switches of the accounting: each holds srvprof's CPU, and the CPUs it
/// waits for, for its whole length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flips {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

impl Flips {
    pub fn add(&mut self, ns: u64) {
        self.count += 1;
        self.total_ns += ns;
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn merged(mut self, other: Flips) -> Flips {
        self.count += other.count;
        self.total_ns += other.total_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
        self
    }
}

/// What the sampler gathered: the intervals with the accounting on, summed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObserverTally {
    /// Time the accounting was on.
    pub timed_ns: u64,
    pub programs: Vec<ProgramRuns>,
    /// Responses the load generator received, and the server processes' CPU time (user + sys,
    /// /proc), while it was on. None: no load generator (`probe`).
    pub responses: Option<u64>,
    pub server_cpu_ns: u64,
    pub flips: Flips,
    /// The whole watched time, for the flips' rate.
    pub watched_ns: u64,
    /// srvprof's own threads' time on a CPU over `own_span_ns` (own_threads()).
    pub own: Vec<OwnThreads>,
    pub own_span_ns: u64,
}

/// One of srvprof's threads, or several of one name (a pool's `name-N` threads, summed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnThreads {
    pub name: String,
    pub threads: u32,
    pub cpu_ns: u64,
}

/// srvprof's threads' time on a CPU between two readings of (tid, name, ns so far): a thread
/// first seen in the second counts from zero; a pool's `name-N` threads are one row. The
/// costliest first.
pub fn own_threads(first: &[(u32, String, u64)], last: &[(u32, String, u64)]) -> Vec<OwnThreads> {
    let mut out: Vec<OwnThreads> = Vec::new();
    for (tid, name, ns) in last {
        let before = first.iter().find(|(t, ..)| t == tid).map_or(0, |f| f.2);
        let name = pool_name(name);
        let cpu_ns = ns.saturating_sub(before);
        match out.iter_mut().find(|o| o.name == name) {
            Some(o) => {
                o.threads += 1;
                o.cpu_ns += cpu_ns;
            }
            None => out.push(OwnThreads {
                name: name.to_string(),
                threads: 1,
                cpu_ns,
            }),
        }
    }
    out.sort_by(|a, b| b.cpu_ns.cmp(&a.cpu_ns).then_with(|| a.name.cmp(&b.name)));
    out
}

/// `loadgen-3` -> `loadgen`; a name without a numbered suffix is its own.
fn pool_name(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((pool, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => pool,
        _ => name,
    }
}

impl ObserverTally {
    /// Adds one timed interval: each program's cumulative runs at its start and at its end.
    pub fn add_programs(&mut self, before: &[ProgramRuns], after: &[ProgramRuns]) {
        for a in after {
            let b = before.iter().find(|b| b.program == a.program);
            let run_ns = a.run_ns.saturating_sub(b.map_or(0, |b| b.run_ns));
            let calls = a.calls.saturating_sub(b.map_or(0, |b| b.calls));
            match self.programs.iter_mut().find(|p| p.program == a.program) {
                Some(p) => {
                    p.run_ns += run_ns;
                    p.calls += calls;
                }
                None => self.programs.push(ProgramRuns {
                    program: a.program.clone(),
                    run_ns,
                    calls,
                }),
            }
        }
    }
}

/// run.json's `observer`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObserverCost {
    /// Seconds of the run the kernel timed the programs (they then pay two clock reads a call,
    /// so the rest of the run is not timed).
    pub timed_s: f64,
    /// The programs' run time on all CPUs, ms per second. A floor: the traced syscall path and
    /// the tracepoints' dispatch around the programs are not in it.
    pub bpf_ms_per_s: f64,
    /// The same per request served; None without a load generator or requests.
    pub bpf_us_per_request: Option<f64>,
    /// The programs' run time over the server processes' CPU time in the same intervals: the
    /// share by which watching stretched the server's work, at most (part of the programs' time
    /// is on the client's CPUs).
    pub share_of_server_cpu: Option<f64>,
    /// Each program, the costliest first.
    pub programs: Vec<ProgramCost>,
    /// srvprof's attaches, detaches and accounting switches over the whole run.
    pub flips_per_s: f64,
    pub flip_max_us: f64,
    pub flip_mean_us: f64,
    /// srvprof's own threads' time on a CPU over the measured window (the kernel's
    /// /proc/self/task/TID/schedstat): the sampler's readings and windows, the unwinding
    /// thread, the load generator's pool. Empty in run.json written before it was recorded.
    #[serde(default)]
    pub own_threads: Vec<OwnThreadCost>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OwnThreadCost {
    pub thread: String,
    pub threads: u32,
    pub cpu_ms_per_s: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgramCost {
    pub program: String,
    pub calls_per_s: f64,
    pub ns_per_call: f64,
    pub ms_per_s: f64,
}

/// The cost from the tally; None when no interval was timed.
pub fn cost(t: &ObserverTally) -> Option<ObserverCost> {
    if t.timed_ns == 0 {
        return None;
    }
    let secs = t.timed_ns as f64 / 1e9;
    let bpf_ns: u64 = t.programs.iter().map(|p| p.run_ns).sum();
    let mut programs: Vec<ProgramCost> = (t.programs.iter())
        .filter(|p| p.calls > 0)
        .map(|p| ProgramCost {
            program: p.program.clone(),
            calls_per_s: p.calls as f64 / secs,
            ns_per_call: p.run_ns as f64 / p.calls as f64,
            ms_per_s: p.run_ns as f64 / 1e6 / secs,
        })
        .collect();
    programs.sort_by(|a, b| b.ms_per_s.total_cmp(&a.ms_per_s));
    let watched_s = (t.watched_ns as f64 / 1e9).max(secs);
    Some(ObserverCost {
        timed_s: secs,
        bpf_ms_per_s: bpf_ns as f64 / 1e6 / secs,
        bpf_us_per_request: t
            .responses
            .filter(|&n| n > 0)
            .map(|n| bpf_ns as f64 / 1e3 / n as f64),
        share_of_server_cpu: (t.server_cpu_ns > 0).then(|| bpf_ns as f64 / t.server_cpu_ns as f64),
        programs,
        flips_per_s: t.flips.count as f64 / watched_s,
        flip_max_us: t.flips.max_ns as f64 / 1e3,
        flip_mean_us: t.flips.total_ns as f64 / 1e3 / t.flips.count.max(1) as f64,
        own_threads: (t.own.iter())
            .filter(|_| t.own_span_ns > 0)
            .map(|o| OwnThreadCost {
                thread: o.name.clone(),
                threads: o.threads,
                cpu_ms_per_s: o.cpu_ns as f64 / 1e6 / (t.own_span_ns as f64 / 1e9),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(program: &str, run_ns: u64, calls: u64) -> ProgramRuns {
        ProgramRuns {
            program: program.into(),
            run_ns,
            calls,
        }
    }

    #[test]
    fn the_cost_is_the_programs_time_over_the_timed_intervals_requests_and_server_cpu() {
        let mut t = ObserverTally {
            timed_ns: 2_000_000_000,
            responses: Some(100_000),
            server_cpu_ns: 1_500_000_000,
            watched_ns: 10_000_000_000,
            ..Default::default()
        };
        // Two timed intervals of cumulative readings: the second adds to the first's programs,
        // and only what ran between its two readings counts.
        t.add_programs(&[], &[runs("sched_switch", 10_000_000, 20_000)]);
        t.add_programs(
            &[
                runs("sched_switch", 50_000_000, 100_000),
                runs("softirq_entry", 1_000_000, 1_000),
            ],
            &[
                runs("sched_switch", 60_000_000, 120_000),
                runs("softirq_entry", 31_000_000, 601_000),
                runs("never_ran", 0, 0),
            ],
        );
        for ns in [150_000, 250_000] {
            t.flips.add(ns);
        }
        let c = cost(&t).expect("timed");
        assert_eq!(c.timed_s, 2.0);
        assert!((c.bpf_ms_per_s - 25.0).abs() < 1e-9);
        assert_eq!(c.bpf_us_per_request, Some(0.5));
        assert!((c.share_of_server_cpu.unwrap() - 50.0 / 1500.0).abs() < 1e-12);
        let names: Vec<_> = c.programs.iter().map(|p| p.program.as_str()).collect();
        assert_eq!(names, ["softirq_entry", "sched_switch"]);
        assert_eq!(c.programs[1].ns_per_call, 500.0);
        assert_eq!(c.programs[0].calls_per_s, 300_000.0);
        assert!((c.flips_per_s - 0.2).abs() < 1e-12);
        assert_eq!((c.flip_max_us, c.flip_mean_us), (250.0, 200.0));
    }

    #[test]
    fn own_threads_are_their_time_between_two_readings_with_a_pool_as_one_row() {
        let t = |tid, name: &str, ns| (tid, name.to_string(), ns);
        let first = [
            t(1, "srvprof", 500),
            t(2, "loadgen-0", 1_000),
            t(3, "srvprof-sampler", 10),
        ];
        let last = [
            t(1, "srvprof", 600),
            t(2, "loadgen-0", 9_000),
            // Started after the first reading: all its time is in the span.
            t(4, "loadgen-1", 7_000),
            t(3, "srvprof-sampler", 2_010),
            t(5, "srvprof-unwind", 300),
        ];
        let own = own_threads(&first, &last);
        let rows: Vec<_> = own
            .iter()
            .map(|o| (o.name.as_str(), o.threads, o.cpu_ns))
            .collect();
        assert_eq!(
            rows,
            [
                ("loadgen", 2, 15_000),
                ("srvprof-sampler", 1, 2_000),
                ("srvprof-unwind", 1, 300),
                ("srvprof", 1, 100),
            ]
        );
        let tally = ObserverTally {
            timed_ns: 1,
            own,
            own_span_ns: 2_000_000_000,
            ..Default::default()
        };
        let c = cost(&tally).unwrap();
        assert_eq!(c.own_threads[0].thread, "loadgen");
        assert!((c.own_threads[1].cpu_ms_per_s - 0.001).abs() < 1e-12);
    }

    #[test]
    fn nothing_timed_is_no_cost_not_a_zero_one() {
        assert_eq!(cost(&ObserverTally::default()), None);
    }
}
