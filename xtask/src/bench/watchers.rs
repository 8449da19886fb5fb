//! Watchers the benches attach beside a server (srvprof, bpftrace, perf, libbpf-tools), and what
//! every bench that pairs a watched run with a bare one shares: starting a watcher and waiting
//! until it is attached, stopping it, its own CPU time.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use super::host::stop;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Watcher {
    None,
    Srvprof,
    SrvprofExact,
    SrvprofEmptyWindows,
    SrvprofRun,
    SrvprofRunNoStacks,
    SyscallFloor,
    Bpftrace,
    Perf,
    PerfDwarf,
    Runqlat,
    Offcputime,
    Syscount,
}

impl Watcher {
    pub(super) fn name(self) -> &'static str {
        match self {
            Watcher::None => "nothing attached",
            Watcher::Srvprof => "srvprof probe (every probe; syscalls, irqs sampled)",
            Watcher::SrvprofExact => "srvprof probe --exact (every probe, all along)",
            Watcher::SrvprofEmptyWindows => {
                "srvprof probe, its windows' programs empty (the traced path alone)"
            }
            Watcher::SrvprofRun => "srvprof run (every probe + stacks 99 Hz)",
            Watcher::SrvprofRunNoStacks => "srvprof run --stacks off",
            Watcher::SyscallFloor => "empty syscall tracepoint (bpftrace, matches nothing)",
            Watcher::Bpftrace => "bpftrace, same counting",
            Watcher::Perf => "perf record -g -F 99",
            Watcher::PerfDwarf => "perf record --call-graph dwarf -F 99",
            Watcher::Runqlat => "libbpf-tools runqlat -p",
            Watcher::Offcputime => "libbpf-tools offcputime -p",
            Watcher::Syscount => "libbpf-tools syscount -p",
        }
    }
}

/// `srvprof run`'s arguments after its targets, in both tables: its own load at 1 request/s (wrk
/// or nothing drives), no warm-up, stacks on or off, its folder.
pub(super) fn srvprof_run_rest(cmd: &mut Command, stacks: bool, out: &Path) {
    cmd.args([
        "--rate",
        "1",
        "-c",
        "1",
        "-d",
        "120s",
        "--warmup",
        "0s",
        "--force",
        "--stacks",
        if stacks { "on" } else { "off" },
        "--out",
    ])
    .arg(out);
}

/// A process's CPU time so far in ns: all its threads, and its srvprof-unwind thread's (0 when
/// it has none). From each thread's schedstat (the scheduler's own ns), not /proc's stat, whose
/// clock ticks charge a thread that wakes briefly and often a whole tick when one lands on it
/// (the unwinding thread read 16 ms/s by ticks, 4 ms/s by schedstat, in the same run).
pub(super) fn own_cpu_ns(pid: u32) -> (u64, u64) {
    let (mut all, mut unwind) = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    for task in tasks.flatten() {
        let Some(ns) = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        else {
            continue;
        };
        all += ns;
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "srvprof-unwind" {
            unwind += ns;
        }
    }
    (all, unwind)
}

/// `perf record` at `hz` on `pid` into `out`: with frame-pointer stacks (`-g`), or a copy of
/// the stack per sample (`--call-graph dwarf`).
pub(super) fn perf_record(cmd: &mut Command, dwarf: bool, hz: u32, pid: u32, out: &Path) {
    cmd.args(["record", "-F", &hz.to_string()]);
    if dwarf {
        cmd.args(["--call-graph", "dwarf"]);
    } else {
        cmd.arg("-g");
    }
    cmd.args(["-p", &pid.to_string(), "-o"]).arg(out);
}

/// Starts a watcher's command and returns once it is attached: once it printed `ready`, or a
/// second after it started when it says nothing (perf attaches in milliseconds).
pub(super) fn start_watcher(cmd: &mut Command, name: &str, ready: Option<&str>) -> Result<Child> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    match ready {
        Some(marker) => {
            wait_for_line(&mut child, marker).with_context(|| format!("{name} did not attach"))?
        }
        None => std::thread::sleep(Duration::from_secs(1)),
    }
    Ok(child)
}

/// Reads stdout and stderr until a line contains `marker`, then keeps draining both in the background.
pub(super) fn wait_for_line(child: &mut Child, marker: &str) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        let marker = marker.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if line.contains(&marker) {
                    let _ = tx.send(());
                }
            }
        });
    }
    rx.recv_timeout(Duration::from_secs(60))
        .map_err(|_| anyhow!("no '{marker}' within 60 s"))
}

/// Stops a watcher with SIGINT (each writes what it has and detaches), SIGKILL after 20 s.
pub(super) fn detach(child: Option<Child>) {
    if let Some(mut child) = child {
        stop(&mut child, "INT", Duration::from_secs(20));
    }
}
