//! `cargo xtask bench overhead`, its third table: the time a stack sample takes in the interrupt
//! it is taken in, on nginx's worker under wrk, timed by the kernel itself. srvprof and perf both
//! sample with the cpu-clock software event, whose hrtimer callback (perf_swevent_hrtimer) runs
//! the sample: srvprof's BPF program (its stack copy, its kernel stack, the ring), or perf's
//! own output (its 8 KiB stack copy for `--call-graph dwarf`). bpftrace times that callback
//! between the timer:hrtimer_expire_entry and hrtimer_expire_exit tracepoints, only when it
//! interrupted the worker. Unlike a throughput ratio, this sees nothing of the machine's drift
//! between runs: each figure is the mean of thousands of callbacks. What it leaves out is the
//! same for every watcher (the interrupt's entry and exit, the timer's reprogramming), and the
//! cache lines a copy evicts, which the spin's table (sample_cost.rs) includes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::host::SERVER_CPU;
use super::sample_cost::{HZ, Sampled, attach};
use super::stats::{median, spread};
use super::watchers::{Watcher, detach};

/// Seconds the callbacks are timed for, after the watcher attached and settled for SETTLE.
const TIMED_S: u64 = 4;
const SETTLE: Duration = Duration::from_secs(2);
/// wrk's connections.
const CONNECTIONS: usize = 50;

/// The table, `rounds` rounds with the watchers' order rotating. `master` and `worker` are nginx's
/// (srvprof watches both, perf the worker), `url` its address.
pub fn table(
    srvprof: &Path,
    master: u32,
    worker: u32,
    url: &str,
    dir: &Path,
    rounds: usize,
) -> Result<String> {
    // srvprof watches nginx's master and its worker, perf the worker, whose interrupts are timed.
    let on = Sampled {
        run_pid: master,
        perf_pid: worker,
    };
    let Some(callback) = hrtimer_callback()? else {
        return Ok(
            "\n## Time in the sampling interrupt\n\nNot measured: /proc/kallsyms does not \
                   list perf_swevent_hrtimer (a kernel without kallsyms, or not read as root).\n"
                .into(),
        );
    };
    let watchers = [Watcher::SrvprofRun, Watcher::Perf, Watcher::PerfDwarf];
    let mut means: Vec<Vec<f64>> = vec![Vec::new(); watchers.len()];
    let mut counts: Vec<Vec<u64>> = vec![Vec::new(); watchers.len()];
    for round in 0..rounds {
        for k in 0..watchers.len() {
            let i = (k + round) % watchers.len();
            let (n, mean_us) = measure(watchers[i], on, srvprof, url, dir, callback)?;
            means[i].push(mean_us);
            counts[i].push(n);
        }
    }
    let mut t = format!(
        "\n## Time in the sampling interrupt, per sample (nginx's worker under wrk)\n\n\
         nginx 1 worker on CPU {SERVER_CPU} under `wrk -c{CONNECTIONS}`; every watcher samples at \
         {HZ} Hz. bpftrace times the cpu-clock event's hrtimer callback (perf_swevent_hrtimer, \
         between the timer:hrtimer_expire_entry and _exit tracepoints) each time it interrupted \
         the worker, for {TIMED_S} s per run, {rounds} round(s), the order rotating. The \
         callback is where a sample's stack is walked and copied; the interrupt around it costs \
         every watcher the same.\n\n\
         | watcher | callbacks per run | us per sample (median of rounds) | spread of rounds |\n\
         |---|---|---|---|\n"
    );
    for (i, w) in watchers.iter().enumerate() {
        let (lo, hi) = spread(&means[i]).unwrap_or((0.0, 0.0));
        let n: Vec<f64> = counts[i].iter().map(|&c| c as f64).collect();
        t.push_str(&format!(
            "| {} | {:.0} | {:.2} | {lo:.2}–{hi:.2} |\n",
            label(*w),
            median(&n).unwrap_or(0.0),
            median(&means[i]).unwrap_or(0.0),
        ));
    }
    let (srv, dwarf) = (&means[0], &means[2]);
    let lower = srv.iter().zip(dwarf).filter(|(s, d)| s < d).count();
    t.push_str(&format!(
        "\nsrvprof's sample (its user stack copied up to the worker's outermost frame, its kernel \
         stack walked) took less time than perf --call-graph dwarf's (8 KiB copied, kernel stack \
         walked) in {lower} of {rounds} rounds.\n"
    ));
    Ok(t)
}

fn label(w: Watcher) -> String {
    match w {
        Watcher::SrvprofRun => format!("srvprof run --freq {HZ}"),
        Watcher::Perf => format!("perf record -g -F {HZ}"),
        Watcher::PerfDwarf => format!("perf record --call-graph dwarf -F {HZ}"),
        other => other.name().to_string(),
    }
}

/// The address of perf_swevent_hrtimer, the cpu-clock event's hrtimer callback.
fn hrtimer_callback() -> Result<Option<u64>> {
    let syms = std::fs::read_to_string("/proc/kallsyms").context("reading /proc/kallsyms")?;
    Ok(syms
        .lines()
        .find(|l| l.ends_with(" perf_swevent_hrtimer"))
        .and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .filter(|&a| a != 0))
}

/// One run: wrk on nginx, `w` attached, the callbacks timed. Returns how many were timed and
/// their mean in microseconds.
fn measure(
    w: Watcher,
    on: Sampled,
    srvprof: &Path,
    url: &str,
    dir: &Path,
    callback: u64,
) -> Result<(u64, f64)> {
    let wrk_s = SETTLE.as_secs() + TIMED_S + 8;
    let mut wrk = Command::new("taskset")
        .args(["-c", "0", "wrk", "-t1", &format!("-c{CONNECTIONS}")])
        .arg(format!("-d{wrk_s}s"))
        .arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting wrk")?;
    let watcher = attach(w, on, srvprof, url, &dir.join("interrupt"));
    let timed = watcher.and_then(|watcher| {
        std::thread::sleep(SETTLE);
        let timed = time_callbacks(on.perf_pid, callback);
        detach(watcher);
        timed
    });
    let _ = wrk.kill();
    let _ = wrk.wait();
    let (n, mean) = timed?;
    if n == 0 {
        bail!(
            "{}: no sampling callback interrupted nginx's worker",
            w.name()
        );
    }
    Ok((n, mean))
}

/// bpftrace times the callback at `callback` whenever it interrupted `pid`, for TIMED_S seconds:
/// how many, and their mean in microseconds.
fn time_callbacks(pid: u32, callback: u64) -> Result<(u64, f64)> {
    let script = format!(
        "tracepoint:timer:hrtimer_expire_entry /pid == {pid} && args->function == {callback:#x}/ \
         {{ @start[cpu] = nsecs; }}\n\
         tracepoint:timer:hrtimer_expire_exit /@start[cpu]/ \
         {{ @n = count(); @ns = sum(nsecs - @start[cpu]); delete(@start[cpu]); }}\n\
         interval:s:{TIMED_S} {{ exit(); }}\n"
    );
    let out = Command::new("taskset")
        .args(["-c", "0", "bpftrace", "-q", "-e", &script])
        .output()
        .context("running bpftrace")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (n, ns) = (value(&text, "@n:"), value(&text, "@ns:"));
    match (n, ns) {
        (Some(n), Some(ns)) if n > 0 => Ok((n, ns as f64 / n as f64 / 1000.0)),
        _ if !out.status.success() => bail!(
            "bpftrace failed timing the sampling callback: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        _ => Ok((0, 0.0)),
    }
}

/// The number after `name` in bpftrace's printed maps.
fn value(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(name)?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bpftrace_maps() {
        let text = "\n@n: 3512\n@ns: 31608000\n";
        assert_eq!(value(text, "@n:"), Some(3512));
        assert_eq!(value(text, "@ns:"), Some(31608000));
        assert_eq!(value(text, "@x:"), None);
    }
}
