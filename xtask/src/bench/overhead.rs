//! `cargo xtask bench overhead`: what watching costs the watched. nginx (1 worker, CPU 1) driven by
//! wrk (CPU 0), each watcher's run paired with a bare run right beside it (the order alternating
//! from round to round), so that the machine's drift hits both runs of a pair alike: every
//! srvprof probe (`srvprof probe`: syscall and interrupt programs in sampled windows, the
//! default), and the same with `--exact` (attached all along); `srvprof run` with stacks at 99 Hz
//! and with `--stacks off` (their difference is what stacks cost; its own load reduced to 1
//! request/s, wrk drives); an empty syscall tracepoint (the kernel's floor for anyone who traces
//! syscalls); bpftrace counting the same events; `perf record -g -F 99` and `perf record
//! --call-graph dwarf -F 99` (the stack-sampling peers: frame pointers, and a copy of the stack
//! per sample as srvprof unwinds from); and libbpf-tools' runqlat, offcputime and syscount on the
//! worker (the watchers: watchers.rs). Throughput, p99 and CPU-cost ratios against the bare runs.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

use super::host::{SERVER_CPU, require_tools};
use super::loadgen::{Nginx, Sample, run_wrk};
use super::stats::{median, spread};
use super::watchers::{Watcher, detach, own_cpu_ns, perf_record, srvprof_run_rest, start_watcher};
use crate::{free_port, run_cmd, workspace_root};

const CONNECTIONS: usize = 100;
/// Between a watcher's attaching and the measured run (the bare run waits as long).
const SETTLE: Duration = Duration::from_secs(1);

pub fn run(quick: bool) -> Result<String> {
    let root = workspace_root();
    let rounds = if quick { 1 } else { 5 };
    let seconds = if quick { 3 } else { 5 };
    require_tools(
        &[
            "wrk",
            "taskset",
            "bpftrace",
            "perf",
            "runqlat",
            "offcputime",
            "syscount",
        ],
        "cargo xtask setup",
    )?;
    // bpftrace attaches classic tracepoints, which need tracefs (srvprof does not): mount it if missing.
    if !Path::new("/sys/kernel/tracing/events").exists() {
        eprintln!("xtask: mounting tracefs at /sys/kernel/tracing for bpftrace");
        run_cmd(Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]))?;
    }
    let srvprof = crate::release_srvprof()?;
    let dir = std::env::temp_dir().join(format!("srvprof-bench-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let nginx = Nginx::start(&dir, port)?;
    let master = nginx.child.id();
    let worker = child_of(master).ok_or_else(|| anyhow!("nginx {master} has no worker"))?;
    let url = format!("http://127.0.0.1:{port}/");
    let setup = Setup {
        srvprof: &srvprof,
        master,
        worker,
        dir: &dir,
        url: &url,
        seconds,
    };

    let watchers = [
        Watcher::None,
        Watcher::Srvprof,
        Watcher::SrvprofExact,
        Watcher::SrvprofEmptyWindows,
        Watcher::SrvprofRun,
        Watcher::SrvprofRunNoStacks,
        Watcher::SyscallFloor,
        Watcher::Bpftrace,
        Watcher::Perf,
        Watcher::PerfDwarf,
        Watcher::Runqlat,
        Watcher::Offcputime,
        Watcher::Syscount,
    ];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); watchers.len()];
    // The server CPU's busy time per request: what watching costs the server itself, steadier
    // than throughput when the machine drifts between runs (a shared VM does).
    let mut cpu_costs: Vec<Vec<f64>> = vec![Vec::new(); watchers.len()];
    // Each watcher's run against the bare run right beside it: (throughput ratio, cost ratio,
    // p99 ratio).
    let mut pairs: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); watchers.len()];
    // The watcher's own CPU (all its threads; and srvprof's unwinding thread) per second of load.
    let mut own_cpu: Vec<Vec<(f64, f64)>> = vec![Vec::new(); watchers.len()];
    let mut report = format!(
        "# What watching costs: nginx throughput with and without probes\n\n\
         nginx 1 worker on CPU 1, `wrk -t1 -c{CONNECTIONS} -d{seconds}s` on CPU 0, {rounds} round(s). \
         Each watcher is paired with a bare run right beside it (before it in odd rounds, after it \
         in even ones), so a drift of the machine between minutes hits both runs of a pair alike; \
         each run starts 1 s after its watcher attached (steady state, as after a run's warm-up). \
         `CPU {SERVER_CPU} us/req`: the server CPU's busy time (user, system, irq, softirq from \
         /proc/stat) per request.\n\n\
         | round | watcher | req/s | p99 ms | CPU {SERVER_CPU} us/req |\n|---|---|---|---|---|\n"
    );
    for round in 1..=rounds {
        for (i, pair_of) in pairs.iter_mut().enumerate().skip(1) {
            let order = if round % 2 == 1 { [0, i] } else { [i, 0] };
            let (mut bare, mut watched) = (None, None);
            for j in order {
                let w = watchers[j];
                let (sample, us_per_request, own) = measure(w, &setup)?;
                if let Some(own) = own {
                    own_cpu[j].push(own);
                }
                report.push_str(&format!(
                    "| {round} | {} | {:.0} | {:.2} | {:.2} |\n",
                    w.name(),
                    sample.rps,
                    sample.p99_ms,
                    us_per_request
                ));
                let side = if j == 0 { &mut bare } else { &mut watched };
                *side = Some((sample.rps, us_per_request, sample.p99_ms));
                samples[j].push(sample);
                cpu_costs[j].push(us_per_request);
            }
            if let (Some((bare_rps, bare_us, bare_p99)), Some((rps, us, p99))) = (bare, watched) {
                pair_of.push((
                    rps / bare_rps.max(1e-9),
                    bare_us / us.max(1e-9),
                    p99 / bare_p99.max(1e-9),
                ));
            }
        }
    }
    report.push_str(&format!(
        "\n## Medians\n\n`ratio to bare`: this watcher's throughput over the bare run's beside it, \
         the median of the {rounds} pairs and their spread. `cost ratio`: the bare run's CPU \
         {SERVER_CPU} us/req over this watcher's, per pair likewise: the throughput a server-bound \
         run would keep.\n\n\
         `own CPU ms/s`: the watcher process's own CPU time (all threads, /proc/PID/task/*/schedstat) \
         per second of load, on top of what it costs the server; `unwinding`: srvprof's \
         srvprof-unwind thread's part of it (perf's post-processing, `perf report`, is not in \
         perf's figure). `p99 ratio`: wrk's p99 with this watcher over the bare run's beside it, \
         per pair likewise.\n\n\
         | watcher | req/s | ratio to bare (spread) | p99 ms | p99 ratio (spread) | CPU {SERVER_CPU} us/req | cost ratio (spread) | own CPU ms/s | unwinding ms/s |\n|---|---|---|---|---|---|---|---|---|\n"
    ));
    let paired = |i: usize, pick: fn(&(f64, f64, f64)) -> f64| -> (f64, String) {
        let v: Vec<f64> = pairs[i].iter().map(pick).collect();
        match (median(&v), spread(&v)) {
            (Some(m), Some((lo, hi))) => (m, format!("{m:.3} ({lo:.3}–{hi:.3})")),
            _ => (1.0, "1.000".into()),
        }
    };
    for (i, w) in watchers.iter().enumerate() {
        let m = Sample::median(&samples[i]).unwrap_or_default();
        let cost = median(&cpu_costs[i]).unwrap_or(0.0);
        let own = |pick: fn(&(f64, f64)) -> f64| -> String {
            let v: Vec<f64> = own_cpu[i].iter().map(pick).collect();
            median(&v).map_or("–".into(), |x| format!("{x:.1}"))
        };
        report.push_str(&format!(
            "| {} | {:.0} | {} | {:.2} | {} | {:.2} | {} | {} | {} |\n",
            w.name(),
            m.rps,
            paired(i, |p| p.0).1,
            m.p99_ms,
            paired(i, |p| p.2).1,
            cost,
            paired(i, |p| p.1).1,
            own(|c| c.0),
            own(|c| c.1),
        ));
    }
    // What stacks add: srvprof run against the same run without stacks, each against its bare
    // neighbour; perf's dwarf copies against nothing, the same way.
    let of = |w: Watcher| {
        let i = watchers.iter().position(|x| *x == w).expect("listed");
        paired(i, |p| p.0).0
    };
    report.push_str(&format!(
        "\nOn- and off-CPU stacks at 99 Hz (`srvprof run` over `srvprof run --stacks off`, the \
         ratio of their paired medians): {:.3}; `perf record --call-graph dwarf -F 99`: {:.3}; \
         `perf record -g -F 99`: {:.3}.\n",
        of(Watcher::SrvprofRun) / of(Watcher::SrvprofRunNoStacks).max(1e-9),
        of(Watcher::PerfDwarf),
        of(Watcher::Perf),
    ));
    // The main table first, should a later one fail.
    eprintln!("{report}");
    let program_time = program_time_table(&setup)?;
    let sample_cost = super::sample_cost::table(&srvprof, &url, &dir, rounds, quick)?;
    let interrupt = super::interrupt_time::table(&srvprof, master, worker, &url, &dir, rounds)?;
    let tail = super::tail::table(&srvprof, worker, &url, &dir, rounds, seconds)?;
    drop(nginx);
    let _ = std::fs::remove_dir_all(&dir);
    report.push_str(&program_time);
    report.push_str(&sample_cost);
    report.push_str(&interrupt);
    report.push_str(&tail);
    println!("{report}");
    let out = root.join("target/bench/overhead.md");
    std::fs::create_dir_all(out.parent().expect("has a parent"))?;
    std::fs::write(&out, &report)?;
    eprintln!("xtask: wrote {}", out.display());
    Ok(report)
}

/// `cargo xtask bench samples`: the per-sample tables alone (sample_cost.rs, interrupt_time.rs),
/// 5 rounds, with nginx for srvprof run's 1 request a second and for the interrupt timing.
pub fn run_sample_cost() -> Result<()> {
    require_tools(&["taskset", "perf", "wrk", "bpftrace"], "cargo xtask setup")?;
    let srvprof = crate::release_srvprof()?;
    let dir = std::env::temp_dir().join(format!("srvprof-bench-samples-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let nginx = Nginx::start(&dir, port)?;
    let master = nginx.child.id();
    let worker = child_of(master).ok_or_else(|| anyhow!("nginx {master} has no worker"))?;
    let url = format!("http://127.0.0.1:{port}/");
    let mut table = super::sample_cost::table(&srvprof, &url, &dir, 5, false)?;
    table.push_str(&super::interrupt_time::table(
        &srvprof, master, worker, &url, &dir, 5,
    )?);
    drop(nginx);
    let _ = std::fs::remove_dir_all(&dir);
    println!("{table}");
    let out = workspace_root().join("target/bench/sample-cost.md");
    std::fs::create_dir_all(out.parent().expect("has a parent"))?;
    std::fs::write(&out, &table)?;
    eprintln!("xtask: wrote {}", out.display());
    Ok(())
}

/// What every measured run shares: srvprof's binary, nginx's master and worker, the bench's
/// folder, nginx's URL and each wrk run's length.
#[derive(Clone, Copy)]
struct Setup<'a> {
    srvprof: &'a Path,
    master: u32,
    worker: u32,
    dir: &'a Path,
    url: &'a str,
    seconds: u64,
}

/// A run's sample, the server CPU's busy time per request, and the watcher's own CPU.
type Measured = (Sample, f64, Option<(f64, f64)>);

/// One wrk run with watcher `w` attached (none for the bare run): its sample, the server CPU's
/// busy time per request, and the watcher's own CPU (all threads, unwinding thread) in ms per
/// second of load.
fn measure(w: Watcher, setup: &Setup) -> Result<Measured> {
    let seconds = setup.seconds;
    let attached = attach(w, setup)?;
    // Steady state: what a watcher does once at its start (srvprof reads the binaries' unwind
    // tables at their first stack, perf writes its headers) is not what it costs while it
    // watches, and a run's warm-up (srvprof run's 2 s by default) absorbs it.
    std::thread::sleep(SETTLE);
    let watcher_pid = attached.as_ref().map(Child::id);
    let own_before = watcher_pid.map(own_cpu_ns);
    let measured = wrk_and_server_cpu(setup.url, seconds);
    let own_after = watcher_pid.map(own_cpu_ns);
    detach(attached);
    let (sample, us_per_request) = measured?;
    let ms_per_s = |ns: u64| ns as f64 / 1e6 / seconds as f64;
    let own = match (own_before, own_after) {
        (Some(b), Some(a)) => Some((
            ms_per_s(a.0.saturating_sub(b.0)),
            ms_per_s(a.1.saturating_sub(b.1)),
        )),
        _ => None,
    };
    Ok((sample, us_per_request, own))
}

/// One more wrk run per watcher with the kernel's per-program run-time accounting on (it slows
/// every program a little, so these runs stay out of the throughput table): the watcher's own
/// programs' time per request, stack programs apart. A floor: the traced syscall path and the
/// tracepoint dispatch around the programs are not in it.
fn program_time_table(setup: &Setup) -> Result<String> {
    let (url, seconds) = (setup.url, setup.seconds);
    let mut table = format!(
        "\n## BPF program time per request (kernel.bpf_stats_enabled)\n\n\
         The watcher's programs' run time by the kernel's own accounting, during one more \
         `wrk -d{seconds}s` per watcher, divided by its requests; `share` is that over CPU \
         {SERVER_CPU}'s busy time per request in a bare run just before. Each run is also charged \
         the accounting's own two clock reads (tens of ns); the kernel's traced-syscall path and \
         the dispatch to the programs are not in it.\n\n\
         | watcher | ns/req, all programs | of which on-CPU sampling (99 Hz) | of which off-CPU stacks | share of bare CPU {SERVER_CPU} time |\n\
         |---|---|---|---|---|\n"
    );
    let (_, bare_us) = wrk_and_server_cpu(url, seconds)?;
    let bare_ns = bare_us * 1e3;
    let stats = crate::prog_time::StatsOn::enable()?;
    for w in [
        Watcher::Srvprof,
        Watcher::SrvprofExact,
        Watcher::SrvprofEmptyWindows,
        Watcher::SrvprofRun,
        Watcher::SrvprofRunNoStacks,
        Watcher::Bpftrace,
    ] {
        let loaded_before = crate::prog_time::loaded_ids()?;
        let attached = attach(w, setup)?;
        // bpftrace says "Attaching" before it loads its programs.
        std::thread::sleep(Duration::from_secs(1));
        // The programs that appeared with the watcher (bpftrace keeps no program fd open).
        let ids: Vec<u64> = crate::prog_time::loaded_ids()?
            .into_iter()
            .filter(|id| !loaded_before.contains(id))
            .collect();
        let before = crate::prog_time::run_ns_by_name(&ids)?;
        let sample = run_wrk(url, CONNECTIONS, seconds);
        let after = crate::prog_time::run_ns_by_name(&ids)?;
        detach(attached);
        let requests = (sample?.rps * seconds as f64).max(1.0);
        let spent = crate::prog_time::delta(&before, &after);
        let all: u64 = spent.values().sum();
        let of = |program: &str| spent.get(program).copied().unwrap_or(0) as f64 / requests;
        table.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} % |\n",
            w.name(),
            all as f64 / requests,
            of("oncpu_sample"),
            of("offcpu_switch"),
            all as f64 / requests / bare_ns.max(1.0) * 100.0
        ));
    }
    drop(stats);
    Ok(table)
}

/// One wrk run, and the server CPU's busy time per request during it in microseconds.
fn wrk_and_server_cpu(url: &str, seconds: u64) -> Result<(Sample, f64)> {
    let busy_before = cpu_busy_ticks(SERVER_CPU)?;
    let sample = run_wrk(url, CONNECTIONS, seconds)?;
    let busy_after = cpu_busy_ticks(SERVER_CPU)?;
    let requests = sample.rps * seconds as f64;
    let us_per_request =
        (busy_after - busy_before) as f64 * 1e6 / CLOCK_TICKS_PER_S / requests.max(1.0);
    Ok((sample, us_per_request))
}

/// USER_HZ: the unit of /proc/stat's CPU times.
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// CPU `cpu`'s busy time so far (user, nice, system, irq, softirq; not steal), in clock ticks.
fn cpu_busy_ticks(cpu: &str) -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .ok_or_else(|| anyhow!("no {name} line in /proc/stat"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    Ok([0, 1, 2, 5, 6].iter().filter_map(|&i| v.get(i)).sum())
}

/// The first child process of `pid` (nginx's worker).
fn child_of(pid: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let out = Command::new("pgrep")
            .args(["-P", &pid.to_string()])
            .output()
            .ok()?;
        if let Some(child) = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
        {
            return child.parse().ok();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Starts a watcher and returns once it is attached.
fn attach(w: Watcher, setup: &Setup) -> Result<Option<Child>> {
    let Setup {
        srvprof,
        master,
        worker,
        dir,
        ..
    } = *setup;
    let (mut cmd, ready): (Command, Option<&str>) = match w {
        Watcher::None => return Ok(None),
        Watcher::Srvprof | Watcher::SrvprofExact | Watcher::SrvprofEmptyWindows => {
            let mut c = Command::new(srvprof);
            c.args([
                "probe",
                "--pid",
                &master.to_string(),
                &worker.to_string(),
                "-d",
                "120s",
                "--format",
                "json",
            ]);
            match w {
                Watcher::SrvprofExact => {
                    c.arg("--exact");
                }
                // The same windows, their syscall and softirq programs returning at once: what
                // the kernel's traced path and the dispatch cost without the programs' work.
                Watcher::SrvprofEmptyWindows => {
                    c.arg("--empty-window-programs");
                }
                _ => {}
            }
            (c, Some("watching PIDs"))
        }
        Watcher::SrvprofRun | Watcher::SrvprofRunNoStacks => {
            let mut c = Command::new(srvprof);
            c.args(["run", "--pid", &master.to_string(), &worker.to_string()]);
            srvprof_run_rest(&mut c, w == Watcher::SrvprofRun, &dir.join("run"));
            (c, Some("probes attached"))
        }
        Watcher::SyscallFloor => {
            let mut c = Command::new("bpftrace");
            c.args([
                "-e",
                "tracepoint:raw_syscalls:sys_enter /pid == 1/ { @n = count(); }",
            ]);
            (c, Some("Attaching"))
        }
        Watcher::Bpftrace => {
            let script = format!(
                "tracepoint:sched:sched_switch {{ @switches[args->prev_pid] = count(); }} \
                 tracepoint:raw_syscalls:sys_enter /pid == {worker}/ {{ @start[tid] = nsecs; }} \
                 tracepoint:raw_syscalls:sys_exit /@start[tid]/ {{ @syscalls[args->id] = count(); @ns[args->id] = sum(nsecs - @start[tid]); delete(@start[tid]); }} \
                 tracepoint:irq:softirq_entry {{ @softirqs[cpu, args->vec] = count(); }}"
            );
            let mut c = Command::new("bpftrace");
            c.args(["-e", &script]);
            (c, Some("Attaching"))
        }
        Watcher::Perf | Watcher::PerfDwarf => {
            let mut c = Command::new("perf");
            perf_record(
                &mut c,
                w == Watcher::PerfDwarf,
                99,
                worker,
                &dir.join("perf.data"),
            );
            (c, None)
        }
        Watcher::Runqlat | Watcher::Offcputime | Watcher::Syscount => {
            let tool = match w {
                Watcher::Runqlat => "runqlat",
                Watcher::Offcputime => "offcputime",
                _ => "syscount",
            };
            let mut c = Command::new(tool);
            c.args(["-p", &worker.to_string()]);
            (c, None)
        }
    };
    start_watcher(&mut cmd, w.name(), ready).map(Some)
}
