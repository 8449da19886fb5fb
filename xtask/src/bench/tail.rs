//! The tail tables of `cargo xtask bench overhead`: what watching costs the p99, mechanism by
//! mechanism.
//! - Stalls: a thread pinned to the server's CPU sleeps 100 µs at a time and counts the wake-ups
//!   later than 0.5 ms, beside nothing and beside `srvprof probe` (pinned there too) in each mode.
//!   The kernel's clock times each sleep; a stall is anything holding that CPU unpreempted.
//! - `srvprof run` against the same load alone (`srvprof load`), in each mode. The modes alternate
//!   in each round, their order rotating, and the ratios are taken within a round: this VM drifts
//!   between a fast and a slow state for minutes, which medians of whole series would mix into
//!   the ratio.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use super::host::{CLIENT_CPU, SERVER_CPU};
use super::stats::{median, spread};

const STALL: Duration = Duration::from_micros(500);

/// Every family `--skip-probes` can leave detached but the stacks, which `run` switches off with
/// `--stacks off` and `probe` does not record.
const ALL_FAMILIES: &str = "irq,tcp,exits,reclaim,pauses";
/// The scheduler's programs alone.
const SCHED_ALONE: [&str; 4] = ["--syscalls", "off", "--skip-probes", ALL_FAMILIES];
const SCHED_ALONE_RUN: [&str; 6] = [
    "--syscalls",
    "off",
    "--skip-probes",
    ALL_FAMILIES,
    "--stacks",
    "off",
];

/// `srvprof probe`'s modes in the stall table, by their flags.
const PROBE_MODES: [(&str, &[&str]); 6] = [
    ("nothing attached", &[]),
    ("srvprof probe (sampled windows)", &[]),
    ("srvprof probe --syscalls off", &["--syscalls", "off"]),
    (
        "srvprof probe without irq programs",
        &["--skip-probes", "irq"],
    ),
    ("srvprof probe, scheduler programs alone", &SCHED_ALONE),
    ("srvprof probe --exact", &["--exact"]),
];

/// `srvprof run`'s modes against the load alone (the first row): the default, with the load
/// generator's stacks too, without stacks, with the windows at half the rate, each family left
/// out on its own, the scheduler's programs alone, then exact.
const RUN_MODES: [(&str, &[&str]); 13] = [
    ("srvprof load (the load alone)", &[]),
    ("srvprof run", &[]),
    (
        "srvprof run --stacks all (the load generator's too)",
        &["--stacks", "all"],
    ),
    ("srvprof run --stacks off", &["--stacks", "off"]),
    (
        "srvprof run --interval 2s (half the window flips and readings)",
        &["--interval", "2s"],
    ),
    (
        "srvprof run without on-CPU sampling",
        &["--skip-probes", "oncpu"],
    ),
    (
        "srvprof run without off-CPU stacks",
        &["--skip-probes", "offcpu"],
    ),
    ("srvprof run --syscalls off", &["--syscalls", "off"]),
    (
        "srvprof run, its windows' programs empty (the traced path alone)",
        &["--empty-window-programs"],
    ),
    (
        "srvprof run without irq programs",
        &["--skip-probes", "irq"],
    ),
    (
        "srvprof run without tcp, exits, reclaim",
        &["--skip-probes", "tcp,exits,reclaim"],
    ),
    ("srvprof run, scheduler programs alone", &SCHED_ALONE_RUN),
    ("srvprof run --exact", &["--exact"]),
];

pub fn table(
    srvprof: &Path,
    worker: u32,
    url: &str,
    dir: &Path,
    rounds: usize,
    seconds: u64,
) -> Result<String> {
    let mut out = format!(
        "\n## What watching costs the tail\n\n\
         **Stalls.** A thread on CPU {SERVER_CPU} (nginx's) sleeps 100 µs at a time for \
         {seconds} s and counts the wake-ups later than {STALL:?}; srvprof probe watches the idle \
         worker, pinned to CPU {SERVER_CPU} too. {rounds} round(s), the modes in turn.\n\n\
         | watcher | late wake-ups per round | median | beyond nothing |\n|---|---|---|---|\n"
    );
    let mut late: Vec<Vec<f64>> = vec![Vec::new(); PROBE_MODES.len()];
    for round in 0..rounds {
        for i in rotated(PROBE_MODES.len(), round) {
            let flags = PROBE_MODES[i].1;
            let n = if i == 0 {
                late_wakeups(seconds)
            } else {
                beside_probe(srvprof, worker, flags, seconds)?
            };
            late[i].push(n as f64);
        }
    }
    let bare = median(&late[0]).unwrap_or(0.0);
    for ((name, _), v) in PROBE_MODES.iter().zip(&late) {
        let m = median(v).unwrap_or(0.0);
        let all: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
        out.push_str(&format!(
            "| {name} | {} | {m:.0} | {:+.0} |\n",
            all.join(", "),
            m - bare
        ));
    }

    out.push_str(&format!(
        "\n**srvprof run against the load alone.** nginx 1 worker on CPU {SERVER_CPU}, \
         `-c 50 -d {seconds}s --cpus {CLIENT_CPU}`, {rounds} round(s); each mode's p50, p99, \
         p99.9 and throughput over the load alone's in the same round, the median and range of \
         those ratios. `without X`: the hidden switch `--skip-probes X` leaves that family of \
         programs detached, so each row's difference from `srvprof run` is what the family costs.\n\n\
         | mode | p50 | p99 (range) | p99.9 | req/s |\n|---|---|---|---|---|\n"
    ));
    let mut ratios: Vec<Vec<[f64; 4]>> = vec![Vec::new(); RUN_MODES.len()];
    // The default run's own work, each round: [flips/s, µs a flip, sampler ms/s, unwinder ms/s].
    let mut own: Vec<[f64; 4]> = Vec::new();
    for round in 0..rounds {
        let mut figures = vec![[f64::NAN; 4]; RUN_MODES.len()];
        for i in rotated(RUN_MODES.len(), round) {
            let flags = RUN_MODES[i].1;
            let (f, o) = load_figures(srvprof, worker, url, dir, i == 0, flags, seconds)?;
            figures[i] = f;
            if i == 1 {
                own.push(o);
            }
        }
        let b = figures[0];
        for (i, q) in figures.iter().enumerate() {
            ratios[i].push([q[0] / b[0], q[1] / b[1], q[2] / b[2], q[3] / b[3]]);
        }
    }
    for ((name, _), v) in RUN_MODES.iter().zip(&ratios).skip(1) {
        let col = |k: usize| -> Vec<f64> { v.iter().map(|r| r[k]).collect() };
        let m = |k: usize| median(&col(k)).unwrap_or(f64::NAN);
        let (lo, hi) = spread(&col(1)).unwrap_or((f64::NAN, f64::NAN));
        out.push_str(&format!(
            "| {name} | {:.2}× | {:.2}× ({lo:.2}-{hi:.2}) | {:.2}× | {:.3}× |\n",
            m(0),
            m(1),
            m(2),
            m(3)
        ));
    }
    out.push_str(&own_work_table(&own));
    Ok(out)
}

/// srvprof's own work in the default run, each mechanism by the kernel's timing (run.json's
/// observer): what the p99 rows above cannot split, as their CPU time.
fn own_work_table(own: &[[f64; 4]]) -> String {
    let col = |k: usize| -> Vec<f64> { own.iter().map(|r| r[k]).collect() };
    let m = |k: usize| median(&col(k)).unwrap_or(f64::NAN);
    let (flips, flip_us) = (m(0), m(1));
    format!(
        "\n**srvprof run's own work**, the default mode, medians of {} round(s), by the kernel's \
         timing (run.json `observer`):\n\n\
         | mechanism | rate | CPU held |\n|---|---|---|\n\
         | window attach/detach (and the accounting's switches) | {flips:.1} a second × {flip_us:.0} µs | {:.2} ms/s |\n\
         | the sampler's readings, polls and windows (srvprof-sampler) | | {:.2} ms/s |\n\
         | the unwinding thread (srvprof-unwind) | | {:.2} ms/s |\n",
        own.len(),
        flips * flip_us / 1e3,
        m(2),
        m(3)
    )
}

/// The modes' order in round `round`: rotated by one each round, so that no mode always runs
/// first (a round's first run read up to 10 % slower at p50 on this VM).
fn rotated(modes: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..modes).map(move |i| (i + round) % modes)
}

/// Late wake-ups while `srvprof probe FLAGS` watches `worker` from the server's CPU.
fn beside_probe(srvprof: &Path, worker: u32, flags: &[&str], seconds: u64) -> Result<u64> {
    let mut child = Command::new("taskset")
        .args(["-c", SERVER_CPU])
        .arg(srvprof)
        .args(["probe", "--pid", &worker.to_string()])
        .args(["-d", &format!("{}s", seconds + 3), "--format", "json"])
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting srvprof probe")?;
    super::watchers::wait_for_line(&mut child, "watching PIDs")?;
    // Past the first interval's reading of every thread, as in a long run.
    std::thread::sleep(Duration::from_millis(1200));
    let late = late_wakeups(seconds);
    let status = child.wait()?;
    if !status.success() {
        return Err(anyhow!("srvprof probe {flags:?} failed: {status}"));
    }
    Ok(late)
}

/// Late wake-ups of a thread sleeping 100 µs at a time on the server's CPU for `seconds`.
fn late_wakeups(seconds: u64) -> u64 {
    let cpu = SERVER_CPU.parse().expect("a CPU number");
    srvprof_integration::late_wakeups(cpu, STALL, Duration::from_secs(seconds))
}

/// [p50 µs, p99 µs, p99.9 µs, req/s] of `srvprof load` (alone) or `srvprof run FLAGS`, and
/// the run's own work (own_work_table; NaN alone).
fn load_figures(
    srvprof: &Path,
    worker: u32,
    url: &str,
    dir: &Path,
    alone: bool,
    flags: &[&str],
    seconds: u64,
) -> Result<([f64; 4], [f64; 4])> {
    let out = dir.join("tail-run");
    let common = ["-c", "50", "--cpus", CLIENT_CPU];
    let duration = format!("{seconds}s");
    let mut cmd = Command::new(srvprof);
    if alone {
        cmd.args(["load", url, "-d", &duration]).args(common);
        cmd.arg("--out").arg(out.with_extension("load"));
    } else {
        cmd.args(["run", "--pid", &worker.to_string(), "--url", url])
            .args(["-d", &duration, "--warmup", "0s", "--force"])
            .args(common)
            .args(flags)
            .arg("--out")
            .arg(&out);
    }
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("starting srvprof")?;
    if !status.success() {
        return Err(anyhow!("srvprof {flags:?} failed: {status}"));
    }
    let json = if alone {
        out.with_extension("load").join("load.json")
    } else {
        out.join("run.json")
    };
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    let load = if alone { &v } else { &v["load"] };
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
    let q = &load["latency_us"];
    let o = &v["observer"];
    let thread = |name: &str| {
        (o["own_threads"].as_array().into_iter().flatten())
            .find(|t| t["thread"] == name)
            .map_or(f64::NAN, |t| f(&t["cpu_ms_per_s"]))
    };
    Ok((
        [
            f(&q["p50"]),
            f(&q["p99"]),
            f(&q["p999"]),
            f(&load["throughput_rps"]),
        ],
        [
            f(&o["flips_per_s"]),
            f(&o["flip_mean_us"]),
            thread("srvprof-sampler"),
            thread("srvprof-unwind"),
        ],
    ))
}
