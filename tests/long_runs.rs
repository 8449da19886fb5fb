//! A run's memory does not grow with its length, its end does not multiply it, and the stacks
//! kept per interval lose nothing: checked against srvprof's own /proc/PID/status and against the
//! server's CPU time as the kernel's schedstat counts it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use srvprof_integration::*;

/// RSS may grow by 10 % between the first minute and the tenth: per minute, a ninetieth of it.
const MAX_GROWTH_PER_MIN: f64 = 0.10 / 9.0;
/// The peak, the end's processing included, at most this many times the running RSS.
const MAX_PEAK_RATIO: f64 = 2.0;

/// (seconds since srvprof started, VmRSS kB, VmHWM kB) readings.
type Readings = Arc<Mutex<Vec<(f64, u64, u64)>>>;

/// srvprof's memory, read every 200 ms until it exits.
fn watch_memory(pid: u32) -> (Readings, std::thread::JoinHandle<()>) {
    let readings = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::clone(&readings);
    let start = Instant::now();
    let thread = std::thread::spawn(move || {
        while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let (Some(rss), Some(hwm)) = (
                status_field(&status, "VmRSS:"),
                status_field(&status, "VmHWM:"),
            ) {
                let t = start.elapsed().as_secs_f64();
                out.lock().unwrap().push((t, rss, hwm));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    (readings, thread)
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    num / den
}

#[test]
fn memory_stays_flat_through_a_run_and_its_end_and_the_timed_stacks_lose_nothing() {
    require_root();
    let server = Server::start("nginx-hello", &["--cpus", "1"]);
    let worker = server.children(1)[0];
    let dir = fresh_run_dir("long");
    let cpu_before = proc_schedstat(worker, worker).0;
    let mut child = RunArgs::pid(server.pid())
        .load(200, "60s", "0s")
        .args(&["--cpus", "0"])
        .out(&dir)
        .spawn();
    let started = Instant::now();
    let (readings, watcher) = watch_memory(child.id());
    let (mut attached, mut end) = (None, None);
    follow_stderr(&mut child, |line| {
        if line.contains("probes attached") {
            attached = Some(started.elapsed().as_secs_f64());
        }
        if line.contains("reading stacks") {
            end = Some(started.elapsed().as_secs_f64());
        }
    });
    let cpu_s = (proc_schedstat(worker, worker).0 - cpu_before) as f64 / 1e9;
    watcher.join().unwrap();
    let readings = readings.lock().unwrap().clone();
    let (attached, end) = (attached.expect("probes attached"), end.expect("an end"));

    // The second half of the load: RSS grows by no more than a ninetieth a minute.
    let half = attached + (end - attached) / 2.0;
    let running: Vec<(f64, f64)> = (readings.iter())
        .filter(|(t, ..)| *t >= half && *t < end)
        .map(|&(t, rss, _)| (t / 60.0, rss as f64))
        .collect();
    assert!(running.len() >= 50, "{} readings", running.len());
    let at_half = running[0].1;
    let per_min = slope(&running);
    let bound = MAX_GROWTH_PER_MIN * at_half;
    eprintln!(
        "RSS {:.1} MB at {half:.0} s, growing {:.2} MB a minute (bound {:.2})",
        at_half / 1024.0,
        per_min / 1024.0,
        bound / 1024.0
    );
    assert!(
        per_min <= bound,
        "{per_min:.0} kB a minute, over {bound:.0}"
    );

    // The end's processing (stacks named, files and report written) stays within twice the
    // running RSS.
    let running_max = (readings.iter())
        .filter(|(t, ..)| *t < end)
        .map(|r| r.1)
        .max()
        .unwrap();
    let peak = readings.iter().map(|r| r.2).max().unwrap();
    eprintln!(
        "peak {:.1} MB, {:.2}x the running {:.1} MB",
        peak as f64 / 1024.0,
        peak as f64 / running_max as f64,
        running_max as f64 / 1024.0
    );
    assert!(peak as f64 <= MAX_PEAK_RATIO * running_max as f64);

    // Nothing lost: run.json's count is the stacks' total, every stack's intervals add up to at
    // most its total and together to nearly all of it (samples the ring had no room for have
    // no time), the samples are the worker's time on its CPU at 99 Hz (switch-in to switch-out),
    // and that with what the scheduler charged before the switch-ins is its CPU time by the
    // kernel's count (schedstat).
    let run = read_json(&dir.join("run.json"));
    assert_run_json_matches_its_schema(&run);
    let whole = folded(&dir, "oncpu-server.folded");
    let total: u64 = whole.iter().map(|(_, v)| v).sum();
    let weight = run["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["group"] == "server" && q["kind"] == "oncpu")
        .unwrap()["weight"]
        .as_u64()
        .unwrap();
    assert_eq!(weight, total);
    let timed = timed(&dir, "oncpu-server");
    let mut per_stack = std::collections::HashMap::<&[String], u64>::new();
    for (_, frames, v) in &timed {
        *per_stack.entry(frames.as_slice()).or_default() += v;
    }
    for (frames, v) in &whole {
        let t = per_stack.get(frames.as_slice()).copied().unwrap_or(0);
        assert!(t <= *v, "{frames:?}: {t} timed of {v}");
    }
    let timed_total: u64 = per_stack.values().sum();
    assert!(
        timed_total as f64 >= 0.95 * total as f64,
        "{timed_total} of {total} timed"
    );
    let intervals: std::collections::BTreeSet<i64> = timed.iter().map(|r| r.0).collect();
    assert!(intervals.len() >= 55, "{} intervals", intervals.len());
    let q = (run["stacks"].as_array().unwrap().iter())
        .find(|q| q["group"] == "server" && q["kind"] == "oncpu")
        .unwrap();
    let (in_span, expected, precharged) = (
        q["measured_samples"].as_u64().unwrap() as f64,
        q["expected_samples"].as_f64().unwrap(),
        q["precharged_samples"].as_f64().unwrap(),
    );
    let ratio = in_span / expected;
    let charged = (expected + precharged) / (99.0 * cpu_s);
    eprintln!(
        "{total} samples, {in_span} in the span of the {expected:.0} the worker's time on its CPU calls for ({ratio:.3}); with the {precharged:.0} charged before switch-ins, {charged:.3} of 99 Hz x {cpu_s:.1} s of CPU by schedstat"
    );
    // Ticks on a fixed grid over a thread busy ~40 % of a minute have a binomial spread of ~1.6 %,
    // but a per-CPU grid reads short of an event loop switching 20,000 times a second on this
    // kind of machine, perf's as srvprof's: perf record -a read 0.84 of the worker's switch-to-
    // switch time where srvprof read 0.90 in the same seconds, while perf's per-thread sampler
    // reads all of it (tests/sample_count.rs): the ticks' due times fall in its runs less often
    // than its share of the time (docs/how-it-measures.md). Until that is settled, the bound is
    // perf -a's less its spread.
    assert!((0.78..=1.05).contains(&ratio), "{ratio}: {q}");
    assert!((0.95..=1.03).contains(&charged), "{charged}: {q}");
}
