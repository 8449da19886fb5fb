//! What watching cost, as `srvprof run` reports it (run.json `observer`), against the kernel's
//! own counters read beside it: the scheduler's program runs once per context switch of the
//! machine (/proc/stat `ctxt`), and in the default mode the softirq programs are attached for
//! the sampled window only, so they run for about that share of the machine's softirqs
//! (/proc/softirqs), not for all of them, as they did when they stayed attached behind a flag.

use srvprof_integration::*;
use std::time::{Duration, Instant};

/// The machine's context switches and softirqs so far.
fn machine_counts() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let ctxt = stat
        .lines()
        .find_map(|l| l.strip_prefix("ctxt "))
        .and_then(|n| n.trim().parse().ok())
        .expect("ctxt in /proc/stat");
    let softirqs = std::fs::read_to_string("/proc/softirqs").expect("/proc/softirqs");
    let total = softirqs
        .lines()
        .skip(1)
        .flat_map(|l| l.split_whitespace().skip(1))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum();
    (ctxt, total)
}

fn program<'a>(run: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    run["observer"]["programs"]
        .as_array()
        .expect("observer.programs[]")
        .iter()
        .find(|p| p["program"] == name)
        .unwrap_or_else(|| panic!("no {name} in observer.programs: {}", run["observer"]))
}

#[test]
fn the_probes_cost_is_counted_per_switch_and_softirqs_only_in_the_window() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let dir = fresh_run_dir("observer");
    let mut child = RunArgs::pid(nginx.pid())
        .load(50, "5s", "1s")
        .args(&["--cpus", "0"])
        .out(&dir)
        .spawn();
    // The machine's rates in the middle of the measured window, steady load, and srvprof's
    // sampling thread's, read from outside it.
    let srvprof = child.id();
    let mut rates = None;
    follow_stderr(&mut child, |line| {
        if line.contains("probes attached") {
            // Past the 1 s warm-up, in which the sampler only waits for the load to start.
            std::thread::sleep(Duration::from_millis(2000));
            let (t0, before) = (Instant::now(), machine_counts());
            let sampler_before = thread_oncpu_ns(srvprof, "srvprof-sampler");
            std::thread::sleep(Duration::from_secs(3));
            let after = machine_counts();
            let sampler_after = thread_oncpu_ns(srvprof, "srvprof-sampler");
            let secs = t0.elapsed().as_secs_f64();
            rates = Some((
                (after.0 - before.0) as f64 / secs,
                (after.1 - before.1) as f64 / secs,
                (sampler_after - sampler_before) as f64 / 1e6 / secs,
            ));
        }
    });
    let (ctxt_per_s, softirqs_per_s, sampler_ms_per_s) =
        rates.expect("srvprof said its probes attached");
    let run = read_json(&dir.join("run.json"));
    let o = &run["observer"];
    eprintln!(
        "observer {o}\nmachine: {ctxt_per_s:.0} context switches/s, {softirqs_per_s:.0} softirqs/s"
    );
    let timed = o["timed_s"].as_f64().expect("observer.timed_s");
    assert!(
        (0.9..=1.2).contains(&timed),
        "timed {timed} s, not one interval"
    );

    let switches = program(&run, "sched_switch")["calls_per_s"]
        .as_f64()
        .unwrap();
    let ratio = switches / ctxt_per_s;
    assert!(
        (0.6..=1.5).contains(&ratio),
        "sched_switch ran {switches:.0} times a second, the machine switched {ctxt_per_s:.0} times ({ratio:.2})"
    );

    // A twentieth of the time, placed where the server is busy: under steady load about 5 % of
    // the softirqs; attached all along it would be all of them.
    let softirq = program(&run, "softirq_entry")["calls_per_s"]
        .as_f64()
        .unwrap();
    let share = softirq / softirqs_per_s;
    assert!(
        (0.02..=0.15).contains(&share),
        "softirq_entry ran for {:.1}% of the machine's softirqs ({softirq:.0}/s of {softirqs_per_s:.0}/s)",
        share * 100.0
    );

    let share_of_cpu = o["share_of_server_cpu"]
        .as_f64()
        .expect("a server CPU share");
    let per_request = o["bpf_us_per_request"]
        .as_f64()
        .expect("a cost per request");
    assert!(
        share_of_cpu > 0.0 && share_of_cpu < 0.5 && per_request > 0.0,
        "{o}"
    );
    // The flips: the window's four programs attached and detached once a second (and the
    // accounting's two switches), each holding a CPU for a measurable time.
    let flips = o["flips_per_s"].as_f64().unwrap();
    assert!((6.0..=10.0).contains(&flips), "{flips} flips a second");
    assert!(o["flip_max_us"].as_f64().unwrap() > 1.0, "{o}");

    // srvprof's own threads, by the kernel's account of each: the sampler's time on a CPU as
    // the test read it from /proc over 3 s of the window, the unwinding thread's (stacks are on
    // by default) and the load generator's pool.
    let own = |name: &str| {
        o["own_threads"]
            .as_array()
            .expect("observer.own_threads[]")
            .iter()
            .find(|t| t["thread"] == name)
            .and_then(|t| t["cpu_ms_per_s"].as_f64())
            .unwrap_or_else(|| panic!("no {name} in observer.own_threads: {o}"))
    };
    let sampler = own("srvprof-sampler");
    eprintln!("sampler {sampler:.2} ms/s in run.json, {sampler_ms_per_s:.2} ms/s read from /proc");
    assert!(
        sampler > 0.0 && (sampler / sampler_ms_per_s - 1.0).abs() <= 0.5,
        "the sampler ran {sampler:.2} ms/s by run.json, {sampler_ms_per_s:.2} ms/s by /proc"
    );
    assert!(own("srvprof-unwind") > 0.0, "{o}");
    // The load generator keeps its CPU busy.
    assert!(own("loadgen") > 300.0, "{o}");
}

/// A thread's time on a CPU so far (ns), by name: /proc/PID/task/TID/schedstat's first field.
fn thread_oncpu_ns(pid: u32, name: &str) -> u64 {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("srvprof's threads") {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let schedstat = std::fs::read_to_string(dir.join("schedstat")).unwrap();
            return schedstat
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
        }
    }
    panic!("srvprof has no thread named {name}")
}
