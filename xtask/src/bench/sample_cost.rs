//! `cargo xtask bench overhead`, its second table: what stack sampling costs the thread it
//! samples, read where nginx's throughput cannot show it. A CPU-bound thread (spin.c, built
//! without frame pointers) counts its work per second of its own CPU time; a sample is taken in an
//! interrupt of that thread and charged to it, so every microsecond a watcher spends there lowers
//! the thread's work per CPU second. That figure is steady to about 0.1 % from run to run here,
//! where nginx's throughput drifts by 10 %. Watchers: srvprof run with stacks and with `--stacks
//! off` (their difference is what sampling costs), `perf record -g` and `--call-graph dwarf`, all
//! at the same frequency, ten times srvprof's default so that a sample's cost stands well out of
//! that noise (at 99 Hz srvprof and perf differ by less than it); each watcher's own process
//! runs on the other CPU, and its CPU time is given apart.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::host::SERVER_CPU;
use super::stats::{median, spread};
use super::watchers::{Watcher, detach, own_cpu_ns, perf_record, srvprof_run_rest, start_watcher};

/// The watchers' own CPU.
const WATCHER_CPU: &str = "0";
/// Sampling frequency of every watcher here.
pub(super) const HZ: u32 = 999;
/// srvprof's default frequency, which the costs are also given at.
const DEFAULT_HZ: f64 = 99.0;
/// The part of each spin run that is measured starts this long after the spin started: every
/// watcher is attached by then (it is an error if one is not).
const MEASURED_FROM: Duration = Duration::from_millis(2500);

/// The table, `rounds` rounds with the samplers' order rotating from round to round. `url` is a
/// server for srvprof run's load (1 request/s); the spin is what it watches.
pub fn table(srvprof: &Path, url: &str, dir: &Path, rounds: usize, quick: bool) -> Result<String> {
    let spin = build_spin(dir)?;
    let seconds = if quick { 4.0 } else { 7.0 };
    let samplers = [
        Watcher::None,
        Watcher::SrvprofRun,
        Watcher::SrvprofRunNoStacks,
        Watcher::Perf,
        Watcher::PerfDwarf,
    ];
    let hz = f64::from(HZ);
    // Per sampler: work per CPU ms, and the watcher's own CPU in ms per second.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); samplers.len()];
    let mut own: Vec<Vec<f64>> = vec![Vec::new(); samplers.len()];
    for round in 0..rounds {
        for k in 0..samplers.len() {
            let i = (k + round) % samplers.len();
            let (rate, own_ms) = measure(samplers[i], &spin, srvprof, url, dir, seconds)?;
            rates[i].push(rate);
            if let Some(ms) = own_ms {
                own[i].push(ms);
            }
        }
    }
    let bare = median(&rates[0]).ok_or_else(|| anyhow!("no bare spin run"))?;
    let mut t = format!(
        "\n## What stack sampling costs the thread it samples (a CPU-bound thread)\n\n\
         A C thread built without frame pointers spins on CPU {SERVER_CPU} (a() -> b() -> c()) and \
         counts its work per millisecond of its own CPU time; the samples are taken in its \
         interrupts and charged to it. {rounds} round(s), the order rotating; each run measured \
         from {:.1} s after the spin started (every watcher attached by then) to its end at \
         {seconds:.0} s. Every watcher samples at {HZ} Hz, ten times srvprof's default, so that a \
         sample's cost stands out of the thread's noise. The watchers run on CPU {WATCHER_CPU}; \
         their own CPU is apart. `us per sample`: the thread's lost work as CPU time, over {HZ} \
         samples a second; `at {DEFAULT_HZ:.0} Hz`: that per-sample cost at srvprof's default \
         frequency.\n\n\
         | watcher | work per CPU ms (median) | spread | cost to the thread | us per sample | at {DEFAULT_HZ:.0} Hz | own CPU ms/s |\n\
         |---|---|---|---|---|---|---|\n",
        MEASURED_FROM.as_secs_f64()
    );
    for (i, s) in samplers.iter().enumerate() {
        let m = median(&rates[i]).unwrap_or(0.0);
        let (lo, hi) = spread(&rates[i]).unwrap_or((0.0, 0.0));
        // The share of the thread's CPU the watcher took: bare / watched - 1.
        let cost = bare / m.max(1e-9) - 1.0;
        let (per_sample, at_default) = if *s == Watcher::None {
            ("–".to_string(), "–".to_string())
        } else {
            (
                format!("{:.1}", cost * 1e6 / hz),
                format!("{:.2} %", cost / hz * DEFAULT_HZ * 100.0),
            )
        };
        t.push_str(&format!(
            "| {} | {m:.2} | {lo:.2}–{hi:.2} | {:.2} % | {per_sample} | {at_default} | {} |\n",
            label(*s),
            cost * 100.0,
            median(&own[i]).map_or("–".into(), |x| format!("{x:.1}")),
        ));
    }
    let runs = |s: Watcher| &rates[samplers.iter().position(|x| *x == s).expect("listed")];
    // Per round, what a sample cost the thread: srvprof's sampling is run with stacks against
    // run --stacks off (the rest of its probes cost the same in both), perf's against the bare
    // spin, each pair from the same round.
    let per_round = |with: Watcher, without: Watcher| -> Vec<f64> {
        (runs(without).iter().zip(runs(with)))
            .map(|(wo, w)| (wo / w.max(1e-9) - 1.0) * 1e6 / hz)
            .collect()
    };
    let srvprof = per_round(Watcher::SrvprofRun, Watcher::SrvprofRunNoStacks);
    let dwarf = per_round(Watcher::PerfDwarf, Watcher::None);
    let lower = srvprof.iter().zip(&dwarf).filter(|(s, d)| s < d).count();
    let us = |v: &[f64]| {
        let (lo, hi) = spread(v).unwrap_or((0.0, 0.0));
        format!(
            "{:.1} us (rounds {lo:.1}–{hi:.1})",
            median(v).unwrap_or(0.0)
        )
    };
    t.push_str(&format!(
        "\nA sample with its user stack, per round: srvprof's (run with stacks against run \
         --stacks off) {}, perf --call-graph dwarf's (against the bare spin) {}; srvprof's was \
         the lower in {lower} of {rounds} rounds. At {DEFAULT_HZ:.0} Hz srvprof's sampling costs \
         the thread {:.2} % of its CPU.\n",
        us(&srvprof),
        us(&dwarf),
        median(&srvprof).unwrap_or(0.0) * DEFAULT_HZ / 1e4,
    ));
    Ok(t)
}

/// The watcher as this table runs it (overhead.rs' names give its own 99 Hz).
fn label(s: Watcher) -> String {
    match s {
        Watcher::SrvprofRun => format!("srvprof run --freq {HZ} (every probe + stacks)"),
        Watcher::Perf => format!("perf record -g -F {HZ}"),
        Watcher::PerfDwarf => format!("perf record --call-graph dwarf -F {HZ}"),
        other => other.name().to_string(),
    }
}

/// Compiles spin.c into `dir`.
fn build_spin(dir: &Path) -> Result<std::path::PathBuf> {
    let src = dir.join("spin.c");
    std::fs::write(&src, include_str!("spin.c"))?;
    let bin = dir.join("spin");
    let status = Command::new("cc")
        .args(["-O2", "-fomit-frame-pointer", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .context("running cc (Debian: gcc)")?;
    if !status.success() {
        bail!("cc could not build {}", src.display());
    }
    Ok(bin)
}

/// One spin run with `s` attached: its work per CPU ms over the measured part, and the watcher's
/// own CPU in ms per second over the same part.
fn measure(
    s: Watcher,
    spin: &Path,
    srvprof: &Path,
    url: &str,
    dir: &Path,
    seconds: f64,
) -> Result<(f64, Option<f64>)> {
    let started = Instant::now();
    let mut child = Command::new("taskset")
        .args(["-c", SERVER_CPU])
        .arg(spin)
        .arg(seconds.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the spin")?;
    let on = Sampled {
        run_pid: child.id(),
        perf_pid: child.id(),
    };
    let watcher = attach(s, on, srvprof, url, &dir.join("spin"))?;
    let attached_after = started.elapsed();
    if attached_after > MEASURED_FROM {
        detach(watcher);
        let _ = child.kill();
        bail!(
            "{} took {attached_after:?} to attach, past the {MEASURED_FROM:?} the measured part starts at \
             (a busy machine; run the bench again when it is quiet)",
            s.name()
        );
    }
    std::thread::sleep(MEASURED_FROM.saturating_sub(started.elapsed()));
    let pid = watcher.as_ref().map(Child::id);
    let own_before = pid.map(own_cpu_ns);
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)?;
    let own_after = pid.map(own_cpu_ns);
    let spun = started
        .elapsed()
        .saturating_sub(MEASURED_FROM)
        .as_secs_f64();
    detach(watcher);
    let _ = child.wait();
    let rows: Vec<[u64; 3]> = out
        .lines()
        .filter_map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            Some([*v.first()?, *v.get(1)?, *v.get(2)?])
        })
        .collect();
    let t0 = rows
        .first()
        .ok_or_else(|| anyhow!("the spin printed nothing"))?[0];
    let from = t0 + MEASURED_FROM.as_nanos() as u64;
    let first = rows
        .iter()
        .find(|r| r[0] >= from)
        .ok_or_else(|| anyhow!("the spin ended before {MEASURED_FROM:?}"))?;
    let last = rows.last().expect("non-empty");
    let rate = (last[1] - first[1]) as f64 / ((last[2] - first[2]) as f64 / 1e6).max(1e-9);
    let own_ms = match (own_before, own_after) {
        (Some(b), Some(a)) => Some((a.0.saturating_sub(b.0)) as f64 / 1e6 / spun.max(1e-9)),
        _ => None,
    };
    Ok((rate, own_ms))
}

/// The processes a stack sampler watches: srvprof run is given `run_pid` (with its children:
/// nginx's master), perf records `perf_pid` (nginx's worker); the same for a single process.
#[derive(Clone, Copy)]
pub(super) struct Sampled {
    pub run_pid: u32,
    pub perf_pid: u32,
}

/// Starts `s` on `on` at HZ, pinned to WATCHER_CPU, its output under `out` (a name prefix in the
/// bench's folder), and returns once it is attached; None for Watcher::None.
pub(super) fn attach(
    s: Watcher,
    on: Sampled,
    srvprof: &Path,
    url: &str,
    out: &Path,
) -> Result<Option<Child>> {
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", WATCHER_CPU]);
    let ready = match s {
        Watcher::None => return Ok(None),
        Watcher::SrvprofRun | Watcher::SrvprofRunNoStacks => {
            cmd.arg(srvprof)
                .args(["run", "--pid", &on.run_pid.to_string(), "--url", url]);
            srvprof_run_rest(
                &mut cmd,
                s == Watcher::SrvprofRun,
                &out.with_extension("run"),
            );
            cmd.args(["--freq", &HZ.to_string()]);
            Some("probes attached")
        }
        Watcher::Perf | Watcher::PerfDwarf => {
            cmd.arg("perf");
            perf_record(
                &mut cmd,
                s == Watcher::PerfDwarf,
                HZ,
                on.perf_pid,
                &out.with_extension("perf.data"),
            );
            None
        }
        other => bail!("{} is not a stack sampler", other.name()),
    };
    start_watcher(&mut cmd, s.name(), ready).map(Some)
}
